import keras
import mask_checks
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers._stack import Dense


def numpy_attention(q, k, v, mask):
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        logits = np.where(mask > 0, -np.inf, logits)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v, weights


@pytest.mark.parametrize("with_mask", [False, True])
def test_scaled_dot_product_attention_matches_numpy(with_mask):
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 3, 5, 8)).astype("float32") for _ in range(3))
    mask = (rng.random((2, 1, 5, 5)) < 0.3).astype("float32") if with_mask else None
    if with_mask:
        mask[..., 0] = 0  # keep at least one key per row
    out, weights = kt.scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_weights = numpy_attention(q, k, v, mask)
    np.testing.assert_allclose(weights.numpy(), ref_weights, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), ref_out, atol=1e-5)


def test_seed_i_am_good_example_by_hand():
    # The four steps of the seed's worked example with d_k = 64 (sqrt = 8).
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(3, 64)).astype("float32") for _ in range(3))
    scores = q @ k.T / 8.0
    weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    out, w = kt.scaled_dot_product_attention(q, k, v, None)
    np.testing.assert_allclose(w.numpy(), weights, rtol=1e-5)
    np.testing.assert_allclose(out.numpy(), weights @ v, rtol=1e-4, atol=1e-5)


def test_fully_masked_row_gives_uniform_weights_not_nan():
    q = k = v = tf.random.normal((1, 1, 3, 4))
    mask = tf.ones((1, 1, 3, 3))
    out, weights = kt.scaled_dot_product_attention(q, k, v, mask)
    np.testing.assert_allclose(weights.numpy(), np.full((1, 1, 3, 3), 1 / 3), atol=1e-6)
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("with_mask", [False, True])
def test_multi_head_attention_matches_keras(with_mask):
    keras.utils.set_random_seed(0)
    d_model, num_heads = 32, 4
    query = tf.random.normal((2, 5, d_model))
    value = tf.random.normal((2, 7, d_model))
    ours = kt.MultiHeadAttention(d_model=d_model, num_heads=num_heads)
    theirs = keras.layers.MultiHeadAttention(num_heads, key_dim=d_model // num_heads)
    mask = None
    keras_mask = None
    if with_mask:
        mask = kt.create_padding_mask(tf.constant([[3, 4, 5, 0, 0, 0, 0], [3, 4, 5, 6, 7, 8, 0]]))
        keras_mask = tf.cast(1 - mask[:, 0], bool) & tf.ones((2, 5, 7), bool)  # True = attend
    ours(value, value, query, mask)
    theirs(query, value, value, attention_mask=keras_mask)
    mask_checks.copy_into_keras(ours, theirs)

    out, weights = ours(value, value, query, mask)
    ref_out, ref_weights = theirs(
        query, value, value, attention_mask=keras_mask, return_attention_scores=True
    )
    np.testing.assert_allclose(out.numpy(), ref_out.numpy(), atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), ref_weights.numpy(), atol=1e-5)


def test_multi_head_attention_accepts_tutorial_kargs_and_round_trips():
    kargs = {"model_name": "m", "num_layers": 2, "d_model": 16, "num_heads": 2,
             "dff": 8, "input_vocab_size": 5, "target_vocab_size": 5,
             "maximum_position_encoding": 4, "end_token_idx": 2, "rate": 0.1}
    layer = kt.MultiHeadAttention(**kargs)
    clone = kt.MultiHeadAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"d_model": 10, "num_heads": 3}, "d_model"),
        ({"d_model": 0, "num_heads": 2}, "d_model"),
        ({"d_model": 8, "num_heads": -1}, "num_heads"),
    ],
)
def test_multi_head_attention_rejects_bad_sizes(kwargs, arg):
    with pytest.raises(ValueError, match=f"`{arg}`.*Received: {arg}="):
        kt.MultiHeadAttention(**kwargs)


