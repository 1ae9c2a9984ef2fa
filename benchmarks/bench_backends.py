"""Is our core as fast as keras-hub's layers on every Keras backend, for training and decoding?

    pip install ".[bench]" jax
    python benchmarks/bench_backends.py [--backends tensorflow,jax,torch] [--torch-compile]
                                        [--rounds 2] [--steps 8] [--repeats 3] [--sentences 4]

The tutorial's configuration (2 layers, d_model 512, 8 heads, dff 2048,
vocabulary 8000, source length 25), fp32. Each row runs in its own process
(the backend is chosen before Keras is imported); rows of one backend take
turns, `--rounds` times, and each figure is the best over the rounds.

- `ours`: `keras_transformer.Transformer`. Training: `model.fit` with the
  default compile (`jit_compile="auto"`). Decoding: `generate` with default
  arguments: an XLA loop on TensorFlow, `jax.jit` on JAX, eager PyTorch
  without gradients. Every `ours` row loads the same weights (saved once on
  TensorFlow, the output biases of `<PAD>`, `<SOS>` and `<END>` set to -1e4
  so that every row decodes exactly 24 new tokens) and their greedy and beam
  tokens are compared.
- `keras-hub`: keras-hub's `TransformerEncoder` / `TransformerDecoder` /
  `SinePositionEncoding` in the same architecture (post-LN, ReLU, dropout
  0.1, untied embeddings and output projection), decoding with its cached
  `GreedySampler` and `BeamSampler` and the layers' self- and cross-attention
  caches, composed and compiled as keras-hub's `BartSeq2SeqLM.generate` does
  (`tf.function(jit_compile=True)`, `jax.jit` over the variables, eager
  PyTorch under `torch.no_grad()`). Its own random weights: speed only.
- `ours jit_compile=True` (with `--torch-compile`, PyTorch): decoding through
  `torch.compile`; its first call per shape (the compilation) is reported
  in `first calls s`. Decoding only.

Figures: training ms/step (median of `--steps` steps after 3 warm-up steps,
batch 64, target length 25, Adam); batch 1 greedy and beam 4 in ms/token
(`--sentences` sources decoded one at a time); batch 64 greedy in sentences/s;
each decoding figure the best of `--repeats` runs after a warm-up run;
`first calls s`: the first decoding call of each of the three cases (tracing
and compiling), summed.

Run time: about 3 minutes per backend with `--rounds 3` on 2 cores (RESULTS.md);
PyTorch's eager decoding is the slowest.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
# The workload of bench_decode_peers.py: the same model, sources and cases.
from bench_decode_peers import (  # noqa: E402
    BEAM, CASES, CONFIG, NEW_TOKENS, SRC_LEN, VOCAB, seeded_model, sources, time_cases)
from machine import describe  # noqa: E402

BATCH, WARMUP = 64, 3
TORCH_COMPILE = "ours jit_compile=True"


def ours_model():
    import keras_transformer as kt

    return kt.Transformer(**CONFIG, input_vocab_size=VOCAB, target_vocab_size=VOCAB,
                          maximum_position_encoding=NEW_TOKENS + 1, rate=0.1)


def save_weights(path):
    """The seeded model every `ours` row decodes with (TensorFlow)."""
    import keras_transformer as kt

    seeded_model(kt).save_weights(path)


def hub_model():
    """keras-hub's layers as a sequence-to-sequence model with a cached decoder."""
    import keras
    import keras_hub
    from keras import ops

    num_layers, d_model, num_heads = CONFIG["num_layers"], CONFIG["d_model"], CONFIG["num_heads"]
    depth = d_model // num_heads

    class HubSeq2Seq(keras.Model):
        def __init__(self):
            super().__init__()
            self.source_embedding = keras.layers.Embedding(VOCAB, d_model)
            self.target_embedding = keras.layers.Embedding(VOCAB, d_model)
            self.position = keras_hub.layers.SinePositionEncoding()
            self.encoder_layers = [
                keras_hub.layers.TransformerEncoder(CONFIG["dff"], num_heads, dropout=0.1)
                for _ in range(num_layers)]
            self.decoder_layers = [
                keras_hub.layers.TransformerDecoder(CONFIG["dff"], num_heads, dropout=0.1)
                for _ in range(num_layers)]
            self.output_layer = keras.layers.Dense(VOCAB)

        def encode(self, source, training=False):
            x = self.source_embedding(source)
            x = x + self.position(x)
            for layer in self.encoder_layers:
                x = layer(x, padding_mask=ops.not_equal(source, 0), training=training)
            return x

        def call(self, inputs, training=False):
            source, target = inputs
            x = self.encode(source, training)
            y = self.target_embedding(target)
            y = y + self.position(y)
            for layer in self.decoder_layers:
                y = layer(y, x, decoder_padding_mask=ops.not_equal(target, 0),
                          encoder_padding_mask=ops.not_equal(source, 0), training=training)
            return self.output_layer(y)

        def decode_with_cache(self, tokens, index, cache, cross_index=None):
            """`BartSeq2SeqLM.call_decoder_with_cache`: caches `(B, layers, 2, T, H, depth)`."""
            self_cache, cross_cache, encoder_output, encoder_mask = cache
            y = self.target_embedding(tokens)
            y = y + self.position(y, start_index=index)
            self_caches, cross_caches = [], []
            for i, layer in enumerate(self.decoder_layers):
                y, layer_self, layer_cross = layer(
                    y, encoder_output, encoder_padding_mask=encoder_mask,
                    self_attention_cache=self_cache[:, i], self_attention_cache_update_index=index,
                    cross_attention_cache=cross_cache[:, i],
                    cross_attention_cache_update_index=cross_index,
                )
                self_caches.append(layer_self)
                cross_caches.append(layer_cross)
            if cross_index is not None:
                cross_cache = ops.stack(cross_caches, axis=1)
            cache = (ops.stack(self_caches, axis=1), cross_cache, encoder_output, encoder_mask)
            return self.output_layer(y), y, cache

        def generate(self, source, sampler, stop_token_ids=None):
            batch_size = ops.shape(source)[0]
            encoder_output = self.encode(source)
            prompt = ops.concatenate([ops.ones((batch_size, 1), "int32"),
                                      ops.zeros((batch_size, NEW_TOKENS), "int32")], axis=1)
            shape = (batch_size, num_layers, 2, NEW_TOKENS + 1, num_heads, depth)
            cache = (ops.zeros(shape), ops.zeros((*shape[:3], SRC_LEN, *shape[4:])),
                     encoder_output, ops.not_equal(source, 0))
            # Seeds the cross-attention cache (keras-hub runs the prompt once).
            _, hidden, cache = self.decode_with_cache(prompt[:, :1], 0, cache, cross_index=0)

            def next(prompt, cache, index):
                tokens = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
                logits, hidden, cache = self.decode_with_cache(tokens, index - 1, cache)
                return logits[:, 0], hidden[:, 0], cache

            # `model=self`, as `BartSeq2SeqLM.generate` passes: on JAX the
            # sampler's loop maps the model's variables to the compiled
            # function's inputs; without it the loop reads the variables
            # themselves, and `jax.jit` folds the weights in as constants.
            # Without `stop_token_ids` the loop runs all its steps (a known
            # number); with them it checks after each step whether every row ended.
            tokens = sampler(next, prompt, cache=cache, index=1,
                             mask=ops.not_equal(prompt, 0), hidden_states=hidden[:, 0],
                             stop_token_ids=stop_token_ids, model=self)
            return tokens[:, 1:]

    return HubSeq2Seq()


