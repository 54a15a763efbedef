"""The machine a benchmark ran on, printed at the top of its output: CPU model, cores, the vector
flags that matter to the kernels, load average (``lscpu`` in short)."""

from __future__ import annotations

import os
import platform

_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile")


def machine_line() -> str:
    model, flags = platform.processor() or "?", set[str]()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    vector = " ".join(f for f in _FLAGS if f in flags) or "-"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"machine: {model}, {cores} cores, flags {vector}; load average {load}"
