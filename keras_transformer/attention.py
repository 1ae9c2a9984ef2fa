"""Scaled dot-product attention and the tutorial's `MultiHeadAttention`.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                  (eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Runs on every Keras backend (TensorFlow, JAX, PyTorch): `keras.ops` only.

Deviations from the tutorial, all invisible to its users:
- masked logits are *replaced* by the float32 minimum instead of adding the
  mask times a large negative constant, and the softmax always runs in
  float32, so half precision never overflows and a fully masked row gives
  uniform weights, not NaN;
- the queries are scaled before `Q K^T` (fewer multiplications, same result);
- a self-attention decoding step projects its token's q, k and v in one
  product by the three kernels side by side (same result, faster; see
  `_project_self_attention`);
- `MultiHeadAttention` owns an optional decoding cache of keys and values
  (see `call`).
"""

import keras
import numpy as np
from keras import ops

from keras_transformer import _backend, _config
from keras_transformer._stack import Dense, affine

_FLOAT32_MIN = float(np.finfo(np.float32).min)


def _is_plain_dense(layer, dtype_policy):
    """Whether calling `layer` computes exactly `x @ kernel + bias` in
    `dtype_policy`: this package's `Dense`, built, not a subclass and with no
    `call` of its own, float (not quantized), with a bias, no activation and
    no activity regularizer. (A LoRA-enabled one is plain too: its `kernel`
    holds the low-rank update.)"""
    return (type(layer) is Dense and "call" not in vars(layer) and layer.built
            and layer.quantization_mode is None and layer.dtype_policy.name == dtype_policy.name
            and layer.use_bias and layer.activation is keras.activations.linear
            and layer.activity_regularizer is None)


def _masked_softmax(logits, mask):
    """Softmax over the last axis in float32, ignoring positions where mask is 1."""
    logits = ops.cast(logits, "float32")
    if mask is not None:
        logits = ops.where(ops.cast(mask, "float32") > 0.0, _FLOAT32_MIN, logits)
    if logits.shape[-1] == 1:
        return ops.ones_like(logits)  # one key: softmax is 1 (`ops.softmax` warns)
    return ops.softmax(logits, axis=-1)


