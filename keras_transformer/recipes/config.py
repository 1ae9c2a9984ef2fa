"""Every option of the training recipes, and its default, in one place.

`TrainConfig` is the encoder-decoder recipe's (`keras_transformer.train`),
`PretrainConfig` and `ClassifyConfig` the encoder-only recipes'
(`keras_transformer.pretrain`, `keras_transformer.fine_tune`). A recipe's
`**options` override the fields, the CLI flags are generated from them (help
text and choices included), and the `config.json` of a trained model records
the values it was trained with. Nothing here imports TensorFlow.
"""

import dataclasses
import numbers

from keras_transformer import _config
from keras_transformer._config import ACTIVATIONS, POOLINGS, POSITION_ENCODINGS, TOKENIZERS
from keras_transformer.errors import InputError

PRECISIONS = ("bf16", "fp16")
STRATEGIES = ("mirrored", "multi_worker", "tpu")


def _option(default, help, group, type=None, choices=None):
    return dataclasses.field(
        default=default,
        metadata={"help": help, "group": group, "type": type, "choices": choices},
    )


def _override(name, default, help=None):
    """A field of `RecipeConfig` with this recipe's default (and help text)."""
    field = RecipeConfig.__dataclass_fields__[name]
    metadata = dict(field.metadata, help=help or field.metadata["help"])
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class RecipeConfig:
    """The options every recipe has, declared once: its text, its model's sizes
    (the tutorial's `kargs` names) and the run harness's fit loop.

    `TrainConfig`, `PretrainConfig` and `ClassifyConfig` extend it; where a
    recipe's default differs, it overrides the default only (`_override`).
    The defaults here are `TrainConfig`'s.
    """

    # Text.
    tokenizer: str = _option("wordpiece", "wordpiece (sub-words), word (the tutorial's) or "
                             "char", "text", choices=TOKENIZERS)
    vocab_size: int = _option(8000, "largest vocabulary per side", "text", int)
    lower_case: bool = _option(True, "lower-case the text", "text", bool)
    max_length: int = _option(25, "maximum_position_encoding: longer sentences are cut",
                              "text", int)
    # Model: the tutorial's kargs.
    num_layers: int = _option(2, "encoder and decoder layers (each)", "model", int)
    d_model: int = _option(256, "model width", "model", int)
    num_heads: int = _option(8, "attention heads", "model", int)
    dff: int = _option(1024, "inner width of the feed-forward networks", "model", int)
    rate: float = _option(0.1, "dropout rate", "model", float)
    # The fit loop (`harness.TrainingRun`).
    batch_size: int = _option(64, "sentence pairs per step (the global batch under a "
                              "strategy)", "training", int)
    epochs: int = _option(100, "most epochs", "training", int)
    patience: int = _option(10, "early stopping: epochs without a better validation chrF, "
                            "counted once the warm-up is over", "training", int)
    warmup_steps: int = _option(400, "learning-rate warm-up steps", "training", int)
    learning_rate: float = _option(None, "peak learning rate (default: the paper's peak for "
                                   "d_model, (d_model * 4000) ** -0.5)", "training", float)
    time_budget: float = _option(None, "stop training after this many seconds, then "
                                 "evaluate and save", "training", float)
    valid_fraction: float = _option(0.1, "validation share of the data when no validation "
                                    "set is given", "training", float)
    seed: int = _option(0, "seed of the split, the initial weights and the batch order",
                        "training", int)
    jit_compile: bool = _option(False, "XLA-compile the training step", "scale", bool)

    def __post_init__(self):
        _checked(self._check)

    def _check(self):
        _check_common(self)

    def to_dict(self):
        """The options as JSON-compatible values."""
        return dataclasses.asdict(self)

    def model_options(self):
        """The fields that are model options: the keys of a `kargs` dict."""
        keys = _config.kargs_keys()
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name in keys}


