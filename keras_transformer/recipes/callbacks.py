"""Callbacks of the training recipe: resumable, crash-safe, time-bounded.

`Backup` replaces `keras.callbacks.BackupAndRestore`, which writes its weights
and its epoch counter as two plain files: a kill while it writes leaves a
truncated weights file or weights one epoch ahead of the counter, and it does
not keep the random-number state of dropout, so a resumed run trains on other
masks than a run that never stopped. `Backup` writes both into place
atomically, the counter last, and keeps that state too.
"""

import json
import math
import os
import time

import keras
import numpy as np

from keras_transformer import _compat, _config
from keras_transformer._files import atomic_path, write_text
from keras_transformer.errors import InputError, user_errors

STATE_FILE = "state.json"
WEIGHTS_PATTERN = "epoch-{:05d}.weights.h5"


class Backup(keras.callbacks.Callback):
    """Back up the training state at the end of every epoch; `restore` it.

    The state is the model's weights, the optimizer's (its step counter
    included) and the dropout layers' random-number state, plus the number of
    finished epochs. Together with a data set that orders each epoch by its
    number alone (`make_dataset(..., epochs=...)`), a run killed at any point
    and restarted ends with the weights of a run that never stopped
    (under `tf.config.experimental.enable_op_determinism()`).

    Args:
        directory: str. Where the state lives (created).
    """

    def __init__(self, directory):
        super().__init__()
        self.directory = directory
        self.state_path = os.path.join(directory, STATE_FILE)

    def read_state(self):
        """The saved state dict (`epoch`, `finished`, ...), or `None`.

        Raises:
            InputError: naming the file, when it cannot be read.
        """
        if not os.path.isfile(self.state_path):
            return None
        try:
            with open(self.state_path, encoding="utf-8") as f:
                state = json.load(f)
            valid = (isinstance(state["epoch"], int) and isinstance(state["finished"], bool)
                     and isinstance(state["weights"], str)
                     and isinstance(state["seed_states"], list))
        except (ValueError, KeyError, TypeError) as error:
            raise InputError(f"{self.state_path}: not a training backup ({error!r})") from None
        if not valid:
            raise InputError(f"{self.state_path}: not a training backup ({state!r})")
        return state

    def restore(self, model):
        """Load the last backed-up state into the compiled `model`.

        Returns:
            int: the number of epochs already trained (`0` without a backup).
        """
        state = self.read_state()
        if state is None:
            return 0
        weights_path = os.path.join(self.directory, state["weights"])
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        with user_errors(weights_path, "cannot load the backup"):
            model.load_weights(weights_path)
        variables = _compat.seed_states(model)
        if len(variables) != len(state["seed_states"]):
            raise InputError(f"{self.state_path}: the backup is of another model")
        for variable, value in zip(variables, state["seed_states"]):
            variable.assign(np.asarray(value, dtype=variable.dtype))
        return int(state["epoch"])

    def save(self, epochs_done, finished=False):
        """Write the current state as the state after `epochs_done` epochs."""
        name = WEIGHTS_PATTERN.format(epochs_done)
        with atomic_path(os.path.join(self.directory, name)) as temporary:
            self.model.save_weights(temporary)
        state = {
            "epoch": epochs_done,
            "finished": finished,
            "weights": name,
            "seed_states": [np.asarray(v).tolist() for v in _compat.seed_states(self.model)],
        }
        write_text(self.state_path, json.dumps(state))
        for other in os.listdir(self.directory):
            if other.startswith("epoch-") and other != name:
                os.remove(os.path.join(self.directory, other))

    def finish(self):
        """Mark the backup as of a finished training (a re-run skips `fit`)."""
        state = self.read_state()
        if state is None:
            self.save(0, finished=True)
        else:
            write_text(self.state_path, json.dumps(dict(state, finished=True)))

    def on_epoch_end(self, epoch, logs=None):
        self.save(epoch + 1)


MODES = ("min", "max")


def _improves(value, best, mode):
    """Whether `value` beats `best` (`None`: nothing to beat yet)."""
    if best is None:
        return True
    return value < best if mode == "min" else value > best


class EpochScores(keras.callbacks.Callback):
    """Adds scores computed from the model at the end of every epoch to the logs.

    Callbacks after this one in the list (checkpoints, early stopping, the
    CSV log, the progress bar, `History`) see the scores as if `fit` had
    computed them.

    Args:
        score_fn: callable `model -> dict` of floats, e.g. BLEU and chrF of
            greedy translations of validation sentences.
        prefix: str. Put before every key. Defaults to `"val_"`.
    """

    def __init__(self, score_fn, prefix="val_"):
        super().__init__()
        self.score_fn, self.prefix = score_fn, prefix

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update({self.prefix + key: float(value)
                         for key, value in self.score_fn(self.model).items()})


