"""Export to CTranslate2, the fastest CPU decoder we measured, and decode with it.

`export_ctranslate2(translator, out_dir)` writes our weights as a
`ctranslate2.specs.TransformerSpec` (post- or pre-LN, ReLU or GELU, the
model's own position table written out, embeddings scaled by sqrt(d_model),
a tied output projection written as its matrix, LayerNorm epsilon 1e-6) with
the vocabularies as token strings. CTranslate2 takes tokens, not text, so our
tokenizers stay on our side: they are saved beside the model
(`keras_transformer/`), and `CTranslate2Translator` tokenizes, decodes with
CTranslate2 and detokenizes, with `Translator.translate`'s API.

Greedy and beam search give our tokens in float32 with `length_penalty=0`
(CTranslate2 divides by `length ** alpha`, not by GNMT's `((5 + length) / 6)
** alpha`). Sampling and MMI stay ours. Needs `pip install ctranslate2`.
"""

import os
import shutil

import numpy as np
import tensorflow as tf

from keras_transformer.errors import InputError
from keras_transformer.recipes.harness import ModelDirectory
from keras_transformer.serving import QUANTIZATIONS
from keras_transformer.serving.translator import (
    SOURCE_VOCAB_FILE,
    TARGET_VOCAB_FILE,
    compiled_detokenize,
    compiled_lengths,
    detokenized,
)

TOKENIZER_DIR = "keras_transformer"


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise InputError("the CTranslate2 export and engine need ctranslate2: pip install "
                         "'keras-transformer-kr[ctranslate2]'") from None
    return ctranslate2


def check_expressible(model):
    """Raises `InputError` naming the first option of `model` that a CTranslate2
    Transformer cannot express."""
    from keras_transformer.models.transformer import Transformer

    if not isinstance(model, Transformer):
        raise InputError(f"export --format ctranslate2: expected a Transformer, got "
                         f"{type(model).__name__}")
    if model.activation not in ("relu", "gelu"):
        raise InputError(f"export --format ctranslate2: activation={model.activation!r} has "
                         "no CTranslate2 equivalent (relu and gelu have)")


def _spec(model):
    from ctranslate2.specs import common_spec, transformer_spec

    check_expressible(model)
    activation = {"relu": common_spec.Activation.RELU,
                  "gelu": common_spec.Activation.GELU}[model.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        model.num_layers, model.num_heads, pre_norm=model.norm_first, activation=activation)

    def linear(target, *layers):
        target.weight = np.concatenate([np.asarray(layer.kernel).T for layer in layers])
        target.bias = np.concatenate([np.asarray(layer.bias) for layer in layers])

    def norm(target, layer_norm):
        target.gamma = np.asarray(layer_norm.gamma)
        target.beta = np.asarray(layer_norm.beta)

    for side, ours in ((spec.encoder, model.encoder), (spec.decoder, model.decoder)):
        embeddings = side.embeddings[0] if side is spec.encoder else side.embeddings
        embeddings.weight = np.asarray(ours.embedding.embeddings)
        side.scale_embeddings = True
        if ours.position_encoding == "learned":
            side.position_encodings.encodings = np.asarray(ours.pos_embedding.embeddings)
        else:
            side.position_encodings.encodings = np.asarray(ours.pos_encoding)[0]
        if model.norm_first:
            norm(side.layer_norm, ours.final_layernorm)
    for layer, ours in zip(spec.encoder.layer, model.encoder.enc_layers):
        linear(layer.self_attention.linear[0], ours.mha.wq, ours.mha.wk, ours.mha.wv)
        linear(layer.self_attention.linear[1], ours.mha.dense)
        norm(layer.self_attention.layer_norm, ours.layernorm1)
        linear(layer.ffn.linear_0, ours.ffn.layers[0])
        linear(layer.ffn.linear_1, ours.ffn.layers[1])
        norm(layer.ffn.layer_norm, ours.layernorm2)
    for layer, ours in zip(spec.decoder.layer, model.decoder.dec_layers):
        linear(layer.self_attention.linear[0], ours.mha1.wq, ours.mha1.wk, ours.mha1.wv)
        linear(layer.self_attention.linear[1], ours.mha1.dense)
        norm(layer.self_attention.layer_norm, ours.layernorm1)
        linear(layer.attention.linear[0], ours.mha2.wq)
        linear(layer.attention.linear[1], ours.mha2.wk, ours.mha2.wv)
        linear(layer.attention.linear[2], ours.mha2.dense)
        norm(layer.attention.layer_norm, ours.layernorm2)
        linear(layer.ffn.linear_0, ours.ffn.layers[0])
        linear(layer.ffn.linear_1, ours.ffn.layers[1])
        norm(layer.ffn.layer_norm, ours.layernorm3)
    if model.share_embeddings:  # the tied projection: the embedding matrix, no bias
        spec.decoder.projection.weight = np.asarray(model.final_layer.embedding.embeddings)
        spec.decoder.projection.bias = np.zeros(model.target_vocab_size, np.float32)
    else:
        linear(spec.decoder.projection, model.final_layer)
    # `generate` never emits <PAD> or <SOS> (`special_token_penalty`); neither
    # may CTranslate2 (its `suppress_sequences` made beam search 3x slower).
    banned = [model.pad_token_idx, model.start_token_idx]
    spec.decoder.projection.bias[banned] = -1e4
    spec.config.layer_norm_epsilon = 1e-6  # the tutorial's LayerNormalization
    return spec


