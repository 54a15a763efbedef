"""Bad inputs at every public entry point: each row must raise a typed ``JitError`` naming the problem.

One table per entry point. A row is (id, call, expected error class, message fragment); the call
gets the module's ``Env`` (one compiled plan, one client, buffers). Every expected class is a
``JitError`` subclass, and the test also checks that the error is one (not a bare builtin that
happens to share a base). Rows with ``error=None`` are inputs that look wrong but are valid
(Fortran-order and strided arrays, numpy integer var values): they must give the right result.

Audio readers (``wav_chunks``, ``read_wav``, ``demo --audio``) have their own table in
``tests/test_audio.py``.

The shared ground (``Env``, ``Case``) is in ``bad_inputs.py``, and the synchronous tables in
``bad_inputs_runtime.py`` (compile, run, execute, client, buffer), ``bad_inputs_frontends.py``
(jit, wrapper, recurrent, VAD and mux, devices) and ``bad_inputs_tensor.py`` (the Tensor API
and the rest); this module runs them all, then the async and command-line tables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import numpy as np
import pytest
from bad_inputs import Case, Env
from bad_inputs_frontends import DEVICES, JIT, RECURRENT, VAD, WRAPPER
from bad_inputs_runtime import BUFFER, CLIENT, COMPILE, EXECUTE, RUN
from bad_inputs_tensor import TENSOR

from asyncjit import Tensor, jit
from asyncjit.errors import (
    ArgumentCountError,
    ArgumentTypeError,
    AudioFormatError,
    BufferDeletedError,
    DeviceError,
    DonateIndexError,
    DTypeMismatchError,
    JitError,
    NotPreparedError,
    ShapeMismatchError,
    VarBoundsError,
)
from asyncjit.scheduler import StreamClosedError, StreamMux


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.client.close()
    e.other.close()


TABLE = [*COMPILE, *RUN, *EXECUTE, *CLIENT, *BUFFER, *JIT, *WRAPPER, *RECURRENT, *VAD, *DEVICES, *TENSOR]


@pytest.mark.parametrize("case", TABLE, ids=[c.id for c in TABLE])
def test_bad_input(env: Env, case: Case) -> None:
    """The row's call raises its typed error (a JitError) naming the problem, or succeeds if valid."""
    if case.error is None:
        case.call(env)
        return
    assert issubclass(case.error, JitError)
    with pytest.raises(case.error, match=_re(case.match)) as info:
        case.call(env)
    assert isinstance(info.value, JitError)


def _re(fragment: str) -> str:
    import re

    return re.escape(fragment)


def test_table_ids_unique() -> None:
    """Every row has its own id (a copy-pasted row would hide a missing case)."""
    ids = [c.id for c in TABLE] + [f"async:{c.id}" for c in ASYNC]
    assert len(ids) == len(set(ids))


# -- async entry points: the same checks, awaited on asyncio and on trio --------------------------


async def _mux_stream_step(env: Env, chunk: Any) -> None:
    async with StreamMux(env.host_step()) as mux, mux.open_stream() as s:
        await s.step(chunk)


async def _mux_closed_stream(env: Env) -> None:
    async with StreamMux(env.host_step()) as mux:
        async with mux.open_stream() as s:
            await s.step(np.zeros(16, np.float32))
        await s.step(np.zeros(16, np.float32))


async def _mux_bad_state(env: Env) -> None:
    async with StreamMux(env.host_step()) as mux, mux.open_stream(np.zeros(3, np.float32)):
        pass


async def _recurrent_async_longer_h(env: Env) -> None:
    r = env.recurrent()
    r.state.h = np.zeros(9, np.float32)
    await r.step_async()


@attrs.frozen
class AsyncCase:
    id: str
    call: Callable[[Env], Awaitable[object]]
    error: type[JitError]
    match: str = ""