def worker_train(impl, steps):
    import keras

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    model = hub_model() if impl == "keras-hub" else ours_model()
    model.compile(keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                  loss=kt.masked_loss)
    rng = np.random.default_rng(0)
    shape = (BATCH * (steps + WARMUP), NEW_TOKENS + 1)
    inp, dec_in, dec_out = (rng.integers(4, VOCAB, shape).astype("int32") for _ in range(3))
    times = []
    timer = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: times.append(time.perf_counter()),
        on_train_batch_end=lambda batch, logs: times.append(time.perf_counter() - times.pop()),
    )
    model.fit([inp, dec_in], dec_out, batch_size=BATCH, shuffle=False, verbose=0,
              callbacks=[timer])
    return float(np.median(times[WARMUP:])) * 1e3


def worker_decode(impl, weights, sentences, repeats, hub_stops=False):
    """`{case: figure}, {case: tokens}` for one implementation; keras-hub's
    loop stops at `<END>` with `hub_stops`, as ours does."""
    import keras

    if impl == "keras-hub":
        import keras_hub

        from keras_transformer import _backend

        keras.utils.set_random_seed(0)
        model = hub_model()
        model((sources(1), sources(1)))
        samplers = {"greedy": keras_hub.samplers.GreedySampler(),
                    "beam": keras_hub.samplers.BeamSampler(num_beams=BEAM)}
        # keras-hub's generate runs eagerly on PyTorch.
        jit_compile = keras.backend.backend() != "torch"
        compiled = {method: _backend.compile_decoding(
            model, lambda ids, s=sampler: model.generate(ids, s, (2,) if hub_stops else None),
            jit_compile=jit_compile)
            for method, sampler in samplers.items()}

        def decode(ids, method):
            return keras.ops.convert_to_numpy(compiled[method](ids))
    else:
        model = ours_model()
        model.build(((None, SRC_LEN), (None, NEW_TOKENS + 1)))
        model.load_weights(weights)

        jit_compile = True if impl == TORCH_COMPILE else "auto"

        def decode(ids, method):
            return keras.ops.convert_to_numpy(model.generate(
                ids, max_length=NEW_TOKENS, method=method, beam_size=BEAM, length_penalty=0.0,
                jit_compile=jit_compile))

    start = time.perf_counter()
    for method, size in CASES:
        decode(sources(size, seed=0 if size == 1 else 1), method)
    first_calls = time.perf_counter() - start
    figures, tokens = time_cases(decode, sentences, repeats)
    figures["compile"] = first_calls
    return figures, tokens


