"""Intra-op parallelism: a kernel splits its work over helper threads and waits for them.

**The choice.** A plan stays one foreign call per replay (invariant 4): the entry point, not
Python, hands parts ``1..T-1`` of a big kernel to helper threads, runs part 0 itself, and waits
for them before the next kernel. No callback into Python (which would need the GIL) and no
per-range calls from the runtime. The helpers are the process's pool (``_pool``): created once,
spinning ``_pool.SPIN_US`` after a part for the next one (a plan's next kernel is microseconds
away), then asleep on a futex, so nothing spins between bursts of split kernels on a machine
whose cores the event loop and the device actors share. A kernel splits from
``_matmul.PARALLEL_MIN_MACS``; with threads created per kernel (20-60 µs each, and 0.1-0.5 ms
before one runs on these VMs) only products 8x larger paid back. When the pool is busy (another
thread's kernel holds it) a kernel creates its helpers with ``pthread_create`` as before and
joins them; a failed ``pthread_create`` runs that part on the calling thread.

**Where a created helper starts** (the busy-pool path; the pool's helpers are started once and
stay where the scheduler settles them). Linux starts a new thread on its creator's CPU and leaves it there
until a load balance moves it, often after the kernel is over: a helper spawned plainly shared
the caller's core in 32 of 40 calls here (a split 5 ms job took 10 ms, not 5). So a helper is
created with an affinity that excludes the caller's current CPU (when the process may run on
another), which places it on another core's queue, and the caller widens it back to the
process's CPUs right after ``pthread_create``, so the scheduler may still move it (to this core,
when the other is busy and this one idles at the join). The cost of the choice: with the other
core busy (another process, an event loop spinning), a helper preempted in the middle of a chunk
holds the join until its core's next time slice; 512^3 with a busy loop on the other core ran
0.72-0.77x one thread in the median (bimodal: the best calls 1.6x, the others a slice late), where
plain placement ran 1.0x (and 1.0-1.3x on an idle machine, against 1.5-1.9x now).

**How many.** ``intra_op_threads()`` (default: the cores this process may run on), capped at
``MAX_THREADS``, which the scratch sizing assumes. Each loaded plan reads it from its own
global ``asyncjit_intra_op_threads`` at every replay; ``set_intra_op_threads(n)`` writes every
live plan's copy (except those given their own with ``pin_threads``: a ``StreamMux`` step runs on
one, its event loop holding the other core), and ``runtime.Client`` sizes it to the cores over
its CPU devices, so device actors that each run a split kernel do not oversubscribe the machine.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from llvmlite import ir

from ._target import I32, I64, PTR, for_range, i64, new_function

__all__ = [
    "MAX_THREADS",
    "available_cores",
    "process_cpus",
    "THREADS_SYMBOL",
    "emit_parallel_for",
    "intra_op_threads",
    "pin_threads",
    "register_plan",
    "set_intra_op_threads",
    "threads_value",
]

MAX_THREADS = 8
"""Most threads one kernel splits over; scratch is sized for it, so it is part of the IR."""
THREADS_SYMBOL = "asyncjit_intra_op_threads"
POOL_SYMBOL = "asyncjit_pool_run"
"""The helper pool's entry point (``_pool``): ``i32 run(part_fn, ctx, parts)``, 0 when it ran them."""


def process_cpus() -> set[int]:
    """The CPUs this process may run on: its affinity (the main thread's), not the calling
    thread's, which a thread pinned to one CPU (by its program, or ``taskset``) narrows to it."""
    try:
        return set(os.sched_getaffinity(os.getpid()))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return set(range(os.cpu_count() or 1))


def available_cores() -> int:
    """The cores this process may run on."""
    return max(1, len(process_cpus()))


_lock = threading.Lock()
_threads = available_cores()
_plans: weakref.WeakSet[Any] = weakref.WeakSet()
_pinned: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def intra_op_threads() -> int:
    """Threads a big kernel splits over now (1: no splitting)."""
    return _threads


