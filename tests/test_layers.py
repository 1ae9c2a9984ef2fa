"""EncoderLayer, DecoderLayer, Encoder, Decoder: config, kargs, options, errors."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_kargs

import keras_transformer as kt

LAYER_CLASSES = [kt.MultiHeadAttention, kt.EncoderLayer, kt.DecoderLayer, kt.Encoder,
                 kt.Decoder, kt.Transformer]


def run_layer(layer, kargs):
    """Calls any of our layers once on small inputs of the right kind."""
    batch, seq = 2, 5
    ids = tf.constant([[4, 5, 6, 0, 0], [7, 8, 9, 10, 11]])
    x = tf.random.normal((batch, seq, kargs["d_model"]))
    if isinstance(layer, kt.MultiHeadAttention):
        return layer(x, x, x, None)[0]
    if isinstance(layer, kt.EncoderLayer):
        return layer(x, None)
    if isinstance(layer, kt.DecoderLayer):
        return layer(x, x, None, None)[0]
    if isinstance(layer, kt.Encoder):
        return layer(ids)
    if isinstance(layer, kt.Decoder):
        return layer(ids, x)[0]
    return layer((ids, ids))


@pytest.mark.parametrize("cls", LAYER_CLASSES)
def test_tutorial_kargs_work_unchanged(cls):
    kargs = tiny_kargs()
    out = run_layer(cls(**kargs), kargs)
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("cls", LAYER_CLASSES)
def test_typo_in_kargs_is_a_type_error(cls):
    kargs = tiny_kargs(num_head=8)
    with pytest.raises(TypeError, match="num_head"):
        cls(**kargs)


@pytest.mark.parametrize(("cls", "option"), [
    (kt.MultiHeadAttention, {"type_vocab_size": 2}),
    (kt.EncoderLayer, {"embedding_layernorm": True}),
    (kt.DecoderLayer, {"mask_rate": 0.15}),
    (kt.Transformer, {"type_vocab_size": 2}),
])
def test_an_option_of_another_class_is_a_type_error(cls, option):
    """A class ignores the keys of a `kargs` dict (`Transformer`'s options) it
    does not use, but an option no `kargs` holds is a mistake."""
    with pytest.raises(TypeError, match=list(option)[0]):
        cls(**tiny_kargs(**option))


@pytest.mark.slow
@pytest.mark.parametrize("cls", LAYER_CLASSES)
@pytest.mark.parametrize(
    "options",
    [{}, {"norm_first": True, "activation": "gelu", "position_encoding": "learned"}],
    ids=["post_ln", "pre_ln_gelu_learned"],
)
def test_config_round_trip_rebuilds_the_same_layer(cls, options):
    keras.utils.set_random_seed(0)
    kargs = tiny_kargs(**options)
    layer = cls(**kargs)
    run_layer(layer, kargs)
    clone = cls.from_config(layer.get_config())
    run_layer(clone, kargs)
    assert clone.get_config() == layer.get_config()
    assert [w.shape for w in clone.weights] == [w.shape for w in layer.weights]


def test_pre_ln_adds_final_layer_norm():
    post = kt.Encoder(**tiny_kargs())
    pre = kt.Encoder(**tiny_kargs(norm_first=True))
    ids = tf.constant([[4, 5, 6]])
    post(ids), pre(ids)
    assert len(pre.weights) == len(post.weights) + 2
    assert hasattr(pre, "final_layernorm") and not hasattr(post, "final_layernorm")


def test_tutorial_attribute_names():
    model = kt.Transformer(**tiny_kargs())
    layer = model.decoder.dec_layers[0]
    for name in ("mha1", "mha2", "ffn", "layernorm1", "layernorm2", "layernorm3",
                 "dropout1", "dropout2", "dropout3"):
        assert hasattr(layer, name)
    enc_layer = model.encoder.enc_layers[0]
    for name in ("mha", "ffn", "layernorm1", "layernorm2", "dropout1", "dropout2"):
        assert hasattr(enc_layer, name)
    for name in ("wq", "wk", "wv", "dense"):
        assert hasattr(enc_layer.mha, name)
    assert hasattr(model.encoder, "embedding") and hasattr(model.decoder, "embedding")
    assert hasattr(model, "final_layer")


def test_feed_forward_network_is_two_dense_layers():
    ffn = kt.point_wise_feed_forward_network(**tiny_kargs())
    assert isinstance(ffn, keras.Sequential)
    assert ffn(tf.zeros((2, 3, 32))).shape == (2, 3, 32)
    assert [layer.units for layer in ffn.layers] == [64, 32]


def test_encoder_layer_dropout_only_in_training():
    keras.utils.set_random_seed(0)
    layer = kt.EncoderLayer(d_model=16, num_heads=2, dff=32, rate=0.5)
    x = tf.random.normal((2, 4, 16))
    np.testing.assert_array_equal(layer(x, None).numpy(), layer(x, None, training=False).numpy())
    assert not np.allclose(layer(x, None, training=True).numpy(), layer(x, None).numpy())


@pytest.mark.parametrize(
    "overrides, arg",
    [
        ({"d_model": 30, "num_heads": 4}, "d_model"),
        ({"num_layers": 0}, "num_layers"),
        ({"d_model": -32}, "d_model"),
        ({"num_heads": 0}, "num_heads"),
        ({"dff": 0}, "dff"),
        ({"input_vocab_size": 0}, "input_vocab_size"),
        ({"target_vocab_size": 0}, "target_vocab_size"),
        ({"maximum_position_encoding": 0}, "maximum_position_encoding"),
        ({"rate": 1.0}, "rate"),
        ({"rate": -0.1}, "rate"),
        ({"activation": "tanhh"}, "activation"),
        ({"position_encoding": "rotary"}, "position_encoding"),
        ({"end_token_idx": 99}, "end_token_idx"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(overrides, arg):
    with pytest.raises(ValueError, match=f"`{arg}`.*Received: .*{arg}="):
        kt.Transformer(**tiny_kargs(**overrides))


def test_share_embeddings_needs_equal_vocabularies():
    with pytest.raises(ValueError, match="`share_embeddings`.*input_vocab_size=16"):
        kt.Transformer(**tiny_kargs(share_embeddings=True, target_vocab_size=20))


def test_too_long_sequence_is_a_value_error_in_eager_and_tf_function():
    encoder = kt.Encoder(**tiny_kargs())
    too_long = tf.ones((1, 11), tf.int32)
    with pytest.raises(ValueError, match="maximum_position_encoding=10.*Received: x.shape"):
        encoder(too_long)
    with pytest.raises(ValueError, match="maximum_position_encoding=10"):
        tf.function(encoder)(too_long)


@pytest.mark.slow
def test_too_long_sequence_with_unknown_length_fails_with_a_clear_message():
    encoder = kt.Encoder(**tiny_kargs())
    fn = tf.function(encoder, input_signature=[tf.TensorSpec((None, None), tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="maximum_position_encoding=10"):
        fn(tf.ones((1, 11), tf.int32))


@pytest.mark.parametrize("bad_id", [16, -1])
def test_token_ids_outside_the_vocabulary_are_a_value_error(bad_id):
    model = kt.Transformer(**tiny_kargs())
    with pytest.raises(ValueError, match=r"`x`.*\[0, 16\).*Received: ids"):
        model((tf.constant([[4, bad_id]]), tf.constant([[1, 4]])))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_dropout_drops_at_the_rate_and_rescales_in_and_out_of_xla(jit_compile):
    from keras_transformer.layers._stack import Dropout

    keras.utils.set_random_seed(0)
    layer = Dropout(0.25)
    x = tf.ones((200, 500))
    out = tf.function(lambda x: layer(x, training=True), jit_compile=jit_compile)(x).numpy()
    assert abs((out == 0).mean() - 0.25) < 0.01
    np.testing.assert_allclose(out[out != 0], 1 / 0.75, rtol=1e-6)
    second = tf.function(lambda x: layer(x, training=True), jit_compile=jit_compile)(x).numpy()
    assert not np.array_equal(out, second)  # a fresh mask every call
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
