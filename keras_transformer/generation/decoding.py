"""Autoregressive decoding: the loops, the strategies, and how a model drives them.

Every loop is one `keras.ops.while_loop` over static shapes (a
`(batch, max_length)` token buffer written at the step index), so it traces
once and compiles: XLA on TensorFlow, `jax.jit` on JAX; on PyTorch it runs
eagerly. It stops as soon as every row has produced `<END>`; on a GPU it
asks that once every few steps, in blocks of a known number of steps
(`_backend.steps_per_check`): the loop of a batch-1 sentence ran 1.5x faster
so on an H200.

The loops know nothing about the model: they call

    step_fn(tokens, index, state) -> (logits, state, cross_weights)

where `tokens` `(N,)` are the ids at decoder position `index`, `logits`
`(N, V)` are float32 scores for position `index + 1`, `state` is whatever the
model carries between steps (its key/value cache), and `cross_weights` is a
list of `(N, heads, 1, S)` tensors (one per decoder layer) when the weights are asked
for, or an empty list.

The strategies, one small piece each: `greedy_search` (with a `choose_fn`),
`Sampler` (temperature, top-k, top-p) in `search`; `beam_search` (GNMT length
penalty) and `mmi_rerank` (maximum mutual information) in `beam`. `decode` is what
`Transformer.generate` compiles: it encodes once and builds the step function
from the model's `encode`, `init_cache`, `decode_step` and `decode`.

Runs on every Keras backend (`keras.ops` only, and `_backend` for the random
draw of sampling).
"""

import keras
import numpy as np
from keras import ops

from keras_transformer import _backend
from keras_transformer.generation.beam import answer_log_probs, beam_search, mmi_rerank
from keras_transformer.generation.config import BEAM_METHODS
from keras_transformer.generation.search import Sampler, greedy_search, write_column


def special_token_penalty(vocab_size, pad_token_idx, start_token_idx, end_token_idx):
    """float32 `(V,)`: -inf at `<PAD>` and `<SOS>`, 0 elsewhere, added to the logits.

    They are never generated (a `<PAD>` inside an output could not be told
    from the padding after `<END>`). A constant: nothing is recomputed per step.
    """
    penalty = np.zeros((vocab_size,), np.float32)
    penalty[sorted({pad_token_idx, start_token_idx} - {end_token_idx})] = -np.inf
    return penalty


def _repeat_rows(cache, times):
    """Every tensor of a `Decoder.init_cache` cache, each row repeated `times` times."""
    return keras.tree.map_structure(lambda t: ops.repeat(t, times, axis=0), cache)


def _gather_self_attention(cache, rows):
    """The self-attention keys and values of rows `rows` (the beams' parents);
    the cross-attention ones are the same for every beam of a source."""
    return [
        {"self": keras.tree.map_structure(lambda t: ops.take(t, rows, axis=0), layer["self"]),
         "cross": layer["cross"]}
        for layer in cache
    ]


def decode(
    model,
    inp,
    tensors,
    *,
    method,
    max_length,
    beam_size,
    top_k,
    return_attention_weights,
    use_cache,
    num_return_sequences,
):
    """The body of `Transformer.generate`'s compiled function: encode once, then loop.

    `model` provides `encode(inp) -> (enc_output, padding_mask)`,
    `init_cache(enc_output, max_length)`, `decode_step(token, index, cache,
    padding_mask, return_attention_weights) -> (logits, cache, cross_weights)`,
    `decode(tar, enc_output, padding_mask, return_attention_weights) ->
    (logits, cross_weights)` (logits float32 with `<PAD>` and `<SOS>` banned;
    `cross_weights` empty unless asked for), its special ids, `target_vocab_size`, `num_layers` and
    `num_heads`. `tensors` holds the `GenerateConfig` options that are tensor
    arguments of the compiled loop (`length_penalty`, `mmi_weight`,
    `temperature`, `top_p`, `seed`); the keyword arguments are the ones fixed
    in it.

    Returns:
        `(tokens, n, weights)`: int32 `(B, L)` (or `(B, R, L)` with
        `num_return_sequences` R > 1), the number of steps run, and a dict of
        cross-attention weights `(B, heads, L, S)` (empty unless asked for).
    """
    batch_size = ops.shape(inp)[0]
    enc_output, padding_mask = model.encode(inp)  # (B, S, d_model), (B, 1, 1, S)
    if method in BEAM_METHODS:  # row b * K + k is beam k of source b
        padding_mask = ops.repeat(padding_mask, beam_size, axis=0)  # (B*K, 1, 1, S)

    def cached_step(tokens, index, cache):
        return model.decode_step(tokens, index, cache, padding_mask,
                                 return_attention_weights=return_attention_weights)

    def recompute_step(tokens, index, prefix):
        prefix = write_column(prefix, index, tokens)  # (N, L)
        logits, cross = model.decode(prefix, enc_output, padding_mask,
                                     return_attention_weights=return_attention_weights)
        at_index = ops.expand_dims(index, 0)  # (1,)
        cross = [ops.take(w, at_index, axis=2) for w in cross]  # each (N, H, 1, S)
        return ops.take(logits, index, axis=1), prefix, cross  # (N, V)

    if use_cache:
        step, state = cached_step, model.init_cache(enc_output, max_length)
        if method in BEAM_METHODS:  # encoder keys and values are projected once per source
            state = _repeat_rows(state, beam_size)
    else:
        step = recompute_step
        state = ops.full((batch_size, max_length), model.pad_token_idx, "int32")
    specials = dict(
        start_token_idx=model.start_token_idx,
        end_token_idx=model.end_token_idx,
        pad_token_idx=model.pad_token_idx,
        steps_per_check=_backend.steps_per_check(inp, max_length),
    )

    if method in BEAM_METHODS:
        tokens, log_probs, lengths, n = beam_search(
            step, state, _gather_self_attention, batch_size, beam_size, max_length,
            model.target_vocab_size, length_penalty=tensors["length_penalty"], **specials,
        )  # (B, K, L), best first
        if method == "mmi":
            prior = answer_log_probs(
                model, ops.reshape(tokens, (-1, max_length)), ops.shape(inp)[1]
            )  # (B*K,)
            tokens = mmi_rerank(tokens, log_probs, lengths, ops.reshape(prior, (-1, beam_size)),
                                tensors["mmi_weight"], tensors["length_penalty"])
        if num_return_sequences == 1:
            return tokens[:, 0], n, {}  # (B, L)
        return tokens[:, :num_return_sequences], n, {}  # (B, R, L)

    buffers = None
    if return_attention_weights:
        shape = (batch_size, model.num_heads, max_length, ops.shape(inp)[1])
        buffers = [ops.zeros(shape, "float32") for _ in range(model.num_layers)]
    choose = (Sampler(tensors["temperature"], top_k, tensors["top_p"], tensors["seed"])
              if method == "sample" else None)
    tokens, n, buffers = greedy_search(
        step, state, batch_size, max_length, choose_fn=choose, weight_buffers=buffers,
        **specials,
    )
    weights = {}
    if buffers is not None:
        weights = {f"decoder_layer{i + 1}_block2": w for i, w in enumerate(buffers)}
    return tokens, n, weights