def set_intra_op_threads(n: int) -> int:
    """Set the threads big kernels split over, for every plan loaded now and later; returns the
    previous value.

    Raises:
        ValueError: ``n`` < 1.
    """
    global _threads
    if n < 1:
        raise ValueError(f"intra-op threads must be >= 1, got {n}")
    with _lock:
        old, _threads = _threads, n
        for plan in list(_plans):
            if plan not in _pinned:
                _write(plan, n)
    return old


def pin_threads(loaded: Any, n: int) -> None:
    """Give one loaded object its own thread count, kept when ``set_intra_op_threads`` changes
    everyone else's (a multiplexer's step: its event loop holds the other core). The count
    belongs to the code: executables compiled to the same code share one loaded object (the
    compile cache), so every step plan of the same model and sizes runs on it (a step's plan is
    its own, not the session's it was built from).

    Raises:
        ValueError: ``n`` < 1.
    """
    if n < 1:
        raise ValueError(f"intra-op threads must be >= 1, got {n}")
    with _lock:
        if _write(loaded, n):
            _plans.add(loaded)
            _pinned[loaded] = n


def register_plan(loaded: Any) -> None:
    """Give a freshly loaded object the current thread count if it has the global (else no-op)."""
    with _lock:
        if _write(loaded, _pinned.get(loaded, _threads)):
            _plans.add(loaded)


def _write(loaded: Any, n: int) -> bool:
    addr = loaded.global_address(THREADS_SYMBOL)
    if not addr:
        return False
    ctypes.c_int64.from_address(addr).value = min(n, MAX_THREADS)
    return True


def threads_value(b: ir.IRBuilder) -> ir.Value:
    """Load the plan's thread count (the module global, created on first use), clamped to 1..MAX."""
    module = b.module
    gv = module.globals.get(THREADS_SYMBOL)
    if gv is None:
        gv = ir.GlobalVariable(module, I64, THREADS_SYMBOL)
        gv.initializer = ir.Constant(I64, 1)
    n = b.load(gv, typ=I64)
    n = b.select(b.icmp_signed("<", n, i64(1)), i64(1), n)
    return b.select(b.icmp_signed(">", n, i64(MAX_THREADS)), i64(MAX_THREADS), n)


