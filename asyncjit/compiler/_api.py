"""``compile``: the device-independent entry point from tensors to a ``CpuExecutable``."""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial
from typing import Any

from .._log import get_logger
from ..errors import ArgumentTypeError, CompileError, DonateIndexError, InputBufferNotFoundError
from ..graph import as_node, structural_key, toposort
from ..passes import Graph, channels_last_enabled
from ..passes._refine import canonical_sizes
from ..symbolic import Var, upper
from ._cache import (
    count_memory_hit,
    get_code,
    get_code_by_key,
    lookup_plan,
    plan_hash,
    record_plan,
    using_cache_dir,
)
from ._cost import kernel_infos
from ._cpu import CpuExecutable
from ._dispatch import BufferRef, DispatchCall, Payload
from ._lower import Lowered, lower
from ._partition import CompilerPlugin, plugin_identity, plugin_options, registered_plugins

__all__ = ["as_node", "compile"]

log = get_logger("asyncjit.compiler")

_PLANS: collections.OrderedDict[Hashable, CpuExecutable] = collections.OrderedDict()
_PLANS_MAX = 256
_LOCK = threading.Lock()


def _plan_key(
    graph: Graph,
    name: str,
    fixed: Mapping[str, int] | None,
    plugins: Sequence[CompilerPlugin],
    donate: tuple[int, ...] = (),
) -> tuple[Hashable, ...]:
    """An exact, shallow key: each node's structural key over interned input keys."""
    interned: dict[Hashable, int] = {}
    ids: dict[int, int] = {}
    position = {n.id: i for i, n in enumerate(graph.inputs)}
    for n in graph.nodes:
        if n.op == "placeholder":
            key: Hashable = ("placeholder", position[n.id], n.dtype, n.shape, n.attrs["name"])
        else:
            key = structural_key(n, (ids[i.id] for i in n.inputs))
        ids[n.id] = interned.setdefault(key, len(interned))
    chosen = tuple(plugin_identity(p) for p in plugins)
    fixed_key = tuple(sorted((fixed or {}).items()))
    key = (name, tuple(interned), tuple(ids[o.id] for o in graph.outputs), graph.vars, fixed_key, chosen)
    return (*key, ("donate", donate)) if donate else key


def _dispatch_program(
    lowered: Lowered,
) -> tuple[list[tuple[int, int]], list[DispatchCall], list[Payload], dict[str, CompilerPlugin]]:
    """The CPU segments, dispatch calls and payloads of a lowered plan with dispatched partitions."""
    from ..codegen._module import cpu_segments

    if not lowered.dispatched:
        return [], [], [], {}
    entry_of: dict[int, tuple[int, str]] = {}
    payloads = []
    plugins: dict[str, CompilerPlugin] = {}
    for p, d in enumerate(lowered.dispatched):
        payloads.append(
            Payload(
                d.plugin.name,
                plugin_identity(d.plugin),
                d.result.bytecode,
                d.result.entries,
                plugin_options(d.plugin),
            )
        )
        plugins[d.plugin.name] = d.plugin
        for part, entry in zip(d.partitions, d.result.entries, strict=True):
            entry_of[part] = (p, entry)
    slots = lowered.memory.slots

    def ref(node_id: int, shape: Any, dtype: Any) -> BufferRef:
        s = slots[node_id]
        if s.kind == "dyn":  # partitioning keeps per-run sizes on the CPU compiler
            raise CompileError(f"a plugin partition's buffer is sized per run (node {node_id})")
        return BufferRef(s.kind, s.index, s.offset, tuple(shape), dtype)

    calls = []
    for k, kern in enumerate(lowered.fusion.kernels):
        if kern.kind == "plugin" and kern.partition in entry_of:
            payload, entry = entry_of[kern.partition]
            calls.append(
                DispatchCall(
                    k,
                    payload,
                    entry,
                    tuple(ref(n.id, n.shape, n.dtype) for n in kern.reads),
                    tuple(ref(n.id, n.shape, n.dtype) for n in kern.outputs),
                )
            )
    return cpu_segments(lowered.fusion, lowered.linked), calls, payloads, plugins


