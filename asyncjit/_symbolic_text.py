"""Symbolic dims as text, as host-side evaluators and as JSON (re-exported by ``symbolic``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .errors import ArgumentTypeError, InvalidArgumentError
from .symbolic import (
    DataVar,
    Dim,
    FloorDiv,
    Index,
    Max,
    Min,
    Mod,
    Prod,
    Sum,
    Var,
    _add,
    _floordiv,
    _mod,
    _mul,
    free_vars,
    prod,
    smax,
    smin,
)

__all__ = ["compile_dims", "from_json", "render", "to_json"]


# ---------------------------------------------------------------------------------------------
# rendering and host-side evaluation


def render(e: Dim, names: Callable[[Var], str] | None = None) -> str:
    """Readable (and valid Python) text for ``e``; ``names`` maps vars to identifiers."""
    if isinstance(e, int):
        return str(e)
    if isinstance(e, Var | Index):
        return names(e) if names else e.name  # type: ignore[arg-type]
    r = (lambda x: render(x, names)) if names else render

    def p(x: Dim) -> str:
        return f"({r(x)})" if isinstance(x, Sum | FloorDiv | Mod) else r(x)

    if isinstance(e, Sum):
        parts: list[str] = []
        for atom, coeff in e.terms:
            text = p(atom) if coeff in (1, -1) else f"{abs(coeff)}*{p(atom)}"
            parts.append(("- " if coeff < 0 else "+ ") + text)
        if e.const:
            parts.append(("- " if e.const < 0 else "+ ") + str(abs(e.const)))
        s = " ".join(parts)
        return s[2:] if s.startswith("+ ") else "-" + s[2:]
    if isinstance(e, Prod):
        return "*".join(p(f) for f in e.factors)
    if isinstance(e, FloorDiv | Mod):
        num = f"({r(e.num)})" if isinstance(e.num, Sum) else r(e.num)
        return f"{num}{'//' if isinstance(e, FloorDiv) else '%'}{e.den}"
    if isinstance(e, Min | Max):
        fn = "min" if isinstance(e, Min) else "max"
        return f"{fn}({', '.join(r(a) for a in e.args)})"
    raise ArgumentTypeError(f"not a symbolic dim: {e!r}")


def compile_dims(dims: Sequence[Dim], variables: Sequence[Var]) -> Callable[[Sequence[int]], tuple[int, ...]]:
    """A fast host-side function: var values (in ``variables`` order) -> the dims' values.

    Replays evaluate output shapes with this instead of walking expression trees every call.
    """
    index = {v.name: i for i, v in enumerate(variables)}
    missing = free_vars(dims) - set(variables)
    if missing:
        raise InvalidArgumentError(f"dims use vars not listed: {sorted(v.name for v in missing)}")
    body = ", ".join(render(d, lambda v: f"_v[{index[v.name]}]") for d in dims)
    src = f"lambda _v: ({body}{',' if len(dims) == 1 else ''})"
    fn: Callable[[Sequence[int]], tuple[int, ...]] = eval(src, {"min": min, "max": max})
    return fn


# ---------------------------------------------------------------------------------------------
# JSON encoding (serialized executables carry symbolic shapes; never ``eval`` stored text)


def to_json(e: Dim) -> object:
    """A JSON-compatible encoding of ``e``; ``from_json`` inverts it exactly."""
    if isinstance(e, int):
        return e
    if isinstance(e, DataVar):
        return {"datavar": [e.name, e.min, e.max, e.op]}
    if isinstance(e, Var):
        return {"var": [e.name, e.min, None if e.unbounded else e.max]}
    if isinstance(e, Index):
        return {"index": [e.name, to_json(e.extent)]}
    if isinstance(e, Sum):
        return {"sum": [[to_json(a), c] for a, c in e.terms], "const": e.const}
    if isinstance(e, Prod):
        return {"prod": [to_json(f) for f in e.factors]}
    if isinstance(e, FloorDiv | Mod):
        return {"floordiv" if isinstance(e, FloorDiv) else "mod": [to_json(e.num), e.den]}
    if isinstance(e, Min | Max):
        return {"min" if isinstance(e, Min) else "max": [to_json(a) for a in e.args]}
    raise ArgumentTypeError(f"not a symbolic dim: {e!r}")


def from_json(data: object) -> Dim:
    """Decode ``to_json`` output, re-simplifying (so the result equals the original).

    Raises:
        ValueError: for anything that is not a valid encoding.
    """
    if isinstance(data, int) and not isinstance(data, bool):
        return data
    if not isinstance(data, dict) or len(data) not in (1, 2):
        raise InvalidArgumentError(f"not an encoded symbolic dim: {data!r}")
    try:
        if "var" in data:
            name, lo, hi = data["var"]
            return Var(name, lo, hi)
        if "datavar" in data:
            name, lo, hi, op = data["datavar"]
            return DataVar(name, lo, hi, str(op))
        if "index" in data:
            name, extent = data["index"]
            return Index(str(name), from_json(extent))
        if "sum" in data:
            out: Dim = int(data["const"])
            for atom, coeff in data["sum"]:
                out = _add(out, _mul(from_json(atom), int(coeff)))
            return out
        if "prod" in data:
            return prod(from_json(f) for f in data["prod"])
        if "floordiv" in data:
            num, den = data["floordiv"]
            return _floordiv(from_json(num), int(den))
        if "mod" in data:
            num, den = data["mod"]
            return _mod(from_json(num), int(den))
        if "min" in data:
            return smin(*(from_json(a) for a in data["min"]))
        if "max" in data:
            return smax(*(from_json(a) for a in data["max"]))
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise InvalidArgumentError(f"not an encoded symbolic dim: {data!r} ({exc})") from None
    raise InvalidArgumentError(f"not an encoded symbolic dim: {data!r}")
