"""Is our decoding as fast on a CPU as CTranslate2's and Hugging Face's, on the same weights?

    pip install ".[bench]"
    python benchmarks/bench_decode_peers.py [--repeats 5] [--sentences 8] [--isa AVX2]

The tutorial's configuration (2 layers, d_model 512, 8 heads, dff 2048,
vocabulary 8000), random weights, source length 25, exactly 24 new tokens
(the output biases of `<PAD>`, `<SOS>` and `<END>` are -1e4, so no
implementation stops early or differs on special tokens), fp32, 2 threads
each. Every implementation runs in its own process:

- `ours`: `Transformer.generate` with default arguments (XLA), and again on
  `serving_copy("bfloat16")` (weights stored in bfloat16; its share of rows
  equal to float32's is printed). What each part of `generate` buys (cache,
  compiled loop, XLA) is `bench_generate.py`'s question;
- `savedmodel`: our model exported with `export_saved_model` (greedy, and
  beam 4), loaded with `tf.saved_model.load` and called on strings (a word
  tokenizer whose ids are the model's); its tokens are asserted equal to ours;
- `ctranslate2`: our model exported with `export_ctranslate2` (the package's
  `export --format ctranslate2`), run fp32 and int8; its greedy and beam
  tokens are asserted equal to ours on every source;
- `marian`: Hugging Face transformers' `MarianMTModel` (PyTorch) with the same
  dimensions and its own random weights (speed only);
- `floor`: the memory-bandwidth floor at batch 1: the bytes of the weights a
  decoding step reads (decoder and output projection) over the read bandwidth
  measured by a 2-thread matrix-vector product and by a sum over a 1 GB array;
  and the step's own products alone: its matrix-vector products by those
  weights, one after another in NumPy (BLAS, 2 threads). Where the weights
  stay in a large cache, as on an Intel Xeon with a 480 MiB L3, a step runs
  below the memory floor, and the products alone are the floor that holds.

CTranslate2 and PyTorch use GNU OpenMP, whose spinning threads slow down when
anything else runs on the cores; each peer runs with `OMP_WAIT_POLICY` PASSIVE
and ACTIVE, and the best is kept case by case. CTranslate2 also runs with each
of its matrix-product libraries (`CT2_GEMM`): its own choice (Intel MKL on an
Intel CPU, oneDNN elsewhere), oneDNN (`CT2_USE_MKL=0`; 4x faster than MKL at
batch 1 on an Intel Xeon with AMX), and oneDNN capped at AVX2
(`ONEDNN_MAX_CPU_ISA`; faster on an AMD EPYC with AVX-512). Figures: batch 1
greedy and beam 4 in ms/token (each of `--sentences` sources decoded alone),
batch 64 greedy in sentences/s; each the best of `--repeats` runs. The rows
run one after another: on a machine whose speed drifts, compare two of them
in alternating runs of their workers (RESULTS.md does).

`--isa AVX2` runs every worker as on a CPU without AVX-512: XLA:CPU, oneDNN,
MKL and CTranslate2 are told to generate or pick AVX2 code at most
(`--xla_cpu_max_isa`, `ONEDNN_MAX_CPU_ISA`, `MKL_ENABLE_INSTRUCTIONS`,
`CT2_FORCE_CPU_ISA`). It emulates the instruction set only: the caches and the
memory bandwidth stay this machine's. The first line printed names the machine:
CPU model, vector extensions, cores, threads and library versions.

Run time: 13-14 minutes on 2 cores (RESULTS.md, 2026-11-22).
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
from machine import describe  # noqa: E402

VOCAB, SRC_LEN, NEW_TOKENS, THREADS = 8000, 25, 24, 2
CONFIG = dict(num_layers=2, d_model=512, num_heads=8, dff=2048)
CASES = (("greedy", 1), ("beam", 1), ("greedy", 64))
BEAM = 4
# Token i is spelled "t<i>" (the special tokens as ours), for peers that read strings.
VOCABULARY = ["<PAD>", "<SOS>", "<END>", "<UNK>"] + [f"t{i}" for i in range(4, VOCAB)]
PACKAGES = ("tensorflow", "keras", "ctranslate2", "torch", "transformers")
# CTranslate2's matrix-product libraries, each tried (see the docstring).
CT2_GEMM = {"own choice": {}, "oneDNN": {"CT2_USE_MKL": "0"},
            "oneDNN AVX2": {"CT2_USE_MKL": "0", "ONEDNN_MAX_CPU_ISA": "AVX2"}}


def with_xla_flags(env, *flags):
    """`env` with `flags` appended to its `XLA_FLAGS` (or to this process's)."""
    current = env.get("XLA_FLAGS", os.environ.get("XLA_FLAGS"))
    return {**env, "XLA_FLAGS": " ".join(filter(None, (current, *flags)))}


def isa_env(isa):
    """The environment that caps every library's code at `isa` ("native": none)."""
    if isa == "native":
        return {}
    return with_xla_flags({"ONEDNN_MAX_CPU_ISA": isa, "MKL_ENABLE_INSTRUCTIONS": isa,
                           "CT2_FORCE_CPU_ISA": isa}, f"--xla_cpu_max_isa={isa}")


def best_seconds(fn, repeats):
    fn()  # trace / compile / warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def sources(count, seed=0):
    return np.random.default_rng(seed).integers(4, VOCAB, (count, SRC_LEN)).astype(np.int32)


def seeded_model(kt, maximum_position_encoding=NEW_TOKENS + 1):
    """The seeded, built model every `ours` worker decodes with, from the
    package `kt` (`keras_transformer`, or an older copy of it)."""
    import keras

    keras.utils.set_random_seed(0)
    model = kt.Transformer(
        **CONFIG, input_vocab_size=VOCAB, target_vocab_size=VOCAB,
        maximum_position_encoding=maximum_position_encoding,
    )
    model.build(((None, SRC_LEN), (None, maximum_position_encoding)))
    bias = keras.ops.convert_to_numpy(model.final_layer.bias)
    bias[[model.pad_token_idx, model.start_token_idx, model.end_token_idx]] = -1e4
    model.final_layer.bias.assign(bias)
    return model


def build_ours(path):
    """Builds and saves the seeded model every worker decodes with."""
    import keras_transformer as kt

    seeded_model(kt).save(path)


def load_ours(path):
    import keras

    import keras_transformer  # noqa: F401  (registers the classes)

    return keras.saving.load_model(path)


def time_cases(decode, sentences, repeats):
    """`decode(ids (N, S), method) -> tokens (N, NEW_TOKENS)`: figures and tokens."""
    one_by_one = sources(sentences)
    batch = sources(64, seed=1)
    figures, tokens = {}, {}
    for method, size in CASES:
        key = f"{method}-b{size}"
        if size == 1:
            run = lambda: [decode(row[np.newaxis], method) for row in one_by_one]  # noqa: E731
            seconds = best_seconds(run, repeats)
            figures[key] = seconds / sentences / NEW_TOKENS * 1e3  # ms/token
            tokens[key] = np.concatenate(run()).tolist()
        else:
            seconds = best_seconds(lambda: decode(batch, method), repeats)
            figures[key] = size / seconds  # sentences/s
            tokens[key] = np.asarray(decode(batch, method)).tolist()
    return figures, tokens


def worker_ours(model_path, variant, sentences, repeats):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    model = load_ours(model_path)
    if variant == "bf16":
        model = model.serving_copy("bfloat16")

    def decode(ids, method):
        return model.generate(ids, max_length=NEW_TOKENS, method=method, beam_size=BEAM,
                              length_penalty=0.0).numpy()

    return time_cases(decode, sentences, repeats)


def worker_savedmodel(model_path, sentences, repeats):
    import tensorflow as tf

    from keras_transformer import export_saved_model
    from keras_transformer.text import WordTokenizer

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    model = load_ours(model_path)
    tokenizer = WordTokenizer(VOCABULARY)
    served = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("greedy", "beam"):
            path = export_saved_model(model, tokenizer, tokenizer, os.path.join(tmp, method),
                                      method=method, beam_size=BEAM, length_penalty=0.0,
                                      max_length=NEW_TOKENS)
            served[method] = tf.saved_model.load(path)

    def decode(ids, method):
        texts = tf.constant([" ".join(VOCABULARY[i] for i in row) for row in ids])
        return served[method].translate(texts)["token_ids"].numpy()

    return time_cases(decode, sentences, repeats)


def convert(model_path, output_dir):
    """Our model, exported with `keras-transformer export --format ctranslate2`'s
    function (a word tokenizer whose ids are the model's)."""
    from keras_transformer import Translator
    from keras_transformer.serving.ctranslate2 import export_ctranslate2
    from keras_transformer.text import WordTokenizer

    tokenizer = WordTokenizer(VOCABULARY)
    export_ctranslate2(Translator(load_ours(model_path), tokenizer, tokenizer), output_dir)


def worker_ctranslate2(ct2_dir, compute_type, sentences, repeats):
    import ctranslate2

    translator = ctranslate2.Translator(
        ct2_dir, device="cpu", compute_type=compute_type, intra_threads=THREADS, inter_threads=1
    )
    index = {name: i for i, name in enumerate(VOCABULARY)}

    def decode(ids, method):
        results = translator.translate_batch(
            [[VOCABULARY[i] for i in row] for row in ids],
            beam_size=BEAM if method == "beam" else 1,
            max_decoding_length=NEW_TOKENS, min_decoding_length=NEW_TOKENS,
            length_penalty=0.0, max_batch_size=64,
        )
        return np.array([[index[t] for t in r.hypotheses[0]] for r in results])

    return time_cases(decode, sentences, repeats)


def worker_marian(sentences, repeats):
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=VOCAB, d_model=CONFIG["d_model"], encoder_layers=CONFIG["num_layers"],
        decoder_layers=CONFIG["num_layers"], encoder_attention_heads=CONFIG["num_heads"],
        decoder_attention_heads=CONFIG["num_heads"], encoder_ffn_dim=CONFIG["dff"],
        decoder_ffn_dim=CONFIG["dff"], max_position_embeddings=64, activation_function="relu",
        pad_token_id=0, decoder_start_token_id=1, eos_token_id=2, scale_embedding=True,
    )
    model = MarianMTModel(config).eval()

    def decode(ids, method):
        with torch.inference_mode():
            out = model.generate(
                torch.from_numpy(ids.astype(np.int64)), num_beams=BEAM if method == "beam" else 1,
                do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                length_penalty=0.0, early_stopping=False,
            )
        return out[:, 1:].numpy()

    return time_cases(decode, sentences, repeats)


