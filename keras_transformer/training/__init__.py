"""Training on every Keras backend: the paper's learning-rate schedule and the
recipes' optimizer, and the loss and accuracy over the non-`<PAD>` target tokens."""

from keras_transformer.training.losses import MaskedLoss, masked_loss
from keras_transformer.training.metrics import (
    MaskedAccuracy,
    MaskedCrossEntropy,
    masked_accuracy,
)
from keras_transformer.training.schedule import (
    CustomSchedule,
    default_learning_rate,
    recipe_optimizer,
)

__all__ = [
    "CustomSchedule",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "MaskedLoss",
    "default_learning_rate",
    "masked_accuracy",
    "masked_loss",
    "recipe_optimizer",
]
