"""What `Encoder` and `Decoder` share: arguments, the stack of layers and the
embedding front end

    x = Embedding(ids) * sqrt(d_model) + PE[positions];  x = Dropout(x)
"""

import math

import keras
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from keras_transformer import _config
from keras_transformer.positional import positional_encoding

POSITION_ENCODINGS = ("sinusoidal", "learned")


class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` that draws its mask with ThreeFry under XLA.

    Inside a `jit_compile=True` function XLA:CPU generates ThreeFry random
    numbers about 4x faster than the default Philox, which made dropout a
    sixth of a training step; elsewhere this is exactly the Keras layer.
    (XLA is detected with TensorFlow's internal `control_flow_util`.)
    """

    def call(self, inputs, training=False):
        in_xla = control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
        if not (training and self.rate > 0 and in_xla):
            return super().call(inputs, training=training)
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        return tf.nn.experimental.stateless_dropout(inputs, self.rate, seed, rng_alg="threefry")


class MaskByKeyword:
    """Mixin for layers called as `layer(x, mask, ...)`, like the tutorial's.

    Keras fills a `None` `mask` argument from the Keras mask of `x` and then
    passes it by keyword, which collides with a positional `layer(x, None)`;
    forwarding `mask` by keyword keeps the tutorial's call working.
    """

    def __call__(self, x, mask=None, **kwargs):
        return super().__call__(x, mask=mask, **kwargs)


def layer_norm(dtype_policy, name):
    """The tutorial's LayerNormalization (epsilon 1e-6)."""
    return keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype_policy, name=name)


class TransformerLayer(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: their arguments and config."""

    def _init_args(self, d_model, num_heads, dff, rate, norm_first, activation):
        _config.check_model_args(d_model=d_model, num_heads=num_heads, dff=dff, rate=rate)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.rate = rate
        self.norm_first = bool(norm_first)
        self.activation = activation

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dff": self.dff,
                "rate": self.rate,
                "norm_first": self.norm_first,
                "activation": self.activation,
            }
        )
        return config


class TransformerStack(keras.layers.Layer):
    """Base layer: embeddings, positions, dropout, `num_layers` layers, checks.

    `Encoder` and `Decoder` call `_init_stack` from `__init__`; `_embed` turns
    token ids into the first layer's input.
    """

    def _init_stack(
        self,
        layer_cls,
        layer_prefix,
        vocab_name,
        vocab_size,
        num_layers,
        d_model,
        num_heads,
        dff,
        maximum_position_encoding,
        rate,
        norm_first,
        activation,
        position_encoding,
        pad_token_idx,
        embedding,
    ):
        """Validates and stores the arguments; returns the list of layers.

        The layers are `layer_cls` instances named `{layer_prefix}1`, ...
        """
        _config.check_model_args(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            maximum_position_encoding=maximum_position_encoding,
            rate=rate,
            **{vocab_name: vocab_size},
        )
        _config.check_choice("position_encoding", position_encoding, POSITION_ENCODINGS)
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.maximum_position_encoding = maximum_position_encoding
        self.rate = rate
        self.norm_first = bool(norm_first)
        self.activation = activation
        self.position_encoding = position_encoding
        self.pad_token_idx = _config.check_token_idx("pad_token_idx", pad_token_idx, vocab_size)
        self.vocab_size = vocab_size
        if embedding is None:
            embedding = keras.layers.Embedding(
                vocab_size, d_model, dtype=self.dtype_policy, name="embedding"
            )
        elif not isinstance(embedding, keras.layers.Embedding) or (
            embedding.input_dim != vocab_size or embedding.output_dim != d_model
        ):
            raise ValueError(
                "Received an invalid value for argument `embedding`, expected a "
                f"keras.layers.Embedding({vocab_size}, {d_model}) to share. "
                f"Received: embedding={embedding!r}"
            )
        self.embedding = embedding
        if position_encoding == "learned":
            self.pos_embedding = keras.layers.Embedding(
                maximum_position_encoding,
                d_model,
                dtype=self.dtype_policy,
                name="pos_embedding",
            )
        else:
            self.pos_encoding = positional_encoding(maximum_position_encoding, d_model)
        self.dropout = Dropout(rate, dtype=self.dtype_policy, name="dropout")
        if self.norm_first:
            self.final_layernorm = layer_norm(self.dtype_policy, "final_layernorm")
        return [
            layer_cls(
                d_model,
                num_heads,
                dff,
                rate,
                norm_first=norm_first,
                activation=activation,
                dtype=self.dtype_policy,
                name=f"{layer_prefix}{i + 1}",
            )
            for i in range(num_layers)
        ]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dff": self.dff,
                "maximum_position_encoding": self.maximum_position_encoding,
                "rate": self.rate,
                "norm_first": self.norm_first,
                "activation": self.activation,
                "position_encoding": self.position_encoding,
                "pad_token_idx": self.pad_token_idx,
            }
        )
        return config

    def _build_stack(self, input_shape, layers):
        """Builds the embeddings and `layers` for ids of shape `input_shape`."""
        if not self.embedding.built:  # a shared embedding may be built already
            self.embedding.build(input_shape)
        if self.position_encoding == "learned":
            self.pos_embedding.build(input_shape)
        hidden_shape = (*input_shape, self.d_model)  # (B, T, d_model)
        for layer in layers:
            layer.build(hidden_shape)
        if self.norm_first:
            self.final_layernorm.build(hidden_shape)

    def _check_ids(self, x):
        """Fails early on sequences too long for the position table or bad ids."""
        max_len = self.maximum_position_encoding
        seq_len = x.shape[1]
        if seq_len is not None and seq_len > max_len:
            raise ValueError(
                "Received an invalid value for argument `x`, expected a sequence "
                f"of at most maximum_position_encoding={max_len} tokens. "
                f"Received: x.shape={tuple(x.shape)}"
            )
        if seq_len is None:
            tf.debugging.assert_less_equal(
                tf.shape(x)[1],
                max_len,
                message=(
                    "Received an invalid value for argument `x`: sequence longer "
                    f"than maximum_position_encoding={max_len}"
                ),
            )
        if tf.executing_eagerly() and tf.size(x) > 0:
            low, high = int(tf.reduce_min(x)), int(tf.reduce_max(x))
            if low < 0 or high >= self.vocab_size:
                raise ValueError(
                    "Received an invalid value for argument `x`, expected token "
                    f"ids in [0, {self.vocab_size}) (the vocabulary size). "
                    f"Received: ids from {low} to {high}"
                )

    def _embed(self, x, training=None, position=None):
        """Token ids `(B, T)` -> scaled embeddings plus positions `(B, T, d_model)`.

        `position`, a scalar int tensor, places a single token (`T == 1`) at that
        position for cached decoding; otherwise positions are `0 .. T-1`.
        """
        if position is None:
            self._check_ids(x)
        seq_len = x.shape[1] if x.shape[1] is not None else tf.shape(x)[1]
        start = 0 if position is None else position
        x = self.embedding(x)  # (B, T, d_model)
        x = x * tf.cast(math.sqrt(self.d_model), x.dtype)
        if self.position_encoding == "learned":
            x = x + self.pos_embedding(tf.range(start, start + seq_len))[tf.newaxis]
        else:
            table = tf.slice(self.pos_encoding, [0, start, 0], [1, seq_len, self.d_model])
            x = x + tf.cast(table, x.dtype)  # (B, T, d_model)
        return self.dropout(x, training=training)