def scaled_dot_product_attention(q, k, v, mask):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V.

    Args:
        q: tensor `(..., T_q, depth)`. Queries.
        k: tensor `(..., T_k, depth)`. Keys.
        v: tensor `(..., T_k, depth_v)`. Values.
        mask: float tensor broadcastable to `(..., T_q, T_k)`, 1 where a key
            must not be attended to, or `None`.

    Returns:
        A tuple `(output, attention_weights)`: `(..., T_q, depth_v)` and
        `(..., T_q, T_k)`, both in the dtype of `v`. The softmax is computed in
        float32.

    Example:
    >>> q = k = v = np.eye(3, dtype="float32")[np.newaxis]
    >>> out, w = scaled_dot_product_attention(q, k, v, None)
    >>> tuple(w.shape)
    (1, 3, 3)
    """
    q, k, v = ops.convert_to_tensor(q), ops.convert_to_tensor(k), ops.convert_to_tensor(v)
    depth = ops.shape(q)[-1]
    q = q * ops.cast(ops.rsqrt(ops.cast(depth, "float32")), q.dtype)
    logits = ops.matmul(q, ops.swapaxes(k, -1, -2))  # (..., Tq, Tk)
    attention_weights = ops.cast(_masked_softmax(logits, mask), v.dtype)
    output = ops.matmul(attention_weights, v)  # (..., Tq, depth_v)
    return output, attention_weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with the tutorial's `(v, k, q, mask)` call order.

    Runs on every Keras backend.

    Args:
        d_model: int. Width of queries, keys, values and output.
        num_heads: int. Number of heads; must divide `d_model`.
        **kwargs: other keys of the tutorial's `kargs` (ignored) and Keras
            layer arguments (`name`, `dtype`, ...).

    Call arguments:
        v: tensor `(B, T_k, d_model)`. Values.
        k: tensor `(B, T_k, d_model)`. Keys.
        q: tensor `(B, T_q, d_model)`. Queries.
        mask: float tensor broadcastable to `(B, num_heads, T_q, T_k)`, 1 where
            a key must not be attended to. Defaults to `None`.
        cache: dict `{"key", "value"}` of `(B, num_heads, L, depth)` tensors,
            or `None`. Without `cache_index` it holds keys and values
            projected once (cross-attention, see `compute_key_value`; `k` and
            `v` are not read). With `cache_index` (self-attention while
            decoding, from `init_cache`) `v`, `k` and `q` are one token
            `(B, 1, d_model)` (`v` and `k` default to `q`): its key and value
            are projected by `wk` and `wv`, as in training, and written into
            the cache at `cache_index`. Defaults to `None`.
        cache_index: scalar int tensor or `None`. Position to write in `cache`;
            only with a `cache`.

    Returns:
        `(output, attention_weights)`: `(B, T_q, d_model)` and
        `(B, num_heads, T_q, T_k)`; with a `cache`, also the updated cache.

    Example:
    >>> mha = MultiHeadAttention(d_model=512, num_heads=8)
    >>> x = np.random.uniform(size=(1, 60, 512)).astype("float32")
    >>> out, w = mha(x, x, x, None)
    >>> tuple(out.shape), tuple(w.shape)
    ((1, 60, 512), (1, 8, 60, 60))
    """

    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(**_config.layer_kwargs("MultiHeadAttention", kwargs))
        _config.check_model_args(d_model=d_model, num_heads=num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.depth = self.d_model // self.num_heads
        # Attention masks are explicit (`mask`); a Keras mask attached to an
        # input (e.g. the `Encoder` output) is neither used nor propagated.
        self.supports_masking = True

        self.wq = Dense(d_model, dtype=self.dtype_policy, name="wq")
        self.wk = Dense(d_model, dtype=self.dtype_policy, name="wk")
        self.wv = Dense(d_model, dtype=self.dtype_policy, name="wv")
        self.dense = Dense(d_model, dtype=self.dtype_policy, name="dense")

    def build(self, input_shape):
        self.wq.build(input_shape)
        self.wk.build(input_shape)
        self.wv.build(input_shape)
        self.dense.build(input_shape)

    def split_heads(self, x, batch_size):
        """Splits the last axis into `(num_heads, depth)` and moves heads first."""
        x = ops.reshape(x, (batch_size, -1, self.num_heads, self.depth))  # (B, T, H, depth)
        return ops.transpose(x, (0, 2, 1, 3))  # (B, H, T, depth)

    def compute_key_value(self, k, v):
        """Projects keys and values once, e.g. the encoder output for decoding.

        Returns:
            dict `{"key": (B, H, T_k, depth), "value": (B, H, T_k, depth)}`.
        """
        batch_size = ops.shape(k)[0]
        return {
            "key": self.split_heads(self.wk(k), batch_size),
            "value": self.split_heads(self.wv(v), batch_size),
        }

    def init_cache(self, batch_size, max_length):
        """An empty self-attention cache of `max_length` positions.

        Returns:
            dict `{"key": (B, H, L, depth), "value": (B, H, L, depth)}` of zeros.
        """
        shape = (batch_size, self.num_heads, max_length, self.depth)  # (B, H, L, depth)
        return {
            "key": ops.zeros(shape, self.compute_dtype),
            "value": ops.zeros(shape, self.compute_dtype),
        }

    def call(self, v, k, q, mask=None, cache=None, cache_index=None):
        if cache_index is not None and cache is None:
            raise ValueError(
                "Received an invalid value for argument `cache_index`: it is the position "
                "to write in `cache`, and no `cache` was given. Received: "
                f"cache_index={cache_index!r}, cache=None"
            )
        batch_size = ops.shape(q)[0]
        if cache is not None and cache_index is None:
            # Cross-attention while decoding: keys and values projected once.
            query = self.split_heads(self.wq(q), batch_size)  # (B, H, Tq, depth)
            key, value = cache["key"], cache["value"]  # (B, H, Tk, depth)
        else:
            if cache is not None:
                k = q if k is None else k
                v = k if v is None else v
            if cache is not None and q is k and k is v:  # a self-attention decoding step
                query, key, value = self._project_self_attention(q)
            else:
                query, key, value = self.wq(q), self.wk(k), self.wv(v)
            query = self.split_heads(query, batch_size)  # (B, H, Tq, depth)
            key = self.split_heads(key, batch_size)  # (B, H, Tk, depth)
            value = self.split_heads(value, batch_size)  # (B, H, Tk, depth)
            if cache is not None:
                # One decoding step: the token's key and value written into
                # the cache at `cache_index`.
                start = [0, 0, cache_index, 0]
                cache = {
                    "key": ops.slice_update(cache["key"], start, key),
                    "value": ops.slice_update(cache["value"], start, value),
                }  # (B, H, L, depth) each
                key, value = cache["key"], cache["value"]

        scaled_attention, attention_weights = scaled_dot_product_attention(
            query, key, value, mask
        )  # (B, H, Tq, depth), (B, H, Tq, Tk)
        scaled_attention = ops.transpose(scaled_attention, (0, 2, 1, 3))  # (B, Tq, H, depth)
        concat_attention = ops.reshape(
            scaled_attention, (batch_size, -1, self.d_model)
        )  # (B, Tq, d_model)
        output = self.dense(concat_attention)  # (B, Tq, d_model)
        if cache is None:
            return output, attention_weights
        return output, attention_weights, cache

    def _project_self_attention(self, x):
        """`(wq(x), wk(x), wv(x))`, each `(B, T, d_model)`, in one matrix product.

        The three kernels side by side `(d_model, 3 d_model)` take one product
        instead of three in a step of a compiled decoding loop (XLA, `jax.jit`,
        the defaults on TensorFlow and JAX), which joins the kernels once per
        call, outside the loop: the steps get faster (benchmarks/RESULTS.md).
        Everywhere else the three layers are called: in a loop run step by
        step (`_backend.joins_projections`), in training and in the encoder,
        where the copy of the kernels at every call (and the split of their
        gradient) would cost more than the one product saves, and for
        projections that are not plain (see `_is_plain_dense`: a subclass, a
        quantized layer).

        `call` takes this path in a step with `cache` and `cache_index` when
        `v`, `k` and `q` are one tensor (or `v` and `k` are `None`). Keras
        converts each argument on its own, so a NumPy input, or a float32 one
        under a mixed policy, arrives as three tensors and is projected one by
        one: the same result, without the joined product.
        """
        layers = (self.wq, self.wk, self.wv)
        if not (_backend.joins_projections(x)
                and all(_is_plain_dense(layer, self.dtype_policy) for layer in layers)):
            return tuple(layer(x) for layer in layers)
        kernel = ops.concatenate(
            [ops.cast(layer.kernel, x.dtype) for layer in layers], axis=1
        )  # (d_model, 3 d_model)
        bias = ops.concatenate([ops.cast(layer.bias, x.dtype) for layer in layers])
        qkv = affine(x, kernel, bias)  # (B, T, 3 d_model)
        return tuple(ops.split(qkv, 3, axis=-1))

    def compute_mask(self, v, previous_mask=None):
        return None

    def get_config(self):
        config = super().get_config()
        config.update(_config.options_config(self))
        return config
