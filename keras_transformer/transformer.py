"""The tutorial's `Transformer`: encoder, decoder and output projection as a
`keras.Model`, with compiled batched decoding (`generate`) and the tutorial's
one-sentence `inference`.
"""

import random

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _config, generation
from keras_transformer._compat import MultiWorkerFit
from keras_transformer._stack import TransformerStack
from keras_transformer.decoder import Decoder
from keras_transformer.encoder import Encoder
from keras_transformer.masking import create_masks, create_padding_mask

METHODS = ("greedy", "beam", "sample", "mmi")
BEAM_METHODS = ("beam", "mmi")
# lambda of method="mmi", chosen on ChatbotData's validation split (see
# benchmarks/RESULTS.md).
MMI_WEIGHT = 0.1


def check_generate_options(method="greedy", beam_size=4, temperature=1.0, top_k=0, top_p=1.0,
                           mmi_weight=MMI_WEIGHT, num_return_sequences=1,
                           return_attention_weights=False, use_cache=True, jit_compile="auto",
                           **ignored):
    """Validates the decoding options of `Transformer.generate` (see there).

    Raises:
        ValueError: in the Keras message form, naming the argument and value.
    """
    _config.check_choice("method", method, METHODS)
    _config.check_positive_int("beam_size", beam_size)
    _config.check_non_negative_int("top_k", top_k)
    if not temperature > 0:
        raise ValueError(
            "Received an invalid value for argument `temperature`, expected a "
            f"float > 0. Received: temperature={temperature!r}"
        )
    if not 0 < top_p <= 1:
        raise ValueError(
            "Received an invalid value for argument `top_p`, expected a float "
            f"in (0, 1]. Received: top_p={top_p!r}"
        )
    if return_attention_weights and method != "greedy":
        raise ValueError(
            "Received an invalid value for argument `return_attention_weights`: "
            f"only method='greedy' returns weights. Received: method={method!r}"
        )
    _config.check_positive_int("num_return_sequences", num_return_sequences)
    if num_return_sequences > 1 and (
        method not in BEAM_METHODS or num_return_sequences > beam_size
    ):
        raise ValueError(
            "Received an invalid value for argument `num_return_sequences`, expected 1, "
            "or with method='beam' or 'mmi' at most beam_size. Received: "
            f"num_return_sequences={num_return_sequences}, method={method!r}, "
            f"beam_size={beam_size}"
        )
    if not mmi_weight >= 0:
        raise ValueError(
            "Received an invalid value for argument `mmi_weight`, expected a float "
            f">= 0. Received: mmi_weight={mmi_weight!r}"
        )
    if jit_compile not in (True, False, "auto") or (jit_compile is True and method == "sample"):
        raise ValueError(
            "Received an invalid value for argument `jit_compile`, expected True, False "
            "or 'auto' (XLA cannot compile the random draw of method='sample'). "
            f"Received: jit_compile={jit_compile!r}, method={method!r}"
        )
    if not use_cache and method in BEAM_METHODS:
        raise ValueError(
            "Received an invalid value for argument `use_cache`: beam search "
            f"always uses the cache. Received: use_cache=False, method={method!r}"
        )


def _map_cache_rows(cache, fn, cross=True):
    """Applies `fn` to the per-row tensors of a `Decoder.init_cache` cache:
    the self-attention keys and values, and the cross-attention ones when
    `cross`; the joined projections (`"kernel"`, `"bias"`) are shared by all
    rows and kept as they are."""
    return [
        {
            "self": {**layer["self"], "key": fn(layer["self"]["key"]),
                     "value": fn(layer["self"]["value"])},
            "cross": tf.nest.map_structure(fn, layer["cross"]) if cross else layer["cross"],
        }
        for layer in cache
    ]


