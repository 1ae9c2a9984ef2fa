"""The decoder: `DecoderLayer` and the stack of them, `Decoder`.

Each layer: masked self-attention (block 1), attention over the encoder output
(block 2), feed-forward; residuals and LayerNorm as in `encoder.py`.

For fast autoregressive decoding both take a `cache`: the encoder keys and
values are projected once per source, and the self-attention keys and values
of every generated position are written into a preallocated buffer of
`max_length` positions, so each step costs O(length) instead of re-running the
decoder over the whole prefix. The cache holds keys and values only; a step
runs the same sub-layers as training.

Runs on every Keras backend.
"""

import keras
from keras import ops

from keras_transformer.layers._stack import Dropout, TransformerLayer, TransformerStack, layer_norm
from keras_transformer.layers.attention import MultiHeadAttention, split_outputs
from keras_transformer.layers.feed_forward import point_wise_feed_forward_network
from keras_transformer.layers.masking import create_look_ahead_mask, create_padding_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerLayer):
    """Masked self-attention, encoder-decoder attention and a feed-forward net.

    Args:
        d_model: int. Model width.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Inner width of the feed-forward network.
        rate: float in [0, 1). Dropout rate. Defaults to `0.1`.
        norm_first: bool. Pre-LN instead of post-LN. Defaults to `False`.
        activation: str. `"relu"` or `"gelu"`. Defaults to `"relu"`.
        **kwargs: other keys of the tutorial's `kargs` (ignored) and Keras
            layer arguments.

    Masks: a numeric mask is the tutorial's (1 = do not attend), a boolean one
    Keras's (True = attend), in the shapes of `masking.attend_mask`. Without a
    cache, the Keras masks of `x` and `enc_output` (`Embedding(mask_zero=True)`,
    an `Encoder`'s output) block their padded positions as keys too, and the
    output carries the Keras mask of `x` on.

    Call arguments:
        x: tensor `(B, T, d_model)`.
        enc_output: tensor `(B, S, d_model)`. Ignored when `cache` is given.
        look_ahead_mask: mask for the self-attention, e.g. the tutorial's
            `(B, 1, T, T)` (`(B, 1, 1, L)` when decoding with a cache), or
            `None`.
        padding_mask: mask for the attention over `enc_output`, e.g. the
            tutorial's `(B, 1, 1, S)`, or `None`.
        training: bool. Dropout is active only when `True`.
        cache: dict `{"self": {"key", "value"}, "cross": {"key", "value"}}`
            from `Decoder.init_cache`, or `None`.
        cache_index: scalar int tensor. Position of `x` (`T == 1`) when
            decoding with `cache`.
        return_attention_weights: bool. Compute the weights of both blocks
            (the tutorial's outputs); `False` gives `None` in their place, and
            the attention may run through `keras.ops.dot_product_attention`
            (see `MultiHeadAttention`). Defaults to `True`.

    Returns:
        `(out (B, T, d_model), weights_block1 (B, heads, T, T),
        weights_block2 (B, heads, T, S))`; with a `cache`, also the updated
        cache.
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, norm_first=False, activation="relu",
                 **kwargs):
        super().__init__(d_model, num_heads, dff, rate, norm_first, activation, **kwargs)
        policy = self.dtype_policy
        self.mha1 = MultiHeadAttention(d_model, num_heads, dtype=policy, name="mha1")
        self.mha2 = MultiHeadAttention(d_model, num_heads, dtype=policy, name="mha2")
        self.ffn = point_wise_feed_forward_network(d_model, dff, activation, dtype=policy,
                                                   name="ffn")
        self.layernorm1 = layer_norm(policy, "layernorm1")
        self.layernorm2 = layer_norm(policy, "layernorm2")
        self.layernorm3 = layer_norm(policy, "layernorm3")
        self.dropout1 = Dropout(rate, dtype=policy, name="dropout1")
        self.dropout2 = Dropout(rate, dtype=policy, name="dropout2")
        self.dropout3 = Dropout(rate, dtype=policy, name="dropout3")
        self.supports_masking = True  # the Keras mask of `x` goes on to the output

    def build(self, input_shape):
        self.mha1.build(input_shape)
        self.mha2.build(input_shape)
        self.ffn.build(input_shape)
        self.layernorm1.build(input_shape)
        self.layernorm2.build(input_shape)
        self.layernorm3.build(input_shape)

    def call(
        self,
        x,
        enc_output,
        look_ahead_mask,
        padding_mask,
        training=None,
        cache=None,
        cache_index=None,
        return_attention_weights=True,
    ):
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache["self"], cache["cross"]

        # Masked self-attention block.
        h = self._block_input(x, self.layernorm1)
        outputs = self.mha1(h, h, h, look_ahead_mask, cache=self_cache, cache_index=cache_index,
                            return_attention_scores=return_attention_weights)
        attn1, weights_block1, self_cache = split_outputs(
            outputs, return_attention_weights, self_cache is not None
        )  # (B, T, d_model), (B, H, T, T or L)
        x = self._block_output(x, attn1, self.dropout1, self.layernorm1, training)

        # Encoder-decoder attention block: queries from the decoder.
        h = self._block_input(x, self.layernorm2)
        outputs = self.mha2(enc_output, enc_output, h, padding_mask, cache=cross_cache,
                            return_attention_scores=return_attention_weights)
        attn2, weights_block2, _ = split_outputs(
            outputs, return_attention_weights, cross_cache is not None
        )  # (B, T, d_model), (B, H, T, S)
        x = self._block_output(x, attn2, self.dropout2, self.layernorm2, training)

        # Feed-forward block.
        ffn_output = self.ffn(self._block_input(x, self.layernorm3))  # (B, T, d_model)
        x = self._block_output(x, ffn_output, self.dropout3, self.layernorm3, training)

        if cache is None:
            return x, weights_block1, weights_block2
        return x, weights_block1, weights_block2, {"self": self_cache, "cross": cross_cache}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(TransformerStack):
    """Target ids -> embeddings + positions -> `num_layers` `DecoderLayer`s.

    Runs on every Keras backend.

    Args:
        Those of `Encoder` (`num_layers` counts `DecoderLayer`s), with
        target_vocab_size: int. Target vocabulary size, in place of
            `input_vocab_size`; a shared `embedding` is an
            `Embedding(target_vocab_size, d_model)`.

    Call arguments:
        x: int tensor `(B, T)`. Decoder input ids (`<SOS>` first).
        enc_output: tensor `(B, S, d_model)`. Ignored when `cache` is given.
        look_ahead_mask: float tensor `(B, 1, T, T)`, or `None` to compute the
            tutorial's combined look-ahead and padding mask from `x`.
        padding_mask: float tensor `(B, 1, 1, S)` masking source padding, or
            `None` when the source has no padding.
        training: bool. Dropout is active only when `True`.
        cache: the list from `init_cache`, or `None`. With a cache, `x` is one
            token `(B, 1)` at position `cache_index` and the masks are built
            from `cache_index`.
        cache_index: scalar int tensor. Position of `x` when decoding.
        return_attention_weights: bool. Compute every layer's weights (the
            tutorial's output); `False` leaves the dict empty, and the
            attention may run through `keras.ops.dot_product_attention` (see
            `MultiHeadAttention`). Defaults to `True`.

    Masks follow `DecoderLayer`'s rule (numeric: the tutorial's, 1 = do not
    attend; boolean: Keras's, True = attend); without a cache, the Keras mask
    of an `enc_output` from an `Encoder` blocks its padding without a
    `padding_mask`. (The output carries no Keras mask: a model's logits with
    one would be weighted by it in Keras's loss, on top of `masked_loss`.)

    Returns:
        `(output (B, T, d_model), attention_weights)` with
        `attention_weights["decoder_layer{i}_block1"]` `(B, heads, T, T)` and
        `["decoder_layer{i}_block2"]` `(B, heads, T, S)`, `i` from 1; with a
        `cache`, also the updated cache.
    """

    VOCAB_SIZE_ARG = "target_vocab_size"

    def __init__(self, num_layers, d_model, num_heads, dff, target_vocab_size,
                 maximum_position_encoding, **options):
        super().__init__(num_layers, d_model, num_heads, dff, target_vocab_size,
                         maximum_position_encoding, **options)
        self.target_vocab_size = target_vocab_size
        self.dec_layers = self._make_layers(DecoderLayer, "decoder_layer")

    def build(self, input_shape):
        self._build_stack(input_shape, self.dec_layers)

    def init_cache(self, enc_output, max_length):
        """The decoding cache for `enc_output` `(B, S, d_model)`.

        Returns:
            A list with one dict per layer: `"cross"` holds the projected
            encoder keys and values `(B, heads, S, depth)`, `"self"` an empty
            buffer `(B, heads, max_length, depth)` for the generated positions.
        """
        batch_size = ops.shape(enc_output)[0]
        return [
            {
                "self": layer.mha1.init_cache(batch_size, max_length),
                "cross": layer.mha2.compute_key_value(enc_output, enc_output),
            }
            for layer in self.dec_layers
        ]

    def call(
        self,
        x,
        enc_output,
        look_ahead_mask=None,
        padding_mask=None,
        training=None,
        cache=None,
        cache_index=None,
        return_attention_weights=True,
    ):
        if cache is not None:
            # Attend to the cached positions up to this one (boolean: True = attend).
            max_length = ops.shape(cache[0]["self"]["key"])[2]
            visible = ops.arange(max_length) <= cache_index  # (L,)
            look_ahead_mask = visible[None, None, None, :]  # (1, 1, 1, L)
        elif look_ahead_mask is None:
            look_ahead_mask = ops.maximum(
                create_padding_mask(x, self.pad_token_idx),  # (B, 1, 1, T)
                create_look_ahead_mask(ops.shape(x)[1]),  # (T, T)
            )  # (B, 1, T, T)
        x = self._embed(x, training=training, position=cache_index)  # (B, T, d_model)

        attention_weights = {}
        new_cache = []
        for i, layer in enumerate(self.dec_layers):
            outputs = layer(
                x,
                enc_output,
                look_ahead_mask,
                padding_mask,
                training=training,
                cache=None if cache is None else cache[i],
                cache_index=cache_index,
                return_attention_weights=return_attention_weights,
            )
            x, block1, block2 = outputs[:3]
            if return_attention_weights:
                attention_weights[f"decoder_layer{i + 1}_block1"] = block1
                attention_weights[f"decoder_layer{i + 1}_block2"] = block2
            if cache is not None:
                new_cache.append(outputs[3])
        if self.norm_first:
            x = self.final_layernorm(x)

        if cache is None:
            return x, attention_weights
        return x, attention_weights, new_cache
