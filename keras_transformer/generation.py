"""Autoregressive decoding: the loops, the strategies, and how a model drives them.

Every loop is one `keras.ops.while_loop` over static shapes (a
`(batch, max_length)` token buffer written at the step index), so it traces
once and compiles: XLA on TensorFlow, `jax.jit` on JAX; on PyTorch it runs
eagerly. It stops as soon as every row has produced `<END>`.

The loops know nothing about the model: they call

    step_fn(tokens, index, state) -> (logits, state, cross_weights)

where `tokens` `(N,)` are the ids at decoder position `index`, `logits`
`(N, V)` are float32 scores for position `index + 1`, `state` is whatever the
model carries between steps (its key/value cache), and `cross_weights` is a
list of `(N, heads, 1, S)` tensors (one per decoder layer) when the weights are asked
for, or an empty list.

The strategies, one small piece each: `greedy_search` (with a `choose_fn`),
`Sampler` (temperature, top-k, top-p), `beam_search` (GNMT length penalty),
`mmi_rerank` (maximum mutual information). `decode` is what
`Transformer.generate` compiles: it encodes once and builds the step function
from the model's `encode`, `init_cache`, `decode_step` and `decode`.

Runs on every Keras backend (`keras.ops` only, and `_backend` for the random
draw of sampling).
"""

import dataclasses
import numbers

import keras
import numpy as np
from keras import ops

from keras_transformer import _backend, _config

METHODS = ("greedy", "beam", "sample", "mmi")
BEAM_METHODS = ("beam", "mmi")


def _option(default, help, *, flag=True, export=False, tensor=False):
    """A decoding option: its default and help text; whether the command line
    has a flag for it (`flag`), whether an exported SavedModel fixes it
    (`export`), and whether the compiled loop takes it as a tensor argument
    (`tensor`: changing it does not compile the loop again) rather than
    fixing it when the loop is traced."""
    return dataclasses.field(
        default=default, metadata={"help": help, "flag": flag, "export": export, "tensor": tensor}
    )


