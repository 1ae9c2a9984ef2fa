"""Does our recipe answer ChatbotData's unseen questions better than the book's
recipe and a retrieval baseline, given the same training time?

One run trains and scores, on a seeded 10% split of the shared ChatbotData
training file (`../shared/data/chatbot/ChatbotData-train.csv`, never trained on):

  retrieval  the answer of the most similar training question (TF-IDF over
             characters and character bigrams, cosine similarity);
  tutorial   the book's recipe: its `kargs` (2 layers, d_model 512, 8 heads,
             dff 2048, MAX_SEQUENCE 25), its word vocabulary shared by
             questions and answers, Adam(1e-4), its loss (averaged over every
             position), batch 64, 10% validation split, greedy `inference`;
  ours       `keras_transformer.train` with its defaults, decoded the way
             `chat` decodes by default.

Both models get the same training time (`--time-budget`, default 600 s); with
`--time-budget 0` ours trains until early stopping (the long run), then the
tutorial until its 30 epochs, its early stopping or the time ours took,
whichever comes first.

Scores: chrF and BLEU (sacrebleu) after deleting the tutorial's punctuation
`~.,!?"':;)(` from outputs and references, the share of distinct answers and
exact match. Samples of every system are printed for reading.

Usage:
  python benchmarks/bench_chatbot.py [--time-budget 600] [--systems retrieval,tutorial,ours]
      [--set key=value ...]   (extra `keras_transformer.train` arguments for "ours")
      [--decode key=value ...] (extra `generate` arguments for "ours")
      [--out DIR]             (where "ours" is trained and saved)
  python benchmarks/bench_chatbot.py --compare-decoding DIR
      (every decoder on the model trained in DIR: validation and test scores)

Run time: about twice `--time-budget` plus 2 minutes (22 minutes with the
defaults); `--time-budget 0`: about an hour.
"""

import argparse
import collections
import json
import math
import os
import platform
import re
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402

DEFAULT_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "chatbot",
                            "ChatbotData-train.csv")
FILTERS = re.compile(r"[~.,!?\"':;)(]")
# The book's test question.
SAMPLE_QUESTIONS = ["남자친구 승진 선물로 뭐가 좋을까?", "가끔 궁금해", "오늘 너무 힘들다",
                    "썸 타는 것 같아", "헤어진 지 한 달 됐어"]


def strip_punctuation(text):
    return " ".join(FILTERS.sub("", text).split())


def score(hypotheses, references):
    """chrF, BLEU, distinct share and exact match, punctuation deleted first."""
    hyps = [strip_punctuation(h) for h in hypotheses]
    refs = [strip_punctuation(r) for r in references]
    return {
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
        "distinct": round(len(set(hyps)) / len(hyps), 3),
        "exact_match": round(sum(h == r for h, r in zip(hyps, refs)) / len(refs), 4),
        "empty": round(sum(not h for h in hyps) / len(hyps), 3),
    }


def _features(text):
    text = strip_punctuation(text)
    chars = [c for c in text if c != " "]
    bigrams = [text[i : i + 2] for i in range(len(text) - 1)]
    return collections.Counter(chars + bigrams)


class Retrieval:
    """Answer with the answer of the most similar training question
    (TF-IDF over characters and character bigrams, cosine similarity)."""

    def __init__(self, pairs):
        self.answers = [answer for _, answer in pairs]
        docs = [_features(question) for question, _ in pairs]
        frequency = collections.Counter(f for doc in docs for f in doc)
        self.idf = {f: math.log((1 + len(docs)) / (1 + n)) + 1 for f, n in frequency.items()}
        postings = collections.defaultdict(list)
        for row, doc in enumerate(docs):
            vector = self._vector(doc)
            for feature, weight in vector.items():
                postings[feature].append((row, weight))
        self.postings = {f: (np.array([r for r, _ in p]), np.array([w for _, w in p]))
                         for f, p in postings.items()}

    def _vector(self, counts):
        vector = {f: n * self.idf[f] for f, n in counts.items() if f in self.idf}
        norm = math.sqrt(sum(w * w for w in vector.values())) or 1.0
        return {f: w / norm for f, w in vector.items()}

    def answer(self, questions):
        outputs = []
        for question in questions:
            scores = np.zeros(len(self.answers))
            for feature, weight in self._vector(_features(question)).items():
                rows, weights = self.postings[feature]
                np.add.at(scores, rows, weight * weights)
            outputs.append(self.answers[int(np.argmax(scores))])
        return outputs


