"""Is the core correct and fast on a GPU, through Keras' JAX and PyTorch backends
(`../shared/GPU.md`)?

The lent GPU machines have JAX and PyTorch with CUDA, and no TensorFlow: nothing
can be installed there but what travels with the working tree (64 MiB a call),
and TensorFlow with its CUDA libraries is about 2 GB. The core runs on JAX and
PyTorch, so it is measured there; what needs TensorFlow (the tokenizers, the
reference run of the tests) runs here, before and after:

    # here, with TensorFlow: DIR gets the TensorFlow run of tests/backend_child.py
    # and ChatbotData split and tokenized with the recipe's tokenizers
    python benchmarks/bench_gpu.py prepare DIR
    # on the GPU machine: keras, keras-hub, optree and namex travel as wheels for its
    # Python 3.12 (the device tool's README says how) and go on PYTHONPATH; run `train`
    # in a call of its own (the other parts take 3-4 minutes each there)
    python benchmarks/bench_gpu.py correctness DIR OUT   # backend_child.py on JAX, PyTorch
    python benchmarks/bench_gpu.py mixed OUT             # fp32 / bf16 / fp16 training
    python benchmarks/bench_gpu.py train OUT             # ours against keras-hub, PyTorch
    python benchmarks/bench_gpu.py decode OUT [--rows jax/ours,jax/keras-hub]  # against keras-hub
    python benchmarks/bench_gpu.py calls OUT [--packages .,OLD,keras-hub]  # generate's call
    python benchmarks/bench_gpu.py masks OUT             # tests/mask_checks.py on the GPU
    python benchmarks/bench_gpu.py attention OUT         # the attention kernels, 512 tokens
    python benchmarks/bench_gpu.py chatbot DIR OUT [--seconds 600]
    python benchmarks/bench_gpu.py profile OUT [--batch 4096]   # a training step's kernels
    # here again
    KT_BACKEND_RUNS=OUT/runs python -m pytest tests/test_backends.py
    python benchmarks/bench_gpu.py compare OUT           # GPU tokens against the CPU's
    python benchmarks/bench_gpu.py kernels OUT           # profile's kernels by the model's code

- `correctness`: `tests/backend_child.py` on JAX, then PyTorch, next to the
  TensorFlow run made here, so `test_backends.py` asserts on the GPU's runs
  what it asserts on the CPU's (`OUT/runs`: JAX with float32 matmuls in full
  precision); `OUT/runs-default`: JAX with its default matmul precision on
  the GPU, compared by `compare`.
- `mixed`: the tutorial's `kargs` trained 300 steps (batch 64) on a padded
  copy task under `float32`, `mixed_bfloat16` and `mixed_float16` (Keras'
  loss scaling), on each backend: losses, NaN, the logits' dtype, a fully
  padded row.
- `train`: training steps of the tutorial's model (source and target length
  25, vocabulary 8000) at several batch sizes, float32 and bfloat16: ours and
  keras-hub's layers (`bench_backends.hub_model`) through `model.fit` on JAX
  (always XLA) and PyTorch (eager), and PyTorch's `nn.Transformer` in a plain
  loop (eager, and `torch.compile` for the largest batch). Step time: a whole
  `fit` of `--steps` steps, synchronised, after a `fit` that compiles. MFU:
  the matmul FLOPs (`flops.py`) over the device's bf16 dense peak.
- `decode`: `bench_backends.worker_decode` (batch 1 greedy and beam 4 in
  ms/token, batch 64 greedy in sentences/s) for ours and keras-hub on JAX and
  PyTorch, ours on weights saved once on JAX; tokens kept for `compare`. Rows
  `ours:K` force the loop to check whether every row ended once every K steps
  (`_backend.steps_per_check`); `keras-hub:stop` gives keras-hub's sampler
  `<END>` as its stop token, so its loop checks after every step as ours did
  (without it the loop runs a known number of steps).
- `calls`: where a decoding call's time goes: `generate` (batch 1 greedy with
  1 and 24 tokens, beam 4, batch 64 greedy; the model of `decode`) and its
  compiled loop alone, called with tensors made once; medians of 40 calls,
  each package in its own process, in turns over two rounds. `OLD`: another
  commit's package, exported here with `git archive REV keras_transformer |
  tar -x -C OLD` and carried (the GPU machine has no git history).
- `masks`: `tests/mask_checks.py` (the mask rule, `keras.layers.MultiHeadAttention`
  with copied weights, the `keras.ops.dot_product_attention` path against the
  explicit softmax, half precision with a fully masked row) on JAX (float32
  matmuls in full precision) and PyTorch on the GPU.
- `attention`: training steps of the tutorial's model with 512-token
  sequences (sources and targets of 256-512 tokens, padded) on JAX, the
  attention through the explicit float32 softmax (the tutorial's path, as
  `return_attention_scores=True` runs it), through
  `keras.ops.dot_product_attention` on XLA, and through it with
  `flash_attention=True` (cuDNN): ms per step and the device's peak memory,
  each in a process of its own.
- `chatbot`: what `keras_transformer.train` does with its defaults on
  ChatbotData (the split of `bench_chatbot.py`), on JAX: the same model,
  optimizer, schedule, loss, token dropout, best weights on the greedy
  validation chrF and early stopping, with rows padded to `max_length` (one
  shape to compile) instead of length-sorted batches; then the test questions
  decoded as `chat` decodes and scored as `bench_chatbot.py` scores. Then the
  tutorial's size (d_model 512, dff 2048) in the same recipe.
- `profile`: training steps of the tutorial's model in bfloat16 (`train`'s
  workload) under variants, each in its own process: `base`, `rbg` (dropout
  masks from XLA's RngBitGenerator instead of ThreeFry), `no-dropout`,
  `cublaslt` and `no-triton-gemm` (XLA flags), `steps4` (`steps_per_execution=4`). The
  first is traced: its kernels' ms per step (`OUT/perfetto_trace.json.gz`)
  and XLA's optimised training step (`OUT/hlo.tar.gz`), whose `op_name`s say
  which code each kernel runs.

Run time: 3-4 minutes per part on an H100 or H200 (`train` about 6, `profile` 2.5).
"""

import argparse
import collections
import glob
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
CHILD = os.path.join(ROOT, "tests", "backend_child.py")
TUTORIAL = {"num_layers": 2, "d_model": 512, "num_heads": 8, "dff": 2048, "vocab": 8000,
            "seq": 25}
