"""Faults: a killed training, interrupted writes, damaged files, unsafe files.

What each fault looks like to a user is listed in `tests/README.md`.
"""

import json
import os
import re
import signal
import subprocess
import sys

import h5py
import keras
import numpy as np
import pytest
from helpers import TINY_TRAIN as TINY

import keras_transformer
import keras_transformer.cli
from keras_transformer import Translator, train
from keras_transformer._files import atomic_path
from keras_transformer.data import english_korean_corpus
from keras_transformer.recipes.callbacks import Backup, BestWeights
from keras_transformer.recipes.seq2seq import read_history

CHILD = os.path.join(os.path.dirname(__file__), "resume_child.py")


def h5_arrays(path):
    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.__setitem__(name, item[()])
                     if isinstance(item, h5py.Dataset) else None)
    return arrays


def run_child(out_dir, *pause):
    return subprocess.Popen([sys.executable, CHILD, str(out_dir), *map(str, pause)],
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_training_killed_mid_epoch_resumes_to_the_same_weights(tmp_path):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    uninterrupted = run_child(whole)
    child = run_child(killed, 1, 2)  # SIGKILL after batch 2 of the second epoch
    try:
        assert child.stdout.readline().strip() == "PAUSED"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert not (killed / "final.weights.h5").exists()
    state = json.loads((killed / "backup" / "state.json").read_text())
    assert state["epoch"] == 1 and not state["finished"]

    resumed = run_child(killed)
    assert resumed.wait(timeout=300) == 0 and uninterrupted.wait(timeout=300) == 0
    final, reference = h5_arrays(killed / "final.weights.h5"), h5_arrays(
        whole / "final.weights.h5")
    assert final.keys() == reference.keys() and any("optimizer" in k for k in final)
    for name, array in reference.items():
        np.testing.assert_array_equal(final[name], array, err_msg=name)
    history, expected = read_history(killed / "history.csv"), read_history(
        whole / "history.csv")
    assert history["epoch"] == [0, 1, 2]
    np.testing.assert_array_equal(history["val_loss"], expected["val_loss"])
    assert not (killed / "backup").exists()
    Translator.load(killed)


@pytest.fixture(scope="module")
def corpus():
    return english_korean_corpus(train_size=96, valid_size=8, test_size=0, seed=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("trained")
    train(corpus["train"], str(out), corpus["valid"], epochs=1, **TINY)
    return out


class Interrupted(Exception):
    pass


def interrupt_after_partial_write(path):
    with open(path, "wb") as f:
        f.write(b"\x89HDF\r\n half a file")
    raise Interrupted


def interrupted_save(self, path, *args, **kwargs):
    interrupt_after_partial_write(path)


def test_an_interrupted_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("old", encoding="utf-8")
    with pytest.raises(Interrupted), atomic_path(path) as temporary:
        interrupt_after_partial_write(temporary)
    assert path.read_text(encoding="utf-8") == "old"
    assert os.listdir(tmp_path) == ["vocab.txt"]


@pytest.mark.slow
def test_an_interrupted_checkpoint_keeps_the_previous_weights(trained, tmp_path, monkeypatch):
    model = Translator.load(trained).model
    best = BestWeights(str(tmp_path / "best.weights.h5"))
    best.set_model(model)
    best.on_epoch_end(0, {"val_loss": 2.0})
    saved = h5_arrays(tmp_path / "best.weights.h5")
    model.set_weights([w * 0 for w in model.get_weights()])
    monkeypatch.setattr(type(model), "save_weights", interrupted_save)
    with pytest.raises(Interrupted):
        best.on_epoch_end(1, {"val_loss": 1.0})
    after = h5_arrays(tmp_path / "best.weights.h5")
    assert all(np.array_equal(after[name], array) for name, array in saved.items())


def test_a_backup_interrupted_before_its_state_file_restores_the_epoch_before(
        trained, tmp_path, monkeypatch):
    model = Translator.load(trained).model
    model.compile("adam", loss=keras_transformer.masked_loss)
    model.optimizer.build(model.trainable_variables)
    backup = Backup(str(tmp_path / "backup"))
    backup.set_model(model)
    backup.on_epoch_end(0)
    kernel = model.trainable_weights[0]
    before = kernel.numpy()
    kernel.assign(before + 1.0)
    monkeypatch.setattr("keras_transformer.recipes.callbacks.write_text",
                        lambda *args: interrupt_after_partial_write(tmp_path / "ignored"))
    with pytest.raises(Interrupted):
        backup.on_epoch_end(1)  # weights of epoch 2 written, the state file not
    monkeypatch.undo()
    assert backup.restore(model) == 1
    np.testing.assert_array_equal(kernel.numpy(), before)


@pytest.mark.slow
def test_an_interrupted_translator_save_leaves_the_previous_model_loadable(
        trained, tmp_path, monkeypatch, corpus):
    directory = tmp_path / "model"
    translator = Translator.load(trained)
    translator.save(directory)
    expected = translator.translate(corpus["valid"][0][0])
    monkeypatch.setattr(type(translator.model), "save", interrupted_save)
    with pytest.raises(Interrupted):
        translator.save(directory)
    monkeypatch.undo()
    assert Translator.load(directory).translate(corpus["valid"][0][0]) == expected
    # A file left by a SIGKILL during a save is ignored, then swept by the next save.
    stray = directory / ".tmp-99999-model.keras"
    stray.write_bytes(b"garbage")
    Translator.load(directory)
    translator.save(directory)
    assert not stray.exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_model_file_names_the_file(trained, tmp_path, damage):
    directory = tmp_path / "model"
    Translator.load(trained).save(directory)
    model = directory / "model.keras"
    data = model.read_bytes()
    model.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(4096),
                       "empty": b""}[damage])
    with pytest.raises(ValueError, match=re.escape(str(model))):
        Translator.load(directory)


