"""What the tests share besides fixtures: tiny configs in the tutorial's `kargs`
form, the toy tasks, a mid-epoch interruption, a two-worker cluster.

Imported by the tests and their child processes (`from helpers import ...`);
`conftest.py` holds the fixtures only.
"""

import json
import os
import socket
import subprocess
import sys

import keras

import keras_transformer as kt
from keras_transformer.data import reverse_task

VOCAB = 16
MAX_SRC = 8

# `keras_transformer.train` arguments small enough for fast tests.
TINY_TRAIN = {"num_layers": 1, "d_model": 16, "num_heads": 2, "dff": 32, "max_length": 16,
              "batch_size": 32, "tokenizer": "word", "verbose": 0}


# The tiny task of issue 13: 6 nouns, the 30 ordered pairs of two of them,
# each seen 20 times ("the cat sees the dog" -> "고양이 개 본다").
NOUNS = {"the cat": "고양이", "the dog": "개", "the bird": "새", "the rabbit": "토끼",
         "the fox": "여우", "the horse": "말"}


def sees_pairs(repeats=20):
    """600 pairs of a 30-pair task that a default recipe once failed to learn."""
    pairs = [(f"{a} sees {b}", f"{NOUNS[a]} {NOUNS[b]} 본다")
             for a in NOUNS for b in NOUNS if a != b]
    return pairs * repeats


class AtBatch(keras.callbacks.Callback):
    """Calls `action()` after batch `batch` of epoch `epoch`: an interruption
    in the middle of an epoch."""

    def __init__(self, epoch, batch, action):
        super().__init__()
        self.epoch, self.batch, self.action = epoch, batch, action

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.current, batch) == (self.epoch, self.batch):
            self.action()


def run_two_workers(mode, out_dir, timeout=300):
    """`tests/distributed_child.py MODE OUT_DIR` as the two workers of one
    MultiWorkerMirroredStrategy cluster on this machine: their exit codes."""
    child = os.path.join(os.path.dirname(__file__), "distributed_child.py")
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    processes = []
    try:
        for index in range(2):
            config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            processes.append(subprocess.Popen(
                [sys.executable, child, mode, str(out_dir)],
                env=dict(os.environ, TF_CONFIG=json.dumps(config)),
            ))
        return [process.wait(timeout=timeout) for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_small(out, **options):
    """`(TrainResult, corpus)`: a small model trained for 3 epochs on 400 pairs of
    the built-in corpus into `out` (seconds); `options` override `train`'s."""
    from keras_transformer import train
    from keras_transformer.data import english_korean_corpus

    corpus = english_korean_corpus(train_size=400, valid_size=16, test_size=0, seed=2)
    settings = dict(tokenizer="wordpiece", vocab_size=300, num_layers=1, d_model=32,
                    num_heads=2, dff=64, max_length=16, epochs=3, verbose=0)
    return train(corpus["train"], str(out), corpus["valid"], **{**settings, **options}), corpus


def tiny_kargs(**overrides):
    """The tutorial's `kargs` dict with sizes small enough for fast tests."""
    kargs = {
        "model_name": "transformer",
        "num_layers": 2,
        "d_model": 32,
        "num_heads": 4,
        "dff": 64,
        "input_vocab_size": VOCAB,
        "target_vocab_size": VOCAB,
        "maximum_position_encoding": MAX_SRC + 2,
        "end_token_idx": 2,
        "rate": 0.1,
    }
    kargs.update(overrides)
    return kargs


def fit_reverse(jit_compile, epochs=7, n=3000):
    """A model with the tutorial's kargs trained on the reverse task. Its last
    batch is smaller, so the model's input spec keeps a free batch size (what
    `tf.saved_model.save` gives its signature)."""
    keras.utils.set_random_seed(0)
    model = kt.Transformer(**tiny_kargs(d_model=64, dff=128))
    model.compile(
        keras.optimizers.Adam(2e-3),
        loss=kt.masked_loss,
        metrics=[kt.masked_accuracy],
        jit_compile=jit_compile,
    )
    inp, dec_in, dec_out = reverse_task(n)
    model.fit([inp, dec_in], dec_out, batch_size=64, epochs=epochs, verbose=0)
    return model
