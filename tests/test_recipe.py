"""The training recipe, the translator directory and the command line, end to end."""

import csv
import io
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from conftest import TINY_TRAIN as TINY
from conftest import AtBatch
from keras_transformer import Translator, cli, train
from keras_transformer.data import english_korean_corpus
from keras_transformer.plotting import plot_attention, plot_history

TINY_FLAGS = ["--num-layers", "1", "--d-model", "16", "--num-heads", "2", "--dff", "32",
              "--max-length", "16", "--batch-size", "32", "--epochs", "2"]


@pytest.fixture(scope="module")
def corpus():
    return english_korean_corpus(train_size=160, valid_size=16, test_size=0, seed=1)


@pytest.fixture(scope="module")
def chatbot_dir(tmp_path_factory, corpus):
    """A model trained by `keras-transformer train` on a chatbot CSV."""
    root = tmp_path_factory.mktemp("chatbot")
    data = root / "ChatBotData.csv"
    with open(data, "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.writer(f)
        writer.writerow(["Q", "A", "label"])
        for question, answer in corpus["train"]:
            writer.writerow([question, answer, 0])
    out = root / "model"
    stdout = io.StringIO()
    sys_stdout, sys.stdout = sys.stdout, stdout
    try:
        status = cli.main(["train", "--data", str(data), "--format", "chatbot", "--out",
                           str(out), "--tokenizer", "word", *TINY_FLAGS])
    finally:
        sys.stdout = sys_stdout
    assert status == 0
    return out, json.loads(stdout.getvalue().strip().splitlines()[-1])


def test_cli_train_writes_a_reloadable_directory(chatbot_dir):
    out, metrics = chatbot_dir
    for name in ("model.keras", "source_vocab.txt", "target_vocab.txt", "config.json",
                 "best.weights.h5", "history.csv", "metrics.json", "history.png",
                 "attention.png", "logs"):
        assert (out / name).exists(), name
    assert not (out / "backup").exists()  # removed after a finished run
    assert set(metrics) >= {"bleu", "chrf", "exact_match", "epochs"}
    assert metrics["epochs"] == 2
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["source_tokenizer"]["kind"] == "word"
    # chatbot data: one vocabulary shared by questions and answers.
    assert (out / "source_vocab.txt").read_text() == (out / "target_vocab.txt").read_text()


def test_reloaded_translator_translates_like_the_trained_one(chatbot_dir, corpus):
    out, _ = chatbot_dir
    translator = Translator.load(out)
    sources = [source for source, _ in corpus["valid"][:5]]
    outputs = translator.translate(sources)
    assert len(outputs) == 5 and all(isinstance(text, str) for text in outputs)
    assert translator.translate(sources[0]) == outputs[0]
    again = Translator(keras.models.load_model(out / "model.keras"),
                       translator.source_tokenizer, translator.target_tokenizer)
    assert again.translate(sources) == outputs


def test_cli_translate_prints_one_line_per_text(chatbot_dir, corpus, capsys):
    out, _ = chatbot_dir
    texts = [source for source, _ in corpus["valid"][:3]]
    assert cli.main(["translate", "--model", str(out), *texts]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[-1] == "" and lines[:-1] == Translator.load(out).translate(texts)


def test_cli_chat_answers_each_stdin_line_on_stdout(chatbot_dir, corpus):
    """A real subprocess: stdout must hold exactly the answers, logs go to stderr."""
    out, _ = chatbot_dir
    questions = [corpus["valid"][0][0], "", "완전히 새로운 문장 🍕"]
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "chat", "--model", str(out)],
        input="\n".join(questions) + "\n", capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), check=False,
    )
    assert result.returncode == 0, result.stderr
    answers = result.stdout.split("\n")
    assert answers[-1] == "" and len(answers) - 1 == len(questions)
    assert answers[0] == Translator.load(out).translate(questions[0])


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["train", "--data", str(tmp_path / "nope.csv"), "--format", "chatbot",
                     "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.csv: no such file" in err[0]
    assert cli.main(["chat", "--model", str(tmp_path / "missing")]) == 2
    assert "no such model directory" in capsys.readouterr().err


def interrupt():
    raise KeyboardInterrupt


class EpochRecorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)


def test_interrupted_training_resumes_where_it_stopped(tmp_path, corpus):
    out = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        train(corpus["train"], out, corpus["valid"], epochs=3, callbacks=[AtBatch(1, 2, interrupt)],
              **TINY)
    assert os.path.isdir(os.path.join(out, "backup"))
    vocabulary_path = os.path.join(out, "target_vocab.txt")
    with open(vocabulary_path, encoding="utf-8") as f:
        vocabulary = f.read()
    recorder = EpochRecorder()
    result = train(corpus["train"], out, corpus["valid"], epochs=3, callbacks=[recorder],
                   **TINY)
    assert recorder.epochs == [1, 2]  # epoch 0 finished before the crash and is not redone
    assert result.metrics["epochs"] == 3 and len(result.history["val_loss"]) == 3
    with open(vocabulary_path, encoding="utf-8") as f:
        assert f.read() == vocabulary
    assert not os.path.isdir(os.path.join(out, "backup"))


def test_time_budget_stops_early_and_still_saves(tmp_path, corpus):
    out = tmp_path / "budget"
    result = train(corpus["train"], str(out), corpus["valid"], epochs=50, time_budget=0,
                   **TINY)
    assert result.metrics["stopped_by_time_budget"] and result.metrics["epochs"] == 1
    assert (out / "model.keras").exists() and (out / "metrics.json").exists()
    Translator.load(out)


def test_train_checks_arguments(tmp_path, corpus):
    with pytest.raises(ValueError, match="d_model"):
        train(corpus["train"], str(tmp_path), d_model=0)
    with pytest.raises(ValueError, match="time_budget"):
        train(corpus["train"], str(tmp_path), time_budget=-1)
    with pytest.raises(ValueError, match="at least 2"):
        train(corpus["train"][:1], str(tmp_path))


def test_translator_load_names_the_broken_file(chatbot_dir, tmp_path):
    out, _ = chatbot_dir
    broken = tmp_path / "broken"
    broken.mkdir()
    with pytest.raises(ValueError, match="config.json: no such file"):
        Translator.load(broken)
    (broken / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        Translator.load(broken)
    (broken / "config.json").write_text((out / "config.json").read_text(), encoding="utf-8")
    with pytest.raises(ValueError, match="source_vocab.txt: no such file"):
        Translator.load(broken)


def test_plots_have_titles_and_labels():
    figure = plot_history({"loss": [2.0, 1.0], "val_loss": [2.5, 1.5],
                           "masked_accuracy": [0.5, 0.7]})
    for axis in figure.axes:
        assert axis.get_title() and axis.get_xlabel() == "epoch" and axis.get_ylabel()
    figure = plot_attention(np.full((2, 3, 4), 0.25), list("abcd"), ["가", "나", "<END>"])
    shown = [axis for axis in figure.axes if axis.get_visible() and axis.get_title()]
    assert len(shown) == 2 and all(axis.get_xlabel() for axis in shown)
    with pytest.raises(ValueError, match="attention"):
        plot_attention(np.zeros((3, 4)), list("abc"), list("abc"))
