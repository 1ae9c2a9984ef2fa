"""Distributed training runs for `test_scale.py`, each in its own process
(a strategy must be set up before TensorFlow starts its runtime).

    python tests/distributed_child.py mirrored OUT_DIR
        Trains with the recipe on one CPU, then with MirroredStrategy over two
        logical CPUs, same global batch; writes the per-step losses of both
        to OUT_DIR/losses.json.
    python tests/distributed_child.py multi_worker OUT_DIR
        One worker of a MultiWorkerMirroredStrategy run (TF_CONFIG set by the
        caller); writes its final weights to OUT_DIR/weights-<index>.npz.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from conftest import TINY_TRAIN
from keras_transformer import train
from keras_transformer.data import english_korean_corpus

# No dropout: its masks are drawn per replica, so they differ from one device's.
TINY = dict(TINY_TRAIN, rate=0.0, epochs=2, samples=0)


class StepLosses(keras.callbacks.Callback):
    """The loss of every step (Keras logs the running mean over the epoch)."""

    def on_train_begin(self, logs=None):
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def corpus():
    return english_korean_corpus(train_size=200, valid_size=16, test_size=0, seed=3)


def mirrored(out_dir):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    data = corpus()
    losses = {}
    for name, strategy in (("one_device", None),
                           ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
        recorder = StepLosses()
        train(data["train"], os.path.join(out_dir, name), data["valid"], strategy=strategy,
              callbacks=[recorder], **TINY)
        losses[name] = recorder.losses
        losses[f"{name}_replicas"] = (strategy or tf.distribute.get_strategy()
                                      ).num_replicas_in_sync
    with open(os.path.join(out_dir, "losses.json"), "w", encoding="utf-8") as f:
        json.dump(losses, f)


def multi_worker(out_dir):
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    data = corpus()
    result = train(data["train"], os.path.join(out_dir, "run"), data["valid"],
                   strategy="multi_worker", **TINY)
    np.savez(os.path.join(out_dir, f"weights-{index}.npz"),
             *result.translator.model.get_weights())


if __name__ == "__main__":
    {"mirrored": mirrored, "multi_worker": multi_worker}[sys.argv[1]](sys.argv[2])
