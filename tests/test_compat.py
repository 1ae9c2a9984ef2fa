"""The workarounds of `keras_transformer._compat`: these fail loudly when the
Keras, TensorFlow or tensorflow-text behaviour they rely on, or work around,
changes."""

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import run_two_workers

from keras_transformer import _compat
from keras_transformer.layers._stack import Dense


def test_xla_context_is_detected_inside_jit_compiled_functions_only():
    seen = {}

    def probe(name):
        seen[name] = _compat.in_xla_context()
        return tf.constant(0)

    probe("eager")
    tf.function(lambda: probe("graph"))()
    tf.function(lambda: probe("xla"), jit_compile=True)()
    tf.function(lambda: tf.function(lambda: probe("nested xla"))(), jit_compile=True)()
    assert seen == {"eager": False, "graph": False, "xla": True, "nested xla": True}


def one_row_dense_hlo(layer):
    """The optimized XLA:CPU HLO of `layer` (512 -> 2048) on one row."""
    layer.build((1, 512))
    compiled = tf.function(lambda x: layer(x), jit_compile=True)
    return compiled.experimental_get_compiler_ir(tf.ones((1, 512)))(stage="optimized_hlo")


def fused_dots(hlo):
    """The fusions of `hlo` whose fused computation holds a `dot`."""
    computations = hlo.split("\n\n")
    with_dot = {c.split()[0].lstrip("%") for c in computations if " dot(" in c}
    return [line for line in hlo.splitlines()
            if " fusion(" in line and line.split("calls=%")[-1].split(",")[0] in with_dot]


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="XLA:CPU's fusion")
def test_xla_still_fuses_a_one_row_product_with_its_bias_unless_kept_apart():
    """`_backend.apart_from_bias` exists because XLA:CPU fuses a one-row
    product into its bias add's loop, which reads the kernel more slowly
    (benchmarks/RESULTS.md). When XLA stops fusing it, the barrier can go;
    when TensorFlow moves tf2xla's wrapper, `optimization_barrier` must follow."""
    from tensorflow.compiler.tf2xla.python.xla import optimization_barrier  # noqa: F401

    assert fused_dots(one_row_dense_hlo(keras.layers.Dense(2048)))
    assert not fused_dots(one_row_dense_hlo(Dense(2048)))


