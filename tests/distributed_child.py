"""Distributed training runs for `test_scale.py`, each in its own process
(a strategy must be set up before TensorFlow starts its runtime).

    python tests/distributed_child.py mirrored OUT_DIR
        The same model takes plain SGD steps on one CPU, then with
        MirroredStrategy over two logical CPUs, same global batch; then
        evaluates on 35 pairs in batches of 32 (the last one splits 2 + 1
        over the replicas). Writes OUT_DIR/{one_device,mirrored}.npz: the
        weights before, after the first step and at the end, the gradient of
        the first step ((before - after) / learning rate), the evaluated
        masked accuracy, and (one device) the NumPy masked accuracy.
    python tests/distributed_child.py multi_worker OUT_DIR
        One worker of a MultiWorkerMirroredStrategy run (TF_CONFIG set by the
        caller); writes its final weights to OUT_DIR/weights-<index>.npz.
    python tests/distributed_child.py plain_multi_worker OUT_DIR
        One worker of a MultiWorkerMirroredStrategy `fit` of a plain Keras
        model with nested inputs, without `_compat.TensorFlowFit`; writes
        what `fit` raised (or "trained") to OUT_DIR/plain-<index>.txt.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from helpers import TINY_TRAIN

import keras_transformer as kt
from keras_transformer import train
from keras_transformer.data import english_korean_corpus, make_dataset
from keras_transformer.text import WordTokenizer

# No dropout: its masks are drawn per replica, so they differ from one device's.
TINY = dict(TINY_TRAIN, rate=0.0, epochs=2, samples=0)


LEARNING_RATE = 0.5


class FirstStepWeights(keras.callbacks.Callback):
    """The weights before and right after the first training step."""

    def on_train_begin(self, logs=None):
        self.before = [w.numpy() for w in self.model.trainable_weights]

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.after = [w.numpy() for w in self.model.trainable_weights]


def numpy_masked_accuracy(model, dataset, pad):
    """`(the mean over batches of each batch's accuracy on its non-pad targets,
    the accuracy over every non-pad target)`."""
    values, right, count = [], 0, 0
    for (inp, dec_in), dec_out in dataset:
        predicted = np.argmax(model((inp, dec_in)).numpy(), axis=-1)
        real = dec_out.numpy() != pad
        values.append((predicted == dec_out.numpy())[real].mean())
        right, count = right + (predicted == dec_out.numpy())[real].sum(), count + real.sum()
    return float(np.mean(values)), right / count


def corpus(train_size=200, valid_size=16):
    return english_korean_corpus(train_size=train_size, valid_size=valid_size, test_size=0,
                                 seed=3)


def mirrored(out_dir):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    data = corpus(train_size=256, valid_size=35)
    sources, targets = zip(*data["train"])
    source, target = (WordTokenizer.from_texts(texts, verbose=0) for texts in (sources, targets))
    train_data = make_dataset(data["train"], source, target, 16, batch_size=32, shuffle=True,
                              seed=0, epochs=1)
    valid_data = make_dataset(data["valid"], source, target, 16, batch_size=32, bucket=False)
    for name, strategy in (("one_device", tf.distribute.get_strategy()),
                           ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = kt.Transformer(num_layers=1, d_model=16, num_heads=2, dff=32,
                                   input_vocab_size=source.vocab_size,
                                   target_vocab_size=target.vocab_size,
                                   maximum_position_encoding=16, rate=0.0)
            model.build(((None, None), (None, None)))
            model.compile(keras.optimizers.SGD(LEARNING_RATE), loss=kt.MaskedLoss(),
                          metrics=[kt.masked_accuracy,
                                   kt.MaskedAccuracy(pad_token_idx=target.pad_id,
                                                     name="token_accuracy")])
        first = FirstStepWeights()
        model.fit(train_data, epochs=1, steps_per_epoch=8, callbacks=[first], shuffle=False,
                  verbose=0)
        scores = model.evaluate(valid_data, return_dict=True, verbose=0)
        results = {
            "replicas": strategy.num_replicas_in_sync,
            "accuracy": scores["masked_accuracy"],
            "token_accuracy": scores["token_accuracy"],
            **{f"before_{i}": w for i, w in enumerate(first.before)},
            **{f"gradient_{i}": (b - a) / LEARNING_RATE
               for i, (b, a) in enumerate(zip(first.before, first.after))},
            **{f"final_{i}": w.numpy() for i, w in enumerate(model.trainable_weights)},
        }
        if name == "one_device":
            results["numpy_accuracy"], results["numpy_token_accuracy"] = (
                numpy_masked_accuracy(model, valid_data, target.pad_id))
        np.savez(os.path.join(out_dir, f"{name}.npz"), **results)


def multi_worker(out_dir):
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    data = corpus()
    result = train(data["train"], os.path.join(out_dir, "run"), data["valid"],
                   strategy="multi_worker", **TINY)
    np.savez(os.path.join(out_dir, f"weights-{index}.npz"),
             *result.translator.model.get_weights())


def plain_multi_worker(out_dir):
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        source, target = keras.Input((4,)), keras.Input((4,))
        joined = keras.layers.Concatenate()([source, target])
        model = keras.Model([source, target], keras.layers.Dense(1)(joined))
        model.compile("sgd", "mse")
    x = np.ones((8, 4), "float32")
    data = tf.data.Dataset.from_tensor_slices(((x, x), np.ones((8, 1), "float32"))).batch(4)
    try:
        model.fit(data, verbose=0)
        outcome = "trained"
    except ValueError as error:
        outcome = str(error)
    with open(os.path.join(out_dir, f"plain-{index}.txt"), "w", encoding="utf-8") as f:
        f.write(outcome)


if __name__ == "__main__":
    {"mirrored": mirrored, "multi_worker": multi_worker,
     "plain_multi_worker": plain_multi_worker}[sys.argv[1]](sys.argv[2])