class _TiedOutputProjection(keras.layers.Layer):
    """logits = x E^T with the shared embedding matrix E (Press & Wolf, 2017)."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        if not self.embedding.built:
            self.embedding.build(input_shape[:-1])

    def call(self, x):
        kernel = tf.cast(self.embedding.embeddings, x.dtype)  # (V, d_model)
        return tf.einsum("btd,vd->btv", x, kernel)  # (B, T, V)


class _FunctionCache:
    """Holds compiled functions by key; not a dict, so TensorFlow ignores it."""

    def __init__(self):
        self._functions = {}

    def get(self, key, build):
        if key not in self._functions:
            self._functions[key] = build()
        return self._functions[key]


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(MultiWorkerFit, keras.Model):
    """Encoder-decoder Transformer of "Attention Is All You Need".

    `Transformer(**kargs)` with the tutorial's config dict works unchanged.

    Args:
        num_layers: int. Encoder and decoder layers (each).
        d_model: int. Model width.
        num_heads: int. Attention heads; must divide `d_model`.
        dff: int. Inner width of the feed-forward networks.
        input_vocab_size: int. Source vocabulary size.
        target_vocab_size: int. Target vocabulary size.
        maximum_position_encoding: int. Longest source or target sequence, and
            the most tokens `generate` produces.
        rate: float in [0, 1). Dropout rate. Defaults to `0.1`.
        end_token_idx: int. Id of `<END>`. Defaults to `2`.
        model_name: str. The model's name (the tutorial's key). Defaults to
            `"transformer"`.
        norm_first: bool. Pre-LN layers with final LayerNorms. Defaults to
            `False` (post-LN, the tutorial).
        activation: str. `"relu"` or `"gelu"`. Defaults to `"relu"`.
        position_encoding: str. `"sinusoidal"` or `"learned"`. Defaults to
            `"sinusoidal"`.
        share_embeddings: bool. One embedding matrix for source, target and the
            output projection; needs equal vocabulary sizes. Defaults to
            `False`.
        pad_token_idx: int. Id of `<PAD>`. Defaults to `0`.
        start_token_idx: int. Id of `<SOS>`. Defaults to `1`.
        **kwargs: Keras model arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(inp, tar)`: source ids `(B, S)` and decoder input ids
            `(B, T)` (`<SOS>` first), both padded with `<PAD>`.
        training: bool. Dropout is active only when `True`.
        return_attention_weights: bool. Also return a dict with every encoder
            layer's self-attention `"encoder_layer{i}"` `(B, heads, S, S)` and
            every decoder layer's `"decoder_layer{i}_block1"` `(B, heads, T, T)`
            and `"decoder_layer{i}_block2"` `(B, heads, T, S)`, `i` from 1.

    Returns:
        float32 logits `(B, T, target_vocab_size)` under any dtype policy, or
        `(logits, attention_weights)`.

    Example:
    >>> kargs = {"model_name": "transformer", "num_layers": 2, "d_model": 512,
    ...          "num_heads": 8, "dff": 2048, "input_vocab_size": 8000,
    ...          "target_vocab_size": 8000, "maximum_position_encoding": 25,
    ...          "end_token_idx": 2, "rate": 0.1}
    >>> model = Transformer(**kargs)
    >>> model((tf.ones((2, 25), tf.int32), tf.ones((2, 25), tf.int32))).shape
    TensorShape([2, 25, 8000])
    """

    CONFIG = (*TransformerStack.CONFIG, "input_vocab_size", "target_vocab_size",
              "end_token_idx", "model_name", "share_embeddings", "start_token_idx")

    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size, target_vocab_size,
                 maximum_position_encoding, rate=0.1, end_token_idx=2, model_name="transformer",
                 norm_first=False, activation="relu", position_encoding="sinusoidal",
                 share_embeddings=False, pad_token_idx=0, start_token_idx=1, **kwargs):
        kwargs = _config.layer_kwargs("Transformer", kwargs)
        kwargs.setdefault("name", model_name)
        super().__init__(**kwargs)
        sizes = dict(num_layers=num_layers, d_model=d_model, num_heads=num_heads, dff=dff,
                     input_vocab_size=input_vocab_size, target_vocab_size=target_vocab_size,
                     maximum_position_encoding=maximum_position_encoding)
        _config.check_model_args(rate=rate, **sizes)
        _config.set_attributes(
            self, **sizes, rate=rate, model_name=model_name, norm_first=bool(norm_first),
            activation=activation, position_encoding=position_encoding,
            share_embeddings=bool(share_embeddings),
            end_token_idx=_config.check_token_idx("end_token_idx", end_token_idx,
                                                  target_vocab_size),
            start_token_idx=_config.check_token_idx("start_token_idx", start_token_idx,
                                                    target_vocab_size),
            pad_token_idx=_config.check_token_idx(
                "pad_token_idx", pad_token_idx, min(input_vocab_size, target_vocab_size)),
        )

        shared = None
        if self.share_embeddings:
            if input_vocab_size != target_vocab_size:
                raise ValueError(
                    "Received an invalid value for argument `share_embeddings`: "
                    "sharing needs input_vocab_size == target_vocab_size. "
                    f"Received: share_embeddings=True, input_vocab_size="
                    f"{input_vocab_size}, target_vocab_size={target_vocab_size}"
                )
            shared = keras.layers.Embedding(
                input_vocab_size, d_model, dtype=self.dtype_policy, name="shared_embedding"
            )
        # The arguments the encoder and the decoder share.
        common = {name: getattr(self, name) for name in TransformerStack.CONFIG}
        common.update(embedding=shared, dtype=self.dtype_policy)
        self.encoder = Encoder(input_vocab_size=input_vocab_size, name="encoder", **common)
        self.decoder = Decoder(target_vocab_size=target_vocab_size, name="decoder", **common)
        if self.share_embeddings:
            self.final_layer = _TiedOutputProjection(
                shared, dtype=self.dtype_policy, name="final_layer"
            )
        else:
            self.final_layer = keras.layers.Dense(
                target_vocab_size, dtype=self.dtype_policy, name="final_layer"
            )
        # One compiled decoding loop per (method, static options); kept out of
        # TF object tracking so that `tf.saved_model.save` ignores it.
        self._generate_fns = _FunctionCache()

    def build(self, input_shape):
        inp_shape, tar_shape = input_shape
        self.encoder.build(inp_shape)
        self.decoder.build(tar_shape)
        self.final_layer.build((*tar_shape, self.d_model))

    def call(self, inputs, training=None, return_attention_weights=False):
        inp, tar = inputs
        enc_padding_mask, combined_mask, dec_padding_mask = create_masks(
            inp, tar, self.pad_token_idx
        )
        enc_output, enc_weights = self.encoder(
            inp, enc_padding_mask, training=training, return_attention_weights=True
        )  # (B, S, d_model)
        dec_output, dec_weights = self.decoder(
            tar, enc_output, combined_mask, dec_padding_mask, training=training
        )  # (B, T, d_model)
        logits = tf.cast(self.final_layer(dec_output), tf.float32)  # (B, T, V)
        if return_attention_weights:
            return logits, {**enc_weights, **dec_weights}
        return logits

    def _next_token_logits(self, hidden):
        """float32 logits `(N, V)` for hidden states `(N, 1, d_model)`."""
        return self._ban_specials(self.final_layer(hidden)[:, 0])  # (N, V)

    def _ban_specials(self, logits):
        """float32 logits `(..., V)` with `<PAD>` and `<SOS>` at -inf: they are
        never generated (a `<PAD>` inside an output could not be told from the
        padding after `<END>`)."""
        banned = sorted({self.pad_token_idx, self.start_token_idx} - {self.end_token_idx})
        penalty = np.zeros(self.target_vocab_size, np.float32)
        penalty[banned] = -np.inf  # a constant: nothing is recomputed per step
        return tf.cast(logits, tf.float32) + penalty

    def _unconditional_log_probs(self, tokens, src_len):
        """log p(T | empty source) of generated rows `tokens` `(N, L)`.

        The source is all `<PAD>`: every cross-attention row is masked, so the
        decoder sees no input and scores how likely `T` is as an answer to
        anything (the "anti-language model" of maximum-mutual-information
        decoding, Li et al., 2016).

        Returns:
            float32 `(N,)`: the sum of the log-probabilities of the tokens of
            each row, `<END>` included, `<PAD>` excluded.
        """
        rows = tf.shape(tokens)[0]
        empty = tf.fill((1, src_len), self.pad_token_idx)  # (1, S)
        mask = create_padding_mask(empty, self.pad_token_idx)  # (1, 1, 1, S)
        enc_output = tf.repeat(self.encoder(empty, mask, training=False), rows, axis=0)
        mask = tf.repeat(mask, rows, axis=0)  # (N, 1, 1, S)
        # Teacher forcing: <SOS> + T as the decoder input (<END> read as <PAD>).
        dec_in = tf.concat(
            [tf.fill((rows, 1), self.start_token_idx), tokens[:, :-1]], axis=1
        )  # (N, L)
        dec_in = tf.where(dec_in == self.end_token_idx, self.pad_token_idx, dec_in)
        dec_output, _ = self.decoder(dec_in, enc_output, None, mask, training=False)
        log_probs = tf.nn.log_softmax(self._ban_specials(self.final_layer(dec_output)))
        token_log_probs = tf.gather(log_probs, tokens, batch_dims=2)  # (N, L)
        real = tokens != self.pad_token_idx
        return tf.reduce_sum(tf.where(real, token_log_probs, 0.0), axis=1)

    def generate(
        self,
        inp,
        max_length=None,
        method="greedy",
        beam_size=4,
        length_penalty=0.6,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        seed=None,
        return_attention_weights=False,
        jit_compile="auto",
        use_cache=True,
        num_return_sequences=1,
        mmi_weight=MMI_WEIGHT,
    ):
        """Batched autoregressive decoding in one compiled loop.

        Args:
            inp: int tensor `(B, S)`. Source ids padded with `<PAD>`.
            max_length: int. Most tokens to generate, `<END>` included; at most
                `maximum_position_encoding` (the default).
            method: str. `"greedy"`, `"beam"`, `"sample"` or `"mmi"`: beam
                search whose `beam_size` hypotheses are reranked by
                `log p(T|S) - mmi_weight * log p(T)`, `p(T)` being the model's
                probability of the answer for an empty source (maximum mutual
                information, Li et al., 2016: it demotes answers that fit any
                input, like "I don't know"). Defaults to `"greedy"`.
            beam_size: int. Hypotheses per row for `"beam"` and `"mmi"`.
                Defaults to `4`.
            length_penalty: float. GNMT alpha for `"beam"` and `"mmi"`.
                Defaults to `0.6`.
            temperature: float > 0. For `"sample"`. Defaults to `1.0`.
            top_k: int. For `"sample"`: keep the k most likely tokens; `0`
                keeps all. Defaults to `0`.
            top_p: float in (0, 1]. For `"sample"`: nucleus mass. Defaults to
                `1.0`.
            seed: int. Makes `"sample"` reproducible. Defaults to `None`
                (drawn from Python's `random`, which
                `keras.utils.set_random_seed` seeds).
            return_attention_weights: bool. `"greedy"` only: also return a dict
                `{"decoder_layer{i}_block2": (B, heads, n, S)}` of the
                cross-attention of every generated step.
            jit_compile: bool or `"auto"`. `True` compiles the loop with XLA:
                one compilation per input shape (2-3 s on 2 CPU cores for
                the tutorial's model), then faster per token than TensorFlow's
                graph (`benchmarks/bench_decode_peers.py`). `False` runs the
                loop as a TensorFlow graph. `"auto"` is `True` except for
                `"sample"`, whose random draw XLA does not compile. Defaults
                to `"auto"`.
            use_cache: bool. Decode with the key/value cache; `False`
                re-runs the decoder over the whole prefix at every step (slow;
                `"greedy"` and `"sample"` only). Defaults to `True`.
            num_return_sequences: int. For `"beam"` and `"mmi"`: return this
                many hypotheses per row (at most `beam_size`), best first, as
                `(B, num_return_sequences, n)`. Defaults to `1`.
            mmi_weight: float >= 0. lambda of `"mmi"`; `0` ranks by
                `log p(T|S)` alone. Defaults to `MMI_WEIGHT`.

        Returns:
            int32 `(B, n)`: the tokens after `<SOS>`, `<END>` included when
            produced, then `<PAD>`; `n <= max_length` is the number of steps
            run (decoding stops once every row has produced `<END>`). With
            `num_return_sequences > 1`, `(B, num_return_sequences, n)`. With
            `return_attention_weights`, `(tokens, weights)`.

        Example:
        >>> model = Transformer(num_layers=1, d_model=16, num_heads=2, dff=32,
        ...                     input_vocab_size=20, target_vocab_size=20,
        ...                     maximum_position_encoding=8)
        >>> tokens = model.generate(tf.constant([[5, 6, 7, 0]]), method="beam")
        >>> tokens.dtype.name, tokens.shape[0], tokens.shape[1] <= 8
        ('int32', 1, True)
        """
        if max_length is None:
            max_length = self.maximum_position_encoding
        max_length = _config.check_positive_int("max_length", max_length)
        if max_length > self.maximum_position_encoding:
            raise ValueError(
                "Received an invalid value for argument `max_length`, expected at "
                f"most maximum_position_encoding={self.maximum_position_encoding}. "
                f"Received: max_length={max_length}"
            )
        check_generate_options(
            method=method, beam_size=beam_size, temperature=temperature, top_k=top_k, top_p=top_p,
            mmi_weight=mmi_weight, num_return_sequences=num_return_sequences,
            return_attention_weights=return_attention_weights, use_cache=use_cache,
            jit_compile=jit_compile,
        )
        inp = tf.convert_to_tensor(inp)
        if inp.shape.rank != 2 or not inp.dtype.is_integer:
            raise ValueError(
                "Received an invalid value for argument `inp`, expected int token "
                f"ids of shape (batch, src_len). Received: inp.shape={inp.shape}, "
                f"dtype={inp.dtype.name}"
            )
        inp = tf.cast(inp, tf.int32)
        if tf.executing_eagerly():
            self.encoder._check_ids(inp)
        if not self.built:  # create every weight before tracing the loop
            self.build((inp.shape, (inp.shape[0], max_length)))
        if seed is None:
            seed = random.randrange(2**31)
        if jit_compile == "auto":
            jit_compile = method != "sample"

        # The options fixed in the compiled loop; the others are its tensor arguments.
        options = dict(
            method=method, max_length=max_length, beam_size=beam_size, top_k=top_k,
            return_attention_weights=return_attention_weights, use_cache=use_cache,
            num_return_sequences=num_return_sequences,
        )
        decode = self._generate_fns.get(
            (jit_compile, *options.items()),
            lambda: tf.function(
                lambda *args: self._decode(*args, **options), jit_compile=jit_compile
            ),
        )
        tokens, n, weights = decode(
            inp,
            tf.constant(temperature, tf.float32),
            tf.constant(top_p, tf.float32),
            tf.constant(length_penalty, tf.float32),
            tf.constant(seed, tf.int64),
            tf.constant(mmi_weight, tf.float32),
        )
        tokens = tokens[..., :n]  # (B, n) or (B, R, n)
        if return_attention_weights:
            return tokens, {name: w[:, :, :n, :] for name, w in weights.items()}
        return tokens

    def _decode(
        self,
        inp,
        temperature,
        top_p,
        length_penalty,
        seed,
        mmi_weight,
        *,
        method,
        max_length,
        beam_size,
        top_k,
        return_attention_weights,
        use_cache,
        num_return_sequences,
    ):
        """The body of `generate`'s compiled function: encode once, then loop."""
        batch_size = tf.shape(inp)[0]
        enc_padding_mask = create_padding_mask(inp, self.pad_token_idx)  # (B, 1, 1, S)
        enc_output = self.encoder(inp, enc_padding_mask, training=False)  # (B, S, d_model)
        if method in BEAM_METHODS:  # row b * K + k is beam k of source b
            enc_padding_mask = tf.repeat(enc_padding_mask, beam_size, axis=0)  # (B*K, 1, 1, S)

        def cached_step(tokens, index, cache):
            dec_output, weights, cache = self.decoder(
                tokens[:, tf.newaxis],
                None,
                None,
                enc_padding_mask,
                training=False,
                cache=cache,
                cache_index=index,
            )  # (N, 1, d_model)
            cross = [weights[f"decoder_layer{i + 1}_block2"] for i in range(self.num_layers)]
            return self._next_token_logits(dec_output), cache, cross

        def recompute_step(tokens, index, prefix):
            prefix = generation._write_column(prefix, index, tokens)  # (N, L)
            dec_output, weights = self.decoder(
                prefix, enc_output, None, enc_padding_mask, training=False
            )  # (N, L, d_model)
            hidden = tf.gather(dec_output, [index], axis=1)  # (N, 1, d_model)
            cross = [
                tf.gather(weights[f"decoder_layer{i + 1}_block2"], [index], axis=2)
                for i in range(self.num_layers)
            ]  # each (N, H, 1, S)
            return self._next_token_logits(hidden), prefix, cross

        if use_cache:
            step, state = cached_step, self.decoder.init_cache(enc_output, max_length)
            if method in BEAM_METHODS:  # encoder keys and values are projected once per source
                state = _map_cache_rows(state, lambda t: tf.repeat(t, beam_size, axis=0))
        else:
            prefix = tf.fill((batch_size, max_length), self.pad_token_idx)
            step, state = recompute_step, prefix
        specials = dict(
            start_token_idx=self.start_token_idx,
            end_token_idx=self.end_token_idx,
            pad_token_idx=self.pad_token_idx,
        )

        if method in BEAM_METHODS:

            def gather_cache(cache, rows):
                return _map_cache_rows(cache, lambda t: tf.gather(t, rows), cross=False)

            tokens, log_probs, n = generation.beam_search(
                step,
                state,
                gather_cache,
                batch_size,
                beam_size,
                max_length,
                self.target_vocab_size,
                length_penalty=length_penalty,
                **specials,
            )  # (B, K, L), best first
            if method == "mmi":
                prior = self._unconditional_log_probs(
                    tf.reshape(tokens, (batch_size * beam_size, max_length)), tf.shape(inp)[1]
                )  # (B*K,)
                scores = log_probs - mmi_weight * tf.reshape(prior, (batch_size, beam_size))
                tokens = tf.gather(tokens, tf.argsort(scores, direction="DESCENDING"),
                                   batch_dims=1)  # (B, K, L), best first
            if num_return_sequences == 1:
                return tokens[:, 0], n, {}  # (B, L)
            return tokens[:, :num_return_sequences], n, {}  # (B, R, L)

        buffers = None
        if return_attention_weights:
            shape = (batch_size, self.num_heads, max_length, tf.shape(inp)[1])
            buffers = [tf.zeros(shape, tf.float32) for _ in range(self.num_layers)]
        choose = None
        if method == "sample":
            choose = generation.sampler(temperature, top_k, top_p, seed)
        tokens, n, buffers = generation.greedy_search(
            step,
            state,
            batch_size,
            max_length,
            choose_fn=choose,
            weight_buffers=buffers,
            **specials,
        )
        weights = {}
        if buffers is not None:
            weights = {f"decoder_layer{i + 1}_block2": w for i, w in enumerate(buffers)}
        return tokens, n, weights

    def serving_copy(self, dtype="bfloat16"):
        """A copy of this model with its weights stored and computed in `dtype`.

        For decoding, not training: a decoding step mostly reads weights, so
        `"bfloat16"` weights read half the bytes. Measured on 2 CPU cores with
        the tutorial's config (`benchmarks/bench_decode_peers.py`): faster at
        batch 1 with the default XLA loop, and at batch 64 with
        `jit_compile=False`; a small model whose weights fit in the CPU cache
        gains nothing. On the demo's test split its tokens equal the float32
        model's (`benchmarks/bench_export.py`). The logits
        stay float32 and the softmax runs in float32. Pass the copy to
        `export_saved_model` to serve it.

        Args:
            dtype: str. A Keras dtype policy name: `"bfloat16"` (the default)
                or `"float16"`.

        Returns:
            A new, built `Transformer` with the same configuration and weights.
        """
        _config.check_choice("dtype", dtype, ("bfloat16", "float16"))
        copy = Transformer.from_config({**self.get_config(), "dtype": dtype})
        length = self.maximum_position_encoding
        copy.build(((None, length), (None, length)))
        copy.set_weights(self.get_weights())
        return copy

    def inference(self, x):
        """The tutorial's method: greedy answer ids for one source sequence.

        Args:
            x: int ids `(1, S)` or `(S,)`.

        Returns:
            Python list of token ids, without `<SOS>`, `<END>` or `<PAD>`.
        """
        x = tf.convert_to_tensor(x)
        if x.shape.rank == 1:
            x = x[tf.newaxis]
        if x.shape.rank != 2 or x.shape[0] != 1:
            raise ValueError(
                "Received an invalid value for argument `x`, expected one sequence "
                f"of shape (1, S) or (S,). Received: x.shape={x.shape}"
            )
        predict_tokens = []
        for token in self.generate(x)[0].numpy().tolist():
            if token == self.end_token_idx:
                break
            predict_tokens.append(token)
        return predict_tokens

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self.CONFIG})
        return config
