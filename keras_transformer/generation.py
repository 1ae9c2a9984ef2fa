"""Autoregressive decoding loops: greedy, sampling and beam search.

Every loop is a `tf.while_loop` over static shapes (a `(batch, max_length)`
token buffer written at the step index), so it traces once, compiles with XLA
and runs on TPU; it stops as soon as every row has produced `<END>`.

The loops know nothing about the model: they call
`step_fn(tokens, index, state) -> (logits, state, cross_weights)`, where
`tokens` `(N,)` are the ids at decoder position `index`, `logits` `(N, V)` are
float32 scores for position `index + 1`, `state` is whatever the model carries
between steps (its cache), and `cross_weights` is a list of
`(N, heads, 1, S)` tensors (one per decoder layer) or an empty list.
"""

import keras
import tensorflow as tf


def _write_column(buffer, index, column):
    """Writes `column` `(B, ...)` into `buffer` `(B, L, ...)` at step `index`."""
    start = [0, index] + [0] * (len(buffer.shape) - 2)
    return keras.ops.slice_update(buffer, start, tf.expand_dims(column, 1))


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
):
    """Picks one token per row and step: the arg-max, or `choose_fn`'s pick.

    Args:
        step_fn: the model step, see the module docstring.
        state: the initial model state.
        batch_size: scalar int. Number of rows B.
        max_length: int. Most tokens to generate, L.
        start_token_idx, end_token_idx, pad_token_idx: int. Special ids.
        choose_fn: `(logits (B, V), index) -> ids (B,)`, e.g. a sampler.
            Defaults to the arg-max.
        weight_buffers: list of zero tensors `(B, heads, L, S)` to collect the
            cross-attention weights of every step into, or `None`.

    Returns:
        `(tokens (B, L) int32, n, weight_buffers)`: only the first `n` columns
        were generated; after `<END>` a row holds `<PAD>`.
    """
    if choose_fn is None:

        def choose_fn(logits, index):
            return tf.argmax(logits, -1, output_type=tf.int32)

    collect = weight_buffers is not None
    tokens = tf.fill((batch_size, max_length), tf.cast(pad_token_idx, tf.int32))
    finished = tf.zeros((batch_size,), tf.bool)
    current = tf.fill((batch_size,), tf.cast(start_token_idx, tf.int32))
    weights = weight_buffers if collect else []

    def cond(index, current, tokens, finished, state, weights):
        return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(index, current, tokens, finished, state, weights):
        logits, state, cross = step_fn(current, index, state)  # (B, V)
        next_token = choose_fn(logits, index)  # (B,)
        next_token = tf.where(finished, pad_token_idx, next_token)
        tokens = _write_column(tokens, index, next_token)  # (B, L)
        finished = tf.logical_or(finished, tf.equal(next_token, end_token_idx))
        if collect:
            weights = [
                keras.ops.slice_update(buffer, [0, 0, index, 0], tf.cast(w, buffer.dtype))
                for buffer, w in zip(weights, cross)
            ]  # each (B, H, L, S)
        return index + 1, next_token, tokens, finished, state, weights

    n, _, tokens, _, _, weights = tf.while_loop(
        cond, body, (tf.constant(0), current, tokens, finished, state, weights)
    )
    return tokens, n, (weights if collect else None)


def sampler(temperature, top_k, top_p, seed):
    """A `choose_fn` drawing from softmax(logits / temperature).

    Args:
        temperature: scalar float tensor > 0.
        top_k: int. Keep only the `top_k` highest logits; `0` keeps all.
        top_p: scalar float tensor in (0, 1]. Keep the smallest set of tokens
            whose probability mass reaches `top_p` (nucleus sampling).
        seed: scalar int tensor. The draw at step t uses the stateless seed
            `(seed, t)`, so the same seed gives the same samples.
    """

    def choose(logits, index):
        logits = logits / temperature  # (B, V)
        if top_k:
            kth = tf.math.top_k(logits, top_k).values[:, -1:]  # (B, 1)
            logits = tf.where(logits < kth, -float("inf"), logits)
        sorted_logits = tf.sort(logits, direction="DESCENDING")  # (B, V)
        mass_before = tf.cumsum(tf.nn.softmax(sorted_logits), axis=-1, exclusive=True)
        kept = tf.where(mass_before < top_p, sorted_logits, float("inf"))
        threshold = tf.reduce_min(kept, axis=-1, keepdims=True)  # (B, 1)
        logits = tf.where(logits < threshold, -float("inf"), logits)
        step_seed = tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)])
        draw = tf.random.stateless_categorical(logits, 1, step_seed, dtype=tf.int32)
        return draw[:, 0]  # (B,)

    return choose


