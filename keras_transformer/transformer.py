"""The tutorial's `Transformer`: encoder, decoder and output projection as a
`keras.Model`, with compiled batched decoding (`generate`) and the tutorial's
one-sentence `inference`.
"""

import random

import keras
import tensorflow as tf

from keras_transformer import _config, generation
from keras_transformer.decoder import Decoder
from keras_transformer.encoder import Encoder
from keras_transformer.masking import create_masks, create_padding_mask

METHODS = ("greedy", "beam", "sample")


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
class Transformer(keras.Model):
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

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        input_vocab_size,
        target_vocab_size,
        maximum_position_encoding,
        rate=0.1,
        end_token_idx=2,
        model_name="transformer",
        norm_first=False,
        activation="relu",
        position_encoding="sinusoidal",
        share_embeddings=False,
        pad_token_idx=0,
        start_token_idx=1,
        **kwargs,
    ):
        kwargs = _config.layer_kwargs("Transformer", kwargs)
        kwargs.setdefault("name", model_name)
        super().__init__(**kwargs)
        self.model_name = model_name
        _config.check_model_args(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            input_vocab_size=input_vocab_size,
            target_vocab_size=target_vocab_size,
            maximum_position_encoding=maximum_position_encoding,
            rate=rate,
        )
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.input_vocab_size = input_vocab_size
        self.target_vocab_size = target_vocab_size
        self.maximum_position_encoding = maximum_position_encoding
        self.rate = rate
        self.end_token_idx = _config.check_token_idx(
            "end_token_idx", end_token_idx, target_vocab_size
        )
        self.start_token_idx = _config.check_token_idx(
            "start_token_idx", start_token_idx, target_vocab_size
        )
        self.pad_token_idx = _config.check_token_idx(
            "pad_token_idx", pad_token_idx, min(input_vocab_size, target_vocab_size)
        )
        self.norm_first = bool(norm_first)
        self.activation = activation
        self.position_encoding = position_encoding
        self.share_embeddings = bool(share_embeddings)

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
        common = dict(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            maximum_position_encoding=maximum_position_encoding,
            rate=rate,
            norm_first=norm_first,
            activation=activation,
            position_encoding=position_encoding,
            pad_token_idx=pad_token_idx,
            embedding=shared,
            dtype=self.dtype_policy,
        )
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
        """float32 logits `(N, V)` for hidden states `(N, 1, d_model)`.

        `<PAD>` and `<SOS>` are never generated: a `<PAD>` inside an output
        could not be told from the padding after `<END>`.
        """
        logits = tf.cast(self.final_layer(hidden)[:, 0], tf.float32)  # (N, V)
        banned = {self.pad_token_idx, self.start_token_idx} - {self.end_token_idx}
        blocked = tf.reduce_any(
            tf.one_hot(sorted(banned), self.target_vocab_size, on_value=True, off_value=False),
            axis=0,
        )  # (V,)
        return tf.where(blocked, -float("inf"), logits)

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
        jit_compile=False,
        use_cache=True,
    ):
        """Batched autoregressive decoding in one compiled loop.

        Args:
            inp: int tensor `(B, S)`. Source ids padded with `<PAD>`.
            max_length: int. Most tokens to generate, `<END>` included; at most
                `maximum_position_encoding` (the default).
            method: str. `"greedy"`, `"beam"` or `"sample"`. Defaults to
                `"greedy"`.
            beam_size: int. Hypotheses per row for `"beam"`. Defaults to `4`.
            length_penalty: float. GNMT alpha for `"beam"`. Defaults to `0.6`.
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
            jit_compile: bool. Compile the loop with XLA. Defaults to `False`.
            use_cache: bool. Decode with the key/value cache; `False`
                re-runs the decoder over the whole prefix at every step (slow;
                `"greedy"` and `"sample"` only). Defaults to `True`.

        Returns:
            int32 `(B, n)`: the tokens after `<SOS>`, `<END>` included when
            produced, then `<PAD>`; `n <= max_length` is the number of steps
            run (decoding stops once every row has produced `<END>`). With
            `return_attention_weights`, `(tokens, weights)`.

        Example:
        >>> model.generate(tf.constant([[5, 6, 7, 0]]), method="beam")  # doctest: +SKIP
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
        _config.check_choice("method", method, METHODS)
        beam_size = _config.check_positive_int("beam_size", beam_size)
        top_k = _config.check_non_negative_int("top_k", top_k)
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
        if not use_cache and method == "beam":
            raise ValueError(
                "Received an invalid value for argument `use_cache`: beam search "
                "always uses the cache. Received: use_cache=False, method='beam'"
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

        options = dict(
            method=method,
            max_length=max_length,
            beam_size=beam_size,
            top_k=top_k,
            return_attention_weights=return_attention_weights,
            use_cache=use_cache,
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
        )
        tokens = tokens[:, :n]  # (B, n)
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
        *,
        method,
        max_length,
        beam_size,
        top_k,
        return_attention_weights,
        use_cache,
    ):
        """The body of `generate`'s compiled function: encode once, then loop."""
        batch_size = tf.shape(inp)[0]
        enc_padding_mask = create_padding_mask(inp, self.pad_token_idx)  # (B, 1, 1, S)
        enc_output = self.encoder(inp, enc_padding_mask, training=False)  # (B, S, d_model)
        if method == "beam":  # row b * K + k is beam k of source b
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
            if method == "beam":  # encoder keys and values are projected once per source
                state = tf.nest.map_structure(lambda t: tf.repeat(t, beam_size, axis=0), state)
        else:
            prefix = tf.fill((batch_size, max_length), self.pad_token_idx)
            step, state = recompute_step, prefix
        specials = dict(
            start_token_idx=self.start_token_idx,
            end_token_idx=self.end_token_idx,
            pad_token_idx=self.pad_token_idx,
        )

        if method == "beam":

            def gather_cache(cache, rows):
                return [
                    {
                        "self": {name: tf.gather(t, rows) for name, t in layer["self"].items()},
                        "cross": layer["cross"],
                    }
                    for layer in cache
                ]

            tokens, n = generation.beam_search(
                step,
                state,
                gather_cache,
                batch_size,
                beam_size,
                max_length,
                self.target_vocab_size,
                length_penalty=length_penalty,
                **specials,
            )
            return tokens, n, {}

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

    def train_step(self, data):
        return self._multi_worker_logs(super().train_step(data))

    def test_step(self, data):
        return self._multi_worker_logs(super().test_step(data))

    def _multi_worker_logs(self, logs):
        # Under MultiWorkerMirroredStrategy Keras averages each logged value
        # over the replicas with `strategy.reduce("MEAN", value, axis=0)`,
        # which fails on scalars: give it vectors of one value.
        if isinstance(self._distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return {name: tf.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras builds a distributed model from a first batch averaged over
        # the replicas with one `strategy.reduce` of the whole nested batch,
        # which MultiWorkerMirroredStrategy refuses for nested inputs like
        # ((inp, dec_in), dec_out) ("Attempt to convert a value (PerReplica").
        # Only the shapes matter: hand it this worker's first replica's batch.
        strategy = self._distribute_strategy
        if iterator is not None and isinstance(strategy,
                                               tf.distribute.MultiWorkerMirroredStrategy):
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda value: strategy.experimental_local_results(value)[0],
                    next(batches),
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dff": self.dff,
                "input_vocab_size": self.input_vocab_size,
                "target_vocab_size": self.target_vocab_size,
                "maximum_position_encoding": self.maximum_position_encoding,
                "rate": self.rate,
                "end_token_idx": self.end_token_idx,
                "model_name": self.model_name,
                "norm_first": self.norm_first,
                "activation": self.activation,
                "position_encoding": self.position_encoding,
                "share_embeddings": self.share_embeddings,
                "pad_token_idx": self.pad_token_idx,
                "start_token_idx": self.start_token_idx,
            }
        )
        return config
