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
import shutil
import sys
import time

import keras
import numpy as np
import sacrebleu
import tensorflow as tf

from keras_transformer import _config
from keras_transformer._files import write_text
from keras_transformer.callbacks import Backup, BestWeights, EarlyStopping, TimeBudget
from keras_transformer.data.pipeline import make_dataset, truncation_stats
from keras_transformer.distribute import dtype_policy, get_strategy, worker_directory
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
    """`history.csv` written by `keras.callbacks.CSVLogger` -> dict of lists.

    An epoch logged twice (trained again after a kill that came between its
    log line and its backup) counts once, with its last values.
    """
    if not os.path.isfile(path):
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        rows = list({row.get("epoch"): row for row in csv.DictReader(f)}.values())
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
    mixed_precision=None,
    static_shape=False,
    strategy=None,
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
        mixed_precision: `None`, `"bf16"` (`mixed_bfloat16`: TPUs, recent
            GPUs and CPUs) or `"fp16"` (`mixed_float16`, with dynamic loss
            scaling: GPUs). Logits, softmax and the loss stay in float32.
            Defaults to `None` (float32).
        static_shape: bool. Every batch `(batch_size, max_length)`, the last
            smaller one dropped: one shape to compile (TPUs need it; XLA then
            compiles once). Defaults to `False` (batches padded to their
            longest row).
        strategy: `None`, a `tf.distribute.Strategy`, or `"mirrored"`,
            `"multi_worker"`, `"tpu"` (see
            `keras_transformer.distribute.get_strategy`). `batch_size` is the
            global batch, split over the replicas; the loss is averaged over
            the global batch's tokens, so the updates equal one device's.
            With `"tpu"` and `"multi_worker"`, `static_shape` is on. Workers
            other than the chief write into `out_dir/worker-<index>`.
            Defaults to `None`.
        callbacks: list of extra `keras.callbacks.Callback`. Defaults to `None`.
        samples: int. Validation samples printed at the end. Defaults to `5`.
        verbose: int. `0` silent, `1` progress bars and messages (on stderr,
            Keras' bars on stdout). Defaults to `1`.

    Returns:
        `TrainResult`.
    """
    start = time.monotonic()
    strategy = get_strategy(strategy)  # first: some strategies configure the runtime.
    policy = dtype_policy(mixed_precision)
    # Keras averages a first batch over the workers to build the model: their
    # batches must have one shape. TPUs need one shape anyway.
    static_shape = static_shape or isinstance(
        strategy, (tf.distribute.TPUStrategy, tf.distribute.MultiWorkerMirroredStrategy))
    for name, value in (("num_layers", num_layers), ("d_model", d_model),
                        ("num_heads", num_heads), ("dff", dff), ("max_length", max_length),
                        ("batch_size", batch_size), ("epochs", epochs),
                        ("vocab_size", vocab_size)):
        _config.check_positive_int(name, value)
    _config.check_divisible(d_model, num_heads)
    _config.check_rate("rate", rate)
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
    replicas = strategy.num_replicas_in_sync
    if static_shape and len(train_pairs) < batch_size:
        raise ValueError(
            f"static_shape drops the last smaller batch, and the {len(train_pairs)} training "
            f"pairs do not fill one batch of {batch_size}: lower `batch_size`"
        )
    if batch_size % replicas:
        raise ValueError(
            f"batch_size={batch_size} is the global batch and must divide evenly over the "
            f"{replicas} replicas of the strategy"
        )
    out_dir = worker_directory(out_dir)
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
    steps_per_epoch = (len(train_pairs) // batch_size if static_shape
                       else math.ceil(len(train_pairs) / batch_size))
    if warmup_steps is None:
        warmup_steps = min(4000, max(1, steps_per_epoch * epochs // 10))
    with strategy.scope():
        # Fp16 gets Keras' dynamic loss scaling from `compile` (its policy
        # is `mixed_float16`).
        model = Transformer(**kargs, **dict(model_options or {}, dtype=policy))
        model.build(((None, None), (None, None)))
        optimizer = keras.optimizers.Adam(
            CustomSchedule(d_model, warmup_steps), beta_1=0.9, beta_2=0.98, epsilon=1e-9
        )
        model.compile(optimizer, loss=MaskedLoss(label_smoothing=label_smoothing),
                      metrics=[masked_accuracy], jit_compile=jit_compile)

    history_path = os.path.join(out_dir, HISTORY_FILE)
    best_path = os.path.join(out_dir, BEST_WEIGHTS_FILE)
    backup = Backup(os.path.join(out_dir, BACKUP_DIR))
    resuming = os.path.isdir(backup.directory)
    earlier = read_history(history_path) if resuming else {}
    if not resuming:  # files of a finished earlier run must not mix with this one.
        for stale in (history_path, best_path):
            if os.path.exists(stale):
                os.remove(stale)
    state = backup.read_state() if resuming else None
    with strategy.scope():  # the optimizer's variables are built here on resumption
        initial_epoch = backup.restore(model) if state else 0
    finished = bool(state and state["finished"]) or initial_epoch >= epochs
    if initial_epoch:
        _log(f"Resuming after epoch {initial_epoch}", verbose)

    # Each epoch's batches depend on the seed and the epoch's number only, so
    # a resumed run trains on what an uninterrupted one would have.
    train_data = make_dataset(train_pairs, source_tokenizer, target_tokenizer, max_length,
                              batch_size, shuffle=True, seed=seed, bucket=False,
                              epochs=epochs, initial_epoch=min(initial_epoch, epochs),
                              static_shape=static_shape, drop_remainder=static_shape)
    valid_data = make_dataset(valid_pairs, source_tokenizer, target_tokenizer, max_length,
                              batch_size, bucket=False, static_shape=static_shape)
    budget = TimeBudget(time_budget) if time_budget is not None else None
    fit_callbacks = [
        BestWeights(best_path, "val_loss", best=min(earlier.get("val_loss", [math.inf]))),
        EarlyStopping(earlier.get("val_loss", []), monitor="val_loss", patience=patience),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.CSVLogger(history_path, append=True),
        keras.callbacks.TensorBoard(os.path.join(out_dir, LOG_DIR)),
    ] + ([budget] if budget else []) + list(callbacks or []) + [backup]
    _log(f"Training: kargs = {kargs}, warmup_steps = {warmup_steps}, dtype policy = "
         f"{policy}, replicas = {replicas}", verbose)
    if not finished:
        model.fit(train_data, validation_data=valid_data, epochs=epochs,
                  initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch,
                  callbacks=fit_callbacks, shuffle=False, verbose=progress_verbosity(verbose))
        backup.finish()
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
    write_text(os.path.join(out_dir, METRICS_FILE), json.dumps(metrics, indent=2))
    plot_history(history, os.path.join(out_dir, HISTORY_PLOT))
    # The first validation source with a token and an output to show.
    for source, _ in valid_pairs:
        weights, source_tokens, target_tokens = translator.attention(source)
        if weights.size:
            plot_attention(weights, source_tokens, target_tokens,
                           os.path.join(out_dir, ATTENTION_PLOT),
                           title=f"Cross-attention, last decoder layer: {source}")
            break
    # Everything is saved: a re-run now starts a new training.
    shutil.rmtree(backup.directory)
    _log(f"Validation: BLEU {metrics['bleu']}, chrF {metrics['chrf']}, exact match "
         f"{metrics['exact_match']}. Saved to {out_dir}", verbose)
    return TrainResult(translator, history, metrics, out_dir)
