"""The encoder-only recipes: BERT-style pretraining, then text classification.

`pretrain` learns a vocabulary with `[CLS]`, `[SEP]` and `[MASK]` and trains a
`MaskedLanguageModel` on plain texts; `fine_tune` puts a `SequenceClassifier`
on its encoder (or on a fresh one) and trains it on `(text, label)` pairs. Both
are robust the way `train` is: the best weights on validation kept, early
stopping, resumption after an interruption (re-run with the same `out_dir`),
a time budget, `history.csv`, `metrics.json` and plots.
"""

import collections
import dataclasses
import json
import math
import os
import shutil
import sys
import time

import keras
import numpy as np

from keras_transformer._files import write_text
from keras_transformer.bert import MaskedLanguageModel, SequenceClassifier, bert_encoder
from keras_transformer.callbacks import Backup, BestWeights, EarlyStopping, TimeBudget
from keras_transformer.config import ClassifyConfig, PretrainConfig
from keras_transformer.data.bert import classification_dataset, mlm_dataset, pack_inputs
from keras_transformer.errors import InputError
from keras_transformer.plotting import plot_confusion_matrix, plot_history
from keras_transformer.recipe import progress_verbosity, read_history, split_pairs
from keras_transformer.text.tokenizers import (
    get_tokenizer_class,
    load_vocabulary,
    tokenizer_from_config,
)
from keras_transformer.training import CustomSchedule, MaskedAccuracy, MaskedLoss

MODEL_FILE = "model.keras"
VOCAB_FILE = "vocabulary.txt"
CONFIG_FILE = "config.json"
BACKUP_DIR = "backup"
BEST_WEIGHTS_FILE = "best.weights.h5"
HISTORY_FILE = "history.csv"
METRICS_FILE = "metrics.json"
HISTORY_PLOT = "history.png"
CONFUSION_PLOT = "confusion.png"


@dataclasses.dataclass
class PretrainResult:
    """What `pretrain` returns: the `MaskedLanguageModel` (best validation
    weights), its tokenizer, the per-epoch history, `metrics` and `out_dir`."""

    model: MaskedLanguageModel
    tokenizer: object
    history: dict
    metrics: dict
    out_dir: str


@dataclasses.dataclass
class ClassifyResult:
    """What `fine_tune` returns: the trained `TextClassifier`, the per-epoch
    history, `metrics` (validation accuracy, macro-F1, confusion matrix, ...)
    and `out_dir`."""

    classifier: "TextClassifier"
    history: dict
    metrics: dict
    out_dir: str