def test_cached_decoding_steps_equal_a_masked_full_call():
    # One token at a time through the cache (its keys and values only, the
    # token projected as in training, by the layers' own kernels) gives what
    # the full causal call gives at every position.
    keras.utils.set_random_seed(3)
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4)
    x = tf.random.normal((3, 6, 16))
    full, _ = mha(x, x, x, kt.create_look_ahead_mask(6))
    cache = mha.init_cache(3, 6)
    assert set(cache) == {"key", "value"} and cache["key"].shape == (3, 4, 6, 4)
    for step in range(6):
        blocked = tf.cast(tf.range(6) > step, tf.float32)[tf.newaxis, tf.newaxis, tf.newaxis]
        out, weights, cache = mha(None, None, x[:, step : step + 1], blocked, cache=cache,
                                  cache_index=tf.constant(step))
        np.testing.assert_allclose(out.numpy()[:, 0], full.numpy()[:, step], atol=1e-5)
        assert weights.shape == (3, 4, 1, 6)


def test_cache_index_without_a_cache_is_a_value_error():
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4)
    x = tf.random.normal((2, 1, 16))
    with pytest.raises(ValueError, match="`cache_index`.*Received: cache_index=.*cache=None"):
        mha(x, x, x, None, cache_index=tf.constant(0))


class PlusOne(Dense):
    """A projection that is not a plain `x @ kernel + bias`."""

    def call(self, inputs, training=None):
        return super().call(inputs) + 1.0


def count_dense_calls(monkeypatch):
    """The names of the `Dense` layers whose `call` runs from now on."""
    calls, call = [], Dense.call
    monkeypatch.setattr(Dense, "call", lambda self, inputs, training=None: (
        calls.append(self.name) or call(self, inputs, training)))
    return calls


def decoding_step(mha, x, one_by_one=False):
    """`(output, cache)` of one cached self-attention step of `x` at position 1,
    compiled by XLA as the decoding loop is (traced anew at every call); with
    `one_by_one`, `v`, `k` and `q` are three tensors."""

    @tf.function(jit_compile=True)
    def step(x):
        v, k = (tf.identity(x), tf.identity(x)) if one_by_one else (x, x)
        output, _, cache = mha(v, k, x, None, cache=mha.init_cache(x.shape[0], 3),
                               cache_index=tf.constant(1))
        return output, cache

    return step(x)


@pytest.mark.slow
@pytest.mark.parametrize("change", [None, "lora", "subclass", "own call", "int8"])
def test_joined_self_attention_projections_equal_the_layers_called_one_by_one(
    change, monkeypatch
):
    # A self-attention decoding step (v, k and q one tensor) runs wq, wk and wv
    # as one product by their joined kernels (a LoRA update included); given
    # three tensors the layers are called one by one. Both agree. A projection
    # that is not plain (a subclass, a `call` of its own, a quantized layer) is
    # always called as it is, so a model decodes as it trains.
    keras.utils.set_random_seed(5)
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4)
    if change == "subclass":
        mha.wq = PlusOne(16, name="wq")
    x = tf.random.normal((2, 1, 16))
    mha.build(x.shape)
    before, _ = decoding_step(mha, x)
    if change == "lora":
        mha.wq.enable_lora(2)
        mha.wq.lora_kernel_b.assign(np.ones((2, 16), "float32"))
    elif change == "own call":
        mha.wq.call = lambda inputs, training=None: Dense.call(mha.wq, inputs) * 2.0
    elif change == "int8":
        mha.wq.quantize("int8")
    calls = count_dense_calls(monkeypatch)
    joined, joined_cache = decoding_step(mha, x)
    joined_calls = list(calls)
    one_by_one, cache = decoding_step(mha, x, one_by_one=True)
    np.testing.assert_allclose(joined.numpy(), one_by_one.numpy(), atol=1e-5)
    for name in ("key", "value"):
        np.testing.assert_allclose(joined_cache[name].numpy(), cache[name].numpy(), atol=1e-5)
    if change in (None, "lora"):
        assert joined_calls == ["dense"]  # q, k and v in one product
    if change in ("lora", "own call", "int8"):
        assert np.abs(joined.numpy() - before.numpy()).max() > 1e-3


def test_self_attention_without_a_cache_calls_the_three_projections(monkeypatch):
    # Training and the encoder: joining the kernels at every call costs more
    # than the one product saves, so wq, wk and wv are called as they are.
    keras.utils.set_random_seed(7)
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4)
    x = tf.random.normal((2, 5, 16))
    mha.build(x.shape)
    calls = count_dense_calls(monkeypatch)
    mha(x, x, x, None)
    assert calls == ["wq", "wk", "wv", "dense"]


