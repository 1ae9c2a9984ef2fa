"""Tokenizers built on TensorFlow and tensorflow-text ops.

Every step of `tokenize` and `detokenize` is a TensorFlow op, so a tokenizer
works eagerly, inside `tf.function`, inside a `tf.data` pipeline and inside a
SavedModel. Three kinds share one interface:

- `"word"`: the tutorial's preprocessing: delete the characters
  `~.,!?"':;)(` and split on whitespace.
- `"wordpiece"`: punctuation and symbols become tokens of their own, words are
  split into sub-words (`"##"` marks a continuation) with a vocabulary learned
  from the training text by tensorflow-text's WordPiece learner.
- `"char"`: one token per character; `"▁"` stands for a space.

All kinds first normalise the text: invalid UTF-8 bytes are replaced with
U+FFFD, the text is NFC-normalised (Korean stays in precomposed syllables, no
jamo splitting), lower-cased when `lower_case=True` (the default; Hangul has
no case), and every run of control or separator characters becomes one space.
The special tokens are `<PAD>`, `<SOS>`, `<END>` and `<UNK>`. A learned
vocabulary puts them first (ids 0, 1, 2, 3, the tutorial's); a vocabulary
given by the user may hold them anywhere, and a tokenizer reads their ids
from it (`pad_id`, `start_id`, `end_id`, `unk_id`). A vocabulary for an
encoder-only (BERT-style) model also holds `[CLS]`, `[SEP]` and `[MASK]`
(`from_texts(..., encoder_tokens=True)` puts them at ids 4, 5, 6; `cls_id`,
`sep_id`, `mask_id` are `None` without them). No text ever tokenizes to
`<PAD>`, `<SOS>`, `<END>` or one of the encoder tokens.
"""

import collections

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer import _compat, _config
from keras_transformer._files import write_text
from keras_transformer.errors import InputError

PAD, SOS, END, UNK = 0, 1, 2, 3  # their ids in a learned vocabulary
SPECIAL_TOKENS = ("<PAD>", "<SOS>", "<END>", "<UNK>")
# BERT's: the sequence summary, the segment separator, the masked-LM blank.
ENCODER_TOKENS = ("[CLS]", "[SEP]", "[MASK]")
# The tutorial's FILTERS: characters deleted before splitting into words.
TUTORIAL_FILTERS = r"[~.,!?\"':;)(]"
SPACE_SYMBOL = "\u2581"  # "▁", how the char tokenizer writes a space.
_SEPARATORS = r"[\p{Cc}\p{Z}]+"  # controls (tab, newline, ...) and Unicode spaces.
_PUNCTUATION = r"[\p{P}\p{S}]"
_TEXT_BATCH = 2048  # texts per step while counting words for a vocabulary.


