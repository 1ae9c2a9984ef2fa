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
from keras_transformer.generation import METHODS, GenerateConfig

VOCABULARY_FILES = ("source_vocab.txt", "target_vocab.txt")
# The `generate` options an export fixes (sampling is left out: a served model
# answers the same request the same way).
EXPORTED_OPTIONS = frozenset(field.name for field in GenerateConfig.fields(export=True))


class TranslatorModule(tf.Module):
    """The `tf.Module` that `export_saved_model` writes.

    Args:
        model: `Transformer`.
        source_tokenizer, target_tokenizer: `keras_transformer.text.Tokenizer`.
        vocabulary_files: list of str. Files to keep as assets. Defaults to
            `None`.
        **generate_options: how to decode, as in `Transformer.generate`:
            `method` (`"greedy"`, the default, `"beam"` or `"mmi"`; a
            SavedModel does not sample), `beam_size`, `length_penalty`,
            `mmi_weight`, `max_length`.

    Constructing it traces the signature (seconds; `generate`'s errors are
    raised here). Only the variables the signature reads are saved: not the
    optimizer's, and the loaded SavedModel has no `.model`.
    """

    def __init__(self, model, source_tokenizer, target_tokenizer, vocabulary_files=None,
                 **generate_options):
        super().__init__(name="translator")
        unknown = set(generate_options) - EXPORTED_OPTIONS
        if unknown:
            raise TypeError(f"export cannot fix the decoding options {sorted(unknown)}; it "
                            f"takes {sorted(EXPORTED_OPTIONS)}")
        _config.check_choice("method", generate_options.get("method", "greedy"),
                             [m for m in METHODS if m != "sample"])
        GenerateConfig(**generate_options)
        # The Keras model is not an attribute: tracking it would save its optimizer's
        # state, and beside `captured_variables` every weight a second time (a Keras
        # variable and the TensorFlow variable it wraps are two objects to a
        # checkpoint): four times the weights' bytes after training with Adam.
        self._maximum_length = model.maximum_position_encoding
        self._generate = lambda ids: model.generate(ids, **generate_options)
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        if vocabulary_files:
            self.vocabularies = [tf.saved_model.Asset(path) for path in vocabulary_files]
        # `saved_model_cli run`'s TF1 loader and TF Serving look the variables up here.
        self.captured_variables = list(self.translate.get_concrete_function().variables)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def translate(self, text):
        """Strings `(B,)` -> `{"text": (B,) strings, "token_ids": (B, n) int32}`."""
        ids = padded_sources(text, self.source_tokenizer, self._maximum_length)  # (B, S)
        tokens = self._generate(ids)
        return {"text": self.target_tokenizer.detokenize(tokens), "token_ids": tokens}


def export_saved_model(model, source_tokenizer, target_tokenizer, path, **generate_options):
    """Write a string-in, string-out SavedModel to `path`, atomically.

    The model is written to a temporary directory beside `path` and renamed
    into place, so an interrupted export never leaves a half-written model
    where a good one was.

    Args:
        model: `Transformer`.
        source_tokenizer, target_tokenizer: `keras_transformer.text.Tokenizer`.
        path: str. Output directory; replaced if it exists.
        **generate_options: the decoding, as in `Transformer.generate`:
            `method` (`"greedy"`, the default, `"beam"` or `"mmi"`),
            `beam_size`, `length_penalty`, `mmi_weight`, `max_length`.

    Returns:
        str: `path`.

    Example (an untrained model; `Translator.load(directory)` gives a trained one):

    >>> import tempfile
    >>> from keras_transformer import Transformer
    >>> from keras_transformer.text import WordTokenizer
    >>> tokenizer = WordTokenizer.from_texts(["i read a book", "책을 읽었다"], verbose=0)
    >>> model = Transformer(num_layers=1, d_model=16, num_heads=2, dff=32,
    ...                     input_vocab_size=tokenizer.vocab_size,
    ...                     target_vocab_size=tokenizer.vocab_size,
    ...                     maximum_position_encoding=8)
    >>> path = export_saved_model(model, tokenizer, tokenizer,
    ...                           tempfile.mkdtemp() + "/exported")
    >>> served = tf.saved_model.load(path)  # needs tensorflow_text, not this package
    >>> served.translate(tf.constant(["I read a book."]))["text"].shape
    TensorShape([1])
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
            module = TranslatorModule(model, source_tokenizer, target_tokenizer,
                                      vocabulary_files=files, **generate_options)
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