def test_joined_projections_under_mixed_bfloat16(monkeypatch):
    keras.utils.set_random_seed(6)
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4, dtype="mixed_bfloat16")
    x = tf.cast(tf.random.normal((2, 1, 16)), "bfloat16")
    mha.build(x.shape)
    calls = count_dense_calls(monkeypatch)
    joined, _ = decoding_step(mha, x)
    assert calls == ["dense"] and joined.dtype == "bfloat16"
    one_by_one, _ = decoding_step(mha, x, one_by_one=True)
    np.testing.assert_allclose(tf.cast(joined, "float32").numpy(),
                               tf.cast(one_by_one, "float32").numpy(), atol=2e-2)


def test_keras_call_form_beside_the_tutorials():
    # Keras's keywords return the output (or `(output, scores)` when asked);
    # the tutorial's positional `(v, k, q, mask)` returns `(output, weights)`.
    keras.utils.set_random_seed(8)
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4)
    x, memory = tf.random.normal((2, 5, 16)), tf.random.normal((2, 7, 16))
    out, weights = mha(memory, memory, x, None)
    keyword = mha(query=x, value=memory)
    np.testing.assert_allclose(keyword.numpy(), out.numpy(), atol=1e-5)
    out_k, scores = mha(query=x, value=memory, key=memory, return_attention_scores=True)
    np.testing.assert_allclose(scores.numpy(), weights.numpy(), atol=1e-6)
    assert mha(memory, memory, x, return_attention_scores=False).shape == (2, 5, 16)


def test_keras_positional_order_is_refused_with_the_tutorials_order_named():
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4)
    x = tf.random.normal((2, 5, 16))
    with pytest.raises(ValueError, match=r"tutorial's order `mha\(v, k, q, mask\)`"):
        mha(x, x)


def test_mask_and_attention_mask_together_are_a_value_error():
    mha = kt.MultiHeadAttention(d_model=16, num_heads=4)
    x = tf.random.normal((2, 5, 16))
    mask = tf.ones((2, 5), bool)
    with pytest.raises(ValueError, match="`attention_mask`.*both were given"):
        mha(x, x, x, mask, attention_mask=mask)


@pytest.mark.parametrize("shape", [(2, 5, 5, 7), (2, 4, 5, 7), (5,), (2, 1, 1, 1, 7), (2, 6),
                                   (5, 7), (3, 5, 7)])
def test_masks_of_other_shapes_are_a_value_error(shape):
    # (B, T, S) with B == heads used to broadcast against the heads axis; now
    # every rank and size is checked against the call's batch, heads, T and S
    # (a boolean (T, S) is not Keras's (B, S) padding mask).
    mha = kt.MultiHeadAttention(d_model=16, num_heads=2)
    query, value = tf.random.normal((2, 5, 16)), tf.random.normal((2, 7, 16))
    with pytest.raises(ValueError, match=r"`mask`.*Received: mask.shape="):
        mha(value, value, query, np.ones(shape, bool))


def test_a_numeric_attention_mask_is_a_value_error():
    # 1 means "attend" in Keras's `attention_mask` and "blocked" in the
    # tutorial's mask: a numeric mask by Keras's name would be read backwards.
    mha = kt.MultiHeadAttention(d_model=16, num_heads=2)
    x = tf.random.normal((2, 5, 16))
    with pytest.raises(ValueError, match=r"`attention_mask`, expected a boolean.*float32"):
        mha(query=x, value=x, attention_mask=np.ones((2, 5, 5), "float32"))


def test_a_boolean_mask_in_the_tutorials_shape_works_in_the_encoder_layer():
    layer = kt.EncoderLayer(d_model=16, num_heads=2, dff=32)
    x = tf.random.normal((2, 5, 16))
    attend = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    blocked = (~attend[:, None, None, :]).astype("float32")  # the tutorial's (B, 1, 1, S)
    np.testing.assert_allclose(layer(x, attend[:, None, None, :]).numpy(),
                               layer(x, blocked).numpy(), atol=1e-6)


def test_every_mask_check_holds_on_tensorflow():
    # The same checks run on JAX and PyTorch in `test_backends.py`.
    differences = mask_checks.mask_differences()
    assert {name: value for name, value in differences.items() if value > 1e-5} == {}
    assert mask_checks.half_precision_finite() == {"mixed_float16": True,
                                                   "mixed_bfloat16": True}
