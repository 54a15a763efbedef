"""The process's pool of helper threads for split kernels: kept between kernels, not created per kernel.

A kernel split over ``T`` threads (``_parallel.emit_parallel_for``) used to create ``T - 1``
threads with ``pthread_create`` and join them. On the VMs we measure on a new thread starts
0.1-0.5 ms after its creation (its virtual CPU must be woken first), so only products far above
that cost were split, and a CNN whose convs take 0.1-2 ms each gained little from a second core
(ResNet-50 on 2 threads: 1.15x one thread's speed, ONNX Runtime's pool 1.83x in the same run).

Here the helpers are created once per process and kept. After a part a helper spins on its
mailbox for ``spin_us`` (default ``SPIN_US``), so the next kernel of a plan, a few microseconds
later, finds it running; then it sleeps on a futex until a job wakes it. Nothing spins between
bursts of split kernels, so the event loop and the device actors keep their cores.

The code is LLVM IR compiled once per process (``ensure_pool``); its entry point,
``asyncjit_pool_run(fn, ctx, parts)``, is registered as a symbol every plan links against. It
returns 1 without running anything when the pool cannot take the job (another thread's kernel
holds it, or no futex on this platform); the caller then starts threads as before, so two device
actors splitting kernels at once are both served. Helpers get the process's CPUs, not their
creator's (a caller pinned to one CPU would keep them there for good). A forked child has none of
the parent's helpers: ``os.fork`` runs ``asyncjit_pool_forget`` in the child, and a fork that
bypasses it is caught by the owner pid, which one caller swaps to -1 (others refuse meanwhile),
resets the pool and sets to its own pid. Helpers are named ``asyncjit-pool`` (``top -H``).

Layout: one 64-byte mailbox per helper (word 0: job generation, the futex the helper sleeps on;
1: sleeping flag; 2: part function; 3: context; 4: part; 5: parts) and a state block (word 0:
busy lock; 1: helpers started; 2: owner pid; 3: jobs run; 4: jobs refused; 5: threads that failed
to start; 6: switched off; on the next line, word 8: parts still running, the futex the caller
sleeps on; 9: the caller is asleep). A flag is stored before the futex word is read again and
the waker reads the flag after its store (both sequentially consistent): no wake-up is lost.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import threading
from typing import Any

import llvmlite.binding as llvm

__all__ = ["SPIN_US", "ensure_pool", "pool_stats", "set_pool_enabled", "set_pool_spin"]

SPIN_US = 100
"""Microseconds a helper spins for its next part before it sleeps (``ASYNCJIT_POOL_SPIN_US``)."""

_CALLER_SPIN_NS = 20_000
"""The caller, its own part done, spins this long for the helpers before it sleeps: a helper that
lost its core (queued behind the caller) then gets it."""

_X86 = ("call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()")
_ARM = ("call void @llvm.aarch64.hint(i32 1)", "declare void @llvm.aarch64.hint(i32)")
_FUTEX = {"x86_64": (202, *_X86), "amd64": (202, *_X86), "aarch64": (98, *_ARM), "arm64": (98, *_ARM)}
"""``SYS_futex`` and the spin-wait hint per machine (Linux); elsewhere every job is refused."""

_MAX_HELPERS = 7  # _parallel.MAX_THREADS - 1 (the caller runs part 0)
_BOX_WORDS = 8

_STATE = """
@asyncjit_pool_spin_ns = global i64 {spin_ns}, align 8
@asyncjit_pool_state = global [16 x i64] zeroinitializer, align 64
"""

_DISABLED = (
    _STATE
    + """
define i32 @asyncjit_pool_run(ptr %fn, ptr %ctx, i64 %parts) nounwind {
  ret i32 1
}

define void @asyncjit_pool_forget() nounwind {
  ret void
}
"""
)

_IR = (
    _STATE
    + """
@pool.boxes = internal global [{box_words} x i64] zeroinitializer, align 64

