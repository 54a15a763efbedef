"""ONNX's conformance cases through ``asyncjit.onnx.backend``, against the checked-in list of failures.

``tests/onnx_expected_failures.txt`` lists every runnable case asyncjit fails, with the reason
(written by ``python -m asyncjit.onnx.conformance --device cpu --write ...``). Here:

* every runnable node and model-suite case (the light CNNs aside: their compile takes minutes; the
  full run and ``benchmarks/onnx_models.py`` cover them) runs through the import and the numpy
  interpretation of the traced graph: an unlisted case must pass, a listed one must still fail
  (unless it is listed as failing on the compiled plan only);
* a fixed slice of them is compiled and run on the CPU device, where the list must hold exactly.

So the list can only get shorter: a fix that makes a listed case pass fails this test until the
case is taken off the list.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="the conformance cases ship in the onnx wheel (the onnx extra)")

from asyncjit.onnx.conformance import CPU_ONLY, Case, collect, excluded_reason, read_expected, run_case

EXPECTED = Path(__file__).parent / "onnx_expected_failures.txt"
KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")
SLICE = 100  # every SLICE-th runnable case is also compiled for the CPU device (CI time)


@pytest.fixture(scope="module")
def runnable() -> list[Case]:
    return [c for c in collect(KINDS) if excluded_reason(c) is None]


@pytest.fixture(scope="module")
def expected() -> dict[str, str]:
    return read_expected(EXPECTED)


def test_expected_failures_name_real_cases(runnable: list[Case], expected: dict[str, str]) -> None:
    """Every listed case exists, is runnable and has a reason (a stale entry hides nothing)."""
    names = {c.name for c in runnable}
    stale = [n for n in expected if n not in names and not n.startswith("test_light_")]
    assert not stale, f"listed cases that are not runnable cases: {stale[:20]}"
    assert all(expected.values()), "every listed case needs its reason"


@pytest.mark.parametrize("shard", range(4))
def test_conformance_reference_matches_list(
    runnable: list[Case], expected: dict[str, str], shard: int
) -> None:
    """Import + numpy interpretation: unlisted cases pass, listed ones still fail."""
    unexpected: list[str] = []
    now_pass: list[str] = []
    for case in runnable[shard::4]:
        reason = run_case(case, "REFERENCE")
        listed = expected.get(case.name)
        if reason is not None and listed is None:
            unexpected.append(f"{case.name}: {reason}")
        elif reason is None and listed is not None and not listed.startswith(CPU_ONLY):
            now_pass.append(case.name)
    assert not unexpected, f"{len(unexpected)} unlisted failures: {unexpected[:20]}"
    assert not now_pass, f"listed cases now pass, take them off {EXPECTED.name}: {now_pass}"


def test_conformance_compiled_slice_matches_list(runnable: list[Case], expected: dict[str, str]) -> None:
    """A fixed slice compiled for the CPU device: failures are exactly the listed ones."""
    mismatched: list[str] = []
    for case in runnable[::SLICE]:
        reason = run_case(case, "CPU")
        listed = expected.get(case.name)
        if (reason is None) != (listed is None):
            mismatched.append(f"{case.name}: got {reason!r}, listed {listed!r}")
    assert not mismatched, "\n".join(mismatched)


def test_cli_prints_each_case_with_its_time(capsys: pytest.CaptureFixture[str]) -> None:
    """``--verbose`` names every case as it finishes (a slow compile shows which case it is)."""
    from asyncjit.onnx.conformance import main

    assert main(["--device", "reference", "--kinds", "node", "--match", "test_abs", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "ok   test_abs (" in out and "total: 1/1 runnable cases passed" in out
