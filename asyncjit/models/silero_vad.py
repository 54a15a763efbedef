"""Silero VAD on the ``Tensor`` API, with the published weights read from the ``silero-vad`` package.

The network (one step per chunk), for a chunk of ``n`` new samples at 16 kHz (8 kHz):

1. ``[context | chunk]``: the last 64 (32) samples of the previous chunk, then 512 (256) new
   ones, reflect-padded by 64 (32) samples on the right;
2. an STFT with the file's ``[2F, 1, K]`` basis (K = 256 (128), hop 128 (64)) and the
   magnitude ``sqrt(re^2 + im^2)`` -> ``[B, F, 4]`` with F = 129 (65); the file's graph runs it
   as a ``conv1d``, we fold each frame about its centre and use two half-size matmuls (the
   basis is a DFT basis, even and odd about ``K/2``: half the multiply-adds, see
   ``_stft_magnitude``);
3. four ``conv1d`` + ReLU layers (strides 1, 2, 2, 1; padding 1) -> ``[B, 128, 1]``, which we
   run frame-major as one matmul per tap (``_conv_frames``: four frames are too few for im2col);
4. one LSTM cell, hidden 128, state ``(h, c)``;
5. ReLU, a 1x1 conv (a ``[128] -> [1]`` linear layer) and a sigmoid: the speech probability.

The ONNX file computes step 4 with an ONNX ``LSTM`` op (gate order i, o, f, c) fed by slices
that reorder PyTorch's ``weight_ih``/``weight_hh`` (gate order i, f, g, o); we keep PyTorch's
order and check, when loading, that the file reorders exactly that way.

**Batch invariance.** Every matmul of the network takes its weight stored ``[K, N]``
(transposed once, at build time), never ``W.T`` through strides. The matmul kernels' direct
(small batch) and packed (large batch) drivers then both accumulate each output over ``k`` in
order (K <= 256 here, one cache block), so a stream's results do not depend on how many streams
share its batch: ``vad_mux`` equals per-stream ``SileroVad`` bit for bit. Read as ``W.T``, a
batch of up to 32 took the dot-product driver and larger ones the packed one, which differ in
the last bits (1.5e-5 in a probability after ten recurrent steps), for no speed difference here.

Batch is a dim of the inputs, normally a bounded ``asyncjit.Var("b", 1, max_batch)``, so one
graph serves 1..N streams. Four builders share one network:

* ``build_step``: ``(chunk, h, c) -> (prob, h, c)``;
* ``build_step_state``: the ONNX interface, ``(chunk, state[2, b, 128]) -> (prob, state)``;
* ``build_step_packed``: ends in ``[prob | h | c]``, the layout ``JitRecurrent`` expects;
* ``build_step_slots``: the slot pool of ``StreamMux``: gathers each stream's state and
  audio context from a pool by slot index, runs the step, scatters them back, all in the graph.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from .. import dtypes as dt
from ..codegen._convfft import dft_sign
from ..errors import ArgumentTypeError, DTypeMismatchError, ModelFormatError, ShapeMismatchError
from ..graph import shape_str
from ..recurrent import LstmState, StepTiming
from ..symbolic import Dim, Var
from ..tensor import Tensor
from ..wrapper import Input, InputSpec, JitWrapper, VarSpec
from ._audio import check_chunk, check_sample_rate
from ._silero_weights import (
    HIDDEN,
    ConvLayer,
    SileroWeights,
    default_model_path,
    load_weights,
)
from ._timestamps import SpeechSegment, speech_timestamps
from ._vad_mux import SileroBatchedStep, vad_mux

__all__ = [
    "HIDDEN",
    "ConvLayer",
    "SileroVad",
    "SileroVadJit",
    "VadModel",
    "SileroWeights",
    "build_step",
    "build_step_packed",
    "build_step_slots",
    "build_step_state",
    "default_model_path",
    "load_weights",
    "slot_row_width",
    "SileroBatchedStep",
    "vad_mux",
]


# ---------------------------------------------------------------------------------------------
# the network


def _check_input(t: Tensor, name: str, batch: Dim, width: int) -> None:
    if not isinstance(t, Tensor):
        raise ArgumentTypeError(f"{name} must be a Tensor, got {type(t).__name__}")
    if t.ndim != 2 or t.shape[0] != batch or t.shape[1] != width:
        raise ShapeMismatchError(f"{name} must have shape [{batch}, {width}], got {shape_str(t.shape)}")
    if t.dtype != dt.float32:
        raise DTypeMismatchError(
            f"{name} must be float32, got {t.dtype.name}; cast it with .cast(asyncjit.float32)"
        )


def _folded_stft_basis(w: SileroWeights) -> tuple[np.ndarray, np.ndarray] | None:
    """The STFT basis folded in half, when its symmetry allows it (else None).

    A DFT basis row ``k`` of length ``K`` is even (cos) or odd (sin) about ``K/2``: ``cos[k, n]
    == cos[k, K-n]`` and ``sin[k, n] == -sin[k, K-n]``, with ``sin[k, 0] == sin[k, K/2] == 0``.
    Then ``re = E @ x_even`` and ``im = O @ x_odd`` over ``K/2 + 1`` folded samples
    (``x[n] +- x[K-n]``): half the multiply-adds of the convolution, the same sums up to
    rounding. Both published bases (16 and 8 kHz) are exactly symmetric; a file whose basis is not
    keeps the plain convolution.

    Returns:
        ``(even, odd)``, each ``[K/2 + 1, F]`` (the matmul's ``[K, N]`` layout), or None.
    """
    basis = w.stft_basis[:, 0, :]
    k, f = w.filter_length, w.n_freq
    half = k // 2
    if k != 2 * w.hop or basis.shape != (2 * f, k) or f != half + 1:
        return None
    if (w.frames + 1) * w.hop != w.input_samples + w.reflect_pad:  # frames must tile whole hops
        return None
    n = np.arange(1, half)
    cos, sin = basis[:f], basis[f:]
    if not (
        np.array_equal(cos[:, n], cos[:, k - n])
        and np.array_equal(sin[:, n], -sin[:, k - n])
        and not sin[:, 0].any()
        and not sin[:, half].any()
    ):
        return None
    # stored [K, N] (see "Batch invariance" in the module docstring)
    even = np.ascontiguousarray(cos[:, : half + 1].T)
    odd = np.ascontiguousarray(sin[:, : half + 1].T)
    return even, odd


def _stft_magnitude(w: SileroWeights, chunk: Tensor, b: Dim) -> Tensor:
    """``|STFT|`` of ``chunk [b, context + n]`` reflect-padded on the right, frame-major:
    ``[b, frames, F]`` (the layout ``_conv_frames`` takes).

    With a symmetric basis (``_folded_stft_basis``) each frame ``[a | c]`` (two hops) is folded
    into ``e = [a, 0] + [0, rev(c)]`` and ``o = [a, 0] - [0, rev(c)]`` (``K/2 + 1`` samples each,
    ``rev(c)[n-1] == x[K-n]``) and multiplied by the half bases: two ``[b*frames, K/2+1]``
    matmuls instead of a ``[2F, K]`` convolution. Otherwise: the convolution with the file's basis.
    """
    x = chunk.pad([None, (0, w.reflect_pad)], mode="reflect")
    # a windowed DFT basis (both published ones) stays a conv1d, which the compiler runs by FFT
    folded = None if dft_sign(np.asarray(w.stft_basis)) is not None else _folded_stft_basis(w)
    if folded is None:
        spec = x.unsqueeze(1).conv1d(Tensor.const(w.stft_basis), stride=w.hop)
        re, im = spec.split([w.n_freq, w.n_freq], axis=1)
        return (re * re + im * im).sqrt().permute(0, 2, 1)
    even, odd = folded
    half, f, frames = w.hop, w.n_freq, w.frames
    hops = x.reshape(b, frames + 1, half)
    first = hops.shrink([None, (0, frames), None]).pad([None, None, (0, 1)])
    second = hops.shrink([None, (1, frames + 1), None])
    mirrored = second.gather(2, Tensor.const(np.arange(half - 1, -1, -1, dtype=np.int32))).pad(
        [None, None, (1, 0)]
    )
    e = (first + mirrored).reshape(b * frames, half + 1)
    o = (first - mirrored).reshape(b * frames, half + 1)
    # the bases stored [K, N] (see "Batch invariance" in the module docstring)
    re = e @ Tensor.const(even)
    im = o @ Tensor.const(odd)
    return (re * re + im * im).sqrt().reshape(b, frames, f)


def _conv_frames(x: Tensor, length: int, layer: ConvLayer, b: Dim) -> tuple[Tensor, int]:
    """One encoder layer, ``conv1d`` + bias + ReLU, on frame-major ``x [b, length, cin]``:
    ``([b, length_out, cout], length_out)``.

    The lengths are static and short (4, 4, 2, 1, 1 frames), so the convolution is one matmul
    per tap, ``x[:, rows] @ W[:, :, tap]^T`` over the output frames that tap reaches, summed;
    taps that would only read the zero padding are skipped (the last layer reads one of its
    three). No im2col copy, no layout change between layers, and a sixth fewer multiply-adds
    than ``conv1d`` on the Silero VAD encoder: 6.1 instead of 8.1 us per chunk for STFT and
    encoder at b = 128.
    """
    cout, cin, k = layer.weight.shape
    stride, pad = layer.stride, layer.padding
    length_out, reach = 0, []
    if stride >= 1 and pad >= 0:
        length_out = (length + 2 * pad - k) // stride + 1
        reach = [[t for t in range(length_out) if 0 <= t * stride + tap - pad < length] for tap in range(k)]
    if length_out < 1 or {t for outs in reach for t in outs} != set(range(length_out)):
        # bad parameters (conv1d names them), or an output frame that reads nothing but padding
        # (its value is relu(bias)): the general path
        y = _conv_channels_major(x, layer)
        return y, int(y.shape[1])
    acc: Tensor | None = None
    for tap in range(k):
        outs = reach[tap]
        if not outs:
            continue
        rows = [t * stride + tap - pad for t in outs]  # outs is a contiguous range
        if rows == list(range(length)):
            g = x
        elif rows == list(range(rows[0], rows[-1] + 1)):
            g = x.shrink([None, (rows[0], rows[-1] + 1), None])
        else:
            g = x.gather(1, Tensor.const(np.array(rows, np.int32)))
        w_tap = Tensor.const(np.ascontiguousarray(layer.weight[:, :, tap].T))  # [K, N]: batch invariance
        y = (g.reshape(b * len(outs), cin) @ w_tap).reshape(b, len(outs), cout)
        if len(outs) != length_out:
            y = y.pad([None, (outs[0], length_out - 1 - outs[-1]), None])
        acc = y if acc is None else acc + y
    assert acc is not None  # every output frame is reached by some tap (checked above)
    return (acc + Tensor.const(layer.bias)).relu(), length_out


def _conv_channels_major(x: Tensor, layer: ConvLayer) -> Tensor:
    """``conv1d`` + bias + ReLU through the channels-major ``conv1d`` op, for frame-major ``x``."""
    y = x.permute(0, 2, 1).conv1d(
        Tensor.const(layer.weight), Tensor.const(layer.bias), stride=layer.stride, padding=layer.padding
    )
    return y.relu().permute(0, 2, 1)


def build_step(weights: SileroWeights, chunk: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One Silero VAD step on ``chunk [b, context + n]`` with LSTM state ``h, c [b, 128]``.

    Returns:
        ``(prob [b, 1], h_new [b, 128], c_new [b, 128])``, all float32.

    Raises:
        ShapeMismatchError: an input has the wrong shape (the batch dim of all three must be the
            same dim, e.g. one ``Var``).
        DTypeMismatchError: an input is not float32.
    """
    w = weights
    b = chunk.shape[0] if isinstance(chunk, Tensor) and chunk.ndim else 0
    _check_input(chunk, "chunk", b, w.input_samples)
    _check_input(h, "h", b, HIDDEN)
    _check_input(c, "c", b, HIDDEN)

    x, length = _stft_magnitude(w, chunk, b), w.frames
    for layer in w.encoder:
        x, length = _conv_frames(x, length, layer, b)
    x = x.reshape(b, x.shape[2])  # [b, 1, C] -> [b, C] (the loader checked the length is 1)

    # LSTM cell as one matmul over [x | h]: gates = [x | h] @ [W_ih | W_hh]^T + b_ih + b_hh,
    # with the weight stored transposed (see "Batch invariance" in the module docstring).
    w_cat_t = np.ascontiguousarray(np.concatenate([w.w_ih, w.w_hh], axis=1).T)
    bias = w.b_ih + w.b_hh
    gates = Tensor.cat([x, h], axis=1) @ Tensor.const(w_cat_t) + Tensor.const(bias)
    i_gate, f_gate, g_gate, o_gate = gates.chunk(4, axis=1)  # PyTorch order
    c_new = f_gate.sigmoid() * c + i_gate.sigmoid() * g_gate.tanh()
    h_new = o_gate.sigmoid() * c_new.tanh()

    # the 1x1 conv [1, 128, 1] as a dot product per row: ReLU fuses into the reduction (a
    # matmul with one output column would need ReLU(h) in a buffer of its own)
    head = np.ascontiguousarray(w.head_weight.reshape(1, HIDDEN))
    logit = (h_new.relu() * Tensor.const(head)).sum(axis=1, keepdims=True)
    prob = (logit + Tensor.const(w.head_bias)).sigmoid()
    return prob, h_new, c_new


def build_step_state(weights: SileroWeights, chunk: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
    """The ONNX interface: ``(chunk [b, context + n], state [2, b, 128]) -> (prob [b, 1], state)``."""
    if not isinstance(state, Tensor) or state.ndim != 3 or state.shape[0] != 2 or state.shape[2] != HIDDEN:
        got = shape_str(state.shape) if isinstance(state, Tensor) else type(state).__name__
        raise ShapeMismatchError(f"state must have shape [2, b, {HIDDEN}], got {got}")
    h, c = state[0], state[1]
    prob, h_new, c_new = build_step(weights, chunk, h, c)
    return prob, Tensor.stack([h_new, c_new], axis=0)


def build_step_packed(weights: SileroWeights, chunk: Tensor, h: Tensor, c: Tensor) -> Tensor:
    """``build_step`` with one output ``[b, 1 + 2*128]`` laid out ``[prob | h | c]`` per row,
    the ``[head | h | c]`` layout ``JitRecurrent`` splits (head_len = 1)."""
    prob, h_new, c_new = build_step(weights, chunk, h, c)
    return Tensor.cat([prob, h_new, c_new], axis=1)


def slot_row_width(weights: SileroWeights) -> int:
    """Floats per stream in a slot pool: ``h (128) | c (128) | context`` (320 at 16 kHz)."""
    return 2 * HIDDEN + weights.context_samples


def build_step_slots(
    weights: SileroWeights, samples: Tensor, slots: Tensor, pool: Tensor
) -> tuple[Tensor, Tensor]:
    """One batched step for the streams in ``slots`` of a slot pool, gathered and scattered in-graph.

    Each pool row holds one stream's ``[h | c | context]`` (``slot_row_width`` floats; a zero row
    is a fresh stream, exactly like a new ``OnnxWrapper``). The step gathers the rows of
    ``slots``, prepends each row's context to its new samples, runs the network, and writes
    ``[h_new | c_new | last context samples of the chunk]`` back to the same rows.

    Args:
        samples: ``[b, n]`` float32, the new samples only (512 at 16 kHz, 256 at 8 kHz).
        slots: ``[b]`` int32/int64, distinct row indices of ``pool``. Out-of-range indices read
            a clamped row and write nowhere (the reference semantics of gather/scatter).
        pool: ``[rows, slot_row_width]`` float32 (``rows`` may be a bounded var: the rows in use).

    Returns:
        ``(prob [b], new_pool)``, ``new_pool`` shaped like ``pool``.
    """
    w = weights
    b = samples.shape[0] if isinstance(samples, Tensor) and samples.ndim else 0
    _check_input(samples, "samples", b, w.chunk_samples)
    width = slot_row_width(w)
    if not isinstance(pool, Tensor) or pool.ndim != 2 or pool.shape[1] != width or pool.dtype != dt.float32:
        got = f"{pool.dtype.name}{shape_str(pool.shape)}" if isinstance(pool, Tensor) else type(pool).__name__
        raise ShapeMismatchError(f"pool must be float32 [max_streams, {width}], got {got}")
    if not isinstance(slots, Tensor) or slots.ndim != 1 or slots.shape[0] != b or not slots.dtype.is_int:
        got = (
            f"{slots.dtype.name}{shape_str(slots.shape)}"
            if isinstance(slots, Tensor)
            else type(slots).__name__
        )
        raise ShapeMismatchError(f"slots must be an int tensor of shape [{b}], got {got}")

    ctx = w.context_samples
    rows = pool.gather(0, slots)
    h, c, context = rows.split([HIDDEN, HIDDEN, ctx], axis=1)
    chunk = Tensor.cat([context, samples], axis=1)
    prob, h_new, c_new = build_step(w, chunk, h, c)
    # OnnxWrapper keeps x[..., -context:] of [context | chunk] as the next context
    next_context = chunk.shrink([None, (w.chunk_samples, w.input_samples)])
    new_pool = pool.scatter(0, slots, Tensor.cat([h_new, c_new, next_context], axis=1))
    return prob.reshape(b), new_pool


# ---------------------------------------------------------------------------------------------
# the per-stream user API


@attrs.frozen(eq=False)
class VadModel:
    """What ``SileroVadJit`` builds from: the weights and the largest batch one plan serves."""

    weights: SileroWeights
    max_batch: int = 1


class SileroVadJit(JitWrapper[VadModel]):
    """The Silero VAD step as a ``JitWrapper``: inputs ``chunk [B, ctx+n]``, ``state_h``,
    ``state_c [B, 128]`` at their maximum batch, var ``b`` (``1..max_batch``) selects the rows
    that run; the output is ``[prob | h | c]`` per row (``build_step_packed``)."""

    chunk = Input()
    state_h = Input()
    state_c = Input()
    b = VarSpec(1, lambda model: model.max_batch)

    def build(self, model: VadModel, chunk: Tensor, state_h: Tensor, state_c: Tensor, b: Var) -> Tensor:
        return build_step_packed(model.weights, chunk[:b], state_h[:b], state_c[:b])

    def pack_state(self, state: LstmState) -> None:
        """``RecurrentJit``: copy one stream's state into row 0."""
        self.state_h_mut()[0] = state.h
        self.state_c_mut()[0] = state.c

    @classmethod
    def prepared(cls, weights: SileroWeights, max_batch: int = 1, device: Any = None) -> SileroVadJit:
        """A prepared plan for ``1..max_batch`` streams (batch fixed at compile time when 1)."""
        jit = cls(VadModel(weights, max_batch), device=device)
        if max_batch == 1:
            jit.with_b_fixed(1)
        jit.prepare(
            InputSpec.f32((max_batch, weights.input_samples)),
            InputSpec.f32((max_batch, HIDDEN)),
            InputSpec.f32((max_batch, HIDDEN)),
        )
        return jit


class SileroVad:
    """Speech probability for one audio stream, chunk by chunk, like the package's ``OnnxWrapper``.

    The object keeps the stream's LSTM state and the last ``context_samples`` of audio between
    calls; ``reset()`` starts a new stream. The plan is compiled once per process (the compile
    cache serves later instances) and replayed with one native call per chunk.

    Args:
        sample_rate: 16000 (chunks of 512 samples) or 8000 (256 samples).
        device: a runtime ``Device`` or an index into the default client's devices.

    Raises:
        AudioFormatError: an unsupported sample rate. ModelFormatError: the ``silero-vad``
            package or its ONNX file is missing or not the network we expect.
    """

    def __init__(
        self, sample_rate: int = 16000, device: Any = None, *, weights: SileroWeights | None = None
    ) -> None:
        self.sample_rate = check_sample_rate(sample_rate)
        self.weights = weights if weights is not None else load_weights(self.sample_rate)
        if self.weights.sample_rate != self.sample_rate:
            raise ModelFormatError(
                f"weights are for {self.weights.sample_rate} Hz, "
                f"SileroVad was asked for {self.sample_rate} Hz"
            )
        self._jit = SileroVadJit.prepared(self.weights, 1, device)
        ctx, width = self.weights.context_samples, self.weights.input_samples
        # [context | chunk] of the next step; the context part is refreshed after each step.
        self._chunk = np.zeros((1, width), np.float32)
        # Two [prob | h | c] rows used in turn: step k reads h, c from one (zero-copy views) and
        # writes the other, so no state is copied between steps.
        self._rows = (np.zeros((1, 1 + 2 * HIDDEN), np.float32), np.zeros((1, 1 + 2 * HIDDEN), np.float32))
        self._cur = 0
        self._ctx = ctx
        self._chunk_shape = (self.weights.chunk_samples,)
        self._last_timing: StepTiming | None = None
        exe = self._jit._ready().loaded.executable
        self._bound: tuple[Any, Any] | None = None
        if hasattr(exe, "bind"):
            # CPU plan: replay on this thread with the arrays above, validated once here (the
            # path ONNX Runtime's session.run takes too); other devices go through the runtime.
            bound = [
                exe.bind(
                    [self._chunk, self._rows[k][:, 1 : 1 + HIDDEN], self._rows[k][:, 1 + HIDDEN :]],
                    [self._rows[1 - k]],
                )
                for k in (0, 1)
            ]
            self._bound = (bound[0], bound[1])

    def __repr__(self) -> str:
        return f"<SileroVad {self.sample_rate} Hz chunk={self.chunk_samples}>"

    @property
    def chunk_samples(self) -> int:
        """Samples per call: 512 at 16 kHz, 256 at 8 kHz."""
        return self.weights.chunk_samples

    @property
    def last_timing(self) -> StepTiming | None:
        """Pack / exec / read seconds of the latest chunk (``recurrent.StepTiming``)."""
        return self._last_timing

    @property
    def state(self) -> LstmState:
        """A copy of the stream's LSTM state ``(h, c)``."""
        row = self._rows[self._cur][0]
        return LstmState(row[1 : 1 + HIDDEN].copy(), row[1 + HIDDEN :].copy())

    def _check(self, chunk: object) -> np.ndarray:
        # Fast accept for the common case (one float32 chunk of finite samples: a finite float64 sum
        # proves every sample finite); anything else gets check_chunk's full diagnosis.
        if (
            type(chunk) is np.ndarray
            and chunk.dtype == np.float32
            and chunk.shape == self._chunk_shape
            and np.isfinite(np.add.reduce(chunk, dtype=np.float64))
        ):
            return chunk
        x = check_chunk(chunk, self.sample_rate)
        if x.ndim == 2 and x.shape[0] == 1:  # [1, n]: one chunk, as the package's model takes it
            row: np.ndarray = x[0]
            return row
        if x.ndim != 1:
            raise ShapeMismatchError(
                f"SileroVad is one stream: it takes [{self.chunk_samples}] or [1, {self.chunk_samples}], "
                f"got {x.shape}; for B streams in one call use silero_compat.SileroBatch (or "
                "load_silero_vad(), which takes [B, n] like the package), for many streams StreamMux"
            )
        return x

    def _advance(self, x: np.ndarray) -> float:
        """After a step into the other row: flip rows, keep the context, return the probability."""
        self._cur = 1 - self._cur
        self._chunk[0, : self._ctx] = x[-self._ctx :]
        return float(self._rows[self._cur][0, 0])

    def __call__(self, chunk: np.ndarray) -> float:
        """The speech probability of the next chunk of this stream (blocking; runs on this thread).

        Raises:
            DTypeMismatchError / ShapeMismatchError / AudioFormatError: a chunk that is not
                ``float32[chunk_samples]`` of finite samples (the state is left untouched).
        """
        t0 = time.perf_counter()
        x = self._check(chunk)
        self._chunk[0, self._ctx :] = x
        t1 = time.perf_counter()
        if self._bound is not None:
            self._bound[self._cur]()
        else:
            self._run_on_device()
        t2 = time.perf_counter()
        prob = self._advance(x)
        self._last_timing = StepTiming(t1 - t0, t2 - t1, time.perf_counter() - t2)
        return prob

    def _pack_device_inputs(self) -> None:
        row = self._rows[self._cur][0]
        self._jit.chunk_mut()[0] = self._chunk[0]
        self._jit.state_h_mut()[0] = row[1 : 1 + HIDDEN]
        self._jit.state_c_mut()[0] = row[1 + HIDDEN :]

    def _run_on_device(self) -> None:
        self._pack_device_inputs()
        self._jit.execute()
        self._rows[1 - self._cur][:] = self._jit.output().to_numpy_blocking().reshape(1, -1)

    async def call_async(self, chunk: np.ndarray) -> float:
        """``__call__`` for event-loop callers: the replay is queued on the plan's device and
        awaited without blocking the loop."""
        t0 = time.perf_counter()
        x = self._check(chunk)
        self._chunk[0, self._ctx :] = x
        self._pack_device_inputs()
        t1 = time.perf_counter()
        await self._jit.execute_async()
        t2 = time.perf_counter()
        out = await self._jit.output().to_numpy()
        self._rows[1 - self._cur][:] = out.reshape(1, -1)
        prob = self._advance(x)
        self._last_timing = StepTiming(t1 - t0, t2 - t1, time.perf_counter() - t2)
        return prob

    def reset(self) -> None:
        """Forget the stream: zero the LSTM state and the audio context."""
        for row in self._rows:
            row[:] = 0
        self._chunk[:] = 0

    def _chunks(self, waveform: object) -> list[np.ndarray]:
        audio = np.asarray(waveform)
        if audio.dtype != np.float32 or audio.ndim != 1:
            raise DTypeMismatchError(
                f"a waveform must be a 1-D float32 array, got {audio.dtype}{list(audio.shape)}; "
                "read files with asyncjit.models.read_wav"
            )
        n = self.chunk_samples
        if audio.size == 0:
            return []
        padded = np.zeros(-(-audio.size // n) * n, np.float32)
        padded[: audio.size] = audio
        return list(padded.reshape(-1, n))

    def probabilities(
        self, waveform: np.ndarray, progress: Callable[[float], None] | None = None
    ) -> np.ndarray:
        """Per-chunk speech probabilities of a whole waveform (resets the stream first); ``progress``
        gets the percentage done after each chunk (``progress_tracking_callback``)."""
        self.reset()
        chunks = self._chunks(waveform)
        if progress is None:
            return np.array([self(c) for c in chunks], np.float32)
        size, n = int(np.asarray(waveform).size), self.chunk_samples
        probs = []
        for i, c in enumerate(chunks):
            probs.append(self(c))
            progress(min((i + 1) * n, size) / size * 100)
        return np.array(probs, np.float32)

    async def probabilities_async(self, waveform: np.ndarray) -> np.ndarray:
        """``probabilities`` for event-loop callers."""
        self.reset()
        return np.array([await self.call_async(c) for c in self._chunks(waveform)], np.float32)

    def speech_timestamps(self, waveform: np.ndarray, **params: Any) -> list[SpeechSegment]:
        """Speech segments of a waveform, with ``get_speech_timestamps``'s parameters
        (``threshold``, ..., ``return_seconds``, ``progress_tracking_callback``: see
        ``speech_timestamps``)."""
        probs = self.probabilities(waveform, params.pop("progress_tracking_callback", None))
        return speech_timestamps(
            probs,
            self.sample_rate,
            window_size_samples=self.chunk_samples,
            audio_length_samples=int(np.asarray(waveform).size),
            **params,
        )

    async def speech_timestamps_async(self, waveform: np.ndarray, **params: Any) -> list[SpeechSegment]:
        """``speech_timestamps`` for event-loop callers."""
        probs = await self.probabilities_async(waveform)
        return speech_timestamps(
            probs,
            self.sample_rate,
            window_size_samples=self.chunk_samples,
            audio_length_samples=int(np.asarray(waveform).size),
            **params,
        )