def worker(args):
    kind, impl, weights = args.worker
    if kind == "save":
        save_weights(weights)
        return {}
    figures, tokens = worker_decode(impl, weights, args.sentences, args.repeats)
    figures["train"] = float("nan") if impl == TORCH_COMPILE else worker_train(impl, args.steps)
    return {"figures": figures, "tokens": tokens}


def run_worker(row, args, weights, kind="run"):
    backend, impl = row
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": ROOT}
    command = [sys.executable, __file__, "--worker", kind, impl, weights,
               "--steps", str(args.steps), "--repeats", str(args.repeats),
               "--sentences", str(args.sentences)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if result.returncode:
        raise RuntimeError(f"{row} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def best_of(results):
    """The best figure of each case over the rounds (least ms, most sentences/s)."""
    return {key: (max if key.endswith("b64") else min)(r["figures"][key] for r in results)
            for key in results[0]["figures"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--torch-compile", action="store_true",
                        help="add ours decoding through torch.compile (PyTorch)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=4)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return

    print(f"# {describe()}")
    print(f"# command: python benchmarks/bench_backends.py {' '.join(sys.argv[1:])}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "ours.weights.h5")
        run_worker(("tensorflow", "ours"), args, weights, kind="save")
        results = {}
        for backend in args.backends.split(","):
            rows = [(backend, "ours"), (backend, "keras-hub")]
            if args.torch_compile and backend == "torch":
                rows.append((backend, TORCH_COMPILE))
            for round_ in range(args.rounds):
                for row in rows if round_ % 2 == 0 else rows[::-1]:
                    result = run_worker(row, args, weights)
                    results.setdefault(row, []).append(result)
                    print(f"{backend} {row[1]} round {round_ + 1}: {result['figures']}",
                          flush=True)

    reference = results[next(row for row in results if row[1] == "ours")][0]["tokens"]
    for row, runs in results.items():
        if row[1].startswith("ours"):
            same = {key: runs[0]["tokens"][key] == tokens for key, tokens in reference.items()}
            print(f"tokens of {row[0]} {row[1]} equal the first ours row's: {same}")
    print("\n| backend | implementation | train ms/step | batch 1 greedy ms/token | "
          "batch 1 beam 4 ms/token | batch 64 greedy sentences/s | first calls s |")
    print("|---|---|---|---|---|---|---|")
    for (backend, impl), runs in results.items():
        f = best_of(runs)
        train = "—" if np.isnan(f["train"]) else f"{f['train']:.0f}"
        print(f"| {backend} | {impl} | {train} | {f['greedy-b1']:.2f} | "
              f"{f['beam-b1']:.2f} | {f['greedy-b64']:.1f} | {f['compile']:.1f} |")
    print("\nSpeed of ours over each other row (above 1: ours is faster)\n")
    print("| backend | against | train | batch 1 greedy | batch 1 beam 4 | batch 64 greedy |")
    print("|---|---|---|---|---|---|")
    for (backend, impl), runs in results.items():
        if impl == "ours":
            continue
        ours, other = best_of(results[(backend, "ours")]), best_of(runs)
        ratios = [other[k] / ours[k] for k in ("train", "greedy-b1", "beam-b1")]
        ratios.append(ours["greedy-b64"] / other["greedy-b64"])
        print(f"| {backend} | {impl} | "
              + " | ".join("—" if np.isnan(r) else f"{r:.2f}x" for r in ratios) + " |")


if __name__ == "__main__":
    main()
