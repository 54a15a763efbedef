"""The process's helper pool for split kernels (``codegen._pool``): kept between kernels, reused,
shared safely by concurrent callers, rebuilt in a forked child; results bit for bit one thread's."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from asyncjit import Tensor
from asyncjit.codegen import _parallel, _pool
from asyncjit.codegen._matmul import PARALLEL_MIN_MACS
from asyncjit.compiler import compile

M, N, K = 96, 1030, 700  # a split product (columns in chunks), N not a multiple of the tile width


@pytest.fixture(autouse=True)
def restore_threads() -> Iterator[None]:
    old = _parallel.intra_op_threads()
    yield
    _parallel.set_intra_op_threads(old)


def _plan(batch: int = 1) -> tuple[object, list[np.ndarray]]:
    assert M * N * K >= PARALLEL_MIN_MACS
    a = Tensor.placeholder((batch, M, K), name="a")
    b = Tensor.placeholder((batch, K, N), name="b")
    exe = compile(a @ b, [a, b], name=f"pool_mm_{batch}")
    rng = np.random.default_rng(batch)
    return exe, [rng.standard_normal(s).astype(np.float32) for s in ((batch, M, K), (batch, K, N))]


def _run(exe: object, args: list[np.ndarray], threads: int) -> np.ndarray:
    _parallel.set_intra_op_threads(threads)
    (out,) = exe.run(args, {})  # type: ignore[attr-defined]
    return np.asarray(out)


def test_helpers_are_kept_and_a_narrower_job_uses_only_its_parts() -> None:
    """After a job of 8 parts, a job of 2 gives a part to one helper only (the others would
    run part indices the kernel does not have); helpers are started once, not per kernel."""
    exe, args = _plan(batch=3)
    one = _run(exe, args, 1)
    before = _pool.pool_stats()
    for threads in (8, 2, 3, 8, 2):
        assert np.array_equal(_run(exe, args, threads), one), threads
    after = _pool.pool_stats()
    assert after["jobs"] - before["jobs"] >= 5 * 3 - 3  # 3 products per call (a refused one is possible)
    assert after["helpers"] <= _parallel.MAX_THREADS - 1
    helpers = after["helpers"]
    for _ in range(5):
        _run(exe, args, 8)
    assert _pool.pool_stats()["helpers"] == helpers  # no new threads for the same width


def test_concurrent_callers_are_served_bit_for_bit() -> None:
    """Two threads splitting kernels at once: one holds the pool, the other creates threads for
    its kernel (counted as refused); neither waits for the other, both get one thread's bits."""
    exe, args = _plan()
    one = _run(exe, args, 1)
    _parallel.set_intra_op_threads(2)
    errors: list[BaseException] = []
    results: list[np.ndarray] = []

    def worker() -> None:
        try:
            for _ in range(30):
                (out,) = exe.run(args, {})  # type: ignore[attr-defined]
                results.append(np.asarray(out))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller hangs"
    assert not errors, errors
    assert len(results) == 90
    assert all(np.array_equal(r, one) for r in results)