class Tokenizer(tf.Module):
    """Base class: text <-> ragged token ids with a fixed vocabulary.

    A kind defines two class methods: `split(strings)`, normalised strings
    `(B,)` -> ragged string tokens `(B, None)`, and `join(tokens)`, the way
    back to strings `(B,)`.

    Args:
        vocabulary: list of str. The tokens; index = id. Must hold each of
            `SPECIAL_TOKENS` (anywhere) and no duplicates, empty strings or
            whitespace.
        lower_case: bool. Lower-case the text before splitting. Defaults to
            `True`.
        name: str. Module name. Defaults to the kind.
    """

    kind = None

    def __init__(self, vocabulary, lower_case=True, name=None):
        super().__init__(name=name or f"{self.kind}_tokenizer")
        vocabulary = [str(token) for token in vocabulary]
        _check_vocabulary(vocabulary)
        self.vocabulary = vocabulary
        self.lower_case = bool(lower_case)
        self.pad_id, self.start_id, self.end_id, self.unk_id = (
            vocabulary.index(token) for token in SPECIAL_TOKENS
        )
        self.cls_id, self.sep_id, self.mask_id = (
            vocabulary.index(token) if token in vocabulary else None for token in ENCODER_TOKENS
        )
        self._tokens = tf.constant(vocabulary, dtype=tf.string)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._tokens, tf.range(len(vocabulary), dtype=tf.int64)
            ),
            default_value=self.unk_id,
        )

    @property
    def vocab_size(self):
        """Number of tokens, special tokens included."""
        return len(self.vocabulary)

    @property
    def control_ids(self):
        """The ids no text tokenizes to: `<PAD>`, `<SOS>`, `<END>` and the
        encoder tokens the vocabulary holds."""
        ids = (self.pad_id, self.start_id, self.end_id, self.cls_id, self.sep_id, self.mask_id)
        return tuple(i for i in ids if i is not None)

    def get_config(self):
        """What `tokenizer_from_config` needs besides the vocabulary."""
        return {"kind": self.kind, "lower_case": self.lower_case}

    def normalize(self, strings):
        """Strings `(B,)` -> normalised strings `(B,)` (see the module docstring)."""
        return normalize_text(strings, self.lower_case)

    def canonicalize(self, strings):
        """Strings as `detokenize` writes them when no token is unknown.

        Normalise, split and join, without the vocabulary: the form to compare
        outputs with (BLEU, exact match).

        Args:
            strings: str, list of str or string tensor `(B,)`.

        Returns:
            string tensor of the same shape.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        if strings.shape.rank == 0:
            return self.canonicalize(strings[tf.newaxis])[0]
        return self.join(self.split(self.normalize(strings)))

    def _lookup(self, tokens):
        """Ragged string tokens -> ragged int32 ids; unknown tokens -> `<UNK>`."""
        ids = tf.ragged.map_flat_values(self._table.lookup, tokens)
        return tf.cast(ids, tf.int32)

    def tokenize(self, strings):
        """Text -> token ids.

        Args:
            strings: str, list of str or string tensor, shape `()` or `(B,)`.

        Returns:
            `tf.RaggedTensor` int32 `(B, None)` (a dense `(n,)` tensor for a
            scalar input). No id is `<PAD>`, `<SOS>` or `<END>`.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        scalar = strings.shape.rank == 0
        if scalar:
            strings = strings[tf.newaxis]
        ids = self._lookup(self.split(self.normalize(strings)))
        # Text must never produce a control token (say, a literal "<END>").
        control = tf.constant(self.control_ids, tf.int32)
        ids = tf.ragged.map_flat_values(
            lambda x: tf.where(tf.reduce_any(x[:, tf.newaxis] == control, axis=1),
                               self.unk_id, x),
            ids,
        )
        return ids[0] if scalar else ids

    def id_to_token(self, ids):
        """Ids (dense or ragged, any int dtype) -> token strings of the same shape.

        Ids outside the vocabulary read as `<UNK>`.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        ids = tf.cast(ids, tf.int32)

        def gather(flat):
            flat = tf.where((flat >= 0) & (flat < self.vocab_size), flat, self.unk_id)
            return tf.gather(self._tokens, flat)

        if isinstance(ids, tf.RaggedTensor):
            return tf.ragged.map_flat_values(gather, ids)
        return gather(ids)

    def detokenize(self, ids):
        """Token ids -> text.

        Reads each row up to its first `<END>` and drops `<PAD>` and `<SOS>`,
        so the output of `Transformer.generate` can be passed as it is.

        Args:
            ids: int tensor `(B, T)`, `tf.RaggedTensor` `(B, None)` or a
                single row `(T,)`.

        Returns:
            string tensor `(B,)` (a scalar for a single row).
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        single = ids.shape.rank == 1
        if single:
            ids = ids[tf.newaxis]
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        before_end = tf.math.cumsum(tf.cast(ids == self.end_id, tf.int32), axis=1) == 0
        ids = tf.ragged.boolean_mask(
            ids, before_end & (ids != self.pad_id) & (ids != self.start_id)
        )
        text = self.join(self.id_to_token(ids))
        return text[0] if single else text

    def save_vocabulary(self, path):
        """Write the vocabulary to `path`, one token per line (UTF-8), atomically."""
        write_text(path, "\n".join(self.vocabulary) + "\n")

    @classmethod
    def learn_vocabulary(cls, word_counts, vocab_size, specials=SPECIAL_TOKENS, verbose=0):
        """Token counts -> vocabulary list (`specials` first)."""
        most_common = [token for token, _ in word_counts.most_common() if token not in specials]
        return list(specials) + most_common[: vocab_size - len(specials)]

    @classmethod
    def from_texts(cls, texts, vocab_size=8000, lower_case=True, encoder_tokens=False,
                   verbose=1):
        """Learn a vocabulary from `texts` and return a tokenizer that uses it.

        Args:
            texts: iterable of str. Training text.
            vocab_size: int. Largest vocabulary, special tokens included.
                Defaults to `8000`.
            lower_case: bool. Defaults to `True`.
            encoder_tokens: bool. Also reserve `[CLS]`, `[SEP]` and `[MASK]`
                (ids 4, 5, 6) for an encoder-only model. Defaults to `False`.
            verbose: int. `1` shows a progress bar while counting.

        Returns:
            A tokenizer of this class.
        """
        specials = SPECIAL_TOKENS + (ENCODER_TOKENS if encoder_tokens else ())
        if not isinstance(vocab_size, int) or vocab_size <= len(specials):
            raise ValueError(
                "Received an invalid value for argument `vocab_size`, expected an "
                f"integer > {len(specials)}. Received: vocab_size={vocab_size!r}"
            )
        texts = list(texts)
        counts = collections.Counter()
        progress = keras.utils.Progbar(len(texts), verbose=verbose, unit_name="text")
        for start in range(0, len(texts), _TEXT_BATCH):
            batch = texts[start : start + _TEXT_BATCH]
            tokens = cls.split(normalize_text(tf.constant(batch, dtype=tf.string), lower_case))
            counts.update(token.decode("utf-8") for token in tokens.flat_values.numpy())
            progress.update(start + len(batch))
        counts.pop("", None)
        vocabulary = cls.learn_vocabulary(counts, vocab_size, specials, verbose=verbose)
        return cls(vocabulary, lower_case=lower_case)


