"""Keyword-argument plumbing and argument validation shared by every layer.

The tutorial builds every object from one dict, `Transformer(**kargs)`,
`Encoder(**kargs)`, `MultiHeadAttention(**kargs)`, ... so each class must accept
the whole dict and ignore the keys it does not use. The keys of that dict are
the options of `Transformer` (the tutorial's and this package's: its
signature); a class's own options are the parameters of its `__init__` (and of
its bases'), which `init_options` reads, for `get_config` too. Any other key is
a typo, or an option of another class (`type_vocab_size` belongs to BERT's
encoder), and raises `TypeError`.
"""

import functools
import inspect
import numbers

# The model sizes, which must be positive integers.
_POSITIVE_INT_ARGS = frozenset({"num_layers", "d_model", "num_heads", "dff", "input_vocab_size",
                                "target_vocab_size", "maximum_position_encoding"})

# The choices of the options that several modules check: declared here once,
# read by the code that implements them (`layers.feed_forward`, `layers._stack`, `models.bert`,
# `text.tokenizers`) and by the recipes' configs (`recipes.config`).
ACTIVATIONS = ("relu", "gelu")
POSITION_ENCODINGS = ("sinusoidal", "learned")
POOLINGS = ("cls", "mean")
TOKENIZERS = ("wordpiece", "word", "char")

# Arguments that `keras.layers.Layer.__init__` understands.
_KERAS_LAYER_KEYS = frozenset(
    {"name", "dtype", "trainable", "autocast", "activity_regularizer"}
)


_KARGS_OWNER = []


def kargs_owner(cls):
    """Class decorator of `Transformer`: its options are the keys a `kargs`
    dict may hold. Registered here rather than imported, so that this module,
    which every layer imports, imports nothing of the package (no cycle)."""
    _KARGS_OWNER[:] = [cls]
    kargs_keys.cache_clear()
    return cls


@functools.cache
def kargs_keys():
    """The keys a `kargs` dict may hold: the options of `Transformer`."""
    (owner,) = _KARGS_OWNER
    return frozenset(init_options(owner))


def layer_kwargs(cls_name: str, kwargs: dict) -> dict:
    """Drops the `kargs` keys the class does not use; rejects unknown keys.

    Args:
        cls_name: str. The class being built, for the error message.
        kwargs: dict. The keyword arguments left over after the class took its
            own (the parameters of its signature).

    Returns:
        The keyword arguments to forward to `keras.layers.Layer.__init__`.

    Raises:
        TypeError: a key is neither a `kargs` key nor a Keras layer argument.
    """
    keys = kargs_keys()
    unknown = sorted(set(kwargs) - keys - _KERAS_LAYER_KEYS)
    if unknown:
        raise TypeError(
            f"{cls_name} got unexpected keyword argument(s) {unknown}. It takes the options "
            f"of its signature, the config keys of the tutorial's kargs and of Transformer "
            f"{sorted(keys)} (ignored where unused) and Keras layer arguments "
            f"{sorted(_KERAS_LAYER_KEYS)}."
        )
    return {k: v for k, v in kwargs.items() if k in _KERAS_LAYER_KEYS}


def init_options(cls, exclude=()):
    """The named parameters of `cls.__init__` and of its bases', in order.

    Only this package's classes are read (a user's subclass with arguments of
    its own adds them in its own `get_config`, as with any Keras layer), up to
    the first Keras class; `self` and `*args` / `**kwargs` are not options.

    Args:
        cls: a layer or model class of this package.
        exclude: names to leave out (arguments that are not configuration,
            like an embedding layer to share).

    Returns:
        tuple of str.
    """
    names = []
    for klass in cls.__mro__:
        if klass.__module__.startswith("keras."):
            break
        if "__init__" not in vars(klass) or not klass.__module__.startswith(__package__):
            continue
        for parameter in inspect.signature(klass.__init__).parameters.values():
            named = parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
            if named and parameter.name not in ("self", *exclude, *names):
                names.append(parameter.name)
    return tuple(names)


def options_config(layer, exclude=()):
    """`{option: layer.option}` for every `init_options` of the layer's class."""
    return {name: getattr(layer, name) for name in init_options(type(layer), exclude)}


def check_model_args(**args) -> None:
    """Validates model sizes (positive ints), `rate` and `d_model % num_heads`.

    Raises:
        ValueError: in the Keras message form, naming the argument and value.
    """
    for name, value in args.items():
        if name == "rate":
            check_rate(name, value)
        elif name in _POSITIVE_INT_ARGS:
            check_positive_int(name, value)
        else:
            raise TypeError(f"check_model_args does not know the argument {name!r}")
    if "d_model" in args and "num_heads" in args:
        check_divisible(args["d_model"], args["num_heads"])


def set_attributes(layer, **values) -> None:
    """Stores every argument as an attribute of the same name (the keras-hub way)."""
    for name, value in values.items():
        setattr(layer, name, value)


def check_positive_int(name: str, value) -> int:
    """Returns `value` if it is a positive integer, else raises `ValueError`."""
    return _check_int(name, value, 1, "a positive integer")


def check_non_negative_int(name: str, value) -> int:
    """Returns `value` if it is an integer >= 0, else raises `ValueError`."""
    return _check_int(name, value, 0, "an integer >= 0")


def _check_int(name, value, minimum, expected):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected {expected}. "
            f"Received: {name}={value!r}"
        )
    return int(value)


def check_rate(name: str, value) -> float:
    """Returns `value` if it is a float in [0, 1), else raises `ValueError`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0.0 <= value < 1.0
    ):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a "
            f"float in [0, 1). Received: {name}={value!r}"
        )
    return float(value)


def check_choice(name: str, value, choices) -> str:
    """Returns `value` if it is one of `choices`, else raises `ValueError`."""
    if value not in choices:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected one of "
            f"{sorted(choices)}. Received: {name}={value!r}"
        )
    return value


def check_divisible(d_model: int, num_heads: int) -> None:
    """Raises `ValueError` unless `d_model` splits evenly into `num_heads`."""
    if d_model % num_heads:
        raise ValueError(
            "Received an invalid value for argument `d_model`, expected a "
            "multiple of `num_heads` so that every head gets "
            f"d_model / num_heads dimensions. Received: d_model={d_model}, "
            f"num_heads={num_heads}"
        )


def check_token_idx(name: str, value, vocab_size: int) -> int:
    """Returns `value` if it is a valid id in a vocabulary of `vocab_size`."""
    value = check_non_negative_int(name, value)
    if value >= vocab_size:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected an id "
            f"below the vocabulary size {vocab_size}. Received: {name}={value}"
        )
    return value