@dataclasses.dataclass(frozen=True)
class TrainConfig(RecipeConfig):
    """The options of `keras_transformer.train`, with their defaults.

    The model options are the tutorial's `kargs` (`num_layers`, `d_model`,
    `num_heads`, `dff`, `rate`; `maximum_position_encoding` is `max_length`;
    the vocabulary sizes and special ids come from the tokenizers) plus the
    `Transformer` options. The defaults were chosen by measurement on
    ChatbotData and on a 30-pair toy task (`benchmarks/RESULTS.md`).

    Example:
    >>> config = TrainConfig(d_model=128, dff=512)
    >>> config.num_heads, config.warmup_steps
    (8, 400)
    >>> TrainConfig(d_model=100)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    keras_transformer.errors.InputError: Received an invalid value for argument `d_model`, ...
    """

    shared_vocabulary: bool = _option(False, "one vocabulary learned from both sides",
                                      "text", bool)
    # Model: the Transformer's options.
    norm_first: bool = _option(True, "pre-LayerNorm blocks (post-LN, the tutorial's, "
                               "with --no-norm-first)", "model", bool)
    activation: str = _option("relu", "feed-forward activation", "model",
                              choices=ACTIVATIONS)
    position_encoding: str = _option("sinusoidal", "position encoding", "model",
                                     choices=POSITION_ENCODINGS)
    share_embeddings: bool = _option(False, "one embedding matrix for both sides and the "
                                     "output (needs a shared vocabulary)", "model", bool)
    # Optimisation.
    token_dropout: float = _option(0.1, "share of source tokens replaced with <UNK> in "
                                   "training (robustness to unseen wording)", "training",
                                   float)
    label_smoothing: float = _option(0.1, "label smoothing", "training", float)
    # Speed and scale.
    mixed_precision: str = _option(None, "mixed_bfloat16 or mixed_float16 (with loss "
                                   "scaling) training", "scale", choices=PRECISIONS)
    static_shape: bool = _option(False, "pad every batch to max_length and drop the last "
                                 "smaller one (one shape to compile: TPUs, XLA)", "scale",
                                 bool)
    strategy: str = _option(None, "tf.distribute strategy (multi_worker: one process per "
                            "worker, each with its TF_CONFIG); in Python also a "
                            "tf.distribute.Strategy", "scale", choices=STRATEGIES)

    def _check(self):
        _check_common(self)
        for name in ("token_dropout", "label_smoothing"):
            _config.check_rate(name, getattr(self, name))
        if self.max_length < 2:
            raise InputError(
                "Received an invalid value for argument `max_length`, expected an integer "
                f">= 2 (<SOS> or <END> plus one token). Received: max_length={self.max_length}"
            )
        if self.share_embeddings and not self.shared_vocabulary:
            raise InputError(
                "Received an invalid value for argument `share_embeddings`: one embedding "
                "matrix needs one vocabulary. Received: share_embeddings=True, "
                "shared_vocabulary=False"
            )

    def to_dict(self):
        """The options as JSON-compatible values (a strategy object by its class name)."""
        values = dataclasses.asdict(self)
        if self.strategy is not None and not isinstance(self.strategy, str):
            values["strategy"] = type(self.strategy).__name__
        return values


@dataclasses.dataclass(frozen=True)
class _EncoderConfig(RecipeConfig):
    """What the encoder-only recipes share: the BERT-style encoder of the
    "[Pytorch] Transformer 구현하기" blog post (learned positions, segment
    embeddings, LayerNorm on the embeddings, pre-LN layers with GELU) with the
    tutorial's `kargs` names for its sizes.

    The defaults were chosen on ChatbotData's topic labels
    (`benchmarks/bench_classify.py`, `benchmarks/RESULTS.md`): a 4,000-token
    vocabulary instead of 8,000 together with a fine-tuning peak of 2e-4
    instead of 1e-3 gave about 3 points of accuracy, from scratch and
    pretrained alike, with every label (`ClassifyConfig` now peaks at 5e-4,
    measured with few labels); d_model 128 and dff 512 instead of 256 and 1024 the
    same accuracy from scratch in half the time, and 2.5 times the masked-LM
    epochs in the same time.
    """

    tokenizer: str = _override("tokenizer", "wordpiece",
                               "wordpiece (sub-words), word or char")
    vocab_size: int = _override("vocab_size", 4000,
                                "largest vocabulary, [CLS] [SEP] [MASK] included")
    max_length: int = _override("max_length", 32, "maximum_position_encoding: tokens per "
                                "input, [CLS] and [SEP] included; longer texts are cut")
    num_layers: int = _override("num_layers", 2, "encoder layers")
    d_model: int = _override("d_model", 128)
    num_heads: int = _override("num_heads", 4)
    dff: int = _override("dff", 512)
    batch_size: int = _override("batch_size", 64, "texts per step")
    patience: int = _override("patience", 5,
                              "early stopping: epochs without a better validation score")
    learning_rate: float = _override("learning_rate", 1e-3, "peak learning rate")
    valid_fraction: float = _override("valid_fraction", 0.1, "validation share of the data")


@dataclasses.dataclass(frozen=True)
class PretrainConfig(_EncoderConfig):
    """The options of `keras_transformer.pretrain`: BERT's masked language model.

    Example:
    >>> PretrainConfig().mask_rate
    0.15
    """

    mask_rate: float = _option(0.15, "share of tokens masked (then 80% [MASK], 10% random, "
                               "10% kept)", "training", float)
    patience: int = _override("patience", 10,
                              "early stopping: epochs without a lower validation loss")

    def _check(self):
        _check_common(self)
        _config.check_rate("mask_rate", self.mask_rate)