def worker_floor(model_path, repeats):
    """Bytes a batch-1 step reads over two measured read bandwidths.

    A step reads every decoder weight except the cross-attention key and
    value projections (applied once to the encoder output) and the embedding
    rows it does not look up, and the output projection.
    """
    model = load_ours(model_path)
    skipped = {id(w) for layer in model.decoder.dec_layers
               for w in (*layer.mha2.wk.weights, *layer.mha2.wv.weights)}
    skipped |= {id(w) for w in model.decoder.embedding.weights}
    read = [w for w in (*model.decoder.weights, *model.final_layer.weights)
            if id(w) not in skipped]
    step_bytes = sum(int(np.prod(w.shape)) * 4 for w in read)
    matrix = np.ones((32768, 8192), np.float32)  # 1 GiB, far beyond the caches
    vector = np.ones(8192, np.float32)
    matvec = matrix.nbytes / best_seconds(lambda: matrix @ vector, repeats)
    total = matrix.nbytes / best_seconds(matrix.sum, repeats)
    del matrix
    kernels = [np.asarray(w) for w in read if len(w.shape) == 2]
    inputs = {n: np.ones(n, np.float32) for n in {k.shape[0] for k in kernels}}

    def products(steps=20):
        for _ in range(steps):
            for kernel in kernels:
                inputs[kernel.shape[0]] @ kernel

    products_ms = best_seconds(products, repeats) / 20 * 1e3
    return {"step_bytes": step_bytes,
            "floor_ms": {"matvec": step_bytes / matvec * 1e3, "sum": step_bytes / total * 1e3,
                         "products": products_ms},
            "bandwidth_gb_s": {"matvec": matvec / 1e9, "sum": total / 1e9}}, {}