@pytest.mark.slow
@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage\n", b"", b"<PAD>\n<SOS>\n",
                                     b"<PAD>\n<SOS>\n<END>\n<UNK>\nsame\nsame\n"])
def test_a_damaged_vocabulary_names_the_file(trained, tmp_path, content):
    directory = tmp_path / "model"
    Translator.load(trained).save(directory)
    (directory / "target_vocab.txt").write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(str(directory / "target_vocab.txt"))):
        Translator.load(directory)


@pytest.mark.slow
@pytest.mark.parametrize("content", ["", "[1, 2]", '{"model": "model.keras"}',
                                     '{"source_tokenizer": 3}', "\x00\x01"])
def test_a_damaged_config_names_the_file(trained, tmp_path, content):
    directory = tmp_path / "model"
    Translator.load(trained).save(directory)
    (directory / "config.json").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(str(directory / "config.json"))):
        Translator.load(directory)


def test_a_damaged_backup_names_the_file(tmp_path, corpus):
    out = tmp_path / "run"
    (out / "backup").mkdir(parents=True)
    for name in ("source_vocab.txt", "target_vocab.txt"):
        (out / name).write_text("<PAD>\n<SOS>\n<END>\n<UNK>\n", encoding="utf-8")
    (out / "backup" / "state.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(str(out / "backup" / "state.json"))):
        train(corpus["train"], str(out), corpus["valid"], epochs=1, **TINY)


def test_loading_keeps_safe_mode_and_refuses_code_in_a_model_file(trained, tmp_path):
    directory = tmp_path / "model"
    Translator.load(trained).save(directory)
    inputs = keras.Input((3,))
    unsafe = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    unsafe.save(directory / "model.keras")
    with pytest.raises(ValueError, match="model.keras: cannot load the model.*safe_mode"):
        Translator.load(directory)


def test_the_package_never_unpickles_or_evaluates_user_data():
    root = os.path.dirname(keras_transformer.__file__)
    forbidden = re.compile(r"\bimport pickle\b|\bpickle\.|\beval\(|\bexec\(|safe_mode=False"
                           r"|allow_pickle=True|\bmarshal\b|\bshelve\b")
    for directory, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    source = f.read()
                assert not forbidden.search(source), os.path.join(directory, name)


def write_tsv(path, pairs):
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs),
                    encoding="utf-8")
    return str(path)