@dataclasses.dataclass(frozen=True)
class ClassifyConfig(_EncoderConfig):
    """The options of `keras_transformer.fine_tune`: a classifier on BERT's encoder.

    With a pretrained model the vocabulary and the model sizes are the
    pretrained model's and the text and size options here are not used.

    The fine-tuning defaults were chosen with few labels (issue 28,
    `bench_classify.py --labels`, `benchmarks/RESULTS.md`): with 100
    labelled questions, a warm-up of a tenth of the run instead of 400 steps
    (which outlasted the whole run), the best weights ranked after the
    warm-up only, and a peak of 5e-4 instead of 2e-4 (together with 40
    masked-LM epochs instead of 15) took the pretrained classifier from 0.458
    to 0.597 accuracy; RESULTS.md has each step's figure.

    Example:
    >>> ClassifyConfig().pooling
    'cls'
    """

    pooling: str = _option("cls", "classify the [CLS] state (cls) or the mean token state",
                           "model", choices=POOLINGS)
    patience: int = _override("patience", 5, "early stopping: epochs without a better validation "
                              "accuracy (ties: a lower loss), counted once the warm-up is over")
    learning_rate: float = _override("learning_rate", 5e-4, "peak learning rate")
    warmup_steps: int = _override("warmup_steps", None, "learning-rate warm-up steps "
                                  "(default: 400, or a tenth of the most steps, epochs x "
                                  "steps per epoch, when that is fewer)")

    def warmup_for(self, steps_per_epoch):
        """The warm-up steps of a run with `steps_per_epoch`: `warmup_steps`,
        or when it is `None` the recipes' 400 steps, cut to a tenth of
        `epochs * steps_per_epoch` for a small labelled set (100 examples
        make 2 steps per epoch: 400 steps would outlast the whole run).

        Example:
        >>> ClassifyConfig().warmup_for(2), ClassifyConfig().warmup_for(150)
        (20, 400)
        >>> ClassifyConfig(warmup_steps=50).warmup_for(2)
        50
        """
        if self.warmup_steps is not None:
            return self.warmup_steps
        return max(1, min(RecipeConfig.warmup_steps, round(self.epochs * steps_per_epoch / 10)))


def _checked(check):
    """Runs `check()`, turning a `ValueError` into an `InputError` (a user mistake)."""
    try:
        check()
    except InputError:
        raise
    except ValueError as error:
        raise InputError(str(error)) from None


def _check_common(config):
    """The checks every config's fields need: types, choices, sizes, rates."""
    for field in dataclasses.fields(config):
        value, meta = getattr(config, field.name), field.metadata
        if _unset(config, field.name):
            continue
        if field.name == "strategy" and hasattr(value, "scope"):
            continue  # a tf.distribute.Strategy object
        if meta["choices"] is not None:
            _config.check_choice(field.name, value, meta["choices"])
        elif meta["type"] is bool and not isinstance(value, bool):
            raise InputError(
                f"Received an invalid value for argument `{field.name}`, expected "
                f"True or False. Received: {field.name}={value!r}"
            )
    for name in ("vocab_size", "max_length", "num_layers", "d_model", "num_heads", "dff",
                 "batch_size", "epochs", "warmup_steps"):
        if not _unset(config, name):
            _config.check_positive_int(name, getattr(config, name))
    _config.check_divisible(config.d_model, config.num_heads)
    _config.check_non_negative_int("patience", config.patience)
    for name in ("rate", "valid_fraction"):
        _config.check_rate(name, getattr(config, name))
    if config.learning_rate is not None and not _positive_number(config.learning_rate):
        raise InputError(
            "Received an invalid value for argument `learning_rate`, expected a "
            f"number > 0 or None. Received: learning_rate={config.learning_rate!r}"
        )
    if config.time_budget is not None and not (
        _positive_number(config.time_budget) or config.time_budget == 0
    ):
        raise InputError(
            "Received an invalid value for argument `time_budget`, expected a "
            f"number of seconds >= 0 or None. Received: time_budget={config.time_budget!r}"
        )
    if not isinstance(config.seed, numbers.Integral) or isinstance(config.seed, bool):
        raise InputError(
            f"Received an invalid value for argument `seed`, expected an integer. "
            f"Received: seed={config.seed!r}"
        )


def _unset(config, name):
    """Whether the option `name` is an optional value left unset (`None` by default)."""
    return getattr(config, name) is None and config.__dataclass_fields__[name].default is None


def _positive_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0
