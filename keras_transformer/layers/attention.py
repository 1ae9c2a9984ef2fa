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
- the queries are scaled before `Q K^T` (same result; fewer multiplications
  when there are more keys than `depth`, as in a decoding step's cache);
- a self-attention decoding step projects its token's q, k and v in one
  product by the three kernels side by side (same result, faster; see
  `_project_self_attention`);
- `MultiHeadAttention` owns an optional decoding cache of keys and values
  (see `call`);
- a boolean mask means what it means in Keras (True = attend), beside the
  tutorial's numeric one (1 = blocked), and Keras's call form works beside
  the tutorial's (see `MultiHeadAttention`);
- where no weights are asked for (training, decoding, Keras's call) and a
  flash kernel pays (a GPU with JAX or PyTorch, 16-bit floats, 128 tokens
  or more), the attention runs through `keras.ops.dot_product_attention`;
  elsewhere Keras's op measured no faster (3-12% slower on CPUs:
  `_takes_kernel`).
"""

import math

import keras
import numpy as np
from keras import ops

from keras_transformer import _backend, _compat, _config
from keras_transformer.layers._stack import Dense, affine
from keras_transformer.layers.masking import attend_mask, attends, is_keras_mask

_FLOAT32_MIN = float(np.finfo(np.float32).min)
# The shortest queries and keys for which the attention runs through
# `keras.ops.dot_product_attention` and its flash kernel. Training the
# tutorial's model in bfloat16 through JAX on an H200 (benchmarks/RESULTS.md),
# cuDNN's flash attention took 0.89x, 0.82x and 0.68x of XLA's step time at
# 128, 256 and 512 tokens, and 1.2x at 24.
_FLASH_MIN_LENGTH = 128


def _takes_kernel(q, k):
    """Whether the attention of `q` `(B, H, T, depth)` over `k` `(B, H, S, depth)`
    runs through `keras.ops.dot_product_attention` rather than the explicit
    softmax: where a flash kernel can run and pays, a GPU with JAX or PyTorch
    (`_backend.has_fused_attention`), 16-bit floats, and at least
    `_FLASH_MIN_LENGTH` queries and keys. Elsewhere Keras's op measured no
    faster (level on a GPU without flash, 3-12% slower on CPUs)."""
    lengths = (q.shape[2], k.shape[2])
    return (_backend.has_fused_attention(q)
            and keras.backend.standardize_dtype(q.dtype) in ("float16", "bfloat16")
            and None not in lengths and min(lengths) >= _FLASH_MIN_LENGTH)


def split_outputs(outputs, with_weights, with_cache):
    """`(output, weights or None, cache or None)` of a `MultiHeadAttention` call
    made with `return_attention_scores=with_weights` and a cache or not."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return (outputs[0], outputs[1] if with_weights else None,
            outputs[-1] if with_cache else None)


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


def _masked_softmax(logits, attend):
    """Softmax over the last axis in float32, over the positions where the
    boolean `attend` is True (all when `None`). A row with none gives uniform
    weights: every logit is replaced by the same float32 minimum, so half
    precision never overflows and never turns NaN."""
    logits = ops.cast(logits, "float32")
    if attend is not None:
        logits = ops.where(attend, logits, _FLOAT32_MIN)
    if logits.shape[-1] == 1:
        return ops.ones_like(logits)  # one key: softmax is 1 (`ops.softmax` warns)
    return ops.softmax(logits, axis=-1)


