"""The differential fuzzer's engine: one ``GraphCase`` through every way of running a plan, each
compared with ``asyncjit.reference`` element by element.

Paths: ``compile`` (one plan for every binding), ``fixed`` (``compile(fixed=...)`` at the
binding), ``jit`` (the graph re-traced by ``asyncjit.jit``, with ``dynamic`` dims when the inputs
carry every var, else static shapes) and ``execute``
(a loaded plan on a device, through ``LoadedExecutable.execute``). Inputs go in C order, Fortran
order or as strided views.

Comparison (``compare``): ints and bools exactly; floats within ``tolerance_ulps`` ulps *of the
output dtype* (NaN matches NaN, inf matches only the same inf, -0.0 matches 0.0). There is no
quota of wrong elements. The reference is re-evaluated with every rounding perturbed within its
bound (``perturbed_runs``: each float op's result moved by its error bound, each dot product by
the float32 accumulation bound, ``a*b + c`` by an ulp of the product for FMA contraction). Where
those runs move the reference, the compiled value may differ by twice as much (the reference's
own conditioning); where they flip an int or bool or make a NaN/inf appear, the position is
skipped (a cast of 2.9999998 vs 3.0000002, a dot product whose float32 partial sums overflow).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from strategies_case import GraphCase

from asyncjit import Tensor, Var, jit, reference
from asyncjit.compiler import compile as aj_compile
from asyncjit.graph import OPS, Node, defined_var, make_node, toposort
from asyncjit.graph._ops import COMPARISONS
from asyncjit.passes._graph import Graph
from asyncjit.passes._refine import refine
from asyncjit.symbolic import DataVar, evaluate, free_vars

__all__ = ["LAYOUTS", "PATHS", "Mismatch", "check_case", "compare", "perturbed_runs", "tolerance_ulps"]

PATHS = ("compile", "fixed", "jit", "execute")
LAYOUTS = ("C", "F", "strided")

# Error bounds in ulps of a float op's result (tests/test_codegen_mathfn.py measures them);
# ops not listed are exact (movement, compare, cast, abs, max, ...). add/mul/div/sqrt: 0.5,
# rounded up: FMA contraction of a*b+c moves a result by up to one ulp of the product.
_OP_ULPS = {
    "add": 1.0, "sub": 1.0, "mul": 1.0, "div": 1.0, "sqrt": 1.0, "rsqrt": 2.0, "recip": 1.0,
    "exp": 1.0, "log": 1.0, "pow": 1.0, "sin": 1.0, "cos": 1.0, "tanh": 2.0, "sigmoid": 3.0,
    "erf": 2.0, "gelu": 4.0, "reduce": 1.0,
}  # fmt: skip
_DOT_OPS = ("matmul", "conv1d", "conv")
_PERIODIC = ("sin", "cos")
# erf and gelu are specified to an absolute error (tests/test_codegen_mathfn.py ABS_BOUND): in the
# far negative tail gelu's value (< 1e-7) carries no relative accuracy
_OP_ABS = {"erf": 2e-7, "gelu": 1e-6}


def tolerance_ulps(outputs: Sequence[Node]) -> float:
    """Allowed distance in output-dtype ulps: 2 plus the error bounds of the float ops on the way
    (per-op errors add up along a chain before any amplification, which ``perturbed_runs``
    catches)."""
    total = 2.0
    for n in toposort(list(outputs)):
        if n.dtype.is_float and n.op in _OP_ULPS:
            total += _OP_ULPS[n.op]
    return total


def _ulp(values: np.ndarray) -> np.ndarray:
    """One ulp of each value in its own dtype, as float64 (denormal spacing at 0; 0 for inf/NaN)."""
    with np.errstate(all="ignore"):
        sp = np.spacing(np.abs(values)).astype(np.float64)
    return np.where(np.isfinite(sp), sp, 0.0)


def _is_product(node: Node) -> bool:
    while node.op in ("expand", "reshape", "neg"):
        node = node.inputs[0]
    return node.op == "mul"


def _reduce_bound(node: Node, value: np.ndarray, x: np.ndarray) -> np.ndarray:
    """How far a float ``sum``/``prod`` may move when accumulated in float64 in another order:
    one ulp of the output plus ``n`` float64 units of ``sum(|x|)`` (a sum) or of the value (a
    product); inf where some order could overflow (or, for a product, underflow) midway while
    this one did not: ``sum(|x|)`` beyond float64, or the big (small) factors' product beyond
    float64's range. Those positions are order dependent by the documented semantics."""
    axes = tuple(node.attrs["axes"])
    n = int(np.prod([x.shape[a] for a in axes]))
    with np.errstate(all="ignore"):
        mag = np.abs(x.astype(np.float64))
        # inf and NaN elements give inf/NaN in any order; only the finite ones can overflow
        mag = np.where(np.isfinite(mag), mag, 0.0)
        if node.attrs["op"] == "sum":
            scale = np.sum(mag, axis=axes, keepdims=True)
        else:
            logs = np.log2(np.where(mag > 0, mag, 1.0))
            big = np.sum(np.where(logs > 0, logs, 0.0), axis=axes, keepdims=True)
            small = np.sum(np.where(logs < 0, logs, 0.0), axis=axes, keepdims=True)
            overflow = (big >= 1024) | (small <= -1022)
            scale = np.where(overflow, np.inf, np.abs(value.astype(np.float64)))
        return _ulp(value) + n * 2.0**-53 * scale.reshape(value.shape)


