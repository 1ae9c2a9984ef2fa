"""Does masked-LM pretraining help classify ChatbotData's questions by topic,
against a fresh encoder, nearest-neighbour retrieval and the majority label?

One run, side by side, on a seeded 10% split of the shared ChatbotData
training file (`../shared/data/chatbot/ChatbotData-train.csv`, the same split
as `bench_chatbot.py`; never trained on). The label column: 0 everyday,
1 breakup (이별), 2 love (사랑).

  majority    the most frequent training label, for every question;
  nearest     the label of the most similar training question (TF-IDF over
              characters and character bigrams, cosine similarity);
  scratch     `keras_transformer.fine_tune` with its defaults, a fresh encoder;
  pretrained  `keras_transformer.pretrain` (masked LM on the training split's
              questions and answers) with its defaults, then `fine_tune` of
              that encoder with its defaults.

Each model gets `--time-budget` seconds of training in all (default 600): the
pretrained one splits it, `--pretrain-share` (default 0.7) for the masked LM
and the rest for fine-tuning. Scores: accuracy and macro-F1 on the test split.

With `--labels 100,300,1000,all`, the semi-supervised protocol instead: the
masked LM is pretrained once on every text of the training split (its
questions and answers, never the test split), with `pretrain`'s defaults and
`--pretrain-set`, counted in epochs, not seconds; then for each number of
labelled questions and each of `--seeds` seeds, a seeded subset stratified by
label is drawn from the training split, and the four systems are trained on
it (`fine_tune` with its defaults and `--set`, with `seed` set to the seed,
from scratch and from the pretrained encoder). `--pretrained OUT/mlm` reuses
an earlier run's masked LM instead of pretraining. It prints every run, the
mean and standard deviation per number of labels, and with `--plot PATH`
draws the learning curve (accuracy against labels).

Usage:
  python benchmarks/bench_classify.py [--time-budget 600] [--pretrain-share 0.7]
      [--systems majority,nearest,scratch,pretrained] [--split-seed 0]
      [--set key=value ...] [--pretrain-set key=value ...] [--out DIR]
  python benchmarks/bench_classify.py --labels 100,300,1000,all [--seeds 3]
      [--pretrain-set epochs=40] [--plot curve.png] [--pretrained OUT/mlm]

Run time: about twice `--time-budget` plus 2 minutes (22 minutes with the
defaults); the `--labels` protocol depends on its arguments (RESULTS.md gives
one run's time).
"""

import argparse
import collections
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_chatbot import DEFAULT_DATA, Retrieval, _options  # noqa: E402
from machine import describe  # noqa: E402

SYSTEMS = ("majority", "nearest", "scratch", "pretrained")
LABEL_NAMES = {"0": "everyday", "1": "breakup", "2": "love"}


def load_split(path, seed=0):
    """`(train, test)` rows `(question, answer, label)`: bench_chatbot's split."""
    from keras_transformer.data.files import load_chatbot_csv
    from keras_transformer.recipes.seq2seq import split_pairs

    pairs = load_chatbot_csv(path)
    labels = [label for _, label in load_chatbot_csv(path, "Q", "label")]
    rows = [(q, a, label.strip()) for (q, a), label in zip(pairs, labels)]
    return split_pairs(rows, 0.1, seed)


def stratified_subset(rows, size, seed):
    """`size` of `rows` `(question, answer, label)`, each label's share kept
    (largest remainders), drawn with `seed`; all of them when `size` is larger."""
    if size >= len(rows):
        return list(rows)
    by_label = collections.defaultdict(list)
    for row in rows:
        by_label[row[2]].append(row)
    quotas = {label: size * len(group) / len(rows) for label, group in by_label.items()}
    counts = {label: int(quota) for label, quota in quotas.items()}
    by_remainder = sorted(quotas, key=lambda label: counts[label] - quotas[label])
    for label in by_remainder[:size - sum(counts.values())]:
        counts[label] += 1
    rng = random.Random(seed)
    subset = [row for label in sorted(by_label) for row in rng.sample(by_label[label],
                                                                      counts[label])]
    rng.shuffle(subset)
    return subset


