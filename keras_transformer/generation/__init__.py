"""Autoregressive decoding on every Keras backend: the options (`GenerateConfig`),
greedy, sampling, beam and MMI loops, and `decode`, which `Transformer.generate` compiles."""

from keras_transformer.generation.beam import (
    answer_log_probs,
    beam_search,
    length_penalty_fn,
    mmi_rerank,
)
from keras_transformer.generation.config import (
    BEAM_METHODS,
    METHODS,
    GenerateConfig,
    resolve_jit_compile,
)
from keras_transformer.generation.decoding import decode, special_token_penalty
from keras_transformer.generation.search import Sampler, greedy_search

__all__ = [
    "BEAM_METHODS",
    "METHODS",
    "GenerateConfig",
    "Sampler",
    "answer_log_probs",
    "beam_search",
    "decode",
    "greedy_search",
    "length_penalty_fn",
    "mmi_rerank",
    "resolve_jit_compile",
    "special_token_penalty",
]
