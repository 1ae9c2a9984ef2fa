"""How much does micro-batching raise the server's throughput, what latency does a
request see, and does the server hold up under load?

    python -m keras_transformer demo --out keras_transformer_demo
    pip install ".[serve]"
    python benchmarks/bench_serve.py keras_transformer_demo [--clients 1,8,64]
        [--seconds 10] [--soak 60]

Starts `keras-transformer serve` on the model directory twice, on loopback:
with batching (`--max-batch-size 64`) and without (`--max-batch-size 1`),
both decoding greedily. For each number of clients, that many threads post
the demo's test sentences to `/v1/completions` one after another for
`--seconds` (each request waits for its answer before the next), after a
warm-up; the two servers take turns, twice, and each keeps its better turn.
Throughput is answered requests per second, latency the median and 99th
percentile. Beside them: a bare `Translator.translate` call on one
sentence in this process (the floor a one-client request adds the HTTP
round trip and the queue to). With `--soak S`: 64 clients for S seconds
against the batching server, its errors counted and its resident memory
read from /proc before and after. Everything stops by itself.

Run time: about 3 minutes with the defaults, plus the soak.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import httpx  # noqa: E402
from machine import describe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, max_batch_size):
    """A `keras-transformer serve` process on a free port, ready: `(process, url)`."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer", "serve", "--model", model, "--port",
         str(port), "--method", "greedy", "--max-batch-size", str(max_batch_size),
         "--max-queue", "4096"], cwd=ROOT, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health").status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server did not get ready in 300 s")


def load(url, questions, clients, seconds):
    """`clients` threads posting for `seconds`: `(latencies in s, errors, elapsed)`.
    (Threads, each with its own connection: httpx's asyncio client, one event
    loop for all, sent 3.5x fewer requests here than the server could answer.)"""
    latencies, errors = [], []
    stop = time.monotonic() + seconds

    def client(offset):
        with httpx.Client(timeout=60) as http:
            i = offset
            while time.monotonic() < stop:
                start = time.perf_counter()
                try:
                    response = http.post(url + "/v1/completions",
                                         json={"prompt": questions[i % len(questions)],
                                               "max_tokens": 16})
                    ok = response.status_code == 200
                except httpx.HTTPError:
                    ok = False
                (latencies if ok else errors).append(time.perf_counter() - start)
                i += clients

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors, time.perf_counter() - start


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a model directory (keras-transformer demo --out DIR)")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--soak", type=float, default=0.0, help="seconds of 64 clients")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from keras_transformer import Translator
    from keras_transformer.data import english_korean_corpus

    print(f"# {describe(('tensorflow', 'keras', 'fastapi', 'uvicorn'))}", flush=True)
    questions = [source for source, _ in english_korean_corpus(
        train_size=12000, valid_size=500, test_size=1000, seed=0)["test"]]
    translator = Translator.load(args.model)
    translator.translate(questions[:1])
    bare = []
    for question in questions[:50]:
        start = time.perf_counter()
        translator.translate([question])
        bare.append(time.perf_counter() - start)
    print(f"bare Translator.translate, one sentence: p50 {statistics.median(bare) * 1e3:.1f} ms",
          flush=True)

    servers = {label: start_server(args.model, size)
               for label, size in (("batching", 64), ("no batching", 1))}
    rows = []
    try:
        for _, url in servers.values():
            load(url, questions, 8, 3)  # warm-up
        # The two servers take turns, so the machine's drift falls on both alike;
        # each figure is the best of two turns.
        for clients in (int(c) for c in args.clients.split(",")):
            best = {}
            for turn in range(2):
                for label in (list(servers) if turn == 0 else list(servers)[::-1]):
                    latencies, errors, elapsed = load(servers[label][1], questions, clients,
                                                      args.seconds)
                    row = (label, clients, len(latencies) / elapsed,
                           statistics.median(latencies) * 1e3,
                           percentile(latencies, 0.99) * 1e3, len(errors))
                    print(json.dumps(row), flush=True)
                    if label not in best or row[2] > best[label][2]:
                        best[label] = row
            rows += [best[label] for label in servers]
        if args.soak:
            process, url = servers["batching"]
            before = rss_mib(process.pid)
            latencies, errors, elapsed = load(url, questions, 64, args.soak)
            after = rss_mib(process.pid)
            print(f"soak: 64 clients for {elapsed:.0f} s: {len(latencies)} answers, "
                  f"{len(errors)} errors; resident memory {before:.0f} -> {after:.0f} MiB "
                  f"({(after / before - 1) * 100:+.1f}%)", flush=True)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=60)

    print("\n| server | clients | requests/s | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|")
    for label, clients, throughput, p50, p99, errors in rows:
        print(f"| {label} | {clients} | {throughput:.1f} | {p50:.1f} | {p99:.1f} | {errors} |")
    by = {(label, clients): throughput for label, clients, throughput, *_ in rows}
    for clients in sorted({c for _, c in by}):
        if ("no batching", clients) in by:
            print(f"batching / no batching at {clients} clients: "
                  f"{by['batching', clients] / by['no batching', clients]:.2f}x")


if __name__ == "__main__":
    main()
