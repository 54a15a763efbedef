"""Differential tests: compiled plans against the reference interpreter, many bindings per compile.

Each hypothesis case draws a random graph (every op kind, rank-0 constants, zero-size dims,
symbolic dims such as ``t-1``, ``t//2``, ``t%3``, ``t*s`` on either side of an op, vars with
``min == max``) and input values from a profile (quarter steps, the whole float range, special
values, magnitudes near the max), and checks it through ``compile``, ``compile(fixed=...)``,
``jit`` and ``LoadedExecutable.execute`` with C-order, Fortran-order and strided inputs at every
corner of the var bounds. The comparison (``tests/fuzzing.py``) is in ulps of the output dtype
with no quota of wrong elements; only positions the reference itself shows to be ill-conditioned
(perturbed-rounding re-runs) are skipped. ``make fuzz`` runs the same engine for as long as asked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz import draw_case, dtype_sets
from fuzzing import check_case, compare, perturbed_runs, tolerance_ulps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import BINARY_NAMES
from strategies import graph_cases
from strategies_case import VALUE_PROFILES, GraphCase

from asyncjit import Tensor, reference
from asyncjit import dtypes as dt
from asyncjit.compiler import compile as aj_compile
from asyncjit.graph import toposort
from asyncjit.symbolic import Mod, Prod, Sum

pytestmark = pytest.mark.usefixtures("no_disk_cache")


@pytest.fixture
def no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")


def _check(case: GraphCase, paths: tuple[str, ...] = ("compile", "fixed")) -> None:
    _, found = check_case(case, paths=paths)
    assert not found, "\n".join([case.describe(), *map(str, found)])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(graph_cases(profiles=VALUE_PROFILES, max_bound=24))
def test_random_graphs_match_reference(case: GraphCase) -> None:
    """Every op kind, random graphs and values, every var bound: compiled == reference."""
    _check(case)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_cases(profiles=VALUE_PROFILES, max_steps=4))
def test_jit_and_execute_paths(case: GraphCase) -> None:
    """The same graphs re-traced by ``jit`` and run through a loaded plan's ``execute``."""
    _check(case, paths=("jit", "execute"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_cases(
        kinds=("unary", "binary", "scalar_binary", "reduce", "expand", "permute", "const"),
        max_steps=8,
        profiles=VALUE_PROFILES,
    )
)
def test_fused_elementwise_and_reductions(case: GraphCase) -> None:
    """Longer chains of the ops fusion merges into one kernel, extremes and overflow edges included."""
    _check(case)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_cases(
        kinds=("slice", "shrink", "pad", "cat", "gather", "scatter", "nonzero", "arange", "matmul", "conv1d"),
        profiles=VALUE_PROFILES,
        max_bound=24,
    )
)
def test_movement_and_index_ops(case: GraphCase) -> None:
    """Views, data-dependent indices and the dense ops."""
    _check(case)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_cases(kinds=("conv1d_dft", "conv1d_dft", "unary", "binary"), profiles=VALUE_PROFILES, max_steps=5)
)
def test_dft_basis_convs(case: GraphCase) -> None:
    """One-channel conv1d's whose weight is a windowed DFT basis, which the compiler runs by FFT
    (``codegen/_convfft.py``): frames in the padding, eight-frame groups with tails, every store
    path, and downstream ops that amplify its rounding (``fuzzing._fft_bound``)."""
    _check(case)


def _with_dtypes(dtypes: tuple[np.dtype[Any], ...]) -> st.SearchStrategy[GraphCase]:
    return graph_cases(dtypes=dtypes, profiles=VALUE_PROFILES, max_steps=5)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(dtype_sets()[2:]).flatmap(_with_dtypes))
def test_float64_and_wider_ints(case: GraphCase) -> None:
    """float64 next to the core dtypes, and int8/int16/uint8..uint64 next to the floats."""
    _check(case)


def test_compare_has_no_quota_and_skips_only_ill_conditioned_positions() -> None:
    """One wrong element fails; a position the perturbed references move is skipped."""
    want = np.array([1.0, 2.0, 3.0, np.nan, np.inf, 0.0], np.float32)
    got = want.copy()
    got[1] = np.nextafter(np.float32(2.0), np.float32(3.0))  # 1 ulp: within tolerance
    got[5] = -0.0
    bad, skipped = compare(got, want, [want], tol=2.0)
    assert not bad.any() and not skipped.any()
    got[2] = 3.001
    bad, _ = compare(got, want, [want], tol=2.0)
    assert bad.tolist() == [False, False, True, False, False, False]
    moved = want.copy()
    moved[2] = 2.5  # the reference itself moves there under perturbed roundings
    bad, skipped = compare(got, want, [moved], tol=2.0)
    assert not bad.any() and skipped.tolist() == [False, False, True, False, False, False]
    got[4] = np.finfo(np.float32).max  # inf vs max is wrong whatever the tolerance
    assert compare(got, want, [want], tol=1e30)[0][4]


