"""What the encoder and decoder share: arguments, the dropout layer, and the
embedding front end of a stack

    x = Embedding(ids) * sqrt(d_model) + PE[positions];  x = Dropout(x)

or, BERT's with `embedding_layernorm=True` and segments (`type_vocab_size > 0`):

    x = Embedding(ids) * sqrt(d_model) + PE[positions] + SegmentEmbedding(segment_ids)
    x = Dropout(LayerNorm(x))

Runs on every Keras backend.
"""

import math

import keras
from keras import ops

from keras_transformer import _backend, _compat, _config
from keras_transformer.layers.positional import positional_encoding


class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` that draws its mask with ThreeFry under TensorFlow's XLA.

    Inside a TensorFlow `jit_compile=True` function XLA:CPU generates ThreeFry
    random numbers about 4x faster than the default Philox: an XLA training
    step of the tutorial's model takes 1.09x as long with Keras's dropout
    (`_backend.xla_dropout`); elsewhere, and on the JAX and PyTorch backends,
    this is exactly the Keras layer. (The two draw different masks
    for the same seed, as Keras' own `Dropout` does with and without XLA.)
    """

    def call(self, inputs, training=False):
        if training and self.rate > 0 and _backend.in_xla_context():
            return _backend.xla_dropout(inputs, self.rate, _compat.dropout_seed_generator(self))
        return super().call(inputs, training=training)


def affine(x, kernel, bias):
    """`x @ kernel + bias`, the product kept apart from the bias add where that
    is faster (`_backend.apart_from_bias`): `Dense` and the joined projections
    of `MultiHeadAttention`."""
    return ops.add(_backend.apart_from_bias(ops.matmul(x, kernel)), bias)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense`, with its one-row product kept apart from the bias
    add under TensorFlow's XLA:CPU, where that is faster
    (`_backend.apart_from_bias`: batch-1 greedy decoding takes 1.22x as long
    without it). Elsewhere, and on the JAX and PyTorch backends, this is
    exactly the Keras layer (`call` is Keras 3.15's, its product and bias add
    in `affine`);
    `quantize` quantizes it as a `keras.layers.Dense`, and a quantized layer
    runs Keras' own `quantized_call`.
    """

    def call(self, inputs, training=None):
        if self.bias is None:
            x = ops.matmul(inputs, self.kernel)
        else:
            x = affine(inputs, self.kernel, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' `Dense.quantize` refuses subclasses (`type_check`); this one
        # only changes the float path.
        return super().quantize(mode, type_check=False, config=config)


def layer_norm(dtype_policy, name):
    """The tutorial's LayerNormalization (epsilon 1e-6)."""
    return keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype_policy, name=name)


