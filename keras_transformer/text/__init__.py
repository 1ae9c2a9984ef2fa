"""Tokenizers and vocabularies on tensorflow-text ops (see `tokenizers`)."""

from keras_transformer.text.tokenizers import (
    ENCODER_TOKENS,
    END,
    PAD,
    SOS,
    SPECIAL_TOKENS,
    UNK,
    CharTokenizer,
    Tokenizer,
    WordPieceTokenizer,
    WordTokenizer,
    get_tokenizer_class,
    load_vocabulary,
    normalize_text,
    tokenizer_from_config,
)

__all__ = [
    "ENCODER_TOKENS",
    "END",
    "PAD",
    "SOS",
    "SPECIAL_TOKENS",
    "UNK",
    "CharTokenizer",
    "Tokenizer",
    "WordPieceTokenizer",
    "WordTokenizer",
    "get_tokenizer_class",
    "load_vocabulary",
    "normalize_text",
    "tokenizer_from_config",
]
