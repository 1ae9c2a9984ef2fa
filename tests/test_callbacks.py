"""The recipe's callbacks that choose and stop: `EpochScores`, `BestWeights`,
`EarlyStopping` (the backup's faults are in `test_faults.py`)."""

import keras
import numpy as np
import pytest

from keras_transformer.recipes.callbacks import (
    AccuracyThenLoss,
    BestWeights,
    EarlyStopping,
    EpochScores,
    TimeBudget,
)


class Model:
    """What the callbacks use of a Keras model."""

    stop_training = False

    def __init__(self):
        self.saved = []

    def save_weights(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(str(len(self.saved)))
        self.saved.append(path)


def run(callback, values, monitor="val_chrf"):
    """Epoch ends with these monitored values; returns the epochs that ran."""
    model = Model()
    callback.set_model(model)
    callback.on_train_begin()
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, {monitor: value})
        if model.stop_training:
            return epoch + 1
    return len(values)


def test_early_stopping_on_a_higher_is_better_score():
    stopper = EarlyStopping("val_chrf", mode="max", patience=2)
    assert run(stopper, [1.0, 3.0, 2.0, 2.5, 9.0]) == 4  # epochs 3 and 4 do not beat 3.0
    assert stopper.best == 3.0 and stopper.stopped_epoch == 3


def test_early_stopping_ignores_the_warm_up_epochs():
    values = [5.0, 0.0, 0.0, 0.0, 1.0, 2.0, 1.5, 1.0, 0.5]
    assert run(EarlyStopping("val_chrf", mode="max", patience=2), values) == 3
    late = EarlyStopping("val_chrf", mode="max", patience=2, start_from_epoch=4)
    assert run(late, values) == 8 and late.best == 2.0


def test_early_stopping_stops_at_a_score_that_cannot_improve():
    perfect = EarlyStopping("val_chrf", mode="max", patience=5, start_from_epoch=100, goal=100)
    assert run(perfect, [10.0, 70.0, 100.0, 100.0]) == 3


def test_early_stopping_resumes_from_the_earlier_epochs():
    """A resumed run stops where a run that never stopped would."""
    values = [1.0, 4.0, 3.0, 2.0, 2.5]
    whole = EarlyStopping("val_chrf", mode="max", patience=3)
    resumed = EarlyStopping("val_chrf", mode="max", patience=3, earlier=values[:2])
    assert run(whole, values) == 5
    assert run(resumed, values[2:]) == 3


def test_best_weights_keeps_the_best_epoch_only(tmp_path):
    best = BestWeights(str(tmp_path / "best.weights.h5"), "val_chrf", mode="max")
    model = Model()
    best.set_model(model)
    for epoch, value in enumerate([2.0, 5.0, 4.0, 6.0]):
        best.on_epoch_end(epoch, {"val_chrf": value})
    assert len(model.saved) == 3 and best.best == 6.0
    assert (tmp_path / "best.weights.h5").read_text(encoding="utf-8") == "2"  # epoch 4's
    with pytest.raises(ValueError, match="mode"):
        BestWeights("x.weights.h5", mode="maximum")


def test_best_weights_ignore_the_warm_up_epochs(tmp_path):
    path = tmp_path / "best.weights.h5"
    best = BestWeights(str(path), "val_accuracy", mode="max", start_from_epoch=2)
    model = Model()
    best.set_model(model)
    for epoch, value in enumerate([0.3, 0.2]):  # a lucky warm-up epoch is not ranked ...
        best.on_epoch_end(epoch, {"val_accuracy": value})
    assert best.best is None and path.read_text(encoding="utf-8") == "1"  # ... the latest stands
    for epoch, value in enumerate([0.25, 0.2, 0.3], start=2):
        best.on_epoch_end(epoch, {"val_accuracy": value})
    assert len(model.saved) == 4 and best.best == 0.3
    assert path.read_text(encoding="utf-8") == "3"  # epoch 4's


def test_accuracy_ties_are_broken_by_the_loss_and_only_ties():
    def score(accuracy, **loss):
        logs = {"val_accuracy": accuracy, **loss}
        AccuracyThenLoss(10).on_epoch_end(0, logs)
        return logs["val_score"]

    assert score(0.6, val_loss=100.0) > score(0.5, val_loss=0.0)  # one question more wins
    assert score(0.5, val_loss=0.8) > score(0.5, val_loss=0.9)
    assert score(0.5) == score(0.5, val_loss=float("nan")) == 0.5
    with pytest.raises(ValueError, match="n"):
        AccuracyThenLoss(0)


def test_epoch_scores_reach_the_callbacks_after_it():
    logs = {"loss": 1.0}
    scores = EpochScores(lambda model: {"chrf": 12.5, "bleu": np.float32(3.0)})
    scores.set_model(keras.Sequential())
    scores.on_epoch_end(0, logs)
    assert logs == {"loss": 1.0, "val_chrf": 12.5, "val_bleu": 3.0}


def test_a_time_budget_stops_after_its_seconds_but_not_before_its_steps():
    model = Model()
    budget = TimeBudget(0, min_steps=3)
    budget.set_model(model)
    budget.on_train_begin()
    for step in range(3):
        assert not model.stop_training
        budget.on_train_batch_end(step)
    assert model.stop_training and budget.stopped
    with pytest.raises(ValueError, match="min_steps"):
        TimeBudget(1, min_steps=-1)