class WordTokenizer(Tokenizer):
    """The tutorial's word tokenizer: delete `~.,!?"':;)(`, split on spaces.

    Example:

    >>> tokenizer = WordTokenizer.from_texts(["가끔 궁금해", "가끔 뭐하는지 궁금해!"], verbose=0)
    >>> tokenizer.detokenize(tokenizer.tokenize("가끔 궁금해?")).numpy().decode()
    '가끔 궁금해'
    """

    kind = "word"

    @classmethod
    def split(cls, strings):
        return tf.strings.split(tf.strings.regex_replace(strings, TUTORIAL_FILTERS, ""))

    @classmethod
    def join(cls, tokens):
        return tf.strings.reduce_join(tokens, axis=-1, separator=" ")


class WordPieceTokenizer(Tokenizer):
    """Sub-word tokenizer: tensorflow-text's fast WordPiece on words and punctuation.

    A word the vocabulary cannot spell (a character never seen in training)
    becomes one `<UNK>`.
    """

    kind = "wordpiece"
    suffix_indicator = "##"

    def __init__(self, vocabulary, lower_case=True, name=None):
        super().__init__(vocabulary, lower_case=lower_case, name=name)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            self.vocabulary,
            suffix_indicator=self.suffix_indicator,
            unknown_token=SPECIAL_TOKENS[UNK],  # its id is looked up in the vocabulary
            no_pretokenization=True,
            token_out_type=tf.int64,
        )

    @classmethod
    def split(cls, strings):
        """Strings -> words, each punctuation mark or symbol a word of its own."""
        return tf_text.regex_split(strings, rf"\s+|{_PUNCTUATION}", _PUNCTUATION)

    def _lookup(self, words):
        pieces = self._wordpiece.tokenize(words.flat_values)  # (words, None)
        ids = words.with_flat_values(pieces).merge_dims(1, 2)  # (B, None)
        return tf.cast(ids, tf.int32)

    @classmethod
    def join(cls, tokens):
        """Glue `"##"` pieces to their word and closing punctuation to the left."""
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        text = tf.strings.regex_replace(text, rf"(^| ){cls.suffix_indicator}", "")
        return tf.strings.regex_replace(text, r" ([.,!?;:)\]}])", r"\1")

    @classmethod
    def learn_vocabulary(cls, word_counts, vocab_size, specials=SPECIAL_TOKENS, verbose=0):
        """tensorflow-text's WordPiece learner (`learn`), trimmed to size.

        The learner searches for the count threshold whose vocabulary fits
        `vocab_size` (within 5%). On corpora full of words seen once, like
        chat logs, no threshold fits and it returns a larger vocabulary (3x
        on ChatbotData): that one is trimmed. Every character of the corpus
        keeps a token and a `"##"` twin, so any word made of known characters
        can be spelled; the other tokens are kept most frequent first.
        """
        if not word_counts:
            return list(specials)
        vocabulary = _compat.learn_wordpiece(
            word_counts.items(), vocab_size, specials,
            max_unique_chars=len({char for word in word_counts for char in word}),
            joiner=cls.suffix_indicator,
        )
        return cls._trim(vocabulary, vocab_size, specials)

    @classmethod
    def _trim(cls, vocabulary, vocab_size, specials):
        """Keep special and single-character tokens, then the first others that fit."""

        def required(token):
            return token in specials or len(token.removeprefix(cls.suffix_indicator)) == 1

        if len(vocabulary) <= vocab_size:
            return vocabulary
        budget = vocab_size - sum(map(required, vocabulary))
        kept = set([token for token in vocabulary if not required(token)][: max(budget, 0)])
        return [token for token in vocabulary if required(token) or token in kept]


