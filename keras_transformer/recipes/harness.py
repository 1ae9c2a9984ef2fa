"""The run harness every recipe stands on: the fit loop and the model directory.

`train`, `pretrain` and `fine_tune` are thin clients of it:

- `TrainingRun`: `model.fit` with what a long run needs: a backup after every
  epoch and resumption from it (re-run the same command), the weights of the
  best epoch on a chosen metric, early stopping, a time budget, the history
  (`history.csv`), and at the end `metrics.json` and the history plot.
- `ModelDirectory`: a trained model with its tokenizers and `config.json`,
  each file written atomically, read back with its format version checked.

Loading a model, its best weights or a backup goes through
`errors.user_errors`: the one mapping of "this file is damaged" to an
`InputError` (a user's mistake: exit status 2 on the command line) that
leaves this package's own bugs alone (traceback, exit status 1).
"""

import csv
import json
import math
import os
import shutil
import sys

import keras
import numpy as np

from keras_transformer._config import TOKENIZERS
from keras_transformer._files import atomic_path, write_text
from keras_transformer.errors import InputError, user_errors
from keras_transformer.plotting import plot_history
from keras_transformer.recipes.callbacks import Backup, BestWeights, EarlyStopping, TimeBudget
from keras_transformer.text.tokenizers import load_vocabulary, tokenizer_from_config

BACKUP_DIR = "backup"
BEST_WEIGHTS_FILE = "best.weights.h5"
HISTORY_FILE = "history.csv"
METRICS_FILE = "metrics.json"
HISTORY_PLOT = "history.png"
LOG_DIR = "logs"
MODEL_FILE = "model.keras"
CONFIG_FILE = "config.json"
# The layout of a model directory's `config.json`. Version 1 names the model
# file and every tokenizer's vocabulary file; directories written before it
# (classifiers and pretrained models, version 0) name neither.
FORMAT_VERSION = 1


def log(message, verbose):
    """A message on stderr (stdout holds a command's JSON line or its answers)."""
    if verbose:
        print(message, file=sys.stderr, flush=True)


def progress_verbosity(verbose):
    """Keras' `verbose` for progress bars: `1` (animated bar) becomes `2`
    (one line per epoch) when stdout is not a terminal, to keep logs short."""
    return 2 if verbose == 1 and not sys.stdout.isatty() else verbose


def split_pairs(pairs, valid_fraction=0.1, seed=0):
    """A seeded random split: `(train_pairs, valid_pairs)`, each non-empty."""
    if len(pairs) < 2:
        raise InputError(
            f"Need at least 2 sentence pairs to split off a validation set. Received: "
            f"{len(pairs)} pair(s)"
        )
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_valid = min(max(1, round(len(pairs) * valid_fraction)), len(pairs) - 1)
    return [pairs[i] for i in order[n_valid:]], [pairs[i] for i in order[:n_valid]]


def read_history(path):
    """`history.csv` written by `keras.callbacks.CSVLogger` -> dict of lists.

    An epoch logged twice (trained again after a kill that came between its
    log line and its backup) counts once, with its last values.
    """
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list({row.get("epoch"): row for row in csv.DictReader(f)}.values())
            return {key: [float(row[key]) for row in rows if row.get(key) not in (None, "")]
                    for key in (rows[0] if rows else {})}
    except (ValueError, csv.Error) as error:  # a number or a line that cannot be read
        raise InputError(f"{path}: not a training history ({error})") from None


