"""How long does `fit` take to its first step: with the model, metrics and
optimizer built before the train step is traced (`_compat.TensorFlowFit`, what
the package does), against Keras 3's own build inside the first trace?

Each run is a fresh process (the first trace of a process is what a user
waits for): it builds a `kt.Transformer`, compiles it with Adam, the masked
loss and the masked accuracy (no XLA), and times one `fit` of one step, then
a second step. The two builds alternate, `--repeats` times each, on two sizes:
the tests' reverse-task model (d_model 64) and the tutorial's (d_model 512).
Keras' own build is the same model with `TensorFlowFit._maybe_symbolic_build`
replaced by `keras.Model`'s.

Usage: python benchmarks/bench_first_step.py [--repeats 2]

Run time: about 4 minutes on 2 cores.
"""

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SIZES = {
    "the tests' model (d_model 64)": dict(num_layers=2, d_model=64, num_heads=4, dff=128,
                                          vocab=16, seq=9),
    "the tutorial's model (d_model 512)": dict(num_layers=2, d_model=512, num_heads=8,
                                               dff=2048, vocab=8000, seq=25),
}
BUILDS = ("built first (ours)", "Keras' own build")


def child(size, build):
    """One run, in this process: `{"first": s, "second": s}`."""
    import keras
    import numpy as np

    import keras_transformer as kt

    if build == BUILDS[1]:
        kt.Transformer._maybe_symbolic_build = keras.Model._maybe_symbolic_build
    cfg = SIZES[size]
    keras.utils.set_random_seed(0)
    model = kt.Transformer(
        num_layers=cfg["num_layers"], d_model=cfg["d_model"], num_heads=cfg["num_heads"],
        dff=cfg["dff"], input_vocab_size=cfg["vocab"], target_vocab_size=cfg["vocab"],
        maximum_position_encoding=cfg["seq"], rate=0.1,
    )
    model.compile(keras.optimizers.Adam(1e-3), loss=kt.masked_loss,
                  metrics=[kt.masked_accuracy], jit_compile=False)
    ids = np.random.default_rng(0).integers(4, cfg["vocab"], (64, cfg["seq"])).astype("int32")
    times = {}
    for name in ("first", "second"):
        start = time.perf_counter()
        model.fit([ids, ids], ids, batch_size=64, epochs=1, verbose=0)
        times[name] = time.perf_counter() - start
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return

    from machine import describe

    print(describe(["tensorflow", "keras"]))
    print("Seconds of one `fit` of one step in a fresh process (first), then of another (second).")
    for size in SIZES:
        runs = {build: [] for build in BUILDS}
        for _ in range(args.repeats):
            for build in BUILDS:
                out = subprocess.run([sys.executable, __file__, "--child", size, build],
                                     capture_output=True, text=True, check=True)
                runs[build].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"\n{size}")
        print("| build | first step, s | second step, s |")
        print("|---|---|---|")
        for build, times in runs.items():
            first = ", ".join(f"{t['first']:.1f}" for t in times)
            second = ", ".join(f"{t['second']:.2f}" for t in times)
            print(f"| {build} | {first} | {second} |")
        ours, keras_own = (min(t["first"] for t in runs[b]) for b in BUILDS)
        print(f"Keras' own build over ours (best of each): {keras_own / ours:.2f}x")


if __name__ == "__main__":
    main()
