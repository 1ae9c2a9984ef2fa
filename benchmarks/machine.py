"""The machine a benchmark ran on, printed at its top: ratios can invert across CPUs."""

import datetime
import os
import platform


def cpu_model_and_flags():
    """`(model name, vector extensions present)` from /proc/cpuinfo (Linux)."""
    model, flags = platform.processor() or platform.machine(), set()
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
    names = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16",
             "amx_tile": "AMX"}
    return model, [name for flag, name in names.items() if flag in flags]


def describe():
    """One line: date, CPU model, its vector extensions, cores."""
    model, extensions = cpu_model_and_flags()
    return (f"{datetime.date.today()}; {model} ({', '.join(extensions) or 'no AVX2'}), "
            f"{os.cpu_count()} cores, {platform.machine()}")
