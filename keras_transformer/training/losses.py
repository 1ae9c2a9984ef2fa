"""Cross-entropy that ignores padding.

The tutorial averages its loss over every position, padding included, so the
reported loss shrinks as batches get more padded. Here the loss is a mean
over the non-`<PAD>` target tokens only.

Runs on every Keras backend.
"""

import keras
from keras import ops

from keras_transformer import _backend, _config


def non_pad_mean(values, y_true, pad_token_idx, replica_share):
    """Mean of `values` `(B, T)` over the positions where `y_true` is not pad.

    Under a TensorFlow `tf.distribute` strategy with N replicas each replica
    holds a slice of the global batch, and the mean is taken over the tokens
    of the whole global batch (the slices may hold different numbers of
    tokens): with `replica_share`, this replica's share of it (the shares add
    up to the mean, as a loss must: Keras sums the replicas' gradients);
    otherwise N times the share (Keras averages metric values over the
    replicas). JAX and PyTorch see the global batch at once (N = 1).
    """
    mask = ops.cast(ops.not_equal(y_true, pad_token_idx), "float32")
    total, count = ops.sum(values * mask), ops.sum(mask)
    count, replicas = _backend.replica_token_count(count)
    if not replica_share:
        total = total * replicas
    return ops.divide_no_nan(total, count)


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_loss(y_true, y_pred, label_smoothing=0.0, pad_token_idx=0):
    """Cross-entropy from logits, averaged over the non-`<PAD>` targets.

    With label smoothing eps the target distribution puts 1 - eps on the true
    token and spreads eps uniformly over the vocabulary.

    Args:
        y_true: int tensor `(B, T)`. Target ids.
        y_pred: float tensor `(B, T, V)`. Logits.
        label_smoothing: float in [0, 1). Defaults to `0.0`.
        pad_token_idx: int. Targets equal to it are ignored. Defaults to `0`.

    Returns:
        Scalar float32 loss. Under a TensorFlow `tf.distribute` strategy with
        several replicas: this replica's share of the mean over the global batch's
        tokens (the replicas' values add up to it).
    """
    label_smoothing = _config.check_rate("label_smoothing", label_smoothing)
    y_true = ops.cast(y_true, "int32")
    return non_pad_mean(token_losses(y_true, y_pred, label_smoothing), y_true, pad_token_idx,
                        replica_share=True)


def token_losses(y_true, y_pred, label_smoothing):
    """float32 `(B, T)`: the cross-entropy of every target token, smoothed."""
    logits = ops.cast(y_pred, "float32")
    loss = ops.sparse_categorical_crossentropy(y_true, logits, from_logits=True)  # (B, T)
    if label_smoothing:
        uniform = -ops.mean(ops.log_softmax(logits, axis=-1), axis=-1)  # (B, T)
        loss = (1.0 - label_smoothing) * loss + label_smoothing * uniform
    return loss


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLoss(keras.losses.Loss):
    """`masked_loss` as a configurable, serialisable Keras loss.

    Args:
        label_smoothing: float in [0, 1). Defaults to `0.0`.
        pad_token_idx: int. Defaults to `0`.

    Example:
    >>> loss = MaskedLoss(label_smoothing=0.1)  # model.compile(optimizer, loss=loss)
    >>> round(float(loss([[5, 2, 0]], np.eye(8)[[[5, 2, 7]]] * 20.0)), 2)
    1.75
    """

    def __init__(self, label_smoothing=0.0, pad_token_idx=0, name="masked_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = _config.check_rate("label_smoothing", label_smoothing)
        self.pad_token_idx = pad_token_idx

    def call(self, y_true, y_pred):
        return masked_loss(y_true, y_pred, self.label_smoothing, self.pad_token_idx)

    def get_config(self):
        return {
            "name": self.name,
            "label_smoothing": self.label_smoothing,
            "pad_token_idx": self.pad_token_idx,
        }
