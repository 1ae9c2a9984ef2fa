"""Does our model train as fast as keras-hub's layers and PyTorch's `nn.Transformer`?

    pip install ".[bench]"
    python benchmarks/bench_peers.py [--steps 12] [--configs tutorial,long] [--append]

Implementations, all the same architecture (post-LN encoder-decoder, ReLU,
dropout 0.1, sine position encoding, untied embeddings and output projection)
trained with Adam on the same random token ids:

- `ours-fit`: `keras_transformer.Transformer`, `model.fit` with the default
  compile (`jit_compile="auto"`, no XLA on TensorFlow);
- `ours-xla`: the same with `jit_compile=True`;
- `keras-hub` and `keras-hub-xla`: keras-hub's `TransformerEncoder` /
  `TransformerDecoder` / `SinePositionEncoding` layers in a functional model;
- `torch`: PyTorch `nn.Transformer` with embeddings and output projection, a
  plain training loop (CPU build, all cores).

Configs: the tutorial's (2 layers, d_model 512, 8 heads, dff 2048, vocabulary
8000, source and target length 25, batch 64) and a long one (length 256,
batch 8). Each implementation runs in its own process (a clean peak RSS); the
step time is the median of the steps after 3 warm-up steps. MFU is the
model's matmul FLOP rate (exact count, `flops.forward_flops`) over the
fp32 matmul peak measured in this run, before and after (the higher).

Run time: about 10 minutes on 2 cores with the defaults (10 processes, the
long config's steps the slowest).
"""

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
CONFIGS = {
    "tutorial": {"num_layers": 2, "d_model": 512, "num_heads": 8, "dff": 2048, "vocab": 8000,
                 "seq": 25, "batch": 64},
    "long": {"num_layers": 2, "d_model": 512, "num_heads": 8, "dff": 2048, "vocab": 8000,
             "seq": 256, "batch": 8},
}
IMPLEMENTATIONS = ("ours-fit", "ours-xla", "keras-hub", "keras-hub-xla", "torch")
WARMUP = 3


def random_ids(cfg, steps, seed=0):
    rng = np.random.default_rng(seed)
    shape = (cfg["batch"] * steps, cfg["seq"])
    return [rng.integers(3, cfg["vocab"], shape).astype("int32") for _ in range(3)]


def keras_seconds(name, cfg, steps):
    import keras
    import tensorflow as tf

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    d, heads, dff, vocab = cfg["d_model"], cfg["num_heads"], cfg["dff"], cfg["vocab"]
    if name.startswith("ours"):
        model = kt.Transformer(num_layers=cfg["num_layers"], d_model=d, num_heads=heads,
                               dff=dff, input_vocab_size=vocab, target_vocab_size=vocab,
                               maximum_position_encoding=cfg["seq"], rate=0.1)
    else:
        import keras_hub

        def embed(ids):
            x = keras.layers.Embedding(vocab, d, mask_zero=True)(ids)
            return keras.layers.Add()([x, keras_hub.layers.SinePositionEncoding()(x)])

        source = keras.Input((None,), dtype="int32")
        target = keras.Input((None,), dtype="int32")
        x = embed(source)
        for _ in range(cfg["num_layers"]):
            x = keras_hub.layers.TransformerEncoder(dff, heads, dropout=0.1)(x)
        y = embed(target)
        for _ in range(cfg["num_layers"]):
            y = keras_hub.layers.TransformerDecoder(dff, heads, dropout=0.1)(y, x)
        model = keras.Model([source, target], keras.layers.Dense(vocab)(y))
    model.compile(keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                  loss=kt.masked_loss, jit_compile=True if name.endswith("xla") else "auto")
    inp, dec_in, dec_out = random_ids(cfg, steps)
    data = tf.data.Dataset.from_tensor_slices(((inp, dec_in), dec_out)).batch(cfg["batch"])
    times = []
    timer = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: times.append(time.perf_counter()),
        on_train_batch_end=lambda batch, logs: times.append(time.perf_counter() - times.pop()),
    )
    model.fit(data, verbose=0, callbacks=[timer])
    return times[WARMUP:]


