"""Front-end benchmarks: an LSTM cell step read back every step, and 100 input lengths.

Run: ``.venv/bin/python benchmarks/frontends.py`` (about 1 min, of which JAX's 100 compiles take
20-40 s; ``--quick`` shortens only the LSTM rounds).

1. **LSTM cell step** (hidden 128, batch 1; x, h, c are [1, 128] float32; in the main rows the
   weights are constants baked into the plan for every peer — closed over by the traced
   function; the "weights arg" rows pass them as an argument instead). Each step
   feeds the previous step's (h, c) back and reads both results to host numpy arrays.
   Rows: ``@asyncjit.jit`` called with numpy arrays + ``.to_numpy_blocking()``; the same jit
   called with a pytree ``(x, (h, c))``; with the weights as a pytree dict argument placed once
   with ``asyncjit.jit.device_put`` (vs ``jax.device_put`` for the JAX twin); ``JitWrapper`` +
   ``JitRecurrent`` (inputs written in place through ``*_mut`` views); JAX ``jax.jit`` +
   ``np.asarray``; plain numpy (float32). Figures are medians over rounds that interleave the
   peers (the machine is shared; interleaving cancels load drift) of per-step wall time, and of
   the main thread's CPU time (``time.thread_time``, which preemption inflates less; JAX's and
   asyncjit's worker threads are not in it). Goal: asyncjit faster than JAX and numpy.
2. **100 distinct input lengths**: ``(tanh(x * 0.5 + 1) * x).sum(axis=1)``, per-frame work over
   ``x[1, T]`` for 100 distinct T in 1..3000 (fixed seed), through one bounded
   ``asyncjit.jit(dynamic={"x": {1: ("t", 1, 3000)}})`` vs ``jax.jit`` (recompiles per shape).
   Reports compile counts (``f.compiles``; JAX: ``_cache_size()``) and the total wall time of the
   100 calls including compiles. The compile caches of both are cold for this function: asyncjit's
   disk cache is pointed at a fresh temporary directory.

JAX is optional: without it the JAX rows are skipped with a note.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import structlog

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

import asyncjit  # noqa: E402
from asyncjit import InputSpec, JitRecurrent, JitWrapper, LstmState, Tensor  # noqa: E402
from asyncjit.jit import device_put  # noqa: E402

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
except ImportError:  # pragma: no cover - optional peer
    jax = None  # type: ignore[assignment]
    jnp = None  # type: ignore[assignment]

H = 128
QUICK = False  # --quick: main() sets it from the command line (importing this module parses none)


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(H)
    return {
        "w_ih": rng.uniform(-s, s, (4 * H, H)).astype(np.float32),
        "w_hh": rng.uniform(-s, s, (4 * H, H)).astype(np.float32),
        "b": rng.uniform(-s, s, 4 * H).astype(np.float32),
    }


W = _weights()
W_IH_T = np.ascontiguousarray(W["w_ih"].T)
W_HH_T = np.ascontiguousarray(W["w_hh"].T)


# -- the LSTM cell on each peer ------------------------------------------------------------------
def lstm_tensor(x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    gates = x.matmul(Tensor.const(W_IH_T)) + h.matmul(Tensor.const(W_HH_T)) + Tensor.const(W["b"])
    i, f, g, o = gates.chunk(4, axis=1)
    c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h_new = o.sigmoid() * c_new.tanh()
    return h_new, c_new


def lstm_params(p: dict[str, Any], x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """The cell with its weights as a pytree argument (a dict of arrays or Buffers)."""
    gates = x.matmul(p["w_ih_t"]) + h.matmul(p["w_hh_t"]) + p["b"]
    i, f, g, o = gates.chunk(4, axis=1)
    c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c_new.tanh(), c_new


PARAMS = {"w_ih_t": W_IH_T, "w_hh_t": W_HH_T, "b": W["b"]}


def lstm_numpy(x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    gates = x @ W_IH_T + h @ W_HH_T + W["b"]
    i, f, g, o = np.split(gates, 4, axis=1)

    def sig(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))

    c_new = sig(f) * c + sig(i) * np.tanh(g)
    h_new = sig(o) * np.tanh(c_new)
    return h_new, c_new


class LstmJit(JitWrapper[None]):
    """The same cell through the prepare/execute API; output ``[h | c]`` for ``JitRecurrent``."""

    x = asyncjit.Input()
    state_h = asyncjit.Input()
    state_c = asyncjit.Input()

    def build(self, model: None, x: Tensor, state_h: Tensor, state_c: Tensor) -> Tensor:
        h_new, c_new = lstm_tensor(x, state_h, state_c)
        return Tensor.cat([h_new, c_new], axis=1)

    def pack_state(self, state: LstmState) -> None:
        self.state_h_mut()[0] = state.h
        self.state_c_mut()[0] = state.c


Step = Callable[[np.ndarray], None]


def make_peers() -> dict[str, Step]:
    """name -> a step closure that takes the new x and keeps (h, c) across calls."""
    peers: dict[str, Step] = {}

    f = asyncjit.jit(lstm_tensor)
    state = {"h": np.zeros((1, H), np.float32), "c": np.zeros((1, H), np.float32)}

    def aj_step(x: np.ndarray) -> None:
        h, c = f(x, state["h"], state["c"])
        state["h"], state["c"] = h.to_numpy_blocking(), c.to_numpy_blocking()

    peers["asyncjit.jit"] = aj_step

    @asyncjit.jit
    def tree_cell(x: Tensor, hc: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        return lstm_tensor(x, *hc)

    tstate = {"hc": (np.zeros((1, H), np.float32), np.zeros((1, H), np.float32))}

    def tree_step(x: np.ndarray) -> None:
        h, c = tree_cell(x, tstate["hc"])
        tstate["hc"] = (h.to_numpy_blocking(), c.to_numpy_blocking())

    peers["asyncjit.jit (pytree)"] = tree_step

    fw = asyncjit.jit(lstm_params)
    on_device = device_put(PARAMS)
    wstate = {"h": np.zeros((1, H), np.float32), "c": np.zeros((1, H), np.float32)}

    def weights_step(x: np.ndarray) -> None:
        h, c = fw(on_device, x, wstate["h"], wstate["c"])
        wstate["h"], wstate["c"] = h.to_numpy_blocking(), c.to_numpy_blocking()

    peers["asyncjit.jit (weights arg)"] = weights_step

    wrapper = LstmJit(None)
    wrapper.prepare(InputSpec.f32((1, H)), InputSpec.f32((1, H)), InputSpec.f32((1, H)))
    rec = JitRecurrent(wrapper, LstmState.zeros(H), head_len=0)

    def rec_step(x: np.ndarray) -> None:
        wrapper.x_mut()[:] = x
        rec.step()

    peers["JitWrapper+JitRecurrent"] = rec_step

    if jax is not None:
        jw = {k: jnp.asarray(v) for k, v in (("w_ih_t", W_IH_T), ("w_hh_t", W_HH_T), ("b", W["b"]))}

        @jax.jit
        def jax_cell(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
            gates = x @ jw["w_ih_t"] + h @ jw["w_hh_t"] + jw["b"]
            i, f_, g, o = jnp.split(gates, 4, axis=1)
            c_new = jax.nn.sigmoid(f_) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            return jax.nn.sigmoid(o) * jnp.tanh(c_new), c_new

        jstate = {"h": np.zeros((1, H), np.float32), "c": np.zeros((1, H), np.float32)}

        def jax_step(x: np.ndarray) -> None:
            h, c = jax_cell(x, jstate["h"], jstate["c"])
            jstate["h"], jstate["c"] = np.asarray(h), np.asarray(c)

        peers["jax.jit"] = jax_step

        @jax.jit
        def jax_cell_w(p: Any, x: Any, h: Any, c: Any) -> tuple[Any, Any]:
            gates = x @ p["w_ih_t"] + h @ p["w_hh_t"] + p["b"]
            i, f_, g, o = jnp.split(gates, 4, axis=1)
            c_new = jax.nn.sigmoid(f_) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            return jax.nn.sigmoid(o) * jnp.tanh(c_new), c_new

        jparams = jax.device_put(PARAMS)
        jwstate = {"h": np.zeros((1, H), np.float32), "c": np.zeros((1, H), np.float32)}

        def jax_w_step(x: np.ndarray) -> None:
            h, c = jax_cell_w(jparams, x, jwstate["h"], jwstate["c"])
            jwstate["h"], jwstate["c"] = np.asarray(h), np.asarray(c)

        peers["jax.jit (weights arg)"] = jax_w_step

    nstate = {"h": np.zeros((1, H), np.float32), "c": np.zeros((1, H), np.float32)}

    def np_step(x: np.ndarray) -> None:
        nstate["h"], nstate["c"] = lstm_numpy(x, nstate["h"], nstate["c"])

    peers["numpy"] = np_step

    # correctness: one step from zero state agrees with numpy (asyncjit.jit and JitRecurrent)
    x0 = np.random.default_rng(9).standard_normal((1, H)).astype(np.float32)
    zero = np.zeros((1, H), np.float32)
    want_h, want_c = lstm_numpy(x0, zero, zero)
    got_h, got_c = f(x0, zero, zero)
    np.testing.assert_allclose(got_h.to_numpy_blocking(), want_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_c.to_numpy_blocking(), want_c, rtol=1e-4, atol=1e-5)
    rec_step(x0)
    np.testing.assert_allclose(rec.state.h, want_h[0], rtol=1e-4, atol=1e-5)
    return peers


def bench_lstm() -> None:
    print(f"== LSTM cell step, hidden {H}, batch 1, read back every step (median us per step) ==")
    peers = make_peers()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, H)).astype(np.float32) for _ in range(64)]
    rounds, per_round = (15, 100) if QUICK else (40, 200)
    for step in peers.values():  # warm up: compile, caches, allocator
        for x in xs:
            step(x)
    samples: dict[str, list[float]] = {n: [] for n in peers}
    cpu: dict[str, list[float]] = {n: [] for n in peers}
    perf, thread_time = time.perf_counter, time.thread_time
    for r in range(rounds):
        names = list(peers)
        if r % 2:
            names.reverse()
        for name in names:
            step = peers[name]
            t0, c0 = perf(), thread_time()
            for i in range(per_round):
                step(xs[i & 63])
            samples[name].append((perf() - t0) / per_round)
            cpu[name].append((thread_time() - c0) / per_round)
    med = {n: statistics.median(v) * 1e6 for n, v in samples.items()}
    med_cpu = {n: statistics.median(v) * 1e6 for n, v in cpu.items()}
    best = med["asyncjit.jit"]
    print(f"  {'':28s} {'wall us':>8s} {'cpu us':>8s}   wall ratio to asyncjit.jit")
    for name, us in med.items():
        print(f"  {name:28s} {us:8.2f} {med_cpu[name]:8.2f}   {us / best:5.2f}x")
    for ours, peer in (
        ("asyncjit.jit", "jax.jit"),
        ("asyncjit.jit", "numpy"),
        ("asyncjit.jit (weights arg)", "jax.jit (weights arg)"),
        ("JitWrapper+JitRecurrent", "jax.jit"),
        ("JitWrapper+JitRecurrent", "numpy"),
    ):
        if peer in med:
            verdict = "met" if med[ours] < med[peer] else "MISSED"
            print(f"  goal {ours} faster than {peer}: {verdict} ({med[peer] / med[ours]:.2f}x)")
    if jax is None:
        print("  (JAX not importable: jax.jit row skipped)")


# -- 100 distinct lengths ----------------------------------------------------------------------
def bench_lengths() -> None:
    print("== 100 distinct input lengths x[1, T], T in 1..3000 (total wall time incl. compiles) ==")
    lengths = np.random.default_rng(5).choice(np.arange(1, 3001), size=100, replace=False)
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((1, int(t))).astype(np.float32) for t in lengths]

    def per_frame(x: Tensor) -> Tensor:
        return ((x * 0.5 + 1.0).tanh() * x).sum(axis=1)

    f = asyncjit.jit(per_frame, dynamic={"x": {1: ("t", 1, 3000)}})
    t0 = time.perf_counter()
    ours = [f(x).to_numpy_blocking() for x in inputs]
    aj_total = time.perf_counter() - t0
    for x, y in zip(inputs, ours, strict=True):
        np.testing.assert_allclose(y, (np.tanh(x * 0.5 + 1.0) * x).sum(axis=1), rtol=1e-4, atol=1e-3)
    print(f"  asyncjit.jit (bounded t) compiles {f.compiles:4d}   total {aj_total * 1e3:9.1f} ms")
    if jax is None:
        print("  (JAX not importable: jax.jit row skipped)")
        return

    @jax.jit
    def jax_frame(x: Any) -> Any:
        return (jnp.tanh(x * 0.5 + 1.0) * x).sum(axis=1)

    t0 = time.perf_counter()
    for x in inputs:
        np.asarray(jax_frame(x))
    jax_total = time.perf_counter() - t0
    print(
        f"  jax.jit (per shape)      compiles {jax_frame._cache_size():4d}   total {jax_total * 1e3:9.1f} ms"
    )
    print(f"  ratio jax / asyncjit total time {jax_total / aj_total:.1f}x")


def main() -> None:
    global QUICK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter LSTM rounds (the lengths run is the same)")
    QUICK = ap.parse_args().quick
    with tempfile.TemporaryDirectory() as cache:
        os.environ["ASYNCJIT_CACHE_DIR"] = cache
        bench_lengths()
        bench_lstm()


if __name__ == "__main__":
    main()
