"""The embedding front end shared by `Encoder` and `Decoder`.

    x = Embedding(ids) * sqrt(d_model) + PE[positions];  x = Dropout(x)
"""

import math

import keras
import tensorflow as tf

from keras_transformer import _config
from keras_transformer.positional import positional_encoding

POSITION_ENCODINGS = ("sinusoidal", "learned")


class EmbeddingStack(keras.layers.Layer):
    """Base layer: token embedding, position encoding, dropout and checks.

    Subclasses set `self.vocab_size` and call `_init_embedding` from
    `__init__`; `_embed` turns token ids into the first layer's input.
    """

    def _init_embedding(
        self,
        vocab_size,
        d_model,
        maximum_position_encoding,
        rate,
        position_encoding,
        embedding,
    ):
        self.vocab_size = vocab_size
        _config.check_choice("position_encoding", position_encoding, POSITION_ENCODINGS)
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
        self.dropout = keras.layers.Dropout(rate, dtype=self.dtype_policy, name="dropout")

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
