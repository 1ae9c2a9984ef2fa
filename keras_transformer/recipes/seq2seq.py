"""The training recipe: sentence pairs in, a trained, evaluated, saved translator out.

`train` does what the tutorial does by hand (vocabulary, padding, `fit`,
`inference`) with what a long run needs: Adam(0.9, 0.98, 1e-9) with the
paper's schedule, label smoothing, a loss and accuracy that ignore padding,
the best weights on validation kept, early stopping, resumption after an
interruption, a time budget, TensorBoard and CSV logs, and at the end BLEU,
chrF and exact match on the validation split, samples and plots.
"""

import collections
import dataclasses
import math
import os
import time
import warnings

import keras
import sacrebleu
import tensorflow as tf

from keras_transformer.data.pipeline import make_dataset, truncation_stats
from keras_transformer.errors import InputError
from keras_transformer.models.transformer import Transformer
from keras_transformer.plotting import plot_attention
from keras_transformer.recipes.callbacks import EpochScores
from keras_transformer.recipes.config import TrainConfig
from keras_transformer.recipes.distribute import dtype_policy, get_strategy, worker_directory
from keras_transformer.recipes.harness import (  # noqa: F401  (read_history, split_pairs: public here too)
    TrainingRun,
    log,
    progress_verbosity,
    read_history,
    split_pairs,
)
from keras_transformer.serving.translator import (
    SOURCE_VOCAB_FILE,
    TARGET_VOCAB_FILE,
    Translator,
)
from keras_transformer.text.tokenizers import (
    get_tokenizer_class,
    load_vocabulary,
    tokenizer_from_config,
)
from keras_transformer.training import (
    MaskedAccuracy,
    MaskedLoss,
    default_learning_rate,
    recipe_optimizer,
)

ATTENTION_PLOT = "attention.png"
# Best weights and early stopping follow the greedy translations' chrF on
# (at most this many) validation pairs: on small, many-to-many data such as
# chat, validation loss rises after a few epochs while the answers keep
# getting better (see benchmarks/RESULTS.md). An epoch whose answers collapsed
# (`collapse_warning`) counts as chrF 0: answering "." to everything scores
# chrF 9.8 on chat data, more than a model still learning to answer.
MONITOR = "val_chrf"
SCORED_VALID_PAIRS = 1000


