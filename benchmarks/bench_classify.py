"""Encoder-only models on real data: classify ChatbotData's questions by topic.

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

Usage:
  python benchmarks/bench_classify.py [--time-budget 600] [--pretrain-share 0.7]
      [--systems majority,nearest,scratch,pretrained] [--split-seed 0]
      [--set key=value ...] [--pretrain-set key=value ...] [--out DIR]
"""

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_chatbot import DEFAULT_DATA, Retrieval, _options  # noqa: E402

SYSTEMS = ("majority", "nearest", "scratch", "pretrained")
LABEL_NAMES = {"0": "everyday", "1": "breakup", "2": "love"}


def load_split(path, seed=0):
    """`(train, test)` rows `(question, answer, label)`: bench_chatbot's split."""
    from keras_transformer.data.files import load_chatbot_csv
    from keras_transformer.recipe import split_pairs

    pairs = load_chatbot_csv(path)
    labels = [label for _, label in load_chatbot_csv(path, "Q", "label")]
    rows = [(q, a, label.strip()) for (q, a), label in zip(pairs, labels)]
    return split_pairs(rows, 0.1, seed)


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
    args = parser.parse_args()
    systems = args.systems.split(",")
    out = args.out or tempfile.mkdtemp(prefix="bench_classify_")

    from keras_transformer.classification import classification_metrics, fine_tune, pretrain

    train, test = load_split(args.data, args.split_seed)
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