def resolve_plugins(plugins: Sequence[CompilerPlugin | str] | None) -> tuple[CompilerPlugin, ...]:
    """Plugin objects for a compile: names are looked up among installed plugins.

    Raises:
        CompileError: a name no installed plugin has.
    """
    if plugins is None:
        return registered_plugins()
    if isinstance(plugins, str):
        plugins = [plugins]
    out = []
    for p in plugins:
        if isinstance(p, str):
            from ..plugins import get_plugin

            out.append(get_plugin(p))
        else:
            out.append(p)
    return tuple(out)


def _flops(lowered: Lowered) -> int:
    total = 0
    for k in lowered.fusion.kernels:
        n = k.node
        numel = 1
        for d in n.shape:
            numel *= max(upper(d), 0)
        if k.kind == "matmul":
            total += 2 * numel * max(upper(n.inputs[0].shape[-1]), 0)
        elif k.kind == "conv1d":
            w = n.inputs[1]
            total += 2 * numel * int(w.shape[1]) * int(w.shape[2])
        elif k.kind == "conv":
            w = k.op_node.inputs[1]
            per = 1
            for d in w.shape[1:]:
                per *= int(d)
            total += 2 * numel * per
        else:
            total += numel * (1 + len(k.fused))
    return total


def compile(
    outputs: Sequence[Any] | Any,
    inputs: Sequence[Any],
    vars: Sequence[Var] | None = None,
    *,
    name: str | None = None,
    fixed: Mapping[str, int] | None = None,
    plugins: Sequence[CompilerPlugin | str] | None = None,
    opt_level: int = 3,
    cache_dir: str | os.PathLike[str] | None = None,
    donate: Sequence[int] = (),
) -> CpuExecutable:
    """Compile ``outputs`` as functions of the placeholders ``inputs`` into one native plan.

    Args:
        outputs: ``Tensor``/``Node`` or a sequence of them.
        inputs: the placeholders, in the order ``run``/launchers take them.
        vars: the plan's vars in the order var values travel (default: every var used, by name).
        name: a label for logs and ``repr`` (does not change the code).
        fixed: vars to specialise to one value (``refine``); ``run`` still accepts them if equal.
        plugins: compiler plugins for this compile, in order of preference (objects, or names of
            installed plugins); ``None`` means those registered with ``register_plugin``.
        opt_level: LLVM optimisation level, 0-3 (part of every cache key).
        cache_dir: the on-disk compile cache for this compile (``"off"``: none); None: the
            default (``ASYNCJIT_CACHE_DIR`` or the user cache directory).
        donate: indices of inputs whose memory an output may take (JAX's ``donate_argnums``):
            each is paired with an output of its shape and dtype written after its last read
            (``Signature.aliases``), so an execution that donates that input writes the output
            in place, without allocating or copying. Callers that do not donate still get
            correct results (the input is copied into the output first).

    Raises:
        ArgumentTypeError: ``outputs`` or ``inputs`` are not tensors / a sequence of placeholders.
        InputBufferNotFoundError: an output needs a placeholder not listed in ``inputs``.
        CompileError: lowering failed, or ``opt_level`` is not 0-3; VarBoundsError: a bad
            ``fixed`` value.
        DonateIndexError: ``donate`` names no input; DonationError: a donated input no output
            can be written over (the message says why).
    """
    if isinstance(opt_level, bool) or not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise CompileError(f"opt_level must be an int from 0 to 3, got {opt_level!r}")
    n_inputs = len(inputs) if isinstance(inputs, Sequence) else 0
    donated = _donate_indices(donate, n_inputs)
    with using_cache_dir(cache_dir):
        return _compile(outputs, inputs, vars, name, fixed, plugins, opt_level, donated)


def _donate_indices(donate: Sequence[int], n: int) -> tuple[int, ...]:
    """Raises: DonateIndexError: not a sequence of distinct input indices."""
    try:
        idx = tuple(donate)
    except TypeError:
        raise DonateIndexError(f"donate takes a sequence of input indices, got {donate!r}") from None
    for i in idx:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise DonateIndexError(f"donate index {i!r} is not an input index (0..{n - 1})")
    if len(set(idx)) != len(idx):
        raise DonateIndexError(f"donate lists an input twice: {list(idx)}")
    return tuple(sorted(idx))


