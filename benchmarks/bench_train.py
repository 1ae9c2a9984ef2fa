"""How fast does our model train against the tutorial's model written plainly, in
each compile mode, and what share of the machine's matmul peak (MFU) is that?

Trains the tutorial's configuration (2 layers, d_model 512, 8 heads, dff 2048,
source and target length 25, batch 64, vocabulary 8000) on random token ids
without padding, and prints for each compile mode:

- target tokens/s (batch * target length per step);
- the model's GFLOP/s from an exact matmul FLOP count;
- MFU: that rate over the machine's fp32 matmul GFLOP/s, measured in the same
  run on a square matmul.

Each mode is run for `keras_transformer` and, as a baseline, for the tutorial's
model written plainly (`tutorial_reference.py`).

The FLOP count is `flops.forward_flops` (exact, matmuls only; its docstring).

Usage: python benchmarks/bench_train.py [--steps 20] [--modes xla,no-xla,auto]
                                        [--models ours,tutorial]

Run time: about 4 minutes on 2 cores (6 runs of 20 steps of about 1 s, and their compilation).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_transformer as kt  # noqa: E402
from flops import train_step_flops  # noqa: E402
from machine import describe, matmul_peak_gflops  # noqa: E402
from tutorial_reference import TutorialTransformer  # noqa: E402

CONFIG = dict(num_layers=2, d_model=512, num_heads=8, dff=2048, vocab=8000, seq=25, batch=64)
MODES = {"auto": "auto", "xla": True, "no-xla": False}
MODELS = {"ours": kt.Transformer, "tutorial": TutorialTransformer}


def train_seconds_per_step(model_cls, jit_compile, steps, cfg):
    keras.utils.set_random_seed(0)
    model = model_cls(
        num_layers=cfg["num_layers"], d_model=cfg["d_model"], num_heads=cfg["num_heads"],
        dff=cfg["dff"], input_vocab_size=cfg["vocab"], target_vocab_size=cfg["vocab"],
        maximum_position_encoding=cfg["seq"], rate=0.1,
    )
    model.compile(
        keras.optimizers.Adam(kt.CustomSchedule(cfg["d_model"]), beta_1=0.9, beta_2=0.98,
                              epsilon=1e-9),
        loss=kt.masked_loss,
        metrics=[kt.masked_accuracy],
        jit_compile=jit_compile,
    )
    rng = np.random.default_rng(0)
    shape = (cfg["batch"] * steps, cfg["seq"])
    inp, dec_in, dec_out = (rng.integers(3, cfg["vocab"], shape).astype("int32") for _ in range(3))
    model((inp[:1], dec_in[:1]))  # build the weights eagerly
    data = tf.data.Dataset.from_tensor_slices(((inp, dec_in), dec_out)).batch(cfg["batch"])
    timer = _StepTimer()
    model.fit(data, verbose=0, callbacks=[timer])
    # The first steps trace and compile; the median of the rest is the step time.
    return float(np.median(timer.seconds[3:])), model.jit_compile


class _StepTimer(keras.callbacks.Callback):
    """Wall-clock seconds of every training step."""

    def on_train_begin(self, logs=None):
        self.seconds = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--modes", default="xla,no-xla,auto")
    parser.add_argument("--models", default="ours,tutorial")
    args = parser.parse_args()
    cfg = CONFIG
    step_flops = train_step_flops(cfg)
    peak = matmul_peak_gflops()
    print(f"machine: {describe(('tensorflow', 'keras'))}")
    print(f"config: {cfg}; {step_flops / 1e9:.1f} GFLOP per training step")
    print(f"fp32 matmul peak (2048^3): {peak:.1f} GFLOP/s")
    print("| model | mode | jit_compile | ms/step | target tokens/s | model GFLOP/s | MFU |")
    print("|---|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        for name in args.models.split(","):
            seconds, used_jit = train_seconds_per_step(MODELS[name], MODES[mode], args.steps, cfg)
            gflops = step_flops / seconds / 1e9
            tokens = cfg["batch"] * cfg["seq"] / seconds
            print(f"| {name} | {mode} | {used_jit} | {seconds * 1e3:.0f} | {tokens:.0f} | "
                  f"{gflops:.1f} | {gflops / peak:.2f} |", flush=True)
    peak_after = matmul_peak_gflops()
    print(f"fp32 matmul peak again after the runs: {peak_after:.1f} GFLOP/s")


if __name__ == "__main__":
    sys.exit(main())
