"""Encoder-only models (the "[Pytorch] Transformer 구현하기" blog post's encoder, BERT as
the lecture slides present it): BERT's masked language model and a sequence
classifier on top of a (pretrained) `Encoder`.

The encoder is this package's `Encoder` in a BERT-style configuration: token
plus learned position plus segment embeddings, LayerNorm and dropout (the blog
post's `Embeddings` block), then pre-LN layers with GELU. Pretraining fills in masked
tokens (`MaskedLanguageModel`, its output tied to the token embeddings);
fine-tuning puts a classifier on the `[CLS]` state or the mean of the token
states (`SequenceClassifier`), starting from the pretrained encoder's weights.

Both models take `token_ids` `(B, S)`, or `(token_ids, segment_ids)`, or a
dict with those keys; `<PAD>` (`pad_token_idx`) marks padding. Both run on
every Keras backend.
"""

import keras
from keras import ops

from keras_transformer import _backend, _config
from keras_transformer.layers._stack import Dropout, layer_norm
from keras_transformer.layers.encoder import Encoder

# The blog post's BERT-style encoder options: what `bert_encoder` sets unless told otherwise.
BERT_ENCODER_OPTIONS = {"norm_first": True, "activation": "gelu",
                        "position_encoding": "learned", "type_vocab_size": 2,
                        "embedding_layernorm": True}


def bert_encoder(num_layers, d_model, num_heads, dff, input_vocab_size,
                 maximum_position_encoding, rate=0.1, pad_token_idx=0, name="encoder",
                 **options):
    """An `Encoder` in the blog post's BERT-style configuration.

    Token + learned position + segment embeddings with LayerNorm and dropout,
    then pre-LN layers with GELU; `options` override `BERT_ENCODER_OPTIONS`.
    Unlike BERT itself, the layers are pre-LN (as in the blog post and GPT-2;
    `norm_first=False` gives BERT's post-LN) and the token embeddings are
    scaled by sqrt(d_model), as in the tutorial's `Encoder`.
    The tutorial's `kargs` work: keys an encoder does not use are ignored.

    Example:
    >>> encoder = bert_encoder(num_layers=2, d_model=64, num_heads=4, dff=128,
    ...                        input_vocab_size=100, maximum_position_encoding=16)
    >>> encoder.norm_first, encoder.activation, encoder.type_vocab_size
    (True, 'gelu', 2)
    """
    options = {**BERT_ENCODER_OPTIONS, **options}
    return Encoder(num_layers, d_model, num_heads, dff, input_vocab_size,
                   maximum_position_encoding, rate=rate, pad_token_idx=pad_token_idx,
                   name=name, **options)


def _split_inputs(inputs):
    """`ids`, `(ids, segment_ids)` or `{"token_ids", "segment_ids"}` -> the two."""
    if isinstance(inputs, dict):
        return inputs["token_ids"], inputs.get("segment_ids")
    if isinstance(inputs, (tuple, list)):
        if len(inputs) != 2:
            raise ValueError(
                "Received an invalid value for argument `inputs`, expected token ids or "
                f"(token_ids, segment_ids). Received: a sequence of {len(inputs)} tensors"
            )
        return inputs[0], inputs[1]
    return inputs, None