TRAIN_SETTINGS = (("float32", 64), ("mixed_bfloat16", 64), ("float32", 4096),
                  ("mixed_bfloat16", 1024), ("mixed_bfloat16", 4096),
                  ("mixed_bfloat16", 8192))
# bf16 dense peak (no sparsity) by the name the device reports, in FLOP/s.
PEAKS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12}
DECODE_ROWS = ("jax/ours", "jax/keras-hub", "torch/ours", "torch/keras-hub")


def device_peak():
    """`(device name, bf16 dense peak FLOP/s)` from `nvidia-smi` (NaN for another device)."""
    if not shutil.which("nvidia-smi"):
        from machine import describe

        return f"no GPU: {describe()}", float("nan")
    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return name, next((peak for key, peak in PEAKS.items() if key in name), float("nan"))


def child(part, backend, *args, env=None):
    """One worker of this script on `backend`, in its own process: its JSON result."""
    env = dict(os.environ, KERAS_BACKEND=backend, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, __file__, "--worker", part, *map(str, args)],
                            capture_output=True, text=True, env=env)
    sys.stderr.write(result.stderr[-3000:])
    if result.returncode:
        raise RuntimeError(f"{part} on {backend} failed (exit {result.returncode})")
    return json.loads(result.stdout.strip().splitlines()[-1])


def save(out, name, value):
    with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, ensure_ascii=False)


# --- correctness --------------------------------------------------------------


def correctness(prepared, out):
    """`backend_child.py` on JAX and PyTorch next to the TensorFlow run from `prepare`,
    in `OUT/runs.tar.gz`."""
    with tempfile.TemporaryDirectory() as tmp:
        _correctness(prepared, tmp)
        subprocess.run(["tar", "-czf", os.path.join(out, "runs.tar.gz"), "-C", tmp, "runs",
                        "runs-default"], check=True)


def _correctness(prepared, out):
    for name, backends, precision in (("runs", ("jax", "torch"), "highest"),
                                      ("runs-default", ("jax",), None)):
        runs = os.path.join(out, name)
        shutil.copytree(os.path.join(prepared, "runs"), runs)
        for backend in backends:
            env = dict(os.environ, KERAS_BACKEND=backend)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
            if precision:
                env["JAX_DEFAULT_MATMUL_PRECISION"] = precision
            start = time.perf_counter()
            result = subprocess.run([sys.executable, CHILD, runs], env=env,
                                    capture_output=True, text=True)
            print(f"backend_child.py on {backend} ({name}): exit {result.returncode}, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
            if result.returncode:
                print(result.stderr[-4000:])


# --- mixed precision ------------------------------------------------------------


def copy_task(n, seed, vocab=1000, length=25):
    """Reverse random ids of random lengths, padded with <PAD>: `(inp, dec_in, dec_out)`."""
    rng = np.random.default_rng(seed)
    inp, dec_in, dec_out = (np.zeros((n, length), "int32") for _ in range(3))
    for row, size in enumerate(rng.integers(4, length, n)):
        ids = rng.integers(4, vocab, size)
        inp[row, :size] = ids
        dec_in[row, :size + 1] = [1, *ids[::-1]]
        dec_out[row, :size + 1] = [*ids[::-1], 2]
    return inp, dec_in, dec_out


def tutorial_transformer(**options):
    import keras_transformer as kt

    options = {"rate": 0.1, **options}
    return kt.Transformer(num_layers=TUTORIAL["num_layers"], d_model=TUTORIAL["d_model"],
                          num_heads=TUTORIAL["num_heads"], dff=TUTORIAL["dff"],
                          input_vocab_size=TUTORIAL["vocab"],
                          target_vocab_size=TUTORIAL["vocab"],
                          maximum_position_encoding=TUTORIAL["seq"], **options)


def worker_mixed():
    import keras

    import keras_transformer as kt

    inp, dec_in, dec_out = copy_task(64 * 300, seed=0)
    padded = np.concatenate([inp[:3], np.zeros_like(inp[:1])])  # last row: only <PAD>
    results = {}
    for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
        keras.utils.set_random_seed(0)
        model = tutorial_transformer(dtype=policy)
        model.compile(keras.optimizers.Adam(kt.CustomSchedule(512, 100, 7e-4), beta_1=0.9,
                                            beta_2=0.98, epsilon=1e-9),
                      loss=kt.masked_loss)
        start = time.perf_counter()
        history = model.fit([inp, dec_in], dec_out, batch_size=64, epochs=6, verbose=0,
                            shuffle=False, steps_per_epoch=50)
        logits = model((padded, dec_in[:4]))
        array = keras.ops.convert_to_numpy(logits)
        results[policy] = {
            "losses": [round(loss, 4) for loss in history.history["loss"]],
            "seconds": round(time.perf_counter() - start, 1),
            "optimizer": type(model.optimizer).__name__,
            "logits_dtype": keras.backend.standardize_dtype(logits.dtype),
            "finite": bool(np.isfinite(array).all()),
            "padded_row_finite": bool(np.isfinite(array[-1]).all()),
        }
        keras.backend.clear_session()
    return results


def mixed(out):
    results = {backend: child("mixed", backend) for backend in ("jax", "torch")}
    save(out, "mixed", results)
    print("| backend | policy | optimizer | loss every 50 steps | logits | finite | "
          "padded row finite | s |\n|---|---|---|---|---|---|---|---|")
    for backend, rows in results.items():
        for policy, r in rows.items():
            print(f"| {backend} | {policy} | {r['optimizer']} | "
                  f"{' '.join(f'{x:.2f}' for x in r['losses'])} | {r['logits_dtype']} | "
                  f"{r['finite']} | {r['padded_row_finite']} | {r['seconds']} |")


# --- training speed -------------------------------------------------------------


def parse_settings(text):
    """`"float32:64,mixed_bfloat16:4096"` -> `(("float32", 64), ("mixed_bfloat16", 4096))`."""
    return tuple((policy, int(batch)) for policy, batch in
                 (item.split(":") for item in text.split(",")))


def worker_train_keras(impl, steps, settings):
    """ms/step of ours or keras-hub's layers through `fit`, for each setting."""
    import gc

    import keras
    from bench_backends import hub_model

    import keras_transformer as kt

    results = {}
    for policy, batch in settings:
        keras.config.set_dtype_policy(policy)
        keras.utils.set_random_seed(0)
        model = hub_model() if impl == "keras-hub" else tutorial_transformer()
        model.compile(keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                      loss=kt.masked_loss)
        rng = np.random.default_rng(0)
        inp, dec_in, dec_out = (rng.integers(4, TUTORIAL["vocab"], (batch * steps, 25))
                                .astype("int32") for _ in range(3))
        try:
            warm = slice(0, 3 * batch)
            model.fit([inp[warm], dec_in[warm]], dec_out[warm], batch_size=batch, verbose=0,
                      shuffle=False)
            keras.ops.convert_to_numpy(model.optimizer.iterations)
            start = time.perf_counter()
            model.fit([inp, dec_in], dec_out, batch_size=batch, verbose=0, shuffle=False)
            keras.ops.convert_to_numpy(model.optimizer.iterations)  # waits for the device
            results[f"{policy} {batch}"] = (time.perf_counter() - start) / steps * 1e3
        except Exception as error:  # noqa: BLE001 - out of memory: recorded, the rest runs
            results[f"{policy} {batch}"] = f"{type(error).__name__}: {str(error)[:200]}"
        del model
        keras.backend.clear_session()
        gc.collect()
    return results


def worker_train_torch(steps, compile, settings):
    """ms/step of PyTorch's `nn.Transformer` (`bench_peers.torch_seconds`) on the GPU;
    compiled, the largest bfloat16 batch only."""
    import torch
    from bench_peers import torch_seconds

    if compile:
        settings = [max((s for s in settings if s[0] == "mixed_bfloat16"),
                        key=lambda s: s[1])]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {}
    for policy, batch in settings:
        cfg = dict(TUTORIAL, batch=batch)
        dtype = torch.bfloat16 if policy == "mixed_bfloat16" else None
        times = torch_seconds(cfg, steps + 3, device=device, autocast_dtype=dtype,
                              compile=compile)
        results[f"{policy} {batch}"] = float(np.median(times)) * 1e3
    return results


def train(out, steps, settings):
    from flops import train_step_flops

    name, peak = device_peak()
    text = ",".join(f"{policy}:{batch}" for policy, batch in settings)
    rows = {}
    for backend, impl in (("jax", "ours"), ("jax", "keras-hub"), ("torch", "ours"),
                          ("torch", "keras-hub")):
        rows[f"{impl} ({backend})"] = child("train_keras", backend, impl, steps, text)
        print(f"{impl} on {backend}: {rows[f'{impl} ({backend})']}", flush=True)
    rows["torch nn.Transformer"] = child("train_torch", "torch", steps, 0, text)
    rows["torch nn.Transformer compiled"] = child("train_torch", "torch", steps, 1, text)
    save(out, "train", {"device": name, "peak": peak, "steps": steps, "rows": rows})
    print(f"\n{name}: bf16 dense peak {peak / 1e12:.0f} TFLOP/s; tutorial config, "
          "length 25, vocabulary 8000\n")
    print("| implementation | policy | batch | ms/step | target tokens/s | MFU | "
          "vs fastest peer |\n|---|---|---|---|---|---|---|")
    for policy, batch in settings:
        key = f"{policy} {batch}"
        times = {impl: r[key] for impl, r in rows.items() if isinstance(r.get(key), float)}
        peers = [t for impl, t in times.items() if not impl.startswith("ours")]
        flops = train_step_flops(dict(TUTORIAL, batch=batch))
        for impl, r in rows.items():
            if key not in r:
                continue
            if not isinstance(r[key], float):
                print(f"| {impl} | {policy} | {batch} | {r[key]} | | | |")
                continue
            ms = r[key]
            print(f"| {impl} | {policy} | {batch} | {ms:.1f} | {batch * 25 / ms * 1e3:,.0f} | "
                  f"{flops / (ms / 1e3) / peak:.3f} | "
                  f"{(min(peers) / ms if peers else float('nan')):.2f}x |")


# --- decoding speed -------------------------------------------------------------


def worker_decode(row, weights):
    """One row of `decode`: `ours`, `ours:K` (the loop checked every K steps),
    `keras-hub` (its loop runs every step), `keras-hub:stop` (it stops at `<END>`)."""
    import keras
    from bench_backends import save_weights, worker_decode

    if row == "save":
        save_weights(weights)
        return {"checksum": float(sum(np.abs(w).sum() for w in _weights(weights)))}
    impl, _, variant = row.partition(":")
    if impl == "ours" and variant:
        from keras_transformer import _backend

        _backend.steps_per_check = lambda x, max_length: int(variant)
    figures, tokens = worker_decode(impl, weights, sentences=4, repeats=3,
                                    hub_stops=variant == "stop")
    return {"figures": figures, "tokens": tokens, "backend": keras.backend.backend()}


def _weights(path):
    import h5py

    arrays = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.append(item[()])
                     if isinstance(item, h5py.Dataset) else None)
    return arrays


