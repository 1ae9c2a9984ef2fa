"""Beam search with the GNMT length penalty, and maximum-mutual-information reranking."""

import numpy as np
from keras import ops

from keras_transformer.generation.search import int32, write_column


def length_penalty_fn(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


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
    seqs = ops.full((batch_size * K, max_length), pad_token_idx, "int32")  # (B*K, L)
    # Beams 1..K-1 start at -inf so that step 0 expands beam 0 only.
    first = np.array([0.0] + [-np.inf] * (K - 1), np.float32)
    log_probs = ops.broadcast_to(ops.convert_to_tensor(first), (batch_size, K))  # (B, K)
    finished = ops.zeros((batch_size, K), "bool")
    lengths = ops.zeros((batch_size, K), "int32")
    current = ops.full((batch_size * K,), start_token_idx, "int32")
    pad_only = np.full((V,), -np.inf, np.float32)
    pad_only[pad_token_idx] = 0.0  # an ended hypothesis proposes only <PAD>
    row_offsets = ops.arange(batch_size, dtype="int32")[:, None] * K  # (B, 1)

    def cond(index, current, seqs, log_probs, finished, lengths, state):
        return ops.logical_and(index < max_length, ops.logical_not(ops.all(finished)))

    def body(index, current, seqs, log_probs, finished, lengths, state):
        logits, state, _ = step_fn(current, index, state)  # (B*K, V)
        step_log_probs = ops.reshape(ops.log_softmax(logits, axis=-1), (-1, K, V))  # (B, K, V)
        candidates = ops.where(
            finished[:, :, None], pad_only, step_log_probs
        ) + log_probs[:, :, None]  # (B, K, V)
        new_lengths = ops.where(finished, lengths, index + 1)  # (B, K)
        scores = candidates / length_penalty_fn(new_lengths, length_penalty)[:, :, None]
        _, top = ops.top_k(ops.reshape(scores, (-1, K * V)), K)  # (B, K)
        parent = ops.floor_divide(top, V)  # (B, K)
        token = ops.cast(ops.mod(top, V), "int32")  # (B, K)
        rows = ops.reshape(ops.cast(parent, "int32") + row_offsets, (-1,))  # (B*K,)

        log_probs = ops.take_along_axis(ops.reshape(candidates, (-1, K * V)), top, axis=1)
        finished = ops.logical_or(
            ops.take_along_axis(finished, parent, axis=1), ops.equal(token, end_token_idx)
        )  # (B, K)
        lengths = ops.take_along_axis(new_lengths, parent, axis=1)  # (B, K)
        token = ops.reshape(token, (-1,))  # (B*K,)
        seqs = write_column(ops.take(seqs, rows, axis=0), index, token)  # (B*K, L)
        state = gather_state_fn(state, rows)
        return index + 1, token, seqs, log_probs, finished, lengths, state

    n, _, seqs, log_probs, _, _, _ = ops.while_loop(
        cond,
        body,
        (int32(0), current, seqs, log_probs, finished, lengths, state),
    )
    # top_k sorts, so the beams are in order of score, best first.
    return ops.reshape(seqs, (batch_size, K, max_length)), log_probs, n


def mmi_rerank(tokens, log_probs, prior_log_probs, weight):
    """Orders each row's hypotheses by `log p(T|S) - weight * log p(T)`.

    Maximum mutual information (Li et al., 2016): `p(T)`, the probability of
    the answer whatever the source, demotes answers that fit any input.

    Args:
        tokens: int32 `(B, K, L)`. Hypotheses from `beam_search`.
        log_probs: float32 `(B, K)`. Their `log p(T|S)`.
        prior_log_probs: float32 `(B, K)`. Their `log p(T)`.
        weight: scalar float tensor, lambda >= 0.

    Returns:
        `tokens` `(B, K, L)` reordered, best first.
    """
    batch_size, K = ops.shape(tokens)[0], ops.shape(tokens)[1]
    scores = log_probs - weight * prior_log_probs  # (B, K)
    order = ops.cast(ops.argsort(-scores, axis=-1), "int32")  # (B, K), best first
    rows = ops.reshape(order + ops.arange(batch_size, dtype="int32")[:, None] * K, (-1,))
    flat = ops.reshape(tokens, (batch_size * K, -1))  # (B*K, L)
    return ops.reshape(ops.take(flat, rows, axis=0), ops.shape(tokens))


def answer_log_probs(model, tokens, src_len):
    """log p(T | empty source) of generated rows `tokens` `(N, L)`.

    The source is all `<PAD>`: every cross-attention row is masked, so the
    decoder sees no input and scores how likely `T` is as an answer to
    anything (the "anti-language model" of maximum-mutual-information
    decoding, Li et al., 2016).

    Returns:
        float32 `(N,)`: the sum of the log-probabilities of the tokens of
        each row, `<END>` included, `<PAD>` excluded.
    """
    rows = ops.shape(tokens)[0]
    empty = ops.full((1, src_len), model.pad_token_idx, "int32")  # (1, S)
    enc_output, padding_mask = model.encode(empty)
    enc_output = ops.repeat(enc_output, rows, axis=0)  # (N, S, d_model)
    padding_mask = ops.repeat(padding_mask, rows, axis=0)  # (N, 1, 1, S)
    # Teacher forcing: <SOS> + T as the decoder input (<END> read as <PAD>).
    dec_in = ops.concatenate(
        [ops.full((rows, 1), model.start_token_idx, "int32"), tokens[:, :-1]], axis=1
    )  # (N, L)
    dec_in = ops.where(ops.equal(dec_in, model.end_token_idx), model.pad_token_idx, dec_in)
    logits, _ = model.decode(dec_in, enc_output, padding_mask)  # (N, L, V)
    log_probs = ops.log_softmax(logits, axis=-1)
    token_log_probs = ops.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]
    real = ops.not_equal(tokens, model.pad_token_idx)  # (N, L)
    return ops.sum(ops.where(real, token_log_probs, 0.0), axis=1)