def test_a_product_kept_apart_from_its_bias_trains_like_keras_dense():
    # The barrier has no gradient of its own in TensorFlow; one row under XLA.
    keras.utils.set_random_seed(0)
    ours, theirs = Dense(8), keras.layers.Dense(8)
    x = tf.random.normal((1, 1, 16))
    ours.build(x.shape)
    theirs.build(x.shape)
    theirs.set_weights(ours.get_weights())

    def gradients(layer):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) ** 2)
        return tape.gradient(loss, layer.trainable_variables)

    for want, got in zip(tf.function(gradients, jit_compile=True)(theirs),
                         tf.function(gradients, jit_compile=True)(ours)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_quantize_still_refuses_dense_subclasses_unless_told():
    """`_stack.Dense.quantize` passes `type_check=False`; without it Keras
    would skip every projection of `Transformer.quantize`."""
    with pytest.raises(NotImplementedError):
        keras.layers.Dense.quantize(Dense(4), "int8")
    layer = Dense(4)
    layer.build((None, 8))
    layer.quantize("int8")
    assert layer.quantization_mode == "int8"


def test_the_overridden_keras_method_still_exists_with_its_signature():
    """If Keras renames it, `TensorFlowFit._maybe_symbolic_build` is dead code and
    multi-worker `fit` breaks again (keras-team/keras#20329). It also calls
    Keras' `_symbolic_build` and the epoch iterator's `_get_iterator`."""
    from keras.src.backend.tensorflow.trainer import TFEpochIterator

    assert _compat.overridden_keras_method_signature() == ["self", "iterator", "data_batch"]
    assert callable(keras.Model._symbolic_build) and callable(TFEpochIterator._get_iterator)


def test_keras_still_builds_nothing_before_the_first_trace_without_a_strategy():
    """Why `TensorFlowFit` builds first: without a strategy, Keras' own
    `_maybe_symbolic_build` leaves the optimizer unbuilt, so `fit` creates its
    variables inside the traced step. Once Keras builds here, remove that part."""
    model = keras.Sequential([keras.layers.Dense(2)])
    model.compile("adam", loss="mse")
    x, y = np.ones((4, 3), "float32"), np.ones((4, 2), "float32")
    model._maybe_symbolic_build(data_batch=(x, y, None))
    assert not model.built and not model.optimizer.built


def test_keras_still_passes_a_filled_in_mask_by_keyword():
    """Why `MaskByKeyword` exists: without it, `layer(x, None)` on an input
    with a Keras mask is a `TypeError`. Once Keras stops this, remove it."""

    class Plain(keras.layers.Layer):
        def call(self, x, mask=None):
            return x

    class Mended(_compat.MaskByKeyword, Plain):
        pass

    x = keras.layers.Embedding(10, 4, mask_zero=True)(np.array([[1, 2, 0]]))
    with pytest.raises(TypeError, match="multiple values for argument 'mask'"):
        Plain()(x, None)
    np.testing.assert_array_equal(Mended()(x, None), x)


def test_a_mask_set_by_set_keras_mask_still_reaches_the_next_layer():
    """`MultiHeadAttention` puts the query's Keras mask on its output with
    `set_keras_mask` (Keras's private setter, as its own attention layer does).
    If Keras moves the setter, follow it; once Keras has a public one, use it."""
    seen = []

    class Reads(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.supports_masking = True

        def call(self, x, mask=None):
            seen.append(mask)
            return x

    x = keras.ops.ones((1, 3, 4))
    mask = keras.ops.convert_to_tensor([[True, True, False]])
    _compat.set_keras_mask(x, mask)
    Reads()(x)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(seen[0]), [[True, True, False]])


def test_save_weights_still_leaves_out_the_seed_generators_state(tmp_path):
    """Why `Backup` saves `seed_states` itself: `save_weights` does not."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3),
                              keras.layers.Dropout(0.5), keras.layers.Dropout(0.5)])
    states = _compat.seed_states(model)
    assert len(states) == 2
    model.save_weights(tmp_path / "model.weights.h5")
    with h5py.File(tmp_path / "model.weights.h5", "r") as f:
        saved = []
        f.visit(saved.append)
    assert not any("seed_generator" in name for name in saved), saved


def test_dropout_still_draws_from_its_seed_generator():
    generator = _compat.dropout_seed_generator(keras.layers.Dropout(0.1))
    assert isinstance(generator, keras.random.SeedGenerator)


def test_the_wordpiece_learner_still_takes_counts():
    vocabulary = _compat.learn_wordpiece([("abab", 5), ("ab", 3), ("ba", 2)], 20,
                                         ["<PAD>", "<UNK>"], max_unique_chars=2, joiner="##")
    assert vocabulary[:2] == ["<PAD>", "<UNK>"]
    assert {"a", "b", "##a", "##b"} <= set(vocabulary)


@pytest.mark.slow
def test_keras_still_fails_multi_worker_fit_of_nested_inputs(tmp_path):
    """Why `TensorFlowFit` exists (keras-team/keras#20329): a plain model with
    nested inputs fails under a two-worker MultiWorkerMirroredStrategy. Once
    Keras fixes it, remove the mixin."""
    assert run_two_workers("plain_multi_worker", tmp_path) == [0, 0]
    for index in range(2):
        outcome = (tmp_path / f"plain-{index}.txt").read_text(encoding="utf-8")
        assert outcome.startswith("Attempt to convert a value (PerReplica"), outcome
