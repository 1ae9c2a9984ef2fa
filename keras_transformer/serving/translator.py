"""`Translator`: a trained Transformer with its tokenizers, text in and text out.

A translator directory (`harness.ModelDirectory`) holds everything needed to
reload it:

    model.keras          the Keras model (weights and configuration)
    source_vocab.txt     the source vocabulary, one token per line
    target_vocab.txt     the target vocabulary
    config.json          format version, tokenizer kinds and options, the
                         maximum length, the training options
"""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data.pipeline import padded_sources
from keras_transformer.errors import InputError
from keras_transformer.models.transformer import Transformer
from keras_transformer.recipes.harness import ModelDirectory

SOURCE_VOCAB_FILE = "source_vocab.txt"
TARGET_VOCAB_FILE = "target_vocab.txt"
KIND = "translator"


def compiled_detokenize(tokenizer):
    """`tokenizer.detokenize` of int32 `(N, n)` ids as one compiled call."""
    return tf.function(tokenizer.detokenize,
                       input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)


def compiled_lengths(tokenizer):
    """Strings `(N,)` -> their numbers of tokens, as one compiled call."""
    return tf.function(lambda strings: tokenizer.tokenize(strings).row_lengths(),
                       input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)


def detokenized(detokenize, ids):
    """Output ids `(B, n)` or `(B, R, n)` -> strings through `detokenize` (int32
    `(N, n)` -> string tensor `(N,)`): a list, or a list of R-string lists."""
    ids = np.asarray(ids)
    flat = ids.reshape(-1, ids.shape[-1]) if ids.size else np.zeros((0, 0), np.int32)
    strings = [text.decode("utf-8") for text in detokenize(flat).numpy()]
    if ids.ndim == 3:
        return [strings[i : i + ids.shape[1]] for i in range(0, len(strings), ids.shape[1])]
    return strings