def load_split(path, seed=0):
    from keras_transformer.data import load_chatbot_csv
    from keras_transformer.recipes.seq2seq import split_pairs

    pairs = load_chatbot_csv(path)
    train, test = split_pairs(pairs, 0.1, seed)
    return train, test


def tutorial_recipe(train_pairs, questions, seconds, epochs=30):
    """The book's chapter 6 recipe, with this package's layers."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.recipes.callbacks import TimeBudget
    from keras_transformer.text import WordTokenizer

    keras.utils.set_random_seed(0)
    max_sequence = 25
    tokenizer = WordTokenizer.from_texts([t for pair in train_pairs for t in pair],
                                         vocab_size=10**6, verbose=0)

    def pad(ragged, width):
        return ragged[:, :width].to_tensor(shape=[None, width]).numpy()

    inputs = pad(tokenizer.tokenize([q for q, _ in train_pairs]), max_sequence)
    answers = tokenizer.tokenize([a for _, a in train_pairs])[:, : max_sequence - 1]
    n = len(train_pairs)
    sos, end = np.full((n, 1), 1, np.int32), np.full((n, 1), 2, np.int32)
    index_outputs = pad(tf.concat([sos, answers], 1), max_sequence)
    index_targets = pad(tf.concat([answers, end], 1), max_sequence)
    kargs = {"model_name": "transformer", "num_layers": 2, "d_model": 512, "num_heads": 8,
             "dff": 2048, "input_vocab_size": tokenizer.vocab_size,
             "target_vocab_size": tokenizer.vocab_size,
             "maximum_position_encoding": max_sequence, "end_token_idx": 2, "rate": 0.1}
    model = kt.Transformer(**kargs)

    def loss(real, pred):  # the book's: masked, then averaged over every position
        real = tf.cast(real, tf.int32)
        mask = tf.cast(tf.not_equal(real, 0), tf.float32)
        values = keras.losses.sparse_categorical_crossentropy(real, pred, from_logits=True)
        return tf.reduce_mean(values * mask)

    model.compile(keras.optimizers.Adam(1e-4), loss=loss, metrics=[kt.masked_accuracy])
    # The book's early stopping (on validation accuracy, patience 10) and the budget.
    callbacks = [keras.callbacks.EarlyStopping(monitor="val_masked_accuracy", mode="max",
                                               patience=10, min_delta=1e-4)]
    callbacks += [TimeBudget(seconds)] if seconds else []
    start = time.monotonic()
    history = model.fit([inputs, index_outputs], index_targets, batch_size=64, epochs=epochs,
                        validation_split=0.1, callbacks=callbacks, verbose=2)
    trained = time.monotonic() - start
    sources = pad(tokenizer.tokenize(questions), max_sequence)
    outputs = []
    for start_row in range(0, len(sources), 64):
        tokens = model.generate(sources[start_row : start_row + 64])
        outputs += [t.decode() for t in tokenizer.detokenize(tokens).numpy()]
    return outputs, {"epochs": len(history.history["loss"]), "train_seconds": round(trained)}


def chat_decoding():
    """The `generate` options `keras-transformer chat` uses when given no flags."""
    from keras_transformer import cli

    return cli._generate_options(cli.build_parser().parse_args(["chat", "--model", "-"]))


def ours(train_pairs, questions, seconds, out_dir, train_options, decode_options):
    import keras_transformer as kt

    options = dict(shared_vocabulary=True, time_budget=seconds or None, verbose=1)
    options.update(train_options)
    start = time.monotonic()
    result = kt.train(train_pairs, out_dir, **options)
    trained = time.monotonic() - start
    outputs = result.translator.translate(questions, **dict(chat_decoding(), **decode_options))
    info = {"epochs": result.metrics["epochs"], "train_seconds": round(trained),
            "valid_chrf": result.metrics.get("chrf")}
    return outputs, info


DECODERS = {
    "greedy": {"method": "greedy"},
    "beam 4": {"method": "beam", "beam_size": 4},
    "beam 8": {"method": "beam", "beam_size": 8},
    "sample top-p 0.9": {"method": "sample", "top_p": 0.9, "seed": 1},
    "sample top-k 10, T 0.7": {"method": "sample", "top_k": 10, "temperature": 0.7, "seed": 1},
    **{f"mmi 4, lambda {w}": {"method": "mmi", "beam_size": 4, "mmi_weight": w}
       for w in (0.1, 0.2, 0.25, 0.3, 0.4)},
    **{f"mmi 8, lambda {w}": {"method": "mmi", "beam_size": 8, "mmi_weight": w}
       for w in (0.1, 0.2, 0.25, 0.3, 0.4)},
}


def compare_decoding(model_dir, train_pairs, test_pairs):
    """Every decoder of `DECODERS` on a trained model: validation and test scores.

    The validation split is the one `train` held out (seeded 10% of the
    training part); choices are made there, the test split only reports.
    """
    import keras_transformer as kt
    from keras_transformer.recipes.seq2seq import split_pairs

    translator = kt.Translator.load(model_dir)
    _, valid_pairs = split_pairs(train_pairs, 0.1, 0)
    print("| decoding | valid chrF | valid distinct | test chrF | test BLEU | test distinct | "
          "test exact | seconds (test) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, options in DECODERS.items():
        row = []
        for pairs in (valid_pairs, test_pairs):
            start = time.monotonic()
            outputs = translator.translate([q for q, _ in pairs], **options)
            row.append((score(outputs, [a for _, a in pairs]), time.monotonic() - start))
        (valid, _), (test, seconds) = row
        print(f"| {name} | {valid['chrf']} | {valid['distinct']} | {test['chrf']} | "
              f"{test['bleu']} | {test['distinct']} | {test['exact_match']} | {seconds:.0f} |",
              flush=True)


def _parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _options(items):
    options = {}
    for item in items or []:
        key, _, value = item.partition("=")
        options[key.replace("-", "_")] = _parse_value(value)
    return options


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--time-budget", type=float, default=600)
    parser.add_argument("--systems", default="retrieval,tutorial,ours")
    parser.add_argument("--set", action="append", help="train option for ours: key=value")
    parser.add_argument("--decode", action="append", help="generate option for ours: key=value")
    parser.add_argument("--out", default=None, help="where ours is trained (default: temp)")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--compare-decoding", metavar="MODEL_DIR",
                        help="only score every decoder on a model trained on this split")
    parser.add_argument("--save-outputs", metavar="FILE",
                        help="write every system's answers to this JSON file")
    args = parser.parse_args()

    train_pairs, test_pairs = load_split(args.data)
    if args.compare_decoding:
        return compare_decoding(args.compare_decoding, train_pairs, test_pairs)
    questions = [q for q, _ in test_pairs]
    references = [a for _, a in test_pairs]
    print(f"{len(train_pairs)} training pairs, {len(test_pairs)} test pairs", file=sys.stderr)
    rows = {}
    outputs = {}
    systems = args.systems.split(",")
    if not args.time_budget and "tutorial" in systems and "ours" in systems:
        # The long run: the tutorial's recipe gets its 30 epochs or the time ours took.
        systems = [s for s in systems if s != "tutorial"] + ["tutorial"]
    for system in systems:
        start = time.monotonic()
        if system == "retrieval":
            answers, info = Retrieval(train_pairs).answer(questions + SAMPLE_QUESTIONS), {}
        elif system == "tutorial":
            seconds = args.time_budget or rows.get("ours", {}).get("train_seconds")
            answers, info = tutorial_recipe(train_pairs, questions + SAMPLE_QUESTIONS, seconds)
        elif system == "ours":
            out = args.out or tempfile.mkdtemp(prefix="bench_chatbot_")
            answers, info = ours(train_pairs, questions + SAMPLE_QUESTIONS, args.time_budget,
                                 out, _options(args.set), _options(args.decode))
        else:
            raise SystemExit(f"unknown system {system!r}")
        info["seconds"] = round(time.monotonic() - start)
        outputs[system] = answers
        rows[system] = dict(score(answers[: len(questions)], references), **info)
        print(system, json.dumps(rows[system]), file=sys.stderr, flush=True)

    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"time budget {args.time_budget:g} s; set {args.set}; decode {args.decode}\n")
    print("| system | chrF | BLEU | distinct | exact match | empty | epochs | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for system, row in rows.items():
        print(f"| {system} | {row['chrf']} | {row['bleu']} | {row['distinct']} | "
              f"{row['exact_match']} | {row['empty']} | {row.get('epochs', '-')} | "
              f"{row['seconds']} |")
    print()
    for i in list(range(args.samples)) + [len(questions) + j for j in
                                           range(len(SAMPLE_QUESTIONS))]:
        question = (questions + SAMPLE_QUESTIONS)[i]
        reference = references[i] if i < len(references) else "-"
        print(f"Q: {question}   (reference: {reference})")
        for system in outputs:
            print(f"   {system:9s} {outputs[system][i]}")
    print(json.dumps(rows))
    if args.save_outputs:
        with open(args.save_outputs, "w", encoding="utf-8") as f:
            json.dump({"questions": questions + SAMPLE_QUESTIONS, "references": references,
                       "rows": rows, "outputs": outputs}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
