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
import math
import os
import time

import keras
import numpy as np

from keras_transformer.data.bert import classification_dataset, mlm_dataset, pack_inputs
from keras_transformer.errors import InputError
from keras_transformer.layers.encoder import Encoder
from keras_transformer.models.bert import MaskedLanguageModel, SequenceClassifier, bert_encoder
from keras_transformer.plotting import plot_confusion_matrix
from keras_transformer.recipes.callbacks import AccuracyThenLoss
from keras_transformer.recipes.config import ClassifyConfig, PretrainConfig
from keras_transformer.recipes.harness import (
    CONFIG_FILE,
    ModelDirectory,
    TrainingRun,
    log,
    progress_verbosity,
    split_pairs,
)
from keras_transformer.text.tokenizers import (
    get_tokenizer_class,
    load_vocabulary,
    tokenizer_from_config,
)
from keras_transformer.training import MaskedAccuracy, MaskedLoss, recipe_optimizer

VOCAB_FILE = "vocabulary.txt"
CONFUSION_PLOT = "confusion.png"
CLASSIFIER = "classifier"
PRETRAINED = "pretrained model"


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
        """Write `model.keras`, `vocabulary.txt` and `config.json` to `directory`,
        each file atomically."""
        ModelDirectory(directory, CLASSIFIER).save(
            self.model, {"tokenizer": (self.tokenizer, VOCAB_FILE)}, labels=self.labels,
            **extra_config)

    @classmethod
    def load(cls, directory):
        """Read a directory written by `save` (or `fine_tune`).

        Raises:
            InputError: naming the file, for a missing, damaged or foreign file.
        """
        model_dir = ModelDirectory(directory, CLASSIFIER)
        model, tokenizers, config = model_dir.load(SequenceClassifier,
                                                   {"tokenizer": VOCAB_FILE})
        labels = config.get("labels")
        if not isinstance(labels, list) or len(labels) != model.num_classes:
            raise InputError(f"{model_dir.path(CONFIG_FILE)}: not a classifier "
                             f"configuration (its labels do not fit a model of "
                             f"{model.num_classes} classes)")
        return cls(model, tokenizers["tokenizer"], labels)


def load_pretrained(directory):
    """`(MaskedLanguageModel, tokenizer)` from a directory written by `pretrain`."""
    model, tokenizers, _ = ModelDirectory(directory, PRETRAINED).load(
        MaskedLanguageModel, {"tokenizer": VOCAB_FILE})
    return model, tokenizers["tokenizer"]


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


def _options(config, default, options):
    try:
        return dataclasses.replace(config or default, **options)
    except TypeError as error:  # an unknown option
        raise TypeError(f"got an unknown option: {error}") from None


def _learn_tokenizer(texts, config, run):
    """The vocabulary of the run being resumed, or a new one with the encoder tokens."""
    path = run.path(VOCAB_FILE)
    if run.resuming and os.path.isfile(path):
        log(f"Resuming the interrupted run in {run.out_dir}: reusing its vocabulary",
            run.verbose)
        return tokenizer_from_config({"kind": config.tokenizer, "lower_case": config.lower_case},
                                     load_vocabulary(path))
    log(f"Learning a {config.tokenizer} vocabulary ({config.vocab_size} tokens at most)",
        run.verbose)
    return get_tokenizer_class(config.tokenizer).from_texts(
        texts, config.vocab_size, lower_case=config.lower_case, encoder_tokens=True,
        verbose=progress_verbosity(run.verbose))


def _compile(model, config, loss, metrics):
    """AdamW (BERT's optimizer) with warm-up to `config.learning_rate` (`None`:
    the paper's peak for `d_model`, whatever the warm-up), then
    inverse-square-root decay (the paper's schedule)."""
    optimizer = recipe_optimizer(model.encoder.d_model, config.warmup_steps,
                                 config.learning_rate, weight_decay=0.01)
    model.compile(optimizer, loss=loss, metrics=metrics, jit_compile=config.jit_compile)


def _fit(run, model, train_data, valid_data, steps_per_epoch, callbacks, scores=None,
         best_after_warmup=False):
    """The harness's fit loop, resuming an interrupted run."""
    initial_epoch = run.restore(model)
    return run.fit(model, train_data, valid_data, steps_per_epoch, initial_epoch,
                   callbacks=callbacks or (), scores=scores,
                   best_after_warmup=best_after_warmup)


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
    run = TrainingRun(out_dir, config, "val_loss", "min", verbose)
    log(f"{len(texts)} training texts, {len(valid_texts)} validation texts", verbose)
    tokenizer = _learn_tokenizer(texts, config, run)
    tokenizer.save_vocabulary(run.path(VOCAB_FILE))

    model = MaskedLanguageModel(**config.model_options(), input_vocab_size=tokenizer.vocab_size,
                                maximum_position_encoding=config.max_length,
                                pad_token_idx=tokenizer.pad_id)
    model.build((None, None))
    _compile(model, config, MaskedLoss(pad_token_idx=tokenizer.pad_id),
             [MaskedAccuracy(pad_token_idx=tokenizer.pad_id)])
    log(f"Masked LM: {model.count_params():,} parameters, {tokenizer.vocab_size} tokens",
        verbose)
    train_data = mlm_dataset(texts, tokenizer, config.max_length, config.batch_size,
                             config.mask_rate, shuffle=True, seed=config.seed)
    valid_data = mlm_dataset(valid_texts, tokenizer, config.max_length, config.batch_size,
                             config.mask_rate)
    history, stopped = _fit(run, model, train_data, valid_data,
                            math.ceil(len(texts) / config.batch_size), callbacks)

    ModelDirectory(out_dir, PRETRAINED).save(model, {"tokenizer": (tokenizer, VOCAB_FILE)},
                                             train=config.to_dict())
    valid_loss, valid_accuracy = model.evaluate(valid_data, verbose=0)
    metrics = {"val_loss": round(float(valid_loss), 4),
               "val_masked_accuracy": round(float(valid_accuracy), 4),
               "epochs": len(history.get("loss", [])), "stopped_by_time_budget": stopped,
               "seconds": round(time.monotonic() - start, 1)}
    run.finish(history, metrics)
    log(f"Masked LM on the validation texts: loss {metrics['val_loss']}, accuracy of the "
        f"masked tokens {metrics['val_masked_accuracy']}. Saved to {out_dir}", verbose)
    return PretrainResult(model, tokenizer, history, metrics, out_dir)