class CollapseWarning(UserWarning):
    """The trained model answers (nearly) everything alike, or with nothing."""


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
    """Corpus BLEU and chrF (sacrebleu, default settings), exact match and the
    share of distinct outputs.

    Args:
        hypotheses: list of str. System outputs.
        references: list of str. One reference per hypothesis, already in the
            tokenizer's canonical form (see `Tokenizer.canonicalize`).

    Returns:
        dict `{"bleu", "chrf", "exact_match", "distinct_answers"}`; BLEU and
        chrF on 0-100, exact match and `distinct_answers` (distinct outputs
        / outputs: near 0 when a model answers everything alike) fractions.
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"Expected as many hypotheses as references. Received: {len(hypotheses)} "
            f"hypotheses and {len(references)} references"
        )
    if not references:
        return {"bleu": 0.0, "chrf": 0.0, "exact_match": 0.0, "distinct_answers": 0.0}
    exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    return {
        "bleu": round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2),
        "exact_match": round(exact, 4),
        "distinct_answers": round(len(set(hypotheses)) / len(hypotheses), 4),
    }


def collapse_warning(hypotheses, references):
    """A warning for answers that are nearly all alike or empty, else `None`.

    A model that has not learned to use its input answers every input with
    the same sentence (or with nothing), which scores and looks better than
    it is. Flagged: more than half of the outputs empty, or fewer than 5%
    distinct outputs where the references are at least twice as varied.

    Args:
        hypotheses: list of str. Outputs on the validation sources.
        references: list of str. The validation targets.

    Returns:
        str or `None`.
    """
    if not hypotheses:
        return None
    total = len(hypotheses)
    empty = sum(not text.strip() for text in hypotheses) / total
    distinct = len(set(hypotheses)) / total
    if empty > 0.5:
        problem = f"{empty:.0%} of the {total} validation answers are empty"
    elif distinct < 0.05 and 2 * distinct <= len(set(references)) / total:
        common, count = collections.Counter(hypotheses).most_common(1)[0]
        problem = (f"only {distinct:.1%} of the {total} validation answers are distinct "
                   f"({count} of them are {common!r})")
    else:
        return None
    return (f"The model collapsed: {problem}. It has not learned to use its input. Try: "
            "training longer (--time-budget, --epochs), a lower --learning-rate or a longer "
            "--warmup-steps, a smaller model (--d-model, --dff) or vocabulary (--vocab-size) "
            "for little data, or more data.")


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


@dataclasses.dataclass
class _Run:
    """What the steps of `train` share."""

    config: TrainConfig
    harness: TrainingRun
    train_pairs: list
    valid_pairs: list
    strategy: tf.distribute.Strategy
    policy: str
    static_shape: bool
    verbose: int
    source_tokenizer: object = None
    target_tokenizer: object = None
    truncation: dict = None

    def path(self, name):
        return self.harness.path(name)


def train(train_pairs, out_dir, valid_pairs=None, config=None, *, tokenizers=None,
          callbacks=None, samples=5, verbose=1, **options):
    """Train a Transformer on sentence pairs, evaluate it and save it in `out_dir`.

    Re-running with the same `out_dir` after an interruption (a crash, Ctrl-C,
    a killed job) resumes from the last finished epoch.

    Args:
        train_pairs: list of `(source, target)` str pairs.
        out_dir: str. Output directory (created). It ends up holding a
            reloadable translator (`model.keras`, vocabularies,
            `config.json` with the training options), `best.weights.h5`,
            `history.csv`, `metrics.json`, `history.png`, `attention.png`
            and TensorBoard `logs/`.
        valid_pairs: list of pairs, or `None` for a seeded `valid_fraction`
            split of `train_pairs`. The best weights and early stopping
            follow the chrF of its greedy translations.
        config: `TrainConfig`. Defaults to `None` (`TrainConfig()`).
        tokenizers: `(source_tokenizer, target_tokenizer)` to use instead of
            learning vocabularies (their special ids become the model's).
            Defaults to `None`.
        callbacks: list of extra `keras.callbacks.Callback`. Defaults to `None`.
        samples: int. Validation samples printed at the end. Defaults to `5`.
        verbose: int. `0` silent, `1` progress bars and messages (on stderr,
            Keras' bars on stdout). Defaults to `1`.
        **options: `TrainConfig` fields that override `config`'s, e.g.
            `tokenizer="word", epochs=8`; see `TrainConfig` for all of them
            and their defaults.

    Returns:
        `TrainResult`.

    Raises:
        InputError: (a `ValueError`) for a bad option value or unusable data.
        CollapseWarning: (a warning) when the validation answers are nearly
            all alike or empty.
    """
    start = time.monotonic()
    try:
        config = dataclasses.replace(config or TrainConfig(), **options)
    except TypeError as error:  # an unknown option
        raise TypeError(f"train() got an unknown option: {error}") from None
    run = _prepare(train_pairs, valid_pairs, out_dir, config, verbose)
    _vocabularies(run, tokenizers)
    model = _build_model(run)
    history, stopped = _fit(run, model, callbacks)
    return _evaluate_and_save(run, model, history, stopped, samples, start)


def _prepare(train_pairs, valid_pairs, out_dir, config, verbose):
    """Strategy, dtype policy, data split, output directory and seeds."""
    strategy = get_strategy(config.strategy)  # first: some strategies configure the runtime.
    # Keras averages a first batch over the workers to build the model: their
    # batches must have one shape. TPUs need one shape anyway.
    static_shape = config.static_shape or isinstance(
        strategy, (tf.distribute.TPUStrategy, tf.distribute.MultiWorkerMirroredStrategy))
    train_pairs = list(train_pairs)
    if not train_pairs:
        raise InputError("Received an invalid value for argument `train_pairs`: it is empty.")
    if valid_pairs is None:
        train_pairs, valid_pairs = split_pairs(train_pairs, config.valid_fraction, config.seed)
    valid_pairs = list(valid_pairs)
    if not valid_pairs:
        raise InputError("Received an invalid value for argument `valid_pairs`: it is empty.")
    if static_shape and len(train_pairs) < config.batch_size:
        raise InputError(
            f"static_shape drops the last smaller batch, and the {len(train_pairs)} training "
            f"pairs do not fill one batch of {config.batch_size}: lower `batch_size`"
        )
    if config.batch_size % strategy.num_replicas_in_sync:
        raise InputError(
            f"batch_size={config.batch_size} is the global batch and must divide evenly over "
            f"the {strategy.num_replicas_in_sync} replicas of the strategy"
        )
    harness = TrainingRun(worker_directory(out_dir), config, MONITOR, "max", verbose)
    run = _Run(config, harness, train_pairs, valid_pairs, strategy,
               dtype_policy(config.mixed_precision), static_shape, verbose)
    keras.utils.set_random_seed(config.seed)
    log(f"{len(train_pairs)} training pairs, {len(valid_pairs)} validation pairs", verbose)
    return run


def _vocabularies(run, tokenizers):
    """The given tokenizers, the vocabularies of the run being resumed, or new ones;
    and how many pairs they make too long for `max_length`."""
    config, verbose = run.config, run.verbose
    source_path, target_path = run.path(SOURCE_VOCAB_FILE), run.path(TARGET_VOCAB_FILE)
    if tokenizers is not None:
        source, target = tokenizers
    elif run.harness.resuming and os.path.isfile(target_path):
        log(f"Resuming the interrupted run in {run.harness.out_dir}: reusing its "
            "vocabularies", verbose)
        options = {"kind": config.tokenizer, "lower_case": config.lower_case}
        source = tokenizer_from_config(options, load_vocabulary(source_path))
        target = tokenizer_from_config(options, load_vocabulary(target_path))
    else:
        cls = get_tokenizer_class(config.tokenizer)
        kind = "a shared " if config.shared_vocabulary else ""
        log(f"Learning {kind}{config.tokenizer} vocabularies ({config.vocab_size} tokens "
            "at most)", verbose)
        sources = [source for source, _ in run.train_pairs]
        targets = [target for _, target in run.train_pairs]
        texts = [sources + targets] if config.shared_vocabulary else [sources, targets]
        learned = [cls.from_texts(side, config.vocab_size, lower_case=config.lower_case,
                                  verbose=progress_verbosity(verbose)) for side in texts]
        source, target = learned[0], learned[-1]
    source.save_vocabulary(source_path)
    target.save_vocabulary(target_path)
    run.source_tokenizer, run.target_tokenizer = source, target
    run.truncation = truncation_stats(run.train_pairs, source, target, config.max_length)
    log(f"Vocabularies: {source.vocab_size} source, {target.vocab_size} target tokens. Cut "
        f"to max_length={config.max_length}: {run.truncation['truncated_sources']} sources "
        f"and {run.truncation['truncated_targets']} targets of {run.truncation['pairs']} "
        "pairs", verbose)


def _build_model(run):
    """The tutorial's `kargs` (vocabularies and special ids from the tokenizers)
    and the config's `Transformer` options, compiled with Adam and the
    schedule, under the strategy's scope."""
    config, source, target = run.config, run.source_tokenizer, run.target_tokenizer
    if source.pad_id != target.pad_id:
        raise InputError(
            "The source and target vocabularies must give <PAD> the same id. Received: "
            f"{source.pad_id} and {target.pad_id}"
        )
    kargs = dict(
        config.model_options(),
        model_name="transformer",
        input_vocab_size=source.vocab_size,
        target_vocab_size=target.vocab_size,
        maximum_position_encoding=config.max_length,
        end_token_idx=target.end_id,
        pad_token_idx=target.pad_id,
        start_token_idx=target.start_id,
    )
    learning_rate = config.learning_rate or default_learning_rate(config.d_model)
    log(f"Model: {kargs}; peak learning rate {learning_rate:.2e} after "
        f"{config.warmup_steps} warm-up steps; dtype policy {run.policy}, "
        f"{run.strategy.num_replicas_in_sync} replica(s)", run.verbose)
    with run.strategy.scope():
        optimizer = recipe_optimizer(config.d_model, config.warmup_steps, learning_rate)
        # Fp16 gets Keras' dynamic loss scaling from `compile` (its policy
        # is `mixed_float16`).
        model = Transformer(**kargs, dtype=run.policy)
        model.build(((None, None), (None, None)))
        model.compile(
            optimizer,
            loss=MaskedLoss(label_smoothing=config.label_smoothing, pad_token_idx=target.pad_id),
            metrics=[MaskedAccuracy(pad_token_idx=target.pad_id)],
            jit_compile=config.jit_compile,
        )
    return model


def _fit(run, model, callbacks):
    """The harness's fit loop, resuming an interrupted run; the validation
    answers' chrF chooses the best weights.

    Returns:
        `(history, stopped_by_time_budget)`.
    """
    config = run.config
    with run.strategy.scope():  # the optimizer's variables are built here on resumption
        initial_epoch = run.harness.restore(model)
    tokenizers = run.source_tokenizer, run.target_tokenizer
    steps_per_epoch = (len(run.train_pairs) // config.batch_size if run.static_shape
                       else math.ceil(len(run.train_pairs) / config.batch_size))
    # Each epoch's batches depend on the seed and the epoch's number only, so
    # a resumed run trains on what an uninterrupted one would have.
    train_data = make_dataset(run.train_pairs, *tokenizers, config.max_length,
                              config.batch_size, shuffle=True, seed=config.seed, bucket=True,
                              epochs=config.epochs, initial_epoch=initial_epoch,
                              static_shape=run.static_shape, drop_remainder=run.static_shape,
                              token_dropout=config.token_dropout)
    valid_data = make_dataset(run.valid_pairs, *tokenizers, config.max_length,
                              config.batch_size, bucket=False, static_shape=run.static_shape)
    scored = run.valid_pairs[:SCORED_VALID_PAIRS]
    # One translator for every epoch: a new one would trace its tokenizing
    # functions again each time.
    translator = Translator(model, *tokenizers)

    def validation_scores(_model):  # the model `translator` holds
        scores, hypotheses, references = evaluate(translator, scored, verbose=0)
        if collapse_warning(hypotheses, references):
            scores["chrf"] = 0.0
        return scores

    return run.harness.fit(model, train_data, valid_data, steps_per_epoch, initial_epoch,
                           callbacks=callbacks or (), scores=EpochScores(validation_scores),
                           goal=100.0, tensorboard=True, fit_steps=steps_per_epoch)


def _evaluate_and_save(run, model, history, stopped, samples, start):
    """The saved translator (best weights), validation scores, samples, plots."""
    verbose = run.verbose
    translator = Translator(model, run.source_tokenizer, run.target_tokenizer)
    translator.save(run.harness.out_dir, train_config=run.config.to_dict())
    log(f"Decoding {len(run.valid_pairs)} validation sentences (greedy)", verbose)
    scores, hypotheses, references = evaluate(translator, run.valid_pairs,
                                              verbose=progress_verbosity(verbose))
    shown = list(zip(run.valid_pairs, hypotheses, references))[:samples]
    for (source, _), hypothesis, reference in shown:
        log(f"  source:    {source}\n  reference: {reference}\n  output:    {hypothesis}",
            verbose)
    warning = collapse_warning(hypotheses, references)
    if warning:
        warnings.warn(warning, CollapseWarning, stacklevel=3)

    metrics = dict(
        scores,
        epochs=len(history.get("loss", [])),
        stopped_by_time_budget=stopped,
        seconds=round(time.monotonic() - start, 1),
        truncated_sources=run.truncation["truncated_sources"],
        truncated_targets=run.truncation["truncated_targets"],
    )
    # The first validation source with a token and an output to show.
    for source, _ in run.valid_pairs:
        weights, source_tokens, target_tokens = translator.attention(source)
        if weights.size:
            plot_attention(weights, source_tokens, target_tokens, run.path(ATTENTION_PLOT),
                           title=f"Cross-attention, last decoder layer: {source}")
            break
    run.harness.finish(history, metrics)
    log(f"Validation: BLEU {metrics['bleu']}, chrF {metrics['chrf']}, exact match "
        f"{metrics['exact_match']}, distinct answers {metrics['distinct_answers']}. "
        f"Saved to {run.harness.out_dir}", verbose)
    return TrainResult(translator, history, metrics, run.harness.out_dir)
