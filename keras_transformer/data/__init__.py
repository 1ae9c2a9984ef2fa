"""Data: file loaders, the built-in corpus and toy task, tf.data pipelines."""

from keras_transformer.data.bert import (
    classification_dataset,
    mask_tokens,
    mlm_dataset,
    pack_inputs,
)
from keras_transformer.data.chatbot import load_chatbot_data
from keras_transformer.data.corpus import english_korean_corpus
from keras_transformer.data.files import (
    DataFileError,
    load_chatbot_csv,
    load_labeled,
    load_pairs,
    load_parallel_tsv,
    load_texts,
    save_parallel_tsv,
)
from keras_transformer.data.pipeline import encode_pairs, make_dataset, truncation_stats
from keras_transformer.data.toy import reverse_task

__all__ = [
    "DataFileError",
    "classification_dataset",
    "encode_pairs",
    "english_korean_corpus",
    "load_chatbot_csv",
    "load_chatbot_data",
    "load_labeled",
    "load_pairs",
    "load_parallel_tsv",
    "load_texts",
    "make_dataset",
    "mask_tokens",
    "mlm_dataset",
    "pack_inputs",
    "reverse_task",
    "save_parallel_tsv",
    "truncation_stats",
]