def _examples(pairs):
    """`(text, label)` pairs as str, labels stripped of spaces; blank texts dropped."""
    return [(str(text), str(label).strip()) for text, label in pairs if str(text).strip()]


def _labels(examples, valid_examples):
    """The class names: the training labels, sorted; every validation label among them."""
    labels = sorted({label for _, label in examples})
    if len(labels) < 2:
        raise InputError(f"Need at least 2 different labels to classify. Received: {labels}")
    unknown = sorted({label for _, label in valid_examples} - set(labels))
    if unknown:
        raise InputError(f"The validation examples have labels never seen in training: "
                         f"{unknown}")
    return labels


def _encoder(pretrained, texts, config, run):
    """`(encoder, tokenizer)`: the pretrained ones, or a fresh encoder and a vocabulary
    learned from `texts`."""
    if pretrained is None:
        tokenizer = _learn_tokenizer(texts, config, run)
        return bert_encoder(**config.model_options(), input_vocab_size=tokenizer.vocab_size,
                            maximum_position_encoding=config.max_length,
                            pad_token_idx=tokenizer.pad_id), tokenizer
    if isinstance(pretrained, PretrainResult):  # the caller's model: train a copy
        encoder, tokenizer = _copy(pretrained.model.encoder), pretrained.tokenizer
    else:  # freshly read from disk: nobody else holds it
        mlm, tokenizer = load_pretrained(pretrained)
        encoder = mlm.encoder
    log(f"Fine-tuning the pretrained encoder ({encoder.count_params():,} parameters)",
        run.verbose)
    return encoder, tokenizer


def _copy(encoder):
    """A new encoder with `encoder`'s configuration and weights: fine-tuning
    trains the copy, so that a `PretrainResult` fine-tuned several times
    starts each classifier from the pretrained weights."""
    copy = Encoder.from_config(encoder.get_config())
    copy.build((None, None))
    copy.set_weights(encoder.get_weights())
    return copy


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
            The best weights and early stopping follow its accuracy, ties
            broken by its loss (`val_score`, see `callbacks.AccuracyThenLoss`),
            both counted from the end of the learning-rate warm-up.
        pretrained: a directory written by `pretrain`, a `PretrainResult`,
            or `None` (a fresh encoder). The classifier trains a copy of the
            pretrained encoder (the `PretrainResult` is left as it was), with
            its vocabulary and sizes.
        config, callbacks, verbose, **options: as in `pretrain`, with a
            `ClassifyConfig` (defaults to `ClassifyConfig()`).

    Returns:
        `ClassifyResult`.
    """
    start = time.monotonic()
    config = _options(config, ClassifyConfig(), options)
    examples = _examples(examples)
    if valid_examples is None:
        examples, valid_examples = split_pairs(examples, config.valid_fraction, config.seed)
    valid_examples = _examples(valid_examples)
    labels = _labels(examples, valid_examples)
    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    config = dataclasses.replace(config, warmup_steps=config.warmup_for(steps_per_epoch))
    keras.utils.set_random_seed(config.seed)
    run = TrainingRun(out_dir, config, "val_score", "max", verbose)
    counts = collections.Counter(label for _, label in examples)
    log(f"{len(examples)} training examples ({dict(sorted(counts.items()))}), "
        f"{len(valid_examples)} validation examples", verbose)

    encoder, tokenizer = _encoder(pretrained, [text for text, _ in examples], config, run)
    tokenizer.save_vocabulary(run.path(VOCAB_FILE))
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

    history, stopped = _fit(run, model, dataset(examples, True), dataset(valid_examples, False),
                            steps_per_epoch, callbacks, AccuracyThenLoss(len(valid_examples)),
                            best_after_warmup=True)

    classifier = TextClassifier(model, tokenizer, labels)
    classifier.save(out_dir, train=config.to_dict(),
                    pretrained=pretrained if isinstance(pretrained, str) else
                    getattr(pretrained, "out_dir", None))
    predictions = classifier.predict_proba([t for t, _ in valid_examples]).argmax(-1)
    scores = classification_metrics(predictions, [index[y] for _, y in valid_examples],
                                    labels)
    metrics = dict(scores, labels=labels, epochs=len(history.get("loss", [])),
                   stopped_by_time_budget=stopped, seconds=round(time.monotonic() - start, 1))
    plot_confusion_matrix(scores["confusion_matrix"], labels, run.path(CONFUSION_PLOT),
                          title=f"Validation: accuracy {scores['accuracy']:.3f}")
    run.finish(history, metrics)
    log(f"Validation: accuracy {metrics['accuracy']}, macro-F1 {metrics['macro_f1']}. "
        f"Saved to {out_dir}", verbose)
    return ClassifyResult(classifier, history, metrics, out_dir)
