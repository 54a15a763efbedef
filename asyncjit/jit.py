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
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import structlog

from . import dtypes as dt
from .dtypes import DType
from .errors import DTypeMismatchError, ShapeMismatchError, StaticArgumentError, VarBoundsError
from .symbolic import Dim, Var
from .tensor import Tensor
from .tree import TreeDef, static_key, tree_flatten, tree_paths, tree_unflatten

__all__ = ["Jitted", "jit"]

_log = structlog.get_logger("asyncjit.jit")

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


def _leaf_info(value: Any, path: str) -> tuple[tuple[int, ...], DType, Hashable, Any]:
    """(shape, dtype, device key, host array or buffer) of a dynamic leaf."""
    from .runtime import Buffer

    if isinstance(value, Buffer):
        return tuple(value.shape), value.dtype, ("device", value.device.id), value
    if isinstance(value, Tensor):
        raise TypeError(f"argument {path} is a Tensor; jit arguments are arrays or Buffers")
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
    raise TypeError(
        f"argument {path} is a {type(value).__qualname__}, which cannot be a dynamic leaf; "
        "mark it static (static_argnames=...) or register its type as a pytree node"
    )


def _contiguous(arr: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into a 1-d one
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr).reshape(arr.shape)


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
    ) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", "jitted")
        self._sig = inspect.signature(fn)
        params = list(self._sig.parameters.values())
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        static = set(names)
        for i in nums:
            if not -len(params) <= i < len(params):
                raise ValueError(f"static_argnums {i} is out of range for {self.name}{self._sig}")
            static.add(params[i].name)
        unknown = static - {p.name for p in params}
        if unknown:
            raise ValueError(f"static_argnames {sorted(unknown)} are not parameters of {self.name}")
        self._static = frozenset(static)
        self._dynamic: dict[str, dict[int, Var]] = {}
        for arg, dims in (dynamic or {}).items():
            if arg not in self._sig.parameters:
                raise ValueError(f"dynamic names {arg!r}, which is not a parameter of {self.name}")
            if arg in self._static:
                raise ValueError(f"argument {arg!r} cannot be both static and dynamic")
            self._dynamic[arg] = {int(axis): v if isinstance(v, Var) else Var(*v) for axis, v in dims.items()}
        self._device_arg = device
        self._cache: dict[CacheKey, _Entry] = {}
        self.compiles = 0
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<jit {self.name} cache_size={len(self._cache)}>"

    # -- cache ---------------------------------------------------------------------------------
    def cache_size(self) -> int:
        """Number of compiled plans held (one per distinct cache key)."""
        return len(self._cache)

    def cache_clear(self) -> None:
        """Drop every compiled plan; the next call traces and compiles again."""
        self._cache.clear()

    # -- calling -------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run and return the outputs as ``Buffer``s at once (awaitable; not yet computed).

        From synchronous code this blocks only when the device has too many commands in flight.
        """
        from .errors import WouldBlock

        entry, bufs, values = self._prepare_call(args, kwargs)
        try:
            outs = entry.loaded.execute_nowait(bufs, values)
        except WouldBlock:
            outs = entry.loaded.execute_blocking(bufs, values)
        return tree_unflatten(entry.out_def, outs)

    async def aio(self, *args: Any, **kwargs: Any) -> Any:
        """Run from an event loop and return the outputs once they are ready (never blocks)."""
        entry, bufs, values = self._prepare_call(args, kwargs)
        outs = await entry.loaded.execute(bufs, values)
        for b in outs:
            await b.ready()
        return tree_unflatten(entry.out_def, outs)

    def lower(self, *args: Any, **kwargs: Any) -> tuple[list[Tensor], list[Tensor]]:
        """Trace without compiling: ``(inputs, outputs)`` as tensors, for inspection."""
        key, _, statics = self._key(args, kwargs)
        inputs, outputs, _ = self._trace(key, statics)
        return inputs, outputs

    # -- machinery -----------------------------------------------------------------------------
    def _device(self) -> Any:
        from .runtime import Device, default_client

        dev = self._device_arg
        if isinstance(dev, Device):
            return dev
        client = default_client()
        return client.device(0 if dev is None else int(dev))

    def _split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None
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
        try:
            static_keys = tuple((n, static_key(v)) for n, v in sorted(statics.items()))
        except StaticArgumentError as exc:
            raise StaticArgumentError(f"{self.name}: {exc}") from None
        leaves, treedef = tree_flatten(dict(dyn))
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
                    raise TypeError(f"dynamic dims of {arg!r} need it to be a single array, not a pytree")
                sym = self._symbolic_shape(arg, shape, dims)
            specs.append(LeafSpec(sym, dtype, device))
            hosts.append(host)
        return CacheKey(treedef, static_keys, tuple(specs)), hosts, statics

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

    def _prepare_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_Entry, list[Any], dict[str, int]]:
        from .runtime import Buffer

        key, hosts, statics = self._key(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            self._log_miss(key)
            entry = self._compile(key, statics)
            self._cache[key] = entry
        values: dict[str, int] = {}
        for var, leaf, axis in entry.var_slots:
            size = (
                np.shape(hosts[leaf])[axis]
                if not isinstance(hosts[leaf], Buffer)
                else hosts[leaf].shape[axis]
            )
            if values.setdefault(var, size) != size:
                raise ShapeMismatchError(
                    f"{self.name}: var {var!r} is {values[var]} from one argument and {size} from another"
                )
        device = entry.loaded.devices()[0]
        client = device.client
        bufs = [
            h if isinstance(h, Buffer) else client.buffer_from_host(_contiguous(h), device=device)
            for h in hosts
        ]
        return entry, bufs, values

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
        return _Entry(loaded, out_def, tuple(slots))

    def _log_miss(self, key: CacheKey) -> None:
        if not self._cache:
            _log.info("jit.cache_miss", fn=self.name, reason="first call", cache_size=0)
            return
        best = min((_diff(old, key) for old in self._cache), key=len)
        _log.info("jit.cache_miss", fn=self.name, reason="; ".join(best), cache_size=len(self._cache))


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

    Returns:
        A ``Jitted`` callable with ``cache_size()``, ``cache_clear()``, ``aio()``, ``lower()``.
    """
    options: dict[str, Any] = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        dynamic=dynamic,
        device=device,
        name=name,
    )
    if fn is None:
        return lambda f: Jitted(f, **options)
    return Jitted(fn, **options)
