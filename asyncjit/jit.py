"""``asyncjit.jit``: trace a function once per cache key, compile it, and replay it.

The cache key is exact (DESIGN invariant 9):

* static arguments (``static_argnums``/``static_argnames``) and pytree aux data key by
  ``(type, value)`` — ``1`` and ``1.0`` are different keys, and an unhashable static value raises
  ``StaticArgumentError`` instead of keying by identity;
* dynamic leaves key by ``(shape, dtype, device)`` — never by value;
* dims declared in ``dynamic`` key by their ``Var``: one compiled plan serves every size within
  the var's bounds (no recompile, no padding of the work).

Closures do not enter the key: a lambda that captures a pytree argument inside the traced
function changes nothing. Values a function reads from *outside* (globals, closed-over arrays)
are baked into the plan as constants when it is traced, as in JAX.

Calls return ``Buffer``s at once (``f(x)``), or ready buffers from ``await f.aio(x)``.
Every cache miss logs a structlog ``jit.cache_miss`` event naming what differed from the nearest
cached key.

The call path is built for per-step replay (a recurrent cell called every few tens of
microseconds):

* **fast key check**: the last call's signature (structure, static keys, per leaf type, dtype,
  shape, device) is compared directly against the next call's arguments; only a difference
  builds the full ``CacheKey`` (same answer, since the key is a function of those);
* **inputs are copied, never aliased**: a host array is copied into a device buffer, so it may
  be refilled as soon as the call returns (as in JAX), even if the call was queued. Each
  fixed-shape input keeps a staging buffer that synchronous calls refill in place when no
  submitted command still reads it; ``device_put`` places weights once;
* **inline by default**: a synchronous call runs the plan on the calling thread when the device
  is idle (``jit(..., inline=None)`` follows the device's policy instead).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from . import dtypes as dt
from ._log import get_logger
from .dtypes import DType
from .errors import (
    ArgumentCountError,
    ArgumentTypeError,
    DTypeMismatchError,
    InvalidArgumentError,
    ShapeMismatchError,
    StaticArgumentError,
    VarBoundsError,
    WouldBlock,
)
from .graph import as_node, toposort
from .runtime import Buffer
from .symbolic import Dim, Var
from .tensor import Tensor
from .tree import (
    TreeDef,
    flatten_like,
    registry_size,
    static_key,
    str_keyed,
    tree_flatten,
    tree_paths,
    tree_unflatten,
)

__all__ = ["Compiled", "Jitted", "Lowered", "device_put", "jit"]

_log = get_logger("asyncjit.jit")

DynamicSpec = Mapping[str, Mapping[int, tuple[str, int, int] | Var]]


@attrs.frozen
class LeafSpec:
    """The cache key of one dynamic leaf: shape (ints, or vars for declared dims), dtype, device."""

    shape: tuple[Dim, ...]
    dtype: DType
    device: Hashable


@attrs.frozen
class CacheKey:
    """Everything a traced plan depends on."""

    treedef: TreeDef
    statics: tuple[tuple[str, Hashable], ...]
    leaves: tuple[LeafSpec, ...]


@attrs.define(eq=False)
class _Entry:
    loaded: Any  # runtime.LoadedExecutable
    out_def: TreeDef
    var_slots: tuple[tuple[str, int, int], ...]  # (var name, leaf index, axis)
    dtypes: tuple[DType, ...]  # of the input leaves, in order
    fixed: tuple[bool, ...]  # per input leaf: no dynamic dims (a staging buffer can serve it)
    owner: int  # the thread whose synchronous calls use the staging buffers
    unflatten: Callable[[list[Any]], Any] = attrs.field(init=False)
    staging: list[tuple[Any, np.ndarray] | None] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.unflatten = _unflattener(self.out_def)
        self.staging = [None] * len(self.dtypes)

    def to_device(self, hosts: list[Any], reuse: bool) -> list[Any]:
        """Buffers for the leaves: Buffers pass through, host arrays are copied to the device.

        A copy (``IMMUTABLE_ONLY_DURING_CALL`` semantics), not ``IMMUTABLE_ZERO_COPY``: a queued
        call reads its inputs after ``__call__`` returns, and JAX users expect to refill an
        input array at once (aliasing would make that a data race); zero-copy also needs
        64-byte aligned arrays, which numpy rarely hands out for small arrays, so it would copy
        anyway. For inputs of a few KiB the memcpy is nothing; the cost is the bookkeeping of a
        new buffer per input per call. So with ``reuse`` (synchronous calls from the thread that
        made the entry) each fixed-shape input keeps a *staging* buffer that is refilled in
        place when no submitted command uses it any more (``JitWrapper``'s pattern, applied
        by the jit); while one does (a queued call still in flight), a new buffer is made.
        """
        device = self.loaded.devices()[0]
        out: list[Any] = []
        staging = self.staging
        for i, h in enumerate(hosts):
            if type(h) is Buffer:
                out.append(h)
                continue
            if reuse and self.fixed[i]:
                slot = staging[i]
                # ``_uses`` counts submitted commands that read the buffer; only this thread
                # submits with staging buffers, so 0 stays 0 until this call executes.
                if slot is not None and slot[0]._uses == 0:
                    slot[1][...] = h
                    out.append(slot[0])
                    continue
                buf = device.client.buffer_from_host(_contiguous(h), device=device)
                if slot is None and buf.dtype is self.dtypes[i]:
                    staging[i] = (buf, buf.numpy_view(writable=True))
                out.append(buf)
                continue
            out.append(device.client.buffer_from_host(_contiguous(h), device=device))
        return out


# How one leaf of the last call looked, for the fast path: (kind, dtype, shape, device id,
# has var dims, float64 to convert). kind 0: a numpy array with this numpy dtype; kind 1: a Buffer
# with this DType on this device id. ``shape`` holds ints, and Vars for declared dynamic dims
# (checked against their bounds when "has var dims" is set).
_LeafSig = tuple[int, Any, tuple[Dim, ...], Any, bool, bool]


@attrs.define(eq=False)
class _Fast:
    """The last call's signature: a call whose arguments match it exactly has the same key.

    The key is a pure function of (argument structure, static keys, and per leaf: type, numpy
    dtype or ``DType``, shape, device), so comparing those directly against the last call gives
    the same answer as building the key and hashing it, without building it (DESIGN
    invariant 9 holds: any difference falls back to the full key).
    """

    treedef: TreeDef
    statics: tuple[tuple[str, Hashable], ...]
    sigs: tuple[_LeafSig, ...]
    entry: _Entry
    flat_names: tuple[str, ...] | None  # the argument names when every argument is one leaf
    registry: int  # ``tree.registry_size()`` then: a registration since may turn leaves into nodes


def _unflattener(out_def: TreeDef) -> Callable[[list[Any]], Any]:
    """A cheap rebuild of the outputs for the common shapes (one leaf, a tuple of leaves)."""
    if out_def.kind == "leaf":
        return lambda outs: outs[0]
    if out_def.kind is tuple and all(c.kind == "leaf" for c in out_def.children):
        return tuple
    return functools.partial(tree_unflatten, out_def)


def _leaf_info(value: Any, path: str) -> tuple[tuple[int, ...], DType, Hashable, Any]:
    """(shape, dtype, device key, host array or buffer) of a dynamic leaf."""

    if isinstance(value, Buffer):
        return tuple(value.shape), value.dtype, ("device", value.device.id), value
    if isinstance(value, Tensor):
        raise ArgumentTypeError(f"argument {path} is a Tensor; jit arguments are arrays or Buffers")
    if isinstance(value, bool | np.bool_):
        return (), dt.bool_, "host", np.array(value, dtype=np.bool_)
    if isinstance(value, int | np.integer) and not isinstance(value, np.ndarray):
        if not -(2**31) <= int(value) < 2**31:
            raise DTypeMismatchError(f"argument {path}: Python int {value} does not fit int32")
        return (), dt.int32, "host", np.array(value, dtype=np.int32)
    if isinstance(value, float | np.floating):
        return (), dt.float32, "host", np.array(value, dtype=np.float32)
    if isinstance(value, np.ndarray | list | tuple):
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)  # as JAX does without x64: float64 data becomes float32
        try:
            dtype = dt.from_numpy(arr.dtype)
        except TypeError as exc:
            raise DTypeMismatchError(f"argument {path}: {exc}") from None
        return arr.shape, dtype, "host", arr
    raise ArgumentTypeError(
        f"argument {path} is a {type(value).__qualname__}, which cannot be a dynamic leaf; "
        "mark it static (static_argnames=...) or register its type as a pytree node"
    )


def _contiguous(arr: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into a 1-d one
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr).reshape(arr.shape)


def _fast_record(key: CacheKey, given: list[Any], entry: _Entry) -> _Fast | None:
    """The fast-path signature of a call that produced ``key`` from leaves ``given``, if any."""

    if not str_keyed(key.treedef):
        return None
    sigs: list[_LeafSig] = []
    for leaf, spec in zip(given, key.leaves, strict=True):
        var_dims = any(isinstance(d, Var) for d in spec.shape)
        if type(leaf) is np.ndarray:
            sigs.append((0, leaf.dtype, spec.shape, None, var_dims, leaf.dtype == np.float64))
        elif type(leaf) is Buffer:
            sigs.append((1, leaf.dtype, spec.shape, leaf.device.id, var_dims, False))
        else:
            return None  # Python scalars, lists: the full path each call
    td = key.treedef
    flat = td.kind is dict and all(c.kind == "leaf" for c in td.children)
    return _Fast(td, key.statics, tuple(sigs), entry, tuple(td.aux) if flat else None, registry_size())


class Jitted:
    """A function compiled per cache key. Create with ``asyncjit.jit``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (),
        dynamic: DynamicSpec | None = None,
        device: Any = None,
        name: str | None = None,
        inline: bool | None = True,
        in_shardings: Any = None,
        out_shardings: Any = None,
    ) -> None:
        self.fn = fn
        self.inline = inline
        self.name = name or getattr(fn, "__qualname__", "jitted")
        self._sig = inspect.signature(fn)
        params = list(self._sig.parameters.values())
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        static = set(names)
        for i in nums:
            if not -len(params) <= i < len(params):
                raise InvalidArgumentError(f"static_argnums {i} is out of range for {self.name}{self._sig}")
            static.add(params[i].name)
        unknown = static - {p.name for p in params}
        if unknown:
            raise InvalidArgumentError(f"static_argnames {sorted(unknown)} are not parameters of {self.name}")
        self._static = frozenset(static)
        plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        # positional calls of a function without *args/**kwargs bind by index, not inspect.bind
        self._plain = all(p.kind in plain for p in params)
        self._names = tuple(p.name for p in params)
        self._fast: _Fast | None = None
        self._dynamic: dict[str, dict[int, Var]] = {}
        for arg, dims in (dynamic or {}).items():
            if arg not in self._sig.parameters:
                raise InvalidArgumentError(f"dynamic names {arg!r}, which is not a parameter of {self.name}")
            if arg in self._static:
                raise InvalidArgumentError(f"argument {arg!r} cannot be both static and dynamic")
            self._dynamic[arg] = {int(axis): v if isinstance(v, Var) else Var(*v) for axis, v in dims.items()}
        self._device_arg = device
        self._cache: dict[CacheKey, _Entry] = {}
        self.compiles = 0
        self._sharded = None
        if in_shardings is not None or out_shardings is not None:
            from ._sharded_jit import ShardedCalls

            if self._dynamic:
                raise InvalidArgumentError(
                    f"{self.name}: dynamic dims and shardings cannot be combined (the shard length "
                    "is the plan's symbolic dim)"
                )
            self._sharded = ShardedCalls(self, in_shardings, out_shardings)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<jit {self.name} cache_size={len(self._cache)}>"

    # -- cache ---------------------------------------------------------------------------------
    def cache_size(self) -> int:
        """Number of compiled plans held (one per distinct cache key)."""
        return len(self._cache) + (self._sharded.cache_size() if self._sharded is not None else 0)

    def cache_clear(self) -> None:
        """Drop every compiled plan; the next call traces and compiles again."""
        self._cache.clear()
        self._fast = None
        if self._sharded is not None:
            self._sharded.cache_clear()

    # -- calling -------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run and return the outputs as ``Buffer``s (awaitable).

        With ``inline=True`` (the default) the plan runs on the calling thread when the device
        is idle, so the buffers come back ready; when the device is busy the call is queued and
        the buffers come back pending. From synchronous code this blocks only when the device
        has too many commands in flight. With shardings the outputs are ``ShardedBuffer``s.
        """
        if self._sharded is not None:
            return self._sharded.call(args, kwargs)
        entry, bufs, values = self._prepare_call(args, kwargs, sync=True)
        try:
            outs = entry.loaded.execute_nowait(bufs, values, inline=self.inline)
        except WouldBlock:
            outs = entry.loaded.execute_blocking(bufs, values, inline=self.inline)
        return entry.unflatten(outs)

    async def aio(self, *args: Any, **kwargs: Any) -> Any:
        """Run from an event loop and return the outputs once they are ready (never blocks).

        Follows the device's inline policy (cheap plans run on the loop's thread, others on
        the device thread), whatever ``inline`` was given to ``jit``.
        """
        if self._sharded is not None:
            return await self._sharded.call_async(args, kwargs)
        entry, bufs, values = self._prepare_call(args, kwargs)
        outs = await entry.loaded.execute(bufs, values)
        for b in outs:
            await b.ready()
        return entry.unflatten(outs)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Trace for these arguments without compiling, as ``jax.jit(f).lower(x)``:
        ``.as_text()`` shows the graph, ``.compile()`` compiles it (into this function's cache)."""
        key, _, statics = self._key(args, kwargs)
        inputs, outputs, _ = self._trace(key, statics)
        return Lowered(self, key, statics, inputs, outputs)

    # -- machinery -----------------------------------------------------------------------------
    def _device(self) -> Any:
        from .runtime import Device, default_client

        dev = self._device_arg
        if isinstance(dev, Device):
            return dev
        client = default_client()
        return client.device(0 if dev is None else dev)  # an index; a typed error otherwise

    def _split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentCountError(f"{self.name}: {exc}") from None
        bound.apply_defaults()
        dyn: list[tuple[str, Any]] = []
        statics: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if name in self._static:
                statics[name] = value
            else:
                dyn.append((name, value))
        return dyn, statics

    def _key(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[CacheKey, list[Any], dict[str, Any]]:
        dyn, statics = self._split(args, kwargs)
        key, hosts, _ = self._key_from(dict(dyn), statics)
        return key, hosts, statics

    def _key_from(
        self, dyn: dict[str, Any], statics: dict[str, Any]
    ) -> tuple[CacheKey, list[Any], list[Any]]:
        """(the cache key, the leaves as host arrays or Buffers, the leaves as given)."""
        try:
            static_keys = tuple((n, static_key(v)) for n, v in sorted(statics.items()))
        except StaticArgumentError as exc:
            raise StaticArgumentError(f"{self.name}: {exc}") from None
        leaves, treedef = tree_flatten(dyn)
        paths = tree_paths(treedef)
        specs: list[LeafSpec] = []
        hosts: list[Any] = []
        for path, leaf in zip(paths, leaves, strict=True):
            shape, dtype, device, host = _leaf_info(leaf, path)
            arg = path[2 : path.index("']")] if path.startswith("['") else path
            dims = self._dynamic.get(arg)
            sym: tuple[Dim, ...] = shape
            if dims:
                if f"[{arg!r}]" != path:
                    raise ArgumentTypeError(
                        f"dynamic dims of {arg!r} need it to be a single array, not a pytree"
                    )
                sym = self._symbolic_shape(arg, shape, dims)
            specs.append(LeafSpec(sym, dtype, device))
            hosts.append(host)
        return CacheKey(treedef, static_keys, tuple(specs)), hosts, leaves

    def _symbolic_shape(self, arg: str, shape: tuple[int, ...], dims: Mapping[int, Var]) -> tuple[Dim, ...]:
        out: list[Dim] = list(shape)
        for axis, var in dims.items():
            if not -len(shape) <= axis < len(shape):
                raise ShapeMismatchError(
                    f"{self.name}: dynamic axis {axis} of {arg!r} but it has shape {shape}"
                )
            size = shape[axis]
            if not var.min <= size <= var.max:
                raise VarBoundsError(
                    f"{self.name}: argument {arg!r} dim {axis} = {size} is outside the bounds "
                    f"[{var.min}, {var.max}] declared for var {var.name!r}"
                )
            out[axis] = var
        return tuple(out)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(dynamic arguments by name, static arguments by name)."""
        if not kwargs and self._plain and len(args) == len(self._names):
            if not self._static:
                return dict(zip(self._names, args)), {}  # noqa: B905 - length checked
            dyn: dict[str, Any] = {}
            statics: dict[str, Any] = {}
            for n, v in zip(self._names, args):  # noqa: B905 - length checked
                if n in self._static:
                    statics[n] = v
                else:
                    dyn[n] = v
            return dyn, statics
        pairs, statics = self._split(args, kwargs)
        return dict(pairs), statics

    def _prepare_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], sync: bool = False
    ) -> tuple[_Entry, list[Any], dict[str, int]]:
        """(the entry, input buffers, var values); ``sync`` for calls that execute right away."""
        dyn, statics = self._bind(args, kwargs)
        fast = self._fast
        hosts = self._match(fast, dyn, statics) if fast is not None else None
        if hosts is not None:
            assert fast is not None
            entry = fast.entry
        else:
            key, hosts, given = self._key_from(dyn, statics)
            cached = self._cache.get(key)
            if cached is None:
                self._log_miss(key)
                cached = self._cache[key] = self._compile(key, statics)
            entry = cached
            self._fast = _fast_record(key, given, entry)
        values: dict[str, int] = {}
        for var, leaf, axis in entry.var_slots:
            size = hosts[leaf].shape[axis]
            if values.setdefault(var, size) != size:
                raise ShapeMismatchError(
                    f"{self.name}: var {var!r} is {values[var]} from one argument and {size} from another"
                )
        return entry, entry.to_device(hosts, sync and threading.get_ident() == entry.owner), values

    def _match(self, fast: _Fast, dyn: dict[str, Any], statics: dict[str, Any]) -> list[Any] | None:
        """The leaves (as host arrays or Buffers) if this call has ``fast``'s key, else None."""
        if statics or fast.statics:
            try:
                keys = tuple((n, static_key(v)) for n, v in sorted(statics.items()))
            except StaticArgumentError:
                return None  # the full path raises with the message
            if keys != fast.statics:
                return None
        names = fast.flat_names
        if names is not None and fast.registry == registry_size():
            # every argument was a single leaf: the argument names are fixed per function, and
            # the loop below admits only arrays and Buffers, which were leaves then and still are
            leaves = [dyn[n] for n in names]
        else:
            leaves = []
            if not flatten_like(fast.treedef, dyn, leaves):
                return None
        for i, (kind, dtype, shape, dev, var_dims, to_f32) in enumerate(fast.sigs):
            leaf = leaves[i]
            cls = type(leaf)
            if cls is np.ndarray:
                if kind != 0 or (leaf.dtype is not dtype and leaf.dtype != dtype):
                    return None
                if to_f32:
                    leaves[i] = leaf.astype(np.float32)
            elif cls is Buffer:
                if kind != 1 or leaf.dtype is not dtype or leaf.memory_space.device.id != dev:
                    return None
            else:
                return None
            got = leaf.shape
            if var_dims:
                if len(got) != len(shape):
                    return None
                for n, d in zip(got, shape):  # noqa: B905 - length checked
                    if isinstance(d, Var):
                        if not d.min <= n <= d.max:
                            return None
                    elif n != d:
                        return None
            elif got != shape:
                return None
        return leaves

    def _trace(self, key: CacheKey, statics: dict[str, Any]) -> tuple[list[Tensor], list[Tensor], TreeDef]:
        paths = tree_paths(key.treedef)
        placeholders = [
            Tensor.placeholder(spec.shape, spec.dtype, name=path)
            for path, spec in zip(paths, key.leaves, strict=True)
        ]
        dyn = tree_unflatten(key.treedef, placeholders)
        merged = {**dyn, **statics}
        ordered = {n: merged[n] for n in self._sig.parameters if n in merged}
        bound = inspect.BoundArguments(self._sig, ordered)  # type: ignore[arg-type, unused-ignore]
        result = self.fn(*bound.args, **bound.kwargs)
        out_leaves, out_def = tree_flatten(result)
        for leaf in out_leaves:
            if not isinstance(leaf, Tensor | np.ndarray | int | float | np.generic):
                raise ArgumentTypeError(
                    f"{self.name} returned a {type(leaf).__qualname__}; jitted functions return "
                    "Tensors, arrays or numbers (or pytrees of them)"
                )
        outputs = [leaf if isinstance(leaf, Tensor) else Tensor.const(leaf) for leaf in out_leaves]
        return placeholders, outputs, out_def

    def _compile(self, key: CacheKey, statics: dict[str, Any]) -> _Entry:
        from .compiler import compile as compile_graph

        inputs, outputs, out_def = self._trace(key, statics)
        executable = compile_graph(outputs, inputs, name=self.name)
        device = self._device()
        loaded = device.client.load(executable, device)
        self.compiles += 1
        slots: list[tuple[str, int, int]] = []
        for i, spec in enumerate(key.leaves):
            for axis, d in enumerate(spec.shape):
                if isinstance(d, Var):
                    slots.append((d.name, i, axis))
        return _Entry(
            loaded,
            out_def,
            tuple(slots),
            tuple(spec.dtype for spec in key.leaves),
            tuple(not any(isinstance(d, Var) for d in spec.shape) for spec in key.leaves),
            threading.get_ident(),
        )

    def _log_miss(self, key: CacheKey) -> None:
        if not self._cache:
            _log.info("jit.cache_miss", fn=self.name, reason="first call", cache_size=0)
            return
        # the nearest cached key: fewest differences, then fewest that change a value (so 3.0
        # after 3 names the int/float difference, not another cached float)
        _, best = min(((_rank(old, key), _diff(old, key)) for old in self._cache), key=lambda p: p[0])
        _log.info("jit.cache_miss", fn=self.name, reason="; ".join(best), cache_size=len(self._cache))


@attrs.frozen(eq=False)
class Lowered:
    """A traced ``jit`` function for one cache key (``Jitted.lower``); iterates as ``(inputs, outputs)``."""

    jitted: Jitted
    key: CacheKey
    statics: dict[str, Any]
    inputs: list[Tensor]
    outputs: list[Tensor]

    def __iter__(self) -> Any:
        return iter((self.inputs, self.outputs))

    def as_text(self) -> str:
        """The traced graph: one SSA line per node, inputs first, then the outputs' names."""
        nodes = toposort([as_node(o) for o in self.outputs])
        lines = [f"# {self.jitted.name}: inputs {[as_node(i).attrs['name'] for i in self.inputs]}"]
        lines += [repr(n) for n in nodes]
        lines.append("return " + ", ".join(f"%{as_node(o).id}" for o in self.outputs))
        return "\n".join(lines)

    def compile(self) -> Compiled:
        """Compile now (or take the plan from the function's cache); the result runs these shapes."""
        fn = self.jitted
        entry = fn._cache.get(self.key)
        if entry is None:
            fn._log_miss(self.key)
            entry = fn._cache[self.key] = fn._compile(self.key, self.statics)
        return Compiled(fn, self.key, entry)


@attrs.frozen(eq=False)
class Compiled:
    """A compiled plan of a ``jit`` function (``Lowered.compile``): call it like the function."""

    jitted: Jitted
    key: CacheKey
    entry: _Entry

    @property
    def executable(self) -> Any:
        """The device-independent ``Executable`` (``.ir_text``, ``.serialize()``, ``.run``)."""
        return self.entry.loaded.executable

    def as_text(self) -> str:
        """The plan's LLVM IR."""
        return str(self.executable.ir_text)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run on arguments of the lowered shapes (dynamic dims within their bounds).

        Raises:
            ShapeMismatchError: the arguments key differently from the ones lowered.
        """
        fn = self.jitted
        dyn, statics = fn._bind(args, kwargs)
        key, _, _ = fn._key_from(dyn, statics)
        if key != self.key:
            raise ShapeMismatchError(
                f"{fn.name}: compiled for other arguments: {'; '.join(_diff(self.key, key))}"
            )
        return fn(*args, **kwargs)


def _rank(old: CacheKey, new: CacheKey) -> tuple[int, int]:
    """(differences, differences that change a value and not only its type) from ``old`` to ``new``."""
    if old.treedef != new.treedef:
        return (1_000_000, 1_000_000)
    old_s, new_s = dict(old.statics), dict(new.statics)
    changed = 0
    for name in set(old_s) | set(new_s):
        a, b = old_s.get(name), new_s.get(name)
        if a != b:
            same_value = (
                isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 3 and a[2] == b[2]
            )
            changed += 0 if same_value else 1
    for x, y in zip(old.leaves, new.leaves, strict=True):
        changed += (x.shape != y.shape) + (x.dtype != y.dtype) + (x.device != y.device)
    return (len(_diff(old, new)), changed)


def _diff(old: CacheKey, new: CacheKey) -> list[str]:
    """What differs between two keys, in words (an argument path and old -> new)."""
    if old.treedef != new.treedef:
        return [f"argument structure {old.treedef!r} -> {new.treedef!r}"]
    out: list[str] = []
    old_s, new_s = dict(old.statics), dict(new.statics)
    for name in sorted(set(old_s) | set(new_s)):
        if old_s.get(name) != new_s.get(name):
            out.append(f"static {name}: {_show(old_s.get(name))} -> {_show(new_s.get(name))}")
    for path, a, b in zip(tree_paths(new.treedef), old.leaves, new.leaves, strict=True):
        if a.shape != b.shape:
            out.append(f"{path} shape {_shape(a.shape)} -> {_shape(b.shape)}")
        if a.dtype != b.dtype:
            out.append(f"{path} dtype {a.dtype.name} -> {b.dtype.name}")
        if a.device != b.device:
            out.append(f"{path} device {a.device} -> {b.device}")
    return out or ["aux data of a pytree node changed"]


def _show(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 3 and isinstance(key[1], str):
        return f"{key[2]!r} ({key[1]})"
    return repr(key)


def _shape(shape: tuple[Dim, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def jit(
    fn: Callable[..., Any] | None = None,
    *,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    dynamic: DynamicSpec | None = None,
    device: Any = None,
    name: str | None = None,
    inline: bool | None = True,
    in_shardings: Any = None,
    out_shardings: Any = None,
) -> Any:
    """Compile ``fn`` once per cache key; usable as ``@jit`` or ``jit(fn, ...)``.

    Args:
        fn: a function of arrays (and static values) that builds its result with ``Tensor`` ops.
        static_argnums / static_argnames: arguments keyed by value (type-aware) and passed to
            ``fn`` as Python values.
        dynamic: bounded symbolic dims per argument, e.g.
            ``{"x": {0: ("b", 1, 64), 1: ("t", 1, 3000)}}``: one plan serves every size in range.
        device: a ``Device`` or an index into the default client's devices.
        name: the plan name in logs and profiles (default: the function's qualified name).
        inline: for synchronous calls (``f(...)``): True (default) runs the plan on the calling
            thread when the device is idle, so the outputs come back ready — a synchronous
            caller reads them next, and a thread hop costs more than a small plan; None follows
            the device's inline policy (cheap plans inline, others on the device thread, so
            host work can overlap them); False always queues. ``aio`` follows the device policy.
        in_shardings: data parallelism over devices: one ``Sharding`` for every argument, or a
            dict (argument name -> Sharding or None) or a list (by position). A split argument
            is sliced across the sharding's devices (a ``ShardedBuffer`` argument keeps its own
            sharding); each device runs the plan on its slice when no op mixes rows of the split
            axis, else the whole call runs on the first device (see ``docs/devices.md``).
            Calls then return ``ShardedBuffer``s.
        out_shardings: one ``Sharding`` for every output, or a list per output leaf; None
            keeps the split the plan produced.

    Returns:
        A ``Jitted`` callable with ``cache_size()``, ``cache_clear()``, ``aio()``, ``lower()``.
    """
    options: dict[str, Any] = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        dynamic=dynamic,
        device=device,
        name=name,
        inline=inline,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )
    if fn is None:
        return lambda f: Jitted(f, **options)
    return Jitted(fn, **options)


def device_put(tree: Any, device: Any = None) -> Any:
    """Copy every array leaf of ``tree`` to a device, as ``jax.device_put``: weights passed to a
    jitted function as ``Buffer``s are not copied again on each call.

    Args:
        tree: a pytree of numpy arrays (float64 becomes float32, as for jit arguments), Python
            numbers, or ``Buffer``s (passed through).
        device: a ``Device`` or an index into the default client's devices (default 0).

    Returns:
        The same structure with ``Buffer`` leaves (ready).
    """
    from .runtime import Device, default_client

    dev = device if isinstance(device, Device) else default_client().device(0 if device is None else device)
    leaves, treedef = tree_flatten(tree)
    out = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Buffer):
            out.append(leaf)
            continue
        _, _, _, host = _leaf_info(leaf, f"leaf {i}")
        out.append(dev.client.buffer_from_host(_contiguous(host), device=dev))
    return tree_unflatten(treedef, out)
