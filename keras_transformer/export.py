"""String-in, string-out SavedModel: tokenizers, weights and the decoding loop.

The exported directory is served without this package: `tf.saved_model.load`
in a process that imports only `tensorflow` and `tensorflow_text` (whose ops
the tokenizers use) gives a `serving_default` signature and a `translate`
function:

    text: tf.string (None,)  ->  {"text": tf.string (None,),
                                  "token_ids": tf.int32 (None, None)}

Sources longer than `maximum_position_encoding` tokens are cut to their first
`maximum_position_encoding` tokens; invalid UTF-8 is replaced with U+FFFD;
words outside the vocabulary become `<UNK>`. The vocabularies are also written
as assets (`assets/source_vocab.txt`, `assets/target_vocab.txt`).

`saved_model_cli show` lists the signature. `saved_model_cli run` needs the
tensorflow-text ops registered, which the stock command cannot do;
`python -m keras_transformer saved-model-cli run ...` is the same tool with
them registered.
"""

import os
import shutil
import tempfile

import tensorflow as tf

from keras_transformer import _config
from keras_transformer.data.pipeline import padded_sources
from keras_transformer.transformer import METHODS

VOCABULARY_FILES = ("source_vocab.txt", "target_vocab.txt")


class TranslatorModule(tf.Module):
    """The `tf.Module` that `export_saved_model` writes.

    Args:
        model: `Transformer`.
        source_tokenizer, target_tokenizer: `keras_transformer.text.Tokenizer`.
        method: str. `"greedy"` or `"beam"`. Defaults to `"greedy"`.
        beam_size: int. For `"beam"`. Defaults to `4`.
        max_length: int. Most output tokens. Defaults to `None`
            (`maximum_position_encoding`).
        vocabulary_files: list of str. Files to keep as assets. Defaults to
            `None`.
    """

    def __init__(self, model, source_tokenizer, target_tokenizer, method="greedy", beam_size=4,
                 max_length=None, vocabulary_files=None):
        super().__init__(name="translator")
        _config.check_choice("method", method, [m for m in METHODS if m != "sample"])
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self._options = {"method": method, "beam_size": _config.check_positive_int(
            "beam_size", beam_size), "max_length": max_length}
        if vocabulary_files:
            self.vocabularies = [tf.saved_model.Asset(path) for path in vocabulary_files]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def translate(self, text):
        """Strings `(B,)` -> `{"text": (B,) strings, "token_ids": (B, n) int32}`."""
        ids = padded_sources(text, self.source_tokenizer,
                             self.model.maximum_position_encoding)  # (B, S)
        tokens = self.model.generate(ids, **self._options)
        return {"text": self.target_tokenizer.detokenize(tokens), "token_ids": tokens}


def export_saved_model(model, source_tokenizer, target_tokenizer, path, method="greedy",
                       beam_size=4, max_length=None):
    """Write a string-in, string-out SavedModel to `path`, atomically.

    The model is written to a temporary directory beside `path` and renamed
    into place, so an interrupted export never leaves a half-written model
    where a good one was.

    Args:
        model: `Transformer`.
        source_tokenizer, target_tokenizer: `keras_transformer.text.Tokenizer`.
        path: str. Output directory; replaced if it exists.
        method: str. `"greedy"` or `"beam"`. Defaults to `"greedy"`.
        beam_size: int. For `"beam"`. Defaults to `4`.
        max_length: int. Most output tokens. Defaults to `None`
            (`maximum_position_encoding`).

    Returns:
        str: `path`.

    Example:

    >>> translator = Translator.load("runs/en-ko")  # doctest: +SKIP
    >>> export_saved_model(translator.model, translator.source_tokenizer,
    ...                    translator.target_tokenizer, "exported/en-ko")  # doctest: +SKIP
    >>> tf.saved_model.load("exported/en-ko").translate(tf.constant(["I read."]))  # doctest: +SKIP
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        with tempfile.TemporaryDirectory(prefix="keras-transformer-vocab-") as assets:
            files = [os.path.join(assets, name) for name in VOCABULARY_FILES]
            source_tokenizer.save_vocabulary(files[0])
            target_tokenizer.save_vocabulary(files[1])
            module = TranslatorModule(model, source_tokenizer, target_tokenizer, method,
                                      beam_size, max_length, vocabulary_files=files)
            # Track the TensorFlow variables the signature reads: the TF1
            # loader of `saved_model_cli run` and TF Serving look them up
            # there, not through the Keras model's own tracking.
            module.captured_variables = list(module.translate.get_concrete_function().variables)
            tf.saved_model.save(module, staging,
                                signatures={"serving_default": module.translate})
        if os.path.exists(path):
            # Move the old export aside, then the new one in: a crash between
            # the two renames leaves the old model in `.retired-*`.
            retired = tempfile.mkdtemp(prefix=".retired-", dir=parent)
            os.replace(path, os.path.join(retired, "old"))
            os.replace(staging, path)
            shutil.rmtree(retired)
        else:
            os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging)
    return path