class CharTokenizer(Tokenizer):
    """One token per character; a space is the token `"▁"`."""

    kind = "char"

    @classmethod
    def split(cls, strings):
        strings = tf.strings.regex_replace(strings, " ", SPACE_SYMBOL)
        return tf.strings.unicode_split(strings, "UTF-8")

    @classmethod
    def join(cls, tokens):
        text = tf.strings.reduce_join(tokens, axis=-1)
        return tf.strings.regex_replace(text, SPACE_SYMBOL, " ")


def normalize_text(strings, lower_case=True):
    """Replace bad UTF-8, NFC-normalise, lower-case, collapse whitespace.

    Args:
        strings: string tensor of any shape.
        lower_case: bool. Defaults to `True`.

    Returns:
        string tensor of the same shape.
    """
    strings = tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    # Separators first: `tf.strings.lower` stops at a NUL character.
    strings = tf.strings.regex_replace(strings, _SEPARATORS, " ")
    strings = tf_text.normalize_utf8(strings, "NFC")
    if lower_case:
        strings = tf.strings.lower(strings, encoding="utf-8")
    return tf.strings.strip(strings)


# One class per kind of `_config.TOKENIZERS` (the choices the configs offer).
TOKENIZER_CLASSES = {cls.kind: cls for cls in (WordTokenizer, WordPieceTokenizer, CharTokenizer)}


def get_tokenizer_class(kind):
    """`"word"`, `"wordpiece"` or `"char"` -> the tokenizer class."""
    return TOKENIZER_CLASSES[_config.check_choice("tokenizer", kind, _config.TOKENIZERS)]


def load_vocabulary(path):
    """Read a vocabulary file written by `Tokenizer.save_vocabulary`.

    Raises:
        InputError: naming the file, when it is not a vocabulary.
        OSError: when it cannot be read.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not a keras_transformer vocabulary: not valid UTF-8 "
                         f"({error.reason} at byte {error.start})") from None
    if lines and lines[-1] == "":
        lines.pop()
    try:
        _check_vocabulary(lines)
    except ValueError as error:
        raise InputError(f"{path}: not a keras_transformer vocabulary: {error}") from None
    return lines


def tokenizer_from_config(config, vocabulary):
    """Rebuild a tokenizer from `Tokenizer.get_config()` and its vocabulary."""
    config = dict(config)
    return get_tokenizer_class(config.pop("kind"))(vocabulary, **config)


def _check_vocabulary(vocabulary):
    missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
    if missing:
        raise ValueError(f"the vocabulary lacks the special token(s) {missing}")
    seen = set()
    for index, token in enumerate(vocabulary):
        if not token or any(char.isspace() for char in token):
            raise ValueError(f"token {index} ({token!r}) is empty or holds whitespace")
        if token in seen:
            raise ValueError(f"token {index} ({token!r}) is a duplicate")
        seen.add(token)