def run_worker(args, env=None):
    result = subprocess.run(
        [sys.executable, __file__, "--worker", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})},
    )
    if result.returncode:
        raise RuntimeError(f"worker {args} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--isa", choices=("native", "AVX2"), default="native",
                        help="cap the code every library generates (see the docstring)")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        kind, *rest = args.worker
        figures = tokens = {}
        if kind == "build":
            build_ours(*rest)
        elif kind == "convert":
            convert(*rest)
        elif kind == "ours":
            figures, tokens = worker_ours(*rest, args.sentences, args.repeats)
        elif kind == "savedmodel":
            figures, tokens = worker_savedmodel(*rest, args.sentences, args.repeats)
        elif kind == "ctranslate2":
            figures, tokens = worker_ctranslate2(*rest, args.sentences, args.repeats)
        elif kind == "marian":
            figures, tokens = worker_marian(args.sentences, args.repeats)
        else:
            figures, tokens = worker_floor(*rest, args.repeats)
        print(json.dumps({"figures": figures, "tokens": tokens}))
        return

    env = isa_env(args.isa)
    print(f"# {describe(PACKAGES)}", flush=True)
    print(f"# instruction set: {args.isa}{'' if args.isa == 'native' else ' (emulated)'}; "
          f"{THREADS} threads each; source length {SRC_LEN}, {NEW_TOKENS} new tokens, "
          f"vocabulary {VOCAB}, beam {BEAM}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, "model.keras")
        run_worker(["build", model_path])
        rows = {}
        for variant in ("default", "bf16"):
            rows[f"ours ({variant})"] = run_worker(["ours", model_path, variant], env)
            print(f"ours ({variant}): {rows[f'ours ({variant})']['figures']}", flush=True)
        rows["ours SavedModel"] = run_worker(["savedmodel", model_path], env)
        print(f"ours SavedModel: {rows['ours SavedModel']['figures']}", flush=True)
        ct2_dir = os.path.join(tmp, "ct2")
        run_worker(["convert", model_path, ct2_dir])
        gemms = CT2_GEMM if args.isa == "native" else {
            name: gemm for name, gemm in CT2_GEMM.items() if "ONEDNN_MAX_CPU_ISA" not in gemm}
        for compute_type in ("float32", "int8"):
            for policy in ("PASSIVE", "ACTIVE"):
                for gemm, gemm_env in gemms.items():
                    peer_env = {**env, **gemm_env, "OMP_WAIT_POLICY": policy}
                    row = run_worker(["ctranslate2", ct2_dir, compute_type], peer_env)
                    print(f"ctranslate2 {compute_type} {policy} {gemm}: {row['figures']}",
                          flush=True)
                    rows.setdefault(f"ctranslate2 {compute_type}", []).append(row)
        for policy in ("PASSIVE", "ACTIVE"):
            row = run_worker(["marian"], env={**env, "OMP_WAIT_POLICY": policy})
            print(f"marian {policy}: {row['figures']}", flush=True)
            rows.setdefault("marian", []).append(row)
        threads = {name: str(THREADS) for name in
                   ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
        floor = run_worker(["floor", model_path], {**env, **threads})["figures"]

    for name, runs in rows.items():
        if isinstance(runs, list):  # the best OMP_WAIT_POLICY (and library), case by case
            rows[name] = {"tokens": runs[0]["tokens"], "figures": {
                key: (max if key.endswith("b64") else min)(r["figures"][key] for r in runs)
                for key in runs[0]["figures"]}}
    reference = rows["ours (default)"]["tokens"]
    for name in ("ours SavedModel", "ctranslate2 float32"):
        for key, tokens in rows[name]["tokens"].items():
            if tokens != reference[key]:
                raise AssertionError(f"{name} {key}: tokens differ from ours (default)")
    print("\ntokens: ours SavedModel and ctranslate2 float32 equal ours (default) in every case")
    rows_equal = [np.mean([a == b for a, b in zip(rows["ours (bf16)"]["tokens"][key], tokens)])
                  for key, tokens in reference.items()]
    print(f"ours (bf16): {np.mean(rows_equal):.3f} of the rows equal ours (default)'s")
    print(f"bandwidth floor at batch 1: {floor['floor_ms']['matvec']:.2f} ms/token (matvec, "
          f"{floor['bandwidth_gb_s']['matvec']:.1f} GB/s) to {floor['floor_ms']['sum']:.2f} "
          f"(sum, {floor['bandwidth_gb_s']['sum']:.1f} GB/s); {floor['step_bytes'] / 1e6:.1f} MB "
          f"read per token; the step's products alone (NumPy): "
          f"{floor['floor_ms']['products']:.2f} ms/token")
    print("\n| | batch 1 greedy, ms/token | batch 1 beam 4, ms/token | "
          "batch 64 greedy, sentences/s |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        f = row["figures"]
        print(f"| {name} | {f['greedy-b1']:.2f} | {f['beam-b1']:.2f} | {f['greedy-b64']:.1f} |")


if __name__ == "__main__":
    main()
