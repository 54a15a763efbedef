"""Runtime overheads: execute + await on the inline and queued paths, throughput, loop lag.

Run: ``.venv/bin/python benchmarks/runtime.py`` (about 10 s). Prints figures and ratios against a
yardstick measured in the same run: a bare ctypes call of the same native kernel plus one loop
checkpoint. Goals (issue 4): inline within 2x of the yardstick; queued path amortised below 20 us
per execution with 64 in flight; loop lag p99 below 1 ms while two devices run long kernels.

The "native" plan is built here with llvmlite (a float add over ``t*4`` elements), because the
LLVM compiler is not part of the runtime; the long kernel is libc ``usleep`` (GIL released).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import llvmlite.binding as llvm
import numpy as np
import structlog

from asyncjit import dtypes
from asyncjit.compiler._executable import ArgSpec, Executable, Launcher, Signature
from asyncjit.runtime import Client
from asyncjit.symbolic import Var

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

T = Var("t", 1, 64)
F32 = dtypes.float32

_IR = """
define void @add_f32(float* %a, float* %b, float* %out, i64 %n) {
entry:
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %pa = getelementptr float, float* %a, i64 %i
  %pb = getelementptr float, float* %b, i64 %i
  %po = getelementptr float, float* %out, i64 %i
  %va = load float, float* %pa
  %vb = load float, float* %pb
  %s = fadd float %va, %vb
  store float %s, float* %po
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""

_ADD_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def _jit_add() -> tuple[Any, Any]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple().create_target_machine()
    mod = llvm.parse_assembly(_IR)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, target)
    engine.finalize_object()
    return engine, _ADD_T(engine.get_function_address("add_f32"))


class NativeAdd(Executable):
    """``out = a + b`` over ``(t, 4)`` float32: one ctypes call (which releases the GIL)."""

    def __init__(self, fn: Any) -> None:
        self.name = "native_add"
        spec = (T, 4)
        self.signature = Signature(
            (ArgSpec("a", spec, F32), ArgSpec("b", spec, F32)), (ArgSpec("out", spec, F32),), (T,)
        )
        self._fn = fn

    @property
    def flops_estimate(self) -> int:
        return 64 * 4

    def launcher(self) -> Launcher:
        fn = self._fn

        def launch(addrs: Sequence[int], values: Sequence[int]) -> None:
            fn(addrs[0], addrs[1], addrs[2], values[0] * 4)

        return launch

    def serialize(self) -> bytes:
        return _IR.encode()


class Sleep(Executable):
    """A long kernel: libc ``usleep`` (native, GIL released), output untouched."""

    def __init__(self, us: int) -> None:
        self.name = f"usleep{us}"
        self.signature = Signature((ArgSpec("a", (4,), F32),), (ArgSpec("out", (4,), F32),), ())
        self._us = us
        self._usleep = ctypes.CDLL(None).usleep

    def launcher(self) -> Launcher:
        usleep, us = self._usleep, self._us
        return lambda addrs, values: usleep(us)

    def serialize(self) -> bytes:
        return b""


async def per_step(step: Callable[[], Awaitable[None]], n: int) -> float:
    """Median over 5 rounds of the mean cost of ``step`` in microseconds."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            await step()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds)


async def loop_lag(done: Callable[[], bool]) -> tuple[float, float]:
    """p50 and p99 of how late a 0.5 ms sleep wakes up, in microseconds, until ``done()``."""
    lags = []
    while not done():
        t0 = time.perf_counter()
        await asyncio.sleep(0.0005)
        lags.append((time.perf_counter() - t0 - 0.0005) * 1e6)
    lags.sort()
    return statistics.median(lags), lags[int(len(lags) * 0.99)]


async def main() -> None:
    engine, fn = _jit_add()
    a = np.ones((16, 4), np.float32)
    out = np.empty_like(a)
    pa, po = a.ctypes.data, out.ctypes.data

    async def bare() -> None:
        fn(pa, pa, po, 64)
        await asyncio.sleep(0)

    async with Client("cpu:2", max_in_flight=64) as client:
        ex = client.load(NativeAdd(fn), client.devices())
        x = client.buffer_from_host(a)
        vars_ = {"t": 16}

        async def inline() -> None:
            (y,) = await ex.execute([x, x], vars_, inline=True)
            await y.ready()

        async def queued() -> None:
            (y,) = await ex.execute([x, x], vars_, inline=False)
            await y.ready()

        async def auto() -> None:
            (y,) = await ex.execute([x, x], vars_)
            await y.ready()

        async def in_flight_64() -> None:
            outs = [(await ex.execute([x, x], vars_, inline=False))[0] for _ in range(64)]
            await outs[-1].ready()

        for step in (bare, inline, queued):  # warm up
            await per_step(step, 50)
        t_bare = await per_step(bare, 2000)
        t_inline = await per_step(inline, 2000)
        t_auto = await per_step(auto, 2000)
        t_queued = await per_step(queued, 300)
        t_64 = await per_step(in_flight_64, 20) / 64
        np.testing.assert_array_equal((await ex.execute([x, x], vars_))[0].to_numpy_blocking(), a + a)

        sleeper = client.load(Sleep(20_000), client.devices())
        s_in = client.buffer_from_host(np.zeros(4, np.float32))
        outs = []
        for _ in range(10):
            for dev in client.devices():
                outs += await sleeper.execute_sharded([s_in], dev, inline=False)
        busy = await loop_lag(lambda: all(o.is_ready() for o in outs))
        t_end = time.perf_counter() + 0.3
        idle = await loop_lag(lambda: time.perf_counter() > t_end)
        hop = client.device(0).hop_ns / 1e3

    def row(label: str, us: float) -> None:
        print(f"  {label:<44}{us:8.1f} us   {us / t_bare:5.2f}x yardstick")

    print("asyncjit runtime, asyncio, tiny native plan (64 floats), 2 CPU devices")
    print(f"  {'yardstick: bare ctypes call + sleep(0)':<44}{t_bare:8.1f} us")
    row("inline execute + await", t_inline)
    row("auto (inline when cheap) execute + await", t_auto)
    row("queued execute + await, one at a time", t_queued)
    row("queued, 64 in flight, per execution", t_64)
    print(f"  {'calibrated thread hop (device start)':<44}{hop:8.1f} us")
    print(f"  loop lag p50/p99, idle loop:                {idle[0]:.0f} / {idle[1]:.0f} us")
    print(f"  loop lag p50/p99, 2 devices x 20 ms kernels: {busy[0]:.0f} / {busy[1]:.0f} us  "
          f"(p99 excess over idle {busy[1] - idle[1]:.0f} us)")
    try:
        import jax  # noqa: F401
    except ImportError:
        print("  JAX not installed: jit dispatch + block_until_ready not measured")
    del engine


if __name__ == "__main__":
    asyncio.run(main())