class Translator:
    """Text -> text with a `Transformer` and its source and target tokenizers.

    Args:
        model: `Transformer`.
        source_tokenizer: `keras_transformer.text.Tokenizer` for the inputs.
        target_tokenizer: `keras_transformer.text.Tokenizer` for the outputs.

    Example (an untrained model: `Translator.load("runs/chatbot")` reloads
    what `keras-transformer train` wrote, and answers
    `translate(["가끔 궁금해"])` with `['그 사람도 그럴 거예요.']`):

    >>> from keras_transformer.text import WordTokenizer
    >>> tokenizer = WordTokenizer.from_texts(["가끔 궁금해", "그 사람도 그럴 거예요"],
    ...                                      verbose=0)
    >>> model = Transformer(num_layers=1, d_model=16, num_heads=2, dff=32,
    ...                     input_vocab_size=tokenizer.vocab_size,
    ...                     target_vocab_size=tokenizer.vocab_size,
    ...                     maximum_position_encoding=8)
    >>> answers = Translator(model, tokenizer, tokenizer).translate(["가끔 궁금해"])
    >>> len(answers), type(answers[0]).__name__
    (1, 'str')
    """

    def __init__(self, model, source_tokenizer, target_tokenizer):
        if not isinstance(model, Transformer):
            raise TypeError(
                "Received an invalid value for argument `model`, expected a "
                f"keras_transformer.Transformer. Received: model={type(model).__name__}"
            )
        for name, tokenizer, size in (
            ("source_tokenizer", source_tokenizer, model.input_vocab_size),
            ("target_tokenizer", target_tokenizer, model.target_vocab_size),
        ):
            if tokenizer.vocab_size != size:
                raise InputError(
                    f"Received an invalid value for argument `{name}`: its vocabulary "
                    f"has {tokenizer.vocab_size} tokens but the model expects {size}."
                )
        expected = {
            "source_tokenizer.pad_id": (source_tokenizer.pad_id, model.pad_token_idx),
            "target_tokenizer.pad_id": (target_tokenizer.pad_id, model.pad_token_idx),
            "target_tokenizer.start_id": (target_tokenizer.start_id, model.start_token_idx),
            "target_tokenizer.end_id": (target_tokenizer.end_id, model.end_token_idx),
        }
        for name, (tokenizer_id, model_id) in expected.items():
            if tokenizer_id != model_id:
                raise InputError(
                    f"Received an invalid tokenizer: {name} is {tokenizer_id}, but the "
                    f"model's special id is {model_id}."
                )
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        # Tokenizing eagerly runs about 170 small ops per request; compiled,
        # a one-sentence request took 8 ms instead of 27 (bench_export.py).
        self._encode = tf.function(
            lambda strings: padded_sources(strings, source_tokenizer, self.max_length),
            input_signature=[tf.TensorSpec([None], tf.string)], autograph=False,
        )
        self._detokenize = compiled_detokenize(target_tokenizer)
        self._source_lengths = compiled_lengths(source_tokenizer)

    @property
    def max_length(self):
        """Longest source (tokens) and longest output: `maximum_position_encoding`."""
        return self.model.maximum_position_encoding

    def encode(self, texts):
        """Strings -> int32 ids `(B, max_length)`, cut to `max_length` and padded."""
        return self._encode(tf.constant(list(texts), dtype=tf.string))

    def source_lengths(self, texts):
        """The number of tokens of each text before it is cut to `max_length`."""
        return self._source_lengths(tf.constant(list(texts), tf.string))

    def generate_ids(self, texts, batch_size=64, verbose=0, **generate_kwargs):
        """Strings -> int32 output ids `(B, n)` from `Transformer.generate`
        (`(B, R, n)` with `num_return_sequences` R > 1).

        Every batch has the same shape (`min(batch_size, len(texts))` rows,
        `max_length` columns), so the decoding loop is traced once.
        """
        texts = list(texts)
        batch_size = min(batch_size, max(len(texts), 1))
        outputs = []
        progress = keras.utils.Progbar(len(texts), verbose=verbose, unit_name="sentence")
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            # Fill a short last batch with copies of its first sentence: they
            # end as soon as the real rows do, which empty rows might not.
            ids = self.encode(batch + batch[:1] * (batch_size - len(batch)))
            tokens = self.model.generate(ids, **generate_kwargs)[: len(batch)]
            outputs.append(tokens.numpy())
            progress.update(start + len(batch))
        width = max((out.shape[-1] for out in outputs), default=0)
        rows = [np.pad(out, [(0, 0)] * (out.ndim - 1) + [(0, width - out.shape[-1])])
                for out in outputs]
        return np.concatenate(rows) if rows else np.zeros((0, 0), np.int32)

    def detokenize(self, ids):
        """Output ids `(B, n)` or `(B, R, n)` -> strings: a list, or a list of lists."""
        return detokenized(self._detokenize, ids)

    def translate(self, texts, batch_size=64, verbose=0, **generate_kwargs):
        """Strings -> output strings, in order.

        Args:
            texts: str or list of str.
            batch_size: int. Sentences decoded together. Defaults to `64`.
            verbose: int. `1` shows a progress bar. Defaults to `0`.
            **generate_kwargs: passed to `Transformer.generate` (`method`,
                `beam_size`, `temperature`, ...).

        Returns:
            list of str (a str for a str input); with `num_return_sequences`
            R > 1, a list of R strings, best first, for each text. A source
            longer than `max_length` tokens is cut to its first `max_length`
            tokens.
        """
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        if not texts:
            return []
        strings = self.detokenize(self.generate_ids(texts, batch_size=batch_size,
                                                    verbose=verbose, **generate_kwargs))
        return strings[0] if single else strings

    def attention(self, text, layer=-1):
        """Cross-attention of a greedy translation of `text`, for plotting.

        Args:
            text: str.
            layer: int. Decoder layer. Defaults to `-1` (the last).

        Returns:
            `(weights (heads, T, S), source_tokens, target_tokens)`: `T` output
            tokens (the last is `<END>` when produced), `S` source tokens.
        """
        ids = self.encode([text])
        tokens, weights = self.model.generate(ids, return_attention_weights=True)
        layer = range(self.model.num_layers)[layer]
        weights = weights[f"decoder_layer{layer + 1}_block2"][0].numpy()  # (heads, n, S)
        output = tokens[0].numpy()
        length = int(np.sum(output != self.model.pad_token_idx))
        source_length = int(np.sum(ids[0].numpy() != self.model.pad_token_idx))
        source_tokens = self._token_strings(self.source_tokenizer, ids[0][:source_length])
        target_tokens = self._token_strings(self.target_tokenizer, output[:length])
        return weights[:, :length, :source_length], source_tokens, target_tokens

    @staticmethod
    def _token_strings(tokenizer, ids):
        return [token.decode("utf-8") for token in tokenizer.id_to_token(ids).numpy()]

    def save(self, directory, train_config=None):
        """Write the model, both vocabularies and `config.json` into `directory`.

        Each file is written under a temporary name and renamed into place: an
        interrupted save leaves the files of the previous save whole.

        Args:
            directory: str. Created if needed.
            train_config: dict. The options the model was trained with
                (`TrainConfig.to_dict()`), recorded in `config.json` under
                `"train"`. Defaults to `None`.
        """
        entries = {"max_length": self.max_length}
        if train_config is not None:
            entries["train"] = train_config
        ModelDirectory(directory, KIND).save(self.model, {
            "source_tokenizer": (self.source_tokenizer, SOURCE_VOCAB_FILE),
            "target_tokenizer": (self.target_tokenizer, TARGET_VOCAB_FILE),
        }, **entries)

    @classmethod
    def load(cls, directory):
        """Reload a translator saved by `save` (or by `keras_transformer.train`).

        Raises:
            InputError: (a `ValueError`) naming the file, when a file is
                missing, damaged or not a translator's.
        """
        model, tokenizers, _ = ModelDirectory(directory, KIND).load(Transformer, {
            "source_tokenizer": SOURCE_VOCAB_FILE, "target_tokenizer": TARGET_VOCAB_FILE})
        return cls(model, tokenizers["source_tokenizer"], tokenizers["target_tokenizer"])
