"""The ``asyncjit`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    """Evaluate one symbolic graph at three lengths on the reference backend."""
    from ._demo import main as demo_main

    demo_main()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``asyncjit`` console script."""
    parser = argparse.ArgumentParser(prog="asyncjit", description="asyncjit command line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the built-in demo")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
