"""The encoder: `EncoderLayer` and the stack of them, `Encoder`.

Post-LN (the paper and the tutorial):  x = LN(x + Dropout(Sublayer(x)))
Pre-LN (`norm_first=True`):            x = x + Dropout(Sublayer(LN(x))),
with a final LayerNorm after the last layer.

Runs on every Keras backend.
"""

import keras
from keras import ops

from keras_transformer._compat import MaskByKeyword
from keras_transformer.layers._stack import Dropout, TransformerLayer, TransformerStack, layer_norm
from keras_transformer.layers.attention import MultiHeadAttention, split_outputs
from keras_transformer.layers.feed_forward import point_wise_feed_forward_network
from keras_transformer.layers.masking import create_padding_mask, is_keras_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(MaskByKeyword, TransformerLayer):
    """Self-attention and a feed-forward network, each with residual and norm.

    Args:
        d_model: int. Model width.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Inner width of the feed-forward network.
        rate: float in [0, 1). Dropout rate. Defaults to `0.1`.
        norm_first: bool. Pre-LN instead of the tutorial's post-LN. Defaults to
            `False`.
        activation: str. `"relu"` or `"gelu"`. Defaults to `"relu"`.
        **kwargs: other keys of the tutorial's `kargs` (ignored) and Keras
            layer arguments.

    Call arguments:
        x: tensor `(B, S, d_model)`.
        mask: the tutorial's numeric mask (1 = do not attend), e.g.
            `create_padding_mask(ids)` `(B, 1, 1, S)`, or a boolean one
            (Keras's: True = attend) `(B, S)` or `(B, S, S)`; the shapes of
            `masking.attend_mask`. `None` takes the Keras mask of `x`
            (`Embedding(mask_zero=True)`), which the output carries on.
        training: bool. Dropout is active only when `True`.
        return_attention_weights: bool. Also return the `(B, heads, S, S)`
            self-attention weights. Defaults to `False`.

    Returns:
        `(B, S, d_model)`, or `(output, weights)`.

    Example:
    >>> layer = EncoderLayer(d_model=512, num_heads=8, dff=2048)
    >>> tuple(layer(np.random.uniform(size=(64, 43, 512)), None).shape)
    (64, 43, 512)
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, norm_first=False, activation="relu",
                 **kwargs):
        super().__init__(d_model, num_heads, dff, rate, norm_first, activation, **kwargs)
        policy = self.dtype_policy
        self.mha = MultiHeadAttention(d_model, num_heads, dtype=policy, name="mha")
        self.ffn = point_wise_feed_forward_network(d_model, dff, activation, dtype=policy,
                                                   name="ffn")
        self.layernorm1 = layer_norm(policy, "layernorm1")
        self.layernorm2 = layer_norm(policy, "layernorm2")
        self.dropout1 = Dropout(rate, dtype=policy, name="dropout1")
        self.dropout2 = Dropout(rate, dtype=policy, name="dropout2")

    def build(self, input_shape):
        self.mha.build(input_shape)
        self.ffn.build(input_shape)
        self.layernorm1.build(input_shape)
        self.layernorm2.build(input_shape)

    def call(self, x, mask=None, training=None, return_attention_weights=False):
        # Self-attention block.
        h = self._block_input(x, self.layernorm1)
        attn_output, weights, _ = split_outputs(
            self.mha(h, h, h, mask, return_attention_scores=return_attention_weights),
            return_attention_weights, False,
        )  # (B, S, d_model), (B, H, S, S) or None
        x = self._block_output(x, attn_output, self.dropout1, self.layernorm1, training)

        # Feed-forward block.
        ffn_output = self.ffn(self._block_input(x, self.layernorm2))  # (B, S, d_model)
        x = self._block_output(x, ffn_output, self.dropout2, self.layernorm2, training)

        if return_attention_weights:
            return x, weights
        return x

    def compute_mask(self, x, mask=None):
        # Pass a Keras padding mask (B, S) on; attention masks stay internal.
        return mask if is_keras_mask(mask) and len(mask.shape) == 2 else None


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(MaskByKeyword, TransformerStack):
    """Token ids -> embeddings + positions -> `num_layers` `EncoderLayer`s.

    Without an explicit `mask` the tutorial's padding mask is computed from the
    ids, and the output carries a Keras mask (`ids != pad_token_idx`), so the
    encoder drops into functional models: `GlobalAveragePooling1D` after it
    averages over real tokens only. Runs on every Keras backend.

    Args:
        num_layers: int. Number of `EncoderLayer`s.
        d_model: int. Model width.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Inner width of the feed-forward networks.
        input_vocab_size: int. Source vocabulary size.
        maximum_position_encoding: int. Longest sequence accepted.
        rate: float in [0, 1). Dropout rate. Defaults to `0.1`.
        norm_first: bool. Pre-LN layers plus a final LayerNorm. Defaults to
            `False` (the tutorial's post-LN).
        activation: str. `"relu"` or `"gelu"`. Defaults to `"relu"`.
        position_encoding: str. `"sinusoidal"` (fixed, the tutorial) or
            `"learned"`. Defaults to `"sinusoidal"`.
        pad_token_idx: int. Id of `<PAD>`. Defaults to `0`.
        type_vocab_size: int. Number of segments (BERT's sentence A/B, 2) with
            an embedding each, added to the input; `0` for none. Defaults to
            `0`.
        embedding_layernorm: bool. A LayerNorm on the summed embeddings before
            the dropout, as BERT does. Defaults to `False`.
        embedding: a `keras.layers.Embedding(input_vocab_size, d_model)` to use
            (and share) instead of a new one; not part of the config, so the
            owner that shares it must rebuild the sharing. Defaults to `None`.
        **kwargs: other keys of the tutorial's `kargs` (ignored) and Keras
            layer arguments.

    Call arguments:
        x: int tensor `(B, S)`. Token ids.
        mask: the tutorial's numeric mask `(B, 1, 1, S)` (1 = do not
            attend), a boolean one (Keras's: True = attend) `(B, S)`, any
            shape of `masking.attend_mask`, or `None` (computed from `x`).
        training: bool. Dropout is active only when `True`.
        return_attention_weights: bool. Also return a dict
            `{"encoder_layer{i}": (B, heads, S, S)}`, `i` from 1.
        segment_ids: int tensor `(B, S)` of ids below `type_vocab_size`, or
            `None` (segment 0 everywhere). Only with `type_vocab_size > 0`.

    Returns:
        `(B, S, d_model)`, or `(output, weights)`.

    Example:
    >>> enc = Encoder(num_layers=2, d_model=512, num_heads=8, dff=2048,
    ...               input_vocab_size=8500, maximum_position_encoding=25)
    >>> tuple(enc(np.zeros((64, 25), "int32")).shape)
    (64, 25, 512)
    """

    VOCAB_SIZE_ARG = "input_vocab_size"

    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size,
                 maximum_position_encoding, **options):
        super().__init__(num_layers, d_model, num_heads, dff, input_vocab_size,
                         maximum_position_encoding, **options)
        self.input_vocab_size = input_vocab_size
        self.enc_layers = self._make_layers(EncoderLayer, "encoder_layer")

    def build(self, input_shape):
        self._build_stack(input_shape, self.enc_layers)

    def call(self, x, mask=None, training=None, return_attention_weights=False,
             segment_ids=None):
        if mask is None:
            mask = create_padding_mask(x, self.pad_token_idx)  # (B, 1, 1, S)
        x = self._embed(x, training=training, segment_ids=segment_ids)  # (B, S, d_model)

        attention_weights = {}
        for i, layer in enumerate(self.enc_layers):
            outputs = layer(x, mask, training=training,
                            return_attention_weights=return_attention_weights)
            if return_attention_weights:
                x, attention_weights[f"encoder_layer{i + 1}"] = outputs
            else:
                x = outputs
        if self.norm_first:
            x = self.final_layernorm(x)

        if return_attention_weights:
            return x, attention_weights
        return x

    def compute_mask(self, x, mask=None):
        return ops.not_equal(x, self.pad_token_idx)  # (B, S)
