"""The host target machine, the O3 pipeline and a tiny object loader shared by all codegen.

Every kernel is compiled for *this* CPU: the target machine uses the host CPU name and feature
string, otherwise LLVM assumes a generic x86-64 and the loop vectorizer emits no AVX at all
(measured: an elementwise loop ran 6x slower).  Optimisation uses llvmlite's new pass manager
(the legacy one is gone in llvmlite 0.50).

``load_object`` is a *test harness*: it keeps an MCJIT engine alive that owns the loaded code
and hands out function addresses.  The runtime may use it too, but it is not the only way.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Iterator
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import CompileError
from ._elf import validate_object

__all__ = [
    "F32",
    "F64",
    "I1",
    "I32",
    "I64",
    "PTR",
    "VOID",
    "LoadedObject",
    "compile_to_object",
    "emit_assembly",
    "for_range",
    "host_target_key",
    "host_target_machine",
    "i64",
    "intrinsic",
    "load_object",
    "new_function",
    "optimize",
    "parse_and_verify",
    "pipeline_description",
    "smax",
    "smin",
    "type_suffix",
    "vector_width",
]

# LLVM's target machine and the pass pipeline are not documented as thread-safe when shared;
# compiles are rare (once per plan), so one lock costs nothing measurable.
_LOCK = threading.RLock()


@functools.cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@functools.cache
def host_target_machine() -> Any:
    """The cached ``TargetMachine`` for the host CPU (name + features), O3, large code model.

    MCJIT's memory manager maps an object's code, read-only data and data separately, and in a
    process whose address space is crowded (a Ray worker beside its object store) they can land
    more than 2 GB apart: the small code model's 32-bit RIP-relative references to constant pools
    then do not fit, and LLVM's loader aborts the process (an assertion; without assertions it
    would patch in a wrong address). The large code model addresses them with 64-bit absolute
    relocations, resolved at load wherever the sections are; loops hoist the addresses.
    Never hand this shared instance to an execution engine: MCJIT takes ownership of its target
    machine and frees it with the engine (a use-after-free we hit; see ``LoadedObject``).
    """
    return _new_host_target_machine()


def _new_host_target_machine() -> Any:
    _initialize()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=host_features(),
        opt=3,
        reloc="static",
        codemodel="large",
    )


@functools.cache
def host_features() -> str:
    """The host CPU features, plus ``-prefer-256-bit`` where AVX-512 exists: LLVM's tuning for
    Intel cores keeps auto-vectorized loops at 256 bits by default; our elementwise loops
    (sigmoid/tanh polynomials, im2col, epilogues) run faster at 512 here."""
    _initialize()
    features = str(llvm.get_host_cpu_features().flatten())
    if "+avx512f" in features.split(","):
        features += ",-prefer-256-bit"
    return features


@functools.cache
def host_target_key() -> tuple[str, ...]:
    """What compiled code depends on besides the IR: for cache keys (DESIGN.md invariant 9)."""
    _initialize()
    import llvmlite

    return (
        f"llvmlite={llvmlite.__version__}",
        "llvm=" + ".".join(str(v) for v in llvm.llvm_version_info),
        llvm.get_process_triple(),
        llvm.get_host_cpu_name(),
        host_features(),
    )


def parse_and_verify(ir_text: str) -> Any:
    """Parse textual IR into a ``ModuleRef`` bound to the host triple/data layout and verify it."""
    _initialize()
    tm = host_target_machine()
    mod = llvm.parse_assembly(ir_text)
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    mod.verify()
    return mod


def optimize(module_ref: Any, level: int = 3, *, slp: bool = True) -> None:
    """Run LLVM's ``default<O{level}>`` pipeline (new pass manager) over ``module_ref`` in place.

    Loop and SLP vectorization are switched on explicitly: the tuning options only enable them
    by default from ``speed_level >= 2``, and our elementwise loops rely on them. ``slp=False``
    leaves the SLP vectorizer out (``optimized_module``'s fallback).
    """
    if not 0 <= level <= 3:
        raise ValueError(f"optimisation level must be 0..3, got {level!r}")
    with _LOCK:
        tm = host_target_machine()
        pto = llvm.create_pipeline_tuning_options(speed_level=level)
        if level >= 2:
            pto.loop_vectorization = True
            pto.slp_vectorization = slp
            pto.loop_interleaving = True
            pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        mpm = pb.getModulePassManager()
        mpm.run(module_ref, pb)
        if level >= 2 and any(f.name in VECTOR_VARIANTS for f in module_ref.functions):
            _post_vectorize(module_ref, tm)


VECTOR_VARIANTS = frozenset({"asyncjit_tanhf_v16", "asyncjit_erff_v16"})
"""Vector variants of math functions (``_mathlut``): the loop vectorizer puts calls to them in
widened loops, after the inliner has run; ``optimize`` then inlines them there."""


def _post_vectorize(module_ref: Any, tm: Any) -> None:
    """Inline the ``alwaysinline`` vector variants into the loops the vectorizer widened."""
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_always_inliner_pass()
    mpm.run(module_ref, pb)


def pipeline_description(level: int = 3) -> str:
    """The optimisation pipeline ``optimize(level)`` runs, spelled out for compile-cache keys."""
    if not 0 <= level <= 3:
        raise ValueError(f"optimisation level must be 0..3, got {level!r}")
    extra = ",loop-vectorize,slp-vectorize,interleave,unroll" if level >= 2 else ""
    post = ";post=always-inline(vector variants)" if level >= 2 else ""
    return f"default<O{level}>{extra}{post};tm-opt=3;reloc=static;code=large"


def optimized_module(ir_text: str, level: int = 3) -> Any:
    """``ir_text`` parsed, verified, optimised and verified again.

    LLVM's SLP vectorizer can emit a use before its definition on fully unrolled static kernels
    (a conv1d with N=4, L=5, k=3, stride 2, dilation 2 did); code generation then aborts the
    process on an assertion. So the optimised module is verified, and a module that fails is
    optimised again without the SLP vectorizer (a deterministic function of the IR, as the
    cache key needs). Still invalid: ``CompileError``, never a crash.
    """
    mod = parse_and_verify(ir_text)
    optimize(mod, level)
    try:
        mod.verify()
        return mod
    except RuntimeError:
        mod = parse_and_verify(ir_text)
        optimize(mod, level, slp=False)
    try:
        mod.verify()
    except RuntimeError as exc:
        raise CompileError(f"LLVM's optimiser produced invalid IR (an LLVM bug): {exc}") from None
    return mod


def compile_to_object(ir_text: str, level: int = 3) -> bytes:
    """Parse, verify, optimise (``level``) and emit an ELF object for the host CPU."""
    mod = optimized_module(ir_text, level)
    with _LOCK:
        return bytes(host_target_machine().emit_object(mod))


def emit_assembly(ir_text: str, level: int = 3) -> str:
    """The host assembly of ``ir_text`` after optimisation; for inspecting what a kernel became."""
    mod = optimized_module(ir_text, level)
    with _LOCK:
        return str(host_target_machine().emit_assembly(mod))


class LoadedObject:
    """Machine code of one object file, mapped executable by an MCJIT engine owned by this object.

    Function addresses stay valid while this object is alive.  Only symbols with external
    linkage are visible (kernels themselves are internal; callers expose a wrapper).
    """

    __slots__ = ("__weakref__", "_engine", "_keepalive")

    def __init__(self, obj: bytes, required: tuple[str, ...] = (), *, pool: bool = True) -> None:
        _initialize()
        validate_object(obj, required)  # RuntimeDyld trusts its input: a bad object would crash us
        if pool:  # split kernels link against the helper pool's entry point
            from ._pool import ensure_pool

            ensure_pool()
        with _LOCK:
            backing = llvm.parse_assembly("")
            backing.triple = llvm.get_process_triple()
            # A private target machine: the engine owns and frees it (see host_target_machine).
            self._engine = llvm.create_mcjit_compiler(backing, _new_host_target_machine())
            self._keepalive = llvm.ObjectFileRef.from_data(obj)
            self._engine.add_object_file(self._keepalive)
            self._engine.finalize_object()
        from ._parallel import register_plan  # a plan that splits kernels reads its thread count

        register_plan(self)

    def global_address(self, name: str) -> int:
        """The address of the external global variable ``name``, or 0 if it is absent."""
        return int(self._engine.get_global_value_address(name))

    def address(self, name: str) -> int:
        """The address of the external symbol ``name``; ``KeyError`` if it is absent."""
        addr = int(self._engine.get_function_address(name))
        if addr == 0:
            raise KeyError(f"symbol {name!r} not found in loaded object")
        return addr

    def cfunc(self, name: str, restype: Any, *argtypes: Any) -> Any:
        """A ``ctypes`` callable for symbol ``name`` with the given C signature."""
        return ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))


def load_object(obj: bytes, required: tuple[str, ...] = ()) -> LoadedObject:
    """Load an object file produced by :func:`compile_to_object` into executable memory.

    Raises:
        ObjectCodeError: ``obj`` is not a well-formed object for this host, or lacks a
            ``required`` function symbol (checked before LLVM's loader sees it).
    """
    return LoadedObject(obj, required)


# --------------------------------------------------------------------------------------------
# Small IR-building helpers shared by the kernel emitters (_matmul, _conv, _mathfn).
# --------------------------------------------------------------------------------------------

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()


@functools.cache
def vector_width() -> int:
    """float32 lanes of the widest vector register the host has: 16 with AVX-512F, else 8."""
    _initialize()
    features = llvm.get_host_cpu_features()
    return 16 if features.get("avx512f", False) else 8


def i64(value: int) -> ir.Constant:
    """An ``i64`` constant."""
    return ir.Constant(I64, value)


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """Declare (once per module) and return the LLVM intrinsic or function ``name``."""
    existing = module.globals.get(name)
    if existing is not None:
        assert isinstance(existing, ir.Function)
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name)


def splat(b: ir.IRBuilder, v: ir.Value, n: int) -> ir.Value:
    """``v`` (a scalar) in every lane of an ``n``-lane vector."""
    undef = ir.Constant(ir.VectorType(v.type, n), ir.Undefined)
    one = b.insert_element(undef, v, ir.Constant(ir.IntType(32), 0))
    return b.shuffle_vector(one, undef, ir.Constant(ir.VectorType(ir.IntType(32), n), [0] * n))


def prefetch_line(b: ir.IRBuilder, ptr: ir.Value, *, write: bool, locality: int) -> None:
    """Ask for the cache line at ``ptr`` (``llvm.prefetch`` of data; ``locality`` 3 is
    ``prefetcht0``, into L1, 2 ``prefetcht1``, into L2). Never faults: ``ptr`` may lie past an
    array's end."""
    fn = intrinsic(b.module, "llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
    b.call(fn, [ptr, ir.Constant(I32, int(write)), ir.Constant(I32, locality), ir.Constant(I32, 1)])


def relu_value(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """``max(v, 0)`` for a float or a vector of floats, as the ``relu`` op computes it (a NaN
    stays NaN, -0.0 gives 0.0): ``v`` where it is greater than 0 or unordered, else 0. A compare
    and a select, which the loop vectoriser widens; a scalar ``llvm.maximum`` loop it left
    scalar on AVX2 (a conv's fused relu made VGG-19's copy-outs 5% slower)."""
    ty = v.type
    zero = ir.Constant(ty, [0.0] * ty.count) if isinstance(ty, ir.VectorType) else ir.Constant(ty, 0.0)
    return b.select(b.fcmp_unordered(">", v, zero), v, zero)


def residual_arg(residual: bool) -> list[tuple[str, ir.Type]]:
    """The trailing argument of a conv kernel that adds a residual (``res``, ``y``'s shape, read
    at the index being written: a fused ``conv + r``); none without."""
    return [("res", PTR)] if residual else []


CONV_NOALIAS = ("x", "w", "bias", "y", "scratch", "res")
"""A conv kernel's pointers: ``res`` is read-only and never ``y`` (the memory plan keeps a
kernel's reads live while it writes)."""


def conv_epilogue(b: ir.IRBuilder, v: ir.Value, res: ir.Value | None, at: ir.Value, relu: bool) -> ir.Value:
    """``v`` (a float or a vector of floats) plus ``res[at]`` when a residual is fused, then
    ``max(., 0)`` with ``relu``: the unfused graph's order, in which every conv strategy stores."""
    if res is not None:
        v = b.fadd(v, b.load(b.gep(res, [at], source_etype=F32), typ=v.type, align=4))
    return relu_value(b, v) if relu else v


def type_suffix(ty: ir.Type) -> str:
    """The overload suffix LLVM intrinsics use for ``ty``: ``f32``, ``v16f32``, ``v8i32``..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"no intrinsic suffix for {ty}")


def smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Signed integer minimum (a ``select``; LLVM turns it into ``smin``)."""
    return b.select(b.icmp_signed("<", x, y), x, y)


def smax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Signed integer maximum."""
    return b.select(b.icmp_signed(">", x, y), x, y)


@contextlib.contextmanager
def for_range(
    b: ir.IRBuilder,
    start: ir.Value,
    stop: ir.Value,
    step: ir.Value | int = 1,
    name: str = "i",
    interleave: int = 0,
) -> Iterator[ir.Value]:
    """Emit ``for (i = start; i < stop; i += step)`` (signed compare); yields ``i``.

    The body is whatever the caller emits inside the ``with`` block; it may create blocks.
    ``interleave`` > 1 asks LLVM's vectorizer for that many vectors per iteration
    (``interleave_hint``).
    """
    step_v = i64(step) if isinstance(step, int) else step
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    end = b.append_basic_block(f"{name}.end")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, end)
    b.position_at_end(body)
    yield i
    nxt = b.add(i, step_v, name=f"{name}.next")
    i.add_incoming(nxt, b.block)
    back = b.branch(head)
    if interleave > 1:
        interleave_hint(back, interleave)
    b.position_at_end(end)


class _LoopID(ir.values.MDValue):  # type: ignore[misc]
    """A distinct, self-referential ``llvm.loop`` node (what LLVM's loop passes read hints from),
    which llvmlite's ``add_metadata`` cannot spell."""

    def descr(self, buf: list[str]) -> None:
        ops = ", ".join([self.get_reference(), *(op.get_reference() for op in self.operands)])
        buf += (f"distinct !{{ {ops} }}", "\n")


def interleave_hint(branch: ir.Instruction, count: int) -> None:
    """Ask LLVM's vectorizer to interleave the loop whose back-edge is ``branch`` ``count`` times
    (that many independent vectors per iteration)."""
    module = branch.parent.parent.module
    hint = module.add_metadata(
        [ir.MetaDataString(module, "llvm.loop.interleave.count"), ir.Constant(I32, count)]
    )
    branch.set_metadata("llvm.loop", _LoopID(module, [hint], name=str(len(module.metadata))))


def new_function(
    module: ir.Module,
    name: str,
    args: list[tuple[str, ir.Type]],
    *,
    linkage: str = "internal",
    noalias: tuple[str, ...] = (),
    inline: str | None = None,
) -> tuple[ir.Function, ir.IRBuilder]:
    """Add ``void name(args)`` to ``module`` and return it with a builder at its entry block."""
    if name in module.globals:
        raise ValueError(f"function {name!r} already exists in module {module.name!r}")
    fn = ir.Function(module, ir.FunctionType(VOID, [t for _, t in args]), name)
    fn.linkage = linkage
    fn.attributes.add("nounwind")
    if inline is not None:
        fn.attributes.add(inline)
    for arg, (arg_name, _) in zip(fn.args, args, strict=True):
        arg.name = arg_name
        if arg_name in noalias:
            arg.add_attribute("noalias")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))
