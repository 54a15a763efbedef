"""``DeviceDescription``: what a device is, apart from its queue (PJRT's device description).

A description is a value: id, kind, the index of the process that owns the device (devices of
other processes are in ``Client.devices()`` but not addressable here), and attributes read from
the host once per process (CPU model, cores this process may use, NUMA node, vector flags).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from types import MappingProxyType

import attrs

__all__ = ["DeviceDescription", "host_attributes"]

Attribute = str | int | tuple[str, ...]

_VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_tile")


def _frozen(attributes: Mapping[str, Attribute]) -> Mapping[str, Attribute]:
    return MappingProxyType(dict(attributes))


@attrs.frozen
class DeviceDescription:
    """A device's identity and attributes.

    ``attributes`` for CPU devices: ``cpu_model``, ``cores`` (this process's affinity),
    ``numa_node`` (the node holding most of those cores; 0 where the kernel does not say),
    ``vector_flags``.
    """

    id: int
    kind: str
    process_index: int
    attributes: Mapping[str, Attribute] = attrs.field(converter=_frozen)

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"

    def debug_string(self) -> str:
        attrs_text = ", ".join(f"{k}={v}" for k, v in self.attributes.items())
        return f"{self.kind}:{self.id} (process {self.process_index}; {attrs_text})"


def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    model, flags = "unknown", set[str]()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:  # not Linux: the platform's own name
        import platform

        model = platform.processor() or platform.machine() or "unknown"
    return model, tuple(f for f in _VECTOR_FLAGS if f in flags)


def _cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(os.getpid()))  # the process's, not a pinned thread's
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return set(range(os.cpu_count() or 1))


def _parse_cpulist(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _numa_node(cpus: set[int], root: str = "/sys/devices/system/node") -> int:
    """The NUMA node with most of ``cpus`` (0 when ``root`` lists none)."""
    best, best_n = 0, 0
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith("node") and n[4:].isdigit())
    except OSError:
        return 0
    for name in names:
        try:
            with open(os.path.join(root, name, "cpulist")) as f:
                n = len(_parse_cpulist(f.read()) & cpus)
        except (OSError, ValueError):
            continue
        if n > best_n:
            best, best_n = int(name[4:]), n
    return best


@functools.cache
def host_attributes() -> Mapping[str, Attribute]:
    """The attributes of this host's CPU devices, read once per process."""
    model, flags = _cpuinfo()
    cpus = _cpus()
    return MappingProxyType(
        {"cpu_model": model, "cores": len(cpus), "numa_node": _numa_node(cpus), "vector_flags": flags}
    )