def _decl(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if isinstance(fn, ir.Function):
        return fn
    return ir.Function(module, ir.FunctionType(ret, args), name)


I8 = ir.IntType(8)
_JOB = 3  # i64 fields of a job: ctx (as an integer), part, parts
_MASK_WORDS = 16  # a glibc cpu_set_t: 1,024 CPUs in 128 bytes
_ATTR_WORDS = 8  # room for a pthread_attr_t (56 bytes on x86-64 glibc)


def _trampoline(module: ir.Module, body: ir.Function) -> ir.Function:
    """``void* tramp(job*)``: the pthread start routine that calls ``body(ctx, part, parts)``."""
    name = f"{body.name}.tramp"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn = ir.Function(module, ir.FunctionType(PTR, [PTR]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    job = fn.args[0]
    ctx, part, parts = (b.load(b.gep(job, [i64(i)], source_etype=I64), typ=I64) for i in range(_JOB))
    fields = [b.inttoptr(ctx, PTR), part, parts]
    b.call(body, fields)
    b.ret(ir.Constant(PTR, None))
    return fn


def emit_parallel_for(b: ir.IRBuilder, body: ir.Function, ctx: ir.Value, parts: ir.Value) -> None:
    """Run ``body(ctx, p, parts)`` for ``p`` in ``0..parts-1`` (``parts`` <= MAX_THREADS), parts
    1.. on the pool's helpers (or, when the pool is busy, on threads created here) and part 0
    here, and return when all are done."""
    module = b.module
    create = _decl(module, "pthread_create", I32, [PTR, PTR, PTR, PTR])
    join = _decl(module, "pthread_join", I32, [I64, PTR])
    tramp = _trampoline(module, body)
    entry = b.function.entry_basic_block  # allocas in the entry block: a loop must not grow the stack
    if b.block is entry:
        eb = b  # a second builder's position in the same block would go stale as ``b`` appends
    else:
        eb = ir.IRBuilder(entry)
        eb.position_at_start(entry)
    jobs = eb.alloca(I64, size=_JOB * MAX_THREADS)
    tids = eb.alloca(I64, size=MAX_THREADS)
    started = eb.alloca(I8, size=MAX_THREADS)
    mask = eb.alloca(I64, size=_MASK_WORDS)
    avoid = eb.alloca(I64, size=_MASK_WORDS)
    attr = eb.alloca(I64, size=_ATTR_WORDS)
    zero = ir.Constant(I32, 0)
    parts = b.select(b.icmp_signed(">", parts, i64(MAX_THREADS)), i64(MAX_THREADS), parts)  # the arrays' size
    pooled = eb.alloca(I8)
    b.store(ir.Constant(I8, 0), pooled)
    many = b.icmp_signed(">", parts, i64(1))
    with b.if_then(many):
        run = _decl(module, POOL_SYMBOL, I32, [PTR, PTR, I64])
        took = b.icmp_signed("==", b.call(run, [body, ctx, parts]), zero)
        b.store(b.zext(took, I8), pooled)
    spawn = b.and_(many, b.icmp_unsigned("==", b.load(pooled, typ=I8), ir.Constant(I8, 0)))
    with b.if_then(spawn):
        placed = _placement(b, mask, avoid, attr)
        widen = _decl(module, "pthread_setaffinity_np", I32, [I64, I64, PTR])
        with for_range(b, i64(1), parts, name="spawn") as p:
            job = b.gep(jobs, [b.mul(p, i64(_JOB))], source_etype=I64)
            for i, v in enumerate((b.ptrtoint(ctx, I64), p, parts)):
                b.store(v, b.gep(job, [i64(i)], source_etype=I64))
            tid = b.gep(tids, [p], source_etype=I64)
            rc = b.call(create, [tid, attr, tramp, job])
            ok = b.icmp_signed("==", rc, zero)
            flag = b.gep(started, [p], source_etype=I8)
            b.store(b.zext(ok, I8), flag)
            with b.if_else(ok) as (created, failed):
                with created, b.if_then(placed):
                    # queued on another CPU now; widened at once, so that when that CPU is busy
                    # and this one idles at the join, the scheduler may pull it here
                    b.call(widen, [b.load(tid, typ=I64), i64(8 * _MASK_WORDS), mask])
                with failed:  # no thread: do that part here
                    b.call(body, [ctx, p, parts])
        b.call(_decl(module, "pthread_attr_destroy", I32, [PTR]), [attr])
    with b.if_then(b.icmp_unsigned("==", b.load(pooled, typ=I8), ir.Constant(I8, 0))):
        b.call(body, [ctx, i64(0), parts])
        with b.if_then(spawn), for_range(b, i64(1), parts, name="join") as p:
            flag = b.gep(started, [p], source_etype=I8)
            with b.if_then(b.icmp_unsigned("!=", b.load(flag, typ=I8), ir.Constant(I8, 0))):
                tid = b.load(b.gep(tids, [p], source_etype=I64), typ=I64)
                b.call(join, [tid, ir.Constant(PTR, None)])


def _placement(b: ir.IRBuilder, mask: ir.Value, avoid: ir.Value, attr: ir.Value) -> ir.Value:
    """Initialise the thread attributes ``attr`` for the helpers: when the process may run on a CPU
    other than the one this thread is on now, their affinity is the process's minus that CPU (the
    process's, not this thread's: the caller may be pinned to one CPU).
    Fills ``mask`` with the process's CPUs (what a created helper is widened back to); returns
    whether the attributes restrict the helpers (an ``i1``). One function per module, called from
    every split kernel's fallback (its unrolled mask loop, copied into each, cost compile time)."""
    module = b.module
    name = "asyncjit.placement"
    fn = module.globals.get(name)
    if not isinstance(fn, ir.Function):
        fn = ir.Function(module, ir.FunctionType(ir.IntType(1), [PTR, PTR, PTR]), name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        fb = ir.IRBuilder(fn.append_basic_block("entry"))
        fb.ret(_emit_placement(fb, *fn.args))
    return b.call(fn, [mask, avoid, attr])


def _emit_placement(b: ir.IRBuilder, mask: ir.Value, avoid: ir.Value, attr: ir.Value) -> ir.Value:
    module = b.module
    b.call(_decl(module, "pthread_attr_init", I32, [PTR]), [attr])
    # the process's CPUs (pid = the main thread), not this thread's: a pinned caller's
    # mask is its one CPU, which would leave its helpers nowhere else to go
    pid = b.call(_decl(module, "getpid", I32, []), [])
    got = b.call(_decl(module, "sched_getaffinity", I32, [I32, I64, PTR]), [pid, i64(8 * _MASK_WORDS), mask])
    cpu = b.sext(b.call(_decl(module, "sched_getcpu", I32, []), []), I64)
    known = b.and_(
        b.icmp_signed("==", got, ir.Constant(I32, 0)), b.icmp_unsigned("<", cpu, i64(64 * _MASK_WORDS))
    )
    rest = i64(0)
    for w in range(_MASK_WORDS):
        word = b.load(b.gep(mask, [i64(w)], source_etype=I64), typ=I64)
        mine = b.icmp_signed("==", b.lshr(cpu, i64(6)), i64(w))
        bit = b.shl(i64(1), b.and_(cpu, i64(63)))
        word = b.select(mine, b.and_(word, b.xor(bit, i64(-1))), word)
        b.store(word, b.gep(avoid, [i64(w)], source_etype=I64))
        rest = b.or_(rest, word)
    usable = b.and_(known, b.icmp_unsigned("!=", rest, i64(0)))
    with b.if_then(usable):  # a failed hint leaves the attributes as they were: plain placement
        setaff = _decl(module, "pthread_attr_setaffinity_np", I32, [PTR, I64, PTR])
        b.call(setaff, [attr, i64(8 * _MASK_WORDS), avoid])
    return usable


def new_part_function(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder]:
    """``void name(ptr ctx, i64 part, i64 parts)``: the body type ``emit_parallel_for`` calls."""
    return new_function(module, name, [("ctx", PTR), ("part", I64), ("parts", I64)], inline="noinline")


class JobBlock:
    """A part function's view of its i64 job block, which ``hand_out`` writes: each named field
    as an i64 (``field``), as a pointer (``pointer``), or its slot (``slot``: a counter the
    parts claim their work from)."""

    def __init__(self, b: ir.IRBuilder, job: ir.Value, names: Sequence[str]) -> None:
        self._b = b
        self.slot = {f: b.gep(job, [i64(i)], source_etype=I64) for i, f in enumerate(names)}

    def field(self, name: str) -> ir.Value:
        return self._b.load(self.slot[name], typ=I64)

    def pointer(self, name: str) -> ir.Value:
        return self._b.inttoptr(self.field(name), PTR)


def hand_out(
    b: ir.IRBuilder,
    job: ir.Value,
    names: Sequence[str],
    fields: dict[str, ir.Value],
    runs: ir.Function,
    parts: ir.Value,
) -> None:
    """Write ``fields`` into the i64 job block ``job`` (each at its index in ``names``, pointers
    as integers) and run the part function ``runs`` on ``parts`` parts: the intra-op threads,
    or this thread alone."""
    for f, v in fields.items():
        slot = b.gep(job, [i64(names.index(f))], source_etype=I64)
        b.store(b.ptrtoint(v, I64) if v.type == PTR else v, slot)
    with b.if_else(b.icmp_signed(">", parts, i64(1))) as (split, alone):
        with split:
            emit_parallel_for(b, runs, job, parts)
        with alone:
            b.call(runs, [job, i64(0), i64(1)])