_FORK_SCRIPT = """
import os, sys
import numpy as np
from asyncjit import Tensor
from asyncjit.codegen import _parallel, _pool
from asyncjit.compiler import compile
a = Tensor.placeholder(({m}, {k}), name="a"); b = Tensor.placeholder(({k}, {n}), name="b")
exe = compile(a @ b, [a, b], name="pool_fork")
rng = np.random.default_rng(0)
args = [rng.standard_normal(s).astype(np.float32) for s in (({m}, {k}), ({k}, {n}))]
_parallel.set_intra_op_threads(1)
(one,) = exe.run(args, {{}})
_parallel.set_intra_op_threads(2)
exe.run(args, {{}})
assert _pool.pool_stats()["helpers"] >= 1  # the parent has helpers now
# os.fork runs the pool's at-fork hook; libc's fork does not: then the owner pid check resets it
pid = os.fork() if "{how}" == "os" else __import__("ctypes").CDLL(None).fork()
if pid == 0:  # the child: its first split kernel must not wait for the parent's helpers
    (two,) = exe.run(args, {{}})
    stats = _pool.pool_stats()
    # the child's own counts (the parent's were forgotten at the fork): its helper ran its job
    ok = np.array_equal(one, two) and stats["helpers"] >= 1 and stats["jobs"] == 1
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("how", ["os", "libc"])
def test_a_forked_child_starts_its_own_helpers(how: str) -> None:
    """The parent's helpers do not exist in a forked child (``asyncjit serve --workers`` forks):
    the child's first split kernel finds the pool's owner pid changed and starts its own, rather
    than waiting for threads that are not there. (In a fresh interpreter: this test process may
    hold other libraries' threads, which make a fork here a warning.)"""
    import subprocess
    import sys

    script = _FORK_SCRIPT.format(m=M, n=N, k=K, how=how)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "child 0" in proc.stdout, (proc.stdout, proc.stderr[-2000:])


def test_a_pinned_plan_keeps_its_thread_count() -> None:
    """``pin_threads`` (what a mux step uses) survives ``set_intra_op_threads``."""
    import ctypes

    exe, _ = _plan(batch=2)  # its own plan: the pin stays on it for the rest of the process
    loaded = exe._loaded  # type: ignore[attr-defined]
    cell = ctypes.c_int64.from_address(loaded.global_address(_parallel.THREADS_SYMBOL))
    _parallel.pin_threads(loaded, 1)
    _parallel.set_intra_op_threads(4)
    assert cell.value == 1
    with pytest.raises(ValueError, match=">= 1"):
        _parallel.pin_threads(loaded, 0)


def test_a_mux_step_runs_on_one_thread() -> None:
    import ctypes

    from asyncjit.models.silero_vad import SileroBatchedStep

    step = SileroBatchedStep(16000, max_streams=4)
    loaded = step.plan.executable._loaded
    _parallel.set_intra_op_threads(2)
    addr = loaded.global_address(_parallel.THREADS_SYMBOL)
    assert addr, "the step's plan does not read the intra-op thread count"
    assert ctypes.c_int64.from_address(addr).value == 1


def test_spin_is_settable_and_checked() -> None:
    old = _pool.set_pool_spin(0)  # helpers sleep at once after a part
    try:
        exe, args = _plan()
        one = _run(exe, args, 1)
        for _ in range(3):
            assert np.array_equal(_run(exe, args, 2), one)
        with pytest.raises(ValueError, match=">= 0"):
            _pool.set_pool_spin(-1)
    finally:
        assert _pool.set_pool_spin(old) == 0


def test_a_process_may_exit_right_after_a_split_kernel() -> None:
    """The helpers may still spin in the pool's code when the interpreter exits: that code is
    never unmapped, so the exit is clean (exit status 0, no SIGSEGV)."""
    import subprocess
    import sys

    script = (
        "import numpy as np\n"
        "from asyncjit import Tensor\n"
        "from asyncjit.codegen import _parallel\n"
        "from asyncjit.compiler import compile\n"
        f"a = Tensor.placeholder(({M}, {K}), name='a'); b = Tensor.placeholder(({K}, {N}), name='b')\n"
        "exe = compile(a @ b, [a, b], name='pool_exit')\n"
        "_parallel.set_intra_op_threads(2)\n"
        f"exe.run([np.ones(({M}, {K}), np.float32), np.ones(({K}, {N}), np.float32)], {{}})\n"
    )
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]


def test_switched_off_every_kernel_creates_its_threads() -> None:
    exe, args = _plan()
    one = _run(exe, args, 1)
    assert _pool.set_pool_enabled(False)
    try:
        before = _pool.pool_stats()
        assert np.array_equal(_run(exe, args, 2), one)
        after = _pool.pool_stats()
        assert after["jobs"] == before["jobs"] and after["refused"] > before["refused"]
    finally:
        assert not _pool.set_pool_enabled(True)
    before = _pool.pool_stats()
    assert np.array_equal(_run(exe, args, 2), one)
    assert _pool.pool_stats()["jobs"] > before["jobs"]


_PINNED_SCRIPT = """
import os, threading
import numpy as np
from asyncjit import Tensor
from asyncjit.codegen import _parallel, _pool
from asyncjit.compiler import compile
a = Tensor.placeholder(({m}, {k}), name="a"); b = Tensor.placeholder(({k}, {n}), name="b")
exe = compile(a @ b, [a, b], name="pool_pinned")
args = [np.ones(({m}, {k}), np.float32), np.ones(({k}, {n}), np.float32)]
_parallel.set_intra_op_threads(2)
home = min(os.sched_getaffinity(0))
def pinned():
    os.sched_setaffinity(0, {{home}})  # this thread only
    exe.run(args, {{}})
t = threading.Thread(target=pinned); t.start(); t.join()
assert _pool.pool_stats()["helpers"] >= 1
every = sorted(os.sched_getaffinity(0))
helpers = 0
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{{tid}}/comm") as f:
        if f.read().strip() != "asyncjit-pool":
            continue
    helpers += 1
    assert sorted(os.sched_getaffinity(int(tid))) == every, (tid, os.sched_getaffinity(int(tid)))
assert helpers >= 1
print("ok")
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU")
def test_helpers_started_by_a_pinned_caller_take_the_processs_cpus() -> None:
    """The helpers live as long as the process: started by a thread pinned to one CPU (its
    program's choice), they still get the process's CPUs, not that one for good."""
    import subprocess
    import sys

    script = _PINNED_SCRIPT.format(m=M, n=N, k=K)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
