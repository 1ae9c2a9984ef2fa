"""The machine a benchmark ran on, printed at its top (ratios can invert across CPUs),
and its fp32 matmul peak, the denominator of model FLOP utilisation."""

import datetime
import importlib.metadata
import os
import platform
import time

# /proc/cpuinfo flag -> the name RESULTS.md uses, for the extensions that decide
# which kernels XLA, oneDNN and CTranslate2 pick.
EXTENSIONS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI",
              "avx512_bf16": "AVX-512 BF16", "amx_tile": "AMX"}


def cpu_model_and_flags():
    """`(model name, vector extensions present, cores, hardware threads)` from /proc/cpuinfo."""
    model, flags, cores, socket = platform.processor() or platform.machine(), set(), set(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name":
                    model = value
                elif key == "flags":
                    flags = set(value.split())
                elif key == "physical id":
                    socket = value
                elif key == "core id":
                    cores.add((socket, value))
    except OSError:
        pass
    extensions = [name for flag, name in EXTENSIONS.items() if flag in flags]
    threads = os.cpu_count()
    return model, extensions, len(cores) or threads, threads


def versions(packages):
    """`"name version, ..."` for the installed `packages` (distribution names)."""
    found = []
    for name in packages:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def describe(packages=()):
    """One line: date, CPU model, its vector extensions, cores and threads, the
    versions of `packages`, and `XLA_FLAGS` when set."""
    model, extensions, cores, threads = cpu_model_and_flags()
    line = (f"{datetime.date.today()}; {model} ({', '.join(extensions) or 'no AVX2'}), "
            f"{cores} cores, {threads} threads, {platform.machine()}")
    if packages:
        line += f"; {versions(packages)}"
    if os.environ.get("XLA_FLAGS"):
        line += f"; XLA_FLAGS={os.environ['XLA_FLAGS']}"
    return line


def matmul_peak_gflops(n=2048, repeats=10):
    """Best fp32 GFLOP/s of an (n, n) @ (n, n) TensorFlow matmul on this machine."""
    import tensorflow as tf

    a = tf.random.normal((n, n))
    b = tf.random.normal((n, n))
    matmul = tf.function(lambda a, b: tf.reduce_sum(tf.matmul(a, b)))
    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9
