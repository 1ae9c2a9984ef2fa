"""The training recipe: sentence pairs in, a trained, evaluated, saved translator out.

`train` does what the tutorial does by hand (vocabulary, padding, `fit`,
`inference`) with what a long run needs: Adam(0.9, 0.98, 1e-9) with the
paper's schedule, label smoothing, a loss and accuracy that ignore padding,
the best weights on validation kept, early stopping, resumption after an
interruption, a time budget, TensorBoard and CSV logs, and at the end BLEU,
chrF and exact match on the validation split, samples and plots.
"""

import csv
import dataclasses
import json
import math
import os
import sys
import time

import keras
import numpy as np
import sacrebleu

from keras_transformer import _config
from keras_transformer.data.pipeline import make_dataset, truncation_stats
from keras_transformer.plotting import plot_attention, plot_history
from keras_transformer.text.tokenizers import (
    get_tokenizer_class,
    load_vocabulary,
    tokenizer_from_config,
)
from keras_transformer.training import CustomSchedule, MaskedLoss, masked_accuracy
from keras_transformer.transformer import Transformer
from keras_transformer.translator import (
    SOURCE_VOCAB_FILE,
    TARGET_VOCAB_FILE,
    Translator,
)

BACKUP_DIR = "backup"
BEST_WEIGHTS_FILE = "best.weights.h5"
HISTORY_FILE = "history.csv"
METRICS_FILE = "metrics.json"
HISTORY_PLOT = "history.png"
ATTENTION_PLOT = "attention.png"
LOG_DIR = "logs"


@dataclasses.dataclass
class TrainResult:
    """What `train` returns.

    Attributes:
        translator: the trained `Translator` (best validation weights).
        history: dict of per-epoch lists (`loss`, `val_loss`, ...), over all
            runs of a resumed training.
        metrics: dict: `bleu`, `chrf`, `exact_match` on the validation split,
            `epochs`, `seconds`, `stopped_by_time_budget`, truncation counts.
        out_dir: str. Where everything was written.
    """

    translator: Translator
    history: dict
    metrics: dict
    out_dir: str


class TimeBudget(keras.callbacks.Callback):
    """Stop training cleanly once `seconds` have passed since `fit` began.

    The batch that is running finishes; the epoch ends early (validation and
    the epoch-end callbacks still run).
    """

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.stopped = False

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            self.model.stop_training = True
            self.stopped = True