ASYNC = [
    AsyncCase(
        "execute/too_many_buffers",
        lambda e: e.loaded.execute([e.bx, e.by, e.by], {"t": 3}),
        ArgumentCountError,
        "got 3",
    ),
    AsyncCase(
        "execute/donate_out_of_range",
        lambda e: e.loaded.execute(e.pair(), {"t": 3}, donate=[5]),
        DonateIndexError,
        "5",
    ),
    AsyncCase(
        "execute/var_float", lambda e: e.loaded.execute([e.bx, e.by], {"t": 3.5}), VarBoundsError, "3.5"
    ),
    AsyncCase(
        "execute/deleted_buffer",
        lambda e: e.loaded.execute([e.deleted(), e.by], {"t": 3}),
        BufferDeletedError,
        "deleted",
    ),
    AsyncCase(
        "execute_portable/not_a_device",
        lambda e: e.loaded.execute_portable([e.bx, e.by], "cpu", {"t": 3}),
        ArgumentTypeError,
        "str",
    ),
    AsyncCase(
        "execute_sharded/other_client",
        lambda e: e.loaded.execute_sharded([e.bx, e.by], e.other.device(0), {"t": 3}),
        DeviceError,
        "another client",
    ),
    AsyncCase("buffer/ready_deleted", lambda e: e.deleted().ready(), BufferDeletedError, "deleted"),
    AsyncCase("buffer/to_numpy_deleted", lambda e: e.deleted().to_numpy(), BufferDeletedError, "deleted"),
    AsyncCase(
        "jit/aio_tensor_argument",
        lambda e: jit(lambda a: a * 2).aio(Tensor.placeholder((2,))),
        ArgumentTypeError,
        "Tensor",
    ),
    AsyncCase(
        "wrapper/execute_async_unprepared", lambda e: e.wrapper().execute_async(), NotPreparedError, "prepare"
    ),
    AsyncCase(
        "wrapper/execute_with_vars_async_float",
        lambda e: e.prepared().execute_with_vars_async({"t": 2.5}),
        VarBoundsError,
        "2.5",
    ),
    AsyncCase("recurrent/step_async_longer_h", _recurrent_async_longer_h, ShapeMismatchError, "h/c"),
    AsyncCase(
        "silero/call_async_nan",
        lambda e: e.vad().call_async(np.full(512, np.inf, np.float32)),
        AudioFormatError,
        "inf",
    ),
    AsyncCase(
        "silero/call_async_short",
        lambda e: e.vad().call_async(np.zeros(3, np.float32)),
        ShapeMismatchError,
        "512",
    ),
    AsyncCase(
        "mux/step_wrong_shape",
        lambda e: _mux_stream_step(e, np.zeros(15, np.float32)),
        ShapeMismatchError,
        "(16,)",
    ),
    AsyncCase(
        "mux/step_int_pcm", lambda e: _mux_stream_step(e, np.zeros(16, np.int16)), DTypeMismatchError, "int16"
    ),
    AsyncCase("mux/step_string", lambda e: _mux_stream_step(e, "abc"), DTypeMismatchError, "<U3"),
    AsyncCase("mux/step_after_close", _mux_closed_stream, StreamClosedError, "closed"),
    AsyncCase("mux/open_bad_state", _mux_bad_state, ShapeMismatchError, "(3,)"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("case", ASYNC, ids=[c.id for c in ASYNC])
async def test_bad_input_async(env: Env, case: AsyncCase) -> None:
    """Awaited entry points raise the same typed errors on asyncio and trio."""
    assert issubclass(case.error, JitError)
    with pytest.raises(case.error, match=_re(case.match)) as info:
        await case.call(env)
    assert isinstance(info.value, JitError)


# -- the command line -----------------------------------------------------------------------------

CLI = [
    (["demo", "--streams", "0"], "must be >= 1"),
    (["demo", "--streams", "x"], "invalid"),
    (["nonsense"], "invalid choice"),
    (["serve", "--wyoming", "http://127.0.0.1:1"], "expected a tcp:// address"),
    (["serve", "--websocket", "127.0.0.1"], "has no port"),
    (["serve", "--max-streams", "0"], "max_streams must be >= 1"),
    (["serve", "--idle-timeout", "-1"], "idle_timeout must be > 0"),
    (["serve", "--dim", "nonsense"], "--dim takes NAME=VALUE"),
    (["serve", "--backend", "trio", "--loop", "uvloop"], "--loop uvloop is an asyncio loop"),
    (["serve", "--backend", "trio", "--loop", "asyncio"], "--backend trio has its own"),
    (["serve", "--loop", "libuv"], "invalid choice"),
    ([], "required"),
]


@pytest.mark.parametrize(("argv", "message"), CLI, ids=[" ".join(a) or "no-args" for a, _ in CLI])
def test_cli_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad command lines exit 2 (argparse's exit, or the subcommand's status) with a message
    naming the problem, no traceback."""
    from asyncjit.cli import main

    try:
        code: object = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
