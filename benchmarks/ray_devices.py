"""asyncjit on Ray, against bare Ray in the same run (local cluster, ``ray.init(num_cpus=2)``).

    .venv/bin/python benchmarks/ray_devices.py [--quick]

1. **Per-step overhead of a remote device**: one step of a small plan (``x * 2 + 1`` on 512
   floats) through ``RemoteExecutable.run`` (blocking) and ``run_async`` (asyncio and trio),
   against a bare Ray actor method doing the same with numpy (``ray.get(actor.f.remote(x))``),
   interleaved, median of many round trips. Goal: < 1.2x the bare call.
2. **Streams over replicas**: 512 Silero VAD streams through ``serve_streams`` with 2 replicas,
   chunks/s, against the same streams through one in-process ``vad_mux`` (both on this 2-core
   machine: the replicas share the cores with this process).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

# benchmarks/silero_vad.py would shadow the silero-vad package (here and in Ray's workers, which
# put this script's directory on their path): drop it here, point the workers at the model file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

QUICK = False  # --quick: main() sets it from the command line (importing this module parses none)


class Bare:
    def f(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = x * 2 + 1
        return out


def overhead(calls: int) -> None:
    import anyio
    import ray

    import asyncjit
    from asyncjit import Tensor, Var
    from asyncjit.ray import RayDevice

    t = Var("t", 1, 4096)
    x = Tensor.placeholder((t,), asyncjit.float32, name="x")
    exe = asyncjit.compiler.compile([x * 2 + 1], [x])
    dev = RayDevice.start(num_cpus=0)
    remote = dev.load(exe)
    bare = ray.remote(Bare).options(num_cpus=0).remote()
    data = np.random.default_rng(0).standard_normal(512).astype(np.float32)
    np.testing.assert_array_equal(remote.run([data])[0], ray.get(bare.f.remote(data)))
    times: dict[str, list[float]] = {"bare": [], "run": []}
    for _ in range(calls):
        t0 = time.perf_counter()
        ray.get(bare.f.remote(data))
        t1 = time.perf_counter()
        remote.run([data])
        times["bare"].append(t1 - t0)
        times["run"].append(time.perf_counter() - t1)

    async def loop_times() -> tuple[list[float], list[float]]:
        """Round trips awaited on the running loop, ours and bare alternating call by call (a
        shared machine's drift hits both alike): ours through asyncjit's events; the bare call
        as Ray offers it there (``await ref`` on asyncio, ``ray.get`` in a worker thread on trio)."""
        import sniffio

        on_asyncio = sniffio.current_async_library() == "asyncio"
        bare_t, ours_t = [], []
        for _ in range(calls):
            t0 = time.perf_counter()
            if on_asyncio:
                await bare.f.remote(data)
            else:
                await anyio.to_thread.run_sync(ray.get, bare.f.remote(data))
            t1 = time.perf_counter()
            await remote.run_async([data])
            ours_t.append(time.perf_counter() - t1)
            bare_t.append(t1 - t0)
        return bare_t, ours_t

    for backend in ("asyncio", "trio"):
        times[f"bare ({backend})"], times[f"run_async ({backend})"] = anyio.run(loop_times, backend=backend)
    print(f"\nper-step round trip, median of {calls} (x*2+1 on 512 float32), ours vs bare Ray; goal < 1.2x:")
    for ours, bare_name, label in [
        ("run", "bare", "blocking: RemoteExecutable.run vs ray.get(actor.f.remote(x))"),
        ("run_async (asyncio)", "bare (asyncio)", "asyncio: await run_async vs await actor.f.remote(x)"),
        ("run_async (trio)", "bare (trio)", "trio: await run_async vs ray.get in a worker thread"),
    ]:
        a_ms = float(np.median(times[ours])) * 1e3
        b_ms = float(np.median(times[bare_name])) * 1e3
        print(f"  {label:62s} {a_ms:6.3f} vs {b_ms:6.3f} ms  {a_ms / b_ms:5.2f}x")
    dev.close()
    ray.kill(bare)


def streams(n_streams: int, n_chunks: int) -> None:
    import anyio

    from asyncjit.models import read_audio, speech_sample_path
    from asyncjit.models.silero_vad import vad_mux
    from asyncjit.ray import serve_streams

    wave = read_audio(speech_sample_path())
    chunks = np.ascontiguousarray(wave[: 512 * n_chunks].reshape(n_chunks, 512))

    async def drive(open_stream: Any) -> tuple[float, dict[int, list[float]]]:
        out: dict[int, list[float]] = {}

        async def one(i: int) -> None:
            async with open_stream() as s:
                out[i] = [float(await s.step(np.roll(c, i))) for c in chunks]

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(n_streams):
                tg.start_soon(one, i)
        return time.perf_counter() - t0, out

    async def remote() -> tuple[float, dict[int, list[float]]]:
        factory = functools.partial(vad_mux, max_streams=n_streams // 2)
        async with serve_streams(factory, replicas=2, max_streams=n_streams // 2, num_cpus=0.5) as svc:
            await drive(svc.open_stream)  # warm: replicas compile or load the plan from cache
            return await drive(svc.open_stream)

    async def local() -> tuple[float, dict[int, list[float]]]:
        async with vad_mux(max_streams=n_streams) as mux:
            await drive(mux.open_stream)
            return await drive(mux.open_stream)

    print(f"\n{n_streams} Silero VAD streams x {n_chunks} chunks:")
    for backend in ("asyncio", "trio"):
        t_remote, got = anyio.run(remote, backend=backend)
        t_local, ref = anyio.run(local, backend=backend)
        total = n_streams * n_chunks
        same = "equal" if got == ref else "DIFFERENT"
        print(
            f"  {backend:8s} serve_streams (2 replicas) {total / t_remote:9,.0f} chunks/s   "
            f"in-process vad_mux {total / t_local:9,.0f} chunks/s   ratio {t_local / t_remote:.2f}x   "
            f"results {same}"
        )


def main() -> None:
    global QUICK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer round trips and chunks")
    QUICK = ap.parse_args().quick

    import logging

    import ray
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(machine_line())
    t0 = time.perf_counter()
    from asyncjit.models.silero_vad import default_model_path

    env = {"ASYNCJIT_SILERO_ONNX": str(default_model_path())}
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": env},
    )
    print(f"ray.init(num_cpus=2): {time.perf_counter() - t0:.1f} s")
    overhead(100 if QUICK else 1000)
    streams(512, 10 if QUICK else 50)
    ray.shutdown()


if __name__ == "__main__":
    main()