def one_line_error(capsys, status):
    assert status == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.parametrize(("flags", "message"), [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--epochs", "many"], "invalid int value: 'many'"),
    (["--tokenizer", "bpe"], "invalid choice: 'bpe'"),
    (["--mixed-precision", "fp8"], "invalid choice: 'fp8'"),
])
def test_cli_rejects_a_bad_command_line_in_one_line(tmp_path, capsys, flags, message):
    data = write_tsv(tmp_path / "data.tsv", [("a b", "c d")] * 3)
    with pytest.raises(SystemExit) as exit_info:
        keras_transformer.cli.main(["train", "--data", data, "--format", "tsv", "--out",
                                    str(tmp_path / "out"), *flags])
    line = one_line_error(capsys, exit_info.value.code)
    assert message in line and "--help" in line


@pytest.mark.parametrize(("content", "flags", "message"), [
    ("", [], "data.tsv: the file is empty|data.tsv: holds no sentence pairs"),
    ("\n\n", [], "data.tsv: holds no sentence pairs"),
    ("only one column\n", [], r"data.tsv:1: expected 'source<TAB>target'"),
    ("a\tb\nc\td\ne\tf\n", ["--epochs", "0"], "epochs"),
    ("a\tb\nc\td\ne\tf\n", ["--static-shape"], "do not fill one batch of 64"),
    ("a\tb\nc\td\ne\tf\n", ["--strategy", "multi_worker"], "TF_CONFIG"),
    ("a\tb\nc\td\ne\tf\n", ["--num-heads", "3"], "num_heads"),
])
def test_cli_reports_bad_data_and_values_in_one_line(tmp_path, capsys, monkeypatch, content,
                                                     flags, message):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    (tmp_path / "data.tsv").write_text(content, encoding="utf-8")
    status = keras_transformer.cli.main(["train", "--data", str(tmp_path / "data.tsv"),
                                         "--format", "tsv", "--out", str(tmp_path / "out"),
                                         "--tokenizer", "word", *flags])
    assert re.search(message, one_line_error(capsys, status))


@pytest.mark.slow
def test_cli_trains_on_less_than_one_batch_with_no_time_at_all(tmp_path, capsys):
    data = write_tsv(tmp_path / "data.tsv", [("I read", "나는 읽는다"), ("you run", "너는 뛴다"),
                                             ("we eat", "우리는 먹는다")])
    status = keras_transformer.cli.main(
        ["train", "--data", data, "--format", "tsv", "--out", str(tmp_path / "out"),
         "--tokenizer", "word", "--num-layers", "1", "--d-model", "8", "--num-heads", "2",
         "--dff", "8", "--epochs", "3", "--time-budget", "0"])
    assert status == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert metrics["stopped_by_time_budget"] and metrics["epochs"] == 1
    Translator.load(tmp_path / "out")


def test_cli_says_it_runs_on_tensorflow_under_another_backend(capsys, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    status = keras_transformer.cli.main(["translate", "--model", "anywhere", "hello"])
    assert "the command line runs on TensorFlow; KERAS_BACKEND is 'jax'" in one_line_error(
        capsys, status)


def test_cli_names_a_damaged_model_directory(trained, tmp_path, capsys):
    directory = tmp_path / "model"
    Translator.load(trained).save(directory)
    (directory / "source_vocab.txt").write_bytes(b"\xff\xfe")
    status = keras_transformer.cli.main(["translate", "--model", str(directory), "hello"])
    assert "source_vocab.txt: not a keras_transformer vocabulary" in one_line_error(capsys,
                                                                                    status)


@pytest.mark.slow
def test_cli_usage_error_exits_non_zero_without_a_traceback():
    result = subprocess.run([sys.executable, "-m", "keras_transformer", "translate"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and result.stdout == ""
    # TensorFlow's own C++ start-up lines (absl, CUDA probing) are not ours.
    lines = [line for line in result.stderr.strip().splitlines()
             if not re.match(r"WARNING: All log messages|[EWI]\d{4} ", line)]
    assert lines == [("keras-transformer translate: error: the following arguments are "
                      "required: --model, TEXT (see keras-transformer translate --help)")]