def decode(out, rows=DECODE_ROWS):
    """`rows`: `backend/row` pairs, the rows of `worker_decode`."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:  # 108 MB: not among what comes back
        weights = os.path.join(tmp, "decode.weights.h5")
        checksum = child("decode", "jax", "save", weights)["checksum"]
        for spec in rows:
            backend, row = spec.split("/")
            results[f"{row} ({backend})"] = child("decode", backend, row, weights)
            print(f"{row} on {backend}: {results[f'{row} ({backend})']['figures']}",
                  flush=True)
    save(out, "decode", {"device": device_peak()[0], "weights_checksum": checksum,
                         "rows": results})
    reference = results.get("ours (jax)")
    for name, result in results.items():
        if reference and name.startswith("ours") and name != "ours (jax)":
            same = {case: result["tokens"][case] == tokens
                    for case, tokens in reference["tokens"].items()}
            print(f"{name}: tokens equal to ours (jax)'s: {same}")
    print("| implementation | batch 1 greedy ms/token | batch 1 beam 4 ms/token | "
          "batch 64 greedy sentences/s | first calls s |\n|---|---|---|---|---|")
    for name, result in results.items():
        f = result["figures"]
        print(f"| {name} | {f['greedy-b1']:.2f} | {f['beam-b1']:.2f} | "
              f"{f['greedy-b64']:.0f} | {f['compile']:.1f} |")


# --- where a decoding call's time goes ------------------------------------------


def worker_calls(package):
    """Medians of 40 calls (ms) for the `keras_transformer` inside folder
    `package`, or keras-hub's model for `keras-hub` (JAX)."""
    import statistics

    import jax
    import keras
    from bench_decode_peers import seeded_model, sources

    def median_ms(call):
        for _ in range(3):
            call()
        times = []
        for _ in range(40):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    one, batch = sources(1), sources(64, seed=1)
    if package == "keras-hub":
        import bench_backends
        import keras_hub

        from keras_transformer import _backend

        figures = {}
        for length in (1, 24):
            bench_backends.NEW_TOKENS = length
            keras.utils.set_random_seed(0)
            hub = bench_backends.hub_model()
            hub((one, one))
            run = _backend.compile_decoding(
                hub, lambda ids: hub.generate(ids, keras_hub.samplers.GreedySampler()), True)
            figures[f"greedy b1, {length} tokens"] = median_ms(
                lambda: keras.ops.convert_to_numpy(run(one)))
        return figures
    sys.path.insert(0, package)
    import keras_transformer as kt

    model = seeded_model(kt)

    def generate(ids, **options):
        return lambda: keras.ops.convert_to_numpy(model.generate(ids, **options))

    figures = {f"greedy b1, {length} tokens": median_ms(generate(one, max_length=length))
               for length in (1, 24)}
    figures["beam 4 b1, 24 tokens"] = median_ms(
        generate(one, max_length=24, method="beam", beam_size=4, length_penalty=0.0))
    figures["greedy b64, 24 tokens"] = median_ms(generate(batch, max_length=24))
    loop = next(function for key, function in model._generate_fns._functions.items()
                if ("max_length", 24) in key and ("method", "greedy") in key)
    options = {name: keras.ops.convert_to_tensor(0 if value is None else value,
                                                 "int32" if name == "seed" else "float32")
               for name, value in kt.generation.GenerateConfig().options(tensor=True).items()}
    ids = keras.ops.convert_to_tensor(one)
    figures["greedy b1, 24 tokens: the compiled loop alone"] = median_ms(
        lambda: jax.block_until_ready(loop(ids, options)))
    return {"package": os.path.dirname(kt.__file__), **figures}


