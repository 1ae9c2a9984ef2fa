"""Command line: `python -m keras_transformer {demo,train,chat,translate}`.

- `demo`: train on the built-in English -> Korean corpus, score the held-out
  test split, print samples, write plots, end with one JSON line.
- `train`: train on a chatbot CSV or a parallel TSV; writes a model directory.
- `chat`: answer lines from a model directory (interactive on a terminal;
  otherwise exactly one answer line per input line on stdout).
- `translate`: one output line per TEXT argument.
- `export`: a string-in, string-out SavedModel of a model directory.
- `saved-model-cli`: TensorFlow's `saved_model_cli` with the tensorflow-text
  ops registered, so that `run` works on exported models.

Messages and progress go to stderr (Keras' training bars to stdout, except in
`chat` and `translate`, whose stdout holds answers only). A user mistake (a
missing file, a malformed line, a bad value) ends with one line on stderr and
exit status 2.
"""

import argparse
import contextlib
import inspect
import json
import os
import sys
import time

DEMO_SIZES = {"train_size": 12000, "valid_size": 500, "test_size": 1000}


class UserError(Exception):
    """A mistake in the command line or its files: reported in one line."""


class _Parser(argparse.ArgumentParser):
    """`argparse` that reports a bad command line in one line, not a usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _model_flags(parser, defaults):
    group = parser.add_argument_group("model (the tutorial's kargs)")
    group.add_argument("--num-layers", type=int, default=defaults["num_layers"])
    group.add_argument("--d-model", type=int, default=defaults["d_model"])
    group.add_argument("--num-heads", type=int, default=defaults["num_heads"])
    group.add_argument("--dff", type=int, default=defaults["dff"])
    group.add_argument("--rate", type=float, default=defaults["rate"], help="dropout rate")
    group.add_argument("--max-length", type=int, default=defaults["max_length"],
                       help="maximum_position_encoding; longer sentences are cut")
    group.add_argument("--norm-first", action="store_true", help="pre-LayerNorm blocks")
    group.add_argument("--activation", choices=("relu", "gelu"), default="relu")


def _training_flags(parser, defaults):
    group = parser.add_argument_group("training")
    group.add_argument("--tokenizer", choices=("wordpiece", "word", "char"),
                       default=defaults["tokenizer"])
    group.add_argument("--vocab-size", type=int, default=defaults["vocab_size"],
                       help="largest vocabulary per side")
    group.add_argument("--batch-size", type=int, default=defaults["batch_size"])
    group.add_argument("--epochs", type=int, default=defaults["epochs"])
    group.add_argument("--patience", type=int, default=defaults["patience"],
                       help="early stopping patience (epochs without a better val_loss)")
    group.add_argument("--warmup-steps", type=int, default=None,
                       help="learning-rate warm-up (default: a tenth of all steps, <= 4000)")
    group.add_argument("--label-smoothing", type=float, default=defaults["label_smoothing"])
    group.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                       help="stop training after SECONDS, then evaluate and save")
    group.add_argument("--seed", type=int, default=defaults["seed"])
    group.add_argument("--jit-compile", action="store_true", help="XLA-compile the train step")
    group.add_argument("--mixed-precision", choices=("bf16", "fp16"), default=None,
                       help="mixed_bfloat16 or mixed_float16 (with loss scaling) training")
    group.add_argument("--static-shape", action="store_true",
                       help="pad every batch to --max-length and drop the last smaller one "
                       "(one shape to compile: TPUs, XLA)")
    group.add_argument("--strategy", choices=("mirrored", "multi_worker", "tpu"), default=None,
                       help="tf.distribute strategy; --batch-size is the global batch "
                       "(multi_worker: run one process per worker, each with its TF_CONFIG)")


def _decoding_flags(parser):
    group = parser.add_argument_group("decoding")
    group.add_argument("--method", choices=("greedy", "beam", "sample"), default="greedy")
    group.add_argument("--beam-size", type=int, default=4)
    group.add_argument("--temperature", type=float, default=1.0)
    group.add_argument("--top-k", type=int, default=0)
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--seed", type=int, default=None, help="sampling seed")


def _train_options(args):
    return {
        "tokenizer": args.tokenizer,
        "vocab_size": args.vocab_size,
        "num_layers": args.num_layers,
        "d_model": args.d_model,
        "num_heads": args.num_heads,
        "dff": args.dff,
        "rate": args.rate,
        "max_length": args.max_length,
        "model_options": {"norm_first": args.norm_first, "activation": args.activation},
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "patience": args.patience,
        "warmup_steps": args.warmup_steps,
        "label_smoothing": args.label_smoothing,
        "time_budget": args.time_budget,
        "seed": args.seed,
        "jit_compile": args.jit_compile,
        "mixed_precision": args.mixed_precision,
        "static_shape": args.static_shape,
        "strategy": args.strategy,
    }


def _generate_options(args):
    return {
        "method": args.method,
        "beam_size": args.beam_size,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": args.seed,
    }


def demo(args):
    from keras_transformer.data.corpus import english_korean_corpus
    from keras_transformer.recipe import evaluate, progress_verbosity, train

    start = time.monotonic()
    corpus = english_korean_corpus(seed=args.seed, **DEMO_SIZES)
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON line only.
        result = train(corpus["train"], args.out, corpus["valid"], **_train_options(args))
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
    from keras_transformer.recipe import train

    pairs = load_pairs(args.data, args.format)
    valid = load_pairs(args.valid, args.format) if args.valid else None
    shared = args.format == "chatbot" if args.shared_vocabulary is None else args.shared_vocabulary
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON line only.
        result = train(pairs, args.out, valid, shared_vocabulary=shared, **_train_options(args))
    print(json.dumps(result.metrics))
    return 0


def _load_translator(directory):
    from keras_transformer.translator import Translator

    if not os.path.isdir(directory):
        raise UserError(f"{directory}: no such model directory")
    return Translator.load(directory)


def chat(args):
    translator = _load_translator(args.model)
    options = _generate_options(args)
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
    translator = _load_translator(args.model)
    for output in translator.translate(args.text, **_generate_options(args)):
        print(output)
    return 0


def export(args):
    from keras_transformer.export import export_saved_model

    translator = _load_translator(args.model)
    print(export_saved_model(translator.model, translator.source_tokenizer,
                             translator.target_tokenizer, args.out, method=args.method,
                             beam_size=args.beam_size))
    return 0


def saved_model_cli(args):
    import tensorflow_text  # noqa: F401  (registers the tokenizers' ops)
    from tensorflow.python.tools import saved_model_cli as tool

    sys.argv = ["saved_model_cli", *args.arguments]
    tool.main()  # absl's app.run: exits the process with the tool's status


def _train_defaults():
    """The keyword defaults of `keras_transformer.train`, the one place they live."""
    from keras_transformer.recipe import train

    return {name: parameter.default
            for name, parameter in inspect.signature(train).parameters.items()
            if parameter.default is not inspect.Parameter.empty}


def build_parser():
    defaults = _train_defaults()
    parser = _Parser(
        prog="keras-transformer",
        description="Train and use the Transformer of the Korean TF2 chatbot tutorial.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo_parser = commands.add_parser(
        "demo", help="train on the built-in English -> Korean corpus and score it",
        description="Train on the built-in English -> Korean corpus, evaluate on its test "
        "split of unseen (subject, verb) combinations, write plots, print one JSON line.",
    )
    _model_flags(demo_parser, dict(defaults, **DEMO_DEFAULTS))
    _training_flags(demo_parser, dict(defaults, **DEMO_DEFAULTS))
    demo_parser.add_argument("--out", default="keras_transformer_demo",
                             help="output directory (default: %(default)s)")
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
        "--shared-vocabulary", action=argparse.BooleanOptionalAction, default=None,
        help="one vocabulary for both sides (default: on for chatbot, off for tsv)",
    )
    _model_flags(train_parser, defaults)
    _training_flags(train_parser, defaults)
    train_parser.set_defaults(run=train_command)

    chat_parser = commands.add_parser("chat", help="answer lines with a trained model")
    chat_parser.add_argument("--model", required=True, help="directory written by train")
    _decoding_flags(chat_parser)
    chat_parser.set_defaults(run=chat)

    translate_parser = commands.add_parser("translate", help="translate the given texts")
    translate_parser.add_argument("--model", required=True, help="directory written by train")
    translate_parser.add_argument("text", nargs="+", metavar="TEXT")
    _decoding_flags(translate_parser)
    translate_parser.set_defaults(run=translate)

    export_parser = commands.add_parser(
        "export", help="write a string-in, string-out SavedModel",
        description="Export a model directory as a SavedModel with signature "
        "serving_default: text (string) -> text, token_ids.",
    )
    export_parser.add_argument("--model", required=True, help="directory written by train")
    export_parser.add_argument("--out", required=True, help="SavedModel directory (replaced)")
    export_parser.add_argument("--method", choices=("greedy", "beam"), default="greedy")
    export_parser.add_argument("--beam-size", type=int, default=4)
    export_parser.set_defaults(run=export)

    cli_parser = commands.add_parser(
        "saved-model-cli", add_help=False,
        help="TensorFlow's saved_model_cli with the tensorflow-text ops registered",
    )
    cli_parser.add_argument("arguments", nargs=argparse.REMAINDER)
    cli_parser.set_defaults(run=saved_model_cli)
    return parser


DEMO_DEFAULTS = {
    "tokenizer": "word",
    "vocab_size": 1000,
    "num_layers": 2,
    "d_model": 128,
    "num_heads": 4,
    "dff": 256,
    "max_length": 16,
    "epochs": 8,
}


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (UserError, ValueError, OSError) as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = " (run the same command again to resume)" if args.command == "train" else ""
        print(f"{parser.prog} {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