class BestWeights(keras.callbacks.Callback):
    """Keep the weights of the epoch with the best `monitor`, written atomically.

    Args:
        path: str. A `.weights.h5` file.
        monitor: str. Defaults to `"val_loss"`.
        mode: str. `"min"` (lower is better) or `"max"`. Defaults to `"min"`.
        best: float. The value to beat (from earlier runs of a resumed
            training). Defaults to `None` (the first epoch watched is kept).
        start_from_epoch: int. Epochs (from 0) before this one are not
            ranked: those of the learning-rate warm-up, whose half-trained
            weights a small validation set can rank first by chance (ties in
            accuracy over ten examples are common). Until then every epoch's
            weights are written, so a run that ends in its warm-up keeps its
            last ones. Defaults to `0`.
    """

    def __init__(self, path, monitor="val_loss", mode="min", best=None, start_from_epoch=0):
        super().__init__()
        self.path, self.monitor, self.best = path, monitor, best
        self.mode = _config.check_choice("mode", mode, MODES)
        self.start_from_epoch = start_from_epoch

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if epoch < self.start_from_epoch:
            self._save()
        elif value is not None and _improves(value, self.best, self.mode):
            self.best = float(value)
            self._save()

    def _save(self):
        with atomic_path(self.path) as temporary:
            self.model.save_weights(temporary)


class AccuracyThenLoss(keras.callbacks.Callback):
    """Adds `val_score` to the logs: the validation accuracy, ties broken by
    the lower validation loss.

    Over `n` examples accuracy moves in steps of `1 / n`; the loss adds less
    than one step (`1 / (n + 1)` times `1 / (1 + val_loss)`), so a better
    accuracy always wins. On a small validation set many epochs tie in
    accuracy, and the loss then tells which to keep and whether training
    still improves. A missing or non-finite loss adds nothing.

    Args:
        n: int. The number of validation examples.

    Example:
    >>> logs = {"val_accuracy": 0.5, "val_loss": 1.0}
    >>> AccuracyThenLoss(10).on_epoch_end(0, logs)
    >>> round(logs["val_score"], 4)
    0.5455
    """

    def __init__(self, n):
        super().__init__()
        self.step = 1 / (_config.check_positive_int("n", n) + 1)

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or "val_accuracy" not in logs:
            return
        loss = logs.get("val_loss")
        finite = loss is not None and math.isfinite(float(loss))
        logs["val_score"] = float(logs["val_accuracy"]) + (
            self.step / (1 + float(loss)) if finite else 0.0)


class EarlyStopping(keras.callbacks.Callback):
    """Stop training after `patience` epochs without a better `monitor`.

    Unlike `keras.callbacks.EarlyStopping` it starts from the values of the
    epochs an earlier run already trained, so a resumed run stops where one
    that never stopped would.

    Args:
        monitor: str. Defaults to `"val_loss"`.
        mode: str. `"min"` (lower is better) or `"max"`. Defaults to `"min"`.
        patience: int. Epochs without improvement before stopping.
            Defaults to `5`.
        earlier: list of float. The monitored values of the earlier epochs.
            Defaults to `()`.
        start_from_epoch: int. Epochs (from 0) before this one are not
            watched, e.g. those of the learning-rate warm-up. Defaults to `0`.
        goal: float. Stop as soon as `monitor` reaches it (a score that
            cannot get better, like chrF 100), warm-up or not. Defaults to
            `None`.

    Attributes:
        stopped_epoch: int. The epoch (from 0) after which it stopped, or `None`.
    """

    def __init__(self, monitor="val_loss", mode="min", patience=5, earlier=(),
                 start_from_epoch=0, goal=None):
        super().__init__()
        self.monitor, self.patience = monitor, patience
        self.mode = _config.check_choice("mode", mode, MODES)
        self.earlier = list(earlier)
        self.start_from_epoch, self.goal = start_from_epoch, goal
        self.stopped_epoch = None

    def on_train_begin(self, logs=None):
        self.best, self.wait = None, 0
        for value in self.earlier[self.start_from_epoch:]:
            self._update(value)

    def _update(self, value):
        """Record one epoch's value; returns whether it improved."""
        if _improves(value, self.best, self.mode):
            self.best, self.wait = value, 0
            return True
        self.wait += 1
        return False

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        reached = self.goal is not None and not _improves(self.goal, value, self.mode)
        if epoch < self.start_from_epoch and not reached:
            return
        if reached or (not self._update(float(value)) and self.wait >= self.patience):
            self.model.stop_training = True
            self.stopped_epoch = epoch


class TimeBudget(keras.callbacks.Callback):
    """Stop training cleanly once `seconds` have passed since `fit` began.

    The batch that is running finishes; the epoch ends early (validation and
    the epoch-end callbacks still run).

    Args:
        seconds: float. The budget.
        min_steps: int. Never stop before this many training steps, however
            slow the machine: what needs them (a check, a plot) gets them.
            Defaults to `0`.
    """

    def __init__(self, seconds, min_steps=0):
        super().__init__()
        self.seconds = seconds
        self.min_steps = _config.check_non_negative_int("min_steps", min_steps)
        self.stopped = False

    def on_train_begin(self, logs=None):
        self._start, self._steps = time.monotonic(), 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        if self._steps >= self.min_steps and time.monotonic() - self._start >= self.seconds:
            self.model.stop_training = True
            self.stopped = True
