"""The fused-expression emitter: the value of a node at a symbolic index, as LLVM IR.

Materialized nodes are loads from their buffer at the row-major offset of the index. Every other
node is computed in place: elementwise ops from their inputs' values at the same index, movement
ops by rewriting the index (reshape regroups and unravels, permute reorders, expand pins
broadcast axes to 0, shrink scales and shifts, pad/cat choose between inputs), gathers by loading
the index tensor and clamping it. The symbolic simplifier folds the index algebra, so a chain of
views over one buffer usually costs one add and one load.

Every index this emitter produces is provably inside its buffer for every binding (shape rules
guarantee it for index math; data-dependent indices are clamped), which is what makes compiled
code memory-safe.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from llvmlite import ir

from ..errors import CompileError
from ..graph import OPS, Node, cast_scalar
from ..symbolic import Dim, Index, bounds, smax, smin, upper
from ._index import emit_dim, floordiv_runtime, i64
from ._scalar import emit_elementwise
from ._types import I1, I64, const, storage_type

__all__ = ["Emitter", "flat_eligible", "linearize"]


def linearize(idx: Sequence[Dim], shape: Sequence[Dim]) -> Dim:
    """Row-major flat offset of ``idx`` in ``shape``."""
    flat: Dim = 0
    for i, d in zip(idx, shape, strict=True):
        flat = flat * d + i
    return flat


def _numel1(node: Node) -> bool:
    return all(isinstance(d, int) and d == 1 for d in node.shape)


def flat_eligible(root: Node, mat: frozenset[int]) -> bool:
    """True when ``root``'s fused tree is elementwise over one shape (one flat loop suffices)."""
    stack = [root]
    while stack:
        n = stack.pop()
        if n.shape != root.shape:
            return False
        if n is not root and n.id in mat:
            continue
        if OPS[n.op].kind != "elementwise":
            return False
        for i in n.inputs:
            if i.op == "expand" and i.id not in mat and _numel1(i.inputs[0]):
                continue
            stack.append(i)
    return True


