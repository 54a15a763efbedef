"""The call path of ``jit(f, in_shardings=..., out_shardings=...)``: data parallelism over devices.

Per cache key (argument structure, statics, and each leaf's global shape, dtype and sharding) the
function is traced once with the split axis of every split argument replaced by the *shard var*
(a symbolic dim bounded by the shard lengths), and ``passes.split_axes`` decides whether the graph
keeps the split rows apart. If it does, one plan is compiled and loaded on every device of the
sharding; a call runs each device on its own shard (``execute_replicated``: one command per
device queue, the devices compute in parallel) and returns ``ShardedBuffer``s split along the
axes the analysis found. If it does not (a reduction over the split axis, an op without a rule),
the function is traced at the global shapes and runs on the first device with the shards
gathered there, device to device; a ``jit.shard_fallback`` info event says why. Both give the
single-device result.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._log import get_logger
from .dtypes import DType
from .errors import ArgumentTypeError, DeviceMismatchError, InvalidArgumentError, JitError, ShardingError
from .graph import as_node
from .runtime import Buffer, Device, ShardedBuffer, Sharding
from .symbolic import Var
from .tree import TreeDef, static_key, tree_flatten, tree_paths, tree_unflatten

if TYPE_CHECKING:
    from .jit import Jitted
    from .runtime import LoadedExecutable

__all__ = ["ShardedCalls", "ShardingSpec"]

_log = get_logger("asyncjit.jit")

ShardingSpec = Sharding | None | Mapping[str, "Sharding | None"] | Sequence["Sharding | None"]

SHARD_VAR = "shard"
"""The name of the var that stands for a device's slice length in a traced sharded plan."""


@attrs.frozen
class _LeafKey:
    shape: tuple[int, ...]
    dtype: DType
    sharding: Sharding | None


@attrs.frozen
class _Key:
    treedef: TreeDef
    statics: tuple[tuple[str, Hashable], ...]
    leaves: tuple[_LeafKey, ...]


@attrs.define(eq=False)
class _ShardedEntry:
    loaded: LoadedExecutable
    out_def: TreeDef
    devices: tuple[Device, ...]
    in_shardings: tuple[Sharding, ...]  # what each leaf must be placed as before a call
    out_shardings: tuple[Sharding, ...]  # how the devices' outputs form each global output
    sizes: tuple[int, ...]  # each device's shard length (split mode)
    split: bool  # False: the whole graph runs on devices[0]


def _leaf_value(value: Any, path: str) -> tuple[tuple[int, ...], DType, Any]:
    """(global shape, dtype, the value to place) of a dynamic leaf."""
    if isinstance(value, ShardedBuffer | Buffer):
        return tuple(value.shape), value.dtype, value
    from .jit import _leaf_info

    shape, dtype, _, host = _leaf_info(value, path)
    return tuple(shape), dtype, host