def calls(out, packages, rounds=2):
    """`generate`'s whole call against its compiled loop alone, for each folder
    of `packages` holding a `keras_transformer` (`.` for the tree) and
    `keras-hub`, in turns over `rounds` rounds, each in its own process."""
    results = {package: [] for package in packages}
    for _ in range(rounds):
        for package in packages:
            results[package].append(child("calls", "jax", os.path.abspath(package)
                                          if package != "keras-hub" else package))
    save(out, "calls", {"device": device_peak()[0], "rounds": results})
    cases = [key for key in results[packages[0]][0] if key != "package"]
    print("| case | " + " | ".join(packages) + " |\n|---|" + "---|" * len(packages))
    for case in cases:
        print(f"| {case} ms | " + " | ".join(
            " / ".join(f"{r[case]:.2f}" for r in results[package] if case in r) or "-"
            for package in packages) + " |")


# --- the mask rule and the attention kernels ---------------------------------------


def worker_masks():
    import keras

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import mask_checks

    return {"backend": keras.backend.backend(),
            "differences": mask_checks.mask_differences(),
            "half_precision_finite": mask_checks.half_precision_finite()}


def masks(out):
    results = {"jax": child("masks", "jax", env={"JAX_DEFAULT_MATMUL_PRECISION": "highest"}),
               "torch": child("masks", "torch")}
    save(out, "masks", {"device": device_peak()[0], "results": results})
    for backend, r in results.items():
        worst = max(r["differences"].items(), key=lambda item: item[1])
        print(f"mask checks on {backend}: {len(r['differences'])} checks, largest "
              f"difference {worst[1]:.1e} ({worst[0]}); half precision finite: "
              f"{r['half_precision_finite']}")


ATTENTION_VARIANTS = ("explicit", "xla", "flash")


def use_attention(variant):
    """Routes the layers' `keras.ops.dot_product_attention` call through `variant`:
    the explicit softmax (`kt.scaled_dot_product_attention`), the op on XLA
    (`flash_attention=False`) or the op with `flash_attention=True`."""
    import functools

    import keras

    import keras_transformer as kt

    original = keras.ops.dot_product_attention
    if variant == "explicit":

        def attention(query, key, value, mask=None, scale=None, **_):
            heads_first = functools.partial(keras.ops.transpose, axes=(0, 2, 1, 3))
            output, _ = kt.scaled_dot_product_attention(
                heads_first(query), heads_first(key), heads_first(value), mask)
            return heads_first(output)  # (B, T, H, depth)
    else:
        attention = functools.partial(original, flash_attention=variant == "flash")
    keras.ops.dot_product_attention = attention


def cudnn_probe():
    """Whether JAX's cuDNN attention runs a bfloat16 `(B, T, H, depth)` call with a
    padding mask here, spelled out to `(B, 1, T, S)` as the layer passes it and
    as `(B, 1, 1, S)`: `"ok"` or the error, for each."""
    import jax
    import jax.numpy as jnp

    q = jnp.ones((2, 512, 8, 64), jnp.bfloat16)
    mask = jnp.ones((2, 1, 1, 512), bool).at[0, ..., 300:].set(False)
    found = {}
    for name, m in (("full", jnp.broadcast_to(mask, (2, 1, 512, 512))), ("broadcast", mask)):
        try:
            jax.block_until_ready(jax.nn.dot_product_attention(q, q, q, mask=m,
                                                               implementation="cudnn"))
            found[name] = "ok"
        except Exception as error:  # noqa: BLE001 - the reason is the result
            found[name] = f"{type(error).__name__}: {str(error)[:200]}"
    return found


