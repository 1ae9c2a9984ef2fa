"""The run harness: model directories saved atomically and read with their
format checked, and the error contract of every command: a user's mistake is
one line and exit status 2, a bug of ours its traceback, the bug line and 1;
and the first line a user reads is ours."""

import errno
import json
import os
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer import cli
from keras_transformer.errors import InputError
from keras_transformer.models.bert import MaskedLanguageModel, SequenceClassifier, bert_encoder
from keras_transformer.recipes.classify import (
    PRETRAINED,
    VOCAB_FILE,
    TextClassifier,
    load_pretrained,
)
from keras_transformer.recipes.harness import FORMAT_VERSION, ModelDirectory
from keras_transformer.text import WordPieceTokenizer, WordTokenizer

TEXTS = ["the cat sees the dog", "a bus and a car", "the dog runs", "a car stops"]
SIZES = {"num_layers": 1, "d_model": 16, "num_heads": 2, "dff": 32}


class Interrupted(Exception):
    """A kill in the middle of writing a file."""


def interrupted_save(self, path, *args, **kwargs):
    with open(path, "wb") as f:
        f.write(b"half a model")
    raise Interrupted


def save_translator(directory):
    tokenizer = WordTokenizer.from_texts(TEXTS, verbose=0)
    model = kt.Transformer(**SIZES, input_vocab_size=tokenizer.vocab_size,
                           target_vocab_size=tokenizer.vocab_size, maximum_position_encoding=8)
    model.build(((None, 8), (None, 8)))
    translator = kt.Translator(model, tokenizer, tokenizer)
    translator.save(directory)
    return lambda: kt.Translator.load(directory).translate(TEXTS), type(model)


def encoder_tokenizer():
    return WordPieceTokenizer.from_texts(TEXTS, 200, encoder_tokens=True, verbose=0)


def save_classifier(directory):
    tokenizer = encoder_tokenizer()
    model = SequenceClassifier(bert_encoder(**SIZES, input_vocab_size=tokenizer.vocab_size,
                                            maximum_position_encoding=12), 2)
    model.build((None, None))
    TextClassifier(model, tokenizer, ["animal", "vehicle"]).save(directory)
    return lambda: TextClassifier.load(directory).predict_proba(TEXTS), type(model)


def save_pretrained(directory):
    tokenizer = encoder_tokenizer()
    model = MaskedLanguageModel(**SIZES, input_vocab_size=tokenizer.vocab_size,
                                maximum_position_encoding=12)
    model.build((None, None))
    ModelDirectory(directory, PRETRAINED).save(model, {"tokenizer": (tokenizer, VOCAB_FILE)})

    def outputs():
        mlm, tokenizer = load_pretrained(directory)
        return mlm(tokenizer.tokenize(TEXTS).to_tensor(shape=[None, 12]))

    return outputs, type(model)


SAVES = {"translator": save_translator, "classifier": save_classifier,
         "pretrained": save_pretrained}


@pytest.mark.slow
@pytest.mark.parametrize("kind", SAVES)
def test_an_interrupted_save_leaves_the_previous_model_directory_whole(kind, tmp_path,
                                                                       monkeypatch):
    directory = str(tmp_path / kind)
    outputs, model_class = SAVES[kind](directory)
    before = outputs()
    files = sorted(os.listdir(directory))
    monkeypatch.setattr(model_class, "save", interrupted_save)
    with pytest.raises(Interrupted):
        SAVES[kind](directory)
    monkeypatch.undo()
    assert sorted(os.listdir(directory)) == files  # no half-written file in sight
    np.testing.assert_array_equal(np.asarray(outputs()), np.asarray(before))


def translator_with_config(directory, **entries):
    """A saved translator whose `config.json` has `entries` changed: its config path."""
    save_translator(str(directory))
    path = directory / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(dict(config, **entries)), encoding="utf-8")
    return re.escape(str(path))


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, "1", -1])
def test_the_format_version_of_a_model_directory_is_checked(version, tmp_path):
    path = translator_with_config(tmp_path / "model", format_version=version)
    message = "newer keras-transformer" if version == FORMAT_VERSION + 1 else "format_version"
    with pytest.raises(InputError, match=f"{path}.*{message}"):
        kt.Translator.load(str(tmp_path / "model"))


@pytest.mark.parametrize("entry", [{"kind": "bpe"}, {"lower_case": True}, 3,
                                   {"kind": "word", "casing": "lower"}])
def test_a_damaged_tokenizer_entry_is_named(entry, tmp_path):
    path = translator_with_config(tmp_path / "model", source_tokenizer=entry)
    with pytest.raises(InputError, match=f"{path}.*'source_tokenizer'"):
        kt.Translator.load(str(tmp_path / "model"))


