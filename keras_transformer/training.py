"""Training helpers: the paper's learning-rate schedule and losses that ignore
padding.

The tutorial averages its loss over every position, padding included, so the
reported loss shrinks as batches get more padded. Here the loss and the
accuracy are means over the non-`<PAD>` target tokens only.

Runs on every Keras backend.
"""

import keras
from keras import ops

from keras_transformer import _backend, _config


@keras.saving.register_keras_serializable(package="keras_transformer")
class CustomSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (sec. 5.3).

    `step` counts from 1 as in the paper (the optimizer's iteration 0 is step 1).
    The rate rises linearly for `warmup_steps` steps, to its peak
    `(d_model * warmup_steps)^-0.5`, then falls as `step^-0.5`. The paper's
    peak depends on the warm-up: a short warm-up gives a high peak (0.012 for
    d_model 256 and 27 steps, which a post-LN model does not survive). With
    `peak_learning_rate` the curve keeps its shape and the peak is that value,
    whatever the warm-up:

        lrate = peak_learning_rate * min(sqrt(warmup_steps / step), step / warmup_steps)

    Args:
        d_model: int. Model width.
        warmup_steps: int. Steps of linear warm-up. Defaults to `4000`.
        peak_learning_rate: float. The rate at the end of the warm-up.
            Defaults to `None`: the paper's `(d_model * warmup_steps)^-0.5`.

    Example:
    >>> schedule = CustomSchedule(512)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98,
    ...                                   epsilon=1e-9)
    >>> round(float(CustomSchedule(256, 400, peak_learning_rate=1e-3)(399)), 6)
    0.001
    """

    def __init__(self, d_model, warmup_steps=4000, peak_learning_rate=None):
        super().__init__()
        self.d_model = _config.check_positive_int("d_model", d_model)
        self.warmup_steps = _config.check_positive_int("warmup_steps", warmup_steps)
        if peak_learning_rate is not None and not (
            isinstance(peak_learning_rate, (int, float)) and peak_learning_rate > 0
        ):
            raise ValueError(
                "Received an invalid value for argument `peak_learning_rate`, expected a "
                f"float > 0 or None. Received: peak_learning_rate={peak_learning_rate!r}"
            )
        self.peak_learning_rate = peak_learning_rate

    @property
    def peak(self):
        """The learning rate at the end of the warm-up."""
        if self.peak_learning_rate is None:
            return (self.d_model * self.warmup_steps) ** -0.5
        return float(self.peak_learning_rate)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        return self.peak * ops.minimum(ops.sqrt(warmup / step), step / warmup)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
                "peak_learning_rate": self.peak_learning_rate}


def default_learning_rate(d_model):
    """The peak of the paper's schedule for `d_model`: `(d_model * 4000)^-0.5`.

    The paper reaches it after 4000 warm-up steps; the recipe reaches it after
    `warmup_steps` (400), so that short runs train at it too, and it never
    depends on the length of the run (a warm-up set to a tenth of a short run
    made the peak 0.012 for d_model 256, and the model collapsed).
    """
    return (d_model * 4000) ** -0.5


def recipe_optimizer(d_model, warmup_steps, learning_rate=None, weight_decay=None):
    """The recipes' optimizer: the paper's Adam (beta_2 0.98, epsilon 1e-9) on
    `CustomSchedule`, peaking at `learning_rate` after `warmup_steps` steps.

    Args:
        d_model: int. Model width.
        warmup_steps: int. Steps of linear warm-up.
        learning_rate: float. The peak. Defaults to `None`:
            `default_learning_rate(d_model)`, whatever the warm-up.
        weight_decay: float. With a value, AdamW with that decoupled weight
            decay (BERT's optimizer). Defaults to `None`: Adam.
    """
    schedule = CustomSchedule(d_model, warmup_steps,
                              learning_rate or default_learning_rate(d_model))
    options = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    if weight_decay is None:
        return keras.optimizers.Adam(schedule, **options)
    return keras.optimizers.AdamW(schedule, weight_decay=weight_decay, **options)


def _non_pad_mean(values, y_true, pad_token_idx, replica_share):
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
    logits = ops.cast(y_pred, "float32")
    loss = ops.sparse_categorical_crossentropy(y_true, logits, from_logits=True)  # (B, T)
    if label_smoothing:
        uniform = -ops.mean(ops.log_softmax(logits, axis=-1), axis=-1)  # (B, T)
        loss = (1.0 - label_smoothing) * loss + label_smoothing * uniform
    return _non_pad_mean(loss, y_true, pad_token_idx, replica_share=True)


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
    return _non_pad_mean(ops.cast(ops.equal(y_true, predicted), "float32"), y_true,
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
