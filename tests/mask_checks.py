"""The mask rule and the two attention paths, checked on whichever Keras backend runs.

`backend_child.py` calls `mask_differences` and `half_precision_finite` on
TensorFlow, JAX and PyTorch, and `test_backends.py` asserts on what they
return; `test_attention.py` calls them in process on TensorFlow. Nothing here
imports TensorFlow.
"""

import contextlib

import keras
import numpy as np
from keras import ops

import keras_transformer as kt
from keras_transformer.layers import attention

D_MODEL, HEADS = 16, 4
# Two rows of five tokens: the first with two padding positions.
IDS = np.array([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]], "int32")
PAD = IDS == 0
LOOK_AHEAD = np.triu(np.ones((5, 5), bool), 1)  # True = a future position


def _numpy(x):
    return ops.convert_to_numpy(x)


def _largest(a, b):
    return float(np.max(np.abs(_numpy(a) - _numpy(b))))


@contextlib.contextmanager
def _kernel_path():
    """The layers take the `keras.ops.dot_product_attention` path on every
    backend, dtype and length, also where they keep the explicit softmax."""
    takes_kernel = attention._takes_kernel
    attention._takes_kernel = lambda q, k: True
    try:
        yield
    finally:
        attention._takes_kernel = takes_kernel


def copy_into_keras(ours, theirs):
    """Our `wq/wk/wv/dense` kernels into a `keras.layers.MultiHeadAttention`
    (also used by `test_attention.py`)."""
    d_model, heads = ours.d_model, ours.num_heads
    depth = d_model // heads
    for src, dst in ((ours.wq, theirs.query_dense), (ours.wk, theirs.key_dense),
                     (ours.wv, theirs.value_dense)):
        dst.kernel.assign(ops.reshape(src.kernel, (d_model, heads, depth)))
        dst.bias.assign(ops.reshape(src.bias, (heads, depth)))
    theirs.output_dense.kernel.assign(ops.reshape(ours.dense.kernel, (heads, depth, d_model)))
    theirs.output_dense.bias.assign(ours.dense.bias)


