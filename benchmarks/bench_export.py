"""Do the exported SavedModel and CTranslate2 model decode exactly as `generate`
does, and how fast is one request through each against `Translator.translate`?

    python -m keras_transformer demo --out keras_transformer_demo
    python benchmarks/bench_export.py keras_transformer_demo [--requests 100]

Exports the demo's model (greedy, and beam 4; as it is and as its
`serving_copy("bfloat16")`) with `export_saved_model`, loads each with
`tf.saved_model.load` and counts the sentences of the demo's test split (1,000,
decoded in batches of 64) whose tokens equal the float32
`Translator.generate_ids` (that is, `generate`). Then times requests of
one sentence, one after another, through the SavedModel and through
`Translator.translate`: the median and 90th percentile in ms. Then the same
for the CTranslate2 export (`pip install ".[ctranslate2]"`), float32 and int8,
at `length_penalty=0` (CTranslate2 does not have GNMT's penalty), with the
exact match of its answers against the references beside ours.

Run time: about 4 minutes on 2 cores (eight exports, 1,000 sentences each).
"""

import argparse
import itertools
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# CTranslate2's OpenMP threads otherwise spin between calls, on the cores
# TensorFlow's calls need (bench_decode_peers.py measures both policies).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import Translator, export_saved_model  # noqa: E402
from keras_transformer.cli import DEMO_CONFIG, DEMO_SIZES  # noqa: E402
from keras_transformer.data.corpus import english_korean_corpus  # noqa: E402
from machine import describe  # noqa: E402

METHODS = {"greedy": {}, "beam": {"method": "beam", "beam_size": 4}}
DTYPES = ("float32", "bfloat16")  # bfloat16: `serving_copy`, compared with float32's tokens


def latency_ms(fn, texts):
    fn(texts[0])  # compile
    times = []
    for text in texts:
        start = time.perf_counter()
        fn(text)
        times.append((time.perf_counter() - start) * 1e3)
    return np.median(times), np.percentile(times, 90)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="the directory `keras_transformer demo --out` wrote")
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args(argv)
    translator = Translator.load(args.model)
    test = [source for source, _ in
            english_korean_corpus(seed=DEMO_CONFIG.seed, **DEMO_SIZES)["test"]]
    print(f"# {describe(('tensorflow', 'keras', 'ctranslate2'))}")
    print(f"demo model {args.model}, test split of {len(test)} sentences")
    print("| decoding | weights | tokens equal to float32 generate's | SavedModel ms/request "
          "(median, p90) | Translator.translate ms/request (median, p90) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for (name, options), dtype in itertools.product(METHODS.items(), DTYPES):
            model = translator.model
            if dtype != "float32":
                model = model.serving_copy(dtype)
            path = export_saved_model(model, translator.source_tokenizer,
                                      translator.target_tokenizer,
                                      os.path.join(tmp, f"{name}-{dtype}"), **options)
            served = tf.saved_model.load(path)
            expected = translator.generate_ids(test, **options)
            equal = 0
            for i in range(0, len(test), 64):
                got = served.translate(tf.constant(test[i : i + 64]))["token_ids"].numpy()
                want = expected[i : i + 64]
                width = max(got.shape[1], want.shape[1])
                got, want = (np.pad(t, [(0, 0), (0, width - t.shape[1])]) for t in (got, want))
                equal += int((got == want).all(axis=1).sum())
            requests = test[: args.requests]
            saved = latency_ms(lambda text: served.translate(tf.constant([text])), requests)
            direct = Translator(model, translator.source_tokenizer, translator.target_tokenizer)
            ours = latency_ms(lambda text: direct.translate(text, **options), requests)
            print(f"| {name} | {dtype} | {equal} / {len(test)} | {saved[0]:.1f}, {saved[1]:.1f} "
                  f"| {ours[0]:.1f}, {ours[1]:.1f} |", flush=True)
        ctranslate2_rows(translator, test, args.requests, tmp)


def ctranslate2_rows(translator, test, requests, tmp):
    """The CTranslate2 export, float32 and int8: its tokens against `generate`'s
    at `length_penalty=0` (CTranslate2's penalty is not GNMT's) and its speed."""
    from keras_transformer.serving.ctranslate2 import CTranslate2Translator, export_ctranslate2

    print("\n| CTranslate2 | weights | tokens equal to float32 generate's | exact match with "
          "the references, ours -> CTranslate2 | ms/request (median, p90), CTranslate2 | ours |")
    print("|---|---|---|---|---|---|")
    references = dict(english_korean_corpus(seed=DEMO_CONFIG.seed, **DEMO_SIZES)["test"])
    ours_text = translator.translate(test)
    ours_match = np.mean([a == references[s] for s, a in zip(test, ours_text)])
    for (name, options), quantization in itertools.product(METHODS.items(),
                                                           ("float32", "int8")):
        options = dict(options, length_penalty=0.0)
        exported = CTranslate2Translator(export_ctranslate2(
            translator, os.path.join(tmp, f"ct2-{name}-{quantization}"), quantization),
            threads=os.cpu_count())
        want = translator.generate_ids(test, **options)
        got = exported.generate_ids(test, **options)
        width = max(got.shape[1], want.shape[1])
        got, want = (np.pad(x, [(0, 0), (0, width - x.shape[1])]) for x in (got, want))
        texts = exported.translate(test, **options)
        match = np.mean([a == references[s] for s, a in zip(test, texts)])
        theirs = latency_ms(lambda text: exported.translate([text], **options), test[:requests])
        ours = latency_ms(lambda text: translator.translate(text, **options), test[:requests])
        print(f"| {name} | {quantization} | {int((got == want).all(axis=1).sum())} / "
              f"{len(test)} | {ours_match:.3f} -> {match:.3f} | {theirs[0]:.1f}, "
              f"{theirs[1]:.1f} | {ours[0]:.1f}, {ours[1]:.1f} |", flush=True)
        exported = None  # the translator and its threads go


if __name__ == "__main__":
    main()