def length_penalty_fn(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(
    step_fn,
    state,
    gather_state_fn,
    batch_size,
    beam_size,
    max_length,
    vocab_size,
    start_token_idx,
    end_token_idx,
    pad_token_idx,
    length_penalty,
):
    """Beam search with the GNMT length penalty.

    Each row keeps `beam_size` hypotheses ranked by log-probability divided by
    `length_penalty_fn(length, length_penalty)`. A hypothesis that produced
    `<END>` stays in the beam with its score and only extends with `<PAD>`;
    the search stops when every beam of every row has ended, or after
    `max_length` steps. With `beam_size=1` this is greedy search.

    Args:
        step_fn: the model step; its batch is `batch_size * beam_size` rows,
            row `b * beam_size + k` being beam k of source b.
        state: initial model state for those rows.
        gather_state_fn: `(state, flat_parent_rows (B*K,)) -> state` that
            reorders the per-hypothesis parts of `state`.
        batch_size: scalar int B. beam_size: int K. max_length: int L.
        vocab_size: int V.
        start_token_idx, end_token_idx, pad_token_idx: int. Special ids.
        length_penalty: scalar float tensor alpha.

    Returns:
        `(tokens (B, K, L) int32, log_probs (B, K) float32, n)`: every row's
        hypotheses, best (by length-penalised log-probability) first, with
        their log-probabilities; only the first `n` columns were generated.
    """
    K, V = beam_size, vocab_size
    neg_inf = -float("inf")
    seqs = tf.fill((batch_size, K, max_length), tf.cast(pad_token_idx, tf.int32))
    # Beams 1..K-1 start at -inf so that step 0 expands beam 0 only.
    first = tf.concat([[0.0], tf.fill([K - 1], neg_inf)], axis=0)
    log_probs = tf.tile(first[tf.newaxis], [batch_size, 1])  # (B, K)
    finished = tf.zeros((batch_size, K), tf.bool)
    lengths = tf.zeros((batch_size, K), tf.int32)
    current = tf.fill((batch_size * K,), tf.cast(start_token_idx, tf.int32))
    pad_only = tf.one_hot(pad_token_idx, V, on_value=0.0, off_value=neg_inf)  # (V,)
    row_offsets = tf.range(batch_size)[:, tf.newaxis] * K  # (B, 1)

    def cond(index, current, seqs, log_probs, finished, lengths, state):
        return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(index, current, seqs, log_probs, finished, lengths, state):
        logits, state, _ = step_fn(current, index, state)  # (B*K, V)
        step_log_probs = tf.reshape(tf.nn.log_softmax(logits), (-1, K, V))  # (B, K, V)
        candidates = log_probs[:, :, tf.newaxis] + step_log_probs  # (B, K, V)
        # An ended hypothesis proposes only <PAD>, keeping its log-probability.
        candidates = tf.where(
            finished[:, :, tf.newaxis], log_probs[:, :, tf.newaxis] + pad_only, candidates
        )
        new_lengths = tf.where(finished, lengths, index + 1)  # (B, K)
        scores = candidates / length_penalty_fn(new_lengths, length_penalty)[:, :, tf.newaxis]
        _, top = tf.math.top_k(tf.reshape(scores, (-1, K * V)), K)  # (B, K)
        parent = top // V  # (B, K)
        token = top % V  # (B, K)

        log_probs = tf.gather(tf.reshape(candidates, (-1, K * V)), top, batch_dims=1)
        finished = tf.logical_or(
            tf.gather(finished, parent, batch_dims=1), tf.equal(token, end_token_idx)
        )
        lengths = tf.gather(new_lengths, parent, batch_dims=1)
        seqs = tf.gather(seqs, parent, batch_dims=1)  # (B, K, L)
        seqs = keras.ops.slice_update(seqs, [0, 0, index], token[:, :, tf.newaxis])
        state = gather_state_fn(state, tf.reshape(parent + row_offsets, [-1]))
        return index + 1, tf.reshape(token, [-1]), seqs, log_probs, finished, lengths, state

    n, _, seqs, log_probs, _, _, _ = tf.while_loop(
        cond,
        body,
        (tf.constant(0), current, seqs, log_probs, finished, lengths, state),
    )
    # top_k sorts, so the beams are in order of score, best first.
    return seqs, log_probs, n