def mask_differences():
    """`{check: largest absolute difference}`, each expected below 1e-5 (float32).

    - `<layer>_boolean_vs_numeric`: every layer and stack given a boolean
      mask (Keras's, True = attend) against the same positions as the
      tutorial's numeric mask (1 = blocked), in Keras's shapes and the
      tutorial's;
    - `keras_*`: `kt.MultiHeadAttention` against `keras.layers.MultiHeadAttention`
      with copied weights, under a boolean `attention_mask` and under
      `use_causal_mask=True`;
    - `kernel_vs_explicit_*`: the `keras.ops.dot_product_attention` path
      (no weights asked for; taken here on every backend, also where the
      layer keeps the explicit softmax for speed) against the explicit
      softmax (weights asked for), a fully masked row included;
    - `implicit_*`: Keras masks from `Embedding(mask_zero=True)` and
      `keras.layers.Masking` against the same explicit mask.
    """
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, D_MODEL)).astype("float32")
    memory = rng.normal(size=(2, 5, D_MODEL)).astype("float32")
    padding = kt.create_padding_mask(IDS)  # (B, 1, 1, S), 1 = blocked
    combined = np.maximum(PAD[:, None, None, :], LOOK_AHEAD).astype("float32")  # (B, 1, T, T)
    attend_combined = ~combined.astype(bool)[:, 0]  # (B, T, T), True = attend
    found = {}

    mha = kt.MultiHeadAttention(d_model=D_MODEL, num_heads=HEADS)
    numeric = mha(memory, memory, x, padding)[0]
    found["mha_keras_padding_shape"] = _largest(mha(memory, memory, x, ~PAD)[0], numeric)
    found["mha_keras_attention_shape"] = _largest(
        mha(memory, memory, x, np.broadcast_to(~PAD[:, None, :], (2, 5, 5)))[0], numeric)
    found["mha_tutorial_shape"] = _largest(mha(memory, memory, x, ~PAD[:, None, None, :])[0],
                                           numeric)
    found["mha_look_ahead_numeric_vs_boolean"] = _largest(
        mha(x, x, x, LOOK_AHEAD.astype("float32"))[0], mha(x, x, x, ~LOOK_AHEAD[None])[0])

    layer = kt.EncoderLayer(d_model=D_MODEL, num_heads=HEADS, dff=32)
    numeric = layer(x, padding)
    for name, mask in (("keras", ~PAD), ("tutorial_shape", ~PAD[:, None, None, :])):
        found[f"encoder_layer_{name}_boolean_vs_numeric"] = _largest(layer(x, mask), numeric)

    layer = kt.DecoderLayer(d_model=D_MODEL, num_heads=HEADS, dff=32)
    numeric = layer(x, memory, combined, padding)[0]
    found["decoder_layer_boolean_vs_numeric"] = _largest(
        layer(x, memory, attend_combined, ~PAD)[0], numeric)

    encoder = kt.Encoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, dff=32,
                         input_vocab_size=10, maximum_position_encoding=5)
    found["encoder_boolean_vs_numeric"] = _largest(encoder(IDS, ~PAD), encoder(IDS, padding))
    decoder = kt.Decoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, dff=32,
                         target_vocab_size=10, maximum_position_encoding=5)
    found["decoder_boolean_vs_numeric"] = _largest(
        decoder(IDS, memory, attend_combined, ~PAD)[0], decoder(IDS, memory, combined, padding)[0])

    theirs = keras.layers.MultiHeadAttention(HEADS, key_dim=D_MODEL // HEADS)
    theirs(x, memory)
    copy_into_keras(mha, theirs)
    attention_mask = np.broadcast_to(~PAD[:, None, :], (2, 5, 5))
    found["keras_attention_mask"] = _largest(
        mha(query=x, value=memory, attention_mask=attention_mask),
        theirs(x, memory, attention_mask=attention_mask))
    found["keras_attention_mask_scores"] = _largest(
        mha(query=x, value=memory, attention_mask=attention_mask, return_attention_scores=True)[1],
        theirs(x, memory, attention_mask=attention_mask, return_attention_scores=True)[1])
    found["keras_causal"] = _largest(mha(query=x, value=x, use_causal_mask=True),
                                     theirs(x, x, use_causal_mask=True))

    fully_masked = np.ones((2, 1, 5, 5), "float32")
    fully_masked[1, :, :3, :2] = 0.0  # the second row sees two keys in three queries
    with _kernel_path():
        for name, mask in (("none", None), ("padding", padding), ("combined", combined),
                           ("fully_masked", fully_masked)):
            found[f"kernel_vs_explicit_{name}"] = _largest(
                mha(query=x, value=memory, mask=mask), mha(memory, memory, x, mask)[0])
        found["kernel_vs_explicit_causal"] = _largest(
            mha(query=x, value=x, use_causal_mask=True),
            mha(x, x, x, LOOK_AHEAD.astype("float32"))[0])
        longer = np.concatenate([memory, memory[:, :2]], axis=1)  # S = 7 keys for T = 5
        attend = np.concatenate([~PAD, [[True, False], [True, True]]], axis=1)  # (B, S)
        found["kernel_vs_explicit_7_keys"] = _largest(
            mha(query=x, value=longer, attention_mask=attend),
            mha(longer, longer, x, attend)[0])
        found["kernel_vs_explicit_cached_steps"] = _cached_steps_difference(mha, x)

    embedded = keras.layers.Embedding(10, D_MODEL, mask_zero=True)
    inputs = keras.Input((5,), dtype="int32")
    h = embedded(inputs)
    functional = keras.Model(inputs, kt.MultiHeadAttention(d_model=D_MODEL, num_heads=HEADS,
                                                           name="mha")(query=h, value=h))
    e = _numpy(embedded(IDS))  # the same vectors, without their Keras mask
    explicit = functional.get_layer("mha")(query=e, value=e, attention_mask=~PAD)
    found["implicit_embedding"] = _largest(functional(IDS), explicit)
    encoder_layer = kt.EncoderLayer(d_model=D_MODEL, num_heads=HEADS, dff=32)
    found["implicit_embedding_encoder_layer"] = _largest(
        keras.Model(inputs, encoder_layer(h))(IDS), encoder_layer(e, ~PAD))
    masking = keras.layers.Masking(0.0)
    padded = np.where(PAD[..., None], 0.0, x).astype("float32")
    found["implicit_masking"] = _largest(
        mha(query=masking(padded), value=masking(padded)),
        mha(query=padded, value=padded, attention_mask=~PAD))
    return found


def _cached_steps_difference(mha, x):
    """Decoding `x` one token at a time through the cache with `use_causal_mask`
    (the kernel path) against the explicit, causally masked call on all of it."""
    full = mha(x, x, x, LOOK_AHEAD.astype("float32"))[0]  # (B, T, d_model)
    cache = mha.init_cache(x.shape[0], x.shape[1])
    largest = 0.0
    for index in range(x.shape[1]):
        step, cache = mha(query=x[:, index:index + 1], use_causal_mask=True, cache=cache,
                          cache_index=ops.convert_to_tensor(index))
        largest = max(largest, _largest(step[:, 0], full[:, index]))
    return largest


def half_precision_finite():
    """`{policy: whether both attention paths give finite outputs}` with a fully
    masked row, under `mixed_float16` and `mixed_bfloat16`."""
    x = np.random.default_rng(1).normal(size=(2, 5, D_MODEL)).astype("float32")
    mask = np.ones((2, 1, 5, 5), "float32")
    mask[1] = 0.0  # the first row blocks every key
    found = {}
    with _kernel_path():
        for policy in ("mixed_float16", "mixed_bfloat16"):
            mha = kt.MultiHeadAttention(d_model=D_MODEL, num_heads=HEADS, dtype=policy)
            explicit, weights = mha(x, x, x, mask)
            kernel = mha(query=x, value=x, mask=mask)
            found[policy] = bool(all(np.isfinite(_numpy(ops.cast(t, "float32"))).all()
                                     for t in (explicit, weights, kernel)))
    return found
