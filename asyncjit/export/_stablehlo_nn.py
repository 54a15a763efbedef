"""StableHLO lowerings of the neural-network ops (``asyncjit.graph._nn``): convolutions, pools
and cumulative sums as windows, registered into the exporter's table."""

from __future__ import annotations

from ..graph import Node, reduce_identity
from ._writer import ExportError, Lower, _arr, _name, _padding, _reduce_window, _static, _Writer


def _lower_pool(w: _Writer, n: Node) -> str:
    """Max pools (padding never wins: it is -inf / int min, the reduction's identity)."""
    (x,) = n.inputs
    if n.attrs["mode"] != "max" or n.attrs["ceil_mode"]:
        raise ExportError("pool: only max pools without ceil_mode are exported")
    r = n.ndim - 2
    pads = [(int(lo), int(hi)) for lo, hi in n.attrs["pads"]]
    return (
        _reduce_window(
            w,
            n,
            _name(w, x),
            w.ty(x),
            "maximum",
            float(reduce_identity("max", n.dtype)),
            [1, 1, *n.attrs["kernel"]],
            strides=[1, 1, *n.attrs["strides"]],
            dilations=[1, 1, *n.attrs["dilations"]],
            lo=[0, 0, *(p[0] for p in pads)],
            hi=[0, 0, *(p[1] for p in pads)],
        )
        if r
        else _name(w, x)
    )


def _lower_cumsum(w: _Writer, n: Node) -> str:
    """Inclusive (optionally reversed) running sums as a ``reduce_window`` over the axis."""
    (x,) = n.inputs
    if n.attrs.get("exclusive", False):
        raise ExportError("cumsum: exclusive sums are not exported")
    axis = int(n.attrs["axis"])
    size = _static([n.shape[axis]], n)[0]
    window = [size if a == axis else 1 for a in range(n.ndim)]
    before = [size - 1 if a == axis else 0 for a in range(n.ndim)]
    zero = [0] * n.ndim
    lo, hi = (zero, before) if n.attrs.get("reverse", False) else (before, zero)
    return _reduce_window(w, n, _name(w, x), w.ty(x), "add", 0.0, window, lo=lo, hi=hi)


def _lower_conv(w: _Writer, n: Node) -> str:
    """N-d convolution (ONNX layout), groups and dilations; a bias is broadcast and added."""
    x, wt = n.inputs[0], n.inputs[1]
    r = n.ndim - 2
    sp = ", ".join(str(i) for i in range(r))
    pads = [(int(lo), int(hi)) for lo, hi in (_static(list(p), n) for p in n.attrs["pads"])]
    attrs = (
        f"dimension_numbers = #stablehlo.conv<[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]>, "
        f"window_strides = {_arr(n.attrs['strides'])}, padding = {_padding(pads)}, "
        f"lhs_dilation = {_arr([1] * r)}, rhs_dilation = {_arr(n.attrs['dilations'])}, "
        f"feature_group_count = {int(n.attrs['groups'])} : i64, batch_group_count = 1 : i64"
    )
    out = w.op(w.fresh(), "convolution", [_name(w, x), _name(w, wt)], [w.ty(x), w.ty(wt)], w.ty(n), attrs)
    if len(n.inputs) == 3:
        bias = n.inputs[2]
        b = w.op(
            w.fresh(),
            "broadcast_in_dim",
            [_name(w, bias)],
            [w.ty(bias)],
            w.ty(n),
            "broadcast_dimensions = array<i64: 1>",
        )
        out = w.op(w.fresh(), "add", [out, b], [w.ty(n), w.ty(n)], w.ty(n))
    return out


NN_LOWERINGS: dict[str, Lower] = {
    "pool": _lower_pool,
    "cumsum": _lower_cumsum,
    "conv": _lower_conv,
}
