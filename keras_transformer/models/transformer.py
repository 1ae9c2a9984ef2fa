"""The tutorial's `Transformer`: encoder, decoder and output projection as a
`keras.Model`, with compiled batched decoding (`generate`) and the tutorial's
one-sentence `inference`.

Runs on every Keras backend. The decoding loops and strategies live in
`generation`; the model gives them its `encode`, `init_cache`, `decode_step`
and `decode`.
"""

import functools
import random

import keras
import numpy as np
from keras import ops

from keras_transformer import _backend, _config, generation
from keras_transformer.layers._stack import Dense, TransformerStack
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.masking import create_masks, create_padding_mask


class _TiedOutputProjection(keras.layers.Layer):
    """logits = x E^T with the shared embedding matrix E (Press & Wolf, 2017)."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        if not self.embedding.built:
            self.embedding.build(input_shape[:-1])

    def call(self, x):
        kernel = ops.cast(self.embedding.embeddings, x.dtype)  # (V, d_model)
        return ops.einsum("btd,vd->btv", x, kernel)  # (B, T, V)


class _FunctionCache:
    """Holds compiled functions by key; not a dict, so TensorFlow ignores it."""

    def __init__(self):
        self._functions = {}

    def get(self, key, build):
        if key not in self._functions:
            self._functions[key] = build()
        return self._functions[key]


@_config.kargs_owner
@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(_backend.TrainerMixin, keras.Model):
    """Encoder-decoder Transformer of "Attention Is All You Need".

    `Transformer(**kargs)` with the tutorial's config dict works unchanged.
    Runs on every Keras backend (TensorFlow, JAX, PyTorch): the same weights
    give the same logits and the same `generate` tokens on each.

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
    >>> ids = np.ones((2, 25), "int32")
    >>> tuple(model((ids, ids)).shape)
    (2, 25, 8000)
    """

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
        # The arguments the encoder and the decoder share (BERT's embedding
        # options stay at their defaults).
        common = {name: getattr(self, name) for name in _config.init_options(
            TransformerStack,
            exclude=(*TransformerStack.NOT_CONFIG, "type_vocab_size", "embedding_layernorm"))}
        common.update(embedding=shared, dtype=self.dtype_policy)
        self.encoder = Encoder(input_vocab_size=input_vocab_size, name="encoder", **common)
        self.decoder = Decoder(target_vocab_size=target_vocab_size, name="decoder", **common)
        if self.share_embeddings:
            self.final_layer = _TiedOutputProjection(
                shared, dtype=self.dtype_policy, name="final_layer"
            )
        else:
            self.final_layer = Dense(
                target_vocab_size, dtype=self.dtype_policy, name="final_layer"
            )
        # One compiled decoding loop per (method, static options); kept out of
        # object tracking (so that `tf.saved_model.save` ignores it).
        self._generate_fns = _FunctionCache()

    def build(self, input_shape):
        inp_shape, tar_shape = input_shape
        # A part called on its own first (the tutorial's `inference` calls the
        # encoder and decoder directly) has built itself: Keras refuses to
        # build it again ("cannot add new elements of state").
        for layer, shape in ((self.encoder, inp_shape), (self.decoder, tar_shape),
                             (self.final_layer, (*tar_shape, self.d_model))):
            if not layer.built:
                layer.build(shape)

    def call(self, inputs, training=None, return_attention_weights=False):
        inp, tar = inputs
        enc_padding_mask, combined_mask, dec_padding_mask = create_masks(
            inp, tar, self.pad_token_idx
        )
        enc_output = self.encoder(
            inp, enc_padding_mask, training=training,
            return_attention_weights=return_attention_weights,
        )  # (B, S, d_model)
        if return_attention_weights:
            enc_output, enc_weights = enc_output
        dec_output, dec_weights = self.decoder(
            tar, enc_output, combined_mask, dec_padding_mask, training=training,
            return_attention_weights=return_attention_weights,
        )  # (B, T, d_model)
        logits = ops.cast(self.final_layer(dec_output), "float32")  # (B, T, V)
        if return_attention_weights:
            return logits, {**enc_weights, **dec_weights}
        return logits

    # The decoding interface that `generation` drives (Flax WMT's encode /
    # decode split): the encoder once per source, then the decoder.

    def encode(self, inp):
        """Source ids `(B, S)` -> `(enc_output (B, S, d_model), padding_mask (B, 1, 1, S))`."""
        padding_mask = create_padding_mask(inp, self.pad_token_idx)  # (B, 1, 1, S)
        return self.encoder(inp, padding_mask, training=False), padding_mask

    def init_cache(self, enc_output, max_length):
        """The decoder's key/value cache for `max_length` steps (`Decoder.init_cache`)."""
        return self.decoder.init_cache(enc_output, max_length)

    def decode_step(self, token, index, cache, padding_mask, return_attention_weights=False):
        """One cached decoding step for the ids `token` `(N,)` at position `index`.

        Returns:
            `(logits (N, V) float32, cache, cross_weights)`: `<PAD>` and `<SOS>`
            are banned from the logits (`generation.special_token_penalty`);
            `cross_weights` is every layer's `(N, heads, 1, S)` with
            `return_attention_weights`, else an empty list.
        """
        dec_output, weights, cache = self.decoder(
            token[:, None], None, None, padding_mask, training=False, cache=cache,
            cache_index=index, return_attention_weights=return_attention_weights,
        )  # (N, 1, d_model)
        logits = self._ban_specials(self.final_layer(dec_output)[:, 0])  # (N, V)
        return logits, cache, self._cross_weights(weights)

    def decode(self, tar, enc_output, padding_mask, return_attention_weights=False):
        """The decoder over whole sequences `tar` `(N, T)`, without a cache.

        Returns:
            `(logits (N, T, V) float32, cross_weights)`, `<PAD>` and `<SOS>`
            banned; `cross_weights` is every layer's `(N, heads, T, S)` with
            `return_attention_weights`, else an empty list.
        """
        dec_output, weights = self.decoder(tar, enc_output, None, padding_mask, training=False,
                                           return_attention_weights=return_attention_weights)
        return self._ban_specials(self.final_layer(dec_output)), self._cross_weights(weights)

    def _ban_specials(self, logits):
        penalty = generation.special_token_penalty(
            self.target_vocab_size, self.pad_token_idx, self.start_token_idx, self.end_token_idx
        )
        return ops.add(ops.cast(logits, "float32"), penalty)

    def _cross_weights(self, weights):
        if not weights:
            return []
        return [weights[f"decoder_layer{i + 1}_block2"] for i in range(self.num_layers)]

    def generate(self, inp, max_length=None, **options):
        """Batched autoregressive decoding in one compiled loop.

        Args:
            inp: int tensor `(B, S)`. Source ids padded with `<PAD>`.
            max_length: int. Most tokens to generate, `<END>` included; at most
                `maximum_position_encoding` (the default).
            **options: the decoding options, each described with its default
                in `generation.GenerateConfig`: `method` (`"greedy"`,
                `"beam"`, `"sample"` or `"mmi"`), `beam_size`,
                `length_penalty`, `mmi_weight`, `temperature`, `top_k`,
                `top_p`, `seed`, `num_return_sequences`,
                `return_attention_weights`, `jit_compile`, `use_cache`.

        Returns:
            int32 `(B, n)`: the tokens after `<SOS>`, `<END>` included when
            produced, then `<PAD>`; `n <= max_length` is the number of steps
            run (decoding stops once every row has produced `<END>`). With
            `num_return_sequences > 1`, `(B, num_return_sequences, n)`. With
            `return_attention_weights`, `(tokens, weights)`: weights a dict
            `{"decoder_layer{i}_block2": (B, heads, n, S)}`.

        Raises:
            TypeError: an option `GenerateConfig` does not have.
            ValueError: an option's value, naming it.

        Example:
        >>> model = Transformer(num_layers=1, d_model=16, num_heads=2, dff=32,
        ...                     input_vocab_size=20, target_vocab_size=20,
        ...                     maximum_position_encoding=8)
        >>> tokens = model.generate(np.array([[5, 6, 7, 0]]), method="beam")
        >>> keras.backend.standardize_dtype(tokens.dtype), tokens.shape[0], tokens.shape[1] <= 8
        ('int32', 1, True)
        """
        names = [field.name for field in generation.GenerateConfig.fields()]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise TypeError(f"generate() got unexpected keyword argument(s) {unknown}; its "
                            f"options are the fields of GenerateConfig: {names}")
        config = generation.GenerateConfig(max_length=max_length, **options)
        max_length = config.max_length or self.maximum_position_encoding
        if max_length > self.maximum_position_encoding:
            raise ValueError(
                "Received an invalid value for argument `max_length`, expected at "
                f"most maximum_position_encoding={self.maximum_position_encoding}. "
                f"Received: max_length={max_length}"
            )
        # Ids with values (not traced) are checked and passed as NumPy, as
        # are the loop's options: on a GPU each eager operation or copy
        # around the compiled loop costs a round trip (they took 3.0-3.8 ms
        # of a batch-1 call on an H200, beside 4.5 ms for the loop; now
        # about 1: benchmarks/RESULTS.md).
        ids = _backend.concrete(np.asarray(inp) if isinstance(inp, (list, tuple)) else inp)
        inp = ops.convert_to_tensor(inp) if ids is None else ids
        dtype = keras.backend.standardize_dtype(inp.dtype)
        if len(inp.shape) != 2 or "int" not in dtype:
            raise ValueError(
                "Received an invalid value for argument `inp`, expected int token "
                f"ids of shape (batch, src_len). Received: inp.shape={tuple(inp.shape)}, "
                f"dtype={dtype}"
            )
        if ids is None:
            inp = ops.cast(inp, "int32")
        else:
            inp = ids.astype(np.int32)
            self.encoder._check_ids(inp)
        if not self.built:  # create every weight before tracing the loop
            self.build((tuple(inp.shape), (inp.shape[0], max_length)))

        # The options fixed in the compiled loop; the others are its tensor arguments.
        fixed = dict(config.options(tensor=False), max_length=max_length)
        jit_compile = generation.resolve_jit_compile(fixed.pop("jit_compile"), config.method)
        decode = self._generate_fns.get(
            (jit_compile, *sorted(fixed.items())),
            lambda: _backend.compile_decoding(
                self, functools.partial(generation.decode, self, **fixed), jit_compile
            ),
        )
        tensors = config.options(tensor=True)
        if tensors["seed"] is None:
            tensors["seed"] = random.randrange(2**31)
        tensors = {name: np.asarray(value, np.int32 if name == "seed" else np.float32)
                   for name, value in tensors.items()}
        tokens, n, weights = decode(inp, tensors)
        steps = _backend.concrete(n)
        if steps is not None:  # a Python int: the cheaper slice, or none when all ran
            n = int(steps)
        if steps is None or n < max_length:
            tokens = tokens[..., :n]  # (B, n) or (B, R, n)
        if config.return_attention_weights:
            return tokens, {name: w[:, :, :n, :] for name, w in weights.items()}
        return tokens

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
        x = ops.convert_to_tensor(x)
        if len(x.shape) == 1:
            x = x[None]
        if len(x.shape) != 2 or x.shape[0] != 1:
            raise ValueError(
                "Received an invalid value for argument `x`, expected one sequence "
                f"of shape (1, S) or (S,). Received: x.shape={tuple(x.shape)}"
            )
        predict_tokens = []
        for token in ops.convert_to_numpy(self.generate(x))[0].tolist():
            if token == self.end_token_idx:
                break
            predict_tokens.append(token)
        return predict_tokens

    def get_config(self):
        config = super().get_config()
        config.update(_config.options_config(self))
        return config
