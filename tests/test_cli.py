"""The ``asyncjit`` command."""

from __future__ import annotations

import pytest

from asyncjit.cli import main


def test_demo_prints_three_lengths(capsys: pytest.CaptureFixture[str]) -> None:
    """``asyncjit demo`` evaluates one graph at three lengths, each with a tiny error."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip().startswith("t=")]
    assert len(lines) == 3
    for line in lines:
        err = float(line.rsplit("max |err|", 1)[1])
        assert err < 1e-5


def test_unknown_command_exits_with_usage() -> None:
    """A wrong subcommand is an argparse usage error, not a traceback."""
    with pytest.raises(SystemExit) as exc:
        main(["nonsense"])
    assert exc.value.code == 2
