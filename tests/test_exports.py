"""The package namespace: every public name is exported once and resolves."""

from __future__ import annotations

import importlib

import pytest

import asyncjit

PACKAGES = [
    "asyncjit",
    "asyncjit.compiler",
    "asyncjit.devices",
    "asyncjit.graph",
    "asyncjit.models",
    "asyncjit.runtime",
    "asyncjit.scheduler",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_resolve_and_are_unique(name: str) -> None:
    """Each name in ``__all__`` exists, and no name is listed twice."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported))
    for attr in exported:
        assert hasattr(module, attr), f"{name}.{attr} is listed in __all__ but missing"


def test_top_level_names() -> None:
    """The names users meet first are on the package itself."""
    for attr in ("Tensor", "Var", "JitError", "float32", "int64", "reference"):
        assert attr in asyncjit.__all__


def test_jit_errors_share_one_base() -> None:
    """Every error class asyncjit defines is a ``JitError``."""
    from asyncjit import errors

    for attr in errors.__all__:
        cls = getattr(errors, attr)
        assert issubclass(cls, errors.JitError), attr