def _tokens(tokenizer):
    return [token.decode("utf-8") for token in
            tokenizer.id_to_token(np.arange(tokenizer.vocab_size)).numpy()]


def export_ctranslate2(translator, out_dir, quantization="float32"):
    """Write `translator`'s model as a CTranslate2 model in `out_dir` (replaced).

    Args:
        translator: `Translator`.
        out_dir: str. The CTranslate2 directory; our tokenizers go in its
            `keras_transformer/` folder.
        quantization: `"float32"`, `"int8"` or `"int8_float32"`: how the
            weights are stored.

    Returns:
        `out_dir`.

    Raises:
        InputError: for an option CTranslate2 cannot express (naming it), a
            bad `quantization`, or a missing `ctranslate2`.
    """
    if quantization not in QUANTIZATIONS:
        raise InputError(f"export: --quantization must be one of {', '.join(QUANTIZATIONS)}; "
                         f"got {quantization!r}")
    _import_ctranslate2()
    spec = _spec(translator.model)
    source, target = (_tokens(t) for t in (translator.source_tokenizer,
                                            translator.target_tokenizer))
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    tokenizer = translator.target_tokenizer
    spec.config.bos_token = spec.config.decoder_start_token = target[tokenizer.start_id]
    spec.config.eos_token = target[tokenizer.end_id]
    spec.config.unk_token = target[tokenizer.unk_id]
    spec.validate()
    spec.optimize(quantization=None if quantization == "float32" else quantization)
    staging = out_dir.rstrip(os.sep) + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    spec.save(staging)
    ModelDirectory(os.path.join(staging, TOKENIZER_DIR), "translator").save_tokenizers({
        "source_tokenizer": (translator.source_tokenizer, SOURCE_VOCAB_FILE),
        "target_tokenizer": (translator.target_tokenizer, TARGET_VOCAB_FILE),
    }, max_length=translator.max_length, quantization=quantization)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(staging, out_dir)
    return out_dir


class CTranslate2Translator:
    """A CTranslate2 export with `Translator.translate`'s API.

    Args:
        directory: str. Written by `export_ctranslate2`.
        compute_type: str. CTranslate2's (`"default"`: as stored).
        threads: int. Threads for one batch. Defaults to `0`: CTranslate2's choice.
    """

    def __init__(self, directory, compute_type="default", threads=0):
        ctranslate2 = _import_ctranslate2()
        tokenizers, config = ModelDirectory(os.path.join(directory, TOKENIZER_DIR),
                                            "CTranslate2 export").load_tokenizers({
            "source_tokenizer": SOURCE_VOCAB_FILE, "target_tokenizer": TARGET_VOCAB_FILE})
        self.source_tokenizer = tokenizers["source_tokenizer"]
        self.target_tokenizer = tokenizers["target_tokenizer"]
        self.max_length = config["max_length"]
        self.translator = ctranslate2.Translator(directory, device="cpu",
                                                 compute_type=compute_type,
                                                 intra_threads=threads)
        # Tokenizing eagerly costs about 10 ms a request; compiled, well under 1.
        self._tokenize = tf.function(
            lambda strings: self.source_tokenizer.tokenize(strings)[:, : self.max_length],
            input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        self._detokenize = compiled_detokenize(self.target_tokenizer)
        self._source_lengths = compiled_lengths(self.source_tokenizer)
        self.source_vocabulary = _tokens(self.source_tokenizer)
        self.target_ids = {token: i for i, token in enumerate(_tokens(self.target_tokenizer))}

    def generate_ids(self, texts, method="greedy", beam_size=4, max_length=None,
                     length_penalty=0.0, num_return_sequences=1):
        """Strings -> int32 output ids `(B, n)` (`(B, R, n)` with R > 1) ending in `<END>`."""
        if method not in ("greedy", "beam"):
            raise InputError(f"a CTranslate2 export decodes with greedy or beam, not {method!r}")
        ids = self._tokenize(tf.constant(list(texts), tf.string)).to_list()
        results = self.translator.translate_batch(
            [[self.source_vocabulary[i] for i in row] for row in ids],
            beam_size=beam_size if method == "beam" else 1,
            num_hypotheses=num_return_sequences, length_penalty=length_penalty,
            max_decoding_length=max_length or self.max_length, min_decoding_length=0,
            return_end_token=True, max_batch_size=64)
        pad = self.target_tokenizer.pad_id
        rows = [[[self.target_ids[t] for t in hypothesis] for hypothesis in result.hypotheses]
                for result in results]
        width = max(len(h) for row in rows for h in row)
        out = np.full((len(rows), num_return_sequences, width), pad, np.int32)
        for i, row in enumerate(rows):
            for k, hypothesis in enumerate(row):
                out[i, k, : len(hypothesis)] = hypothesis
        return out[:, 0] if num_return_sequences == 1 else out

    def source_lengths(self, texts):
        """The number of tokens of each text before it is cut to `max_length`."""
        return self._source_lengths(tf.constant(list(texts), tf.string))

    def detokenize(self, ids):
        """Output ids `(B, n)` or `(B, R, n)` -> strings: a list, or a list of lists."""
        return detokenized(self._detokenize, ids)

    def translate(self, texts, **options):
        """Strings -> output strings (lists of R strings with `num_return_sequences` R > 1)."""
        single = isinstance(texts, str)
        strings = self.detokenize(self.generate_ids([texts] if single else list(texts),
                                                    **options))
        return strings[0] if single else strings