def worker_attention(variant, policy, batch, steps, length=512):
    import jax
    import keras

    import keras_transformer as kt

    use_attention(variant)
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    model = kt.Transformer(num_layers=TUTORIAL["num_layers"], d_model=TUTORIAL["d_model"],
                           num_heads=TUTORIAL["num_heads"], dff=TUTORIAL["dff"],
                           input_vocab_size=TUTORIAL["vocab"],
                           target_vocab_size=TUTORIAL["vocab"],
                           maximum_position_encoding=length, rate=0.1)
    model.compile(keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                  loss=kt.masked_loss)
    rng = np.random.default_rng(0)
    rows = batch * (steps + 3)
    inp, dec_in, dec_out = (rng.integers(4, TUTORIAL["vocab"], (rows, length)).astype("int32")
                            for _ in range(3))
    lengths = rng.integers(length // 2, length + 1, rows)
    padding = np.arange(length)[None] >= lengths[:, None]
    for ids in (inp, dec_in, dec_out):
        ids[padding] = 0
    result = {"cudnn_probe": cudnn_probe()}
    try:
        warm = slice(0, 3 * batch)
        first = model.fit([inp[warm], dec_in[warm]], dec_out[warm], batch_size=batch,
                          verbose=0, shuffle=False).history["loss"][0]
        keras.ops.convert_to_numpy(model.optimizer.iterations)
        start = time.perf_counter()
        rest = slice(3 * batch, None)
        last = model.fit([inp[rest], dec_in[rest]], dec_out[rest], batch_size=batch,
                         verbose=0, shuffle=False).history["loss"][0]
        keras.ops.convert_to_numpy(model.optimizer.iterations)  # waits for the device
        result.update(ms=(time.perf_counter() - start) / steps * 1e3, first_loss=first,
                      loss=last)
    except Exception as error:  # noqa: BLE001 - out of memory or refused: recorded
        result["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    stats = jax.local_devices()[0].memory_stats() or {}
    result["peak_gib"] = stats.get("peak_bytes_in_use", float("nan")) / 2**30
    return result


def attention(out, steps, batch=64, policy="mixed_bfloat16", length=512,
              variants=ATTENTION_VARIANTS):
    rows = {}
    if policy == "float32":  # cuDNN's flash attention takes 16-bit floats only
        variants = [variant for variant in variants if variant != "flash"]
    for variant in variants:
        rows[f"{variant} {policy}"] = child("attention", "jax", variant, policy, batch, steps,
                                            length)
        print(f"{variant} {policy}: {rows[f'{variant} {policy}']}", flush=True)
    save(out, f"attention-{policy}-{batch}-{length}",
         {"device": device_peak()[0], "batch": batch, "steps": steps, "length": length,
          "rows": rows})
    print(f"\n{device_peak()[0]}, JAX: the tutorial's model, batch {batch}, {length}-token "
          f"sources and targets ({length // 2}-{length} real tokens)\n")
    print("| attention | policy | ms/step | peak GiB | loss after warm-up |\n|---|---|---|---|---|")
    for name, r in rows.items():
        variant, policy = name.split()
        if "error" in r:
            print(f"| {variant} | {policy} | {r['error']} | {r['peak_gib']:.1f} | |")
        else:
            print(f"| {variant} | {policy} | {r['ms']:.1f} | {r['peak_gib']:.1f} | "
                  f"{r['loss']:.3f} |")


# --- where a training step's time goes -------------------------------------------------

PROFILE_VARIANTS = ("base", "rbg", "no-dropout", "cublaslt")
PROFILE_CHOICES = (*PROFILE_VARIANTS, "no-triton-gemm", "steps4")
TRACED_STEPS = 4


def trace_events(path):
    """The events of a perfetto trace JAX wrote (`.json.gz`)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


def gpu_kernels(trace_dir, steps):
    """The device's kernels in the perfetto trace JAX wrote under `trace_dir`: for
    each of the device's threads (streams), ms per step in all and its 40 costliest
    kernel names with ms per step and calls per step; and the trace's process names."""
    events = trace_events(glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"),
                                    recursive=True)[0])
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    device = {pid for pid, name in processes.items() if "GPU" in name or "gpu" in name}
    lines = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0]))
    for e in events:
        if e.get("ph") == "X" and e["pid"] in device:
            line = f"{processes[e['pid']]} / {threads.get((e['pid'], e['tid']), e['tid'])}"
            entry = lines[line][e["name"]]
            entry[0] += e.get("dur", 0.0) / 1e3 / steps
            entry[1] += 1 / steps
    summary = {line: {"ms_per_step": round(sum(ms for ms, _ in names.values()), 3),
                      "kernels": [(name, round(ms, 3), round(calls, 1)) for name, (ms, calls)
                                  in sorted(names.items(), key=lambda item: -item[1][0])[:40]]}
               for line, names in lines.items()}
    return {"processes": sorted(processes.values()), "lines": summary}


def rbg_dropout_call(self, inputs, training=False):
    """`Dropout.call` (JAX) drawing its mask with `jax.random`'s `"rbg"`
    implementation (XLA's RngBitGenerator) instead of ThreeFry: `profile`'s
    `rbg` variant."""
    import jax
    import jax.numpy as jnp

    if not training or self.rate == 0:
        return inputs
    seed = self.seed_generator.next()  # uint32 (2,); an rbg key has four words
    key = jax.random.wrap_key_data(jnp.concatenate([seed, seed ^ jnp.uint32(0x9E3779B9)]),
                                   impl="rbg")
    keep = jax.random.bernoulli(key, 1.0 - self.rate, inputs.shape)
    return jnp.where(keep, inputs / (1.0 - self.rate), jnp.zeros_like(inputs))


def worker_profile(variant, batch, steps, trace_dir):
    """ms/step of ours through `fit` (bfloat16, the tutorial's model) under `variant`,
    the share of zeros one `Dropout` draws at rate 0.1, and, given `trace_dir`, the
    device's kernels over `TRACED_STEPS` steps. Variants: `base`; `rbg`, the layers'
    dropout drawn by `rbg_dropout_call`; `no-dropout`, rate 0; `steps4`,
    `steps_per_execution=4`; the XLA flags of `profile`."""
    import jax
    import keras

    import keras_transformer as kt
    from keras_transformer.layers._stack import Dropout

    if variant == "rbg":
        Dropout.call = rbg_dropout_call
    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    dropped = keras.ops.convert_to_numpy(Dropout(0.1)(np.ones((4096, 512)), training=True))
    model = tutorial_transformer(**({"rate": 0.0} if variant == "no-dropout" else {}))
    model.compile(keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                  loss=kt.masked_loss, steps_per_execution=4 if variant == "steps4" else 1)
    rng = np.random.default_rng(0)
    inp, dec_in, dec_out = (rng.integers(4, TUTORIAL["vocab"], (batch * steps, 25))
                            .astype("int32") for _ in range(3))

    def fit(rows):
        model.fit([inp[rows], dec_in[rows]], dec_out[rows], batch_size=batch, verbose=0,
                  shuffle=False)
        keras.ops.convert_to_numpy(model.optimizer.iterations)  # waits for the device

    fit(slice(0, 4 * batch))
    start = time.perf_counter()
    fit(slice(None))
    result = {"ms": (time.perf_counter() - start) / steps * 1e3,
              "dropped_share": float((dropped == 0).mean()),
              "kept_values": sorted({round(float(v), 4) for v in np.unique(dropped)})}
    if trace_dir != "-":
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            fit(slice(0, TRACED_STEPS * batch))
        result.update(gpu_kernels(trace_dir, TRACED_STEPS))
    return result


