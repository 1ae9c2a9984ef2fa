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

from keras_transformer._files import atomic_path, write_text

STATE_FILE = "state.json"
WEIGHTS_PATTERN = "epoch-{:05d}.weights.h5"


def _seed_states(model):
    """The state variables of the model's `keras.random.SeedGenerator`s
    (dropout's), in a fixed order. `save_weights` leaves them out."""
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


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
            ValueError: naming the file, when it cannot be read.
        """
        if not os.path.isfile(self.state_path):
            return None
        try:
            with open(self.state_path, encoding="utf-8") as f:
                state = json.load(f)
            int(state["epoch"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{self.state_path}: not a training backup ({error!r})") from None
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
        try:
            model.load_weights(weights_path)
        except Exception as error:  # h5py and Keras raise many types.
            raise ValueError(f"{weights_path}: cannot load the backup ({error})") from error
        variables = _seed_states(model)
        if len(variables) != len(state["seed_states"]):
            raise ValueError(f"{self.state_path}: the backup is of another model")
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
            "seed_states": [np.asarray(v).tolist() for v in _seed_states(self.model)],
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


class BestWeights(keras.callbacks.Callback):
    """Keep the weights of the epoch with the lowest `monitor`, written atomically.

    Args:
        path: str. A `.weights.h5` file.
        monitor: str. Defaults to `"val_loss"`.
        best: float. The value to beat (from earlier runs of a resumed
            training). Defaults to `inf`.
    """

    def __init__(self, path, monitor="val_loss", best=math.inf):
        super().__init__()
        self.path, self.monitor, self.best = path, monitor, best

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is not None and value < self.best:
            self.best = float(value)
            with atomic_path(self.path) as temporary:
                self.model.save_weights(temporary)


class EarlyStopping(keras.callbacks.EarlyStopping):
    """`keras.callbacks.EarlyStopping` on a lower-is-better `monitor` that
    starts from the values of the epochs an earlier run already trained, so a
    resumed run stops where one that never stopped would.

    Args:
        earlier: list of float. The monitored values of the earlier epochs.
        **kwargs: `keras.callbacks.EarlyStopping` arguments (`mode="min"`).
    """

    def __init__(self, earlier=(), **kwargs):
        super().__init__(mode="min", **kwargs)
        self.earlier = list(earlier)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        for value in self.earlier:
            if self.best is None or value < self.best - self.min_delta:
                self.best, self.wait = value, 0
            else:
                self.wait += 1


class TimeBudget(keras.callbacks.Callback):
    """Stop training cleanly once `seconds` have passed since `fit` began.

    The batch that is running finishes; the epoch ends early (validation and
    the epoch-end callbacks still run).
    """

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.stopped = False

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            self.model.stop_training = True
            self.stopped = True