declare i64 @syscall(i64, ...) nounwind
declare i32 @pthread_create(ptr, ptr, ptr, ptr) nounwind
declare i32 @pthread_detach(i64) nounwind
declare i32 @pthread_setname_np(i64, ptr) nounwind
@pool.name = internal constant [14 x i8] c"asyncjit-pool\\00"
declare i32 @getpid() nounwind
declare i32 @pthread_attr_init(ptr) nounwind
declare i32 @pthread_attr_destroy(ptr) nounwind
declare i32 @pthread_attr_setaffinity_np(ptr, i64, ptr) nounwind
declare i32 @sched_getaffinity(i32, i64, ptr) nounwind
declare i32 @clock_gettime(i32, ptr) nounwind
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
{relax_decl}

define internal void @pool.futex_wait(ptr %addr, i32 %val) nounwind {{
  %v = zext i32 %val to i64
  %r = call i64 (i64, ...) @syscall(i64 {nr}, ptr %addr, i64 128, i64 %v, ptr null)
  ret void
}}

define internal void @pool.futex_wake(ptr %addr) nounwind {{
  %r = call i64 (i64, ...) @syscall(i64 {nr}, ptr %addr, i64 129, i64 1)
  ret void
}}

; sleep on ``word`` while it holds ``seen``: the flag says so to the waker, and is set before the
; word is read again (the waker stores the word, then reads the flag): no wake-up is lost
define internal void @pool.park(ptr %word, i32 %seen, ptr %flag) nounwind {{
entry:
  store atomic i64 1, ptr %flag seq_cst, align 8
  %now = load atomic i32, ptr %word seq_cst, align 8
  %same = icmp eq i32 %now, %seen
  br i1 %same, label %block, label %woke
block:
  call void @pool.futex_wait(ptr %word, i32 %seen)
  br label %woke
woke:
  store atomic i64 0, ptr %flag seq_cst, align 8
  ret void
}}

; after storing ``word``: wake its sleeper if the flag says one parks on it (``@pool.park``)
define internal void @pool.unpark(ptr %word, ptr %flag) nounwind {{
entry:
  %f = load atomic i64, ptr %flag seq_cst, align 8
  %asleep = icmp ne i64 %f, 0
  br i1 %asleep, label %wake, label %done
wake:
  call void @pool.futex_wake(ptr %word)
  br label %done
done:
  ret void
}}

define internal i64 @pool.now_ns() nounwind {{
  %ts = alloca [2 x i64], align 8
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %nsp = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %nsp, align 8
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %ns
  ret i64 %t
}}

define internal ptr @pool.helper(ptr %box) nounwind {{
entry:
  %sleeping = getelementptr i64, ptr %box, i64 1
  %fnp = getelementptr i64, ptr %box, i64 2
  %ctxp = getelementptr i64, ptr %box, i64 3
  %partp = getelementptr i64, ptr %box, i64 4
  %partsp = getelementptr i64, ptr %box, i64 5
  %pending = getelementptr i64, ptr @asyncjit_pool_state, i64 8
  %caller = getelementptr i64, ptr @asyncjit_pool_state, i64 9
  br label %wait
wait:
  ; a new helper's mailbox is untouched (generation 0): its first job may be posted before it runs
  %seen = phi i32 [ 0, %entry ], [ %g, %done ]
  %t0 = call i64 @pool.now_ns()
  br label %spin
spin:
  %g = load atomic i32, ptr %box acquire, align 8
  %new = icmp ne i32 %g, %seen
  br i1 %new, label %run, label %idle
idle:
  %now = call i64 @pool.now_ns()
  %spent = sub i64 %now, %t0
  %budget = load atomic i64, ptr @asyncjit_pool_spin_ns monotonic, align 8
  %more = icmp slt i64 %spent, %budget
  br i1 %more, label %relax, label %sleep
relax:
  {relax}
  br label %spin
sleep:
  call void @pool.park(ptr %box, i32 %seen, ptr %sleeping)
  br label %spin
run:
  %fn = load ptr, ptr %fnp, align 8
  %ctx = load ptr, ptr %ctxp, align 8
  %part = load i64, ptr %partp, align 8
  %parts = load i64, ptr %partsp, align 8
  call void %fn(ptr %ctx, i64 %part, i64 %parts)
  %old = atomicrmw sub ptr %pending, i32 1 seq_cst, align 8
  %last = icmp eq i32 %old, 1
  br i1 %last, label %check, label %done
check:
  call void @pool.unpark(ptr %pending, ptr %caller)
  br label %done
done:
  br label %wait
}}