def test_float64_sums_that_may_overflow_midway_are_order_dependent_only() -> None:
    """A float64 sum is checked within its accumulation bound, except where ``sum(|x|)`` leaves
    float64's range: there another order may overflow (the documented semantics)."""
    x = Tensor.placeholder((4,), dt.float64, name="x")
    outs = [x.sum().node, x.prod().node]
    tol = tolerance_ulps(outs)

    def check(values: list[float], got: list[float]) -> np.ndarray:
        a = np.array(values)
        want = reference.evaluate([Tensor(o) for o in outs], {x: a}, {})
        perturbed = perturbed_runs(outs, {x.node.id: a}, {}, seed=0)
        pairs = enumerate(zip(got, want, strict=True))
        return np.array([compare(np.array(g), w, [p[k] for p in perturbed], tol)[0] for k, (g, w) in pairs])

    big = [1.5e308, 1.5e308, -1.5e308, -1e308]  # pairwise overflows, left to right does not
    assert not check(big, [np.nan, np.nan]).any()
    assert check([1.0, 2.0, 3.0, 4.0], [10.5, 24.0]).tolist() == [True, False]
    assert check([1.0, 2.0, 3.0, 4.0], [10.0, 25.0]).tolist() == [False, True]
    # cancellation: another order legitimately gives 0 or 2 (n * 2**-53 * sum|x| is about 4)
    assert not check([1e16, 1.0, -1e16, 1.0], [0.0, -1e32]).any()


def test_trig_of_a_rounded_huge_argument_is_unknown_of_an_exact_one_checked() -> None:
    """``sin(a @ b)`` near 1e24: a legitimately rounded product one ulp (7e16) away gives any
    value in [-1, 1], which three perturbed runs cannot bound, so those positions are skipped;
    ``sin`` of an exact input that large is still checked (its reduction is exact)."""
    a = Tensor.placeholder((1, 2), dt.float32, name="a")
    b = Tensor.placeholder((2, 1), dt.float32, name="b")
    x = Tensor.placeholder((1, 1), dt.float32, name="x")
    outs = [(a @ b).sin().node, x.sin().node]
    tol = tolerance_ulps(outs)
    av = np.array([[1.1e12, 3.0]], np.float32)
    bv = np.array([[1.0e12], [5.0]], np.float32)
    xv = (av @ bv).astype(np.float32)
    feed = {a.node.id: av, b.node.id: bv, x.node.id: xv}
    want = reference.evaluate([Tensor(o) for o in outs], {a: av, b: bv, x: xv}, {})
    perturbed = perturbed_runs(outs, feed, {}, seed=0)
    # the perturbed runs call the first unknown (a sample of three could land near the reference
    # and flag a legitimate result), the second not
    assert all(not np.isfinite(p[0]).any() for p in perturbed)
    assert all(np.isfinite(p[1]).all() for p in perturbed)
    # the compiled product one ulp off: its sine is somewhere else in [-1, 1]
    off = np.sin(np.nextafter(xv, np.float32(np.inf))).astype(np.float32)
    assert abs(float(off[0, 0]) - float(want[0][0, 0])) > 0.1
    bad, excused = compare(off, want[0], [p[0] for p in perturbed], tol)
    assert not bad.any() and excused.all()
    bad, _ = compare(off, want[1], [p[1] for p in perturbed], tol)
    assert bad.all()  # the same wrong value for an exact argument is caught


def test_a_chain_of_thousands_of_fused_ops_compiles_and_matches() -> None:
    """4,000 elementwise ops in a chain (an ONNX ``LRN`` of size 1000 sums 1000 shifted terms):
    codegen emits a fused expression by recursion, so fusion puts a buffer every
    ``MAX_FUSED_DEPTH`` levels (this once raised ``RecursionError``)."""
    from asyncjit.passes._fusion import MAX_FUSED_DEPTH

    x = Tensor.placeholder((5,), dt.float32, name="x")
    y = x
    for _ in range(2000):
        y = y * 0.999 + 0.001
    exe = aj_compile([y], [x])
    assert len(exe.kernel_names) >= 4000 // (MAX_FUSED_DEPTH + 1)
    xv = np.arange(5, dtype=np.float32)
    want = reference.evaluate([y], {x: xv}, {})[0]
    # 2,000 roundings (FMA-contracted here, separate in the reference): up to ~1e-4 apart
    np.testing.assert_allclose(exe.run([xv])[0], want, rtol=5e-4)


