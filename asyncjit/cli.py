"""The ``asyncjit`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import structlog

from .errors import JitError

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    """Stream audio through the real Silero VAD and compare with ONNX Runtime."""
    from ._demo import run_demo, run_streams_demo
    from .runtime import default_client

    try:
        if args.streams:
            run_streams_demo(args.streams, args.audio, compare=not args.no_compare)
        else:
            run_demo(args.audio, compare=not args.no_compare)
    finally:
        default_client().close()  # drain now, under the demo's log level, not at interpreter exit
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``asyncjit`` console script."""
    parser = argparse.ArgumentParser(prog="asyncjit", description="asyncjit command line")
    parser.add_argument("-v", "--verbose", action="store_true", help="show structlog info events")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="stream speech through the real Silero VAD (vs ONNX Runtime)")
    demo.add_argument(
        "--audio",
        metavar="FILE",
        help="an audio file: WAV, FLAC, OGG, ... (default: built-in speech)",
    )
    demo.add_argument("--no-compare", action="store_true", help="skip the ONNX Runtime run")
    demo.add_argument(
        "--streams",
        type=_positive,
        default=0,
        metavar="N",
        help="multiplex N live streams of the audio through one StreamMux (default: one stream)",
    )
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    previous = structlog.get_config()
    if not args.verbose:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        return int(args.func(args))
    except (JitError, OSError) as exc:  # bad input, or a path that cannot be opened
        print(f"asyncjit: error: {exc}", file=sys.stderr)
        return 2
    finally:
        structlog.configure(**previous)


if __name__ == "__main__":
    sys.exit(main())
