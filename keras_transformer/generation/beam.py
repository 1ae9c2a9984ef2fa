"""Beam search with the GNMT length penalty, and maximum-mutual-information reranking."""

import numpy as np
from keras import ops

from keras_transformer.generation.search import int32, while_loop_in_blocks


def length_penalty_fn(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def gather_beams(x, index):
    """`x` `(B, M, ...)` at `index` `(B, K)` along axis 1 -> `(B, K, ...)`."""
    batch_size, m = ops.shape(x)[0], ops.shape(x)[1]
    rows = ops.reshape(index + ops.arange(batch_size, dtype="int32")[:, None] * m, (-1,))
    flat = ops.reshape(x, (-1,) + tuple(x.shape[2:]))  # (B*M, ...)
    return ops.reshape(ops.take(flat, rows, axis=0), ops.shape(index) + tuple(x.shape[2:]))


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
    steps_per_check=1,
):
    """Beam search for the answer of highest `log p / length_penalty_fn(length, alpha)`.

    Each row keeps two sets of `beam_size` (K) hypotheses:
    - alive: the K most probable prefixes without `<END>`, the only ones
      extended. (Alive prefixes all have the same length, so ranking them by
      log-probability ranks them by score too.)
    - finished: the K best hypotheses that ended, by score. A candidate that
      ends with `<END>` joins them when it ranks among the step's K best
      candidates (the beam), and the beam is refilled from the next-best
      candidates that did not end, so K hypotheses stay alive.
    A row is done when no alive hypothesis can beat its worst finished one:
    log-probabilities only fall as a hypothesis grows, so an alive one with
    log-probability p scores at most `p / length_penalty_fn(t)` for the
    longest or shortest length t it can still reach (with alpha > 0 a longer
    hypothesis can still win: a negative log-probability divided by a larger
    penalty rises). The search stops when every row is done, or after
    `max_length` steps, where the alive hypotheses count as answers of that
    length. With `beam_size=1` and alpha 0 this is greedy search.

    Args:
        step_fn: the model step; its batch is `batch_size * beam_size` rows,
            row `b * beam_size + k` being alive hypothesis k of source b.
        state: initial model state for those rows.
        gather_state_fn: `(state, flat_parent_rows (B*K,)) -> state` that
            reorders the per-hypothesis parts of `state`.
        batch_size: scalar int B. beam_size: int K. max_length: int L.
        vocab_size: int V.
        start_token_idx, end_token_idx, pad_token_idx: int. Special ids.
        length_penalty: scalar float tensor alpha.
        steps_per_check: int dividing `max_length`. Steps run between two
            checks whether every row is done (`while_loop_in_blocks`; a row
            that is done keeps its answers, so the results are the same).

    Returns:
        `(tokens (B, K, L) int32, log_probs (B, K) float32, lengths (B, K)
        int32, n)`: every row's K best answers, best first, with their
        log-probabilities and lengths (`<END>` included); only the first `n`
        columns were generated.
    """
    K, V = beam_size, vocab_size
    neg_inf = ops.full((batch_size, K), -np.inf, "float32")
    # Hypotheses 1..K-1 start at -inf so that step 0 expands hypothesis 0 only.
    first = np.array([0.0] + [-np.inf] * (K - 1), np.float32)
    alive_log_probs = ops.broadcast_to(ops.convert_to_tensor(first), (batch_size, K))  # (B, K)
    alive_seqs = ops.full((batch_size, K, max_length), pad_token_idx, "int32")  # (B, K, L)
    finished = dict(seqs=alive_seqs, scores=neg_inf, log_probs=neg_inf,
                    lengths=ops.zeros((batch_size, K), "int32"))
    current = ops.full((batch_size * K,), start_token_idx, "int32")  # (B*K,)
    done = ops.zeros((batch_size,), "bool")
    in_beam = ops.arange(2 * K) < K  # (2K,): the step's K best candidates
    row_offsets = ops.arange(batch_size, dtype="int32")[:, None] * K  # (B, 1)

    def penalty(length):
        return length_penalty_fn(length, length_penalty)

    def keep_best(finished, candidates):
        """The K best by score of `finished` and `candidates` (both dicts of (B, M, ...))."""
        merged = {key: ops.concatenate([finished[key], candidates[key]], axis=1)
                  for key in finished}
        _, best = ops.top_k(merged["scores"], K)  # (B, K)
        return {key: gather_beams(value, ops.cast(best, "int32"))
                for key, value in merged.items()}

    def cond(index, current, alive_seqs, alive_log_probs, finished, done, state, n):
        return ops.logical_and(index < max_length, ops.logical_not(ops.all(done)))

    def body(index, current, alive_seqs, alive_log_probs, finished, done, state, n):
        n = n + ops.cast(ops.logical_not(ops.all(done)), "int32")  # steps with work
        logits, state, _ = step_fn(current, index, state)  # (B*K, V)
        step_log_probs = ops.reshape(ops.log_softmax(logits, axis=-1), (-1, K, V))
        candidates = ops.reshape(step_log_probs + alive_log_probs[:, :, None], (-1, K * V))
        # At most K candidates end, so the 2K best hold K that do not.
        log_probs, top = ops.top_k(candidates, 2 * K)  # (B, 2K), best first
        top = ops.cast(top, "int32")
        parent, token = ops.floor_divide(top, V), ops.mod(top, V)  # (B, 2K)
        seqs = ops.slice_update(gather_beams(alive_seqs, parent), [0, 0, index],
                                token[:, :, None])  # (B, 2K, L)
        ended = ops.equal(token, end_token_idx)  # (B, 2K)
        length = index + 1
        finished = keep_best(finished, dict(
            seqs=seqs,
            scores=ops.where(ops.logical_and(ended, in_beam), log_probs / penalty(length),
                             -np.inf),
            log_probs=log_probs,
            lengths=ops.full(ops.shape(token), length, "int32"),
        ))
        alive_log_probs, keep = ops.top_k(ops.where(ended, -np.inf, log_probs), K)  # (B, K)
        keep = ops.cast(keep, "int32")
        alive_seqs = gather_beams(seqs, keep)  # (B, K, L)
        current = ops.reshape(gather_beams(token, keep), (-1,))  # (B*K,)
        parent_rows = ops.reshape(gather_beams(parent, keep) + row_offsets, (-1,))
        state = gather_state_fn(state, parent_rows)
        best_alive = alive_log_probs[:, 0]  # (B,)
        could_score = ops.maximum(best_alive / penalty(ops.minimum(length + 1, max_length)),
                                  best_alive / penalty(max_length))
        done = ops.logical_or(done, finished["scores"][:, K - 1] >= could_score)
        return index + 1, current, alive_seqs, alive_log_probs, finished, done, state, n

    _, _, alive_seqs, alive_log_probs, finished, done, _, n = while_loop_in_blocks(
        cond, body,
        (int32(0), current, alive_seqs, alive_log_probs, finished, done, state, int32(0)),
        steps_per_check,
    )
    # Rows that reached max_length: their alive hypotheses are answers too.
    finished = keep_best(finished, dict(
        seqs=alive_seqs,
        scores=ops.where(done[:, None], -np.inf, alive_log_probs / penalty(n)),
        log_probs=alive_log_probs,
        lengths=ops.full((batch_size, K), n, "int32"),
    ))
    return finished["seqs"], finished["log_probs"], finished["lengths"], n


def mmi_rerank(tokens, log_probs, lengths, prior_log_probs, weight, length_penalty):
    """Orders each row's hypotheses by `(log p(T|S) - weight * log p(T)) / lp(|T|)`.

    Maximum mutual information (Li et al., 2016): `p(T)`, the probability of
    the answer whatever the source, demotes answers that fit any input. The
    score is divided by beam search's length penalty `lp`, so the order
    weighs length as the search did.

    Args:
        tokens: int32 `(B, K, L)`. Hypotheses from `beam_search`.
        log_probs: float32 `(B, K)`. Their `log p(T|S)`.
        lengths: int32 `(B, K)`. Their lengths, `<END>` included.
        prior_log_probs: float32 `(B, K)`. Their `log p(T)`.
        weight: scalar float tensor, lambda >= 0.
        length_penalty: scalar float tensor alpha of `length_penalty_fn`.

    Returns:
        `tokens` `(B, K, L)` reordered, best first.
    """
    scores = (log_probs - weight * prior_log_probs) / length_penalty_fn(lengths, length_penalty)
    order = ops.cast(ops.argsort(-scores, axis=-1), "int32")  # (B, K), best first
    return gather_beams(tokens, order)


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