class ShardedCalls:
    """The sharded cache and call path of one ``Jitted`` (which keeps the tracing)."""

    def __init__(self, jitted: Jitted, in_shardings: ShardingSpec, out_shardings: ShardingSpec) -> None:
        self.jitted = jitted
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self._cache: dict[_Key, _ShardedEntry] = {}
        for spec in _spec_values(in_shardings) + _spec_values(out_shardings):
            if spec is not None and not isinstance(spec, Sharding):
                raise ArgumentTypeError(f"{jitted.name}: shardings are Sharding or None, got {spec!r}")

    def cache_size(self) -> int:
        return len(self._cache)

    def cache_clear(self) -> None:
        self._cache.clear()

    # -- keys -----------------------------------------------------------------------------------
    def _in_spec(self, arg: str, position: int) -> Sharding | None:
        spec = self.in_shardings
        if spec is None or isinstance(spec, Sharding):
            return spec
        if isinstance(spec, Mapping):
            return spec.get(arg)
        specs = list(spec)
        return specs[position] if position < len(specs) else None

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[_Key, list[Any], dict[str, Any]]:
        fn = self.jitted
        dyn, statics = fn._bind(args, kwargs)
        static_keys = tuple((n, static_key(v)) for n, v in sorted(statics.items()))
        leaves, treedef = tree_flatten(dyn)
        names = list(fn._sig.parameters)
        specs: list[_LeafKey] = []
        values: list[Any] = []
        for path, leaf in zip(tree_paths(treedef), leaves, strict=True):
            arg = path[2 : path.index("']")] if path.startswith("['") else path
            shape, dtype, value = _leaf_value(leaf, path)
            sharding = self._in_spec(arg, names.index(arg) if arg in names else len(names))
            if sharding is None and isinstance(value, ShardedBuffer):
                sharding = value.sharding
            if sharding is not None:
                sharding.resolved_axis(len(shape))  # a typed error for an axis out of range
                if sharding.axis is not None:
                    sharding.shard_sizes(shape[sharding.resolved_axis(len(shape)) or 0])
            specs.append(_LeafKey(shape, dtype, sharding))
            values.append(value)
        return _Key(treedef, static_keys, tuple(specs)), values, statics

    # -- compiling ------------------------------------------------------------------------------
    def _devices(self, key: _Key) -> tuple[Device, ...]:
        devs: tuple[Device, ...] | None = None
        for leaf in key.leaves:
            if leaf.sharding is None:
                continue
            if devs is None:
                devs = leaf.sharding.devices
            elif leaf.sharding.devices != devs:
                raise DeviceMismatchError(
                    f"{self.jitted.name}: arguments are sharded over different device lists "
                    f"{[d.id for d in devs]} and {[d.id for d in leaf.sharding.devices]}"
                )
        if devs is None:
            devs = (self.jitted._device(),)
        return devs

    def _compile(self, key: _Key, statics: dict[str, Any]) -> _ShardedEntry:
        devs = self._devices(key)
        sizes: set[tuple[int, ...]] = set()
        for leaf in key.leaves:
            s = leaf.sharding
            axis = None if s is None else s.resolved_axis(len(leaf.shape))
            if s is not None and axis is not None:
                sizes.add(s.shard_sizes(leaf.shape[axis]))
        reason = "no argument is split"
        if sizes:
            if len(sizes) != 1:
                reason = f"split arguments have different shard lengths {sorted(sizes)}"
            else:
                (shard_sizes,) = sizes
                entry, reason = self._compile_split(key, statics, devs, shard_sizes)
                if entry is not None:
                    return entry
        _log.info("jit.shard_fallback", fn=self.jitted.name, reason=reason, device=devs[0].id)
        return self._compile_whole(key, statics, devs)

    def _compile_split(
        self, key: _Key, statics: dict[str, Any], devs: tuple[Device, ...], sizes: tuple[int, ...]
    ) -> tuple[_ShardedEntry | None, str]:
        from .compiler import compile as compile_graph
        from .jit import CacheKey, LeafSpec
        from .passes import split_axes

        var = Var(SHARD_VAR, min(sizes), max(sizes))
        leaf_specs = []
        placed: list[Sharding] = []
        for leaf in key.leaves:
            s = leaf.sharding
            axis = None if s is None else s.resolved_axis(len(leaf.shape))
            shape: tuple[Any, ...] = leaf.shape
            if axis is not None:
                shape = (*shape[:axis], var, *shape[axis + 1 :])
            leaf_specs.append(LeafSpec(shape, leaf.dtype, None))
            placed.append(s if s is not None and s.axis is not None else Sharding.replicated(devs))
        trace_key = CacheKey(key.treedef, key.statics, tuple(leaf_specs))
        try:
            inputs, outputs, out_def = self.jitted._trace(trace_key, statics)
        except JitError as exc:  # shape code that needs the whole extent (a reshape to fixed sizes)
            return None, f"tracing with a symbolic shard length failed: {exc}"
        in_axes = {
            as_node(p): (None if leaf.sharding is None else leaf.sharding.resolved_axis(len(leaf.shape)))
            for p, leaf in zip(inputs, key.leaves, strict=True)
        }
        out_axes, reason = split_axes([as_node(o) for o in outputs], in_axes, var)
        if out_axes is None:
            return None, reason
        executable = compile_graph(outputs, inputs, name=self.jitted.name)
        loaded = devs[0].client.load(executable, list(devs))
        ragged = len(set(sizes)) > 1
        outs = tuple(Sharding.replicated(devs) if a is None else Sharding(devs, a, ragged) for a in out_axes)
        self.jitted.compiles += 1
        return _ShardedEntry(loaded, out_def, devs, tuple(placed), outs, sizes, True), ""

    def _compile_whole(self, key: _Key, statics: dict[str, Any], devs: tuple[Device, ...]) -> _ShardedEntry:
        from .compiler import compile as compile_graph
        from .jit import CacheKey, LeafSpec

        trace_key = CacheKey(
            key.treedef, key.statics, tuple(LeafSpec(lf.shape, lf.dtype, None) for lf in key.leaves)
        )
        inputs, outputs, out_def = self.jitted._trace(trace_key, statics)
        executable = compile_graph(outputs, inputs, name=self.jitted.name)
        home = (devs[0],)
        loaded = devs[0].client.load(executable, devs[0])
        self.jitted.compiles += 1
        one = Sharding.replicated(home)
        return _ShardedEntry(
            loaded, out_def, home, (one,) * len(key.leaves), (one,) * len(outputs), (), False
        )

    # -- calling --------------------------------------------------------------------------------
    def _prepare(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_ShardedEntry, list[list[Buffer]], list[dict[str, int]]]:
        key, values, statics = self._key(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._compile(key, statics)
        client = entry.devices[0].client
        placed = [client.device_put(v, s) for v, s in zip(values, entry.in_shardings, strict=True)]
        per_args = [[p.shards[i] for p in placed] for i in range(len(entry.devices))]  # type: ignore[union-attr]
        names = entry.loaded.signature.var_names
        per_vars = [{SHARD_VAR: n} if SHARD_VAR in names else {} for n in entry.sizes] or [{}]
        return entry, per_args, per_vars

    def _finish(self, entry: _ShardedEntry, outs: list[list[Buffer]]) -> Any:
        from .runtime._sharding import assemble_outputs, reshard

        made = assemble_outputs(
            outs,
            entry.out_shardings,
            entry.out_shardings[0] if entry.out_shardings else Sharding.replicated(entry.devices),
        )
        wanted = _out_specs(self.out_shardings, len(made), str(self.jitted.name))
        result = [x if w is None else reshard(x, w) for x, w in zip(made, wanted, strict=True)]
        return tree_unflatten(entry.out_def, result)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run: ``ShardedBuffer`` outputs, returned before they are computed."""
        entry, per_args, per_vars = self._prepare(args, kwargs)
        return self._finish(entry, entry.loaded.execute_replicated_blocking(per_args, per_vars))

    async def call_async(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run from an event loop; the outputs come back ready."""
        entry, per_args, per_vars = self._prepare(args, kwargs)
        outs = await entry.loaded.execute_replicated(per_args, per_vars)
        for dev_outs in outs:
            for b in dev_outs:
                await b.ready()
        result = self._finish(entry, outs)
        for leaf in tree_flatten(result)[0]:
            if isinstance(leaf, ShardedBuffer):
                await leaf.ready()
        return result


def _spec_values(spec: ShardingSpec) -> list[Any]:
    if spec is None or isinstance(spec, Sharding):
        return [spec]
    if isinstance(spec, Mapping):
        return list(spec.values())
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return list(spec)
    raise ArgumentTypeError(f"shardings are a Sharding, None, a dict or a list of them; got {spec!r}")


def _out_specs(spec: ShardingSpec, n: int, name: str) -> list[Sharding | None]:
    if spec is None or isinstance(spec, Sharding):
        return [spec] * n
    if isinstance(spec, Mapping):
        raise InvalidArgumentError(f"{name}: out_shardings is one Sharding or a list (one per output leaf)")
    specs = list(spec)
    if len(specs) != n:
        raise ShardingError(f"{name}: {len(specs)} out_shardings for {n} outputs")
    return specs