def profile(out, steps, batch, variants=PROFILE_VARIANTS):
    """`worker_profile` for each variant, each in its own process; the first variant
    traced (`OUT/perfetto_trace.json.gz`), with XLA's optimised training step
    dumped (`OUT/hlo.tar.gz`)."""
    from flops import train_step_flops

    name, peak = device_peak()
    flops = train_step_flops(dict(TUTORIAL, batch=batch))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, variant in enumerate(variants):
            flags = os.environ.get("XLA_FLAGS", "")
            flags += {"no-triton-gemm": " --xla_gpu_enable_triton_gemm=false",
                      "cublaslt": " --xla_gpu_enable_cublaslt=true"}.get(variant, "")
            if index == 0:
                flags += f" --xla_dump_to={tmp}/hlo --xla_dump_hlo_as_text"
            trace = os.path.join(tmp, "trace") if index == 0 else "-"
            try:
                rows[variant] = child("profile", "jax", variant, batch, steps, trace,
                                      env={"XLA_FLAGS": flags.strip()})
            except RuntimeError as error:  # recorded, the other variants run
                rows[variant] = {"error": str(error)}
                continue
            print(f"{variant}: {rows[variant]['ms']:.1f} ms/step, MFU "
                  f"{flops / (rows[variant]['ms'] / 1e3) / peak:.3f}; Dropout(0.1) zeroed "
                  f"{rows[variant]['dropped_share']:.4f}, values "
                  f"{rows[variant]['kept_values']}", flush=True)
            if index == 0:
                shutil.copy(glob.glob(os.path.join(trace, "**", "perfetto_trace.json.gz"),
                                      recursive=True)[0], out)
                programs = [os.path.relpath(path, tmp) for path in glob.glob(
                    os.path.join(tmp, "hlo", "*train_step*after_optimizations*.txt"))]
                subprocess.run(["tar", "-czf", os.path.join(out, "hlo.tar.gz"), "-C", tmp,
                                *programs], check=True)
    save(out, f"profile-{batch}", {"device": name, "peak": peak, "batch": batch,
                                   "steps": steps, "rows": rows})
    print(f"\n{name}: the tutorial's model, mixed_bfloat16, batch {batch}\n")
    print("| variant | ms/step | MFU |\n|---|---|---|")
    for variant, r in rows.items():
        if "error" in r:
            print(f"| {variant} | {r['error']} | |")
        else:
            print(f"| {variant} | {r['ms']:.1f} | {flops / (r['ms'] / 1e3) / peak:.3f} |")
    print(f"\nprocesses in the trace: {rows[variants[0]].get('processes')}")
    for line, summary in rows[variants[0]].get("lines", {}).items():
        print(f"\n{line}: {summary['ms_per_step']:.1f} ms per step")
        for kernel, ms, calls in summary["kernels"][:25]:
            print(f"  {ms:7.3f} ms  x{calls:<5} {kernel[:110]}")


# The model's code a kernel's `op_name` names, by a word in it; `transpose(jvp(...))` is
# JAX's backward pass of everything, so transposes are matched on the name's last part.
KERNEL_GROUPS = (("dropout", ("dropout", "bernoulli")), ("layer norm", ("layernorm", "layer_norm")),
                 ("loss and logits", ("masked_loss", "final_layer")), ("optimizer", ("adam",)),
                 ("embedding", ("embedding",)))


def kernels(out):
    """`profile`'s trace read here: each kernel of the training step attributed to
    the model's code by the `op_name` that XLA's optimised program gives it."""
    events = [e for e in trace_events(os.path.join(out, "perfetto_trace.json.gz"))
              if e.get("ph") == "X"
              and e.get("args", {}).get("hlo_module", "").startswith("jit_train_step")]
    with tarfile.open(os.path.join(out, "hlo.tar.gz")) as archive:
        member = next(m for m in archive.getmembers()
                      if m.name.endswith("after_optimizations.txt"))
        program = archive.extractfile(member).read().decode()
    op_names = {match.group(1).replace(".", "_").replace("-", "_"): match.group(2)
                for match in re.finditer(r'^\s*(?:ROOT )?%([\w.\-]+) = [^\n]*?op_name="([^"]*)"',
                                         program, re.M)}
    steps = TRACED_STEPS
    groups, names, outside_kernels = collections.Counter(), collections.Counter(), 0
    for event in events:
        ms = event["dur"] / 1e3 / steps
        if event["name"].startswith(("nvjet", "gemm_fusion")) or "gemm" in event["name"]:
            groups["matrix products"] += ms
            continue
        op_name = op_names.get(event["name"], "?")
        group = next((g for g, keys in KERNEL_GROUPS if any(k in op_name.lower() for k in keys)),
                     "transposes" if op_name.endswith("/transpose") else "other")
        groups[group] += ms
        outside_kernels += 1 / steps
        names[re.sub(r"(encoder|decoder)_layer\d", r"\1_layerN", op_name)] += ms
    outside = sum(groups.values()) - groups["matrix products"]
    print(f"{len(events) / steps:.0f} kernels a step, {sum(groups.values()):.1f} ms; "
          f"outside the matrix products {outside_kernels:.0f}, {outside:.1f} ms\n")
    print("| group (by op_name) | ms per step |\n|---|---|")
    for group, ms in groups.most_common():
        print(f"| {group} | {ms:.2f} |")
    print("\nlargest outside the products:")
    for name, ms in names.most_common(15):
        print(f"  {ms:6.3f} ms  {name[:120]}")


# --- ChatbotData ------------------------------------------------------------------


