"""`tf.distribute` strategies and mixed-precision policies by name, for the recipe and CLI."""

import json
import os

import tensorflow as tf

from keras_transformer.errors import InputError
from keras_transformer.recipes.config import PRECISIONS, STRATEGIES

POLICIES = dict(zip(PRECISIONS, ("mixed_bfloat16", "mixed_float16")))


def get_strategy(strategy=None):
    """A `tf.distribute.Strategy` from a name, or the given one.

    Create it before any other TensorFlow work in the process: the
    multi-worker and TPU strategies configure the runtime.

    Args:
        strategy: `None` (the default strategy: one device), a
            `tf.distribute.Strategy`, or a name: `"mirrored"` (every local
            GPU, or the CPU), `"multi_worker"` (one process per worker, each
            told the cluster and its own index by `TF_CONFIG`), `"tpu"` (the
            TPU the environment names, e.g. on Colab or a TPU VM).

    Returns:
        `tf.distribute.Strategy`.
    """
    if strategy is None:
        return tf.distribute.get_strategy()
    if isinstance(strategy, tf.distribute.Strategy):
        return strategy
    if strategy == "mirrored":
        return tf.distribute.MirroredStrategy()
    if strategy == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise InputError(
                "strategy='multi_worker' needs the TF_CONFIG environment variable "
                '(e.g. {"cluster": {"worker": ["host1:port", "host2:port"]}, '
                '"task": {"type": "worker", "index": 0}}) in every worker process'
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    if strategy == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.OpError) as error:
            raise InputError(f"strategy='tpu': no TPU found ({error})") from None
        return tf.distribute.TPUStrategy(resolver)
    raise InputError(
        f"Received an invalid value for argument `strategy`, expected None, a "
        f"tf.distribute.Strategy or one of {list(STRATEGIES)}. Received: strategy={strategy!r}"
    )


def worker_directory(out_dir):
    """Where this process writes: `out_dir` for the chief (and without
    `TF_CONFIG`), `out_dir/<type>-<index>` for every other worker, so that
    workers sharing a file system never write the same file."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task", {})
    kind, index = task.get("type", "worker"), int(task.get("index", 0))
    chief = kind == "chief" or (kind == "worker" and index == 0
                                and "chief" not in config.get("cluster", {}))
    return out_dir if chief else os.path.join(out_dir, f"{kind}-{index}")


def dtype_policy(mixed_precision):
    """`None`, `"bf16"` or `"fp16"` -> a Keras dtype policy name."""
    if mixed_precision is None:
        return "float32"
    if mixed_precision not in PRECISIONS:
        raise InputError(
            "Received an invalid value for argument `mixed_precision`, expected None or one "
            f"of {list(PRECISIONS)}. Received: mixed_precision={mixed_precision!r}"
        )
    return POLICIES[mixed_precision]
