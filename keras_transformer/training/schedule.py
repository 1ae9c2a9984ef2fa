"""The paper's learning-rate schedule (sec. 5.3) and the recipes' optimizer.

Runs on every Keras backend.
"""

import keras
from keras import ops

from keras_transformer import _config


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
