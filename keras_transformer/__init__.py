"""keras_transformer: the Transformer of the Korean TF2 chatbot tutorial as
library-grade Keras 3 layers.

Importing the package loads the core, written in `keras.ops` and numpy: it
runs on every Keras 3 backend (TensorFlow, JAX, PyTorch; set `KERAS_BACKEND`
before importing Keras) and imports TensorFlow only when TensorFlow is the
backend. Its folders: `layers/` (attention, masks, positions, the encoder and
decoder), `models/` (`Transformer`, the encoder-only `MaskedLanguageModel`
and `SequenceClassifier`), `generation/` (decoding), `training/` (schedule,
loss, accuracy).

The application loads on first use (`train`, `Translator`,
`export_saved_model`, `pretrain`, `fine_tune`, `TextClassifier`, and with
them TensorFlow, tensorflow-text, sacrebleu and matplotlib): `text/`,
`data/`, `recipes/`, `serving/`, `cli`, `plotting`.
"""

import importlib

from keras_transformer import _startup

# The command line starts quietly: TensorFlow's start-up lines are held back
# (`_startup`); a Python import of the package changes nothing.
with _startup.quiet():
    import keras

    from keras_transformer.layers import (
        Decoder,
        DecoderLayer,
        Encoder,
        EncoderLayer,
        MultiHeadAttention,
        create_look_ahead_mask,
        create_masks,
        create_padding_mask,
        get_angles,
        point_wise_feed_forward_network,
        positional_encoding,
        scaled_dot_product_attention,
    )
    from keras_transformer.models import (
        MaskedLanguageModel,
        SequenceClassifier,
        Transformer,
        bert_encoder,
    )
    from keras_transformer.training import (
        CustomSchedule,
        MaskedAccuracy,
        MaskedCrossEntropy,
        MaskedLoss,
        masked_accuracy,
        masked_loss,
    )

__version__ = "0.1.0"

# Public names of the application modules, imported on first use.
_APPLICATION = {
    "TrainConfig": "keras_transformer.recipes.config",
    "TrainResult": "keras_transformer.recipes.seq2seq",
    "evaluate": "keras_transformer.recipes.seq2seq",
    "train": "keras_transformer.recipes.seq2seq",
    "Translator": "keras_transformer.serving.translator",
    "export_saved_model": "keras_transformer.serving.export",
    "PretrainConfig": "keras_transformer.recipes.config",
    "ClassifyConfig": "keras_transformer.recipes.config",
    "pretrain": "keras_transformer.recipes.classify",
    "fine_tune": "keras_transformer.recipes.classify",
    "TextClassifier": "keras_transformer.recipes.classify",
    "classification_metrics": "keras_transformer.recipes.classify",
    "split_pairs": "keras_transformer.recipes.harness",
    "translation_metrics": "keras_transformer.recipes.seq2seq",
    "TimeBudget": "keras_transformer.recipes.callbacks",
}
# The application's subpackages, `kt.data.load_chatbot_data` and `kt.text.WordTokenizer`.
_SUBPACKAGES = ("data", "text")


def __getattr__(name):
    if name in _APPLICATION or name in _SUBPACKAGES:
        backend = keras.backend.backend()
        if backend != "tensorflow":
            raise ImportError(
                f"keras_transformer.{name} needs the TensorFlow backend: the application "
                "(tokenizers, data, train, Translator, export, pretrain, fine_tune) runs on "
                f"TensorFlow and tensorflow-text. The Keras backend is {backend!r}; set "
                "KERAS_BACKEND=tensorflow before importing Keras, or use the core (the "
                "layers, Transformer, fit, generate), which runs on every backend."
            )
        if name in _SUBPACKAGES:
            value = importlib.import_module(f"keras_transformer.{name}")
        else:
            value = getattr(importlib.import_module(_APPLICATION[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_APPLICATION) | set(_SUBPACKAGES))


__all__ = [
    "ClassifyConfig",
    "CustomSchedule",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "MaskedLanguageModel",
    "MaskedLoss",
    "MultiHeadAttention",
    "PretrainConfig",
    "SequenceClassifier",
    "TextClassifier",
    "TimeBudget",
    "TrainResult",
    "TrainConfig",
    "Transformer",
    "Translator",
    "bert_encoder",
    "classification_metrics",
    "create_look_ahead_mask",
    "create_masks",
    "create_padding_mask",
    "evaluate",
    "export_saved_model",
    "fine_tune",
    "get_angles",
    "masked_accuracy",
    "masked_loss",
    "point_wise_feed_forward_network",
    "positional_encoding",
    "pretrain",
    "scaled_dot_product_attention",
    "split_pairs",
    "train",
    "translation_metrics",
]