def test_a_classifier_written_before_format_versions_loads(tmp_path):
    directory = tmp_path / "clf"
    outputs, _ = save_classifier(str(directory))
    expected = outputs()
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    legacy = {"tokenizer": {key: value for key, value in config["tokenizer"].items()
                            if key != "vocabulary"}, "labels": config["labels"]}
    (directory / "config.json").write_text(json.dumps(legacy), encoding="utf-8")
    np.testing.assert_array_equal(outputs(), expected)


def test_a_model_of_another_kind_is_named(tmp_path):
    save_pretrained(str(tmp_path / "mlm"))
    with pytest.raises(InputError, match="holds a MaskedLanguageModel, not the "
                       "SequenceClassifier of a classifier"):
        TextClassifier.load(str(tmp_path / "mlm"))


def simulated_bug(*args, **kwargs):
    raise RuntimeError("simulated bug")


def simulated_type_error(*args, **kwargs):
    raise TypeError("simulated bug")


# Called by every model's constructor, so by `load_model` too: a bug there is ours.
IN_OUR_CODE = "keras_transformer._config.check_model_args"


@pytest.mark.parametrize("error", [simulated_bug, simulated_type_error])
@pytest.mark.parametrize("kind", SAVES)
def test_a_bug_of_ours_while_loading_is_not_reported_as_a_damaged_file(kind, error, tmp_path,
                                                                       monkeypatch):
    """Keras re-raises a constructor's `TypeError` as its own: still ours."""
    outputs, _ = SAVES[kind](str(tmp_path / kind))
    monkeypatch.setattr(IN_OUR_CODE, error)
    with pytest.raises(Exception, match="simulated bug") as info:
        outputs()
    assert not isinstance(info.value, InputError)


