"""Ops that write values to computed positions: Col2Im, MaxUnpool and TensorScatter.

Col2Im's target of every (block element, block) pair is known at load time, so it is one
reducing ``scatter`` (overlaps add up); MaxUnpool scatters to the indices MaxPool gave;
TensorScatter (a KV-cache write) reads each cache slot from the update it falls in, a gather.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import dtypes as dt
from ..symbolic import Dim, prod
from ..tensor import Tensor
from ._ops_shape import axis_of
from ._registry import NodeCtx, op
from ._values import Value

__all__: list[str] = []


def _ints_attr(n: NodeCtx, name: str, count: int, default: int) -> list[int]:
    v = n.attr(name)
    return [default] * count if not v else [int(i) for i in v]


@op("Col2Im", since=18)
def _col2im(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    image = [int(v) for v in n.const(ins[1], "image_shape").reshape(-1)]
    block = [int(v) for v in n.const(ins[2], "block_shape").reshape(-1)]
    r = len(image)
    dil, strides = _ints_attr(n, "dilations", r, 1), _ints_attr(n, "strides", r, 1)
    pads = _ints_attr(n, "pads", 2 * r, 0)
    nb, ck, length = x.shape
    k = int(np.prod(block))
    if not isinstance(ck, int) or ck % k or len(block) != r:
        raise n.fail(f"input channels {ck} are not a multiple of the block size {block}")
    counts = [
        (image[d] + pads[d] + pads[d + r] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(r)
    ]
    if length != int(np.prod(counts)):
        raise n.fail(f"{length} blocks given, the image, block and attributes make {int(np.prod(counts))}")
    # the image position of each (block element, block), or past the end where it is padding
    offsets = np.array(list(itertools.product(*[range(b) for b in block]))).reshape(k, 1, r)
    starts = np.array(list(itertools.product(*[range(c) for c in counts]))).reshape(1, length, r)
    pos = starts * np.array(strides) + offsets * np.array(dil) - np.array(pads[:r])  # [k, L, r]
    size = np.array(image)
    inside = ((pos >= 0) & (pos < size)).all(-1)
    flat = np.ravel_multi_index(tuple(np.clip(pos, 0, size - 1).transpose(2, 0, 1)), image)
    target = np.where(inside, flat, int(np.prod(image))).astype(np.int64)
    c = ck // k
    src = x.reshape(nb, c, k, length).permute(2, 3, 0, 1).reshape(k * length, nb * c)
    out = Tensor.zeros([int(np.prod(image)), nb * c], x.dtype)
    out = out.scatter(0, Tensor.const(target.reshape(-1)), src, "add")
    return out.permute(1, 0).reshape(nb, c, *image)


@op("MaxUnpool", since=9)
def _max_unpool(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, index = n.t(ins[0]), n.t(ins[1]).cast(dt.int64)
    kernel = [int(v) for v in n.attr("kernel_shape")]
    r = len(kernel)
    strides, pads = _ints_attr(n, "strides", r, 1), _ints_attr(n, "pads", 2 * r, 0)
    spatial = x.shape[2:]
    if not all(isinstance(d, int) for d in spatial):
        raise n.fail("MaxUnpool needs static spatial dims")
    inferred = [(int(spatial[d]) - 1) * strides[d] - pads[d] - pads[d + r] + kernel[d] for d in range(r)]
    full = [x.shape[0], x.shape[1], *inferred]
    # MaxPool's indices are flat over the whole (N, C, *spatial) output
    out = Tensor.zeros([prod(full)], x.dtype).scatter(0, index.reshape(-1), x.reshape(-1)).reshape(*full)
    if len(ins) > 2 and ins[2] is not None:
        want = [int(v) for v in n.const(ins[2], "output_shape").reshape(-1)][2:]
        if any(w < d for w, d in zip(want, inferred, strict=True)):
            raise n.fail(f"output_shape {want} is smaller than the unpooled size {inferred}")
        out = out.pad([None, None, *[(0, w - d) for w, d in zip(want, inferred, strict=True)]])
    return out


@op("TensorScatter", since=24)
def _tensor_scatter(n: NodeCtx, ins: list[Value | None]) -> Value:
    cache, update = n.t(ins[0]), n.t(ins[1])
    mode = n.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("linear", "circular"):
        raise n.fail(f"mode {mode!r} is not linear or circular")
    axis = axis_of(n.attr("axis", -2), cache.ndim, n)
    if axis == 0:
        raise n.fail("axis 0 is the batch axis the write indices run along")
    size, steps = cache.shape[axis], update.shape[axis]
    nb = cache.shape[0]
    start = (
        n.t(ins[2]).cast(dt.int64) if len(ins) > 2 and ins[2] is not None else Tensor.zeros([nb], dt.int64)
    )
    # which update step lands in each cache slot (per batch), if any
    along: list[Dim] = [1] * cache.ndim
    along[axis] = size
    slot = Tensor.arange(size, dt.int64).reshape(*along)
    step = slot - start.reshape(nb, *([1] * (cache.ndim - 1)))
    if mode == "circular":
        step = step % size
    hit = (step >= 0) & (step < steps)
    index = step.clip(0, steps - 1).expand(
        *[cache.shape[a] if a in (0, axis) else update.shape[a] for a in range(cache.ndim)]
    )
    taken = update.cast(cache.dtype).take_along_axis(index, axis)
    return Tensor.select(hit, taken, cache)
