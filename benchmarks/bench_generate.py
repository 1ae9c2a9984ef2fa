"""How much faster is `generate` than the tutorial's `inference`, and what does
each of its parts (the compiled loop, the key/value cache, XLA) buy?

The model and sources of `bench_decode_peers.py` (`seeded_model`: the
tutorial's configuration, vocabulary 8000, random weights, source length 25,
the output biases of `<PAD>`, `<SOS>` and `<END>` set to -1e4 so that no
method stops early), 24 new tokens, TensorFlow.

Measured side by side in one run:
  (a) the tutorial's algorithm: an eager Python loop that re-runs the whole
      model on the growing prefix for every token, with `.numpy()` inside,
      one sentence at a time;
  (b) `generate(use_cache=False, jit_compile=False)`: one compiled loop (a
      TensorFlow graph), full recomputation;
  (c) `generate(jit_compile=False)`: the graph loop with the key/value cache;
  (d) `generate()`: (c) compiled with XLA, the default since 2026-11-23;
plus beam search (4 beams) against greedy, and 96 against 24 new tokens with
`maximum_position_encoding=128`.

Usage: python benchmarks/bench_generate.py [--repeats 5]

Run time: about 2 minutes on 2 cores with `--repeats 1`, 5 with the default.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import keras_transformer as kt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode_peers import (  # noqa: E402
    NEW_TOKENS,
    SRC_LEN,
    VOCAB,
    best_seconds,
    seeded_model,
    sources,
)
from machine import describe  # noqa: E402

def tutorial_inference(model, inp, new_tokens):
    """The tutorial's `inference`: eager, batch 1, whole prefix every step."""
    tar = tf.constant([[model.start_token_idx]])
    inp = tf.constant(inp)
    predict_tokens = []
    for _ in range(new_tokens):
        logits = model((inp, tar))
        pred_token = int(tf.argmax(logits, -1).numpy()[0][-1])
        if pred_token == model.end_token_idx:
            break
        predict_tokens.append(pred_token)
        tar = tf.constant([[model.start_token_idx] + predict_tokens])
    return predict_tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    reps = args.repeats
    model = seeded_model(kt)
    print(f"machine: {describe(('tensorflow', 'keras'))}")
    print(f"source length {SRC_LEN}, {NEW_TOKENS} new tokens, vocabulary {VOCAB}")
    print("| method | batch | ms/token | sentences/s |")
    print("|---|---|---|---|")

    rows = {}

    def report(name, batch, seconds):
        rows[(name, batch)] = seconds
        print(f"| {name} | {batch} | {seconds / NEW_TOKENS * 1e3:.2f} | "
              f"{batch / seconds:.1f} |", flush=True)

    one = sources(1)
    seconds = best_seconds(lambda: tutorial_inference(model, one, NEW_TOKENS), reps)
    report("(a) tutorial: eager, recompute", 1, seconds)
    methods = {
        "(b) compiled, no cache": dict(use_cache=False, jit_compile=False),
        "(c) compiled, cache": dict(jit_compile=False),
        "(d) compiled, cache, XLA": dict(),
    }
    for batch in (1, 64):
        inp = sources(batch)
        for name, kwargs in methods.items():
            seconds = best_seconds(
                lambda: model.generate(inp, max_length=NEW_TOKENS, **kwargs).numpy(), reps
            )
            report(name, batch, seconds)
        seconds = best_seconds(
            lambda: model.generate(inp, max_length=NEW_TOKENS, method="beam",
                                   jit_compile=False).numpy(), reps
        )
        report("(c) beam search, 4 beams", batch, seconds)

    long_model = seeded_model(kt, maximum_position_encoding=128)
    inp = sources(1)
    short = best_seconds(
        lambda: long_model.generate(inp, max_length=24, jit_compile=False).numpy(), reps)
    long = best_seconds(
        lambda: long_model.generate(inp, max_length=96, jit_compile=False).numpy(), reps)

    tutorial = rows[("(a) tutorial: eager, recompute", 1)]
    print()
    print(f"(c) vs (a) per token at batch 1: {tutorial / rows[('(c) compiled, cache', 1)]:.1f}x")
    print(f"(d) vs (a) per token at batch 1: "
          f"{tutorial / rows[('(d) compiled, cache, XLA', 1)]:.1f}x")
    print(f"(c) at batch 64 vs (a), sentences/s: "
          f"{64 * tutorial / rows[('(c) compiled, cache', 64)]:.0f}x")
    for batch in (1, 64):
        beam = rows[("(c) beam search, 4 beams", batch)]
        greedy = rows[("(c) compiled, cache", batch)]
        print(f"beam 4 / greedy time at batch {batch}: {beam / greedy:.2f}")
    print(f"96 / 24 new tokens time (cache, batch 1, max position 128): {long / short:.2f} "
          f"({short * 1e3:.0f} ms vs {long * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
