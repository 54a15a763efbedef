"""Structural checks of an ELF relocatable object before LLVM's loader ever sees it.

LLVM's RuntimeDyld trusts its input: an object whose section table points past the end of the
bytes, or whose relocations name symbols that do not exist, crashes the process. Object bytes
reach ``load_object`` from the disk cache and from serialized executables, so a damaged file
must become an ``ObjectCodeError``, never a segfault. These checks are the ones RuntimeDyld
relies on: the header matches this host (magic, 64-bit, byte order, relocatable, machine), every
section, symbol and relocation stays inside the bytes and the tables it indexes, and the entry
symbols the caller needs are defined functions in executable sections.

Hand-written rather than pyelftools: core depends only on numpy/llvmlite/attrs/structlog/anyio,
and the checks need ~100 lines of ``struct``.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections.abc import Iterable

import llvmlite.binding as llvm

from ..errors import ObjectCodeError

__all__ = ["host_elf_machine", "validate_object"]

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
_REL = struct.Struct("<QQ")

_SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 2, 3, 4, 8, 9
_SHF_EXECINSTR = 0x4
_SHN_LORESERVE, _SHN_ABS, _SHN_COMMON = 0xFF00, 0xFFF1, 0xFFF2
_STT_FUNC = 2
_STB_GLOBAL, _STB_WEAK = 1, 2

# ELF e_machine by the architecture part of LLVM's process triple
_MACHINES = {
    "x86_64": 62,
    "amd64": 62,
    "aarch64": 183,
    "arm64": 183,
    "powerpc64le": 21,
    "ppc64le": 21,
    "s390x": 22,
    "riscv64": 243,
}


@functools.cache
def host_elf_machine() -> int:
    """The ELF ``e_machine`` of this process, from LLVM's process triple."""
    arch = llvm.get_process_triple().split("-")[0]
    try:
        return _MACHINES[arch]
    except KeyError:
        raise ObjectCodeError(f"no ELF machine number known for host architecture {arch!r}") from None


def _cstr(table: bytes, offset: int, what: str) -> bytes:
    if not 0 <= offset < len(table):
        raise ObjectCodeError(f"{what}: name offset {offset} outside its string table ({len(table)} bytes)")
    end = table.find(b"\0", offset)
    if end < 0:
        raise ObjectCodeError(f"{what}: name at offset {offset} is not NUL-terminated")
    return table[offset:end]


def validate_object(obj: bytes, required: Iterable[str] = ()) -> None:
    """Raise ``ObjectCodeError`` unless ``obj`` is a well-formed ELF object for this host.

    Args:
        obj: the object file's bytes.
        required: symbols that must be defined global functions in executable sections.
    """
    n = len(obj)
    if n < _EHDR.size:
        raise ObjectCodeError(f"object code is {n} bytes, shorter than an ELF header ({_EHDR.size})")
    ident, e_type, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx = _EHDR.unpack_from(obj)
    if ident[:4] != b"\x7fELF":
        raise ObjectCodeError(f"object code does not start with the ELF magic (got {ident[:4]!r})")
    if ident[4] != 2 or sys.maxsize <= 2**32:
        raise ObjectCodeError(f"object code is ELF class {ident[4]}, expected 2 (64-bit) on this host")
    if ident[5] != (1 if sys.byteorder == "little" else 2) or ident[6] != 1:
        raise ObjectCodeError(f"object code has byte order {ident[5]} / version {ident[6]}, not this host's")
    if e_type != 1:
        raise ObjectCodeError(f"object code has ELF type {e_type}, expected 1 (relocatable)")
    want = host_elf_machine()
    if machine != want:
        raise ObjectCodeError(f"object code is for ELF machine {machine}, this host is {want}")
    if shentsize != _SHDR.size or shnum == 0 or shnum >= _SHN_LORESERVE:
        raise ObjectCodeError(f"section table has entry size {shentsize} and {shnum} entries")
    if shoff > n or shnum * _SHDR.size > n - shoff:
        raise ObjectCodeError(f"section table at {shoff} ({shnum} entries) runs past the {n}-byte object")
    shdrs = [_SHDR.unpack_from(obj, shoff + i * _SHDR.size) for i in range(shnum)]
    for i, (_, kind, _, _, off, size, link, _, _, _) in enumerate(shdrs):
        if kind != _SHT_NOBITS and (off > n or size > n - off):
            raise ObjectCodeError(f"section {i}: bytes [{off}, {off}+{size}) run past the {n}-byte object")
        if link >= shnum:
            raise ObjectCodeError(f"section {i}: links to section {link} of {shnum}")
    if shstrndx >= shnum or shdrs[shstrndx][1] != _SHT_STRTAB:
        raise ObjectCodeError(f"section-name table index {shstrndx} is not a string table")

    def data(i: int) -> bytes:
        off, size = shdrs[i][4], shdrs[i][5]
        return obj[off : off + size]

    names = data(shstrndx)
    for i, h in enumerate(shdrs):
        _cstr(names, h[0], f"section {i}")
    symtabs = [i for i, h in enumerate(shdrs) if h[1] == _SHT_SYMTAB]
    if len(symtabs) != 1:
        raise ObjectCodeError(f"object code has {len(symtabs)} symbol tables, expected 1")
    (st,) = symtabs
    if shdrs[st][9] != _SYM.size or shdrs[st][5] % _SYM.size or shdrs[shdrs[st][6]][1] != _SHT_STRTAB:
        raise ObjectCodeError("the symbol table's entry size, length or string table is malformed")
    strtab = data(shdrs[st][6])
    defined: dict[bytes, tuple[int, int, int]] = {}
    symbols = list(_SYM.iter_unpack(data(st)))
    for j, (name, info, _, shndx, value, size) in enumerate(symbols):
        label = _cstr(strtab, name, f"symbol {j}")
        if shndx == 0 or shndx in (_SHN_ABS, _SHN_COMMON):
            continue
        if shndx >= shnum:
            raise ObjectCodeError(f"symbol {label!r} is in section {shndx} of {shnum}")
        if value > shdrs[shndx][5] or size > shdrs[shndx][5] - value:
            raise ObjectCodeError(f"symbol {label!r} [{value}, +{size}) runs past its section")
        defined[label] = (info, shndx, size)
    for i, (_, kind, _, _, _, size, link, target, _, entsize) in enumerate(shdrs):
        if kind not in (_SHT_REL, _SHT_RELA):
            continue
        rec = _RELA if kind == _SHT_RELA else _REL
        if entsize != rec.size or size % rec.size or link != st or not 0 < target < shnum:
            raise ObjectCodeError(f"relocation section {i} is malformed")
        limit = shdrs[target][5]
        for r in rec.iter_unpack(data(i)):
            if r[0] >= limit or (r[1] >> 32) >= len(symbols):
                raise ObjectCodeError(f"relocation section {i}: an entry points past its target or symbols")
    for want_name in required:
        got = defined.get(want_name.encode())
        if got is None:
            raise ObjectCodeError(f"object code does not define the entry symbol {want_name!r}")
        info, shndx, _ = got
        if info >> 4 not in (_STB_GLOBAL, _STB_WEAK) or info & 0xF != _STT_FUNC:
            raise ObjectCodeError(f"entry symbol {want_name!r} is not a global function")
        if not shdrs[shndx][2] & _SHF_EXECINSTR:
            raise ObjectCodeError(f"entry symbol {want_name!r} is not in an executable section")
