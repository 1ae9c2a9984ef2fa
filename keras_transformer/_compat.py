"""Workarounds for what TensorFlow and Keras give no public API for, or get wrong.

Each one names its upstream issue, and `tests/test_compat.py` fails loudly when
the behaviour it relies on changes. Nothing else in the package touches
TensorFlow's or Keras' internals. Everything here is for the TensorFlow
backend: the core reaches it only through `_backend`, which imports it only
when TensorFlow is the backend.
"""

import inspect

import tensorflow as tf

# No public API says whether a graph is being built for XLA; tf.function keys
# its own cache on it internally (tensorflow/tensorflow#34208).
from tensorflow.python.ops import control_flow_util


def in_xla_context():
    """Whether ops created now will be compiled by XLA (`jit_compile=True`)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


class MultiWorkerFit:
    """Mixin for a `keras.Model` trained with `fit` under MultiWorkerMirroredStrategy.

    Keras 3 fails there twice (keras-team/keras#20329, open):

    - it builds the model from a first batch averaged over the replicas with
      one `strategy.reduce` of the whole nested batch, which the strategy
      refuses for nested inputs like `((inp, dec_in), dec_out)` ("Attempt to
      convert a value (PerReplica..."). Only the shapes matter: this hands it
      the first local replica's batch instead (`_maybe_symbolic_build` is the
      private Keras method that does the averaging; the test checks that it
      still exists with this signature);
    - it averages every logged value with `strategy.reduce("MEAN", value,
      axis=0)`, which fails on scalars: the logs become vectors of one value.
    """

    def train_step(self, data):
        return self._multi_worker_logs(super().train_step(data))

    def test_step(self, data):
        return self._multi_worker_logs(super().test_step(data))

    def _multi_worker_logs(self, logs):
        if _is_multi_worker(self.distribute_strategy):
            return {name: tf.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self.distribute_strategy
        if iterator is not None and _is_multi_worker(strategy):
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda value: strategy.experimental_local_results(value)[0],
                    next(batches),
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)


def _is_multi_worker(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def overridden_keras_method_signature():
    """The parameters of the Keras method `MultiWorkerFit` overrides (for the test)."""
    import keras

    return list(inspect.signature(keras.Model._maybe_symbolic_build).parameters)
