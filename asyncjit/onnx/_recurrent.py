"""``recurrent_step``: any ONNX model whose state output feeds its state input, as a batched step
for ``StreamMux``, with the slot pool ``vad_mux`` uses (``PooledStep`` over a ``DevicePool``).

Each stream's row of the pool holds its states, flattened (batch axis removed), and optionally
the last ``context`` samples of its previous input, which the plan puts in front of the next
chunk (Silero VAD's 16 kHz models read 64 samples of context before each 512-sample chunk). One
plan, compiled once with the batch a var ``b`` in ``1..max_batch_size``: gather the rows of the
batch by slot, run the model traced on them, scatter the new rows into ``new_pool``.

Usage::

    sess = InferenceSession(path, {"batch": (1, 64), "sequence": (576, 576)}, values={"sr": 16000})
    step = recurrent_step(sess, state={"state": "stateN"}, context=64, max_streams=256)
    async with StreamMux(step, max_streams=256) as mux:
        async with mux.open_stream() as s:
            p = await s.step(chunk)  # chunk: float32[512]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import dtypes
from ..compiler import compile as compile_plan
from ..errors import DTypeMismatchError, InvalidArgumentError, OnnxImportError, ShapeMismatchError
from ..runtime import Client, Device, default_client
from ..scheduler import PooledStep
from ..symbolic import Dim, Var, prod
from ..tensor import Tensor
from ._importer import OnnxModel
from ._session import InferenceSession
from ._values import as_tensor

__all__ = ["OnnxRecurrentStep", "recurrent_step"]

INITIAL_POOL_ROWS = 16


def _static(d: Dim, what: str, source: str) -> int:
    if isinstance(d, int):
        return d
    if isinstance(d, Var) and d.min == d.max:
        return d.min
    raise OnnxImportError(
        f"{source}: {what} has the symbolic size {d}; a stream step needs it fixed (dims=...)"
    )


class OnnxRecurrentStep(PooledStep):
    """An imported recurrent model as a ``BatchedStep``; see ``recurrent_step``."""

    def __init__(
        self,
        model: OnnxModel,
        state: Mapping[str, str],
        *,
        input: str | None = None,
        output: str | None = None,
        context: int = 0,
        max_streams: int = 256,
        max_batch_size: int | None = None,
        client: Client | None = None,
        device: Device | int | None = None,
    ) -> None:
        src = model.source
        max_batch = max_streams if max_batch_size is None else max_batch_size
        if max_streams < 1 or max_batch < 1:
            raise InvalidArgumentError(
                f"max_streams and max_batch_size must be >= 1, got {max_streams}, {max_batch}"
            )
        infos = {i.name: i for i in model.inputs}
        outs = {o.name: o for o in model.outputs}
        for s_in, s_out in state.items():
            if s_in not in infos:
                raise OnnxImportError(f"{src}: state input {s_in!r} is not an input ({', '.join(infos)})")
            if s_out not in outs:
                raise OnnxImportError(f"{src}: state output {s_out!r} is not an output ({', '.join(outs)})")
        free_in = [n for n in infos if n not in state]
        free_out = [n for n in outs if n not in state.values()]
        self.input = input if input is not None else (free_in[0] if len(free_in) == 1 else "")
        self.output = output if output is not None else (free_out[0] if len(free_out) == 1 else "")
        if self.input not in infos or [n for n in free_in if n != self.input]:
            raise OnnxImportError(
                f"{src}: a recurrent step feeds one chunk input besides the states; inputs besides "
                f"the states: {free_in} (name it with input=, fix the others with values= at load)"
            )
        if self.output not in outs:
            raise OnnxImportError(f"{src}: name the per-step output with output= (outputs: {free_out})")
        x_info = infos[self.input]
        batch = x_info.shape[0] if x_info.shape else None
        if not isinstance(batch, Var):
            raise OnnxImportError(
                f"{src}: input {self.input!r} needs a symbolic batch dim on axis 0 (got {batch}); "
                "a model exported for batch 1 only cannot batch streams"
            )
        rest = [_static(d, f"input {self.input!r} axis {i + 1}", src) for i, d in enumerate(x_info.shape[1:])]
        if context:
            if not rest or rest[-1] <= context:
                raise OnnxImportError(
                    f"{src}: context={context} needs a last input axis longer than it ({rest})"
                )
            chunk = (*rest[:-1], rest[-1] - context)
        else:
            chunk = tuple(rest)
        self.context = context
        # each state: where its batch axis is, its per-stream shape, its offset in the row
        self._states: list[tuple[str, str, int, tuple[int, ...], int]] = []
        offset = 0
        for s_in, s_out in state.items():
            shape = infos[s_in].shape
            axes = [i for i, d in enumerate(shape) if d == batch]
            if len(axes) != 1:
                raise OnnxImportError(
                    f"{src}: state {s_in!r} {shape} needs exactly one axis of the batch dim {batch}"
                )
            per = tuple(
                _static(d, f"state {s_in!r} axis {i}", src) for i, d in enumerate(shape) if i != axes[0]
            )
            if infos[s_in].dtype != np.float32:
                raise DTypeMismatchError(
                    f"{src}: state {s_in!r} is {infos[s_in].dtype}; slot pools hold float32"
                )
            self._states.append((s_in, s_out, axes[0], per, offset))
            offset += int(prod(per))
        self._context_offset = offset
        self.row_width = offset + context
        self.model = model

        b = Var("b", 1, max_batch)
        rows = Var("p", 1, max_streams)
        samples = Tensor.placeholder([b, *chunk], dtypes.float32, name="samples")
        slots = Tensor.placeholder([b], dtypes.int32, name="slots")
        pool = Tensor.placeholder([rows, self.row_width], dtypes.float32, name="pool")
        out, new_pool = self._build(samples, slots, pool, b)
        exe = compile_plan([out, new_pool], [samples, slots, pool], [b, rows], name=f"onnx_step:{src}")
        self.client = client if client is not None else default_client()
        self.plan = self.client.load(exe, device)
        self.device = self.plan.devices()[0]
        names = {v.name for v in exe.signature.vars}
        row_var = "p" if "p" in names else None
        initial_rows = min(max_streams, INITIAL_POOL_ROWS) if row_var else max_streams
        self._attach_pool(
            self.client,
            self.plan,
            self.device,
            np.zeros((initial_rows, self.row_width), np.float32),
            "b" if "b" in names else None,
            max_batch=max_batch,
            chunk_shape=tuple(chunk),
            row_var=row_var,
            num_slots=max_streams,
        )

    def _build(self, samples: Tensor, slots: Tensor, pool: Tensor, b: Var) -> tuple[Tensor, Tensor]:
        rows = pool.gather(0, slots)  # [b, width]
        feeds: dict[str, Any] = {}
        for s_in, _, axis, per, off in self._states:
            flat = rows[:, off : off + int(prod(per))].reshape(b, *per)
            order = list(range(1, len(per) + 1))
            order.insert(axis, 0)
            feeds[s_in] = flat.permute(*order)
        x = samples
        if self.context:
            ctx = rows[:, self._context_offset :]
            if samples.ndim > 2:
                ctx = ctx.reshape(b, *[1] * (samples.ndim - 2), self.context).expand(
                    *samples.shape[:-1], self.context
                )
            x = Tensor.cat([ctx, samples], -1)
        feeds[self.input] = x
        outs = self.model.build(feeds)
        parts = []
        for _, s_out, axis, per, _ in self._states:
            t = as_tensor(outs[s_out]).cast(dtypes.float32)
            order = [axis] + [i for i in range(t.ndim) if i != axis]
            parts.append(t.permute(*order).reshape(b, int(prod(per))))
        if self.context:
            parts.append(
                x.reshape(b, -1)[:, x.shape[-1] - self.context :]
                if x.ndim == 2
                else x[..., -self.context :].reshape(b, -1)
            )
        new_rows = Tensor.cat(parts, 1)
        return as_tensor(outs[self.output]), pool.scatter(0, slots, new_rows)

    def __repr__(self) -> str:
        return (
            f"<OnnxRecurrentStep {self.model.source} b<={self._max_batch} slots={self._num_slots} "
            f"on {self.device.kind}:{self.device.id}>"
        )

    def check_state(self, state: object) -> object:
        """A stream's initial state as a pool row: ``{state input: array}`` (per-stream shape,
        the batch axis removed; missing states and the context start at zero) or a full row.

        Raises:
            ShapeMismatchError, DTypeMismatchError: anything else.
        """
        row = np.zeros(self.row_width, np.float32)
        if isinstance(state, Mapping):
            known = {s[0] for s in self._states}
            bad = set(state) - known
            if bad:
                raise ShapeMismatchError(
                    f"{self!r}: unknown state(s) {sorted(bad)} (states: {sorted(known)})"
                )
            for s_in, _, _, per, off in self._states:
                if s_in in state:
                    arr = self._state_array(state[s_in], f"state {s_in!r}")
                    if arr.shape != per:
                        raise ShapeMismatchError(
                            f"{self!r}: state {s_in!r} must have shape {per}, got {arr.shape}"
                        )
                    row[off : off + arr.size] = arr.reshape(-1)
            return row
        arr = self._state_array(state, "a state row")
        if arr.shape != (self.row_width,):
            raise ShapeMismatchError(
                f"{self!r}: a state is a dict of state arrays or a [{self.row_width}] row, "
                f"got shape {arr.shape}"
            )
        return arr.copy()


def recurrent_step(
    sess: InferenceSession | OnnxModel,
    state: Mapping[str, str],
    *,
    input: str | None = None,
    output: str | None = None,
    context: int = 0,
    max_streams: int = 256,
    max_batch_size: int | None = None,
    client: Client | None = None,
    device: Device | int | None = None,
) -> OnnxRecurrentStep:
    """A ``BatchedStep`` for ``StreamMux`` from a recurrent ONNX model.

    Args:
        sess: an ``InferenceSession`` (or ``OnnxModel``) loaded with a symbolic batch dim on
            axis 0 of the chunk input; other inputs are states or fixed with ``values=``.
        state: state input name -> the output that feeds it back (``{"state": "stateN"}``).
        input, output: the chunk input and per-step output (default: the only non-state one).
        context: keep the last ``context`` samples of each input and put them in front of the
            stream's next chunk (chunks then have ``context`` fewer samples than the input).
        max_streams: slots of the pool; max_batch_size: the most streams per native call
            (default ``min(max_streams, 256)``).

    Raises:
        OnnxImportError: the model does not fit (no batch var, a state without the batch axis,
            a second free input); DTypeMismatchError: a state that is not float32.
    """
    model = sess.model if isinstance(sess, InferenceSession) else sess
    if client is None and isinstance(sess, InferenceSession):
        client = sess.client
    return OnnxRecurrentStep(
        model,
        state,
        input=input,
        output=output,
        context=context,
        max_streams=max_streams,
        max_batch_size=min(max_streams, 256) if max_batch_size is None else max_batch_size,
        client=client,
        device=device,
    )
