"""Scaled dot-product attention and the tutorial's `MultiHeadAttention`.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                  (eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Deviations from the tutorial, all invisible to its users:
- masked logits are *replaced* by the float32 minimum instead of adding the
  mask times a large negative constant, and the softmax always runs in
  float32, so half precision never overflows and a fully masked row gives
  uniform weights, not NaN;
- the queries are scaled before `Q K^T` (fewer multiplications, same result);
- `MultiHeadAttention` takes an optional decoding cache (see `call`).
"""

import keras
import tensorflow as tf

from keras_transformer import _config


def _masked_softmax(logits, mask):
    """Softmax over the last axis in float32, ignoring positions where mask is 1."""
    logits = tf.cast(logits, tf.float32)
    if mask is not None:
        blocked = tf.cast(mask, tf.float32) > 0.0
        logits = tf.where(blocked, tf.float32.min, logits)
    return tf.nn.softmax(logits, axis=-1)


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
    >>> q = k = v = tf.eye(3)[tf.newaxis]
    >>> out, w = scaled_dot_product_attention(q, k, v, None)
    >>> w.shape
    TensorShape([1, 3, 3])
    """
    depth = q.shape[-1] if q.shape[-1] is not None else tf.shape(q)[-1]
    q = q * tf.cast(tf.math.rsqrt(tf.cast(depth, tf.float32)), q.dtype)
    logits = tf.matmul(q, k, transpose_b=True)  # (..., Tq, Tk)
    attention_weights = tf.cast(_masked_softmax(logits, mask), v.dtype)
    output = tf.matmul(attention_weights, v)  # (..., Tq, depth_v)
    return output, attention_weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with the tutorial's `(v, k, q, mask)` call order.

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
            or `None`. With `cache_index=None` it holds precomputed keys and
            values (cross-attention; `k` and `v` are ignored, see
            `compute_key_value`); with `cache_index` (self-attention during
            decoding, from `init_cache`) `q` is one token `(B, 1, d_model)`,
            `k` and `v` are ignored, and the token's key and value are
            written into it at `cache_index`. Defaults to `None`.
        cache_index: scalar int tensor or `None`. Position to write in `cache`.

    Returns:
        `(output, attention_weights)`: `(B, T_q, d_model)` and
        `(B, num_heads, T_q, T_k)`; with a `cache`, also the updated cache.

    Example:
    >>> mha = MultiHeadAttention(d_model=512, num_heads=8)
    >>> x = tf.random.uniform((1, 60, 512))
    >>> out, w = mha(x, x, x, None)
    >>> out.shape, w.shape
    (TensorShape([1, 60, 512]), TensorShape([1, 8, 60, 60]))
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

        self.wq = keras.layers.Dense(d_model, dtype=self.dtype_policy, name="wq")
        self.wk = keras.layers.Dense(d_model, dtype=self.dtype_policy, name="wk")
        self.wv = keras.layers.Dense(d_model, dtype=self.dtype_policy, name="wv")
        self.dense = keras.layers.Dense(d_model, dtype=self.dtype_policy, name="dense")

    def build(self, input_shape):
        for dense in (self.wq, self.wk, self.wv, self.dense):
            dense.build(input_shape)

    def split_heads(self, x, batch_size):
        """Splits the last axis into `(num_heads, depth)` and moves heads first."""
        x = tf.reshape(x, (batch_size, -1, self.num_heads, self.depth))  # (B, T, H, depth)
        return tf.transpose(x, perm=[0, 2, 1, 3])  # (B, H, T, depth)

    def compute_key_value(self, k, v):
        """Projects keys and values once, e.g. the encoder output for decoding.

        Returns:
            dict `{"key": (B, H, T_k, depth), "value": (B, H, T_k, depth)}`.
        """
        batch_size = tf.shape(k)[0]
        return {
            "key": self.split_heads(self.wk(k), batch_size),
            "value": self.split_heads(self.wv(v), batch_size),
        }

    def init_cache(self, batch_size, max_length):
        """An empty self-attention cache of `max_length` positions.

        Returns:
            dict: `"key"` and `"value"` `(B, H, L, depth)` zeros, and the
            query, key and value projections joined into one (`"kernel"`
            `(d_model, 3 * d_model)`, `"bias"` `(3 * d_model,)`), so that a
            decoding step projects its token with one matrix product, not three.
        """
        shape = (batch_size, self.num_heads, max_length, self.depth)  # (B, H, L, depth)
        denses = (self.wq, self.wk, self.wv)
        return {
            "key": tf.zeros(shape, self.compute_dtype),
            "value": tf.zeros(shape, self.compute_dtype),
            "kernel": tf.cast(tf.concat([d.kernel for d in denses], 1), self.compute_dtype),
            "bias": tf.cast(tf.concat([d.bias for d in denses], 0), self.compute_dtype),
        }

    def call(self, v, k, q, mask=None, cache=None, cache_index=None):
        batch_size = tf.shape(q)[0]
        if cache is not None and cache_index is not None:
            # One decoding step: the joined projection, then the new key and
            # value written into the cache at `cache_index`.
            qkv = tf.matmul(q[:, 0], cache["kernel"]) + cache["bias"]  # (B, 3 * d_model)
            qkv = tf.reshape(qkv, (batch_size, 3, self.num_heads, 1, self.depth))
            start = [0, 0, cache_index, 0]
            cache = {
                **cache,
                "key": keras.ops.slice_update(cache["key"], start, qkv[:, 1]),
                "value": keras.ops.slice_update(cache["value"], start, qkv[:, 2]),
            }  # (B, H, L, depth) each
            q, k, v = qkv[:, 0], cache["key"], cache["value"]  # q (B, H, 1, depth)
        else:
            q = self.split_heads(self.wq(q), batch_size)  # (B, H, Tq, depth)
            if cache is None:
                k = self.split_heads(self.wk(k), batch_size)  # (B, H, Tk, depth)
                v = self.split_heads(self.wv(v), batch_size)  # (B, H, Tk, depth)
            else:
                k, v = cache["key"], cache["value"]  # (B, H, Tk, depth)

        scaled_attention, attention_weights = scaled_dot_product_attention(q, k, v, mask)
        scaled_attention = tf.transpose(scaled_attention, perm=[0, 2, 1, 3])  # (B, Tq, H, depth)
        concat_attention = tf.reshape(
            scaled_attention, (batch_size, -1, self.d_model)
        )  # (B, Tq, d_model)
        output = self.dense(concat_attention)  # (B, Tq, d_model)
        if cache is None:
            return output, attention_weights
        return output, attention_weights, cache

    def compute_mask(self, v, previous_mask=None):
        return None

    def get_config(self):
        config = super().get_config()
        config.update({"d_model": self.d_model, "num_heads": self.num_heads})
        return config
