"""The workarounds of `keras_transformer._compat`: these fail loudly when the
TensorFlow or Keras behaviour they rely on changes."""

import tensorflow as tf

from keras_transformer import _compat


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


def test_the_overridden_keras_method_still_exists_with_its_signature():
    """If Keras renames it, `MultiWorkerFit._maybe_symbolic_build` is dead code and
    multi-worker `fit` breaks again (keras-team/keras#20329)."""
    assert _compat.overridden_keras_method_signature() == ["self", "iterator", "data_batch"]