class TextClassifier:
    """Text in, label out: a `SequenceClassifier` with its tokenizer and labels.

    Args:
        model: a `SequenceClassifier`.
        tokenizer: the tokenizer the model was trained with (with `[CLS]`
            and `[SEP]`).
        labels: list of str. The class names; index = class id.
    """

    def __init__(self, model, tokenizer, labels):
        if len(labels) != model.num_classes:
            raise ValueError(
                f"Received {len(labels)} labels for a model with {model.num_classes} classes"
            )
        self.model, self.tokenizer, self.labels = model, tokenizer, list(labels)

    @property
    def max_length(self):
        return self.model.encoder.maximum_position_encoding

    def encode(self, texts):
        """Texts -> `(token_ids, segment_ids)` as the model reads them."""
        return pack_inputs(self.tokenizer.tokenize(list(texts)), cls_id=self.tokenizer.cls_id,
                           sep_id=self.tokenizer.sep_id, pad_id=self.tokenizer.pad_id,
                           max_length=self.max_length)

    def predict_proba(self, texts, batch_size=256):
        """Texts -> class probabilities, float32 `(len(texts), num_classes)`."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, len(self.labels)), np.float32)
        outputs = []
        for start in range(0, len(texts), batch_size):
            logits = self.model(self.encode(texts[start : start + batch_size]), training=False)
            outputs.append(keras.ops.convert_to_numpy(keras.ops.softmax(logits)))
        return np.concatenate(outputs)

    def predict(self, texts, batch_size=256):
        """A str or a list of str -> its label, or the list of their labels."""
        single = isinstance(texts, str)
        probabilities = self.predict_proba([texts] if single else texts, batch_size)
        labels = [self.labels[i] for i in probabilities.argmax(-1)]
        return labels[0] if single else labels

    def attention(self, text):
        """The `[CLS]` row of the last layer's self-attention for `text`.

        Returns:
            `(weights (heads, S), tokens)`: how much `[CLS]` attends to each
            token of the packed input, and those tokens.
        """
        ids, segments = self.encode([text])
        _, weights = self.model((ids, segments), training=False, return_attention_weights=True)
        last = weights[f"encoder_layer{len(weights)}"][0, :, 0]  # (heads, S)
        tokens = [t.decode("utf-8") for t in self.tokenizer.id_to_token(ids[0]).numpy()]
        return keras.ops.convert_to_numpy(last), tokens

    def save(self, directory, **extra_config):
        """Write `model.keras`, `vocabulary.txt` and `config.json` to `directory`."""
        os.makedirs(directory, exist_ok=True)
        self.model.save(os.path.join(directory, MODEL_FILE))
        self.tokenizer.save_vocabulary(os.path.join(directory, VOCAB_FILE))
        config = {"tokenizer": self.tokenizer.get_config(), "labels": self.labels,
                  **extra_config}
        write_text(os.path.join(directory, CONFIG_FILE), json.dumps(config, indent=2,
                                                                     ensure_ascii=False))

    @classmethod
    def load(cls, directory):
        """Read a directory written by `save` (or `fine_tune`)."""
        model, tokenizer, config = _load_model_dir(directory)
        if "labels" not in config or not isinstance(model, SequenceClassifier):
            raise InputError(f"{directory}: not a classifier directory (written by "
                             "`keras-transformer classify`)")
        return cls(model, tokenizer, config["labels"])


def _load_model_dir(directory):
    """`(model, tokenizer, config)` of a directory written by a recipe here."""
    paths = [os.path.join(directory, name) for name in (MODEL_FILE, VOCAB_FILE, CONFIG_FILE)]
    missing = [os.path.basename(path) for path in paths if not os.path.isfile(path)]
    if missing:
        raise InputError(f"{directory}: not a model directory (it lacks {missing})")
    with open(paths[2], encoding="utf-8") as f:
        config = json.load(f)
    tokenizer = tokenizer_from_config(config["tokenizer"], load_vocabulary(paths[1]))
    return keras.saving.load_model(paths[0]), tokenizer, config


def load_pretrained(directory):
    """`(MaskedLanguageModel, tokenizer)` from a directory written by `pretrain`."""
    model, tokenizer, _ = _load_model_dir(directory)
    if not isinstance(model, MaskedLanguageModel):
        raise InputError(f"{directory}: not a pretrained model directory (written by "
                         "`keras-transformer pretrain`)")
    return model, tokenizer


def classification_metrics(predictions, references, labels):
    """Accuracy, macro-F1, per-class F1 and the confusion matrix.

    Args:
        predictions, references: sequences of class ids.
        labels: list of the class names.

    Returns:
        dict `{"accuracy", "macro_f1", "f1": {label: f1}, "confusion_matrix"}`
        (rows: true class, columns: predicted).

    Example:
    >>> classification_metrics([0, 1, 1], [0, 1, 0], ["a", "b"])["accuracy"]
    0.6667
    """
    n = len(labels)
    matrix = np.zeros((n, n), np.int64)
    for reference, prediction in zip(references, predictions):
        matrix[reference, prediction] += 1
    f1 = {}
    for i, label in enumerate(labels):
        true_positive = matrix[i, i]
        denominator = matrix[i].sum() + matrix[:, i].sum()
        f1[label] = round(float(2 * true_positive / denominator) if denominator else 0.0, 4)
    total = matrix.sum()
    return {
        "accuracy": round(float(np.trace(matrix) / total) if total else 0.0, 4),
        "macro_f1": round(float(np.mean(list(f1.values()))), 4),
        "f1": f1,
        "confusion_matrix": matrix.tolist(),
    }


def _log(message, verbose):
    if verbose:
        print(message, file=sys.stderr, flush=True)


def _options(config, default, options):
    try:
        return dataclasses.replace(config or default, **options)
    except TypeError as error:  # an unknown option
        raise TypeError(f"got an unknown option: {error}") from None


def _learn_tokenizer(texts, config, out_dir, resuming, verbose):
    """The vocabulary of the run being resumed, or a new one with the encoder tokens."""
    path = os.path.join(out_dir, VOCAB_FILE)
    if resuming and os.path.isfile(path):
        _log(f"Resuming the interrupted run in {out_dir}: reusing its vocabulary", verbose)
        return tokenizer_from_config({"kind": config.tokenizer, "lower_case": config.lower_case},
                                     load_vocabulary(path))
    _log(f"Learning a {config.tokenizer} vocabulary ({config.vocab_size} tokens at most)",
         verbose)
    return get_tokenizer_class(config.tokenizer).from_texts(
        texts, config.vocab_size, lower_case=config.lower_case, encoder_tokens=True,
        verbose=progress_verbosity(verbose))


def _compile(model, config, loss, metrics):
    """AdamW (BERT's optimizer) with warm-up to `config.learning_rate`, then
    inverse-square-root decay (the paper's schedule)."""
    optimizer = keras.optimizers.AdamW(
        CustomSchedule(model.encoder.d_model, config.warmup_steps, config.learning_rate),
        weight_decay=0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    model.compile(optimizer, loss=loss, metrics=metrics, jit_compile=config.jit_compile)


def _fit(model, train_data, valid_data, steps_per_epoch, out_dir, config, monitor, mode,
         callbacks, verbose):
    """`model.fit` with best weights, early stopping, a time budget and resumption.

    Returns:
        `(history, stopped_by_time_budget)`.
    """
    history_path = os.path.join(out_dir, HISTORY_FILE)
    best_path = os.path.join(out_dir, BEST_WEIGHTS_FILE)
    backup = Backup(os.path.join(out_dir, BACKUP_DIR))
    state = backup.read_state()
    earlier = read_history(history_path) if state else {}
    if not state:  # files of a finished earlier run must not mix with this one.
        for stale in (history_path, best_path):
            if os.path.exists(stale):
                os.remove(stale)
    initial_epoch = backup.restore(model) if state else 0
    if initial_epoch:
        _log(f"Resuming after epoch {initial_epoch}", verbose)
    budget = TimeBudget(config.time_budget) if config.time_budget is not None else None
    if not (state and state["finished"]) and initial_epoch < config.epochs:
        pick = max if mode == "max" else min
        fit_callbacks = [
            BestWeights(best_path, monitor, mode=mode,
                        best=pick(earlier[monitor]) if earlier.get(monitor) else None),
            EarlyStopping(monitor, mode=mode, patience=config.patience,
                          earlier=earlier.get(monitor, []),
                          start_from_epoch=math.ceil(config.warmup_steps / steps_per_epoch)),
            keras.callbacks.TerminateOnNaN(),
            keras.callbacks.CSVLogger(history_path, append=True),
        ] + ([budget] if budget else []) + list(callbacks or []) + [backup]
        model.fit(train_data, validation_data=valid_data, epochs=config.epochs,
                  initial_epoch=initial_epoch, callbacks=fit_callbacks, shuffle=False,
                  verbose=progress_verbosity(verbose))
        backup.finish()
    if os.path.isfile(best_path):
        model.load_weights(best_path)
    return read_history(history_path), bool(budget and budget.stopped)


def pretrain(texts, out_dir, valid_texts=None, config=None, *, callbacks=None, verbose=1,
             **options):
    """Pretrain BERT's encoder with the masked language model on `texts`.

    Re-running with the same `out_dir` after an interruption resumes from the
    last finished epoch.

    Args:
        texts: list of str. One text (sentence, question, ...) each.
        out_dir: str. Output directory: `model.keras` (the
            `MaskedLanguageModel`), `vocabulary.txt`, `config.json`,
            `best.weights.h5`, `history.csv`, `metrics.json`, `history.png`.
        valid_texts: list of str, or `None` for a seeded `valid_fraction`
            split of `texts`. The best weights and early stopping follow its
            masked-LM loss.
        config: `PretrainConfig`. Defaults to `None` (`PretrainConfig()`).
        callbacks: list of extra `keras.callbacks.Callback`.
        verbose: int. `0` silent, `1` progress and messages on stderr.
        **options: `PretrainConfig` fields that override `config`'s.

    Returns:
        `PretrainResult`.
    """
    start = time.monotonic()
    config = _options(config, PretrainConfig(), options)
    texts = [text for text in texts if text.strip()]
    if valid_texts is None:
        texts, valid_texts = split_pairs(texts, config.valid_fraction, config.seed)
    if not texts or not valid_texts:
        raise InputError("Received no texts to train or validate on (after removing "
                         "blank ones)")
    keras.utils.set_random_seed(config.seed)
    os.makedirs(out_dir, exist_ok=True)
    resuming = os.path.isdir(os.path.join(out_dir, BACKUP_DIR))
    _log(f"{len(texts)} training texts, {len(valid_texts)} validation texts", verbose)
    tokenizer = _learn_tokenizer(texts, config, out_dir, resuming, verbose)
    tokenizer.save_vocabulary(os.path.join(out_dir, VOCAB_FILE))

    model = MaskedLanguageModel(
        num_layers=config.num_layers, d_model=config.d_model, num_heads=config.num_heads,
        dff=config.dff, input_vocab_size=tokenizer.vocab_size,
        maximum_position_encoding=config.max_length, rate=config.rate,
        pad_token_idx=tokenizer.pad_id)
    model.build((None, None))
    _compile(model, config, MaskedLoss(pad_token_idx=tokenizer.pad_id),
             [MaskedAccuracy(pad_token_idx=tokenizer.pad_id)])
    _log(f"Masked LM: {model.count_params():,} parameters, {tokenizer.vocab_size} tokens",
         verbose)
    train_data = mlm_dataset(texts, tokenizer, config.max_length, config.batch_size,
                             config.mask_rate, shuffle=True, seed=config.seed)
    valid_data = mlm_dataset(valid_texts, tokenizer, config.max_length, config.batch_size,
                             config.mask_rate)
    history, stopped = _fit(model, train_data, valid_data,
                            math.ceil(len(texts) / config.batch_size), out_dir, config,
                            "val_loss", "min", callbacks, verbose)

    model.save(os.path.join(out_dir, MODEL_FILE))
    write_text(os.path.join(out_dir, CONFIG_FILE), json.dumps(
        {"tokenizer": tokenizer.get_config(), "train": config.to_dict()}, indent=2))
    valid_loss, valid_accuracy = model.evaluate(valid_data, verbose=0)
    metrics = {"val_loss": round(float(valid_loss), 4),
               "val_masked_accuracy": round(float(valid_accuracy), 4),
               "epochs": len(history.get("loss", [])), "stopped_by_time_budget": stopped,
               "seconds": round(time.monotonic() - start, 1)}
    _finish(out_dir, history, metrics)
    _log(f"Masked LM on the validation texts: loss {metrics['val_loss']}, accuracy of the "
         f"masked tokens {metrics['val_masked_accuracy']}. Saved to {out_dir}", verbose)
    return PretrainResult(model, tokenizer, history, metrics, out_dir)


def _examples(pairs):
    """`(text, label)` pairs as str, labels stripped of spaces; blank texts dropped."""
    return [(str(text), str(label).strip()) for text, label in pairs if str(text).strip()]


def _finish(out_dir, history, metrics):
    write_text(os.path.join(out_dir, METRICS_FILE), json.dumps(metrics, indent=2,
                                                               ensure_ascii=False))
    plot_history(history, os.path.join(out_dir, HISTORY_PLOT))
    # Everything is saved: a re-run now starts a new training.
    shutil.rmtree(os.path.join(out_dir, BACKUP_DIR), ignore_errors=True)


def fine_tune(examples, out_dir, valid_examples=None, pretrained=None, config=None, *,
              callbacks=None, verbose=1, **options):
    """Train a text classifier on `(text, label)` pairs, from a pretrained
    encoder or from scratch.

    Re-running with the same `out_dir` after an interruption resumes from the
    last finished epoch.

    Args:
        examples: list of `(text, label)`; labels are str or int (class
            names: their sorted distinct values).
        out_dir: str. Output directory: a reloadable `TextClassifier`
            (`model.keras`, `vocabulary.txt`, `config.json`),
            `best.weights.h5`, `history.csv`, `metrics.json`, `history.png`,
            `confusion.png`.
        valid_examples: pairs, or `None` for a seeded `valid_fraction` split.
            The best weights and early stopping follow its accuracy.
        pretrained: a directory written by `pretrain`, a `PretrainResult`,
            or `None` (a fresh encoder). The classifier trains the pretrained
            encoder itself, with its vocabulary and sizes.
        config: `ClassifyConfig`. Defaults to `None` (`ClassifyConfig()`).
        callbacks: list of extra `keras.callbacks.Callback`.
        verbose: int. `0` silent, `1` progress and messages on stderr.
        **options: `ClassifyConfig` fields that override `config`'s.

    Returns:
        `ClassifyResult`.
    """
    start = time.monotonic()
    config = _options(config, ClassifyConfig(), options)
    examples = _examples(examples)
    if valid_examples is None:
        examples, valid_examples = split_pairs(examples, config.valid_fraction, config.seed)
    valid_examples = _examples(valid_examples)
    labels = sorted({label for _, label in examples})
    if len(labels) < 2:
        raise InputError(f"Need at least 2 different labels to classify. Received: {labels}")
    unknown = sorted({label for _, label in valid_examples} - set(labels))
    if unknown:
        raise InputError(f"The validation examples have labels never seen in training: "
                         f"{unknown}")
    keras.utils.set_random_seed(config.seed)
    os.makedirs(out_dir, exist_ok=True)
    resuming = os.path.isdir(os.path.join(out_dir, BACKUP_DIR))
    counts = collections.Counter(label for _, label in examples)
    _log(f"{len(examples)} training examples ({dict(sorted(counts.items()))}), "
         f"{len(valid_examples)} validation examples", verbose)

    if isinstance(pretrained, PretrainResult):
        mlm, tokenizer = pretrained.model, pretrained.tokenizer
    elif pretrained is not None:
        mlm, tokenizer = load_pretrained(pretrained)
    if pretrained is not None:
        encoder = mlm.encoder
        _log(f"Fine-tuning the pretrained encoder ({encoder.count_params():,} parameters)",
             verbose)
    else:
        tokenizer = _learn_tokenizer([text for text, _ in examples], config, out_dir,
                                     resuming, verbose)
        encoder = bert_encoder(config.num_layers, config.d_model, config.num_heads, config.dff,
                               tokenizer.vocab_size, config.max_length, config.rate,
                               tokenizer.pad_id)
    tokenizer.save_vocabulary(os.path.join(out_dir, VOCAB_FILE))
    model = SequenceClassifier(encoder, len(labels), pooling=config.pooling, rate=config.rate)
    model.build((None, None))
    _compile(model, config, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
             ["accuracy"])
    index = {label: i for i, label in enumerate(labels)}
    max_length = encoder.maximum_position_encoding

    def dataset(pairs, shuffle):
        return classification_dataset([t for t, _ in pairs], [index[y] for _, y in pairs],
                                      tokenizer, max_length, config.batch_size, shuffle,
                                      config.seed)

    history, stopped = _fit(model, dataset(examples, True), dataset(valid_examples, False),
                            math.ceil(len(examples) / config.batch_size), out_dir, config,
                            "val_accuracy", "max", callbacks, verbose)

    classifier = TextClassifier(model, tokenizer, labels)
    classifier.save(out_dir, train=config.to_dict(),
                    pretrained=pretrained if isinstance(pretrained, str) else
                    getattr(pretrained, "out_dir", None))
    predictions = classifier.predict_proba([t for t, _ in valid_examples]).argmax(-1)
    scores = classification_metrics(predictions, [index[y] for _, y in valid_examples],
                                    labels)
    metrics = dict(scores, labels=labels, epochs=len(history.get("loss", [])),
                   stopped_by_time_budget=stopped, seconds=round(time.monotonic() - start, 1))
    plot_confusion_matrix(scores["confusion_matrix"], labels,
                          os.path.join(out_dir, CONFUSION_PLOT),
                          title=f"Validation: accuracy {scores['accuracy']:.3f}")
    _finish(out_dir, history, metrics)
    _log(f"Validation: accuracy {metrics['accuracy']}, macro-F1 {metrics['macro_f1']}. "
         f"Saved to {out_dir}", verbose)
    return ClassifyResult(classifier, history, metrics, out_dir)