def learning_curve(args, train, test, out):
    """The semi-supervised protocol (see the module docstring): one record per run."""
    from keras_transformer.recipes.classify import classification_metrics, fine_tune, pretrain

    questions = [q for q, _, _ in test]
    labels = sorted({label for _, _, label in train})
    truth = [labels.index(label) for _, _, label in test]

    def scores(predicted):
        result = classification_metrics([labels.index(p) for p in predicted], truth, labels)
        return {"accuracy": result["accuracy"], "macro_f1": result["macro_f1"]}

    if args.pretrained:
        mlm = args.pretrained
        with open(os.path.join(mlm, "metrics.json"), encoding="utf-8") as file:
            mlm_metrics = json.load(file)
        print(f"masked LM from {mlm}: {json.dumps(mlm_metrics)}", flush=True)
    else:
        start = time.monotonic()
        texts = [q for q, _, _ in train] + [a for _, a, _ in train]
        mlm = pretrain(texts, os.path.join(out, "mlm"), **_options(args.pretrain_set))
        mlm_metrics = mlm.metrics
        print(f"masked LM on {len(texts)} texts: {json.dumps(mlm_metrics)}, "
              f"{time.monotonic() - start:.0f} s", flush=True)
    records = []
    for size in [len(train) if n == "all" else int(n) for n in args.labels.split(",")]:
        for seed in range(args.seeds):
            subset = stratified_subset(train, size, seed)
            examples = [(q, label) for q, _, label in subset]
            common = collections.Counter(label for _, label in examples).most_common(1)[0][0]
            record = {"labels": len(examples), "seed": seed,
                      "majority": scores([common] * len(test)),
                      "nearest": scores(Retrieval(examples).answer(questions))}
            for system, pretrained in (("scratch", None), ("pretrained", mlm)):
                started = time.monotonic()
                result = fine_tune(examples, os.path.join(out, f"{system}-{size}-{seed}"),
                                   pretrained=pretrained, verbose=0,
                                   **{"seed": seed, **_options(args.set)})
                record[system] = {**scores(result.classifier.predict(questions)),
                                  "epochs": result.metrics["epochs"],
                                  "seconds": round(time.monotonic() - started, 1)}
            records.append(record)
            print(json.dumps(record), flush=True)
    return mlm_metrics, records


def summarize(records):
    """`{labels: {system: (mean accuracy, std, mean macro-F1, std)}}` over seeds."""
    summary = {}
    for size in sorted({r["labels"] for r in records}):
        runs = [r for r in records if r["labels"] == size]
        summary[size] = {}
        for system in SYSTEMS:
            values = [[run[system][key] for run in runs] for key in ("accuracy", "macro_f1")]
            summary[size][system] = tuple(
                x for v in values for x in (statistics.mean(v),
                                            statistics.stdev(v) if len(v) > 1 else 0.0))
    return summary