def _compile(
    outputs: Sequence[Any] | Any,
    inputs: Sequence[Any],
    vars: Sequence[Var] | None,
    name: str | None,
    fixed: Mapping[str, int] | None,
    plugins: Sequence[CompilerPlugin | str] | None,
    opt_level: int,
    donate: tuple[int, ...] = (),
) -> CpuExecutable:
    outs = [as_node(o) for o in (outputs if isinstance(outputs, Sequence) else [outputs])]
    if not isinstance(inputs, Sequence) or hasattr(inputs, "node"):
        raise ArgumentTypeError(f"inputs must be a sequence of placeholders, got {type(inputs).__name__}")
    ins = [as_node(i) for i in inputs]
    for i in ins:
        if i.op != "placeholder":
            raise CompileError(f"inputs must be placeholders, got {i!r}")
    if len({i.id for i in ins}) != len(ins):
        names = [i.attrs["name"] for i in ins]
        raise CompileError(f"a placeholder is listed twice in inputs {names}; list each once")
    listed = {i.id for i in ins}
    missing = [n.attrs["name"] for n in toposort(outs) if n.op == "placeholder" and n.id not in listed]
    if missing:
        raise InputBufferNotFoundError(f"outputs depend on placeholders not listed in inputs: {missing}")
    graph = canonical_sizes(Graph.of(outs, ins, vars))  # stable names: stable cache keys
    label = name or "plan"
    chosen = resolve_plugins(plugins)
    regions = channels_last_enabled()  # read once: the plan is built as it is keyed
    key = (*_plan_key(graph, label, fixed, chosen, donate), opt_level, ("channels_last", regions))
    # in memory, a plan is reused only with the very plugin objects it was compiled with: its
    # dispatch calls run through them (their identity alone keys the plan index on disk)
    memory_key = (key, tuple(id(p) for p in chosen))
    with _LOCK:
        hit = _PLANS.get(memory_key)
        if hit is not None:
            _PLANS.move_to_end(memory_key)
    if hit is not None:
        count_memory_hit()
        return hit
    t0 = time.perf_counter()
    lowered = lower(graph, label, fixed, chosen, donate, regions)
    ir_text: str | Callable[[], str] = lowered.emit_ir
    found = None
    phash = None
    if not lowered.claims:  # plugin kernels are opaque to the plan index: always emit their IR
        phash = plan_hash(repr(key[1:]))
        recorded = lookup_plan(phash)
        found = get_code_by_key(recorded, label) if recorded is not None else None
    if found is not None and recorded is not None:
        code_key, (obj, loaded) = recorded, found
    else:
        ir_text = lowered.emit_ir()
        code_key, obj, loaded = get_code(ir_text, label, opt_level)
        if phash is not None:
            record_plan(phash, code_key)
    segments, calls, payloads, by_name = _dispatch_program(lowered)
    exe = CpuExecutable(
        name=label,
        signature=lowered.signature,
        layout=lowered.layout,
        consts=[c.attrs["value"] for c in lowered.consts],
        arena_bytes=lowered.memory.arena_bytes,
        dyn_bytes=lowered.memory.dyn_bytes,
        kernel_names=lowered.kernel_names,
        ir_text=ir_text,
        code_key=code_key,
        object_code=obj,
        loaded=loaded,
        fixed=lowered.fixed,
        flops=_flops(lowered),
        kernels=partial(kernel_infos, lowered.fusion),
        segments=segments,
        dispatch=calls,
        payloads=payloads,
        plugins=by_name,
    )
    log.info(
        "plan_compiled",
        plan=label,
        kernels=len(lowered.kernel_names),
        seconds=round(time.perf_counter() - t0, 4),
        arena_bytes=lowered.memory.arena_bytes,
    )
    with _LOCK:
        _PLANS[memory_key] = exe
        while len(_PLANS) > _PLANS_MAX:
            _PLANS.popitem(last=False)
    return exe
