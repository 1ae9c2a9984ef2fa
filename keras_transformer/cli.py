"""Command line: `python -m keras_transformer {demo,train,chat,translate,export,
serve,saved-model-cli,pretrain,classify}`.

- `demo`: train on the built-in English -> Korean corpus, score the held-out
  test split, print samples, write plots, end with one JSON line.
- `train`: train on a chatbot CSV or a parallel TSV; writes a model directory.
- `chat`: answer lines from a model directory (interactive on a terminal;
  otherwise exactly one answer line per input line on stdout).
- `translate`: one output line per TEXT argument.
- `export`: a string-in, string-out SavedModel of a model directory.
- `serve`: a model directory or SavedModel over HTTP (OpenAI-compatible API,
  micro-batching, a chat page; `keras_transformer.serving.server`).
- `saved-model-cli`: `show` and `run` for exported models, with the
  tensorflow-text ops registered (the stock `saved_model_cli run` cannot).
- `pretrain`: BERT's masked language model on a text file or chatbot CSV.
- `classify`: train a text classifier (from a pretrained encoder or a fresh
  one) on `text<TAB>label` lines or a chatbot CSV's `label` column; or, with
  `--model`, classify texts.

The training flags are generated from `keras_transformer.recipes.config`'s
`TrainConfig`, `PretrainConfig` and `ClassifyConfig`.
Messages and progress go to stderr (Keras' training bars to stdout, except in
`chat` and `translate`, whose stdout holds answers only). A user mistake (a
bad flag value, a missing or malformed file) ends with one line on stderr and
exit status 2; anything else is a bug, reported with its traceback and exit
status 1.
"""

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback

from keras_transformer.errors import InputError
from keras_transformer.recipes.config import ClassifyConfig, PretrainConfig, TrainConfig
from keras_transformer.serving import QUANTIZATIONS

# How `chat` decodes unless told otherwise: the best on ChatbotData's
# validation split (benchmarks/RESULTS.md).
CHAT_METHOD = "mmi"
DEMO_SIZES = {"train_size": 12000, "valid_size": 500, "test_size": 1000}
# The demo's options where they differ from `TrainConfig`'s defaults.
DEMO_CONFIG = TrainConfig(tokenizer="word", vocab_size=1000, d_model=128, num_heads=4, dff=256,
                          max_length=16, epochs=8)
GROUPS = {"text": "text", "model": "model (the tutorial's kargs and options)",
          "training": "training", "scale": "speed and scale"}
BUG_REPORT = ("This is a bug in keras-transformer, not a mistake of yours: please report it "
              "with the traceback above.")