class AfterEpoch(keras.callbacks.Callback):
    def __init__(self, epoch, action):
        super().__init__()
        self.epoch, self.action = epoch, action

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            self.action()


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A `train` run interrupted after its second epoch, and its arguments."""
    out = tmp_path_factory.mktemp("interrupted") / "run"
    pairs = [(text, text) for text in TEXTS] * 8
    arguments = dict(SIZES, tokenizer="word", max_length=8, batch_size=8, verbose=0,
                     epochs=3, train_pairs=pairs, valid_pairs=pairs, out_dir=str(out))

    def interrupt(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kt.train(**arguments, callbacks=[AfterEpoch(1, interrupt)])
    return out, arguments


def interrupted_run(interrupted, out):
    """A copy of the interrupted run in `out`: the arguments that resume it."""
    shutil.copytree(interrupted[0], out)
    return dict(interrupted[1], out_dir=str(out))


@pytest.mark.slow
@pytest.mark.parametrize(("name", "content"), [
    ("backup/state.json", '{"epoch": 1}'),
    ("backup/state.json", '{"epoch": 1, "finished": false, "weights": 3, "seed_states": []}'),
    ("history.csv", "epoch,loss\n0,not a number\n"),
])
def test_a_damaged_file_of_an_interrupted_run_is_named(interrupted, name, content, tmp_path):
    arguments = interrupted_run(interrupted, tmp_path / "run")
    (tmp_path / "run" / name).write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(str(tmp_path / "run" / name))):
        kt.train(**arguments)


@pytest.mark.slow
def test_a_bug_of_ours_while_resuming_is_not_reported_as_a_damaged_backup(interrupted, tmp_path,
                                                                         monkeypatch):
    arguments = interrupted_run(interrupted, tmp_path / "run")
    monkeypatch.setattr("keras_transformer._compat.seed_states", simulated_bug)
    with pytest.raises(RuntimeError, match="simulated bug"):
        kt.train(**arguments)


# --- the command line -----------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    save_translator(str(root / "translator"))
    save_classifier(str(root / "classifier"))
    (root / "data.tsv").write_text("".join(f"{t}\t{t}\n" for t in TEXTS * 4), encoding="utf-8")
    (root / "labels.tsv").write_text("".join(f"{t}\t{i % 2}\n" for i, t in enumerate(TEXTS * 4)),
                                     encoding="utf-8")
    (root / "texts.txt").write_text("\n".join(TEXTS * 4), encoding="utf-8")
    return root


def command(name, root):
    """A command line of each kind, reading the files of `model_dirs`."""
    out = str(root / f"out-{name}")
    return {
        "demo": ["demo", "--out", out, "--epochs", "1"],
        "train": ["train", "--data", f"{root}/data.tsv", "--format", "tsv", "--out", out,
                  "--tokenizer", "word"],
        "pretrain": ["pretrain", "--data", f"{root}/texts.txt", "--format", "text", "--out",
                     out],
        "classify": ["classify", "--data", f"{root}/labels.tsv", "--out", out],
        "classify --model": ["classify", "--model", f"{root}/classifier", "a cat"],
        "translate": ["translate", "--model", f"{root}/translator", "a cat"],
        "chat": ["chat", "--model", f"{root}/translator"],
        "export": ["export", "--model", f"{root}/translator", "--out", out],
        "saved-model-cli": ["saved-model-cli", "show", "--dir", f"{root}/translator"],
    }[name]


# Where a bug of ours is simulated in each command.
BUGS = {
    "demo": "keras_transformer.data.corpus.english_korean_corpus",
    "train": "keras_transformer.recipes.seq2seq._build_model",
    "pretrain": "keras_transformer.recipes.classify._compile",
    "classify": "keras_transformer.recipes.classify._compile",
    "classify --model": IN_OUR_CODE,  # while loading the model directory
    "translate": IN_OUR_CODE,
    "chat": IN_OUR_CODE,
    "export": "keras_transformer.serving.export.export_saved_model",
    "saved-model-cli": "keras_transformer.cli._load_saved_model",
}


def run(args, capsys, monkeypatch, stdin="a cat\n"):
    monkeypatch.setattr("sys.stdin", _Lines(stdin))
    status = cli.main(args)
    captured = capsys.readouterr()
    return status, captured.err


class _Lines(list):
    """A non-terminal stdin."""

    def __init__(self, text):
        super().__init__(text.splitlines(keepends=True))

    def isatty(self):
        return False


@pytest.mark.parametrize("name", BUGS)
def test_every_command_reports_a_bug_of_ours_with_its_traceback(name, model_dirs, capsys,
                                                                monkeypatch):
    monkeypatch.setattr(BUGS[name], simulated_bug)
    status, err = run(command(name, model_dirs), capsys, monkeypatch)
    assert status == 1, err
    assert "Traceback" in err and "RuntimeError: simulated bug" in err
    assert err.strip().splitlines()[-1].endswith(cli.BUG_REPORT)


@pytest.mark.parametrize(("name", "mistake", "message"), [
    ("demo", ["--epochs", "many"], "invalid int value: 'many'"),
    ("train", ["--data", "nowhere.tsv"], "nowhere.tsv: no such file"),
    ("pretrain", ["--mask-rate", "2"], "mask_rate"),
    ("classify", ["--data", "nowhere.tsv"], "nowhere.tsv: no such file"),
    ("classify --model", ["--model", "nowhere"], "nowhere: no such model directory"),
    ("translate", ["--beam-size", "0"], "beam_size"),
    ("chat", ["--model", "DAMAGED"], "model.keras: cannot load the model"),
    ("export", ["--model", "nowhere"], "nowhere: no such model directory"),
    ("saved-model-cli", ["--dir", "DAMAGED"], "cannot load the SavedModel"),
])
def test_every_command_reports_a_mistake_in_one_line(name, mistake, message, model_dirs,
                                                     tmp_path, capsys, monkeypatch):
    damaged = tmp_path / "damaged"
    save_translator(str(damaged))
    (damaged / "model.keras").write_bytes(b"not a zip file")
    args = command(name, model_dirs) + [str(damaged) if m == "DAMAGED" else m
                                        for m in mistake]
    try:
        status, err = run(args, capsys, monkeypatch)
    except SystemExit as exit:  # argparse
        status, err = exit.code, capsys.readouterr().err
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and message in lines[0], err


def raising(error):
    def raise_it(*args, **kwargs):
        raise error

    return raise_it


def test_an_os_error_is_the_users_when_the_system_raised_it(model_dirs, capsys, monkeypatch):
    monkeypatch.setattr("keras_transformer.serving.translator.Translator.translate",
                        raising(OSError("not from the system")))
    status, err = run(command("translate", model_dirs), capsys, monkeypatch)
    assert status == 1 and "Traceback" in err
    monkeypatch.setattr("keras_transformer.serving.translator.Translator.translate",
                        raising(OSError(errno.ENOSPC, "No space left on device")))
    status, err = run(command("translate", model_dirs), capsys, monkeypatch)
    assert status == 2 and "No space left on device" in err and "Traceback" not in err
    monkeypatch.setattr("keras_transformer.serving.translator.Translator.translate",
                        lambda *args, **kwargs: open(model_dirs / "missing.txt"))
    status, err = run(command("translate", model_dirs), capsys, monkeypatch)
    assert status == 2 and "missing.txt" in err and "Traceback" not in err


def start(*flags, **env):
    """`python -m keras_transformer translate` on a missing model: exit code, stderr lines."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "translate", "--model", "nowhere", "hi",
         *flags], capture_output=True, text=True, timeout=120, env=dict(environment, **env))
    return result.returncode, result.stderr.strip().splitlines()


@pytest.mark.slow
def test_the_first_line_a_user_reads_is_ours():
    assert start() == (2, ["keras-transformer translate: error: nowhere: no such model "
                           "directory"])


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "env"), [(["--verbose"], {}),
                                            ([], {"TF_CPP_MIN_LOG_LEVEL": "0"})])
def test_verbose_or_the_users_log_level_shows_tensorflows_lines(flags, env):
    status, lines = start(*flags, **env)
    assert status == 2 and len(lines) > 1 and lines[-1].endswith("no such model directory")
