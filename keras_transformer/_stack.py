"""What `Encoder` and `Decoder` share: arguments, the stack of layers and the
embedding front end

    x = Embedding(ids) * sqrt(d_model) + PE[positions];  x = Dropout(x)

or, BERT's (seed 001) with `embedding_layernorm=True` and segments
(`type_vocab_size > 0`):

    x = Embedding(ids) * sqrt(d_model) + PE[positions] + SegmentEmbedding(segment_ids)
    x = Dropout(LayerNorm(x))
"""

import math
import re

import keras
import tensorflow as tf

from keras_transformer import _config
from keras_transformer._compat import in_xla_context
from keras_transformer.attention import MultiHeadAttention
from keras_transformer.feed_forward import point_wise_feed_forward_network
from keras_transformer.positional import positional_encoding

POSITION_ENCODINGS = ("sinusoidal", "learned")


class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` that draws its mask with ThreeFry under XLA.

    Inside a `jit_compile=True` function XLA:CPU generates ThreeFry random
    numbers about 4x faster than the default Philox, which made dropout a
    sixth of a training step; elsewhere this is exactly the Keras layer. (The
    two draw different masks for the same seed, as Keras' own `Dropout` does
    with and without XLA.)
    """

    def call(self, inputs, training=False):
        if not (training and self.rate > 0 and in_xla_context()):
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
    """Base of `EncoderLayer` and `DecoderLayer`: arguments, sub-layers, blocks.

    A layer is a sequence of residual blocks, numbered from 1: one per
    attention sub-layer (named in `ATTENTION`, the tutorial's names), then
    the feed-forward network `ffn`. Block `i` has `layernorm{i}` and
    `dropout{i}`:

        post-LN (the paper, the tutorial):  x = LN(x + Dropout(Sublayer(x)))
        pre-LN (`norm_first=True`):         x = x + Dropout(Sublayer(LN(x)))
    """

    ATTENTION = ()
    CONFIG = ("d_model", "num_heads", "dff", "rate", "norm_first", "activation")

    def __init__(self, d_model, num_heads, dff, rate=0.1, norm_first=False, activation="relu",
                 **kwargs):
        super().__init__(**_config.layer_kwargs(type(self).__name__, kwargs))
        _config.check_model_args(d_model=d_model, num_heads=num_heads, dff=dff, rate=rate)
        _config.set_attributes(self, d_model=d_model, num_heads=num_heads, dff=dff, rate=rate,
                               norm_first=bool(norm_first), activation=activation)

        policy = self.dtype_policy
        for name in self.ATTENTION:
            setattr(self, name, MultiHeadAttention(d_model, num_heads, dtype=policy, name=name))
        self.ffn = point_wise_feed_forward_network(
            d_model, dff, activation, dtype=policy, name="ffn"
        )
        blocks = range(1, len(self.ATTENTION) + 2)
        for i in blocks:
            setattr(self, f"layernorm{i}", layer_norm(policy, f"layernorm{i}"))
        for i in blocks:
            setattr(self, f"dropout{i}", Dropout(rate, dtype=policy, name=f"dropout{i}"))

    def build(self, input_shape):
        for name in (*self.ATTENTION, "ffn"):
            getattr(self, name).build(input_shape)
        for i in range(1, len(self.ATTENTION) + 2):
            getattr(self, f"layernorm{i}").build(input_shape)

    def _block_input(self, block, x):
        """What the sub-layer of block `block` reads: `LN(x)` when pre-LN, else `x`."""
        return getattr(self, f"layernorm{block}")(x) if self.norm_first else x

    def _block_output(self, block, residual, output, training):
        """The residual connection of block `block` around the sub-layer's `output`."""
        x = residual + getattr(self, f"dropout{block}")(output, training=training)
        return x if self.norm_first else getattr(self, f"layernorm{block}")(x)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self.CONFIG})
        return config


class TransformerStack(keras.layers.Layer):
    """Base of `Encoder` and `Decoder`: embeddings, positions, dropout,
    `num_layers` layers, checks.

    A subclass sets `LAYER` (its layer class; layer i is named after it,
    `encoder_layer{i}` for `EncoderLayer`, as Keras names layers), `LAYERS`
    (the attribute holding the list of layers, the tutorial's `enc_layers`
    or `dec_layers`) and `VOCAB` (its vocabulary-size argument,
    `input_vocab_size` or `target_vocab_size`), and takes its vocabulary size
    as the fifth positional argument; `_embed` turns token ids into the first
    layer's input.
    """

    LAYER = TransformerLayer
    LAYERS = None
    VOCAB = None
    CONFIG = ("num_layers", "d_model", "num_heads", "dff", "maximum_position_encoding", "rate",
              "norm_first", "activation", "position_encoding", "pad_token_idx")
    # BERT's embedding options (the `Transformer` leaves them at their defaults).
    EMBEDDING_CONFIG = ("type_vocab_size", "embedding_layernorm")

    def __init__(self, num_layers, d_model, num_heads, dff, vocab_size,
                 maximum_position_encoding, rate=0.1, norm_first=False, activation="relu",
                 position_encoding="sinusoidal", pad_token_idx=0, type_vocab_size=0,
                 embedding_layernorm=False, embedding=None, **kwargs):
        super().__init__(**_config.layer_kwargs(type(self).__name__, kwargs))
        _config.check_model_args(
            num_layers=num_layers, d_model=d_model, num_heads=num_heads, dff=dff,
            maximum_position_encoding=maximum_position_encoding, rate=rate,
            **{self.VOCAB: vocab_size},
        )
        _config.check_choice("position_encoding", position_encoding, POSITION_ENCODINGS)
        _config.set_attributes(
            self, num_layers=num_layers, d_model=d_model, num_heads=num_heads, dff=dff,
            maximum_position_encoding=maximum_position_encoding, rate=rate,
            norm_first=bool(norm_first), activation=activation,
            position_encoding=position_encoding,
            pad_token_idx=_config.check_token_idx("pad_token_idx", pad_token_idx, vocab_size),
            type_vocab_size=_config.check_non_negative_int("type_vocab_size", type_vocab_size),
            embedding_layernorm=bool(embedding_layernorm),
            **{self.VOCAB: vocab_size},
        )

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
        if self.type_vocab_size:
            self.segment_embedding = keras.layers.Embedding(
                type_vocab_size, d_model, dtype=self.dtype_policy, name="segment_embedding"
            )
        if self.embedding_layernorm:
            self.embedding_norm = layer_norm(self.dtype_policy, "embedding_layernorm")
        self.dropout = Dropout(rate, dtype=self.dtype_policy, name="dropout")
        if self.norm_first:
            self.final_layernorm = layer_norm(self.dtype_policy, "final_layernorm")
        prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", self.LAYER.__name__).lower()  # encoder_layer
        setattr(self, self.LAYERS, [
            self.LAYER(d_model, num_heads, dff, rate, norm_first=norm_first,
                       activation=activation, dtype=self.dtype_policy, name=f"{prefix}{i + 1}")
            for i in range(num_layers)
        ])

    @property
    def vocab_size(self):
        """The size of this side's vocabulary."""
        return getattr(self, self.VOCAB)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name)
                       for name in (*self.CONFIG, *self.EMBEDDING_CONFIG, self.VOCAB)})
        return config

    def build(self, input_shape):
        """Builds the embeddings and the layers for ids of shape `input_shape`."""
        if not self.embedding.built:  # a shared embedding may be built already
            self.embedding.build(input_shape)
        if self.position_encoding == "learned":
            self.pos_embedding.build(input_shape)
        hidden_shape = (*input_shape, self.d_model)  # (B, T, d_model)
        if self.type_vocab_size:
            self.segment_embedding.build(input_shape)
        if self.embedding_layernorm:
            self.embedding_norm.build(hidden_shape)
        for layer in getattr(self, self.LAYERS):
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

    def _embed(self, x, training=None, position=None, segment_ids=None):
        """Token ids `(B, T)` -> scaled embeddings plus positions `(B, T, d_model)`.

        `position`, a scalar int tensor, places a single token (`T == 1`) at that
        position for cached decoding; otherwise positions are `0 .. T-1`.
        `segment_ids` `(B, T)` (ids below `type_vocab_size`; all 0 when `None`)
        add segment embeddings when `type_vocab_size > 0`.
        """
        if segment_ids is not None and not self.type_vocab_size:
            raise ValueError(
                "Received an invalid value for argument `segment_ids`: this layer has no "
                "segment embeddings (type_vocab_size=0). Received: segment_ids of shape "
                f"{tuple(segment_ids.shape)}"
            )
        if position is None:
            self._check_ids(x)
        seq_len = x.shape[1] if x.shape[1] is not None else tf.shape(x)[1]
        start = 0 if position is None else position
        ids, x = x, self.embedding(x)  # (B, T, d_model)
        x = x * tf.cast(math.sqrt(self.d_model), x.dtype)
        if self.position_encoding == "learned":
            x = x + self.pos_embedding(tf.range(start, start + seq_len))[tf.newaxis]
        else:
            table = tf.slice(self.pos_encoding, [0, start, 0], [1, seq_len, self.d_model])
            x = x + tf.cast(table, x.dtype)  # (B, T, d_model)
        if self.type_vocab_size:
            x = x + self.segment_embedding(tf.zeros_like(ids) if segment_ids is None
                                           else segment_ids)
        if self.embedding_layernorm:
            x = self.embedding_norm(x)
        return self.dropout(x, training=training)