; every word but the owner (2) and the switch (6): the helpers, their mailboxes and the counters
define internal void @pool.forget() nounwind {{
  call void @llvm.memset.p0.i64(ptr @pool.boxes, i8 0, i64 {box_bytes}, i1 false)
{forget_words}
  ret void
}}

; os.register_at_fork(after_in_child=...): the child has one thread, so no caller is inside
define void @asyncjit_pool_forget() nounwind {{
  call void @pool.forget()
  %w2 = getelementptr i64, ptr @asyncjit_pool_state, i64 2
  store atomic i64 0, ptr %w2 seq_cst, align 8
  ret void
}}

define i32 @asyncjit_pool_run(ptr %fn, ptr %ctx, i64 %parts) nounwind {{
entry:
  %busy = getelementptr i64, ptr @asyncjit_pool_state, i64 0
  %helpersp = getelementptr i64, ptr @asyncjit_pool_state, i64 1
  %ownerp = getelementptr i64, ptr @asyncjit_pool_state, i64 2
  %jobsp = getelementptr i64, ptr @asyncjit_pool_state, i64 3
  %refusedp = getelementptr i64, ptr @asyncjit_pool_state, i64 4
  %failedp = getelementptr i64, ptr @asyncjit_pool_state, i64 5
  %pending = getelementptr i64, ptr @asyncjit_pool_state, i64 8
  %caller = getelementptr i64, ptr @asyncjit_pool_state, i64 9
  %tid = alloca i64, align 8
  %attr = alloca [8 x i64], align 8
  %mask = alloca [16 x i64], align 8
  %pid32 = call i32 @getpid()
  %pid = sext i32 %pid32 to i64
  %owner = load atomic i64, ptr %ownerp acquire, align 8
  %owned = icmp eq i64 %owner, %pid
  br i1 %owned, label %lock, label %notmine
notmine:
  %fresh = icmp eq i64 %owner, 0
  br i1 %fresh, label %adopt, label %foreign
adopt:
  ; the first job of this process: it owns the pool from now on (stored before the lock is
  ; taken, so a fork while the lock is held leaves the child a foreign owner to reset)
  %ax = cmpxchg ptr %ownerp, i64 0, i64 %pid seq_cst seq_cst
  %aok = extractvalue {{ i64, i1 }} %ax, 1
  br i1 %aok, label %lock, label %refuse
foreign:
  ; -1: another caller is resetting; any other pid: a forked child, whose parent's helpers do
  ; not exist here: one caller takes the owner word to -1, resets, then owns the pool
  %resetting = icmp eq i64 %owner, -1
  br i1 %resetting, label %refuse, label %claim
claim:
  %cx = cmpxchg ptr %ownerp, i64 %owner, i64 -1 seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %cx, 1
  br i1 %won, label %reset, label %refuse
reset:
  call void @pool.forget()
  store atomic i64 %pid, ptr %ownerp seq_cst, align 8
  br label %lock
lock:
  %switchp = getelementptr i64, ptr @asyncjit_pool_state, i64 6
  %switched = load atomic i64, ptr %switchp monotonic, align 8
  %on = icmp eq i64 %switched, 0
  br i1 %on, label %trylock, label %refuse
trylock:
  %lx = cmpxchg ptr %busy, i64 0, i64 1 acquire monotonic
  %locked = extractvalue {{ i64, i1 }} %lx, 1
  br i1 %locked, label %grow, label %refuse
refuse:
  %r0 = atomicrmw add ptr %refusedp, i64 1 monotonic, align 8
  ret i32 1
grow:
  %w0 = sub i64 %parts, 1
  %w1 = icmp sgt i64 %w0, {max_helpers}
  %want = select i1 %w1, i64 {max_helpers}, i64 %w0
  %have0 = load atomic i64, ptr %helpersp monotonic, align 8
  br label %create
create:
  %have = phi i64 [ %have0, %grow ], [ %have1, %started ]
  %short = icmp slt i64 %have, %want
  br i1 %short, label %spawn, label %post0
spawn:
  %off = mul i64 %have, {box_words_each}
  %newbox = getelementptr i64, ptr @pool.boxes, i64 %off
  ; the process's CPUs (pid = the main thread), not this thread's: a caller pinned to one CPU
  ; would otherwise leave its helpers there for the life of the process
  %ai = call i32 @pthread_attr_init(ptr %attr)
  %ga = call i32 @sched_getaffinity(i32 %pid32, i64 128, ptr %mask)
  %gok = icmp eq i32 %ga, 0
  br i1 %gok, label %setaff, label %create_it
setaff:
  %sa = call i32 @pthread_attr_setaffinity_np(ptr %attr, i64 128, ptr %mask)
  br label %create_it
create_it:
  %rc = call i32 @pthread_create(ptr %tid, ptr %attr, ptr @pool.helper, ptr %newbox)
  %ad = call i32 @pthread_attr_destroy(ptr %attr)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %started, label %nospawn
started:
  %t = load i64, ptr %tid, align 8
  %nm = call i32 @pthread_setname_np(i64 %t, ptr @pool.name)
  %d = call i32 @pthread_detach(i64 %t)
  %have1 = add i64 %have, 1
  store atomic i64 %have1, ptr %helpersp monotonic, align 8
  br label %create
nospawn:
  %f0 = atomicrmw add ptr %failedp, i64 1 monotonic, align 8
  br label %post0
post0:
  %started_n = phi i64 [ %have, %create ], [ %have, %nospawn ]
  ; helpers started for a wider job before stay idle: only ``parts - 1`` take a part
  %few = icmp slt i64 %started_n, %want
  %n = select i1 %few, i64 %started_n, i64 %want
  %n32 = trunc i64 %n to i32
  store atomic i32 %n32, ptr %pending seq_cst, align 8
  store atomic i64 0, ptr %caller seq_cst, align 8
  br label %post
post:
  %i = phi i64 [ 0, %post0 ], [ %i1, %posted ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %give, label %mine
give:
  %boff = mul i64 %i, {box_words_each}
  %box = getelementptr i64, ptr @pool.boxes, i64 %boff
  %bfn = getelementptr i64, ptr %box, i64 2
  store ptr %fn, ptr %bfn, align 8
  %bctx = getelementptr i64, ptr %box, i64 3
  store ptr %ctx, ptr %bctx, align 8
  %bpart = getelementptr i64, ptr %box, i64 4
  %part = add i64 %i, 1
  store i64 %part, ptr %bpart, align 8
  %bparts = getelementptr i64, ptr %box, i64 5
  store i64 %parts, ptr %bparts, align 8
  %gen = load atomic i32, ptr %box monotonic, align 8
  %gen1 = add i32 %gen, 1
  store atomic i32 %gen1, ptr %box seq_cst, align 8
  %bsl = getelementptr i64, ptr %box, i64 1
  call void @pool.unpark(ptr %box, ptr %bsl)
  br label %posted
posted:
  %i1 = add i64 %i, 1
  br label %post
mine:
  call void %fn(ptr %ctx, i64 0, i64 %parts)
  %rest0 = add i64 %n, 1
  br label %rest
rest:
  ; parts whose helper could not be started run here
  %p = phi i64 [ %rest0, %mine ], [ %p1, %restbody ]
  %rmore = icmp slt i64 %p, %parts
  br i1 %rmore, label %restbody, label %join
restbody:
  call void %fn(ptr %ctx, i64 %p, i64 %parts)
  %p1 = add i64 %p, 1
  br label %rest
join:
  %j0 = call i64 @pool.now_ns()
  br label %jspin
jspin:
  %left = load atomic i32, ptr %pending acquire, align 8
  %alldone = icmp eq i32 %left, 0
  br i1 %alldone, label %finish, label %jidle
jidle:
  %jnow = call i64 @pool.now_ns()
  %jspent = sub i64 %jnow, %j0
  %jmore = icmp slt i64 %jspent, {caller_spin_ns}
  br i1 %jmore, label %jrelax, label %jsleep
jrelax:
  {relax}
  br label %jspin
jsleep:
  call void @pool.park(ptr %pending, i32 %left, ptr %caller)
  br label %jspin
finish:
  %j = atomicrmw add ptr %jobsp, i64 1 monotonic, align 8
  store atomic i64 0, ptr %busy release, align 8
  ret i32 0
}}
"""
)


_FORGOTTEN_WORDS = (0, 1, 3, 4, 5, 8, 9)
"""The state words a forked child zeroes: all but the owner (2) and the switch (6)."""


def _zero_words(words: tuple[int, ...]) -> str:
    """IR storing 0 atomically into each of ``words`` of ``@asyncjit_pool_state``."""
    return "\n".join(
        f"  %w{i} = getelementptr i64, ptr @asyncjit_pool_state, i64 {i}\n"
        f"  store atomic i64 0, ptr %w{i} seq_cst, align 8"
        for i in words
    )


def _ir_text(spin_ns: int) -> str:
    spec = _FUTEX.get(platform.machine().lower()) if platform.system() == "Linux" else None
    if spec is None:
        return _DISABLED.format(spin_ns=spin_ns)
    nr, relax, relax_decl = spec
    box_words = _MAX_HELPERS * _BOX_WORDS
    return _IR.format(
        spin_ns=spin_ns,
        box_words=box_words,
        box_words_each=_BOX_WORDS,
        box_bytes=8 * box_words,
        forget_words=_zero_words(_FORGOTTEN_WORDS),
        max_helpers=_MAX_HELPERS,
        caller_spin_ns=_CALLER_SPIN_NS,
        nr=nr,
        relax=relax,
        relax_decl=relax_decl,
    )


def _spin_from_env() -> int:
    raw = os.environ.get("ASYNCJIT_POOL_SPIN_US", "")
    try:
        return max(0, int(raw)) if raw else SPIN_US
    except ValueError:
        return SPIN_US


_lock = threading.Lock()
_loaded: Any = None


@functools.cache
def ensure_pool() -> None:
    """Compile and load the pool once per process and register ``asyncjit_pool_run`` for the
    plans loaded after it (called before any plan object is loaded)."""
    global _loaded
    from ._target import LoadedObject, compile_to_object

    with _lock:
        if _loaded is not None:  # another thread built it while this one waited
            return
        obj = compile_to_object(_ir_text(_spin_from_env() * 1000))
        _loaded = LoadedObject(obj, ("asyncjit_pool_run",), pool=False)
        # never freed, not even when the interpreter exits: a helper may still spin in this
        # code then (a script that exits right after a split kernel), and unmapped code would
        # crash it
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(_loaded))
        llvm.add_symbol("asyncjit_pool_run", _loaded.address("asyncjit_pool_run"))
        # a forked child has one thread: forget the parent's helpers there, before any kernel
        # (the owner pid check in the IR covers forks that bypass os.fork)
        forget = _loaded.cfunc("asyncjit_pool_forget", None)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=forget)


def _state() -> Any:
    ensure_pool()
    return (ctypes.c_int64 * 16).from_address(_loaded.global_address("asyncjit_pool_state"))


def pool_stats() -> dict[str, int]:
    """``helpers`` started in this process, ``jobs`` the pool ran, ``refused`` (run by threads
    created for them instead: the pool was busy with another thread's kernel), ``failed`` starts."""
    s = _state()
    return {"helpers": int(s[1]), "jobs": int(s[3]), "refused": int(s[4]), "failed": int(s[5])}


def set_pool_enabled(enabled: bool) -> bool:
    """Switch the pool off (every split kernel then creates and joins its own threads, as before
    the pool existed: for comparisons) or on again; returns whether it was on."""
    s = _state()
    was = s[6] == 0
    s[6] = 0 if enabled else 1
    return bool(was)


def set_pool_spin(us: int) -> int:
    """Set how long an idle helper spins before it sleeps (0: sleep at once); returns the old value.

    Raises:
        ValueError: a negative value.
    """
    if us < 0:
        raise ValueError(f"the pool's spin must be >= 0 microseconds, got {us}")
    ensure_pool()
    cell = ctypes.c_int64.from_address(_loaded.global_address("asyncjit_pool_spin_ns"))
    old, cell.value = cell.value, int(us) * 1000
    return int(old) // 1000
