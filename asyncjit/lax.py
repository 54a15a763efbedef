"""Control-flow primitives for traced functions.

``scan(body, init, xs)`` runs a recurrent body over the leading axis of ``xs`` inside one plan,
like ``jax.lax.scan``. The body is traced once per step and the steps are recorded into the same
graph (the length must be static), so the whole loop compiles into one executable and one replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import TensorError
from .symbolic import Expr
from .tensor import Tensor
from .tree import tree_flatten, tree_map, tree_unflatten

__all__ = ["scan"]


def _as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor.const(x)


def scan(
    body: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any = None,
    length: int | None = None,
    reverse: bool = False,
) -> tuple[Any, Any]:
    """Loop ``carry, y = body(carry, x)`` over the leading axis of every leaf of ``xs``.

    Args:
        body: ``(carry, x) -> (carry, y)``; carry keeps its pytree structure from step to step.
        init: the initial carry (a pytree of tensors or arrays).
        xs: a pytree of tensors sliced along axis 0, or None with ``length`` given.
        length: the number of steps when ``xs`` is None (or to check against ``xs``).
        reverse: iterate from the last element to the first (``ys`` keep the input order).

    Returns:
        ``(final_carry, ys)`` where each leaf of ``ys`` stacks the per-step ``y`` on axis 0.

    Raises:
        TensorError: a symbolic or inconsistent length, or a carry whose structure changes.
    """
    x_leaves, x_def = tree_flatten(xs)
    x_tensors = [_as_tensor(x) for x in x_leaves]
    lengths = {t.shape[0] if t.ndim else None for t in x_tensors}
    if length is not None:
        lengths.add(length)
    if not lengths:
        raise TensorError("scan needs xs or length")
    if len(lengths) != 1:
        raise TensorError(f"scan: leading dims of xs (and length) differ: {sorted(map(str, lengths))}")
    (n,) = lengths
    if n is None:
        raise TensorError("scan: every leaf of xs needs a leading axis to scan over")
    if isinstance(n, Expr):
        raise TensorError(
            f"scan over a symbolic length {n} is not supported: the steps are recorded into one "
            "graph, so the length must be static (use a fixed length, or loop on the host)"
        )
    carry = tree_map(_as_tensor, init)
    _, carry_def = tree_flatten(carry)
    ys: list[Any] = [None] * n
    steps = range(n - 1, -1, -1) if reverse else range(n)
    for i in steps:
        x_i = tree_unflatten(x_def, [t[i] for t in x_tensors]) if x_tensors else None
        carry, y = body(carry, x_i)
        carry = tree_map(_as_tensor, carry)
        if tree_flatten(carry)[1] != carry_def:
            raise TensorError("scan: the body changed the structure of the carry")
        ys[i] = tree_map(_as_tensor, y)
    if n == 0 or ys[0] is None:
        return carry, None
    stacked = tree_map(lambda *leaves: Tensor.stack(list(leaves)), *ys)
    return carry, stacked
