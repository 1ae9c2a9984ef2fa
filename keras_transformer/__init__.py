"""keras_transformer: the Transformer of the Korean TF2 chatbot tutorial as
library-grade Keras 3 layers."""

from keras_transformer.attention import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.decoder import Decoder, DecoderLayer
from keras_transformer.encoder import Encoder, EncoderLayer
from keras_transformer.export import export_saved_model
from keras_transformer.feed_forward import point_wise_feed_forward_network
from keras_transformer.masking import create_look_ahead_mask, create_masks, create_padding_mask
from keras_transformer.positional import get_angles, positional_encoding
from keras_transformer.recipe import TrainResult, evaluate, train
from keras_transformer.training import CustomSchedule, MaskedLoss, masked_accuracy, masked_loss
from keras_transformer.transformer import Transformer
from keras_transformer.translator import Translator

__version__ = "0.1.0"

__all__ = [
    "CustomSchedule",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MaskedLoss",
    "MultiHeadAttention",
    "TrainResult",
    "Transformer",
    "Translator",
    "create_look_ahead_mask",
    "create_masks",
    "create_padding_mask",
    "evaluate",
    "export_saved_model",
    "get_angles",
    "masked_accuracy",
    "masked_loss",
    "point_wise_feed_forward_network",
    "positional_encoding",
    "scaled_dot_product_attention",
    "train",
]