def _winograd_shaped(node: Node) -> bool:
    """A float32 3x3 conv with stride and dilation 1, one group, NCHW: what Winograd's
    ``F(2x2, 3x3)`` may compute (``docs/semantics.md``)."""
    from asyncjit.graph._nn import conv_layout

    a = node.attrs
    return (
        node.op == "conv"
        and node.dtype.name == "float32"
        and tuple(int(d) for d in node.inputs[1].shape[2:]) == (3, 3)
        and tuple(a["strides"]) == (1, 1)
        and tuple(a["dilations"]) == (1, 1)
        and a["groups"] == 1
        and not any(conv_layout(a))
    )


def _winograd_overflow(node: Node, args: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Outputs (of ``shape``) a Winograd conv may give as inf or NaN while the exact result is
    finite: its input transform sums up to 4 inputs of a 4x4 patch (any channel's, whatever the
    weight), and its products and sums reach 16 times ``sum_c max|x_c| * sum |w_oc|`` over the
    patch; a non-finite input in the patch may turn into NaN there (inf - inf)."""
    from numpy.lib.stride_tricks import sliding_window_view

    x, w = args[0].astype(np.float64), args[1].astype(np.float64)
    (pt, _), (pl, _) = node.attrs["pads"]
    n, c, h, wd = x.shape
    oh, ow = shape[2:]
    mag = np.where(np.isfinite(x), np.abs(x), np.inf)
    # output (i, j) reads the patch of its 2x2 tile: input rows i - 1 - pt .. i + 3 - pt (columns
    # alike), so input row r sits at row r + pt + 1 of a zero frame and the patch is a 5x5 window
    padded = np.zeros((n, c, max(oh + 4, h + pt + 1), max(ow + 4, wd + pl + 1)))
    padded[:, :, pt + 1 : pt + 1 + h, pl + 1 : pl + 1 + wd] = mag
    patch = sliding_window_view(padded[:, :, : oh + 4, : ow + 4], (5, 5), axis=(2, 3)).max(axis=(-1, -2))
    limit = float(np.finfo(np.float32).max)
    with np.errstate(all="ignore"):
        spread = np.einsum("nchw,oc->nohw", patch, np.abs(w).sum(axis=(2, 3)))
    return (4 * patch.max(axis=1, keepdims=True) > limit) | ~(16 * spread <= limit)


def _divisor_lost(args: list[np.ndarray], nominal: list[np.ndarray] | None, at: int) -> np.ndarray | bool:
    """Where argument ``at``, a divisor, was moved by the rounding bounds before it by its own
    size or more (against its ``nominal`` value): it may be 0 or change sign there, so a
    quotient, a ``//`` or a ``mod`` by it may come out anywhere, infinities included. A float32
    conv whose +-9e16 terms cancel gave 0 here and 1.57e6 exactly; an FFT conv's exact 0 in a
    DFT basis's sine row of bin 0 or k/2 stands where the reference sums the basis's rounded
    zeros (1e-17) times the inputs, and the FFT's bound spans 0, which no perturbed run reaches."""
    if nominal is None or nominal[at].shape != args[at].shape:
        return False
    with np.errstate(all="ignore"):
        d, d0 = args[at].astype(np.float64), nominal[at].astype(np.float64)
        return (np.abs(d - d0) >= np.abs(d0)) | (np.isfinite(d) != np.isfinite(d0))


def _compared(node: Node, value: np.ndarray, args: list[np.ndarray], nominal: list[np.ndarray]) -> np.ndarray:
    """A float comparison, flipped where the rounding before it moved its operands by as much as
    they differ (they may compare either way: the flip makes the position skipped). Sampling
    alone misses equality: an FFT conv's exact 0 in a DFT basis's sine row of bin k/2, where
    the reference sums the basis's rounded zeros (1e-17), compared ``!=`` with a 0."""
    if not node.inputs[0].dtype.is_float or any(
        n.shape != a.shape for n, a in zip(nominal, args, strict=True)
    ):
        return value
    with np.errstate(all="ignore"):
        a, b = (x.astype(np.float64) for x in args)
        a0, b0 = (x.astype(np.float64) for x in nominal)
        moved = np.abs(a - a0) + np.abs(b - b0)
        near = (moved > 0) & (np.abs(a0 - b0) <= moved)
    return np.where(np.broadcast_to(near, value.shape), ~value, value)


def _fft_shaped(node: Node) -> bool:
    """A float32 conv1d whose constant weight is a windowed DFT basis: what the compiler may run
    by FFT (``codegen._convfft``, ``docs/semantics.md``)."""
    from asyncjit.passes._fusion import conv1d_fft_sign

    return conv1d_fft_sign(node) is not None


def _fft_bound(node: Node, args: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The FFT's error at each output (of ``shape``): ``(4 log2 K + 4) u sum |win x|`` over the
    output's frame (every FFT intermediate is a partial sum of the windowed frame's terms, each
    stage rounds it twice, the window's product and the basis's 1.5-ulp match add two), the
    same for every row of a frame; inf where a frame holds a non-finite input or that sum may
    overflow float32 (the FFT mixes every sample of a frame into every row)."""
    from numpy.lib.stride_tricks import sliding_window_view

    x, w = args[0].astype(np.float64), args[1].astype(np.float64)
    k = w.shape[2]
    lo, hi = (int(p) for p in node.attrs["padding"])
    stride = int(node.attrs["stride"])
    win = np.abs(w[0, 0])
    padded = np.pad(x[:, 0], ((0, 0), (lo, hi)))
    frames = sliding_window_view(padded, k, axis=1)[:, ::stride][:, : shape[2]]  # [n, lout, k]
    with np.errstate(all="ignore"):
        mag = np.where(np.isfinite(frames), np.abs(frames), np.inf)
        total = (mag * win).sum(axis=2)  # an inf times a zero window value: NaN, unknown below
        bound = (4 * np.log2(k) + 4) * 2.0**-24 * total
        unknown = ~(2 * total <= float(np.finfo(np.float32).max)) | ~np.isfinite(frames).all(axis=2)
    return np.broadcast_to(np.where(unknown, np.inf, bound)[:, None, :], shape)


_DIVISOR = {"div": 1, "recip": 0, "rsqrt": 0}
"""Ops that divide by an argument (its index): near 0 their result is unbounded."""


def _perturb(
    node: Node,
    value: np.ndarray,
    args: list[np.ndarray],
    bindings: Mapping[str, int],
    rng: np.random.Generator,
    sign: int,
    nominal: list[np.ndarray] | None = None,
) -> np.ndarray:
    """``value`` moved within its rounding bound (``sign``: all up, all down, 0 at random);
    ``nominal``: the op's arguments in the unperturbed reference run."""
    if node.op in COMPARISONS and nominal is not None and value.size:
        return _compared(node, value, args, nominal)
    if not node.dtype.is_float or value.size == 0:
        return value
    if node.op in _DOT_OPS:
        # float32 accumulation in any order: |error| <= (K + 1) * u * sum(|a*b|), here as a value;
        # then its one rounding to the output dtype, which that error may push across a rounding
        # boundary: an ulp (a float16 conv near 32768 came out one ulp, 32, from the reference's
        # rounding of the exact sum; a float32 one with a denormal result, 1.75e-40, one ulp,
        # 1.4e-45, where the relative bound is smaller still)
        k = int(args[0].shape[-1]) if node.op == "matmul" else int(np.prod(args[1].shape[1:]))
        with np.errstate(all="ignore"):
            mags = OPS[node.op].reference(node, [np.abs(a) for a in args], bindings).astype(np.float64)
            bound = (k + 1) * 2.0**-24 * mags + _ulp(value)
            if _winograd_shaped(node):
                bound = np.where(_winograd_overflow(node, args, value.shape), np.inf, bound)
            if _fft_shaped(node):
                bound = np.maximum(bound, _fft_bound(node, args, value.shape))
    elif node.op == "pool" and node.attrs["mode"] == "avg":
        # each window summed in float32 (float64 for float64), then divided: like a dot of the
        # window with ones, |error| <= (taps + 1) * u * mean(|x|) plus the division's rounding;
        # a window whose float32 sum of |x| may overflow may come out as anything
        taps = int(np.prod(node.attrs["kernel"]))
        eps = 2.0**-53 if value.dtype == np.float64 else 2.0**-24
        with np.errstate(all="ignore"):
            mags = OPS["pool"].reference(node, [np.abs(args[0])], bindings).astype(np.float64)
            bound = (taps + 1) * eps * mags + _ulp(value)
            limit = np.finfo(np.float64 if value.dtype == np.float64 else np.float32).max
            bound = np.where(mags * taps > limit, np.inf, bound)
    elif node.op == "reduce" and node.attrs["op"] in ("sum", "prod") and node.attrs["axes"]:
        bound = _reduce_bound(node, value, args[0])
    elif node.op == "mod":
        # exact itself, but where the dividend is 2^20 times the divisor or more, a few ulps of the
        # dividend (a conv's float32 sum: 3.36e25 one ulp off, mod 9.2e18) change the result
        # anywhere in [0, divisor); perturbed runs can miss that, the shift wrapping round
        # (and, as for a division, anywhere where its divisor may be 0: ``_divisor_lost``; and
        # where the rounding before it moves the quotient by half a period or more: an FFT conv's
        # -1.8488e-4 for the reference's -1.8479e-4, within its bound, as the divisor of 2.0)
        with np.errstate(all="ignore"):
            a, d = args[0].astype(np.float64), args[1].astype(np.float64)
            ratio = np.abs(a) / np.abs(d)
            lost = (ratio >= 2.0**20) | _divisor_lost(args, nominal, 1)
            if nominal is not None and all(n.shape == x.shape for n, x in zip(nominal, args, strict=True)):
                q0 = nominal[0].astype(np.float64) / nominal[1].astype(np.float64)
                lost = lost | (np.isfinite(q0) & ~(np.abs(a / d - q0) < 0.5))
        bound = np.where(np.broadcast_to(lost, value.shape), np.inf, 0.0)
    elif node.op == "idiv" and node.dtype.is_float:
        # a float ``//``: exact itself, but anything where its divisor may be 0
        bound = np.where(np.broadcast_to(_divisor_lost(args, nominal, 1), value.shape), np.inf, 0.0)
    elif node.op == "cumsum" and _is_product(node.inputs[0]):
        # a product contracted into the running sum (an FMA) skips its rounding, so one that
        # overflowed here may not there (-inf + inf gave NaN here, +inf compiled): a line of the
        # scan holding an overflowed product may come out as anything
        overflow = np.any(np.isinf(args[0]), axis=int(node.attrs["axis"]), keepdims=True)
        bound = np.where(np.broadcast_to(overflow, value.shape), np.inf, 0.0)
    elif node.op in _OP_ULPS:
        bound = np.maximum(_OP_ULPS[node.op] * _ulp(value), _OP_ABS.get(node.op, 0.0))
        if node.op in _PERIODIC and nominal is not None and nominal[0].shape == args[0].shape:
            # a sin/cos whose argument the rounding bounds before it move by a radian or more
            # (a float32 matmul of 1.1e24, one ulp 7e16 apart) may come out anywhere in [-1, 1];
            # three perturbed runs sample such a spread, they cannot bound it
            with np.errstate(all="ignore"):
                shift = np.abs(args[0].astype(np.float64) - nominal[0].astype(np.float64))
                lost = (shift >= 1.0) | (np.isfinite(args[0]) != np.isfinite(nominal[0]))
            bound = np.where(np.broadcast_to(lost, value.shape), np.inf, bound)
        at = _DIVISOR.get(node.op)
        if at is not None:
            bound = np.where(np.broadcast_to(_divisor_lost(args, nominal, at), value.shape), np.inf, bound)
        if node.op in ("add", "sub") and any(_is_product(i) for i in node.inputs):
            # a*b + c contracted to an FMA skips the rounding of a*b: up to an ulp of the product,
            # and anything where that product overflowed here
            with np.errstate(all="ignore"):
                bound = bound + np.maximum(*(_ulp(np.abs(a).astype(value.dtype)) for a in args))
                products = [a for a, i in zip(args, node.inputs, strict=True) if _is_product(i)]
                overflow = np.any([np.broadcast_to(np.isinf(a), value.shape) for a in products], axis=0)
                bound = np.where(overflow, np.inf, bound)
    else:
        return value
    step = sign * np.ones(value.shape) if sign else rng.uniform(-1.0, 1.0, value.shape)
    with np.errstate(all="ignore"):
        moved = value.astype(np.float64) + step * bound
        out = np.where(np.isfinite(value), moved, value.astype(np.float64))
        # a dot whose |terms| overflow float32 may come out as anything: +inf in the "up" run,
        # -inf in the "down" run, NaN in the random one (so a later comparison flips both ways)
        unknown = np.inf * sign if sign else np.nan
        out = np.where(np.isinf(bound) | np.isnan(bound), unknown, out)
        return out.astype(value.dtype)


def _run_perturbed(
    outputs: Sequence[Node],
    feed: Mapping[int, np.ndarray],
    bindings: Mapping[str, int],
    rng: np.random.Generator,
    sign: int | None,
    nominal: Mapping[int, np.ndarray] | None = None,
) -> dict[int, np.ndarray]:
    """Every node's value in a reference run with each rounding moved (``sign`` None: none
    moved, the nominal run whose values ``nominal`` gives the perturbed runs)."""
    values: dict[int, np.ndarray] = {}
    for node in toposort(list(outputs)):
        if node.op == "placeholder":
            values[node.id] = feed[node.id]
            continue
        args = [values[i.id] for i in node.inputs]
        with np.errstate(all="ignore"):
            value = OPS[node.op].reference(node, args, bindings)
        made = defined_var(node)
        if made is not None:  # a data-dependent size, as the reference interpreter binds it
            bindings = {**bindings, made[0].name: int(value.shape[made[1]])}
        if sign is None:
            values[node.id] = value
            continue
        base = None if nominal is None else [nominal[i.id] for i in node.inputs]
        values[node.id] = _perturb(node, value, args, bindings, rng, sign, base)
    return values


def perturbed_runs(
    outputs: Sequence[Node], feed: Mapping[int, np.ndarray], bindings: Mapping[str, int], seed: int
) -> list[list[np.ndarray]]:
    """The reference re-run three times with every rounding moved within its bound: all up, all
    down, and at random."""
    rng = np.random.default_rng(seed)
    nominal = _run_perturbed(outputs, feed, bindings, rng, None)
    runs = [_run_perturbed(outputs, feed, bindings, rng, sign, nominal) for sign in (1, -1, 0)]
    return [[run[n.id] for n in outputs] for run in runs]


def _close(a: np.ndarray, b: np.ndarray, tol: float, slack: np.ndarray | float = 0.0) -> np.ndarray:
    """Elementwise: a and b equal as values within ``tol`` ulps of b's dtype (or ``slack``)."""
    if a.dtype.kind != "f":
        return np.asarray(a == b)
    with np.errstate(all="ignore"):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(b64)
        near = np.abs(a64 - b64) <= np.maximum(tol * np.maximum(_ulp(b), _ulp(a)), slack)
        return both_nan | (a64 == b64) | (np.isfinite(a64) & np.isfinite(b64) & near)


def compare(
    got: np.ndarray, want: np.ndarray, perturbed: Sequence[np.ndarray], tol: float
) -> tuple[np.ndarray, np.ndarray]:
    """(bad, excused) masks. A float position may differ from ``want`` by ``tol`` ulps, or by
    twice as much as the perturbed references moved there (their rounding is legitimate, so an
    error they show is the reference's own conditioning); a position where a perturbed run is
    not even finite-comparable (NaN/inf appears or vanishes, an int or bool flips) is skipped.
    ``excused`` marks the positions where the perturbed runs moved beyond ``tol``."""
    excused = np.zeros(want.shape, bool)
    skipped = np.zeros(want.shape, bool)
    moved = np.zeros(want.shape)
    for p in perturbed:
        off = ~_close(p, want, tol)
        excused |= off
        if want.dtype.kind != "f":
            skipped |= off
            continue
        with np.errstate(all="ignore"):
            d = np.abs(p.astype(np.float64) - want.astype(np.float64))
            same_special = (np.isnan(p) & np.isnan(want)) | (p == want)
        skipped |= off & ~np.isfinite(d) & ~same_special
        moved = np.maximum(moved, np.where(np.isfinite(d), d, 0.0))
    bad = ~_close(got, want, tol, 2.0 * moved) & ~skipped
    return bad, excused


@attrs.frozen
class Mismatch:
    """One output of one run that differs from the reference (or a run that raised)."""

    path: str
    layout: str
    bindings: Mapping[str, int]
    output: int
    count: int
    detail: str

    def __str__(self) -> str:
        return f"[{self.path}/{self.layout} at {dict(self.bindings)}] output {self.output}: {self.detail}"


def _layout(arr: np.ndarray, layout: str) -> np.ndarray:
    if layout == "F":
        return np.array(arr, order="F")  # np.asfortranarray would make a 0-d array 1-d
    if layout == "strided" and arr.ndim:
        wide = np.empty((*arr.shape[:-1], 2 * arr.shape[-1]), arr.dtype)
        wide[..., ::2] = arr
        view = wide[..., ::2]
        assert view.shape == arr.shape
        return view
    return arr


def _clone_for_jit(graph: Graph, tensors: Sequence[Tensor]) -> list[Tensor]:
    memo: dict[int, Node] = {p.id: t.node for p, t in zip(graph.inputs, tensors, strict=True)}
    for node in graph.nodes:
        if node.id in memo:
            continue
        memo[node.id] = make_node(node.op, tuple(memo[i.id] for i in node.inputs), **dict(node.attrs))
    return [Tensor(memo[o.id]) for o in graph.outputs]


def _jit_runner(
    case: GraphCase, bindings: Mapping[str, int]
) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """The case as a function traced by ``jit``: with ``dynamic`` dims when every placeholder dim
    is an int or a plain var (one plan for every binding), else with static shapes."""
    graph = Graph.of([t.node for t in case.outputs], [p.node for p in case.placeholders])
    dynamic: dict[str, dict[int, tuple[str, int, int]]] = {}
    for k, p in enumerate(case.placeholders):
        for axis, d in enumerate(p.shape):
            if isinstance(d, Var):
                dynamic.setdefault(f"p{k}", {})[axis] = (d.name, d.min, d.max)
            elif not isinstance(d, int):
                dynamic = {}
                graph = refine(graph, dict(bindings))  # static shapes at this binding
                break
        else:
            continue
        break
    declared = {spec[0] for dims in dynamic.values() for spec in dims.values()}
    if graph.vars and not {v.name for v in graph.vars} <= declared:  # a var no input shape carries
        dynamic = {}  # (jit would run it at its upper bound): trace at this binding instead
        graph = refine(graph, dict(bindings))
    source = graph

    def fn(*xs: Tensor) -> list[Tensor]:
        return _clone_for_jit(source, xs)

    params = [
        inspect.Parameter(f"p{k}", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for k in range(len(case.placeholders))
    ]
    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    jitted = jit(fn, name="fuzz", dynamic=dynamic or None)

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        out = jitted(*arrays)
        outs = out if isinstance(out, list | tuple) else [out]
        return [b.to_numpy_blocking() for b in outs]

    return run


_CLIENT: list[Any] = []


def _execute_runner(exe: Any) -> Callable[[list[np.ndarray], Mapping[str, int]], list[np.ndarray]]:
    """The plan loaded on a device (one client per process) and run through ``execute``."""
    from asyncjit.runtime import Client

    if not _CLIENT:
        _CLIENT.append(Client("cpu"))
    client = _CLIENT[0]

    def run(arrays: list[np.ndarray], var_values: Mapping[str, int]) -> list[np.ndarray]:
        loaded = client.load(exe)
        dev = client.device(0)
        bufs = [client.buffer_from_host(a, dev) for a in arrays]
        outs = loaded.execute_blocking(bufs, dict(var_values))
        return [b.to_numpy_blocking() for b in outs]

    return run


def case_bindings(case: GraphCase, names: Sequence[str]) -> list[dict[str, int]]:
    """The drawn binding, every corner of the var bounds, and 1 where allowed, for ``names``
    (the vars of the compiled plan: those of every placeholder, used or not)."""
    byname = {v.name: v for v in case.variables}
    out = [{n: case.bindings[n] for n in names}]
    for corner in itertools.product(*[(byname[n].min, byname[n].max) for n in names]):
        out.append(dict(zip(names, corner, strict=True)))
    unique: list[dict[str, int]] = []
    for b in out:
        if b not in unique:
            unique.append(b)
    return unique


def check_case(
    case: GraphCase,
    paths: Sequence[str] = PATHS,
    layouts: Sequence[str] = LAYOUTS,
    seed: int = 0,
    stats: dict[str, int] | None = None,
) -> tuple[int, list[Mismatch]]:
    """Run ``case`` through ``paths`` at every binding of ``case_bindings``; returns (runs done,
    mismatches). Exceptions from asyncjit on a valid graph are mismatches too. ``stats`` (if
    given) counts the output ``elements`` compared and those ``skipped`` as ill-conditioned."""
    stats = {} if stats is None else stats
    outputs = [t.node for t in case.outputs]
    tol = tolerance_ulps(outputs)
    rng = np.random.default_rng(seed)
    exe = aj_compile(case.outputs, case.placeholders)
    runs = 0
    found: list[Mismatch] = []
    names = [*exe.signature.var_names, *exe.signature.fixed]
    used = {v.name for v in case.graph_vars}
    for k, bindings in enumerate(case_bindings(case, names)):
        full = {**case.bindings, **bindings}
        feed = case.make_inputs(full, seed=case.seed + k)
        arrays = [feed[p] for p in case.placeholders]
        ref_bindings = {n: v for n, v in bindings.items() if n in used}
        want = reference.evaluate(case.outputs, feed, ref_bindings)
        by_id = {p.node.id: a for p, a in zip(case.placeholders, arrays, strict=True)}
        perturbed = perturbed_runs(outputs, by_id, ref_bindings, seed + k)
        for path in paths:
            if path == "jit" and any(p.dtype.name == "float64" for p in case.placeholders):
                continue  # jit turns float64 arrays into float32 (as JAX without x64): by design
            layout = layouts[int(rng.integers(0, len(layouts)))]
            laid = [_layout(a, layout) for a in arrays]
            runs += 1
            try:
                if path == "compile":
                    got = exe.run(laid, bindings)
                elif path == "fixed":
                    got = aj_compile(case.outputs, case.placeholders, fixed=bindings).run(laid, bindings)
                elif path == "jit":
                    got = _jit_runner(case, bindings)(laid)
                else:
                    got = _execute_runner(exe)(laid, bindings)
            except Exception as exc:
                found.append(Mismatch(path, layout, bindings, -1, 1, f"raised {type(exc).__name__}: {exc}"))
                continue
            for j, (g, w) in enumerate(zip(got, want, strict=True)):
                # a data-dependent dim has no binding: the reference's shape is the one to match
                data = any(isinstance(v, DataVar) for v in free_vars(outputs[j].shape))
                shape = w.shape if data else tuple(evaluate(d, ref_bindings) for d in outputs[j].shape)
                if g.shape != w.shape or g.dtype != w.dtype or w.shape != shape:
                    found.append(
                        Mismatch(path, layout, bindings, j, 1, f"{g.dtype}{g.shape} vs {w.dtype}{w.shape}")
                    )
                    continue
                # a perturbed run may flip a data-dependent size: it says nothing about this one
                bad, skipped = compare(g, w, [p[j] for p in perturbed if p[j].shape == w.shape], tol)
                stats["elements"] = stats.get("elements", 0) + int(w.size)
                stats["skipped"] = stats.get("skipped", 0) + int(skipped.sum())
                if bad.any():
                    at = np.argwhere(bad)[:3].tolist() if bad.ndim else [[]]
                    detail = (
                        f"{int(bad.sum())} of {bad.size} differ beyond {tol} ulps, e.g. at {at}: "
                        f"got {g[bad][:3].tolist()} want {w[bad][:3].tolist()}"
                    )
                    found.append(Mismatch(path, layout, bindings, j, int(bad.sum()), detail))
    return runs, found