def scaled_dot_product_attention(q, k, v, mask):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V.

    Args:
        q: tensor `(..., T_q, depth)`. Queries.
        k: tensor `(..., T_k, depth)`. Keys.
        v: tensor `(..., T_k, depth_v)`. Values.
        mask: broadcastable to `(..., T_q, T_k)`, or `None`: a numeric mask
            (the tutorial's) with 1 where a key must not be attended to, or a
            boolean one (Keras's) with True where it may.

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
    attend = None if mask is None else attends(mask)  # True = attend
    attention_weights = ops.cast(_masked_softmax(logits, attend), v.dtype)
    output = ops.matmul(attention_weights, v)  # (..., Tq, depth_v)
    return output, attention_weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, called as the tutorial calls it or as Keras's layer.

    Two call forms, one layer:
    - the tutorial's, positional: `mha(v, k, q, mask)` returns
      `(output, attention_weights)`;
    - Keras's (`keras.layers.MultiHeadAttention`), by keyword:
      `mha(query=x, value=y, key=None, attention_mask=None,
      return_attention_scores=False, use_causal_mask=False)` returns `output`,
      or `(output, scores)` with `return_attention_scores=True`.

    Masks: a boolean mask is Keras's (True = attend), a numeric mask the
    tutorial's (1 = blocked), in Keras's shapes `(B, S)` (boolean) and
    `(B, T, S)` or the tutorial's `(B, 1, 1, S)`, `(B, 1, T, S)` and `(T, S)`
    (numeric); any other shape is a `ValueError` (`masking.attend_mask`). The
    Keras masks of `value` and `key` (`Embedding(mask_zero=True)`,
    `keras.layers.Masking`) block their padded positions too, and the
    output carries the query's Keras mask on. (Keras's layer also blocks
    every key of a padded query; here such a row attends as the others do,
    so a boolean mask and the same numeric one give equal outputs everywhere,
    padding included.)

    Where no weights are asked for and a flash kernel pays (a GPU with JAX
    or PyTorch, 16-bit floats, 128 tokens or more: `_takes_kernel`), attention
    runs through `keras.ops.dot_product_attention`; otherwise through
    `scaled_dot_product_attention`, whose softmax runs in float32. The two
    agree to 1e-5 in float32, and a fully masked row gives the mean of the
    values in both.

    Runs on every Keras backend.

    Args:
        d_model: int. Width of queries, keys, values and output.
        num_heads: int. Number of heads; must divide `d_model`.
        **kwargs: other keys of the tutorial's `kargs` (ignored) and Keras
            layer arguments (`name`, `dtype`, ...).

    Call arguments:
        value: tensor `(B, S, d_model)`. Values; the tutorial's `v`, first.
        key: tensor `(B, S, d_model)`, or `None` for `value`. The tutorial's `k`.
        query: tensor `(B, T, d_model)`. The tutorial's `q`, third.
        mask: a mask by the rule above, or `None`. The tutorial's fourth
            argument; `attention_mask` is the same argument by Keras's name.
        attention_mask: Keras's name for `mask` (give one of the two), boolean
            only: a numeric mask means 1 = attend in Keras and 1 = blocked in
            the tutorial, so it is a `ValueError` here (pass the tutorial's as
            `mask`).
        return_attention_scores: bool. Also return the `(B, heads, T, S)`
            weights. Defaults to `True` when `value`, `key` and `query` are
            passed by position (the tutorial's call), `False` otherwise.
        use_causal_mask: bool. Block every key after the query's position
            (with `cache_index`: every cached position after it). Defaults
            to `False`.
        training: bool. Unused (the tutorial's attention has no dropout).
        cache: dict `{"key", "value"}` of `(B, num_heads, L, depth)` tensors,
            or `None`. Without `cache_index` it holds keys and values
            projected once (cross-attention, see `compute_key_value`; `key`
            and `value` are not read). With `cache_index` (self-attention
            while decoding, from `init_cache`) `value`, `key` and `query` are
            one token `(B, 1, d_model)` (`value` and `key` default to
            `query`): its key and value are projected by `wk` and `wv`, as in
            training, and written into the cache at `cache_index`. Defaults
            to `None`.
        cache_index: scalar int tensor or `None`. Position to write in `cache`;
            only with a `cache`.

    Returns:
        `output` `(B, T, d_model)`; with `return_attention_scores`, also the
        weights `(B, num_heads, T, S)`; with a `cache`, also the updated cache,
        last.

    Example:
    >>> mha = MultiHeadAttention(d_model=512, num_heads=8)
    >>> x = np.random.uniform(size=(1, 60, 512)).astype("float32")
    >>> out, w = mha(x, x, x, None)  # the tutorial's call
    >>> tuple(out.shape), tuple(w.shape)
    ((1, 60, 512), (1, 8, 60, 60))
    >>> tuple(mha(query=x, value=x, use_causal_mask=True).shape)  # Keras's call
    (1, 60, 512)
    """

    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(**_config.layer_kwargs("MultiHeadAttention", kwargs))
        _config.check_model_args(d_model=d_model, num_heads=num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.depth = self.d_model // self.num_heads
        # The query's Keras mask goes on to the output (as with Keras's layer).
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

    def __call__(self, *args, **kwargs):
        # The tutorial's call gives value, key and query by position and gets
        # the weights back; Keras's gives them by keyword and gets the output.
        if len(args) < 3 and "query" not in kwargs:
            raise ValueError(
                "Received an invalid value for argument `query`: pass value, key and query "
                "by position, in the tutorial's order `mha(v, k, q, mask)`, or by keyword "
                "as with keras.layers.MultiHeadAttention, `mha(query=..., value=...)` (the "
                "keywords are `value`, `key`, `query`: Keras's names). Received: "
                f"{len(args)} positional argument(s) and keywords {sorted(kwargs)}"
            )
        kwargs.setdefault("return_attention_scores", len(args) >= 3)
        return super().__call__(*args, **kwargs)

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

    def call(self, value=None, key=None, query=None, mask=None, attention_mask=None,
             return_attention_scores=False, use_causal_mask=False, training=None,
             query_mask=None, value_mask=None, key_mask=None, cache=None, cache_index=None):
        if cache_index is not None and cache is None:
            raise ValueError(
                "Received an invalid value for argument `cache_index`: it is the position "
                "to write in `cache`, and no `cache` was given. Received: "
                f"cache_index={cache_index!r}, cache=None"
            )
        if mask is not None and attention_mask is not None:
            raise ValueError(
                "Received an invalid value for argument `attention_mask`: it is Keras's "
                "name for `mask`, and both were given. Received: mask and attention_mask"
            )
        if attention_mask is not None and not is_keras_mask(attention_mask):
            raise ValueError(
                "Received an invalid value for argument `attention_mask`, expected a boolean "
                "mask (Keras's: True = attend). A numeric mask means the opposite in Keras "
                "(1 = attend) and in the tutorial (1 = blocked): cast Keras's to bool, or "
                "pass the tutorial's as `mask`. Received: attention_mask of dtype "
                f"{keras.backend.standardize_dtype(ops.convert_to_tensor(attention_mask).dtype)}"
            )
        mask = attention_mask if mask is None else mask
        key_mask = None if key is None or key is value else key_mask
        if cache is not None:
            key = query if key is None else key
            value = key if value is None else value
        key = value if key is None else key
        batch_size = ops.shape(query)[0]

        # 1. Project and split into heads.
        if cache is not None and cache_index is None:
            # Cross-attention while decoding: keys and values projected once.
            q = self.split_heads(self.wq(query), batch_size)  # (B, H, T, depth)
            k, v = cache["key"], cache["value"]  # (B, H, S, depth)
        else:
            if cache is not None and query is key and key is value:  # a decoding step
                q, k, v = self._project_self_attention(query)
            else:
                q, k, v = self.wq(query), self.wk(key), self.wv(value)
            q = self.split_heads(q, batch_size)  # (B, H, T, depth)
            k = self.split_heads(k, batch_size)  # (B, H, S, depth)
            v = self.split_heads(v, batch_size)  # (B, H, S, depth)
            if cache is not None:
                # One decoding step: the token's key and value written into
                # the cache at `cache_index`.
                start = [0, 0, cache_index, 0]
                cache = {
                    "key": ops.slice_update(cache["key"], start, k),
                    "value": ops.slice_update(cache["value"], start, v),
                }  # (B, H, L, depth) each
                k, v = cache["key"], cache["value"]

        # 2. Attention, over the keys the masks leave.
        if cache is not None:  # the Keras masks of one token say nothing of the cache
            value_mask = key_mask = None
        attend = self._attend_mask(mask, q, k, value_mask, key_mask, use_causal_mask,
                                   cache_index)  # (B|1, H|1, T|1, S)
        if return_attention_scores or not _takes_kernel(q, k):
            attention, weights = scaled_dot_product_attention(q, k, v, attend)
            attention = ops.transpose(attention, (0, 2, 1, 3))  # (B, T, H, depth)
        else:
            attention = self._attention_kernel(q, k, v, attend)  # (B, T, H, depth)

        # 3. Merge the heads and project.
        attention = ops.reshape(attention, (batch_size, -1, self.d_model))  # (B, T, d_model)
        output = self.dense(attention)  # (B, T, d_model)
        if query_mask is not None:
            _compat.set_keras_mask(output, query_mask)
        outputs = (output,)
        if return_attention_scores:
            outputs += (weights,)
        if cache is not None:
            outputs += (cache,)
        return outputs[0] if len(outputs) == 1 else outputs

    def _attention_kernel(self, q, k, v, attend):
        """`keras.ops.dot_product_attention` of `(B, H, T|S, depth)` tensors -> `(B, T, H, depth)`.

        A row that may attend to no key gets what the explicit softmax gives
        it, the mean of the values (a zero query attending to every key), as
        the kernels do not agree there (PyTorch's on a GPU gives zeros). The
        mask is spelled out to its full `(T, S)` (cuDNN's kernel, JAX's flash
        attention on a GPU, takes no other).
        """
        if attend is not None:
            visible = ops.any(attend, axis=-1, keepdims=True)  # (B|1, H|1, T|1, 1)
            q = ops.where(visible, q, ops.zeros_like(q))
            attend = ops.logical_or(attend, ops.logical_not(visible))
            attend = ops.broadcast_to(attend, (*ops.shape(attend)[:2], ops.shape(q)[2],
                                               ops.shape(k)[2]))  # (B|1, H|1, T, S)
        to_kernel = (0, 2, 1, 3)  # (B, H, T, depth) -> (B, T, H, depth)
        return ops.dot_product_attention(
            ops.transpose(q, to_kernel), ops.transpose(k, to_kernel),
            ops.transpose(v, to_kernel), mask=attend, scale=1.0 / math.sqrt(self.depth),
        )  # (B, T, H, depth)

    def _attend_mask(self, mask, q, k, value_mask, key_mask, use_causal_mask, cache_index):
        """Every mask of the call as one boolean `(B|1, H|1, T|1, S)`, True = attend,
        or `None`: the explicit one, the keys' Keras masks and the causal mask."""
        masks = [attend_mask(mask, self.num_heads, q.shape[2], k.shape[2], q.shape[0])]
        for implicit in (value_mask, key_mask):
            if implicit is not None:
                masks.append(ops.cast(implicit, "bool")[:, None, None, :])  # (B, 1, 1, S)
        if use_causal_mask:
            keys = ops.arange(ops.shape(k)[2])
            queries = (ops.arange(ops.shape(q)[2]) if cache_index is None
                       else ops.reshape(cache_index, (1,)))
            masks.append(keys[None, None, None, :] <= queries[None, None, :, None])  # (1, 1, T, S)
        masks = [m for m in masks if m is not None]
        if not masks:
            return None
        attend = masks[0]
        for m in masks[1:]:
            attend = ops.logical_and(attend, m)
        return attend

    def _project_self_attention(self, x):
        """`(wq(x), wk(x), wv(x))`, each `(B, T, d_model)`, in one matrix product.

        The three kernels side by side `(d_model, 3 d_model)` take one product
        instead of three in a step of a compiled decoding loop (XLA, `jax.jit`,
        the defaults on TensorFlow and JAX), which joins the kernels once per
        call, outside the loop: batch-1 greedy decoding takes 1.058x as long
        without it on JAX, 1.03-1.05x on TensorFlow (`_backend.joins_projections`).
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

    def compute_mask(self, value, previous_mask=None):
        # `call` puts the query's Keras mask on the output (the first argument
        # is the value, whose mask is not the output's).
        return None

    def get_config(self):
        config = super().get_config()
        config.update(_config.options_config(self))
        return config
