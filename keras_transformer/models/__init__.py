"""The models built from the layers, on every Keras backend: the encoder-decoder
`Transformer` (call, generate, inference) and the encoder-only BERT models."""

from keras_transformer.models.bert import MaskedLanguageModel, SequenceClassifier, bert_encoder
from keras_transformer.models.transformer import Transformer

__all__ = ["MaskedLanguageModel", "SequenceClassifier", "Transformer", "bert_encoder"]
