"""The ``asyncjit`` command."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import __version__
from ._log import JsonFormatter
from .errors import JitError
from .onnx import _cli as onnx_cli
from .plugins._cli import add_commands as plugin_commands

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    """Stream audio through the real Silero VAD and compare with ONNX Runtime."""
    from ._demo import run_demo, run_streams_demo
    from .runtime import default_client

    with contextlib.ExitStack() as stack:
        if args.trace:
            from .profiler import trace

            recording = stack.enter_context(trace(args.trace))
        try:
            if args.streams:
                run_streams_demo(args.streams, args.audio, compare=not args.no_compare)
            else:
                run_demo(args.audio, compare=not args.no_compare, console=_rich_console())
        finally:
            default_client().close()  # drain now, under the demo's log level, not at interpreter exit
    if args.trace:
        kernels = recording.kernel_summary()
        print(f"trace: {len(recording.events)} events in {args.trace} (open it in https://ui.perfetto.dev)")
        for k in kernels[:5]:
            print(f"  {k.plan}/{k.kernel}: {k.calls} calls, {k.mean_s * 1e6:.1f} us each")
    return 0


def _rich_console() -> Any:
    """A rich console for tables when rich is installed (the ``cli`` extra) and stdout is a
    terminal; None otherwise, for plain text (pipes, logs, tests)."""
    if not sys.stdout.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``asyncjit serve`` when the ``serve`` extra is installed, else a command that says so."""
    try:
        from .serve._cli import add_commands
    except ImportError as exc:
        why = str(exc)
        missing = sub.add_parser("serve", help="(needs: pip install 'asyncjit[serve]')")
        missing.set_defaults(func=lambda _a: _missing_extra("serve", why))
        return
    add_commands(sub)


def _missing_extra(extra: str, why: str) -> int:
    print(f"asyncjit: error: {why}; install it with: pip install 'asyncjit[{extra}]'", file=sys.stderr)
    return 2


def _add_logging_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """``-v`` and ``--log-json``, on the top parser and on every subcommand (so either order works;
    a subcommand's value is only set when given there)."""
    default: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        help="show asyncjit's info events (-vv: debug events too) on stderr",
        **(default or {"default": 0}),
    )
    parser.add_argument(
        "--log-json",
        action="store_true",
        help="log events as JSON lines on stderr (with -v: info events too)",
        **default,
    )


def _start_logging(verbose: int, json_lines: bool) -> Callable[[], None]:
    """A stderr handler on the ``asyncjit`` logger; returns what undoes it (main runs in tests too).

    Without ``-v`` only warnings and errors are shown, as for any library."""
    logger = logging.getLogger("asyncjit")
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG)
    logger.propagate = False  # shown once, by this handler

    def stop() -> None:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate

    return stop


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``asyncjit`` console script."""
    parser = argparse.ArgumentParser(prog="asyncjit", description="asyncjit command line")
    parser.add_argument("--version", action="version", version=f"asyncjit {__version__}")
    _add_logging_options(parser, top=True)
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
    demo.add_argument(
        "--trace",
        metavar="OUT.json",
        help="record a Chrome/Perfetto trace (device queues, kernels, mux batches, loop wake-ups)",
    )
    demo.set_defaults(func=_demo)
    plugin_commands(sub)
    onnx_cli.add_commands(sub)
    _add_serve(sub)
    for command in sub.choices.values():  # every subcommand, whoever registered it
        _add_logging_options(command, top=False)
    args = parser.parse_args(argv)
    stop_logging = _start_logging(args.verbose, args.log_json)
    try:
        return int(args.func(args))
    except (JitError, OSError) as exc:  # bad input, or a path that cannot be opened
        print(f"asyncjit: error: {exc}", file=sys.stderr)
        return 2
    finally:
        stop_logging()


if __name__ == "__main__":
    sys.exit(main())
