"""Accuracy and cross-entropy over the non-`<PAD>` target tokens.

Runs on every Keras backend.
"""

import keras
from keras import ops

from keras_transformer import _config
from keras_transformer.training.losses import non_pad_mean, token_losses


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(y_true, y_pred, pad_token_idx=0):
    """Fraction of non-`<PAD>` targets whose arg-max logit is the true id.

    Args:
        y_true: int tensor `(B, T)`. Target ids.
        y_pred: float tensor `(B, T, V)`. Logits or probabilities.
        pad_token_idx: int. Targets equal to it are ignored. Defaults to `0`.

    Returns:
        Scalar float32 accuracy.
    """
    y_true = ops.cast(y_true, "int32")
    predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
    return non_pad_mean(ops.cast(ops.equal(y_true, predicted), "float32"), y_true,
                         pad_token_idx, replica_share=False)


class _TokenMean(keras.metrics.Metric):
    """The mean of a per-token value over every non-`<PAD>` target token seen
    since the last reset: a sum and a count, so each token weighs the same
    whatever the lengths of the batches (length bucketing makes them differ).
    Subclasses give the value, `token_values(y_true, y_pred) -> (B, T)`."""

    def __init__(self, pad_token_idx=0, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_token_idx = pad_token_idx
        self.total = self.add_variable((), "zeros", name="total", aggregation="sum")
        self.count = self.add_variable((), "zeros", name="count", aggregation="sum")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        weight = ops.cast(ops.not_equal(y_true, self.pad_token_idx), "float32")  # (B, T)
        if sample_weight is not None:
            weight = weight * ops.cast(sample_weight, "float32")
        self.total.assign_add(ops.sum(self.token_values(y_true, y_pred) * weight))
        self.count.assign_add(ops.sum(weight))

    def result(self):
        return ops.divide_no_nan(self.total, self.count)

    def get_config(self):
        return {"name": self.name, "pad_token_idx": self.pad_token_idx}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(_TokenMean):
    """`masked_accuracy` as a metric object, per token across batches.

    Keras wraps a metric function (`metrics=[masked_accuracy]`) into the mean
    of its per-batch values; this object counts tokens, so a batch of short
    answers weighs less than a batch of long ones.

    Args:
        pad_token_idx: int. Defaults to `0`.
        name: str. Defaults to `"masked_accuracy"`.

    Example:
    >>> metric = MaskedAccuracy(pad_token_idx=5)
    >>> metric.update_state([[7, 8, 5]], np.eye(10)[[[7, 9, 5]]])
    >>> float(metric.result())
    0.5
    """

    def __init__(self, pad_token_idx=0, name="masked_accuracy", **kwargs):
        super().__init__(pad_token_idx=pad_token_idx, name=name, **kwargs)

    def token_values(self, y_true, y_pred):
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        return ops.cast(ops.equal(y_true, predicted), "float32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedCrossEntropy(_TokenMean):
    """The cross-entropy of `MaskedLoss` as a metric, per token across batches.

    Keras reports `loss` as the mean of the per-batch losses weighted by the
    number of rows; with batches of different lengths that is not the mean
    over tokens. Compile this metric in to read that mean
    (`metrics=[MaskedCrossEntropy()]` gives `masked_cross_entropy` and
    `val_masked_cross_entropy`).

    Args:
        label_smoothing: float in [0, 1). As the loss's. Defaults to `0.0`.
        pad_token_idx: int. Defaults to `0`.
        name: str. Defaults to `"masked_cross_entropy"`.
    """

    def __init__(self, label_smoothing=0.0, pad_token_idx=0, name="masked_cross_entropy",
                 **kwargs):
        super().__init__(pad_token_idx=pad_token_idx, name=name, **kwargs)
        self.label_smoothing = _config.check_rate("label_smoothing", label_smoothing)

    def token_values(self, y_true, y_pred):
        return token_losses(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}
