"""A training run for the fault tests, in its own process.

    python tests/resume_child.py OUT_DIR [EPOCH BATCH]

With EPOCH and BATCH, the run prints `PAUSED` after that batch and waits to be
killed. At the end of training it writes `OUT_DIR/final.weights.h5`.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf

from keras_transformer import train
from keras_transformer.data import english_korean_corpus

TINY = {"num_layers": 1, "d_model": 16, "num_heads": 2, "dff": 32, "max_length": 16,
        "batch_size": 32, "tokenizer": "word", "rate": 0.1, "epochs": 3, "verbose": 0}


class PauseAt(keras.callbacks.Callback):
    def __init__(self, epoch, batch):
        super().__init__()
        self.epoch, self.batch = epoch, batch

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.current, batch) == (self.epoch, self.batch):
            print("PAUSED", flush=True)
            time.sleep(600)


class SaveAtEnd(keras.callbacks.Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_train_end(self, logs=None):
        self.model.save_weights(self.path)


def main(out_dir, *pause):
    tf.config.experimental.enable_op_determinism()
    corpus = english_korean_corpus(train_size=160, valid_size=16, test_size=0, seed=1)
    callbacks = [SaveAtEnd(os.path.join(out_dir, "final.weights.h5"))]
    if pause:
        callbacks.append(PauseAt(*map(int, pause)))
    train(corpus["train"], out_dir, corpus["valid"], callbacks=callbacks, **TINY)


if __name__ == "__main__":
    main(*sys.argv[1:])
