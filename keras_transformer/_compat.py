"""Workarounds for what Keras, TensorFlow and tensorflow-text give no public API
for, or get wrong: every one the package has, and nothing else.

Each names its upstream issue or its reason, and `tests/test_compat.py` checks
the behaviour it relies on or works around, so a test fails when upstream
changes it (then the workaround goes, or follows). No other module of the
package reaches into these libraries' internals. Nothing is imported at the
top but Keras: the core (every backend) uses the Keras ones, and the
TensorFlow and tensorflow-text ones import what they need when they run.
"""

import inspect

import keras

# --- Keras ------------------------------------------------------------------------


class MaskByKeyword:
    """Mixin for layers called as `layer(x, mask, ...)`, like the tutorial's.

    Keras fills a `None` `mask` argument from the Keras mask of `x` and then
    passes it by keyword, which collides with a positional `layer(x, None)`
    ("got multiple values for argument 'mask'"); forwarding `mask` by
    keyword keeps the tutorial's call working. (The test checks that a plain
    Keras layer still fails that way.)
    """

    def __call__(self, x, mask=None, **kwargs):
        return super().__call__(x, mask=mask, **kwargs)


def set_keras_mask(x, mask):
    """Attaches `mask` to the tensor `x` as its Keras mask, as
    `keras.layers.MultiHeadAttention` does for its output (the query's mask).

    Keras has no public API for it (`keras.src.backend.set_keras_mask`, which
    its own layers use: a JAX array cannot hold the attribute, so Keras keeps
    it in a table of its own).
    """
    from keras.src.backend import set_keras_mask as set_mask

    set_mask(x, mask)


def seed_states(model):
    """The state variables of the model's `keras.random.SeedGenerator`s
    (dropout's), in a fixed order.

    `save_weights` leaves them out, so a backup saves them itself to resume
    with the random stream a run that never stopped would have had. Keras
    has no public API listing them: they are found by the path Keras gives
    their variable (`.../seed_generator_state`).
    """
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


def dropout_seed_generator(layer):
    """The `keras.random.SeedGenerator` a `keras.layers.Dropout` draws its masks
    from (its undocumented attribute `seed_generator`), for a faster draw
    under TensorFlow's XLA (`_backend.xla_dropout`)."""
    return layer.seed_generator


# --- TensorFlow ---------------------------------------------------------------------


def in_xla_context():
    """Whether ops created now will be compiled by XLA (`jit_compile=True`).

    No public API says whether a graph is being built for XLA; tf.function
    keys its own cache on it internally (tensorflow/tensorflow#34208).
    """
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def optimization_barrier(x):
    """`x`, kept by XLA out of any fusion with the ops that produce or read it.

    TensorFlow has no public op for XLA's `opt-barrier`; tf2xla's Python
    wrapper (`tensorflow/compiler/tf2xla/python/xla.py`, used by TensorFlow's
    own tests) is the one way to emit it. It has no registered gradient, so
    the gradient passes through unchanged here. Only inside a
    `jit_compile=True` function; `x` itself if a TensorFlow release moves the
    wrapper (only the speed is lost; the test fails).
    """
    import tensorflow as tf

    try:
        from tensorflow.compiler.tf2xla.python.xla import optimization_barrier as barrier
    except ImportError:
        return x

    @tf.custom_gradient
    def kept_apart(value):
        (value,) = barrier(value)
        return value, lambda upstream: upstream

    return kept_apart(x)


class TensorFlowFit:
    """Mixin for a `keras.Model` trained with `fit` on TensorFlow: two Keras
    workarounds.

    - **Build before the first trace.** Without a distribution strategy,
      Keras 3 builds nothing before `fit` traces its train step ("defer
      building to when the train/test/predict function gets traced",
      `keras/src/backend/tensorflow/trainer.py`). The optimizer's, metrics' and
      loss trackers' variables are then created inside that trace: each gets a
      `tf.cond` initializer, and `tf.function` traces the whole step a second
      time once they exist. Built first on the data set's shapes (Keras, under a
      strategy, builds from a first batch), the step is traced once: the first epoch of the tests'
      d_model-64 model starts in 11 s instead of 23 s (benchmarks/RESULTS.md).
      The weights and the trained numbers are the same (the test checks both).
    - **MultiWorkerMirroredStrategy** (keras-team/keras#20329, open; the test
      checks that a plain model still fails):

      - Keras builds the model from a first batch averaged over the replicas
        with one `strategy.reduce` of the whole nested batch, which the
        strategy refuses for nested inputs like `((inp, dec_in), dec_out)`
        ("Attempt to convert a value (PerReplica..."). Only the shapes
        matter: this hands it the first local replica's batch instead;
      - Keras averages every logged value with `strategy.reduce("MEAN",
        value, axis=0)`, which fails on scalars: the logs become vectors of
        one value.

    Both override `_maybe_symbolic_build`, the private Keras method that builds
    before the first trace (the test checks that it still exists with this
    signature).
    """

    def train_step(self, data):
        return self._multi_worker_logs(super().train_step(data))

    def test_step(self, data):
        return self._multi_worker_logs(super().test_step(data))

    def _multi_worker_logs(self, logs):
        import tensorflow as tf

        if _is_multi_worker(self.distribute_strategy):
            return {name: tf.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        import tensorflow as tf

        if self._distribute_strategy is None:
            if data_batch is None and iterator is not None:
                # The epoch iterator's data set, as Keras itself iterates it
                # (no batch is drawn, no new pipeline made): only its shapes.
                data_batch = iterator._get_iterator().element_spec
            if data_batch is not None:
                self._symbolic_build(data_batch=data_batch)
            return
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
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def overridden_keras_method_signature():
    """The parameters of the Keras method `TensorFlowFit` overrides (for the test)."""
    return list(inspect.signature(keras.Model._maybe_symbolic_build).parameters)


# --- tensorflow-text ------------------------------------------------------------------


def learn_wordpiece(word_counts, vocab_size, reserved_tokens, max_unique_chars, joiner):
    """tensorflow-text's WordPiece vocabulary learner on `(word, count)` pairs.

    Its documented entry, `bert_vocab_from_dataset` (tensorflow-text's
    subword guide), reads a `tf.data` data set and counts words its own way;
    the learner it calls,
    `tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib.learn`,
    takes counts, so the tokenizers can count words the way they split them.

    Returns:
        list of str: `reserved_tokens`, then the learned tokens.
    """
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib

    return wordpiece_tokenizer_learner_lib.learn(
        list(word_counts), vocab_size, list(reserved_tokens), lower_thresh=1,
        max_unique_chars=max_unique_chars, joiner=joiner)