class Emitter:
    """Emits node values for one kernel function."""

    def __init__(
        self,
        builder: ir.IRBuilder,
        env: dict[str, ir.Value],
        buffers: Mapping[int, ir.Value],
        materialized: frozenset[int],
        flat_shape: tuple[Dim, ...] | None = None,
    ) -> None:
        self.b = builder
        self.env = env
        self.buffers = buffers
        self.mat = materialized
        self.flat_shape = flat_shape
        self._memo: list[dict[tuple[int, tuple[Dim, ...]], ir.Value]] = [{}]
        # per kernel, so atom names (which order symbolic terms, hence the IR) are deterministic
        self._fresh = itertools.count()

    # ------------------------------------------------------------------ helpers
    def dim(self, e: Dim) -> ir.Value:
        return emit_dim(self.b, e, self.env)

    def bind(self, value: ir.Value, extent: Dim) -> Index:
        """A fresh index atom standing for a runtime value known to lie in ``[0, extent)``."""
        atom = Index(f"%r{next(self._fresh)}", extent)
        self.env[atom.name] = value
        return atom

    def fresh_index(self, value: ir.Value, extent: Dim) -> Index:
        return self.bind(value, extent)

    def offset(self, node: Node, idx: Sequence[Dim]) -> Dim:
        if self.flat_shape is not None and node.shape == self.flat_shape and len(idx) == 1:
            return idx[0]
        return linearize(idx, node.shape)

    def load(self, node: Node, idx: Sequence[Dim]) -> ir.Value:
        ty = storage_type(node.dtype)
        ptr = self.b.gep(
            self.buffers[node.id], [self.dim(self.offset(node, idx))], inbounds=True, source_etype=ty
        )
        v = self.b.load(ptr, typ=ty)
        return self.b.icmp_unsigned("!=", v, ir.Constant(ty, 0)) if node.dtype.is_bool else v

    def store(self, ptr: ir.Value, node: Node, flat: Dim, value: ir.Value) -> None:
        ty = storage_type(node.dtype)
        if node.dtype.is_bool:
            value = self.b.zext(value, ty)
        self.b.store(value, self.b.gep(ptr, [self.dim(flat)], inbounds=True, source_etype=ty))

    def branch(self, cond: ir.Value, then: Callable[[], ir.Value], other: Callable[[], ir.Value]) -> ir.Value:
        """``cond ? then() : other()`` evaluating only the taken side (for possibly-empty inputs)."""
        with self.b.if_else(cond) as (then_blk, else_blk):
            with then_blk:
                self._memo.append({})
                tv = then()
                tb = self.b.block
                self._memo.pop()
            with else_blk:
                self._memo.append({})
                ev = other()
                eb = self.b.block
                self._memo.pop()
        phi = self.b.phi(tv.type)
        phi.add_incoming(tv, tb)
        phi.add_incoming(ev, eb)
        return phi

    def in_range(self, j: Dim, d: Dim) -> ir.Value:
        """``0 <= j < d`` as an ``i1``."""
        jv, dv = self.dim(j), self.dim(d)
        lo = self.b.icmp_signed(">=", jv, i64(0))
        return self.b.and_(lo, self.b.icmp_signed("<", jv, dv))

    # ------------------------------------------------------------------ values
    def value(self, node: Node, idx: tuple[Dim, ...], top: bool = False) -> ir.Value:
        """``node`` at ``idx`` (``top``: compute it even if it has a buffer — the kernel's root)."""
        if not top and node.id in self.mat:
            return self.load(node, idx)
        key = (node.id, idx)
        for scope in reversed(self._memo):
            if key in scope:
                return scope[key]
        v = self._compute(node, idx)
        self._memo[-1][key] = v
        return v

    def _compute(self, node: Node, idx: tuple[Dim, ...]) -> ir.Value:
        op = node.op
        kind = OPS[op].kind
        if op == "const":
            return const(node.dtype, node.attrs["value"].reshape(()).item())
        if op == "arange":
            return self._int_as(self.dim(idx[0]), node)
        if op == "dim":
            return self._int_as(self.dim(node.attrs["expr"]), node)
        if kind == "elementwise":
            return emit_elementwise(self.b, node, [self.value(i, idx) for i in node.inputs])
        if op == "gather":
            return self._gather(node, idx)
        if op == "take_along_axis":
            return self._take(node, idx)
        if kind == "movement":
            return self._movement(node, idx)
        raise CompileError(
            f"unsupported by codegen (an asyncjit bug): cannot fuse op {op!r}; it must be materialized"
        )

    def _int_as(self, v: ir.Value, node: Node) -> ir.Value:
        if node.dtype.is_float:
            return self.b.sitofp(v, storage_type(node.dtype))
        if node.dtype.is_bool:
            return self.b.icmp_signed("!=", v, i64(0))
        ty = storage_type(node.dtype)
        return v if ty == I64 else self.b.trunc(v, ty)

    def index_value(self, ind: Node, idx: tuple[Dim, ...]) -> ir.Value:
        """An int index tensor's element as ``i64``, as the reference's ``astype(int64)``:
        signed and unsigned narrower ints extend by their kind; uint64 keeps its bits."""
        raw = self.value(ind, idx)
        if raw.type == I64:
            return raw
        return self.b.zext(raw, I64) if ind.dtype.is_unsigned else self.b.sext(raw, I64)

    def _gather(self, node: Node, idx: tuple[Dim, ...]) -> ir.Value:
        x, ind = node.inputs
        axis = node.attrs["axis"]
        v = self.index_value(ind, (idx[axis],))
        hi = self.b.sub(self.dim(x.shape[axis]), i64(1))
        v = self.b.select(self.b.icmp_signed("<", v, i64(0)), i64(0), v)
        v = self.b.select(self.b.icmp_signed(">", v, hi), hi, v)
        atom = self.bind(v, x.shape[axis])
        return self.value(x, (*idx[:axis], atom, *idx[axis + 1 :]))

    def _take(self, node: Node, idx: tuple[Dim, ...]) -> ir.Value:
        """``x`` at ``index[idx]`` along the axis (clamped), elsewhere at ``idx``."""
        x, ind = node.inputs
        axis = node.attrs["axis"]
        v = self.index_value(ind, idx)
        hi = self.b.sub(self.dim(x.shape[axis]), i64(1))
        v = self.b.select(self.b.icmp_signed(">", v, hi), hi, v)
        v = self.b.select(self.b.icmp_signed("<", v, i64(0)), i64(0), v)
        atom = self.bind(v, x.shape[axis])
        return self.value(x, (*idx[:axis], atom, *idx[axis + 1 :]))

    def _movement(self, node: Node, idx: tuple[Dim, ...]) -> ir.Value:
        op, x = node.op, node.inputs[0]
        if op == "reshape":
            return self.value(x, self._reshape(x.shape, node.shape, idx))
        if op == "permute":
            order = node.attrs["order"]
            inner: list[Dim] = [0] * x.ndim
            for k, src in enumerate(order):
                inner[src] = idx[k]
            return self.value(x, tuple(inner))
        if op == "expand" and len(idx) != x.ndim:  # flat loop: x is one element broadcast
            return self.value(x, (0,) * x.ndim)
        if op == "expand":
            return self.value(x, tuple(0 if d == 1 else i for i, d in zip(idx, x.shape, strict=True)))
        if op == "shrink":
            return self.value(
                x, tuple(s + i * st for i, (s, _, st) in zip(idx, node.attrs["slices"], strict=True))
            )
        if op == "pad":
            return self._pad(node, idx)
        if op == "cat":
            return self._cat(node, idx)
        raise CompileError(f"unsupported by codegen (an asyncjit bug): movement op {op!r}")

    def _reshape(
        self, in_shape: tuple[Dim, ...], out_shape: tuple[Dim, ...], idx: tuple[Dim, ...]
    ) -> tuple[Dim, ...]:
        ins = [k for k, d in enumerate(in_shape) if d != 1]
        outs = [k for k, d in enumerate(out_shape) if d != 1]
        groups: list[tuple[list[int], list[int]]] = []
        a = c = 0
        ok = True
        while a < len(ins) and c < len(outs):
            gi, go = [ins[a]], [outs[c]]
            pi, po = in_shape[ins[a]], out_shape[outs[c]]
            a, c = a + 1, c + 1
            while pi != po:
                if a < len(ins) and (c >= len(outs) or upper(pi) < upper(po)):
                    gi.append(ins[a])
                    pi = pi * in_shape[ins[a]]
                    a += 1
                elif c < len(outs):
                    go.append(outs[c])
                    po = po * out_shape[outs[c]]
                    c += 1
                else:
                    ok = False
                    break
            groups.append((gi, go))
        if not ok or a < len(ins) or c < len(outs):
            groups = [(ins, outs)]
        coords: list[Dim] = [0] * len(in_shape)
        for gi, go in groups:
            flat = linearize([idx[k] for k in go], [out_shape[k] for k in go])
            for pos in range(len(gi) - 1, 0, -1):
                k = gi[pos]
                flat, coords[k] = self._divmod(flat, in_shape[k], gi[:pos], in_shape)
            if gi:
                coords[gi[0]] = flat
        return tuple(coords)

    def _divmod(self, flat: Dim, d: Dim, outer: list[int], shape: tuple[Dim, ...]) -> tuple[Dim, Dim]:
        if isinstance(d, int):
            return (flat // d, flat % d) if d > 0 else (0, 0)  # d == 0: the loop never runs
        fv, dv = self.dim(flat), self.dim(d)
        q = floordiv_runtime(self.b, fv, dv)
        r = self.b.sub(fv, self.b.mul(q, dv))
        outer_extent: Dim = 1
        for k in outer:
            outer_extent = outer_extent * shape[k]
        return self.bind(q, outer_extent), self.bind(r, d)

    def _pad(self, node: Node, idx: tuple[Dim, ...]) -> ir.Value:
        x = node.inputs[0]
        mode = node.attrs.get("mode", "constant")
        shifted = [i - lo for i, (lo, _) in zip(idx, node.attrs["pads"], strict=True)]
        padded = [k for k, (lo, hi) in enumerate(node.attrs["pads"]) if not (lo == 0 and hi == 0)]
        if mode == "edge":
            return self.value(
                x,
                tuple(
                    smin(smax(j, 0), d - 1) if k in padded else j
                    for k, (j, d) in enumerate(zip(shifted, x.shape, strict=True))
                ),
            )
        if mode == "reflect":

            def refl(j: Dim, d: Dim) -> Dim:
                a = smax(j, -j)
                return (d - 1) - smax((d - 1) - a, a - (d - 1))

            return self.value(
                x,
                tuple(
                    refl(j, d) if k in padded else j
                    for k, (j, d) in enumerate(zip(shifted, x.shape, strict=True))
                ),
            )
        fill = const(node.dtype, cast_scalar(node.attrs.get("value", 0), node.dtype))
        cond: ir.Value = ir.Constant(I1, 1)
        for k in padded:
            cond = self.b.and_(cond, self.in_range(shifted[k], x.shape[k]))
        if all(bounds(x.shape[k])[0] >= 1 for k in padded):
            clamped = tuple(
                smin(smax(j, 0), d - 1) if k in padded else j
                for k, (j, d) in enumerate(zip(shifted, x.shape, strict=True))
            )
            return self.b.select(cond, self.value(x, clamped), fill)
        return self.branch(cond, lambda: self.value(x, tuple(shifted)), lambda: fill)

    def _cat(self, node: Node, idx: tuple[Dim, ...]) -> ir.Value:
        axis = node.attrs["axis"]
        a = idx[axis]
        parts: list[tuple[Node, Dim]] = []
        start: Dim = 0
        for x in node.inputs:
            parts.append((x, start))
            start = start + x.shape[axis]
        safe = all(bounds(x.shape[axis])[0] >= 1 for x in node.inputs)

        def at(p: int) -> ir.Value:
            x, o = parts[p]
            j = a - o
            if safe:
                j = smin(smax(j, 0), x.shape[axis] - 1)
            return self.value(x, (*idx[:axis], j, *idx[axis + 1 :]))

        def choose(p: int) -> ir.Value:
            if p == len(parts) - 1:
                return at(p)
            nxt = parts[p + 1][1]
            cond = self.b.icmp_signed("<", self.dim(a), self.dim(nxt))
            if safe:
                return self.b.select(cond, at(p), choose(p + 1))
            return self.branch(cond, lambda: at(p), lambda: choose(p + 1))

        return choose(0)