class _Parser(argparse.ArgumentParser):
    """`argparse` that reports a bad command line in one line, not a usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _config_flags(parser, defaults, skip=()):
    """One flag per field of `defaults`' config class (`TrainConfig`, ...); a
    flag left out keeps `defaults`' value.

    The parsed namespace holds only the flags given on the command line
    (`argparse.SUPPRESS`), so `_train_config` knows what the user chose.
    """
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    for field in dataclasses.fields(defaults):
        if field.name in skip:
            continue
        meta, default = field.metadata, getattr(defaults, field.name)
        flag = "--" + field.name.replace("_", "-")
        help_text = meta["help"] + ("" if default is None else f" (default: {default})")
        if meta["type"] is bool:
            groups[meta["group"]].add_argument(
                flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                help=help_text)
        else:
            groups[meta["group"]].add_argument(
                flag, type=meta["type"] or str, choices=meta["choices"],
                default=argparse.SUPPRESS, help=help_text,
                metavar=None if meta["choices"] else field.name.upper())


def _train_config(args, defaults):
    """`defaults` with the flags given on the command line."""
    given = {field.name: getattr(args, field.name) for field in dataclasses.fields(defaults)
             if hasattr(args, field.name)}
    return dataclasses.replace(defaults, **given)


def _decoding_flags(parser, method):
    """One flag per `GenerateConfig` option that has one; `--method` defaults to `method`."""
    from keras_transformer.generation import METHODS, GenerateConfig

    group = parser.add_argument_group("decoding")
    for field in GenerateConfig.fields(flag=True):
        default = method if field.name == "method" else field.default
        group.add_argument(
            "--" + field.name.replace("_", "-"), default=default,
            type=None if field.name == "method" else field.type,
            choices=METHODS if field.name == "method" else None,
            help=field.metadata["help"] + ("" if default is None else " (default: %(default)s)"),
        )


def _generate_options(args):
    """The decoding flags as `generate` arguments, checked."""
    from keras_transformer.generation import GenerateConfig

    given = {field.name: getattr(args, field.name) for field in GenerateConfig.fields(flag=True)}
    try:
        return GenerateConfig(**given).options(flag=True)
    except ValueError as error:
        raise InputError(str(error)) from None


def demo(args):
    from keras_transformer.data.corpus import english_korean_corpus
    from keras_transformer.recipes.seq2seq import evaluate, progress_verbosity, train

    start = time.monotonic()
    config = _train_config(args, DEMO_CONFIG)
    corpus = english_korean_corpus(seed=config.seed, **DEMO_SIZES)
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON line only.
        result = train(corpus["train"], args.out, corpus["valid"], config)
        print(f"Decoding the test split ({len(corpus['test'])} sentences with (subject, "
              "verb) pairs never seen in training)")
        scores, hypotheses, references = evaluate(result.translator, corpus["test"],
                                                  verbose=progress_verbosity(1))
    for (source, _), hypothesis, reference in list(zip(corpus["test"], hypotheses,
                                                       references))[:5]:
        mark = "ok" if hypothesis == reference else "WRONG"
        print(f"  [{mark}] {source}\n        -> {hypothesis}", file=sys.stderr)
    print(f"Plots and the model are in {os.path.abspath(args.out)}", file=sys.stderr)
    summary = dict(scores, seconds=round(time.monotonic() - start, 1))
    print(json.dumps(summary))
    return 0


def train_command(args):
    from keras_transformer.data.files import load_pairs
    from keras_transformer.recipes.seq2seq import train

    # A chatbot's questions and answers share one vocabulary unless told otherwise.
    defaults = TrainConfig(shared_vocabulary=args.format == "chatbot")
    config = _train_config(args, defaults)
    pairs = load_pairs(args.data, args.format)
    valid = load_pairs(args.valid, args.format) if args.valid else None
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON line only.
        result = train(pairs, args.out, valid, config)
    print(json.dumps(result.metrics))
    return 0


def pretrain_command(args):
    from keras_transformer.data.files import load_texts
    from keras_transformer.recipes.classify import pretrain

    config = _train_config(args, PretrainConfig())
    texts = load_texts(args.data, args.format)
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON line only.
        result = pretrain(texts, args.out, config=config)
    print(json.dumps(result.metrics))
    return 0


def classify(args):
    """Fine-tune with `--data` and `--out`; predict with `--model`."""
    if args.model:
        from keras_transformer.recipes.classify import TextClassifier

        if args.data or args.out or args.pretrained:
            raise InputError("classify: --model predicts; --data, --out and --pretrained "
                             "train (give one or the other)")
        if not os.path.isdir(args.model):
            raise InputError(f"{args.model}: no such model directory")
        classifier = TextClassifier.load(args.model)
        texts = args.text or [line.rstrip("\n") for line in sys.stdin]
        for text, probabilities in zip(texts, classifier.predict_proba(texts)):
            best = int(probabilities.argmax())
            print(f"{classifier.labels[best]}\t{probabilities[best]:.3f}\t{text}", flush=True)
        return 0
    if not (args.data and args.out):
        raise InputError("classify: give --data and --out to train, or --model to predict")
    if args.text:
        raise InputError("classify: TEXT arguments are for --model (prediction)")
    from keras_transformer.data.files import load_labeled
    from keras_transformer.recipes.classify import fine_tune

    config = _train_config(args, ClassifyConfig())
    examples = load_labeled(args.data, args.format)
    if args.pretrained and not os.path.isdir(args.pretrained):
        raise InputError(f"{args.pretrained}: no such pretrained model directory")
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON line only.
        result = fine_tune(examples, args.out, pretrained=args.pretrained, config=config)
    print(json.dumps(result.metrics, ensure_ascii=False))
    return 0


def _load_translator(directory):
    from keras_transformer.serving.translator import Translator

    if not os.path.isdir(directory):
        raise InputError(f"{directory}: no such model directory")
    return Translator.load(directory)


def chat(args):
    options = _generate_options(args)
    translator = _load_translator(args.model)
    if sys.stdin.isatty():
        print("Type a sentence and press Enter; an empty line or Ctrl-D ends.", file=sys.stderr)
        while True:
            try:
                line = input("> ")
            except EOFError:
                break
            if not line.strip():
                break
            print(translator.translate(line, **options), flush=True)
        return 0
    for line in sys.stdin:
        print(translator.translate(line.rstrip("\n"), **options), flush=True)
    return 0


def translate(args):
    options = _generate_options(args)
    translator = _load_translator(args.model)
    for output in translator.translate(args.text, **options):
        print(output)
    return 0


def export(args):
    from keras_transformer.serving.export import EXPORTED_OPTIONS, export_saved_model

    if args.format == "ctranslate2":
        from keras_transformer.serving.ctranslate2 import export_ctranslate2

        print(export_ctranslate2(_load_translator(args.model), args.out, args.quantization))
        return 0
    if args.method == "sample":
        raise InputError("export: a SavedModel decodes with greedy, beam or mmi, not sample")
    options = {name: value for name, value in _generate_options(args).items()
               if name in EXPORTED_OPTIONS}
    translator = _load_translator(args.model)
    print(export_saved_model(translator.model, translator.source_tokenizer,
                             translator.target_tokenizer, args.out, **options))
    return 0


def serve(args):
    try:
        import uvicorn

        from keras_transformer.serving.server import Server, create_app
    except ImportError as error:
        raise InputError(f"serve needs FastAPI and uvicorn ({error.name} is missing): pip "
                         "install 'keras-transformer-kr[serve]'") from None
    from keras_transformer.serving.engines import load_engine

    if not os.path.isdir(args.model):
        raise InputError(f"serve: --model {args.model!r} is not a directory")
    for name in ("max_batch_size", "max_queue"):
        if getattr(args, name) < 1:
            raise InputError(f"serve: --{name.replace('_', '-')} must be at least 1")
    options = _generate_options(args)
    server = Server(lambda: load_engine(args.model, options, args.max_batch_size,
                                        warm_up=not args.no_warm_up),
                    args.max_batch_size, args.max_wait_ms, args.max_queue, args.timeout)
    print(f"Serving {args.model} on http://{args.host}:{args.port}/ (the chat page; the "
          "OpenAI-compatible API under /v1)", file=sys.stderr)
    uvicorn.run(create_app(server), host=args.host, port=args.port, log_level="warning")
    return 0


def _load_saved_model(directory, tags):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizers' ops)

    from keras_transformer.errors import user_errors

    if not os.path.isdir(directory):
        raise InputError(f"{directory}: no such SavedModel directory")
    with user_errors(directory, "cannot load the SavedModel"):
        return tf.saved_model.load(directory, tags=tags)


def saved_model_cli(args):
    """`show` a SavedModel's signatures or `run` one, with the tensorflow-text ops."""
    import numpy as np
    import tensorflow as tf

    loaded = _load_saved_model(args.dir, args.tag_set.split(",") if args.tag_set else None)
    names = [args.signature_def] if args.signature_def else sorted(loaded.signatures)
    for name in names:
        if name not in loaded.signatures:
            raise InputError(f"{args.dir}: no signature {name!r} (it has "
                             f"{sorted(loaded.signatures)})")
    if args.action == "show":
        for name in names:
            signature = loaded.signatures[name]
            print(f"signature_def['{name}']:")
            for kind, specs in (("inputs", signature.structured_input_signature[1]),
                                ("outputs", signature.structured_outputs)):
                for key, spec in sorted(specs.items()):
                    print(f"  {kind}['{key}']: dtype {spec.dtype.name}, shape {spec.shape}")
        return 0
    feeds = {}
    for expression in filter(None, (args.input_exprs or "").split(";")):
        key, _, value = expression.partition("=")
        try:
            feeds[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError) as error:
            raise InputError(f"--input_exprs: {expression!r} is not key=<Python literal> "
                             f"({error})") from None
    signature = loaded.signatures[names[0]]
    specs = signature.structured_input_signature[1]
    if sorted(feeds) != sorted(specs):
        raise InputError(f"--input_exprs: signature {names[0]!r} takes {sorted(specs)}, "
                         f"given {sorted(feeds)}")
    outputs = signature(**{key: tf.constant(value, dtype=specs[key].dtype)
                           for key, value in feeds.items()})
    for key, value in sorted(outputs.items()):
        print(f"Result for output key {key}:\n{np.asarray(value.numpy())}")
    return 0