def _ids_shape(input_shape):
    """The token ids' shape `(B, S)` out of what `build` receives for the inputs."""
    if isinstance(input_shape, dict):
        return input_shape["token_ids"]
    if isinstance(input_shape[0], (tuple, list)):  # (ids_shape, segment_ids_shape)
        return input_shape[0]
    return input_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLanguageModel(_backend.TrainerMixin, keras.Model):
    """BERT's masked-language-model pretraining model.

    An encoder in BERT's configuration (`bert_encoder`), then BERT's transform
    (Dense + GELU + LayerNorm) and an output projection tied to the token
    embeddings: logits `= h E^T + b`. Train it on `mask_tokens`' output with
    `masked_loss` (labels are `<PAD>` where nothing was masked, so only the
    masked positions count).

    Args:
        num_layers, d_model, num_heads, dff, input_vocab_size,
        maximum_position_encoding, rate: the tutorial's `kargs` for the
            encoder (other `kargs` keys are ignored).
        pad_token_idx: int. Id of `<PAD>`. Defaults to `0`.
        model_name: str. The model's name. Defaults to `"bert"`.
        **kwargs: `BERT_ENCODER_OPTIONS` to override (`type_vocab_size`, ...)
            and Keras model arguments (`dtype`, ...).

    Call arguments:
        inputs: token ids `(B, S)`, `(token_ids, segment_ids)` or a dict
            with `token_ids`, optionally `segment_ids` and `masked_positions`
            `(B, P)`: the positions to predict (BERT predicts the masked
            tokens only, which spares most of the output layer's work).
        training: bool. Dropout is active only when `True`.

    Returns:
        float32 logits `(B, S, input_vocab_size)`, or `(B, P, input_vocab_size)`
        at `masked_positions`.

    Example (the logits of two masked positions per row):
    >>> mlm = MaskedLanguageModel(num_layers=1, d_model=32, num_heads=2, dff=64,
    ...                           input_vocab_size=50, maximum_position_encoding=8)
    >>> ids, positions = np.ones((2, 8), "int32"), np.array([[1, 5], [2, 3]])
    >>> tuple(mlm({"token_ids": ids, "masked_positions": positions}).shape)
    (2, 2, 50)
    """

    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size,
                 maximum_position_encoding, rate=0.1, pad_token_idx=0, model_name="bert",
                 **kwargs):
        options = {key: kwargs.pop(key, default) for key, default in BERT_ENCODER_OPTIONS.items()}
        kwargs = _config.layer_kwargs("MaskedLanguageModel", kwargs)
        kwargs.setdefault("name", model_name)
        super().__init__(**kwargs)
        self.encoder = bert_encoder(num_layers, d_model, num_heads, dff, input_vocab_size,
                                    maximum_position_encoding, rate, pad_token_idx,
                                    dtype=self.dtype_policy, **options)
        _config.set_attributes(self, model_name=model_name, **{
            name: getattr(self.encoder, name) for name in self._options() if name != "model_name"})
        self.mlm_dense = keras.layers.Dense(d_model, activation=self.encoder.activation,
                                            dtype=self.dtype_policy, name="mlm_dense")
        self.mlm_layernorm = layer_norm(self.dtype_policy, "mlm_layernorm")

    def build(self, input_shape):
        ids_shape = _ids_shape(input_shape)
        if not self.encoder.built:  # an encoder called on its own first has built itself
            self.encoder.build(ids_shape)
        hidden = (*ids_shape, self.encoder.d_model)
        self.mlm_dense.build(hidden)
        self.mlm_layernorm.build(hidden)
        self.mlm_bias = self.add_weight(shape=(self.input_vocab_size,), initializer="zeros",
                                        name="mlm_bias")

    def call(self, inputs, training=None):
        ids, segment_ids = _split_inputs(inputs)
        x = self.encoder(ids, training=training, segment_ids=segment_ids)  # (B, S, d_model)
        if isinstance(inputs, dict) and inputs.get("masked_positions") is not None:
            positions = ops.cast(inputs["masked_positions"], "int32")  # (B, P)
            x = ops.take_along_axis(x, positions[:, :, None], axis=1)  # (B, P, d_model)
        x = self.mlm_layernorm(self.mlm_dense(x))
        # The output projection is the token embedding matrix E: logits = x E^T + b.
        kernel = ops.cast(self.encoder.embedding.embeddings, x.dtype)  # (V, d_model)
        logits = ops.einsum("bsd,vd->bsv", x, kernel) + ops.cast(self.mlm_bias, x.dtype)
        return ops.cast(logits, "float32")  # (B, S, V)

    def compute_mask(self, inputs, mask=None):
        return None

    @classmethod
    def _options(cls):
        """The options of its config: its signature's and `BERT_ENCODER_OPTIONS`."""
        return (*_config.init_options(cls), *BERT_ENCODER_OPTIONS)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self._options()})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class SequenceClassifier(_backend.TrainerMixin, keras.Model):
    """A classifier on an encoder's `[CLS]` state or mean token state.

    Pass the encoder of a `MaskedLanguageModel` to fine-tune it (the same
    layer, so its pretrained weights are where training starts), or a fresh
    `bert_encoder(...)` to train from scratch.

    Args:
        encoder: an `Encoder`.
        num_classes: int. Number of labels (>= 2).
        pooling: str. `"cls"`: the state of the first token (`[CLS]`, which
            the data pipeline puts there); `"mean"`: the mean of the states of
            the real (non-`<PAD>`) tokens. Defaults to `"cls"`.
        rate: float in [0, 1). Dropout before the output layer. Defaults to
            `0.1`.
        **kwargs: Keras model arguments.

    Call arguments:
        inputs: token ids `(B, S)`, `(token_ids, segment_ids)` or a dict.
        training: bool. Dropout is active only when `True`.
        return_attention_weights: bool. Also return the encoder's attention
            weights `{"encoder_layer{i}": (B, heads, S, S)}`.

    Returns:
        float32 logits `(B, num_classes)`.

    Example:
    >>> encoder = bert_encoder(num_layers=1, d_model=32, num_heads=2, dff=64,
    ...                        input_vocab_size=50, maximum_position_encoding=8)
    >>> tuple(SequenceClassifier(encoder, num_classes=3)(np.ones((2, 8), "int32")).shape)
    (2, 3)
    """

    def __init__(self, encoder, num_classes, pooling="cls", rate=0.1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(encoder, Encoder):
            raise ValueError(
                "Received an invalid value for argument `encoder`, expected a "
                f"keras_transformer.Encoder. Received: encoder={encoder!r}"
            )
        _config.check_positive_int("num_classes", num_classes)
        if num_classes < 2:
            raise ValueError(
                "Received an invalid value for argument `num_classes`, expected at least "
                f"2 classes. Received: num_classes={num_classes}"
            )
        _config.check_choice("pooling", pooling, _config.POOLINGS)
        _config.set_attributes(self, encoder=encoder, num_classes=num_classes,
                               pooling=pooling, rate=_config.check_rate("rate", rate))
        self.dropout = Dropout(rate, dtype=self.dtype_policy, name="dropout")
        self.classifier = keras.layers.Dense(num_classes, dtype=self.dtype_policy,
                                             name="classifier")

    def build(self, input_shape):
        ids_shape = _ids_shape(input_shape)
        if not self.encoder.built:
            self.encoder.build(ids_shape)
        self.classifier.build((ids_shape[0], self.encoder.d_model))

    def call(self, inputs, training=None, return_attention_weights=False):
        ids, segment_ids = _split_inputs(inputs)
        outputs = self.encoder(ids, training=training, segment_ids=segment_ids,
                               return_attention_weights=return_attention_weights)
        x, weights = outputs if return_attention_weights else (outputs, None)  # (B, S, d_model)
        if self.pooling == "cls":
            pooled = x[:, 0]  # (B, d_model)
        else:
            real = ops.cast(ops.not_equal(ids, self.encoder.pad_token_idx), x.dtype)[..., None]
            pooled = ops.sum(x * real, 1) / ops.maximum(ops.sum(real, 1), 1)  # (B, d_model)
        logits = ops.cast(self.classifier(self.dropout(pooled, training=training)), "float32")
        if return_attention_weights:
            return logits, weights
        return logits

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder),
                      num_classes=self.num_classes, pooling=self.pooling, rate=self.rate)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