class TransformerLayer(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: their arguments and config.

    Each subclass creates its own sub-layers (the tutorial's names) and runs
    its residual blocks:

        post-LN (the paper, the tutorial):  x = LN(x + Dropout(Sublayer(x)))
        pre-LN (`norm_first=True`):         x = x + Dropout(Sublayer(LN(x)))
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, norm_first=False, activation="relu",
                 **kwargs):
        super().__init__(**_config.layer_kwargs(type(self).__name__, kwargs))
        _config.check_model_args(d_model=d_model, num_heads=num_heads, dff=dff, rate=rate)
        _config.set_attributes(self, d_model=d_model, num_heads=num_heads, dff=dff, rate=rate,
                               norm_first=bool(norm_first), activation=activation)

    def _block_input(self, x, norm):
        """What a residual block's sub-layer reads: `LN(x)` pre-LN, `x` post-LN."""
        return norm(x) if self.norm_first else x

    def _block_output(self, x, output, dropout, norm, training):
        """A residual block's output: `x + Dropout(output)`, then `LN` post-LN."""
        x = x + dropout(output, training=training)
        return x if self.norm_first else norm(x)

    def get_config(self):
        config = super().get_config()
        config.update(_config.options_config(self))
        return config


class TransformerStack(keras.layers.Layer):
    """Base of `Encoder` and `Decoder`: embeddings, positions, dropout, checks.

    A subclass names its vocabulary size as the tutorial does
    (`VOCAB_SIZE_ARG`: `input_vocab_size` or `target_vocab_size`, passed here
    as `vocab_size`) and stores it under that name, creates its list of
    layers (`enc_layers` or `dec_layers`) with `_make_layers` and builds it
    with `_build_stack`; `_embed` turns token ids into the first layer's input.
    """

    VOCAB_SIZE_ARG = None
    # Arguments that are not configuration: the subclass stores `vocab_size`
    # under its tutorial name, and an embedding to share is its owner's.
    NOT_CONFIG = ("vocab_size", "embedding")

    def __init__(self, num_layers, d_model, num_heads, dff, vocab_size,
                 maximum_position_encoding, rate=0.1, norm_first=False, activation="relu",
                 position_encoding="sinusoidal", pad_token_idx=0, type_vocab_size=0,
                 embedding_layernorm=False, embedding=None, **kwargs):
        super().__init__(**_config.layer_kwargs(type(self).__name__, kwargs))
        self.vocab_size = _config.check_positive_int(self.VOCAB_SIZE_ARG, vocab_size)
        _config.check_model_args(
            num_layers=num_layers, d_model=d_model, num_heads=num_heads, dff=dff,
            maximum_position_encoding=maximum_position_encoding, rate=rate,
        )
        _config.check_choice("position_encoding", position_encoding,
                             _config.POSITION_ENCODINGS)
        _config.set_attributes(
            self, num_layers=num_layers, d_model=d_model, num_heads=num_heads, dff=dff,
            maximum_position_encoding=maximum_position_encoding, rate=rate,
            norm_first=bool(norm_first), activation=activation,
            position_encoding=position_encoding,
            pad_token_idx=_config.check_token_idx("pad_token_idx", pad_token_idx, vocab_size),
            type_vocab_size=_config.check_non_negative_int("type_vocab_size", type_vocab_size),
            embedding_layernorm=bool(embedding_layernorm),
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
                maximum_position_encoding, d_model, dtype=self.dtype_policy, name="pos_embedding"
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

    def get_config(self):
        config = super().get_config()
        config.update(_config.options_config(self, exclude=self.NOT_CONFIG))
        return config

    def _make_layers(self, layer_class, name):
        """`num_layers` new `EncoderLayer`s or `DecoderLayer`s named `name1`, `name2`, ..."""
        return [layer_class(self.d_model, self.num_heads, self.dff, self.rate,
                            norm_first=self.norm_first, activation=self.activation,
                            dtype=self.dtype_policy, name=f"{name}{i + 1}")
                for i in range(self.num_layers)]

    def _build_stack(self, input_shape, layers):
        """Builds the embeddings and `layers` for ids of shape `input_shape`."""
        hidden_shape = self._build_embeddings(input_shape)
        for layer in layers:
            layer.build(hidden_shape)

    def _build_embeddings(self, input_shape):
        """Builds the embeddings and norms for ids of shape `input_shape`."""
        if not self.embedding.built:  # a shared embedding may be built already
            self.embedding.build(input_shape)
        if self.position_encoding == "learned":
            self.pos_embedding.build(input_shape)
        hidden_shape = (*input_shape, self.d_model)  # (B, T, d_model)
        if self.type_vocab_size:
            self.segment_embedding.build(input_shape)
        if self.embedding_layernorm:
            self.embedding_norm.build(hidden_shape)
        if self.norm_first:
            self.final_layernorm.build(hidden_shape)
        return hidden_shape

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
            _backend.check_length(
                ops.shape(x)[1], max_len,
                "Received an invalid value for argument `x`: sequence longer "
                f"than maximum_position_encoding={max_len}",
            )
        ids = _backend.concrete(x)
        if ids is not None and ids.size:
            low, high = int(ids.min()), int(ids.max())
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
        seq_len = ops.shape(x)[1]
        start = 0 if position is None else position
        ids, x = x, self.embedding(x)  # (B, T, d_model)
        x = x * ops.cast(math.sqrt(self.d_model), x.dtype)
        if self.position_encoding == "learned":
            x = x + self.pos_embedding(start + ops.arange(seq_len))[None]
        else:
            table = ops.slice(self.pos_encoding, [0, start, 0], [1, seq_len, self.d_model])
            x = x + ops.cast(table, x.dtype)  # (B, T, d_model)
        if self.type_vocab_size:
            x = x + self.segment_embedding(ops.zeros_like(ids) if segment_ids is None
                                           else segment_ids)
        if self.embedding_layernorm:
            x = self.embedding_norm(x)
        return self.dropout(x, training=training)