def build_parser():
    parser = _Parser(
        prog="keras-transformer",
        description="Train and use the Transformer of the Korean TF2 chatbot tutorial.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _training_commands(commands)
    _model_commands(commands)
    for command in commands.choices.values():
        command.add_argument("--verbose", action="store_true",
                             help="also show TensorFlow's start-up and log lines (hidden "
                             "unless TF_CPP_MIN_LOG_LEVEL is set)")
    return parser


def _training_commands(commands):
    """`demo`, `train`, `pretrain` and `classify`: their flags from the configs."""
    demo_parser = commands.add_parser(
        "demo", help="train on the built-in English -> Korean corpus and score it",
        description="Train on the built-in English -> Korean corpus, evaluate on its test "
        "split of unseen (subject, verb) combinations, write plots, print one JSON line.",
    )
    demo_parser.add_argument("--out", default="keras_transformer_demo",
                             help="output directory (default: %(default)s)")
    _config_flags(demo_parser, DEMO_CONFIG)
    demo_parser.set_defaults(run=demo)

    train_parser = commands.add_parser(
        "train", help="train on your data (chatbot CSV or parallel TSV)",
        description="Train on a chatbot CSV (columns Q,A) or a source<TAB>target file. "
        "Re-run the same command to resume an interrupted run.",
    )
    train_parser.add_argument("--data", required=True, help="training file")
    train_parser.add_argument("--format", required=True, choices=("chatbot", "tsv"))
    train_parser.add_argument("--out", required=True, help="output directory")
    train_parser.add_argument("--valid", help="validation file (default: 10%% of --data)")
    train_parser.add_argument(
        "--shared-vocabulary", action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,
        help="one vocabulary for both sides (default: on for chatbot, off for tsv)",
    )
    _config_flags(train_parser, TrainConfig(), skip=("shared_vocabulary",))
    train_parser.set_defaults(run=train_command)

    pretrain_parser = commands.add_parser(
        "pretrain", help="pretrain BERT's encoder (masked LM) on your texts",
        description="Pretrain an encoder with BERT's masked language model on a text file "
        "(one text per line) or a chatbot CSV (its questions and answers). Re-run the same "
        "command to resume an interrupted run.",
    )
    pretrain_parser.add_argument("--data", required=True, help="training file")
    pretrain_parser.add_argument("--format", required=True, choices=("text", "chatbot"))
    pretrain_parser.add_argument("--out", required=True, help="output directory")
    _config_flags(pretrain_parser, PretrainConfig())
    pretrain_parser.set_defaults(run=pretrain_command)

    classify_parser = commands.add_parser(
        "classify", help="train a text classifier (optionally from a pretrained encoder), "
        "or classify texts",
        description="Train: --data FILE --format tsv|chatbot --out DIR [--pretrained DIR] "
        "(tsv: text<TAB>label lines; chatbot: a CSV's Q and label columns). Predict: --model "
        "DIR [TEXT ...] (texts from stdin when none): one 'label<TAB>probability<TAB>text' "
        "line each. Re-run a training to resume it.",
    )
    classify_parser.add_argument("text", nargs="*", metavar="TEXT")
    classify_parser.add_argument("--model", help="classifier directory (predict)")
    classify_parser.add_argument("--data", help="training file")
    classify_parser.add_argument("--format", choices=("tsv", "chatbot"), default="tsv",
                                 help="(default: %(default)s)")
    classify_parser.add_argument("--out", help="output directory")
    classify_parser.add_argument("--pretrained", help="directory written by pretrain "
                                 "(default: train a fresh encoder)")
    _config_flags(classify_parser, ClassifyConfig())
    classify_parser.set_defaults(run=classify)


def _model_commands(commands):
    """`chat`, `translate`, `export` and `saved-model-cli`: they use a trained model."""
    # The commands that use a trained model directory, and how each decodes by default.
    for name, run, help_text, method in (
        ("chat", chat, "answer lines with a trained model", CHAT_METHOD),
        ("translate", translate, "translate the given texts", "greedy"),
        ("export", export, "write a string-in, string-out SavedModel (signature "
         "serving_default: text -> text, token_ids) that decodes as told", "greedy"),
    ):
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument("--model", required=True, help="directory written by train")
        if name == "translate":
            command.add_argument("text", nargs="+", metavar="TEXT")
        if name == "export":
            command.add_argument("--out", required=True, help="output directory (replaced)")
            command.add_argument("--format", choices=("savedmodel", "ctranslate2"),
                                 default="savedmodel",
                                 help="a TensorFlow SavedModel (decodes as the decoding "
                                 "flags say), or a CTranslate2 model with our tokenizers "
                                 "(greedy or beam chosen per call; pip install ctranslate2) "
                                 "(default: %(default)s)")
            command.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                                 help="ctranslate2: how the weights are stored "
                                 "(default: %(default)s)")
        _decoding_flags(command, method)
        command.set_defaults(run=run)

    serve_parser = commands.add_parser(
        "serve", help="serve a model over HTTP: OpenAI-compatible API and a chat page",
        description="Serve a model directory (written by train), an exported SavedModel or a "
        "CTranslate2 export over HTTP: POST /v1/chat/completions, /v1/completions and "
        "/v1/translate, GET /v1/models and /health, and a chat page at /. Needs the serve "
        "extra: pip install 'keras-transformer-kr[serve]'.")
    serve_parser.add_argument("--model", required=True, help="directory written by train, "
                              "a SavedModel or a CTranslate2 export")
    for flag, kind, default, help_text in (
        ("--host", str, "127.0.0.1", "the address to listen on"),
        ("--port", int, 8000, "the port"),
        ("--max-batch-size", int, 64, "most texts decoded in one call; 1 turns batching off"),
        ("--max-wait-ms", float, 5.0, "how long a request waits for others to batch with"),
        ("--max-queue", int, 1024, "most texts waiting; beyond, 503 with Retry-After"),
        ("--timeout", float, 60.0, "seconds a request may wait and decode, then 504"),
    ):
        serve_parser.add_argument(flag, type=kind, default=default,
                                  help=help_text + " (default: %(default)s)")
    serve_parser.add_argument("--no-warm-up", action="store_true",
                              help="answer at once instead of compiling the decoding for "
                              "every batch size first (/health is 503 until then)")
    _decoding_flags(serve_parser, CHAT_METHOD)
    serve_parser.set_defaults(run=serve)

    cli_parser = commands.add_parser(
        "saved-model-cli", help="show or run an exported SavedModel (tensorflow-text ops "
        "registered)",
        description="Like TensorFlow's saved_model_cli show/run, for models whose "
        "tokenizers use tensorflow-text ops (which the stock tool cannot run).",
    )
    cli_parser.add_argument("action", choices=("show", "run"))
    cli_parser.add_argument("--dir", required=True, help="SavedModel directory")
    cli_parser.add_argument("--tag_set", default="serve", help="default: %(default)s")
    cli_parser.add_argument("--signature_def", default=None,
                            help="signature name (show: default all; run: required)")
    cli_parser.add_argument("--input_exprs", default=None,
                            help="run: 'key=<Python literal>;key2=...', e.g. "
                            "'text=[\"I read a book.\"]'")
    cli_parser.set_defaults(run=saved_model_cli)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "action", None) == "run" and not args.signature_def:
        parser.error("saved-model-cli run needs --signature_def")
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend != "tensorflow":
        print(f"{parser.prog} {args.command}: error: the command line runs on TensorFlow; "
              f"KERAS_BACKEND is {backend!r} (unset it or set it to 'tensorflow')",
              file=sys.stderr)
        return 2
    try:
        return args.run(args)
    except InputError as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno is None and error.filename is None:  # not from the system: ours
            return _bug(parser, args)
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resumable = args.command in ("train", "pretrain") or (
            args.command == "classify" and not args.model)
        hint = " (run the same command again to resume)" if resumable else ""
        print(f"{parser.prog} {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    except Exception:  # anything else is ours to fix
        return _bug(parser, args)


def _bug(parser, args):
    """The traceback of the exception being handled, then the bug report: exit 1."""
    traceback.print_exc()
    print(f"{parser.prog} {args.command}: {BUG_REPORT}", file=sys.stderr)
    return 1