def prepare(prepared):
    """The TensorFlow reference run and the tokenized ChatbotData split (needs TensorFlow)."""
    from bench_chatbot import DEFAULT_DATA, SAMPLE_QUESTIONS, chat_decoding, load_split

    from keras_transformer.data.pipeline import encode_pairs, padded_sources
    from keras_transformer.recipes.config import TrainConfig
    from keras_transformer.recipes.seq2seq import SCORED_VALID_PAIRS, split_pairs
    from keras_transformer.text.tokenizers import WordPieceTokenizer

    runs = os.path.join(prepared, "runs")
    os.makedirs(runs, exist_ok=True)
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    subprocess.run([sys.executable, CHILD, runs], env=env, check=True)

    config = TrainConfig()
    train_pairs, test_pairs = load_split(DEFAULT_DATA)
    fit_pairs, valid_pairs = split_pairs(train_pairs, config.valid_fraction, config.seed)
    valid_pairs = valid_pairs[:SCORED_VALID_PAIRS]
    source, target = (WordPieceTokenizer.from_texts(side, config.vocab_size, verbose=0)
                      for side in zip(*fit_pairs))
    length = config.max_length
    inp, dec_in, dec_out = encode_pairs([s for s, _ in fit_pairs], [t for _, t in fit_pairs],
                                        source, target, length)
    test_questions = [q for q, _ in test_pairs] + SAMPLE_QUESTIONS
    arrays = {
        "inp": inp.to_tensor(source.pad_id, shape=[None, length]),
        "dec_in": dec_in.to_tensor(target.pad_id, shape=[None, length]),
        "dec_out": dec_out.to_tensor(target.pad_id, shape=[None, length]),
        "valid": padded_sources([s for s, _ in valid_pairs], source, length),
        "test": padded_sources(test_questions, source, length),
    }
    np.savez_compressed(os.path.join(prepared, "chatbot.npz"),
                        **{key: value.numpy().astype("int16") for key, value in arrays.items()})
    valid_references = [t.decode() for t in
                        target.canonicalize([t for _, t in valid_pairs]).numpy()]
    save(prepared, "chatbot", {
        "config": config.to_dict(),
        "source_vocabulary": source.vocabulary, "target_vocabulary": target.vocabulary,
        "special_ids": [target.pad_id, target.start_id, target.end_id, source.unk_id],
        "valid_references": valid_references,
        "test_questions": test_questions, "test_answers": [a for _, a in test_pairs],
        "chat_decoding": chat_decoding(),
    })
    print(f"{prepared}: {len(fit_pairs)} training, {len(valid_pairs)} validation, "
          f"{len(test_pairs)} test pairs")


def detokenize(rows, vocabulary, ids):
    """`WordPieceTokenizer.detokenize` in Python: up to `<END>`, pieces glued."""
    pad, start, end = ids
    texts = []
    for row in rows:
        tokens = []
        for token in row:
            if token == end:
                break
            if token not in (pad, start):
                tokens.append(vocabulary[token])
        text = re.sub(r"(^| )##", "", " ".join(tokens))
        texts.append(re.sub(r" ([.,!?;:)\]}])", r"\1", text))
    return texts


def collapsed(answers, references):
    """`recipe.collapse_warning`'s test: most answers empty, or nearly all alike."""
    distinct = len(set(answers)) / len(answers)
    return (sum(not a.strip() for a in answers) > len(answers) / 2
            or distinct < 0.05 and 2 * distinct <= len(set(references)) / len(references))


def decode_all(model, sources, batch_size=128, **options):
    """`generate` over `sources` in batches of one shape (the last filled with copies)."""
    import keras

    outputs = []
    for start in range(0, len(sources), batch_size):
        batch = sources[start : start + batch_size]
        filled = np.concatenate([batch, np.repeat(batch[:1], batch_size - len(batch), 0)])
        tokens = keras.ops.convert_to_numpy(model.generate(filled, **options))
        outputs.append(tokens[: len(batch)])
    width = max(out.shape[1] for out in outputs)
    return np.concatenate([np.pad(out, [(0, 0), (0, width - out.shape[1])])
                           for out in outputs])


