"""``asyncjit serve``: the parser and the handler (registered by ``asyncjit/cli.py``)."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["LOOPS", "add_commands", "loop_options"]

LOOPS = ("auto", "asyncio", "uvloop")


def loop_options(backend: str, loop: str) -> tuple[dict[str, Any], str]:
    """``anyio.run``'s backend options for ``--loop`` on ``--backend``, and the loop's name.

    uvloop (libuv's loop for asyncio) does the transport's reads, writes and callbacks in C: the
    server's loop thread spends about 1.3x less CPU per chunk on it. ``auto`` takes it when it is
    installed (the serve extra, not on Windows), as uvicorn does.

    Raises:
        ValueError: an asyncio loop asked for on trio, or ``uvloop`` when it is not installed.
    """
    from .._loops import run_options, uvloop_installed

    if backend != "asyncio":
        if loop != "auto":
            raise ValueError(f"--loop {loop} is an asyncio loop; --backend {backend} has its own")
        return run_options(backend)[1], backend
    installed = loop != "asyncio" and uvloop_installed()
    if loop == "uvloop" and not installed:
        raise ValueError("--loop uvloop needs the uvloop package (pip install 'asyncjit[serve]')")
    name = "uvloop" if installed else "asyncio"
    return run_options(name)[1], name


EPILOG = """\
examples:
  asyncjit serve                                   # Wyoming on tcp://127.0.0.1:10400
  asyncjit serve --wyoming tcp://0.0.0.0:10400 --websocket ws://0.0.0.0:8765 --metrics :9100
  asyncjit serve --backend trio --max-streams 2048 --idle-timeout 60
  asyncjit serve --workers 2 --metrics :9100       # two processes, one loop each, same ports
  asyncjit serve --loop asyncio                    # the standard library's loop, not uvloop

Wyoming clients (Home Assistant) get voice-started/voice-stopped; WebSocket clients send binary
PCM and get JSON events; http://HOST:PORT/ on the WebSocket port is a microphone page;
/health and /metrics (Prometheus) on the WebSocket and metrics ports. SIGTERM or Ctrl-C: stop
accepting, answer the chunks in flight, close every connection with "shutdown", exit 0.
See docs/serve.md.
"""


def add_commands(sub: Any) -> None:
    """Add ``serve`` to the ``asyncjit`` command's subparsers."""
    p = sub.add_parser(
        "serve",
        help="a streaming voice-activity service (Wyoming and WebSocket) on one StreamMux",
        description="Serve a voice-activity model to many Wyoming and WebSocket clients at once.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", default="silero-vad", help="the built-in model (default: silero-vad)")
    p.add_argument(
        "--model-path",
        metavar="X.onnx",
        help="a recurrent ONNX model, served through asyncjit.onnx.recurrent_step (with --state, "
        "--context, --dim, --value; its output's first element is the speech probability)",
    )
    p.add_argument(
        "--state",
        metavar="IN:OUT[,IN:OUT]",
        help="the ONNX model's state inputs and the outputs feeding them",
    )
    p.add_argument("--context", type=int, default=0, help="ONNX: samples of the last chunk put before each")
    p.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N|LO:HI",
        help="ONNX: a symbolic dim's size/bounds",
    )
    p.add_argument("--value", action="append", default=[], metavar="NAME=V", help="ONNX: an input fixed to V")
    p.add_argument("--batch-dim", default="batch", help="ONNX: the chunk input's batch dim (default: batch)")
    p.add_argument("--sample-rate", type=int, default=16000, help="the model's rate, 16000 or 8000")
    p.add_argument(
        "--wyoming",
        default="tcp://127.0.0.1:10400",
        metavar="tcp://HOST:PORT",
        help="Wyoming listener ('' off)",
    )
    p.add_argument("--websocket", default="", metavar="ws://HOST:PORT", help="WebSocket + HTTP listener")
    p.add_argument("--metrics", default="", metavar="[HOST]:PORT", help="Prometheus /metrics and /health")
    p.add_argument(
        "--max-streams", type=int, default=1024, help="connections streaming at once (default 1024)"
    )
    p.add_argument("--idle-timeout", type=float, default=30.0, help="seconds without input before closing")
    p.add_argument("--write-timeout", type=float, default=10.0, help="seconds a client may not read")
    p.add_argument("--grace", type=float, default=2.0, help="seconds to drain at shutdown before cancelling")
    p.add_argument("--max-batch-size", type=int, default=None, help="streams per native call")
    p.add_argument("--max-queue-delay", type=float, default=0.002, help="seconds a batch waits to fill")
    p.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio", help="event loop")
    p.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="asyncio's loop: uvloop (the serve extra installs it; less CPU per chunk) or "
        "the standard library's; auto (default): uvloop when installed",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the ports (Linux; each has its own loop, model and "
        "--max-streams; default 1)",
    )
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning"),
        default=None,
        help="asyncjit's log level on stderr (default info: a line per connection; -v/--log-json apply)",
    )
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import anyio

    from ..errors import JitError
    from ._server import parse_address
    from ._workers import check_workers, serve_workers

    if args.log_level is not None:  # a server logs its connections at info level unless told otherwise
        logging.getLogger("asyncjit").setLevel(getattr(logging, args.log_level.upper()))
    elif not args.verbose:
        logging.getLogger("asyncjit").setLevel(logging.INFO)
    problem = check_workers(args.workers)
    if problem is None and not (args.wyoming or args.websocket):
        problem = "no listener; give --wyoming and/or --websocket"
    if problem is None:
        try:
            config = _config(args)  # every flag checked before a model loads or a worker starts
            options, loop = loop_options(args.backend, args.loop)
        except ValueError as exc:
            problem = str(exc)
        else:
            if args.workers > 1 and config.wyoming and config.websocket:
                wyoming, websocket = (
                    parse_address(config.wyoming, "tcp"),
                    parse_address(config.websocket, "ws"),
                )
                if wyoming == websocket and wyoming[1] != 0:
                    problem = f"--wyoming and --websocket are both {wyoming[0]}:{wyoming[1]}"
    if problem is not None:
        print(f"asyncjit serve: error: {problem}", file=sys.stderr)
        return 2
    if args.workers > 1:
        return serve_workers(args, build_server)
    try:
        server = build_server(args)
    except ValueError as exc:
        if isinstance(exc, JitError):
            raise
        print(f"asyncjit serve: error: {exc}", file=sys.stderr)
        return 2
    server.log.info("serve.loop", backend=args.backend, loop=loop)
    anyio.run(run_until_signal, server, backend=args.backend, backend_options=options)
    return 0