def plot_curve(summary, path):
    """Accuracy against the number of labelled questions, one line per system."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4))
    axes = figure.subplots()
    sizes = sorted(summary)
    for system in SYSTEMS:
        means = [summary[n][system][0] for n in sizes]
        stds = [summary[n][system][1] for n in sizes]
        axes.errorbar(sizes, means, yerr=stds, marker="o", capsize=3, label=system)
    axes.set_xscale("log")
    axes.set_xlabel("labelled training questions")
    axes.set_ylabel("test accuracy (mean of seeds, +- 1 std)")
    axes.set_title("ChatbotData topics: pretraining against labels")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--time-budget", type=float, default=600)
    parser.add_argument("--pretrain-share", type=float, default=0.7)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--set", nargs="*", default=[], help="fine_tune options, key=value")
    parser.add_argument("--pretrain-set", nargs="*", default=[],
                        help="pretrain options, key=value")
    parser.add_argument("--split-seed", type=int, default=0,
                        help="seed of the 10%% test split (0: bench_chatbot.py's)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--labels", default=None,
                        help="the semi-supervised protocol: numbers of labelled questions, "
                             "e.g. 100,300,1000,all")
    parser.add_argument("--seeds", type=int, default=3, help="subsets per number of labels")
    parser.add_argument("--plot", default=None, help="where to draw the learning curve")
    parser.add_argument("--pretrained", default=None,
                        help="with --labels: a directory written by an earlier run's "
                             "pretraining (its mlm/), used instead of pretraining again")
    args = parser.parse_args()
    systems = args.systems.split(",")
    out = args.out or tempfile.mkdtemp(prefix="bench_classify_")

    from keras_transformer.recipes.classify import classification_metrics, fine_tune, pretrain

    if args.pretrained and not args.labels:
        parser.error("--pretrained needs --labels")
    if args.pretrained and args.pretrain_set:
        parser.error("--pretrain-set does not apply to a --pretrained masked LM")
    train, test = load_split(args.data, args.split_seed)
    if args.labels:
        print(f"# {describe(('tensorflow', 'keras'))}", flush=True)
        mlm_metrics, records = learning_curve(args, train, test, out)
        summary = summarize(records)
        print(f"\nmasked LM: {json.dumps(mlm_metrics)}")
        print("\n| labels | majority | nearest | scratch | pretrained | pretrained - scratch |")
        print("|---|---|---|---|---|---|")
        for size, row in summary.items():
            cells = [f"{row[s][0]:.3f} +- {row[s][1]:.3f} / {row[s][2]:.3f}" for s in SYSTEMS]
            gain = 100 * (row["pretrained"][0] - row["scratch"][0])
            print(f"| {size} | {' | '.join(cells)} | {gain:+.1f} |")
        if args.plot:
            plot_curve(summary, args.plot)
        return
    questions = [q for q, _, _ in test]
    labels = sorted({label for _, _, label in train})
    truth = [labels.index(label) for _, _, label in test]
    examples = [(q, label) for q, _, label in train]
    print(f"{len(train)} training rows, {len(test)} test questions; test labels "
          f"{dict(sorted(collections.Counter(label for _, _, label in test).items()))}",
          file=sys.stderr)

    results, outputs = {}, {}
    for system in systems:
        start = time.monotonic()
        details = {}
        if system == "majority":
            common = collections.Counter(label for _, _, label in train).most_common(1)[0][0]
            predicted = [common] * len(test)
        elif system == "nearest":
            predicted = Retrieval(examples).answer(questions)
        elif system == "scratch":
            result = fine_tune(examples, os.path.join(out, "scratch"),
                               time_budget=args.time_budget, **_options(args.set))
            predicted = result.classifier.predict(questions)
            details = {"epochs": result.metrics["epochs"]}
        elif system == "pretrained":
            texts = [q for q, _, _ in train] + [a for _, a, _ in train]
            budget = args.time_budget * args.pretrain_share
            mlm = pretrain(texts, os.path.join(out, "mlm"), time_budget=budget,
                           **_options(args.pretrain_set))
            spent = time.monotonic() - start
            result = fine_tune(examples, os.path.join(out, "pretrained"), pretrained=mlm,
                               time_budget=max(args.time_budget - spent, 1),
                               **_options(args.set))
            predicted = result.classifier.predict(questions)
            details = {"mlm_epochs": mlm.metrics["epochs"],
                       "mlm_val_masked_accuracy": mlm.metrics["val_masked_accuracy"],
                       "epochs": result.metrics["epochs"]}
        else:
            parser.error(f"unknown system {system!r}")
        scores = classification_metrics([labels.index(p) for p in predicted], truth, labels)
        results[system] = dict(accuracy=scores["accuracy"], macro_f1=scores["macro_f1"],
                               f1={LABEL_NAMES.get(k, k): v for k, v in scores["f1"].items()},
                               confusion_matrix=scores["confusion_matrix"],
                               seconds=round(time.monotonic() - start, 1), **details)
        outputs[system] = predicted
        print(f"{system}: {json.dumps(results[system])}", file=sys.stderr, flush=True)

    for q, truth_label, index in zip(questions[:8], [t for _, _, t in test[:8]], range(8)):
        guesses = ", ".join(f"{s} {outputs[s][index]}" for s in systems)
        print(f"  {q} [{truth_label}] -> {guesses}", file=sys.stderr)
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
                      "cpus": os.cpu_count(), "time_budget": args.time_budget,
                      "pretrain_share": args.pretrain_share, "split_seed": args.split_seed,
                      "test_questions": len(test),
                      "results": results}, ensure_ascii=False))


if __name__ == "__main__":
    main()