@dataclasses.dataclass(frozen=True)
class GenerateConfig:
    """Every decoding option, its default and its check: the one place they live.

    `Transformer.generate` takes these as keyword arguments, and so do
    `Translator.translate` and the export; the command line's decoding flags
    are generated from them. Adding an option is one field here (and its use
    in `decode`).

    Attributes:
        method: `"greedy"`, `"beam"`, `"sample"` or `"mmi"`: beam search whose
            `beam_size` hypotheses are reranked by `log p(T|S) - mmi_weight *
            log p(T)`, `p(T)` being the model's probability of the answer for an
            empty source (maximum mutual information, Li et al., 2016: it
            demotes answers that fit any input, like "I don't know").
        max_length: int. Most tokens to generate, `<END>` included; at most the
            model's `maximum_position_encoding` (`None`: that).
        beam_size: int. Hypotheses per row for `"beam"` and `"mmi"`.
        length_penalty: float. GNMT alpha for `"beam"` and `"mmi"`.
        mmi_weight: float >= 0. lambda of `"mmi"`; `0` ranks by `log p(T|S)`
            alone. Chosen on ChatbotData's validation split (RESULTS.md).
        temperature: float > 0. For `"sample"`.
        top_k: int. For `"sample"`: keep the k most likely tokens; `0` keeps all.
        top_p: float in (0, 1]. For `"sample"`: nucleus mass.
        seed: int. Makes `"sample"` reproducible (`None`: drawn from Python's
            `random`, which `keras.utils.set_random_seed` seeds).
        num_return_sequences: int. For `"beam"` and `"mmi"`: this many
            hypotheses per row (at most `beam_size`), best first.
        return_attention_weights: bool. `"greedy"` only: also return the
            cross-attention of every generated step.
        jit_compile: bool or `"auto"`, see `resolve_jit_compile`. On
            TensorFlow, `True` compiles the loop with XLA (one compilation per
            input shape, 2-3 s on 2 CPU cores for the tutorial's model, then
            faster per token than TensorFlow's graph), `False` runs it as a
            graph; on JAX `jax.jit` compiles it; on PyTorch `True` is
            `torch.compile` (minutes per input shape, then faster per token).
        use_cache: bool. Decode with the key/value cache; `False` re-runs the
            decoder over the whole prefix at every step (slow; `"greedy"` and
            `"sample"` only).

    Raises:
        ValueError: in the Keras message form, naming the argument and value.
    """

    method: str = _option("greedy", "greedy, beam search, sampling, or beam search "
                          "reranked by mutual information (mmi: demotes answers that fit "
                          "any input)", export=True)
    max_length: int = _option(None, "most tokens to generate", flag=False, export=True)
    beam_size: int = _option(4, "for beam and mmi", export=True)
    length_penalty: float = _option(0.6, "GNMT alpha, for beam and mmi", export=True,
                                    tensor=True)
    mmi_weight: float = _option(0.1, "lambda in log p(T|S) - lambda log p(T), for mmi",
                                export=True, tensor=True)
    temperature: float = _option(1.0, "for sample", tensor=True)
    top_k: int = _option(0, "for sample: keep the k most likely tokens (0: all)")
    top_p: float = _option(1.0, "for sample: the nucleus mass", tensor=True)
    seed: int = _option(None, "sampling seed", tensor=True)
    num_return_sequences: int = _option(1, "hypotheses per row", flag=False)
    return_attention_weights: bool = _option(False, "also the cross-attention", flag=False)
    jit_compile: object = _option("auto", "compile the loop", flag=False)
    use_cache: bool = _option(True, "decode with the key/value cache", flag=False)

    def __post_init__(self):
        for name in ("length_penalty", "mmi_weight", "temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"Received an invalid value for argument `{name}`, expected "
                                 f"a number. Received: {name}={value!r}")
        _config.check_choice("method", self.method, METHODS)
        if self.max_length is not None:
            _config.check_positive_int("max_length", self.max_length)
        _config.check_positive_int("beam_size", self.beam_size)
        _config.check_non_negative_int("top_k", self.top_k)
        if not self.temperature > 0:
            raise ValueError(
                "Received an invalid value for argument `temperature`, expected a "
                f"float > 0. Received: temperature={self.temperature!r}"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(
                "Received an invalid value for argument `top_p`, expected a float "
                f"in (0, 1]. Received: top_p={self.top_p!r}"
            )
        if self.return_attention_weights and self.method != "greedy":
            raise ValueError(
                "Received an invalid value for argument `return_attention_weights`: "
                f"only method='greedy' returns weights. Received: method={self.method!r}"
            )
        _config.check_positive_int("num_return_sequences", self.num_return_sequences)
        if self.num_return_sequences > 1 and (
            self.method not in BEAM_METHODS or self.num_return_sequences > self.beam_size
        ):
            raise ValueError(
                "Received an invalid value for argument `num_return_sequences`, expected 1, "
                "or with method='beam' or 'mmi' at most beam_size. Received: "
                f"num_return_sequences={self.num_return_sequences}, method={self.method!r}, "
                f"beam_size={self.beam_size}"
            )
        if not self.mmi_weight >= 0:
            raise ValueError(
                "Received an invalid value for argument `mmi_weight`, expected a float "
                f">= 0. Received: mmi_weight={self.mmi_weight!r}"
            )
        # TensorFlow's XLA bridge does not compile the random draw of sampling.
        xla_sampling = (self.jit_compile is True and self.method == "sample"
                        and _backend.BACKEND == "tensorflow")
        if self.jit_compile not in (True, False, "auto") or xla_sampling:
            raise ValueError(
                "Received an invalid value for argument `jit_compile`, expected True, False "
                "or 'auto' (on TensorFlow, XLA cannot compile the random draw of "
                f"method='sample'). Received: jit_compile={self.jit_compile!r}, "
                f"method={self.method!r}"
            )
        if not self.use_cache and self.method in BEAM_METHODS:
            raise ValueError(
                "Received an invalid value for argument `use_cache`: beam search "
                f"always uses the cache. Received: use_cache=False, method={self.method!r}"
            )

    @classmethod
    def fields(cls, **metadata):
        """The fields whose metadata has these values, e.g. `fields(export=True)`."""
        return [field for field in dataclasses.fields(cls)
                if all(field.metadata[key] == value for key, value in metadata.items())]

    def options(self, **metadata):
        """`{name: value}` of the fields `fields(**metadata)` selects."""
        return {field.name: getattr(self, field.name) for field in self.fields(**metadata)}


def resolve_jit_compile(jit_compile, method):
    """`"auto"` -> whether the decoding loop is compiled: always on JAX; on
    TensorFlow except for sampling (whose draw XLA does not compile); never
    on PyTorch, where `torch.compile` takes minutes (benchmarks/RESULTS.md)."""
    if jit_compile != "auto":
        return jit_compile
    if _backend.BACKEND == "torch":
        return False
    return _backend.BACKEND != "tensorflow" or method != "sample"


def _write_column(buffer, index, column):
    """Writes `column` `(B, ...)` into `buffer` `(B, L, ...)` at step `index`."""
    start = [0, index] + [0] * (len(buffer.shape) - 2)
    return ops.slice_update(buffer, start, ops.expand_dims(column, 1))


def _int32(value):
    return ops.convert_to_tensor(value, "int32")


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
        choose_fn: `(logits (B, V), index) -> ids (B,)`, e.g. a `Sampler`.
            Defaults to the arg-max.
        weight_buffers: list of zero tensors `(B, heads, L, S)` to collect the
            cross-attention weights of every step into, or `None`.

    Returns:
        `(tokens (B, L) int32, n, weight_buffers)`: only the first `n` columns
        were generated; after `<END>` a row holds `<PAD>`.
    """
    if choose_fn is None:

        def choose_fn(logits, index):
            return _backend.argmax(logits)

    collect = weight_buffers is not None
    tokens = ops.full((batch_size, max_length), pad_token_idx, "int32")
    finished = ops.zeros((batch_size,), "bool")
    current = ops.full((batch_size,), start_token_idx, "int32")
    padding = ops.full((batch_size,), pad_token_idx, "int32")
    weights = weight_buffers if collect else []

    def cond(index, current, tokens, finished, state, weights):
        return ops.logical_and(index < max_length, ops.logical_not(ops.all(finished)))

    def body(index, current, tokens, finished, state, weights):
        logits, state, cross = step_fn(current, index, state)  # (B, V)
        next_token = ops.where(finished, padding, choose_fn(logits, index))  # (B,)
        tokens = _write_column(tokens, index, next_token)  # (B, L)
        finished = ops.logical_or(finished, ops.equal(next_token, end_token_idx))
        if collect:
            weights = [
                ops.slice_update(buffer, [0, 0, index, 0], ops.cast(w, buffer.dtype))
                for buffer, w in zip(weights, cross)
            ]  # each (B, H, L, S)
        return index + 1, next_token, tokens, finished, state, weights

    n, _, tokens, _, _, weights = ops.while_loop(
        cond, body, (_int32(0), current, tokens, finished, state, weights)
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
        seqs = _write_column(ops.take(seqs, rows, axis=0), index, token)  # (B*K, L)
        state = gather_state_fn(state, rows)
        return index + 1, token, seqs, log_probs, finished, lengths, state

    n, _, seqs, log_probs, _, _, _ = ops.while_loop(
        cond,
        body,
        (_int32(0), current, seqs, log_probs, finished, lengths, state),
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


def special_token_penalty(vocab_size, pad_token_idx, start_token_idx, end_token_idx):
    """float32 `(V,)`: -inf at `<PAD>` and `<SOS>`, 0 elsewhere, added to the logits.

    They are never generated (a `<PAD>` inside an output could not be told
    from the padding after `<END>`). A constant: nothing is recomputed per step.
    """
    penalty = np.zeros((vocab_size,), np.float32)
    penalty[sorted({pad_token_idx, start_token_idx} - {end_token_idx})] = -np.inf
    return penalty


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
        prefix = _write_column(prefix, index, tokens)  # (N, L)
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
    )

    if method in BEAM_METHODS:
        tokens, log_probs, n = beam_search(
            step, state, _gather_self_attention, batch_size, beam_size, max_length,
            model.target_vocab_size, length_penalty=tensors["length_penalty"], **specials,
        )  # (B, K, L), best first
        if method == "mmi":
            prior = answer_log_probs(
                model, ops.reshape(tokens, (-1, max_length)), ops.shape(inp)[1]
            )  # (B*K,)
            tokens = mmi_rerank(tokens, log_probs, ops.reshape(prior, (-1, beam_size)),
                                tensors["mmi_weight"])
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