def worker_chatbot(prepared, seconds, size):
    import keras
    import sacrebleu
    from bench_chatbot import score

    from keras_transformer import Transformer
    from keras_transformer.training import CustomSchedule, MaskedAccuracy, MaskedLoss

    data = dict(np.load(os.path.join(prepared, "chatbot.npz")))
    data = {key: value.astype("int32") for key, value in data.items()}
    with open(os.path.join(prepared, "chatbot.json"), encoding="utf-8") as f:
        meta = json.load(f)
    config = dict(meta["config"], **({"d_model": 512, "dff": 2048} if size == "tutorial"
                                     else {}))
    pad, start_id, end_id, unk = meta["special_ids"]
    vocabulary = meta["target_vocabulary"]
    keras.utils.set_random_seed(config["seed"])
    model = Transformer(
        num_layers=config["num_layers"], d_model=config["d_model"],
        num_heads=config["num_heads"], dff=config["dff"],
        input_vocab_size=len(meta["source_vocabulary"]), target_vocab_size=len(vocabulary),
        maximum_position_encoding=config["max_length"], end_token_idx=end_id,
        rate=config["rate"], norm_first=config["norm_first"],
        activation=config["activation"], pad_token_idx=pad, start_token_idx=start_id)
    peak = (config["d_model"] * 4000) ** -0.5  # recipe.default_learning_rate
    model.compile(keras.optimizers.Adam(CustomSchedule(config["d_model"],
                                                       config["warmup_steps"], peak),
                                        beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                  loss=MaskedLoss(label_smoothing=config["label_smoothing"],
                                  pad_token_idx=pad),
                  metrics=[MaskedAccuracy(pad_token_idx=pad)])
    batch = config["batch_size"]
    rows = len(data["inp"]) // batch * batch  # static shapes: the last smaller batch dropped
    warmup_epochs = math.ceil(config["warmup_steps"] / (rows // batch))
    history, best, best_weights, waited = [], -1.0, None, 0
    begin = time.perf_counter()
    for epoch in range(config["epochs"]):
        rng = np.random.default_rng([config["seed"], epoch])
        order = rng.permutation(len(data["inp"]))[:rows]
        inp = data["inp"][order]
        drop = (rng.random(inp.shape) < config["token_dropout"]) & (inp != pad)
        inp = np.where(drop, unk, inp)
        fit = model.fit([inp, data["dec_in"][order]], data["dec_out"][order],
                        batch_size=batch, epochs=1, shuffle=False, verbose=0)
        answers = detokenize(decode_all(model, data["valid"]), vocabulary,
                             (pad, start_id, end_id))
        chrf = sacrebleu.corpus_chrf(answers, [meta["valid_references"]]).score
        if collapsed(answers, meta["valid_references"]):
            chrf = 0.0
        history.append({"epoch": epoch + 1, "loss": round(fit.history["loss"][0], 4),
                        "val_chrf": round(chrf, 2),
                        "seconds": round(time.perf_counter() - begin, 1)})
        print(json.dumps(history[-1]), file=sys.stderr, flush=True)
        if chrf > best:
            best, best_weights, waited = chrf, model.get_weights(), 0
        elif epoch + 1 > warmup_epochs:
            waited += 1
        if waited >= config["patience"] or time.perf_counter() - begin > seconds:
            break
    trained = time.perf_counter() - begin
    model.set_weights(best_weights)
    test_ids = decode_all(model, data["test"], **meta["chat_decoding"])
    answers = detokenize(test_ids, vocabulary, (pad, start_id, end_id))
    n_test = len(meta["test_answers"])
    return {"size": size, "d_model": config["d_model"], "dff": config["dff"],
            "epochs": len(history), "train_seconds": round(trained, 1),
            "best_val_chrf": round(best, 2), "history": history,
            "test": score(answers[:n_test], meta["test_answers"]),
            "samples": list(zip(meta["test_questions"][:8] + meta["test_questions"][n_test:],
                                answers[:8] + answers[n_test:]))}


def chatbot(prepared, out, seconds):
    results = [child("chatbot", "jax", prepared, seconds, size)
               for size in ("default", "tutorial")]
    save(out, "chatbot", {"device": device_peak()[0], "results": results})
    print("| model | epochs | training s | best validation chrF | test chrF | BLEU | distinct "
          "| exact match | empty |\n|---|---|---|---|---|---|---|---|---|")
    for r in results:
        t = r["test"]
        print(f"| {r['size']} (d_model {r['d_model']}, dff {r['dff']}) | {r['epochs']} | "
              f"{r['train_seconds']} | {r['best_val_chrf']} | {t['chrf']} | {t['bleu']} | "
              f"{t['distinct']} | {t['exact_match']} | {t['empty']} |")
    for r in results:
        print(f"\n{r['size']}:")
        for question, answer in r["samples"]:
            print(f"  {question} -> {answer}")


# --- here, after the GPU ------------------------------------------------------------


def compare(out):
    """The GPU's runs against the CPU's: JAX's default precision, decoding tokens."""
    runs = os.path.join(out, "runs-default")
    reference = np.load(os.path.join(runs, "tensorflow.npz"))
    jax = np.load(os.path.join(runs, "jax.npz"))
    difference = np.abs(jax["logits"] - reference["logits"]).max()
    print(f"JAX, default matmul precision on the GPU: largest logit difference from "
          f"TensorFlow on the CPU {difference:.2e}; tokens equal: " + ", ".join(
              f"{key} {np.array_equal(jax[key], reference[key])}"
              for key in ("greedy", "beam", "beam_top2", "mmi")))
    with open(os.path.join(out, "decode.json"), encoding="utf-8") as f:
        gpu = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "cpu.weights.h5")
        checksum = child("decode", "jax", "save", weights)["checksum"]
        print(f"weights: GPU checksum {gpu['weights_checksum']:.6f}, CPU {checksum:.6f}")
        cpu = {backend: child("decode", backend, "ours", weights)["tokens"]
               for backend in ("tensorflow", "jax")}
    for backend, tokens_of in cpu.items():
        for impl in ("ours (jax)", "ours (torch)"):
            shares = {case: np.mean([a == b for a, b in zip(gpu["rows"][impl]["tokens"][case],
                                                            tokens)])
                      for case, tokens in tokens_of.items()}
            print(f"{impl} on the GPU against {backend} on the CPU, share of equal rows: "
                  + ", ".join(f"{case} {share:.3f}" for case, share in shares.items()))


WORKERS = {
    "mixed": lambda args: worker_mixed(),
    "train_keras": lambda args: worker_train_keras(args[0], int(args[1]),
                                                   parse_settings(args[2])),
    "train_torch": lambda args: worker_train_torch(int(args[0]), bool(int(args[1])),
                                                   parse_settings(args[2])),
    "decode": lambda args: worker_decode(args[0], args[1]),
    "calls": lambda args: worker_calls(args[0]),
    "masks": lambda args: worker_masks(),
    "attention": lambda args: worker_attention(args[0], args[1], int(args[2]), int(args[3]),
                                               int(args[4])),
    "chatbot": lambda args: worker_chatbot(args[0], float(args[1]), args[2]),
    "profile": lambda args: worker_profile(args[0], int(args[1]), int(args[2]), args[3]),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        print(json.dumps(WORKERS[argv[1]](argv[2:])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("prepare", "correctness", "mixed", "train", "decode",
                                         "calls", "masks", "attention", "chatbot", "profile",
                                         "kernels", "compare"))
    parser.add_argument("paths", nargs="+", help="DIR and/or OUT, as the part needs")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--settings", default=TRAIN_SETTINGS,
                        help="training's dtype policies and batch sizes, "
                             "'float32:64,mixed_bfloat16:4096,...'")
    parser.add_argument("--seconds", type=float, default=600, help="chatbot training time")
    parser.add_argument("--rows", default=",".join(DECODE_ROWS),
                        help="decode's rows, 'backend/row,...': a row is ours, ours:K "
                             "(checked every K steps), keras-hub or keras-hub:stop")
    parser.add_argument("--packages", default=".,keras-hub",
                        help="calls' folders holding a keras_transformer, and keras-hub")
    parser.add_argument("--policy", default="mixed_bfloat16", help="attention's dtype policy")
    parser.add_argument("--variants", default=None,
                        help="attention's or profile's variants, 'a,b,...'")
    parser.add_argument("--batch", type=int, default=4096, help="profile's batch size")
    parser.add_argument("--attention-shape", default="64,512",
                        help="attention's batch size and sequence length")
    args = parser.parse_args(argv)
    paths = args.paths
    if args.part not in ("compare", "kernels"):
        os.makedirs(paths[-1], exist_ok=True)
    if args.part == "prepare":
        prepare(paths[0])
    elif args.part == "correctness":
        correctness(*paths)
    elif args.part == "mixed":
        mixed(paths[0])
    elif args.part == "train":
        settings = (parse_settings(args.settings) if isinstance(args.settings, str)
                    else args.settings)
        train(paths[0], args.steps, settings)
    elif args.part == "decode":
        decode(paths[0], args.rows.split(","))
    elif args.part == "calls":
        calls(paths[0], args.packages.split(","))
    elif args.part == "masks":
        masks(paths[0])
    elif args.part == "attention":
        batch, length = (int(n) for n in args.attention_shape.split(","))
        attention(paths[0], args.steps, batch, args.policy, length,
                  args.variants.split(",") if args.variants else ATTENTION_VARIANTS)
    elif args.part == "chatbot":
        chatbot(*paths, args.seconds)
    elif args.part == "profile":
        variants = args.variants.split(",") if args.variants else PROFILE_VARIANTS
        unknown = sorted(set(variants) - set(PROFILE_CHOICES))
        if unknown:
            parser.error(f"profile's variants are {', '.join(PROFILE_CHOICES)}; got {unknown}")
        profile(paths[0], args.steps, args.batch, variants)
    elif args.part == "kernels":
        kernels(paths[0])
    else:
        compare(paths[0])


if __name__ == "__main__":
    main()
