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
from helpers import TINY_TRAIN, AtBatch

from keras_transformer import train
from keras_transformer.data import english_korean_corpus

TINY = dict(TINY_TRAIN, rate=0.1, epochs=3)


def pause():
    print("PAUSED", flush=True)
    time.sleep(600)


class SaveAtEnd(keras.callbacks.Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_train_end(self, logs=None):
        self.model.save_weights(self.path)


def main(out_dir, *pause_at):
    tf.config.experimental.enable_op_determinism()
    corpus = english_korean_corpus(train_size=160, valid_size=16, test_size=0, seed=1)
    callbacks = [SaveAtEnd(os.path.join(out_dir, "final.weights.h5"))]
    if pause_at:
        callbacks.append(AtBatch(*map(int, pause_at), pause))
    train(corpus["train"], out_dir, corpus["valid"], callbacks=callbacks, **TINY)


if __name__ == "__main__":
    main(*sys.argv[1:])