def torch_seconds(cfg, steps, device="cpu", autocast_dtype=None, compile=False):
    """Seconds of each training step of PyTorch's `nn.Transformer` after the warm-up.

    `device` "cuda" runs on the GPU (each step synchronised before it is timed),
    `autocast_dtype` (say `torch.bfloat16`) trains under autocast, `compile` runs
    the model through `torch.compile`.
    """
    import contextlib
    import math

    import torch
    from torch import nn

    torch.manual_seed(0)
    d, seq = cfg["d_model"], cfg["seq"]

    class TorchTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.source_embedding = nn.Embedding(cfg["vocab"], d)
            self.target_embedding = nn.Embedding(cfg["vocab"], d)
            position = torch.arange(seq)[:, None]
            rate = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
            encoding = torch.zeros(seq, d)
            encoding[:, 0::2], encoding[:, 1::2] = (torch.sin(position * rate),
                                                    torch.cos(position * rate))
            self.register_buffer("encoding", encoding)
            self.dropout = nn.Dropout(0.1)
            self.transformer = nn.Transformer(d, cfg["num_heads"], cfg["num_layers"],
                                              cfg["num_layers"], cfg["dff"], 0.1,
                                              batch_first=True)
            self.output = nn.Linear(d, cfg["vocab"])

        def forward(self, source, target):
            scale = math.sqrt(d)
            x = self.dropout(self.source_embedding(source) * scale + self.encoding)
            y = self.dropout(self.target_embedding(target) * scale + self.encoding)
            causal = nn.Transformer.generate_square_subsequent_mask(seq, device=source.device)
            return self.output(self.transformer(
                x, y, tgt_mask=causal, src_key_padding_mask=source == 0,
                tgt_key_padding_mask=target == 0, memory_key_padding_mask=source == 0,
            ))

    model = TorchTransformer().to(device).train()
    forward = torch.compile(model) if compile else model
    optimizer = torch.optim.Adam(model.parameters(), 1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    inp, dec_in, dec_out = (torch.from_numpy(a).long().to(device)
                            for a in random_ids(cfg, steps))
    autocast = (torch.autocast(device, dtype=autocast_dtype) if autocast_dtype
                else contextlib.nullcontext())
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for step in range(steps):
        batch = slice(step * cfg["batch"], (step + 1) * cfg["batch"])
        sync()
        start = time.perf_counter()
        optimizer.zero_grad()
        with autocast:
            logits = forward(inp[batch], dec_in[batch])
            loss = loss_fn(logits.reshape(-1, cfg["vocab"]).float(),
                           dec_out[batch].reshape(-1))
        loss.backward()
        optimizer.step()
        sync()
        times.append(time.perf_counter() - start)
    return times[WARMUP:]


def worker(name, config, steps):
    cfg = CONFIGS[config]
    times = torch_seconds(cfg, steps) if name == "torch" else keras_seconds(name, cfg, steps)
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": float(np.median(times)), "peak_rss_mib": peak_rss_mib}))


def run_worker(name, config, steps):
    result = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", name, config, str(steps)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--configs", default="tutorial,long")
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--append", action="store_true",
                        help="append the table to benchmarks/RESULTS.md")
    parser.add_argument("--worker", nargs=3, metavar=("NAME", "CONFIG", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        name, config, steps = args.worker
        return worker(name, config, int(steps))

    from flops import train_step_flops
    from machine import describe, matmul_peak_gflops

    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    peak_before = matmul_peak_gflops()
    rows = []
    for config in args.configs.split(","):
        cfg = CONFIGS[config]
        flops = train_step_flops(cfg)
        for name in args.implementations.split(","):
            result = run_worker(name, config, args.steps + WARMUP)
            rows.append((config, name, flops, result))
            print(f"  {config} {name}: {result}", file=sys.stderr, flush=True)
    peak = max(peak_before, matmul_peak_gflops())

    say(f"- Date: {datetime.date.today()}; command: `python benchmarks/bench_peers.py "
        f"--steps {args.steps}`")
    say(f"- Machine: {describe(('tensorflow', 'keras', 'keras-hub', 'torch'))}")
    say(f"- fp32 matmul peak (2048^3) in this run: {peak:.1f} GFLOP/s")
    say()
    say("| config | implementation | ms/step | target tokens/s | vs fastest peer | "
        "vs keras-hub (best) | MFU | peak RSS MiB |")
    say("|---|---|---|---|---|---|---|---|")
    for config in args.configs.split(","):
        cfg = CONFIGS[config]
        of_config = {name: result for c, name, _, result in rows if c == config}
        peers = [r["seconds"] for n, r in of_config.items() if not n.startswith("ours")]
        hub = [r["seconds"] for n, r in of_config.items() if n.startswith("keras-hub")]
        for c, name, flops, result in rows:
            if c != config:
                continue
            seconds = result["seconds"]
            say(f"| {config} | {name} | {seconds * 1e3:.0f} | "
                f"{cfg['batch'] * cfg['seq'] / seconds:.0f} | "
                f"{min(peers) / seconds:.2f}x | "
                f"{(min(hub) / seconds if hub else float('nan')):.2f}x | "
                f"{flops / seconds / 1e9 / peak:.2f} | {result['peak_rss_mib']:.0f} |")
    if args.append:
        with open(os.path.join(HERE, "RESULTS.md"), "a", encoding="utf-8") as f:
            f.write("\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
