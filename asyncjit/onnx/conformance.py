"""Run ONNX's own conformance cases through ``asyncjit.onnx.backend`` and list what fails.

The node cases come from ``onnx.backend.test.case.node.collect_testcases`` (generated in Python,
which takes about a minute, so they are cached on disk per onnx version); the model suites are
the files shipped in the onnx wheel (``light``, ``simple``, ``pytorch-converted``,
``pytorch-operator``). Cases of the families asyncjit does not run (strings, sequences, optionals,
maps, training, random numbers, image decoding) are *excluded*, not failures.

    python -m asyncjit.onnx.conformance --device cpu --write tests/onnx_expected_failures.txt

writes every failing runnable case with its reason; the test suite then requires the failures
to be exactly the listed ones, so the count can only go down.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np

__all__ = ["Case", "collect", "excluded_reason", "read_expected", "run_case"]

EXCLUDED_OPS = frozenset(
    {
        # strings
        "StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "TfIdfVectorizer",
        # sequences, optionals
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
        "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence",
        "Optional", "OptionalGetElement", "OptionalHasElement",
        # training
        "Adagrad", "Adam", "Momentum", "Gradient",
        # random numbers
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial",
        # image decoding
        "ImageDecoder",
    }
)  # fmt: skip
_LOW_PRECISION_FLOATS = frozenset(
    {
        "bfloat16",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn",
    }
)
CPU_ONLY = "cpu only: "
"""The prefix of a failure of the compiled plan that the reference interpretation does not share."""
MODEL_KINDS = ("light", "simple", "pytorch-converted", "pytorch-operator")


@attrs.frozen(eq=False)
class Case:
    """One conformance case: a model, its input arrays and expected outputs."""

    name: str
    kind: str
    model: Any  # onnx.ModelProto
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    rtol: float
    atol: float


def _cache_path() -> Path:
    import onnx

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "asyncjit" / f"onnx-node-cases-{onnx.__version__}.pkl"


def _node_cases() -> list[Case]:
    from onnx import numpy_helper

    path = _cache_path()
    if path.is_file():
        try:
            with path.open("rb") as f:
                cached: list[Case] = pickle.load(f)
            return cached
        except Exception:
            pass
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        raw = collect_testcases(None)
    cases = []
    for c in raw:
        if not c.data_sets:
            continue
        ins, outs = c.data_sets[0]

        def arr(v: Any) -> Any:
            return (
                v if isinstance(v, np.ndarray) else numpy_helper.to_array(v) if hasattr(v, "data_type") else v
            )

        cases.append(
            Case(c.name, "node", c.model, [arr(v) for v in ins], [arr(v) for v in outs], c.rtol, c.atol)
        )
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as out:
            pickle.dump(cases, out)
        tmp.replace(path)
    except OSError:
        pass
    return cases


def _model_cases(kind: str) -> Iterator[Case]:
    import onnx
    from onnx import numpy_helper

    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    if kind == "light":
        for model_path in sorted((data / "light").glob("light_*.onnx")):
            model = onnx.load(str(model_path))
            inits = {t.name for t in model.graph.initializer}
            ins = []
            for i in model.graph.input:
                if i.name in inits:
                    continue
                shape = tuple(
                    d.dim_value if d.HasField("dim_value") else 1 for d in i.type.tensor_type.shape.dim
                )
                n = int(np.prod(shape))
                ins.append(
                    (np.arange(n).reshape(shape) / n).astype(np.float32)
                )  # as ONNX's runner feeds them
            out = numpy_helper.to_array(onnx.load_tensor(str(model_path).replace(".onnx", "_output_0.pb")))
            yield Case(f"test_{model_path.stem}", "light", model, ins, [out], 1e-3, 1e-7)
        return
    for case_dir in sorted((data / kind).iterdir()):
        model_file = case_dir / "model.onnx"
        sets = sorted(case_dir.glob("test_data_set_*"))
        if not model_file.is_file() or not sets:
            continue
        model = onnx.load(str(model_file))

        def tensors(pattern: str, ds: Path = sets[0]) -> list[np.ndarray]:
            files = sorted(ds.glob(pattern), key=lambda p: int(re.findall(r"\d+", p.stem)[-1]))
            out = []
            for f in files:
                t = onnx.TensorProto()
                t.ParseFromString(f.read_bytes())
                out.append(numpy_helper.to_array(t))
            return out

        try:
            ins, outs = tensors("input_*.pb"), tensors("output_*.pb")
        except Exception:
            continue  # a sequence/optional payload: excluded by the type check below anyway
        yield Case(case_dir.name, kind, model, ins, outs, 1e-3, 1e-7)


def collect(kinds: Iterable[str] = ("node", *MODEL_KINDS)) -> list[Case]:
    """Every case of the given kinds (``node`` and the model suites)."""
    out: list[Case] = []
    for kind in kinds:
        out.extend(_node_cases() if kind == "node" else _model_cases(kind))
    return out


def excluded_reason(case: Case) -> str | None:
    """Why a case is outside what asyncjit runs (strings, sequences, ...), or None."""
    from onnx import TensorProto

    from ._importer import walk_nodes

    g = case.model.graph
    for v in (*g.input, *g.output):
        if not v.type.HasField("tensor_type"):
            return "non-tensor input/output (sequence/optional/map)"
        if v.type.tensor_type.elem_type == TensorProto.STRING:
            return "string tensors"
    for node in walk_nodes(g):
        if node.op_type in EXCLUDED_OPS:
            return f"excluded op {node.op_type}"
        if node.domain == "ai.onnx.preview.training":
            return "training op"
    if "training" in case.name:
        return "training mode"
    return None


def run_case(case: Case, device: str = "CPU") -> str | None:
    """Run one case: None when every output matches (shape, dtype, values), else why not."""
    from .backend import AsyncjitBackend

    try:
        rep = AsyncjitBackend.prepare(case.model, device)
        got = rep.run(case.inputs)
    except Exception as exc:  # every failure is a reason to record, not a crash of the run
        from ..errors import UnsupportedOpError

        if isinstance(exc, UnsupportedOpError):
            return f"unsupported: {', '.join(sorted({n[1] for n in exc.nodes})) or exc}"
        first = str(exc).splitlines()[0] if str(exc) else ""
        first = re.sub(r"^.*?: node ", "node ", first)
        return f"{type(exc).__name__}: {first[:160]}"
    if len(got) != len(case.outputs):
        return f"{len(got)} outputs, expected {len(case.outputs)}"
    for i, (g, want) in enumerate(zip(got, case.outputs, strict=True)):
        g = np.asarray(g)
        if g.shape != want.shape:
            return f"output {i}: shape {g.shape}, expected {want.shape}"
        if g.dtype != want.dtype:
            return f"output {i}: dtype {g.dtype}, expected {want.dtype}"
        rtol = case.rtol
        if want.dtype.name in _LOW_PRECISION_FLOATS:  # ml_dtypes: compare as float32, as ONNX's runner
            if want.dtype.name == "bfloat16":
                rtol = max(rtol, 2**-6)  # two bfloat16 ulps, ONNX's runner's tolerance
            g, want = g.astype(np.float32), want.astype(np.float32)
        if want.dtype.kind in "fc":
            ok = np.allclose(g, want, rtol=rtol, atol=case.atol, equal_nan=True)
        else:
            ok = np.array_equal(g, want)
        if not ok:
            with np.errstate(all="ignore"):
                diff = (
                    float(np.nanmax(np.abs(g.astype(np.float64) - want.astype(np.float64))))
                    if g.size
                    else 0.0
                )
            return f"output {i}: values differ (max abs diff {diff:.3g}, rtol {rtol}, atol {case.atol})"
    return None


def read_expected(path: Path) -> dict[str, str]:
    """``case name -> reason`` from an expected-failures file (``#`` comments, tab-separated)."""
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, reason = line.partition("\t")
        out[name.strip()] = reason.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asyncjit.onnx.conformance", description=__doc__)
    parser.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    parser.add_argument("--kinds", default=",".join(("node", *MODEL_KINDS)))
    parser.add_argument("--match", default="", help="only cases whose name contains this")
    parser.add_argument("--write", metavar="FILE", help="write the failing cases with their reasons")
    parser.add_argument("--verbose", action="store_true", help="print every case with its seconds")
    args = parser.parse_args(argv)
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    cases = [c for c in collect(args.kinds.split(",")) if args.match in c.name]
    failures: dict[str, str] = {}
    runnable = passed = 0
    started = time.perf_counter()
    for case in cases:
        if excluded_reason(case) is not None:
            continue
        runnable += 1
        case_started = time.perf_counter()
        reason = run_case(case, args.device.upper())
        if reason is None:
            passed += 1
            if args.verbose:
                print(f"ok   {case.name} ({time.perf_counter() - case_started:.1f} s)", flush=True)
        else:
            failures[case.name] = reason
            print(f"FAIL {case.name}: {reason} ({time.perf_counter() - case_started:.1f} s)", flush=True)
    by_kind: dict[str, list[int]] = {}
    for case in cases:
        if excluded_reason(case) is None:
            stats = by_kind.setdefault(case.kind, [0, 0])
            stats[1] += 1
            stats[0] += case.name not in failures
    for kind, (ok, total) in by_kind.items():
        print(f"{kind}: {ok}/{total} passed")
    print(
        f"total: {passed}/{runnable} runnable cases passed ({len(cases) - runnable} excluded) "
        f"in {time.perf_counter() - started:.0f} s on {args.device}"
    )
    if args.write and args.device == "cpu":
        # a failure the numpy interpretation of the same import does not have is the compiler's
        by_name = {c.name: c for c in cases}
        for name, reason in list(failures.items()):
            if run_case(by_name[name], "REFERENCE") is None:
                failures[name] = f"{CPU_ONLY}{reason}"
    if args.write:
        lines = [
            "# ONNX conformance cases asyncjit fails (runnable ones only), with the reason.",
            f"# Written by: python -m asyncjit.onnx.conformance --device {args.device} --write FILE",
            f"# {passed}/{runnable} runnable cases pass.",
        ]
        lines += [f"{name}\t{reason}" for name, reason in sorted(failures.items())]
        Path(args.write).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