def _config(args: argparse.Namespace, **overrides: Any) -> Any:
    """The ``ServeConfig`` of the flags, with ``overrides`` (a worker's shared addresses)."""
    from ._server import ServeConfig

    fields: dict[str, Any] = {
        "wyoming": args.wyoming or None,
        "websocket": args.websocket or None,
        "metrics": args.metrics or None,
        "max_streams": args.max_streams,
        "idle_timeout": args.idle_timeout,
        "write_timeout": args.write_timeout,
        "grace": args.grace,
        "max_batch_size": args.max_batch_size,
        "max_queue_delay": args.max_queue_delay,
    }
    fields.update(overrides)
    return ServeConfig(**fields)


def build_server(args: argparse.Namespace, **overrides: Any) -> Any:
    """Load the model and make the ``VadServer`` the flags describe.

    Raises:
        ValueError: a flag or the model is wrong (a ``JitError`` from compiling it is not caught).
    """
    from ._model import load_model
    from ._server import VadServer

    model = load_model(
        args.model,
        sample_rate=args.sample_rate,
        model_path=args.model_path,
        state=args.state,
        context=args.context,
        dims=dict(_assignment(d, "--dim", _dim) for d in args.dim),
        values=dict(_assignment(v, "--value", _number) for v in args.value),
        batch_dim=args.batch_dim,
        max_streams=args.max_streams,
        max_batch_size=args.max_batch_size,
    )
    return VadServer(model, _config(args, **overrides))


def _assignment(text: str, flag: str, parse: Any) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not (sep and name and value):
        raise ValueError(f"{flag} takes NAME=VALUE, got {text!r}")
    return name, parse(value)


def _dim(text: str) -> int | tuple[int, int]:
    lo, sep, hi = text.partition(":")
    return (int(lo), int(hi)) if sep else int(text)


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


async def run_until_signal(server: Any, ready: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully; prints the bound addresses
    (or hands them to ``ready``: a worker tells its supervisor)."""
    import anyio

    async with anyio.create_task_group() as tg:
        receiving = anyio.Event()

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                receiving.set()
                async for signum in signals:
                    server.log.info("serve.signal", signal=signal.Signals(signum).name)
                    server.shutdown()
                    if ready is None:  # a second Ctrl-C then stops a stuck drain the hard way
                        return
                    # a worker: Ctrl-C reaches it and its supervisor, which passes it on

        async def serve(*, task_status: Any) -> None:
            await server.serve(task_status=task_status)
            tg.cancel_scope.cancel()

        tg.start_soon(watch_signals)
        await receiving.wait()  # before a worker unblocks the signals it held since its fork
        addresses = await tg.start(serve)
        _freeze_heap(server)
        if ready is not None:
            ready(addresses)
            return
        from ._server import listening_line

        print(listening_line(server.model.name, addresses), flush=True)


def _freeze_heap(server: Any) -> None:
    """Put what loading and compiling the model made out of the garbage collector's reach.

    None of it (IR, graphs, modules: about 67,000 objects for Silero VAD) is garbage, but a full
    collection walked it all while serving: 80 and 130 ms pauses at 300 real-time connections
    (`gc.callbacks`, 20 s each), 16 and 30 ms frozen, and every chunk in flight waits out a pause.
    """
    gc.collect()
    gc.freeze()
    server.log.info("serve.heap_frozen", objects=gc.get_freeze_count())