def translation_metrics(hypotheses, references):
    """Corpus BLEU and chrF (sacrebleu, default settings) and exact match.

    Args:
        hypotheses: list of str. System outputs.
        references: list of str. One reference per hypothesis, already in the
            tokenizer's canonical form (see `Tokenizer.canonicalize`).

    Returns:
        dict `{"bleu", "chrf", "exact_match"}`; BLEU and chrF on 0-100,
        exact match a fraction.
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"Expected as many hypotheses as references. Received: {len(hypotheses)} "
            f"hypotheses and {len(references)} references"
        )
    if not references:
        return {"bleu": 0.0, "chrf": 0.0, "exact_match": 0.0}
    exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    return {
        "bleu": round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2),
        "exact_match": round(exact, 4),
    }


def evaluate(translator, pairs, batch_size=128, verbose=1, **generate_kwargs):
    """Translate the sources of `pairs` and score them against the targets.

    Returns:
        `(metrics, hypotheses, references)`: `translation_metrics` and the
        lists it was computed from.
    """
    sources = [source for source, _ in pairs]
    references = [
        text.decode("utf-8")
        for text in translator.target_tokenizer.canonicalize([t for _, t in pairs]).numpy()
    ]
    hypotheses = translator.translate(sources, batch_size=batch_size, verbose=verbose,
                                      **generate_kwargs)
    return translation_metrics(hypotheses, references), hypotheses, references


def split_pairs(pairs, valid_fraction=0.1, seed=0):
    """A seeded random split: `(train_pairs, valid_pairs)`, each non-empty."""
    if len(pairs) < 2:
        raise ValueError(
            f"Need at least 2 sentence pairs to split off a validation set. Received: "
            f"{len(pairs)} pair(s)"
        )
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_valid = min(max(1, round(len(pairs) * valid_fraction)), len(pairs) - 1)
    return [pairs[i] for i in order[n_valid:]], [pairs[i] for i in order[:n_valid]]


def read_history(path):
    """`history.csv` written by `keras.callbacks.CSVLogger` -> dict of lists."""
    if not os.path.isfile(path):
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {key: [float(row[key]) for row in rows if row.get(key) not in (None, "")]
            for key in (rows[0] if rows else {})}


def _log(message, verbose):
    if verbose:
        print(message, file=sys.stderr, flush=True)


def progress_verbosity(verbose):
    """Keras' `verbose` for progress bars: `1` (animated bar) becomes `2`
    (one line per epoch) when stdout is not a terminal, to keep logs short."""
    return 2 if verbose == 1 and not sys.stdout.isatty() else verbose


def _tokenizers(train_pairs, out_dir, tokenizer, vocab_size, shared_vocabulary, lower_case,
                verbose):
    """Learn the vocabularies, or reload them when resuming in `out_dir`."""
    source_path = os.path.join(out_dir, SOURCE_VOCAB_FILE)
    target_path = os.path.join(out_dir, TARGET_VOCAB_FILE)
    cls = get_tokenizer_class(tokenizer)
    if os.path.isdir(os.path.join(out_dir, BACKUP_DIR)) and os.path.isfile(target_path):
        _log(f"Resuming the interrupted run in {out_dir}: reusing its vocabularies", verbose)
        config = {"kind": tokenizer, "lower_case": lower_case}
        return (tokenizer_from_config(config, load_vocabulary(source_path)),
                tokenizer_from_config(config, load_vocabulary(target_path)))
    sources = [source for source, _ in train_pairs]
    targets = [target for _, target in train_pairs]
    if shared_vocabulary:
        _log(f"Learning a shared {tokenizer} vocabulary ({vocab_size} tokens at most)", verbose)
        source_tokenizer = target_tokenizer = cls.from_texts(
            sources + targets, vocab_size, lower_case=lower_case,
            verbose=progress_verbosity(verbose),
        )
    else:
        _log(f"Learning {tokenizer} vocabularies ({vocab_size} tokens at most)", verbose)
        source_tokenizer = cls.from_texts(sources, vocab_size, lower_case=lower_case,
                                          verbose=progress_verbosity(verbose))
        target_tokenizer = cls.from_texts(targets, vocab_size, lower_case=lower_case,
                                          verbose=progress_verbosity(verbose))
    source_tokenizer.save_vocabulary(source_path)
    target_tokenizer.save_vocabulary(target_path)
    return source_tokenizer, target_tokenizer


def train(
    train_pairs,
    out_dir,
    valid_pairs=None,
    *,
    tokenizer="wordpiece",
    vocab_size=8000,
    shared_vocabulary=False,
    lower_case=True,
    num_layers=2,
    d_model=256,
    num_heads=8,
    dff=1024,
    rate=0.1,
    max_length=25,
    model_options=None,
    batch_size=64,
    epochs=30,
    patience=5,
    warmup_steps=None,
    label_smoothing=0.1,
    time_budget=None,
    valid_fraction=0.1,
    seed=0,
    jit_compile=False,
    callbacks=None,
    samples=5,
    verbose=1,
):
    """Train a Transformer on sentence pairs, evaluate it and save it in `out_dir`.

    Re-running with the same `out_dir` after an interruption (a crash, Ctrl-C,
    a killed job) resumes from the last finished epoch.

    Args:
        train_pairs: list of `(source, target)` str pairs.
        out_dir: str. Output directory (created). It ends up holding a
            reloadable translator (`model.keras`, vocabularies,
            `config.json`), `best.weights.h5`, `history.csv`,
            `metrics.json`, `history.png`, `attention.png` and TensorBoard
            `logs/`.
        valid_pairs: list of pairs, or `None` for a seeded `valid_fraction`
            split of `train_pairs`.
        tokenizer: str. `"wordpiece"`, `"word"` (the tutorial's) or `"char"`.
            Defaults to `"wordpiece"`.
        vocab_size: int. Largest vocabulary per side. Defaults to `8000`.
        shared_vocabulary: bool. One vocabulary learned from both sides (the
            tutorial's chatbot does this). Defaults to `False`.
        lower_case: bool. Defaults to `True`.
        num_layers, d_model, num_heads, dff, rate: the tutorial's `kargs`.
            Defaults: 2, 256, 8, 1024, 0.1 (the tutorial's 512/2048 halved,
            to train on a CPU).
        max_length: int. `maximum_position_encoding`: longer sources and
            targets are cut (and counted). Defaults to `25` (the tutorial's).
        model_options: dict. More `Transformer` arguments (`norm_first`,
            `activation`, `position_encoding`, ...). Defaults to `None`.
        batch_size: int. Defaults to `64`.
        epochs: int. Most epochs. Defaults to `30`.
        patience: int. Early stopping patience on validation loss. Defaults
            to `5`.
        warmup_steps: int. `CustomSchedule` warm-up. Defaults to `None`: a
            tenth of all steps, at most the paper's 4000.
        label_smoothing: float. Defaults to `0.1`.
        time_budget: float. Stop training after this many seconds, then
            evaluate and save as usual. Defaults to `None` (no limit).
        valid_fraction: float. Used when `valid_pairs` is `None`. Defaults to
            `0.1`.
        seed: int. Seeds Python, NumPy, TensorFlow and the split. Defaults to
            `0`.
        jit_compile: bool. Compile the training step with XLA. Defaults to
            `False`.
        callbacks: list of extra `keras.callbacks.Callback`. Defaults to `None`.
        samples: int. Validation samples printed at the end. Defaults to `5`.
        verbose: int. `0` silent, `1` progress bars and messages (on stderr,
            Keras' bars on stdout). Defaults to `1`.

    Returns:
        `TrainResult`.
    """
    start = time.monotonic()
    for name, value in (("num_layers", num_layers), ("d_model", d_model),
                        ("num_heads", num_heads), ("dff", dff), ("max_length", max_length),
                        ("batch_size", batch_size), ("epochs", epochs),
                        ("vocab_size", vocab_size)):
        _config.check_positive_int(name, value)
    _config.check_non_negative_int("patience", patience)
    _config.check_rate("label_smoothing", label_smoothing)
    _config.check_rate("valid_fraction", valid_fraction)
    if time_budget is not None and not time_budget >= 0:
        raise ValueError(
            "Received an invalid value for argument `time_budget`, expected a "
            f"number of seconds >= 0 or None. Received: time_budget={time_budget!r}"
        )
    train_pairs = list(train_pairs)
    if not train_pairs:
        raise ValueError("Received an invalid value for argument `train_pairs`: it is empty.")
    if valid_pairs is None:
        train_pairs, valid_pairs = split_pairs(train_pairs, valid_fraction, seed)
    valid_pairs = list(valid_pairs)
    if not valid_pairs:
        raise ValueError("Received an invalid value for argument `valid_pairs`: it is empty.")
    keras.utils.set_random_seed(seed)
    os.makedirs(out_dir, exist_ok=True)
    _log(f"{len(train_pairs)} training pairs, {len(valid_pairs)} validation pairs", verbose)

    source_tokenizer, target_tokenizer = _tokenizers(
        train_pairs, out_dir, tokenizer, vocab_size, shared_vocabulary, lower_case, verbose
    )
    stats = truncation_stats(train_pairs, source_tokenizer, target_tokenizer, max_length)
    _log(
        f"Vocabularies: {source_tokenizer.vocab_size} source, {target_tokenizer.vocab_size} "
        f"target tokens. Cut to max_length={max_length}: {stats['truncated_sources']} "
        f"sources and {stats['truncated_targets']} targets of {stats['pairs']} pairs",
        verbose,
    )
    # Padded batches rather than length buckets: the number of batches is
    # known, so the first epoch gets a real progress bar.
    train_data = make_dataset(train_pairs, source_tokenizer, target_tokenizer, max_length,
                              batch_size, shuffle=True, seed=seed, bucket=False)
    valid_data = make_dataset(valid_pairs, source_tokenizer, target_tokenizer, max_length,
                              batch_size, bucket=False)

    kargs = {
        "model_name": "transformer",
        "num_layers": num_layers,
        "d_model": d_model,
        "num_heads": num_heads,
        "dff": dff,
        "input_vocab_size": source_tokenizer.vocab_size,
        "target_vocab_size": target_tokenizer.vocab_size,
        "maximum_position_encoding": max_length,
        "end_token_idx": 2,
        "rate": rate,
    }
    model = Transformer(**kargs, **(model_options or {}))
    model.build(((None, None), (None, None)))
    if warmup_steps is None:
        total_steps = math.ceil(len(train_pairs) / batch_size) * epochs
        warmup_steps = min(4000, max(1, total_steps // 10))
    optimizer = keras.optimizers.Adam(
        CustomSchedule(d_model, warmup_steps), beta_1=0.9, beta_2=0.98, epsilon=1e-9
    )
    model.compile(optimizer, loss=MaskedLoss(label_smoothing=label_smoothing),
                  metrics=[masked_accuracy], jit_compile=jit_compile)

    history_path = os.path.join(out_dir, HISTORY_FILE)
    best_path = os.path.join(out_dir, BEST_WEIGHTS_FILE)
    resuming = os.path.isdir(os.path.join(out_dir, BACKUP_DIR))
    earlier = read_history(history_path) if resuming else {}
    if not resuming:  # files of a finished earlier run must not mix with this one.
        for stale in (history_path, best_path):
            if os.path.exists(stale):
                os.remove(stale)
    budget = TimeBudget(time_budget) if time_budget is not None else None
    fit_callbacks = [
        keras.callbacks.BackupAndRestore(os.path.join(out_dir, BACKUP_DIR)),
        keras.callbacks.ModelCheckpoint(
            best_path, monitor="val_loss", save_best_only=True, save_weights_only=True,
            initial_value_threshold=min(earlier.get("val_loss", [math.inf])),
        ),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=patience),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.CSVLogger(history_path, append=True),
        keras.callbacks.TensorBoard(os.path.join(out_dir, LOG_DIR)),
    ] + ([budget] if budget else []) + list(callbacks or [])
    _log(f"Training: kargs = {kargs}, warmup_steps = {warmup_steps}", verbose)
    model.fit(train_data, validation_data=valid_data, epochs=epochs, callbacks=fit_callbacks,
              shuffle=False, verbose=progress_verbosity(verbose))
    if os.path.isfile(best_path):
        model.load_weights(best_path)

    translator = Translator(model, source_tokenizer, target_tokenizer)
    translator.save(out_dir)
    _log(f"Decoding {len(valid_pairs)} validation sentences (greedy)", verbose)
    scores, hypotheses, references = evaluate(translator, valid_pairs,
                                              verbose=progress_verbosity(verbose))
    for (source, _), hypothesis, reference in list(zip(valid_pairs, hypotheses, references))[
        :samples
    ]:
        _log(f"  source:    {source}\n  reference: {reference}\n  output:    {hypothesis}",
             verbose)

    history = read_history(history_path)
    metrics = dict(
        scores,
        epochs=len(history.get("loss", [])),
        stopped_by_time_budget=bool(budget and budget.stopped),
        seconds=round(time.monotonic() - start, 1),
        **{key: value for key, value in stats.items() if key != "pairs"},
    )
    with open(os.path.join(out_dir, METRICS_FILE), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2)
    plot_history(history, os.path.join(out_dir, HISTORY_PLOT))
    # The first validation source with a token and an output to show.
    for source, _ in valid_pairs:
        weights, source_tokens, target_tokens = translator.attention(source)
        if weights.size:
            plot_attention(weights, source_tokens, target_tokens,
                           os.path.join(out_dir, ATTENTION_PLOT),
                           title=f"Cross-attention, last decoder layer: {source}")
            break
    _log(f"Validation: BLEU {metrics['bleu']}, chrF {metrics['chrf']}, exact match "
         f"{metrics['exact_match']}. Saved to {out_dir}", verbose)
    return TrainResult(translator, history, metrics, out_dir)
