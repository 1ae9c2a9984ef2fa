"""The tutorial's layers on every Keras backend: attention with its cache, masks,
positional encoding, the feed-forward network, and the encoder and decoder layers and stacks."""

from keras_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import point_wise_feed_forward_network
from keras_transformer.layers.masking import (
    create_look_ahead_mask,
    create_masks,
    create_padding_mask,
)
from keras_transformer.layers.positional import get_angles, positional_encoding

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MultiHeadAttention",
    "create_look_ahead_mask",
    "create_masks",
    "create_padding_mask",
    "get_angles",
    "point_wise_feed_forward_network",
    "positional_encoding",
    "scaled_dot_product_attention",
]
