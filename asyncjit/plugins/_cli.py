"""``asyncjit plugins``, ``asyncjit partition MODEL`` and ``asyncjit compile MODEL -o bundle.ajx``.

MODEL is an ONNX file (``*.onnx``, imported by ``asyncjit.onnx.load``) or ``module:function``,
a Python function returning ``(outputs, inputs)`` (tensors; placeholders for inputs) or
``(outputs, inputs, vars)``.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CompileError

__all__ = ["add_commands", "load_model"]

_COLOURS = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5")


def load_model(spec: str, dims: Sequence[str] = ()) -> tuple[list[Any], list[Any], Any]:
    """``(outputs, inputs, vars or None)`` for a MODEL argument (``dims``: an ONNX file's dim
    bounds as ``asyncjit onnx``'s ``--dims`` takes them).

    Raises:
        CompileError: the spec names nothing loadable.
    """
    if spec.endswith(".onnx") or (":" not in spec and Path(spec).exists()):
        from .. import onnx as aj_onnx
        from ..onnx._cli import parse_dims
        from ..tensor import Tensor

        model = aj_onnx.load(spec, parse_dims(list(dims)))
        outs = [v if isinstance(v, Tensor) else Tensor.const(v) for v in model.outputs_traced.values()]
        return outs, list(model.placeholders.values()), list(model.vars)
    module, _, func = spec.partition(":")
    if not func:
        raise CompileError(f"MODEL must be a .onnx file or module:function, got {spec!r}")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise CompileError(f"cannot load {spec!r}: {exc}") from exc
    result = fn()
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise CompileError(f"{spec} must return (outputs, inputs) or (outputs, inputs, vars)")
    outs = list(result[0]) if isinstance(result[0], list | tuple) else [result[0]]
    return outs, list(result[1]), result[2] if len(result) == 3 else None


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in pairs:
        key, eq, value = p.partition("=")
        if not eq:
            raise CompileError(f"--option takes KEY=VALUE, got {p!r}")
        low = value.lower()
        out[key] = (
            True if low == "true" else False if low == "false" else int(value) if value.isdigit() else value
        )
    return out


def _chosen(args: argparse.Namespace) -> list[Any]:
    from ._registry import get_plugin

    opts = _options(args.option or [])
    if getattr(args, "soc", None):
        opts["soc"] = args.soc
    return [get_plugin(name, opts) for name in (args.plugin or [])]


def _plugins_cmd(args: argparse.Namespace) -> int:
    from ._registry import available_plugins, get_plugin

    for name, target in sorted(available_plugins().items()):
        try:
            info = get_plugin(name).info()  # type: ignore[attr-defined]
        except (CompileError, ImportError) as exc:
            print(f"{name}  ({target})  unavailable: {exc}")
            continue
        except AttributeError:
            info = {}
        print(f"{name}  ({target})")
        for key in ("manufacturer", "version", "hardware", "options"):
            if key in info:
                print(f"    {key}: {info[key]}")
    return 0


def _partition_cmd(args: argparse.Namespace) -> int:
    from ..compiler import partition
    from ..graph import as_node
    from ..passes import Graph, optimize_graph

    outs, ins, variables = load_model(args.model, args.dims or ())
    graph = optimize_graph(Graph.of([as_node(o) for o in outs], [as_node(i) for i in ins], variables))
    result = partition(graph, _chosen(args))
    print(f"{len(graph.nodes)} nodes, {len(result.partitions)} partitions")
    owner: dict[int, int] = {}
    for k, (plugin, sub) in enumerate(result.partitions):
        ops = sorted({n.op for n in sub.nodes})
        print(
            f"  partition {k} -> {plugin.name}: {len(sub.nodes)} nodes ({', '.join(ops)}), "
            f"{len(sub.inputs)} inputs, {len(sub.outputs)} outputs"
        )
        owner.update((n.id, k) for n in sub.nodes)
    print("fallbacks (CPU compiler):")
    for f in result.fallbacks:
        if f.node.op not in ("placeholder", "const"):
            print(f"  %{f.node.id} {f.node.op}: {f.reason}")
    if args.out:
        dot = _dot(graph, owner, [p.name for p, _ in result.partitions])
        path = Path(args.out)
        if shutil.which("dot") is None or path.suffix == ".dot":
            target = path if path.suffix == ".dot" else path.with_suffix(".dot")
            target.write_text(dot)
            print(
                f"graphviz `dot` not installed: wrote {target} (text)" if target != path else f"wrote {path}"
            )
        else:
            with tempfile.NamedTemporaryFile("w", suffix=".dot", delete=False) as tmp:
                tmp.write(dot)
            fmt = path.suffix.lstrip(".") or "svg"
            subprocess.run(["dot", f"-T{fmt}", tmp.name, "-o", str(path)], check=True)
            Path(tmp.name).unlink()
            print(f"wrote {path}")
    return 0


def _dot(graph: Any, owner: dict[int, int], names: list[str]) -> str:
    lines = ["digraph asyncjit {", "  node [shape=box, style=filled, fontsize=10];"]
    for n in graph.nodes:
        k = owner.get(n.id)
        colour = _COLOURS[k % len(_COLOURS)] if k is not None else "#ffffff"
        label = f"{n.op} %{n.id}" + (f"\\n{names[k]}#{k}" if k is not None else "")
        lines.append(f'  n{n.id} [label="{label}", fillcolor="{colour}"];')
        lines.extend(f"  n{i.id} -> n{n.id};" for i in n.inputs)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _compile_cmd(args: argparse.Namespace) -> int:
    from ..compiler import compile
    from ..compiler._bundle import build_bundle

    outs, ins, variables = load_model(args.model, args.dims or ())
    exe = compile(outs, ins, variables, name=Path(args.model.split(":")[-1]).stem, plugins=_chosen(args))
    cpus = [c.strip() for c in args.cpu.split(",") if c.strip()] if args.cpu else ["native"]
    data = build_bundle(exe, cpus)
    Path(args.output).write_bytes(data)
    print(f"wrote {args.output}: {len(data)} bytes, CPUs {cpus}, plugins {[p.plugin for p in exe.payloads]}")
    return 0


def add_commands(sub: Any) -> None:
    """Register ``plugins``, ``partition`` and ``compile`` on the ``asyncjit`` parser."""
    p = sub.add_parser("plugins", help="list installed compiler plugins (identity, hardware, options)")
    p.set_defaults(func=_plugins_cmd)

    def model_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("model", help="an .onnx file or module:function returning (outputs, inputs)")
        q.add_argument("--plugin", action="append", help="a plugin to partition for (repeatable, in order)")
        q.add_argument("--option", action="append", metavar="KEY=VALUE", help="a plugin option (repeatable)")
        q.add_argument(
            "--dims", nargs="+", metavar="NAME=MIN:MAX", help="bounds of an ONNX model's symbolic dims"
        )

    q = sub.add_parser("partition", help="show how plugins partition a model, and why ops fall back")
    model_args(q)
    q.add_argument(
        "--out", metavar="FILE", help="draw the graph coloured by owner (.svg/.png via graphviz, .dot)"
    )
    q.set_defaults(func=_partition_cmd)

    c = sub.add_parser("compile", help="compile a model ahead of time into a bundle (.ajx)")
    model_args(c)
    c.add_argument("-o", "--output", required=True, help="the bundle file to write")
    c.add_argument("--soc", help="the SoC/hardware model passed to the plugins")
    c.add_argument("--cpu", help="CPU targets, best first, e.g. native,x86-64-v3,x86-64-v2 (default: native)")
    c.set_defaults(func=_compile_cmd)
