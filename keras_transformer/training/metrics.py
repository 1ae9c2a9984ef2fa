"""Accuracy over the non-`<PAD>` target tokens.

Runs on every Keras backend.
"""

import keras
from keras import ops

from keras_transformer import _backend
from keras_transformer.training.losses import non_pad_mean


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
    predicted = _backend.argmax(y_pred)
    return non_pad_mean(ops.cast(ops.equal(y_true, predicted), "float32"), y_true,
                         pad_token_idx, replica_share=False)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.MeanMetricWrapper):
    """`masked_accuracy` as a metric object, for a `<PAD>` id other than 0.

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
        super().__init__(masked_accuracy, name=name, pad_token_idx=pad_token_idx, **kwargs)
        self.pad_token_idx = pad_token_idx

    def get_config(self):
        return {"name": self.name, "pad_token_idx": self.pad_token_idx}
