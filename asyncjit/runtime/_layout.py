"""``Layout``: the order of a buffer's elements in memory (PJRT's on-device layouts).

* ``row_major`` (C order): what every compiled plan takes and produces.
* ``col_major`` (Fortran order): the axes reversed, as LAPACK and many BLAS callers keep matrices.
* ``tiled(r, c)``: the last two axes cut into ``r x c`` tiles stored one after another, each
  tile row-major, the tiles row-major too (a matmul operand packed for cache blocking). Both
  dims must be multiples of the tile.

A layout is a property of a buffer (``buf.layout``); host reads (``to_numpy``, ``np.asarray``)
always give the logical array, and ``copy_to_device`` / ``copy_to_memory_space`` take a target
``layout=`` and relayout on the target device's queue. Plans state the layouts they take
(``LoadedExecutable.input_layouts``): ``execute`` refuses any other with a ``LayoutError``
instead of reading the bytes in the wrong order.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import LayoutError

__all__ = ["COL_MAJOR", "ROW_MAJOR", "Layout", "as_layout"]

LayoutKind = Literal["row_major", "col_major", "tiled"]


@attrs.frozen
class Layout:
    """How a buffer's elements lie in memory; build with ``Layout.tiled(r, c)`` or use the
    ``ROW_MAJOR`` / ``COL_MAJOR`` constants (or the strings ``"row_major"``, ``"col_major"``)."""

    kind: LayoutKind
    tile: tuple[int, int] | None = None

    def __attrs_post_init__(self) -> None:
        if self.kind not in ("row_major", "col_major", "tiled"):
            raise LayoutError(f"unknown layout {self.kind!r}; one of row_major, col_major, tiled")
        if (self.kind == "tiled") != (self.tile is not None):
            raise LayoutError("a tiled layout needs a tile (Layout.tiled(r, c)); the others take none")
        if self.tile is not None and (len(self.tile) != 2 or any(int(t) < 1 for t in self.tile)):
            raise LayoutError(f"a tile is two sizes >= 1, got {self.tile!r}")

    @classmethod
    def tiled(cls, rows: int, cols: int) -> Layout:
        return cls("tiled", (int(rows), int(cols)))

    def __str__(self) -> str:
        return self.kind if self.tile is None else f"tiled{self.tile[0]}x{self.tile[1]}"

    def check(self, shape: tuple[int, ...]) -> None:
        """Raises: LayoutError when an array of ``shape`` cannot have this layout."""
        if self.tile is None:
            return
        r, c = self.tile
        if len(shape) < 2 or shape[-2] % r or shape[-1] % c:
            raise LayoutError(
                f"layout {self} needs the last two dims to be multiples of {r} and {c}; shape {shape}"
            )

    def physical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The C-order shape of the bytes in memory."""
        if self.kind == "row_major":
            return shape
        if self.kind == "col_major":
            return shape[::-1]
        assert self.tile is not None
        r, c = self.tile
        *lead, m, n = shape
        return (*lead, m // r, n // c, r, c)

    def to_physical(self, logical: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """``logical`` rearranged so that its C-order bytes are this layout (a new array)."""
        if self.kind == "row_major":
            return np.ascontiguousarray(logical).reshape(logical.shape)
        if self.kind == "col_major":
            return np.ascontiguousarray(logical.T).reshape(logical.shape[::-1])
        assert self.tile is not None
        r, c = self.tile
        *lead, m, n = logical.shape
        blocks = logical.reshape(*lead, m // r, r, n // c, c).swapaxes(-3, -2)
        return np.ascontiguousarray(blocks).reshape(self.physical_shape(logical.shape))

    def from_physical(self, physical: npt.NDArray[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """The logical array of ``physical`` (C-order bytes of this layout): a view when one
        exists (row- and column-major), else a copy (tiled)."""
        if self.kind == "row_major":
            return physical.reshape(shape)
        if self.kind == "col_major":
            return physical.reshape(shape[::-1]).T
        return physical.reshape(self.physical_shape(shape)).swapaxes(-3, -2).reshape(shape)


ROW_MAJOR = Layout("row_major")
COL_MAJOR = Layout("col_major")


def as_layout(layout: Layout | str | None) -> Layout:
    """``Layout``, its name, or None (row-major). Raises: LayoutError for anything else."""
    if layout is None or layout is ROW_MAJOR or layout == "row_major":
        return ROW_MAJOR
    if isinstance(layout, Layout):
        return ROW_MAJOR if layout.kind == "row_major" else layout
    if layout == "col_major":
        return COL_MAJOR
    raise LayoutError(f"unknown layout {layout!r}; use 'row_major', 'col_major' or Layout.tiled(r, c)")