def read_json(path):
    """A JSON object from `path`, or an `InputError` naming the file."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    with user_errors(path, "not valid JSON"), open(path, encoding="utf-8") as f:
        config = json.load(f)
    if not isinstance(config, dict):
        raise InputError(f"{path}: expected a JSON object")
    return config


class ModelDirectory:
    """A trained model, its tokenizers and `config.json`, in one directory.

        model.keras     the Keras model (weights and configuration)
        <vocabulary>    one per tokenizer, one token per line
        config.json     format version, file names, tokenizer options, and
                        what the recipe records (labels, training options)

    Every file is written under a temporary name and renamed into place
    (`_files.atomic_path`): the model first, `config.json` last. A save
    interrupted while it writes the model (the file that takes long) leaves
    the files of the previous save whole and loadable; no file is ever left
    half-written.

    Args:
        path: str. The directory.
        kind: str. What it holds, for messages ("translator", "classifier",
            "pretrained model").
    """

    def __init__(self, path, kind):
        self.directory, self.kind = str(path), kind

    def path(self, name):
        return os.path.join(self.directory, name)

    def save(self, model, tokenizers, **entries):
        """Write `model`, the tokenizers' vocabularies and `config.json`.

        Args:
            model: a `keras.Model` of this package.
            tokenizers: dict `{config key: (tokenizer, vocabulary file name)}`.
            **entries: JSON-compatible values recorded in `config.json`.
        """
        os.makedirs(self.directory, exist_ok=True)
        with atomic_path(self.path(MODEL_FILE)) as temporary:
            model.save(temporary)
        self.save_tokenizers(tokenizers, model=MODEL_FILE, **entries)

    def save_tokenizers(self, tokenizers, **entries):
        """Write the tokenizers' vocabularies and `config.json` (no model: a
        model kept in another format, as the CTranslate2 export's)."""
        os.makedirs(self.directory, exist_ok=True)
        config = {"format_version": FORMAT_VERSION}
        for key, (tokenizer, file_name) in tokenizers.items():
            tokenizer.save_vocabulary(self.path(file_name))
            config[key] = dict(tokenizer.get_config(), vocabulary=file_name)
        config.update(entries)
        write_text(self.path(CONFIG_FILE), json.dumps(config, ensure_ascii=False, indent=2))

    def read_config(self):
        """`config.json`, its format version checked."""
        if not os.path.isdir(self.directory):
            raise InputError(f"{self.directory}: no such {self.kind} directory")
        path = self.path(CONFIG_FILE)
        config = read_json(path)
        version = config.get("format_version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise InputError(f"{path}: not a keras_transformer configuration (format_version "
                             f"{version!r})")
        if version > FORMAT_VERSION:
            raise InputError(f"{path}: written by a newer keras-transformer (format version "
                             f"{version}; this one reads up to {FORMAT_VERSION}): upgrade it")
        return config

    def load(self, model_class, tokenizers):
        """`(model, {key: tokenizer}, config)`.

        Args:
            model_class: the class the model must be (another is a user error).
            tokenizers: dict `{config key: vocabulary file name}`, the file
                name for directories of format version 0.

        Raises:
            InputError: naming the file, for a missing, damaged or foreign file.
        """
        loaded, config = self.load_tokenizers(tokenizers)
        model_path = self.path(str(config.get("model", MODEL_FILE)))
        if not os.path.isfile(model_path):
            raise InputError(f"{model_path}: no such file")
        # safe_mode: a `.keras` file holding Python code (a `Lambda`) is
        # refused, not run.
        with user_errors(model_path, "cannot load the model"):
            model = keras.saving.load_model(model_path, safe_mode=True)
        if not isinstance(model, model_class):
            raise InputError(f"{model_path}: holds a {type(model).__name__}, not the "
                             f"{model_class.__name__} of a {self.kind}")
        return model, loaded, config

    def load_tokenizers(self, tokenizers):
        """`({key: tokenizer}, config)`; `tokenizers` as `load`'s."""
        config = self.read_config()
        config_path = self.path(CONFIG_FILE)
        loaded = {}
        for key, default_file in tokenizers.items():
            options = config.get(key)
            if not isinstance(options, dict):
                raise InputError(f"{config_path}: not a {self.kind} configuration (no "
                                 f"{key!r} entry)")
            options = dict(options)
            vocabulary = self.path(str(options.pop("vocabulary", default_file)))
            if (options.get("kind") not in TOKENIZERS or set(options) - {"kind", "lower_case"}
                    or not isinstance(options.get("lower_case", True), bool)):
                raise InputError(f"{config_path}: not a {self.kind} configuration (its {key!r} "
                                 f"entry is {config[key]!r})")
            if not os.path.isfile(vocabulary):
                raise InputError(f"{vocabulary}: no such file")
            loaded[key] = tokenizer_from_config(options, load_vocabulary(vocabulary))
        return loaded, config


class TrainingRun:
    """One recipe's training in `out_dir`: resumable, with the best weights kept.

    Re-running with the same `out_dir` after an interruption (a crash,
    Ctrl-C, a killed job) resumes after the last finished epoch: `Backup`
    holds the model's, the optimizer's and dropout's state, and a data set
    that orders each epoch by its number alone makes the resumed run train on
    what an uninterrupted one would have.

    Args:
        out_dir: str. Created if needed.
        config: the recipe's config (`epochs`, `patience`, `warmup_steps`,
            `time_budget`).
        monitor: str. The metric of the best weights and early stopping,
            e.g. `"val_loss"`.
        mode: `"min"` or `"max"`: which way `monitor` is better.
        verbose: int. `0` silent, `1` messages and progress.
    """

    def __init__(self, out_dir, config, monitor, mode, verbose=1):
        self.out_dir, self.config, self.verbose = out_dir, config, verbose
        self.monitor, self.mode = monitor, mode
        os.makedirs(out_dir, exist_ok=True)
        self.backup = Backup(self.path(BACKUP_DIR))
        self.resuming = os.path.isdir(self.path(BACKUP_DIR))
        self.earlier, self.finished, self.budget = {}, False, None

    def path(self, name):
        return os.path.join(self.out_dir, name)

    def restore(self, model):
        """Load the backup of an interrupted run into the compiled `model`.

        Returns:
            int: the epochs already trained (`0` for a new run, whose stale
            history and best weights are removed).
        """
        state = self.backup.read_state() if self.resuming else None
        if state is None:  # files of a finished earlier run must not mix with this one.
            for stale in (self.path(HISTORY_FILE), self.path(BEST_WEIGHTS_FILE)):
                if os.path.exists(stale):
                    os.remove(stale)
            return 0
        self.earlier = read_history(self.path(HISTORY_FILE))
        initial_epoch = self.backup.restore(model)
        self.finished = bool(state["finished"]) or initial_epoch >= self.config.epochs
        if initial_epoch:
            log(f"Resuming after epoch {initial_epoch}", self.verbose)
        return initial_epoch

    def fit(self, model, train_data, valid_data, steps_per_epoch, initial_epoch=0,
            callbacks=(), scores=None, goal=None, tensorboard=False, fit_steps=None,
            best_after_warmup=False):
        """`model.fit` with the harness's callbacks, then the best weights loaded.

        Args:
            model: the compiled model (after `restore`).
            train_data, valid_data: what `fit` takes.
            steps_per_epoch: int. Steps in an epoch: early stopping watches
                the epochs after the learning-rate warm-up only.
            initial_epoch: int. From `restore`.
            callbacks: extra `keras.callbacks.Callback`s.
            scores: `keras.callbacks.Callback` that adds the monitored
                scores to the logs (`EpochScores`), run first; or `None`
                when `fit` computes the monitor itself.
            goal: float. Stop as soon as the monitor reaches it. Defaults to
                `None`.
            tensorboard: bool. Also write TensorBoard logs to `logs/`.
            fit_steps: int or `None`. `steps_per_epoch` given to `fit` (for
                a data set that holds every epoch).
            best_after_warmup: bool. Rank the best weights after the warm-up
                only, too (`BestWeights(start_from_epoch=...)`), for a
                validation set so small that its score can pick a
                half-trained warm-up epoch by chance. Defaults to `False`.

        Returns:
            `(history, stopped_by_time_budget)`: dict of per-epoch lists over
            every run of a resumed training, and bool.
        """
        config, monitor = self.config, self.monitor
        self.budget = TimeBudget(config.time_budget) if config.time_budget is not None else None
        if not self.finished:
            earlier = self.earlier.get(monitor, [])
            warmup_epochs = math.ceil(config.warmup_steps / steps_per_epoch)
            ranked_from = warmup_epochs if best_after_warmup else 0
            ranked = earlier[ranked_from:]
            best = (max if self.mode == "max" else min)(ranked) if ranked else None
            fit_callbacks = [
                *([scores] if scores else []),
                BestWeights(self.path(BEST_WEIGHTS_FILE), monitor, mode=self.mode, best=best,
                            start_from_epoch=ranked_from),
                EarlyStopping(monitor, mode=self.mode, patience=config.patience,
                              earlier=earlier, start_from_epoch=warmup_epochs, goal=goal),
                keras.callbacks.TerminateOnNaN(),
                keras.callbacks.CSVLogger(self.path(HISTORY_FILE), append=True),
                *([keras.callbacks.TensorBoard(self.path(LOG_DIR))] if tensorboard else []),
                *([self.budget] if self.budget else []),
                *callbacks,
                self.backup,
            ]
            model.fit(train_data, validation_data=valid_data, epochs=config.epochs,
                      initial_epoch=initial_epoch, steps_per_epoch=fit_steps,
                      callbacks=fit_callbacks, shuffle=False,
                      verbose=progress_verbosity(self.verbose))
            self.backup.finish()
        if os.path.isfile(self.path(BEST_WEIGHTS_FILE)):
            with user_errors(self.path(BEST_WEIGHTS_FILE), "cannot load the best weights"):
                model.load_weights(self.path(BEST_WEIGHTS_FILE))
        return read_history(self.path(HISTORY_FILE)), bool(self.budget and self.budget.stopped)

    def finish(self, history, metrics):
        """Write `metrics.json` and the history plot; forget the backup."""
        write_text(self.path(METRICS_FILE), json.dumps(metrics, indent=2, ensure_ascii=False))
        plot_history(history, self.path(HISTORY_PLOT))
        # Everything is saved: a re-run now starts a new training.
        shutil.rmtree(self.path(BACKUP_DIR), ignore_errors=True)
