"""Is the tree faster or slower than other commits of it, by a few percent?

    python benchmarks/bench_against.py REV [REV ...]
        [--cases train,train-xla,g1,b1,g64,b64] [--rounds 30]

These machines' speed drifts by 20-30% over minutes, so a ratio between
separate processes cannot show a change of a few percent. Here each
revision's `keras_transformer/` is copied out of git and imported into this
one process under its own name
(`keras_transformer_<rev>`), every model gets the current tree's weights, and
the calls take turns: each round runs every revision once, in alternating
order. A revision's figure is the median over the rounds of its time divided
by the current tree's time in the same round (> 1: slower than the current
tree), with the median time itself beside it. With the tree committed, add
`HEAD` as an A/A control: the same code, so its distance from 1 is the
method's own spread (within 2% on an Intel Xeon: each model's place in
memory is worth that much).

Cases, on the model and sources of `bench_decode_peers.py` (the tutorial's
configuration, vocabulary 8000, fp32), default arguments, TensorFlow unless
`KERAS_BACKEND` says otherwise (and every revision runs on it):
- `train`, `train-xla`: one `train_on_batch` (batch 64, source and target
  length 25, the paper's Adam, `masked_loss`, `masked_accuracy`), compiled
  without and with `jit_compile=True` (PyTorch: eager for both);
- `g1`, `b1`, `g64`, `b64`: `generate` at batch 1 and 64, greedy and beam 4,
  24 new tokens from sources of length 25 (no row stops early); the tokens of
  every revision are asserted equal.

Run time: about 1 minute per revision and 10 rounds on 2 cores with every
case (3 revisions and 20 rounds: 7 minutes).
"""

import argparse
import importlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from bench_decode_peers import BEAM, CONFIG, NEW_TOKENS, seeded_model, sources  # noqa: E402
from machine import describe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH = 64
CASES = {"train": False, "train-xla": True, "g1": ("greedy", 1), "b1": ("beam", 1),
         "g64": ("greedy", 64), "b64": ("beam", 64)}


def import_revision(rev, into):
    """`keras_transformer` as of git revision `rev`, imported as `keras_transformer_<rev>`."""
    name = "keras_transformer_" + re.sub(r"\W", "_", rev)
    source = os.path.join(into, name + "_source")
    os.makedirs(source)
    archive = os.path.join(source, "package.tar")
    subprocess.run(["git", "-C", ROOT, "archive", "-o", archive, rev, "keras_transformer"],
                   check=True)
    with tarfile.open(archive) as tar:  # our own repository's files
        tar.extractall(source)
    package = os.path.join(into, name)
    os.rename(os.path.join(source, "keras_transformer"), package)
    for folder, _, files in os.walk(package):
        for file in (f for f in files if f.endswith(".py")):
            path = os.path.join(folder, file)
            with open(path, encoding="utf-8") as f:
                text = re.sub(r"\bkeras_transformer\b", name, f.read())
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if into not in sys.path:
        sys.path.insert(0, into)
    return importlib.import_module(name)


def build(kt, weights):
    """`seeded_model(kt)` holding `weights` (the tree's, in case a revision
    creates its weights in another order)."""
    model = seeded_model(kt)
    model.set_weights(weights)
    return model


def case_fn(kt, model, case):
    """The zero-argument call that `case` times."""
    if case.startswith("train"):
        inp, dec_in, dec_out = (sources(BATCH, seed) for seed in range(3))
        model.compile(keras.optimizers.Adam(kt.CustomSchedule(CONFIG["d_model"]), beta_1=0.9,
                                            beta_2=0.98, epsilon=1e-9),
                      loss=kt.masked_loss, metrics=[kt.masked_accuracy],
                      jit_compile=CASES[case] if keras.backend.backend() != "torch" else False)
        return lambda: model.train_on_batch((inp, dec_in), dec_out)
    method, batch = CASES[case]
    ids = sources(batch)
    return lambda: keras.ops.convert_to_numpy(
        model.generate(ids, max_length=NEW_TOKENS, method=method, beam_size=BEAM))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("revs", nargs="+", help="git revisions to compare with the tree")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    revs = list(dict.fromkeys(args.revs))
    print(describe(("tensorflow", "keras", "jax", "torch")), flush=True)
    print(f"backend {keras.backend.backend()}; {args.rounds} rounds; "
          f"command: python benchmarks/bench_against.py {' '.join(sys.argv[1:])}", flush=True)

    import keras_transformer

    with tempfile.TemporaryDirectory() as tmp:
        packages = [("tree", keras_transformer)]
        packages += [(rev, import_revision(rev, tmp)) for rev in revs]
        reference = seeded_model(keras_transformer)
        weights = reference.get_weights()
        calls = {}
        for label, kt in packages:
            model = reference if kt is keras_transformer else build(kt, weights)
            for case in cases:
                fn = case_fn(kt, build(kt, weights) if case.startswith("train") else model, case)
                fn()  # trace and compile
                result = fn()
                if not case.startswith("train") and label != "tree":
                    np.testing.assert_array_equal(
                        result, calls["tree", case][1],
                        err_msg=f"{label} decodes other tokens ({case}): are its weights "
                                "in the same order?")
                calls[label, case] = (fn, result)

        seconds = {key: [] for key in calls}
        for round_ in range(args.rounds):
            order = packages if round_ % 2 == 0 else packages[::-1]
            for case in cases:
                for label, _ in order:
                    start = time.perf_counter()
                    calls[label, case][0]()
                    seconds[label, case].append(time.perf_counter() - start)

    for case in cases:
        tree = np.array(seconds["tree", case])
        figures = []
        for label, _ in packages:
            times = np.array(seconds[label, case])
            median = np.median(times)
            figure = (f"{median * 1e3:.0f} ms/step" if case.startswith("train") else
                      f"{CASES[case][1] / median:.1f} sentences/s" if case.endswith("64") else
                      f"{median / NEW_TOKENS * 1e3:.3f} ms/token")
            figures.append(f"{label}: {figure}, time ratio {np.median(times / tree):.3f}")
        print(f"{case:6s} " + " | ".join(figures), flush=True)


if __name__ == "__main__":
    main()
