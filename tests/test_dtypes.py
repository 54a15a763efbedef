"""DType: the supported element types, their numpy mapping and the promotion table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from asyncjit import dtypes as dt
from asyncjit.dtypes import (
    DTYPES,
    DType,
    bool_,
    float16,
    float32,
    float64,
    from_numpy,
    int8,
    int16,
    int32,
    int64,
    result_type,
    scalar_dtype,
    uint8,
    uint16,
    uint32,
    uint64,
)

ORDER = [bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, float32, float64]


class TestDType:
    @pytest.mark.parametrize(
        ("dtype", "npd", "size", "kind"),
        [
            (float32, np.float32, 4, "f"),
            (float16, np.float16, 2, "f"),
            (int32, np.int32, 4, "i"),
            (int64, np.int64, 8, "i"),
            (int8, np.int8, 1, "i"),
            (int16, np.int16, 2, "i"),
            (uint8, np.uint8, 1, "u"),
            (uint16, np.uint16, 2, "u"),
            (uint32, np.uint32, 4, "u"),
            (uint64, np.uint64, 8, "u"),
            (float64, np.float64, 8, "f"),
            (bool_, np.bool_, 1, "b"),
        ],
    )
    def test_fields(self, dtype: DType, npd: type, size: int, kind: str) -> None:
        """Each dtype maps to its numpy dtype, size and kind."""
        assert dtype.np == np.dtype(npd)
        assert dtype.itemsize == size == np.dtype(npd).itemsize
        assert dtype.kind == kind
        assert (dtype.is_float, dtype.is_int, dtype.is_bool) == (kind == "f", kind in "iu", kind == "b")
        assert (dtype.is_signed, dtype.is_unsigned) == (kind == "i", kind == "u")
        assert repr(dtype) == f"asyncjit.{dtype.name}"

    def test_all_listed_once(self) -> None:
        """DTYPES lists every supported dtype once: bool, unsigned, signed, float, narrow first."""
        assert list(DTYPES) == ORDER

    def test_value_semantics(self) -> None:
        """DTypes compare and hash by name, so they work as cache keys."""
        assert DType("float32", np.dtype(np.float32), 4, "f") == float32
        assert len({float32, dt.float32, from_numpy(np.float32)}) == 1


class TestFromNumpy:
    @pytest.mark.parametrize("dtype", ORDER)
    def test_round_trip(self, dtype: DType) -> None:
        """numpy dtypes, scalar types, names and DTypes all map back to the DType."""
        assert from_numpy(dtype.np) is dtype
        assert from_numpy(dtype.np.type) is dtype
        assert from_numpy(dtype.name) is dtype
        assert from_numpy(dtype) is dtype

    @pytest.mark.parametrize("bad", [np.complex64, np.longdouble, "U4", np.datetime64])
    def test_unsupported(self, bad: object) -> None:
        """Unsupported numpy dtypes raise TypeError naming the supported ones."""
        with pytest.raises(
            TypeError,
            match=r"asyncjit does not support dtype \S+ \(supported: bool, uint8, uint16, uint32, uint64, "
            r"int8, int16, int32, int64, float16, float32, float64\); cast it first",
        ):
            from_numpy(bad)

    def test_not_a_dtype(self) -> None:
        """Something numpy cannot read as a dtype is a TypeError too."""
        with pytest.raises(TypeError, match=r"not a dtype: 3.5"):
            from_numpy(3.5)


class TestPromotion:
    @pytest.mark.parametrize(("a", "b"), list(itertools.product(ORDER, ORDER)))
    def test_table(self, a: DType, b: DType) -> None:
        """Promotion is symmetric and, for dtypes of one kind (or bool), picks the wider; a
        float beats any int; mixed signedness gives a signed int that holds both (but uint64)."""
        r = result_type(a, b)
        assert r == result_type(b, a)
        if a.kind == b.kind or a.is_bool or b.is_bool or (a.is_float or b.is_float):
            by_rank = ORDER[max(ORDER.index(a), ORDER.index(b))]
            assert r == (by_rank if a.kind == b.kind or a.is_bool or b.is_bool else (a if a.is_float else b))
        else:
            s, u = (a, b) if a.is_signed else (b, a)
            assert r.is_signed and r.itemsize >= s.itemsize
            if u != uint64:
                assert np.iinfo(r.np).max >= np.iinfo(u.np).max
                assert r.itemsize == max(s.itemsize, 2 * u.itemsize)

    def test_mixed_signedness(self) -> None:
        """uint8 + int8 -> int16; uint32 + int32 -> int64; uint8 + int32 -> int32; uint64 + int8 -> int64."""
        assert result_type(uint8, int8) is int16
        assert result_type(uint32, int32) is int64
        assert result_type(uint8, int32) is int32
        assert result_type(uint64, int8) is int64
        assert result_type(uint8, uint16, int8) is int32

    def test_int_meets_float16_is_float16(self) -> None:
        """int64 with float16 gives float16 (as JAX does; numpy would give float64)."""
        assert result_type(int64, float16) is float16

    def test_empty(self) -> None:
        """result_type needs at least one dtype."""
        with pytest.raises(ValueError, match=r"result_type needs at least one dtype"):
            result_type()

    @pytest.mark.parametrize(
        ("value", "other", "expected"),
        [
            (1, float16, float16),
            (1, int64, int64),
            (1, bool_, int32),
            (0.5, int32, float32),
            (0.5, float16, float16),
            (0.5, bool_, float32),
            (True, int32, int32),
            (True, float16, float16),
            (np.int64(3), int32, int32),
            (np.float32(0.5), int64, float32),
        ],
    )
    def test_weak_scalars(self, value: object, other: DType, expected: DType) -> None:
        """Python scalars are weak: they take the tensor's dtype unless their kind is higher."""
        assert scalar_dtype(value, other) is expected

    def test_scalar_of_wrong_type(self) -> None:
        """Non-numeric scalars are rejected."""
        with pytest.raises(TypeError, match=r"cannot use str 'a' as a tensor scalar"):
            scalar_dtype("a", float32)


@pytest.mark.parametrize("dtype", [dt.float16, dt.float32, dt.float64])
def test_weak_float_scalars_keep_the_tensor_dtype_precision(dtype: DType) -> None:
    """``x + 0.1`` with a float64 ``x`` adds float64's 0.1, not float32's cast up (a weak scalar
    once went through ``Tensor.const``, which narrows float64 data to float32 by default);
    ``Tensor.full`` likewise. Compiled and reference equal numpy bit for bit."""
    from asyncjit import Tensor, reference
    from asyncjit.compiler import compile as compile_graph

    x = Tensor.placeholder((3,), dtype)
    xv = np.array([0.0, 1.0, -2.5], dtype.np)
    for c in (0.1, np.log(2.0), 1 / 3):
        outs = [x + c, x * c, Tensor.full((3,), c, dtype) - x]
        with np.errstate(over="ignore"):
            c_t = dtype.np.type(c)
            want = [xv + c_t, xv * c_t, np.full(3, c_t) - xv]
        got = compile_graph(outs, [x]).run([xv])
        ref = reference.evaluate(outs, {x: xv}, {})
        for g, r, w in zip(got, ref, want, strict=True):
            assert g.dtype == dtype.np and np.array_equal(g, w) and np.array_equal(r, w), (c, g, w)
