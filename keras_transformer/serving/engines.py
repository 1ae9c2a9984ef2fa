"""Engines: what `keras-transformer serve` runs, behind one small interface.

    engine.answer(texts, options) -> one `Result` per text

`options` are `GenerateConfig` fields (`method`, `temperature`, `top_p`,
`seed`, ...) plus `n`, the number of answers per text, and `max_tokens`, the
longest answer (cut after decoding). An engine
raises `InputError` (a `ValueError`) for an option it cannot honour; the
server turns that into a 400. Two engines: a translator directory (what
`train` writes: the model and its tokenizers, every decoding method) and an
exported SavedModel (its decoding fixed at export time).
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from keras_transformer.errors import InputError
from keras_transformer.generation import BEAM_METHODS, GenerateConfig

# The most answers per text a request may ask for (`n`).
MAX_ANSWERS = 16


@dataclasses.dataclass(frozen=True)
class Answer:
    """One answer: its text, its number of tokens (`<END>` not counted), and
    `"stop"` when it ended with `<END>` or `"length"` when cut (`max_tokens`,
    or the model's longest output)."""

    text: str
    tokens: int
    finish_reason: str


@dataclasses.dataclass(frozen=True)
class Result:
    """The answers to one text, and the text's number of tokens: `prompt_tokens`
    as the model read it, `cut_tokens` the ones beyond `max_length` it dropped."""

    answers: list
    prompt_tokens: int
    cut_tokens: int


def answer_of(text, ids, end_id, pad_id):
    """The `Answer` of `text` decoded from output ids `ids` `(n,)`."""
    ended = np.flatnonzero(ids == end_id)
    if len(ended):
        return Answer(text, int(ended[0]), "stop")
    return Answer(text, int(np.sum(ids != pad_id)), "length")


def _bucket(rows, largest):
    """The batch size to decode `rows` texts with: the next power of two, at
    most `largest` (more rows go in several batches of it), so that the
    decoding loop is compiled for a few shapes only."""
    return min(1 << max(rows - 1, 0).bit_length(), largest)


def cut(ids, limit, pad_id):
    """Output ids `(..., L)` cut to their first `limit` tokens (`None`: as they
    are): an answer whose `<END>` came later loses it, and reads as cut. The
    loop decodes to the model's full length, compiled once, whatever the limit."""
    if limit is None:
        return ids
    ids = np.array(ids)
    ids[..., limit:] = pad_id
    return ids


class _Bucketed:
    """An engine whose decoding is compiled per batch size: calls are padded to
    a power of two (`_bucket`) and `warm_up` compiles each size first."""

    def warm_up(self):
        """Compile the default decoding for every batch size a call can take
        (powers of two up to `max_batch_size`), so no request waits for it."""
        size = 1
        while True:
            self.answer(["warm-up"] * size, {})
            if size >= self.max_batch_size:
                return
            size = min(size * 2, self.max_batch_size)

    def padded(self, rows):
        """`(rows padded, bucket)`: `rows` with copies of the first appended up
        to a multiple of their bucket (copies, not empty texts: a batch decodes
        until its slowest row ends, and an empty text can run to the limit)."""
        bucket = _bucket(len(rows), self.max_batch_size)
        return rows + rows[:1] * (-len(rows) % bucket), bucket


class TranslatorEngine(_Bucketed):
    """A `Translator` (a directory `train` wrote): every decoding method.

    Args:
        translator: `Translator`.
        name: str. The model's name in `/v1/models`.
        defaults: dict of `GenerateConfig` fields the requests start from
            (`method`: how a request that does not sample decodes).
        max_batch_size: int. The largest batch decoded at once.
    """

    def __init__(self, translator, name, defaults=None, max_batch_size=64):
        self.translator = translator
        self.name = name
        self.defaults = dict(defaults or {})
        self.max_batch_size = max_batch_size
        self.max_length = translator.max_length
        self.end_id = translator.target_tokenizer.end_id
        self.pad_id = translator.target_tokenizer.pad_id

    def options(self, request):
        """`request`'s decoding options over the defaults, checked as `generate`
        checks them: `(options for generate, n)` (`max_tokens` is the server's)."""
        options = {"method": "greedy", **self.defaults, **request}
        options.pop("max_tokens", None)
        n = options.pop("n", 1)
        if options["method"] in BEAM_METHODS:
            options["beam_size"] = max(options.get("beam_size", 4), n)
            options["num_return_sequences"] = n
        try:
            GenerateConfig(**options)
        except (TypeError, ValueError) as error:
            raise InputError(str(error)) from None
        return options, n

    def answer(self, texts, request):
        options, n = self.options(request)
        sampling = options["method"] == "sample"
        # Sampling draws each row on its own: n copies of a text give n answers.
        rows = [text for text in texts for _ in range(n)] if sampling else list(texts)
        # The decoding loop compiles once per bucket, not once per number of texts.
        padded, bucket = self.padded(rows)
        ids = self.translator.generate_ids(padded, batch_size=bucket, **options)[: len(rows)]
        if ids.ndim == 2:  # (rows, L) -> (texts, answers, L)
            ids = ids.reshape(len(texts), -1, ids.shape[-1])
            if not sampling:
                ids = np.repeat(ids, n, axis=1)  # greedy: n equal answers
        return self.results(texts, cut(ids, request.get("max_tokens"), self.pad_id))

    def results(self, texts, ids):
        """The `Result`s of `texts` from their output ids `(texts, answers, L)`."""
        strings = self.translator.detokenize(ids)
        lengths = self.translator.source_lengths(texts).numpy()
        return [Result(answers=[answer_of(text, row, self.end_id, self.pad_id)
                                for text, row in zip(answers, rows)],
                       prompt_tokens=int(min(length, self.max_length)),
                       cut_tokens=int(max(length - self.max_length, 0)))
                for answers, rows, length in zip(strings, ids, lengths)]



class SavedModelEngine(_Bucketed):
    """An exported SavedModel (`keras-transformer export`): the decoding its
    export fixed, for any request that does not sample; its signature returns
    text, so `max_tokens` is not applied and `usage` counts no prompt tokens.
    Its XLA decoding compiles once per batch size, so calls are padded to
    powers of two, as a translator's are.

    Args:
        path: str. The SavedModel directory.
        name: str. The model's name in `/v1/models`.
        max_batch_size: int. The largest batch decoded at once.
    """

    def __init__(self, path, name, max_batch_size=64):
        import tensorflow_text  # noqa: F401  (registers the tokenizers' ops)

        from keras_transformer.text import END, PAD, SPECIAL_TOKENS

        self.module = tf.saved_model.load(path)
        self.name = name
        self.max_batch_size = max_batch_size
        with open(os.path.join(path, "assets", "target_vocab.txt"), encoding="utf-8") as f:
            vocabulary = f.read().splitlines()
        self.end_id = vocabulary.index(SPECIAL_TOKENS[END])
        self.pad_id = vocabulary.index(SPECIAL_TOKENS[PAD])

    def options(self, request):
        if request.get("method", "greedy") == "sample":
            raise InputError(
                "Received an invalid value for argument `temperature`: an exported "
                "SavedModel decodes as it was exported and does not sample; serve the "
                "model directory to sample. Received: temperature > 0"
            )
        return request, request.get("n", 1)

    def answer(self, texts, request):
        _, n = self.options(request)
        padded, bucket = self.padded(list(texts))
        answers = []
        for start in range(0, len(padded), bucket):
            outputs = self.module.translate(tf.constant(padded[start:start + bucket], tf.string))
            answers += [answer_of(text.decode("utf-8"), ids, self.end_id, self.pad_id)
                        for text, ids in zip(outputs["text"].numpy(),
                                             outputs["token_ids"].numpy())]
        return [Result(answers=[answer] * n, prompt_tokens=0, cut_tokens=0)
                for answer in answers[: len(texts)]]


class CTranslate2Engine(TranslatorEngine):
    """A CTranslate2 export (`keras-transformer export --format ctranslate2`):
    greedy and beam search (`n` best), float32 or quantized as exported; an
    `mmi` request is decoded with beam search (the rerank's second pass is
    not exported), a sampling one refused.

    Args:
        translator: `CTranslate2Translator`.
        name: str. The model's name in `/v1/models`.
        defaults: dict of decoding options the requests start from.
    """

    def options(self, request):
        options = {"method": "greedy", **self.defaults, **request}
        if options["method"] == "mmi":  # serve's default: MMI's rerank is not exported
            options["method"] = "beam"
        if options["method"] not in ("greedy", "beam"):
            raise InputError(
                "Received an invalid value for argument `method`: a CTranslate2 export "
                "decodes with greedy or beam search (serve the model directory to sample). "
                f"Received: method={options['method']!r}"
            )
        n = options.pop("n", 1)
        options = {key: options[key] for key in ("method", "beam_size", "length_penalty")
                   if key in options}
        options["num_return_sequences"] = n if options["method"] == "beam" else 1
        options["beam_size"] = max(options.get("beam_size", 4), n)
        return options, n

    def answer(self, texts, request):
        options, n = self.options(request)
        ids = self.translator.generate_ids(texts, **options)
        if ids.ndim == 2:  # greedy: n equal answers
            ids = np.repeat(ids[:, None], n, axis=1)
        return self.results(texts, cut(ids, request.get("max_tokens"), self.pad_id))


def load_engine(path, defaults=None, max_batch_size=64, warm_up=False):
    """The engine for `path`: a SavedModel directory (it has `saved_model.pb`),
    a CTranslate2 export (`model.bin`) or a translator directory; with
    `warm_up`, a translator's or a SavedModel's decoding compiled for every
    batch size first.

    Raises:
        InputError: naming the path, when it is none of them.
    """
    name = os.path.basename(os.path.normpath(path))
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        engine = SavedModelEngine(path, name, max_batch_size)
    elif os.path.exists(os.path.join(path, "model.bin")):
        from keras_transformer.serving.ctranslate2 import CTranslate2Translator

        return CTranslate2Engine(CTranslate2Translator(path), name, defaults)
    else:
        from keras_transformer.serving.translator import Translator

        engine = TranslatorEngine(Translator.load(path), name, defaults, max_batch_size)
    if warm_up:
        engine.warm_up()
    return engine
