"""`TrainConfig`: every option of the training recipe, and its default, in one place.

`keras_transformer.train(..., **options)` overrides its fields, the flags of
`keras-transformer train` and `demo` are generated from them (help text and
choices included), and the `config.json` of a trained model records the
values it was trained with. Nothing here imports TensorFlow.
"""

import dataclasses
import numbers

from keras_transformer import _config
from keras_transformer.errors import InputError

TOKENIZERS = ("wordpiece", "word", "char")
ACTIVATIONS = ("relu", "gelu")
POSITION_ENCODINGS = ("sinusoidal", "learned")
PRECISIONS = ("bf16", "fp16")
STRATEGIES = ("mirrored", "multi_worker", "tpu")


def _option(default, help, group, type=None, choices=None):
    return dataclasses.field(
        default=default,
        metadata={"help": help, "group": group, "type": type, "choices": choices},
    )


@dataclasses.dataclass(frozen=True)
class TrainConfig:
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

    # Text.
    tokenizer: str = _option("wordpiece", "wordpiece (sub-words), word (the tutorial's) or "
                             "char", "text", choices=TOKENIZERS)
    vocab_size: int = _option(8000, "largest vocabulary per side", "text", int)
    shared_vocabulary: bool = _option(False, "one vocabulary learned from both sides",
                                      "text", bool)
    lower_case: bool = _option(True, "lower-case the text", "text", bool)
    max_length: int = _option(25, "maximum_position_encoding: longer sentences are cut",
                              "text", int)
    # Model: the tutorial's kargs and the Transformer's options.
    num_layers: int = _option(2, "encoder and decoder layers (each)", "model", int)
    d_model: int = _option(256, "model width", "model", int)
    num_heads: int = _option(8, "attention heads", "model", int)
    dff: int = _option(1024, "inner width of the feed-forward networks", "model", int)
    rate: float = _option(0.1, "dropout rate", "model", float)
    token_dropout: float = _option(0.1, "share of source tokens replaced with <UNK> in "
                                   "training (robustness to unseen wording)", "training",
                                   float)
    norm_first: bool = _option(True, "pre-LayerNorm blocks (post-LN, the tutorial's, "
                               "with --no-norm-first)", "model", bool)
    activation: str = _option("relu", "feed-forward activation", "model",
                              choices=ACTIVATIONS)
    position_encoding: str = _option("sinusoidal", "position encoding", "model",
                                     choices=POSITION_ENCODINGS)
    share_embeddings: bool = _option(False, "one embedding matrix for both sides and the "
                                     "output (needs a shared vocabulary)", "model", bool)
    # Optimisation.
    batch_size: int = _option(64, "sentence pairs per step (the global batch under a "
                              "strategy)", "training", int)
    epochs: int = _option(100, "most epochs", "training", int)
    patience: int = _option(10, "early stopping: epochs without a better validation chrF, "
                            "counted once the warm-up is over",
                            "training", int)
    warmup_steps: int = _option(400, "learning-rate warm-up steps", "training", int)
    learning_rate: float = _option(None, "peak learning rate (default: the paper's peak for "
                                   "d_model, (d_model * 4000) ** -0.5)", "training", float)
    label_smoothing: float = _option(0.1, "label smoothing", "training", float)
    time_budget: float = _option(None, "stop training after this many seconds, then "
                                 "evaluate and save", "training", float)
    valid_fraction: float = _option(0.1, "validation share of the data when no validation "
                                    "set is given", "training", float)
    seed: int = _option(0, "seed of the split, the initial weights and the batch order",
                        "training", int)
    # Speed and scale.
    jit_compile: bool = _option(False, "XLA-compile the training step", "scale", bool)
    mixed_precision: str = _option(None, "mixed_bfloat16 or mixed_float16 (with loss "
                                   "scaling) training", "scale", choices=PRECISIONS)
    static_shape: bool = _option(False, "pad every batch to max_length and drop the last "
                                 "smaller one (one shape to compile: TPUs, XLA)", "scale",
                                 bool)
    strategy: str = _option(None, "tf.distribute strategy (multi_worker: one process per "
                            "worker, each with its TF_CONFIG); in Python also a "
                            "tf.distribute.Strategy", "scale", choices=STRATEGIES)

    def __post_init__(self):
        try:
            self._check()
        except InputError:
            raise
        except ValueError as error:
            raise InputError(str(error)) from None

    def _check(self):
        for field in dataclasses.fields(self):
            value, meta = getattr(self, field.name), field.metadata
            if value is None and field.default is None:
                continue  # an optional value left unset
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
            _config.check_positive_int(name, getattr(self, name))
        _config.check_divisible(self.d_model, self.num_heads)
        _config.check_non_negative_int("patience", self.patience)
        for name in ("rate", "token_dropout", "label_smoothing", "valid_fraction"):
            _config.check_rate(name, getattr(self, name))
        if self.max_length < 2:
            raise InputError(
                "Received an invalid value for argument `max_length`, expected an integer "
                f">= 2 (<SOS> or <END> plus one token). Received: max_length={self.max_length}"
            )
        if self.learning_rate is not None and not _positive_number(self.learning_rate):
            raise InputError(
                "Received an invalid value for argument `learning_rate`, expected a "
                f"number > 0 or None. Received: learning_rate={self.learning_rate!r}"
            )
        if self.time_budget is not None and not (
            _positive_number(self.time_budget) or self.time_budget == 0
        ):
            raise InputError(
                "Received an invalid value for argument `time_budget`, expected a "
                f"number of seconds >= 0 or None. Received: time_budget={self.time_budget!r}"
            )
        if not isinstance(self.seed, numbers.Integral) or isinstance(self.seed, bool):
            raise InputError(
                f"Received an invalid value for argument `seed`, expected an integer. "
                f"Received: seed={self.seed!r}"
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


def _positive_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0
