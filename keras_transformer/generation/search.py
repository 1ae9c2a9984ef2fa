"""Greedy search and sampling: one token per row and step."""

import numpy as np
from keras import ops

from keras_transformer import _backend


def write_column(buffer, index, column):
    """Writes `column` `(B, ...)` into `buffer` `(B, L, ...)` at step `index`."""
    start = [0, index] + [0] * (len(buffer.shape) - 2)
    return ops.slice_update(buffer, start, ops.expand_dims(column, 1))


def int32(value):
    return ops.convert_to_tensor(value, "int32")


def while_loop_in_blocks(cond, body, loop_vars, block):
    """`ops.while_loop(cond, body, loop_vars)` that reads `cond` only once
    every `block` steps: each of its iterations runs `body` `block` times, in
    a loop of known length.

    The caller counts the steps that did work itself: `body` must leave the
    results alone once `cond` is false (an ended row takes `<PAD>`, a beam
    search that is done keeps its answers) and the steps must not run past
    the buffers (`block` divides the number of steps).
    """
    if block == 1:
        return ops.while_loop(cond, body, loop_vars)

    def steps(*loop_vars):
        return ops.fori_loop(0, block, lambda _, loop_vars: body(*loop_vars), tuple(loop_vars))

    return ops.while_loop(cond, steps, loop_vars)


def greedy_search(
    step_fn,
    state,
    batch_size,
    max_length,
    start_token_idx,
    end_token_idx,
    pad_token_idx,
    choose_fn=None,
    weight_buffers=None,
    steps_per_check=1,
):
    """Picks one token per row and step: the arg-max, or `choose_fn`'s pick.

    Args:
        step_fn: the model step, see the module docstring.
        state: the initial model state.
        batch_size: scalar int. Number of rows B.
        max_length: int. Most tokens to generate, L.
        start_token_idx, end_token_idx, pad_token_idx: int. Special ids.
        choose_fn: `(logits (B, V), index) -> ids (B,)`, e.g. a `Sampler`.
            Defaults to the arg-max.
        weight_buffers: list of zero tensors `(B, heads, L, S)` to collect the
            cross-attention weights of every step into, or `None`.
        steps_per_check: int dividing `max_length`. Steps run between two
            checks whether every row has ended (`while_loop_in_blocks`);
            the results are the same for any value.

    Returns:
        `(tokens (B, L) int32, n, weight_buffers)`: only the first `n` columns
        were generated; after `<END>` a row holds `<PAD>`.
    """
    if choose_fn is None:

        def choose_fn(logits, index):
            return ops.cast(ops.argmax(logits, axis=-1), "int32")

    collect = weight_buffers is not None
    tokens = ops.full((batch_size, max_length), pad_token_idx, "int32")
    finished = ops.zeros((batch_size,), "bool")
    current = ops.full((batch_size,), start_token_idx, "int32")
    padding = ops.full((batch_size,), pad_token_idx, "int32")
    weights = weight_buffers if collect else []

    def cond(index, current, tokens, finished, state, weights, n):
        return ops.logical_and(index < max_length, ops.logical_not(ops.all(finished)))

    def body(index, current, tokens, finished, state, weights, n):
        n = n + ops.cast(ops.logical_not(ops.all(finished)), "int32")  # steps with work
        logits, state, cross = step_fn(current, index, state)  # (B, V)
        next_token = ops.where(finished, padding, choose_fn(logits, index))  # (B,)
        tokens = write_column(tokens, index, next_token)  # (B, L)
        finished = ops.logical_or(finished, ops.equal(next_token, end_token_idx))
        if collect:
            weights = [
                ops.slice_update(buffer, [0, 0, index, 0], ops.cast(w, buffer.dtype))
                for buffer, w in zip(weights, cross)
            ]  # each (B, H, L, S)
        return index + 1, next_token, tokens, finished, state, weights, n

    _, _, tokens, _, _, weights, n = while_loop_in_blocks(
        cond, body, (int32(0), current, tokens, finished, state, weights, int32(0)),
        steps_per_check,
    )
    return tokens, n, (weights if collect else None)


class Sampler:
    """A `choose_fn` for `greedy_search` drawing from softmax(logits / temperature).

    Args:
        temperature: scalar float tensor > 0.
        top_k: int. Keep only the `top_k` highest logits; `0` keeps all.
        top_p: scalar float tensor in (0, 1]. Keep the smallest set of tokens
            whose probability mass reaches `top_p` (nucleus sampling).
        seed: scalar int tensor. The draw at step t depends only on
            `(seed, t)`, so the same seed gives the same samples.
    """

    def __init__(self, temperature, top_k, top_p, seed):
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.seed = seed

    def __call__(self, logits, index):
        logits = logits / self.temperature  # (B, V)
        if self.top_k:
            kth = ops.top_k(logits, self.top_k)[0][:, -1:]  # (B, 1)
            logits = ops.where(logits < kth, -np.inf, logits)
        sorted_logits = ops.flip(ops.sort(logits, axis=-1), axis=-1)  # (B, V), descending
        probs = ops.softmax(sorted_logits, axis=-1)
        mass_before = ops.concatenate(
            [ops.zeros_like(probs[:, :1]), ops.cumsum(probs[:, :-1], axis=-1)], axis=-1
        )  # (B, V): the mass of the tokens ranked above each one
        kept = ops.where(mass_before < self.top_p, sorted_logits, np.inf)
        threshold = ops.min(kept, axis=-1, keepdims=True)  # (B, 1)
        logits = ops.where(logits < threshold, -np.inf, logits)
        return _backend.stateless_categorical(logits, self.seed, index)  # (B,)
