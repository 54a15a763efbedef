"""conv1d and the op compositions the models use, run by the reference interpreter, against numpy.

conv1d against direct loops (``conv1d_numpy``), then softmax/log-softmax, layer norm, var/std
and silu/linear/clip; each at the minimum, maximum and a middle binding of its symbolic dims
(see ``ops_helpers.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_helpers import bindings, close, data, ph, run, s, t

from asyncjit import Tensor

# ---------------------------------------------------------------------------------------------
# conv1d


def conv1d_numpy(
    x: np.ndarray, w: np.ndarray, stride: int, padding: tuple[int, int], dilation: int, groups: int
) -> np.ndarray:
    """The textbook loop: out[n, o, l] = sum_{c, k} xpad[n, g*C/g + c, l*stride + k*dilation] * w[o, c, k]."""
    n, _, length = x.shape
    cout, cg, k = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), padding))
    lout = (length + sum(padding) - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((n, cout, lout))
    og = cout // groups
    for o in range(cout):
        g = o // og
        for pos in range(lout):
            for c in range(cg):
                for kk in range(k):
                    out[:, o, pos] += xp[:, g * cg + c, pos * stride + kk * dilation] * w[o, c, kk]
    return out.astype(np.float32)


class TestConv1d:
    @bindings
    @pytest.mark.parametrize(
        ("cin", "cout", "k", "stride", "padding", "dilation", "groups"),
        [
            (1, 1, 1, 1, 0, 1, 1),
            (2, 3, 3, 1, 1, 1, 1),
            (4, 4, 3, 2, (2, 0), 1, 2),
            (2, 4, 2, 1, (1, 1), 2, 1),
            (4, 2, 3, 3, (2, 2), 2, 2),
            (3, 3, 3, 1, 1, 1, 3),
        ],
    )
    def test_conv1d(
        self,
        b: dict[str, int],
        cin: int,
        cout: int,
        k: int,
        stride: int,
        padding: Any,
        dilation: int,
        groups: int,
    ) -> None:
        """conv1d (PyTorch layout) matches the textbook loop for stride, padding, dilation and groups."""
        length = t + dilation * (k - 1)
        x = ph((s, cin, length))
        a = data((s, cin, length), b)
        w = data((cout, cin // groups, k), b, seed=5)
        bias = data((cout,), b, seed=6)
        out = x.conv1d(
            Tensor.const(w),
            Tensor.const(bias),
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )
        pad = (padding, padding) if isinstance(padding, int) else padding
        want = conv1d_numpy(a, w, stride, pad, dilation, groups) + bias[:, None]
        close(run(out, {x: a}, b), want.astype(np.float32), rtol=1e-5)

    @bindings
    def test_symbolic_padding(self, b: dict[str, int]) -> None:
        """Padding may be symbolic (left-pad a stream to a fixed window)."""
        x = ph((1, 1, t))
        a = data((1, 1, t), b)
        w = np.ones((1, 1, 2), np.float32)
        out = x.conv1d(Tensor.const(w), padding=(6 - t, 0))
        assert out.shape == (1, 1, 5)
        close(run(out, {x: a}, b), conv1d_numpy(a, w, 1, (6 - b["t"], 0), 1, 1))

    def test_errors(self) -> None:
        """Channel mismatches and kernels longer than the input are rejected naming the shapes."""
        w = Tensor.const(np.zeros((2, 3, 3), np.float32))
        with pytest.raises(
            ValueError, match=r"conv1d: x \(1, 4, 8\) and w \(2, 3, 3\) with groups=1: need C == 3\*1"
        ):
            ph((1, 4, 8)).conv1d(w)
        with pytest.raises(ValueError, match=r"conv1d: input length t can be shorter than the kernel span"):
            ph((1, 3, t)).conv1d(w)
        with pytest.raises(
            ValueError, match=r"conv1d needs x\[N, C, L\] and w\[O, C/g, K\], got \(3, 8\) and \(2, 3, 3\)"
        ):
            ph((3, 8)).conv1d(w)
        with pytest.raises(ValueError, match=r"conv1d stride must be an int >= 1, got 0"):
            ph((1, 3, 8)).conv1d(w, stride=0)


# ---------------------------------------------------------------------------------------------
# compositions the models use


class TestCompositions:
    @bindings
    @pytest.mark.parametrize("axis", [-1, 0])
    def test_softmax_and_log_softmax(self, b: dict[str, int], axis: int) -> None:
        """softmax and log_softmax over a symbolic axis match the stable numpy formulas."""
        x = ph((t, 5))
        a = data((t, 5), b).astype(np.float64)
        e = np.exp(a - a.max(axis, keepdims=True))
        sm = e / e.sum(axis, keepdims=True)
        got_sm, got_ls = run([x.softmax(axis), x.log_softmax(axis)], {x: a.astype(np.float32)}, b)
        close(got_sm, sm.astype(np.float32), rtol=1e-5)
        close(got_ls, np.log(sm).astype(np.float32), rtol=1e-5)

    @bindings
    def test_layer_norm(self, b: dict[str, int]) -> None:
        """layer_norm normalises the last axis, then scales and shifts."""
        x = ph((t, 4))
        a = data((t, 4), b).astype(np.float64)
        w, bias = np.array([1, 2, 0.5, -1], np.float32), np.array([0, 1, 0, -1], np.float32)
        mu = a.mean(-1, keepdims=True)
        var = ((a - mu) ** 2).mean(-1, keepdims=True)
        want = (a - mu) / np.sqrt(var + 1e-5) * w + bias
        got = run(x.layer_norm(Tensor.const(w), Tensor.const(bias)), {x: a.astype(np.float32)}, b)
        close(got, want.astype(np.float32), rtol=1e-4)

    @bindings
    @pytest.mark.parametrize("ddof", [0, 1])
    def test_var_std(self, b: dict[str, int], ddof: int) -> None:
        """var/std with ddof over a static axis, and with ddof=0 over a symbolic one."""
        x = ph((t, 4))
        a = data((t, 4), b).astype(np.float64)
        got_v, got_s = run([x.var(1, ddof=ddof), x.std(1, ddof=ddof)], {x: a.astype(np.float32)}, b)
        close(got_v, a.var(1, ddof=ddof).astype(np.float32), rtol=1e-5)
        close(got_s, a.std(1, ddof=ddof).astype(np.float32), rtol=1e-5)
        close(run(x.var(0), {x: a.astype(np.float32)}, b), a.var(0).astype(np.float32), rtol=1e-5)

    @bindings
    def test_silu_linear_clip(self, b: dict[str, int]) -> None:
        """silu, linear (PyTorch weight layout) and clip."""
        x = ph((t, 3))
        a = data((t, 3), b)
        w, bias = data((2, 3), b, seed=9), data((2,), b, seed=10)
        got = run([x.silu(), x.linear(Tensor.const(w), Tensor.const(bias)), x.clip(-1, 1)], {x: a}, b)
        a64 = a.astype(np.float64)
        close(got[0], (a64 / (1 + np.exp(-a64))).astype(np.float32), rtol=1e-6)
        close(got[1], (a64 @ w.T + bias).astype(np.float32), rtol=1e-6)
        close(got[2], np.clip(a, -1, 1))