def _has_mod_product(d: object) -> bool:
    if isinstance(d, Prod):
        return any(isinstance(f, Mod) for f in d.factors)
    return isinstance(d, Sum) and any(_has_mod_product(a) for a, _ in d.terms)


def _shapes_of(case: GraphCase) -> set[str]:
    """The program shapes (from the list the fuzzer must produce) that one graph contains."""
    found: set[str] = set()
    names = {v.name for v in case.variables}
    if any(v.min == v.max for v in case.variables):
        found.add("var with min == max")
    if case.profile in ("extreme", "big", "wide"):
        found.add("extreme values")
    for n in toposort([t.node for t in case.outputs]):
        if n.op == "const" and n.shape == ():
            found.add("rank-0 const")
        if n.op == "pad" and n.attrs["mode"] == "constant" and n.attrs["value"] != 0:
            found.add(f"pad value on {'float' if n.dtype.is_float else 'int' if n.dtype.is_int else 'bool'}")
        if n.op in ("sin", "cos") and case.profile in ("extreme", "wide"):
            found.add("huge-argument trig")  # extreme: 1e18, 3.6e17, 1e30, max; wide: any bits
        if (
            n.op == "reduce"
            and n.attrs["op"] in ("sum", "prod")
            and n.dtype.is_float
            and case.profile == "big"
        ):
            found.add("overflow-edge reduction")
        if n.op in ("mod", "idiv") and n.dtype.is_float:
            found.add("float // or %")
        if any(_has_mod_product(d) for d in n.shape):
            found.add("dim with a product of mod terms")
    for m in re.finditer(r"=(\w+?)(_r)?\[([^\]]*)\]", case.describe()):
        op, reverse, inner = m.groups()
        if op in BINARY_NAMES and any(re.search(rf"\b{v}\b", inner) for v in names):
            found.add("symbol on the left" if reverse else "symbol on the right")
    return found


def test_fuzz_generator_produces_every_listed_program_shape() -> None:
    """The first 400 graphs of ``make fuzz SEED=1`` contain every shape of program that once
    hid a bug: rank-0 consts, pad values across dtypes, min == max vars, symbols on either side
    of an op, extreme values, huge trig arguments, overflow-edge reductions, float ``//``/``%``,
    dims like ``(s%3)*(t-1)``."""
    wanted = {
        "rank-0 const", "pad value on float", "pad value on int", "pad value on bool",
        "var with min == max", "symbol on the left", "symbol on the right", "extreme values",
        "huge-argument trig", "overflow-edge reduction", "float // or %", "dim with a product of mod terms",
    }  # fmt: skip
    seen: set[str] = set()
    for i in range(400):
        seen |= _shapes_of(draw_case(1, i))
        if wanted <= seen:
            break
    assert wanted <= seen, f"never drawn: {sorted(wanted - seen)}"


def test_tolerance_grows_with_the_float_ops_on_the_way() -> None:
    x = Tensor.placeholder((3,), dt.float32, name="x")
    assert tolerance_ulps([(x + 1).node]) < tolerance_ulps([((x + 1).sigmoid() * 2).node])
    assert tolerance_ulps([x.cast(dt.int32).node]) == 2.0


def _fuzz(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASYNCJIT_CACHE_DIR": "off"}
    cmd = [sys.executable, str(Path(__file__).with_name("fuzz.py")), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)


def test_fuzz_slice_fixed_seed() -> None:
    """The first graphs of ``make fuzz SEED=1``: same driver, worker and comparison."""
    done = _fuzz("--seed", "1", "--cases", "4", "--minutes", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "graphs=4 " in done.stdout and "mismatches=0 " in done.stdout and "crashes=0 " in done.stdout


def test_fuzz_reports_a_dead_worker_as_a_crash_and_goes_on() -> None:
    """A worker killed by a signal mid-graph is a crash with that graph's repro, not the end."""
    done = _fuzz("--seed", "1", "--cases", "3", "--crash-at", "1")
    assert done.returncode == 1
    assert "CRASH graph 1: worker died with status -6" in done.stdout
    assert "repro: python tests/fuzz.py --seed 1 --case 1" in done.stdout
    assert "graphs=2 " in done.stdout and "crashes=1 " in done.stdout
