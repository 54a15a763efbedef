"""``InferenceSession``: an imported ONNX model compiled once, run ORT-style or asynchronously.

``run(output_names, feed)`` is ONNX Runtime's call; ``await run_async(...)`` is the same without
blocking the event loop (asyncio or trio); ``execute(feed)`` returns the output ``Buffer``s at
once, before they are computed. The plan goes through the compile cache (memory and disk), keyed
by the traced graph, which the model bytes and the dims determine.

Every feed is checked before anything runs: names, dtypes (never converted), ranks, and each
size against its dim (a fixed size exactly, a symbolic one within its bounds, the same var equal
everywhere it appears). Nothing is broadcast, padded or clamped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._log import get_logger
from ..compiler import compile as compile_plan
from ..compiler._cpu import CpuExecutable
from ..errors import (
    DTypeMismatchError,
    InputBufferNotFoundError,
    ShapeMismatchError,
    TensorError,
    VarBoundsError,
)
from ..graph import shape_str
from ..graph._node import allocate_array
from ..runtime import Buffer, Client, Device, default_client
from ..symbolic import Expr, Var
from ..symbolic import evaluate as eval_dim
from ..tensor import Tensor
from ._importer import OnnxModel, TensorInfo, load
from ._lowp import LowP, bits_array, is_lowp_dtype
from ._values import Sym

__all__ = ["InferenceSession"]

_log = get_logger("asyncjit.onnx")


class InferenceSession:
    """An ONNX model compiled for bounded dims, with ONNX Runtime's ``run`` and async variants.

    Args:
        model: a path, the model's bytes, an ``onnx.ModelProto`` or an ``OnnxModel`` from ``load``.
        dims: bounds of the symbolic input dims (see ``asyncjit.onnx.load``).
        values: inputs fixed to constants (see ``load``).
        device: a ``Device`` or an index into the client's devices (default: the first).
        client: the runtime client (default: ``default_client()``).

    Raises:
        OnnxImportError, UnsupportedOpError: from the import, before anything is compiled.
    """

    def __init__(
        self,
        model: str | Path | bytes | Any,
        dims: Mapping[str, Any] | None = None,
        *,
        values: Mapping[str, Any] | None = None,
        device: Device | int | None = None,
        client: Client | None = None,
    ) -> None:
        started = time.perf_counter()
        self.model: OnnxModel = model if isinstance(model, OnnxModel) else load(model, dims, values=values)
        self.client = client if client is not None else default_client()
        m = self.model
        self._inputs = {i.name: i for i in m.inputs}
        self._order = [i.name for i in m.inputs]
        self._output_names = [o.name for o in m.outputs]
        self._out_dtypes = {o.name: o.dtype for o in m.outputs}
        self._lowp_inputs = frozenset(i.name for i in m.inputs if is_lowp_dtype(i.dtype))
        # outputs computed by the plan, and the rest (constants, symbolic ints, inputs passed through)
        self._plan_outputs: list[str] = []
        tensors: list[Tensor] = []
        for name, value in m.outputs_traced.items():
            if isinstance(value, LowP):  # a low-precision output: the plan computes its bits
                value = value.bits
            if isinstance(value, Tensor) and value.node.op != "placeholder":
                self._plan_outputs.append(name)
                tensors.append(value)
        self.plan = None
        self._plan_vars: tuple[str, ...] = ()
        if tensors:
            exe = compile_plan(
                tensors,
                [m.placeholders[n] for n in self._order],
                list(m.vars),
                name=f"onnx:{Path(m.source).name}",
            )
            self.plan = self.client.load(exe, device)
            self._plan_vars = tuple(exe.signature.var_names)
        self.device = (
            self.plan.devices()[0]
            if self.plan is not None
            else self.client.device(0 if not isinstance(device, int) else device)
        )
        self._run_lock = threading.Lock()
        self._fixed_names = frozenset(m.fixed)
        self._feed_memo: dict[tuple[Any, ...], dict[str, int]] = {}
        self._bound: dict[tuple[Any, ...], tuple[Any, list[np.ndarray], list[np.ndarray]]] = {}
        self._run_inputs: dict[tuple[Any, ...], tuple[list[Buffer], list[np.ndarray]]] = {}
        self._replays: dict[tuple[Any, ...], tuple[Any, list[np.ndarray], list[int]]] = {}
        self._lowp_outputs = frozenset(n for n, d in self._out_dtypes.items() if is_lowp_dtype(d))
        self.prepare_seconds = time.perf_counter() - started
        _log.info(
            "onnx.session",
            model=m.source,
            seconds=round(self.prepare_seconds, 4),
            vars={v.name: (v.min, v.max) for v in m.vars},
        )

    def __repr__(self) -> str:
        return f"<InferenceSession {self.model.source} on {self.device.kind}:{self.device.id}>"

    # -- ONNX Runtime's introspection -------------------------------------------------------------
    def get_inputs(self) -> list[TensorInfo]:
        """The inputs to feed (inputs fixed with ``values=`` are not listed)."""
        return list(self.model.inputs)

    def get_outputs(self) -> list[TensorInfo]:
        return list(self.model.outputs)

    # -- feeding ------------------------------------------------------------------------------------
    def check_feed(self, feed: Mapping[str, Any]) -> tuple[list[np.ndarray], dict[str, int]]:
        """The feed as arrays in input order and the var values their shapes give.

        Raises:
            InputBufferNotFoundError: a missing input or a name the model has no input for.
            DTypeMismatchError: an array of another dtype (nothing is converted).
            ShapeMismatchError: a wrong rank, a fixed size that differs, one var two sizes.
            VarBoundsError: a size outside its dim's bounds, naming the input and axis.
        """
        # A feed of plain arrays with the names, shapes and dtypes of one already checked gives
        # the same verdict: the var values are remembered per such signature.
        key: tuple[Any, ...] | None = None
        if type(feed) is dict and not self._fixed_names.intersection(feed):
            key = _feed_signature(feed)
            if key is not None:
                hit = self._feed_memo.get(key)
                if hit is not None:
                    if self._lowp_inputs:  # their bits go to the plan
                        return [
                            bits_array(feed[n]) if n in self._lowp_inputs else feed[n] for n in self._order
                        ], dict(hit)
                    return [feed[n] for n in self._order], dict(hit)
        arrays, values = self._check_feed(feed)
        if key is not None:
            if len(self._feed_memo) >= 64:
                self._feed_memo.clear()
            self._feed_memo[key] = values
        return arrays, values

    def _check_feed(self, feed: Mapping[str, Any]) -> tuple[list[np.ndarray], dict[str, int]]:
        unknown = [k for k in feed if k not in self._inputs and k not in self.model.fixed]
        if unknown:
            raise InputBufferNotFoundError(
                f"{self.model.source}: no input named {unknown[0]!r} (inputs: {', '.join(self._order)})"
            )
        for name, want in self.model.fixed.items():
            if name in feed and not np.array_equal(np.asarray(feed[name]), want):
                raise TensorError(
                    f"{self.model.source}: input {name!r} was fixed to {want.tolist()} at load (values=), "
                    f"got {np.asarray(feed[name]).tolist()}; load another session for that value"
                )
        arrays: list[np.ndarray] = []
        bound: dict[str, tuple[int, str]] = {}
        for name in self._order:
            if name not in feed:
                raise InputBufferNotFoundError(
                    f"{self.model.source}: input {name!r} is missing from the feed"
                )
            info = self._inputs[name]
            arr = feed[name]
            if not isinstance(arr, np.ndarray):
                arr = np.asarray(arr)
                if arr.dtype != info.dtype and arr.ndim == 0 and arr.dtype.kind == info.dtype.kind:
                    arr = arr.astype(info.dtype)  # a Python scalar: ORT takes it in the input's type
            if arr.dtype != info.dtype:
                raise DTypeMismatchError(
                    f"{self.model.source}: input {name!r} expects {info.dtype}, got {arr.dtype} "
                    f"(convert with .astype(np.{info.dtype}))"
                )
            if arr.ndim != len(info.shape):
                raise ShapeMismatchError(
                    f"{self.model.source}: input {name!r} expects rank {len(info.shape)} "
                    f"{shape_str(info.shape)}, got shape {arr.shape}"
                )
            for axis, (d, size) in enumerate(zip(info.shape, arr.shape, strict=True)):
                where = f"input {name!r} axis {axis}"
                if isinstance(d, Var):
                    if not d.min <= size <= d.max:
                        raise VarBoundsError(
                            f"{self.model.source}: {where} ({d.name}) is {size}, outside its bounds "
                            f"[{d.min}, {d.max}]; load with larger dims to accept it"
                        )
                    if d.name in bound and bound[d.name][0] != size:
                        raise ShapeMismatchError(
                            f"{self.model.source}: {where} ({d.name}) is {size}, but "
                            f"{bound[d.name][1]} gave {d.name} = {bound[d.name][0]}"
                        )
                    bound[d.name] = (int(size), where)
                elif isinstance(d, int) and d != size:
                    raise ShapeMismatchError(f"{self.model.source}: {where} must be {d}, got {size}")
            arrays.append(bits_array(arr) if is_lowp_dtype(arr.dtype) else arr)
        return arrays, {k: v for k, (v, _) in bound.items()}

    def _host_output(
        self, name: str, arrays: Sequence[np.ndarray], var_values: Mapping[str, int]
    ) -> np.ndarray:
        value = self.model.outputs_traced[name]
        if isinstance(value, LowP):
            value = value.bits
        if isinstance(value, Tensor):  # an input passed straight through
            return np.array(arrays[self._order.index(value.node.attrs["name"])])
        if isinstance(value, Sym):
            flat = [
                eval_dim(e, var_values) if isinstance(e, Expr) else int(e) for e in value.values.reshape(-1)
            ]
            return np.array(flat, dtype=value.dtype).reshape(value.shape)
        return bits_array(value) if is_lowp_dtype(value.dtype) else np.array(value)

    # -- running ------------------------------------------------------------------------------------
    def _names(self, output_names: Sequence[str] | None) -> list[str]:
        if output_names is None:
            return list(self._output_names)
        bad = [n for n in output_names if n not in self._output_names]
        if bad:
            raise InputBufferNotFoundError(
                f"{self.model.source}: no output named {bad[0]!r} (outputs: {', '.join(self._output_names)})"
            )
        return list(output_names)

    def execute(self, feed: Mapping[str, Any]) -> dict[str, Buffer]:
        """Enqueue one run and return every output's ``Buffer`` before it is computed.

        A low-precision output (bfloat16, float8, int4 ...) is a Buffer of its storage bits
        (uint16 or uint8): ``.view(ml_dtypes.<type>)`` its array.

        Blocks only while the device queue is full (``run_async`` never blocks).
        """
        arrays, var_values = self.check_feed(feed)
        return self._collect(arrays, var_values, self._launch(arrays, var_values, blocking=True))

    def _launch(
        self, arrays: list[np.ndarray], var_values: Mapping[str, int], blocking: bool
    ) -> list[Buffer]:
        if self.plan is None:
            return []
        bufs = [self.client.buffer_from_host(a, self.device) for a in arrays]
        values = {k: v for k, v in var_values.items() if k in self._plan_vars}
        return self.plan.execute_blocking(bufs, values) if blocking else bufs

    def _collect(
        self, arrays: list[np.ndarray], var_values: Mapping[str, int], outs: list[Buffer]
    ) -> dict[str, Buffer]:
        result: dict[str, Buffer] = dict(zip(self._plan_outputs, outs, strict=True))
        for name in self._output_names:
            if name not in result:
                result[name] = self.client.buffer_from_host(
                    self._host_output(name, arrays, var_values), self.device
                )
        return result

    def run(
        self, output_names: Sequence[str] | None, feed: Mapping[str, Any], run_options: Any = None
    ) -> list[npt.NDArray[Any]]:
        """ONNX Runtime's ``run``: the named outputs (None: all) as numpy arrays. Blocking.

        The inputs are copied into device buffers kept per set of input shapes: ``run`` returns
        only after the plan finished with them, so the next call may overwrite them (a call
        from another thread meanwhile uses fresh buffers). A feed with the names, shapes and
        dtypes of one already run on this path skips the checks, which would give it the same
        verdict.
        """
        replay_key = self._replay_key(output_names, feed)
        replayed = None if replay_key is None else self._replay(replay_key, feed)
        if replayed is not None:
            return replayed
        names = self._names(output_names)
        arrays, var_values = self.check_feed(feed)
        outs: list[Buffer] = []
        if self.plan is not None:
            if self._run_lock.acquire(blocking=False):
                try:
                    values = {k: v for k, v in var_values.items() if k in self._plan_vars}
                    direct = self._run_bound(arrays, values)
                    if direct is not None:
                        self._remember_replay(replay_key, feed, names, values)
                        return [
                            self._typed(
                                n, direct[n] if n in direct else self._host_output(n, arrays, var_values)
                            )
                            for n in names
                        ]
                    outs = self.plan.execute_blocking(self._reused_inputs(arrays), values)
                    for out in outs:
                        out.block_until_ready()
                finally:
                    self._run_lock.release()
            else:
                outs = self._launch(arrays, var_values, blocking=True)
        buffers = self._collect(arrays, var_values, outs)
        return [self._typed(n, buffers[n].to_numpy_blocking()) for n in names]

    @staticmethod
    def _replay_key(output_names: Sequence[str] | None, feed: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """What decides a ``run``: the feed's names, shapes and dtypes (plain arrays only) and
        the outputs asked for."""
        if type(feed) is not dict or not (output_names is None or type(output_names) in (list, tuple)):
            return None
        key = _feed_signature(feed)
        if key is None:
            return None
        names = None if output_names is None else tuple(output_names)
        try:
            hash(names)
        except TypeError:  # not names at all: the full path says so
            return None
        return key, names

    def _remember_replay(
        self,
        key: tuple[Any, ...] | None,
        feed: Mapping[str, Any],
        names: list[str],
        values: dict[str, int],
    ) -> None:
        """After a checked run on the bound path: let a feed like it (``key``: ``_replay_key``)
        skip straight to the plan (no low-precision bits, no fixed inputs, every output asked
        for computed by the plan)."""
        if (
            key is None
            or self._lowp_inputs
            or self._fixed_names.intersection(feed)
            or any(n not in self._plan_outputs or n in self._lowp_outputs for n in names)
        ):
            return
        call, ins, _ = self._bound[(tuple(feed[n].shape for n in self._order), tuple(values.items()))]
        if len(self._replays) >= 64:
            self._replays.clear()
        self._replays[key] = (call, ins, [self._plan_outputs.index(n) for n in names])

    def _replay(self, key: tuple[Any, ...], feed: Mapping[str, Any]) -> list[np.ndarray] | None:
        """``run`` for a feed with the names, shapes and dtypes of one already checked and run
        on the bound path (``key``: ``_replay_key``): the same verdict, so the checks, the var
        values and the lookups are skipped (they cost about as much as Silero VAD's kernels).
        None: take the full path."""
        entry = self._replays.get(key)
        if entry is None or not self._run_lock.acquire(blocking=False):
            return None
        try:
            call, ins, picks = entry
            self.device.check_open()
            for dst, name in zip(ins, self._order, strict=True):
                np.copyto(dst, feed[name])
            call()
            outs = call.outputs()
            return [outs[i].copy() for i in picks]
        finally:
            self._run_lock.release()

    def _typed(self, name: str, arr: np.ndarray) -> np.ndarray:
        """A low-precision output's bits viewed as its ``ml_dtypes`` type."""
        if name not in self._lowp_outputs:
            return arr
        want = self._out_dtypes[name]
        return arr.view(want) if arr.dtype != want else arr

    def _run_bound(self, arrays: list[np.ndarray], values: dict[str, int]) -> dict[str, np.ndarray] | None:
        """The plan replayed on this thread, bound once per feed shape to session-owned arrays
        (the path ``SileroVad`` takes): no device-thread hop and no buffer bookkeeping, which
        cost more than a small model's kernels. None where the plan cannot be bound this way (a
        device other than the CPU compiler's, plugin partitions that dispatch on the device
        thread); the caller then goes through the device queue. Called holding ``_run_lock``.
        """
        assert self.plan is not None
        exe = self.plan.executable
        if not isinstance(exe, CpuExecutable) or exe.dispatch:
            return None
        self.device.check_open()
        key = (tuple(a.shape for a in arrays), tuple(values.items()))
        entry = self._bound.get(key)
        if entry is None:
            ins = [np.empty(a.shape, a.dtype) for a in arrays]
            shapes = exe.signature.output_shapes(exe.check_vars(values))
            outs = [
                allocate_array(shape, spec.dtype.np, f"output {spec.name!r}")
                for spec, shape in zip(exe.signature.outputs, shapes, strict=True)
            ]
            if len(self._bound) >= 8:
                self._bound.clear()
                self._replays.clear()  # they hold bound calls too
            entry = self._bound[key] = (exe.bind(ins, outs, values), ins, outs)
        call, ins, _ = entry
        for dst, src in zip(ins, arrays, strict=True):
            np.copyto(dst, src)
        call()  # outputs(): actual shapes where the plan computes sizes
        return {name: out.copy() for name, out in zip(self._plan_outputs, call.outputs(), strict=True)}

    def _reused_inputs(self, arrays: list[np.ndarray]) -> list[Buffer]:
        key = tuple((a.shape, a.dtype.str) for a in arrays)
        cached = self._run_inputs.get(key)
        if cached is None:
            if len(self._run_inputs) >= 8:
                self._run_inputs.clear()
            bufs = [self.client.buffer_from_host(np.zeros(a.shape, a.dtype), self.device) for a in arrays]
            cached = (bufs, [b.numpy_view(writable=True) for b in bufs])
            self._run_inputs[key] = cached
        bufs, views = cached
        for view, a in zip(views, arrays, strict=True):
            view[...] = a
        return bufs

    async def run_async(
        self, output_names: Sequence[str] | None, feed: Mapping[str, Any]
    ) -> list[npt.NDArray[Any]]:
        """``run`` for the event loop (asyncio or trio): awaits the device, never blocks."""
        names = self._names(output_names)
        arrays, var_values = self.check_feed(feed)
        outs: list[Buffer] = []
        if self.plan is not None:
            bufs = [self.client.buffer_from_host(a, self.device) for a in arrays]
            values = {k: v for k, v in var_values.items() if k in self._plan_vars}
            outs = await self.plan.execute(bufs, values)
        buffers = self._collect(arrays, var_values, outs)
        return [self._typed(n, await buffers[n].to_numpy()) for n in names]


def _feed_signature(feed: dict[str, Any]) -> tuple[Any, ...] | None:
    """The names, shapes and dtypes of a feed of plain arrays (None: something else in it), which
    decide what the feed checks say."""
    key = tuple([(k, v.shape, v.dtype) if type(v) is np.ndarray else None for k, v in feed.items()])
    return None if None in key else key
