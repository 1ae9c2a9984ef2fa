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
import tensorflow as tf
from helpers import TINY_TRAIN as TINY
from helpers import AtBatch, sees_pairs

from keras_transformer import Translator, cli, export_saved_model, train
from keras_transformer.data import english_korean_corpus
from keras_transformer.plotting import plot_attention, plot_confusion_matrix, plot_history
from keras_transformer.recipes.seq2seq import CollapseWarning, collapse_warning
from keras_transformer.text import SPECIAL_TOKENS, WordTokenizer

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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_cli_translate_prints_one_line_per_text(chatbot_dir, corpus, capsys):
    out, _ = chatbot_dir
    texts = [source for source, _ in corpus["valid"][:3]]
    assert cli.main(["translate", "--model", str(out), *texts]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[-1] == "" and lines[:-1] == Translator.load(out).translate(texts)


@pytest.mark.slow
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
    assert answers[0] == Translator.load(out).translate(questions[0], method=cli.CHAT_METHOD)


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


@pytest.mark.slow
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


@pytest.mark.slow
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
                           "masked_accuracy": [0.5, 0.7], "val_chrf": [3.0, 9.5],
                           "val_distinct_answers": [0.01, 0.6]})
    assert len(figure.axes) == 3
    for axis in figure.axes:
        assert axis.get_title() and axis.get_xlabel() == "epoch" and axis.get_ylabel()
    figure = plot_attention(np.full((2, 3, 4), 0.25), list("abcd"), ["가", "나", "<END>"])
    shown = [axis for axis in figure.axes if axis.get_visible() and axis.get_title()]
    assert len(shown) == 2 and all(axis.get_xlabel() for axis in shown)
    assert shown[0].get_ylabel() and not shown[1].get_ylabel()  # once per row, not overlapping
    with pytest.raises(ValueError, match="attention"):
        plot_attention(np.zeros((3, 4)), list("abc"), list("abc"))


def test_plots_speak_korean_for_the_notebooks():
    figure = plot_history({"loss": [2.0, 1.0], "masked_accuracy": [0.5, 0.7]}, language="ko")
    assert [axis.get_xlabel() for axis in figure.axes] == ["에포크", "에포크"]
    assert figure.axes[0].get_legend().get_texts()[0].get_text() == "학습"
    figure = plot_attention(np.full((2, 3, 4), 0.25), list("abcd"), list("abc"), language="ko")
    assert figure.axes[0].get_title() == "헤드 1"
    assert figure.axes[0].get_ylabel() == "쿼리 토큰"
    figure = plot_attention(np.full((3, 3), 0.25), list("abc"), list("abc"), language="ko",
                            x_label="원문 토큰", y_label="번역 토큰")
    assert (figure.axes[0].get_xlabel(), figure.axes[0].get_ylabel()) == ("원문 토큰", "번역 토큰")
    figure = plot_confusion_matrix([[1, 0], [0, 1]], ["a", "b"], language="ko")
    assert figure.axes[0].get_title() == "혼동 행렬"
    with pytest.raises(ValueError, match="language"):
        plot_history({"loss": [1.0]}, language="kr")


# Issue 13: the defaults must learn on small data and report a collapse.


@pytest.mark.slow
def test_the_defaults_learn_the_30_pair_task(tmp_path):
    """600 pairs, 30 distinct: a default recipe whose learning rate peaked at 0.012
    here answered every sentence with nothing."""
    result = train(sees_pairs(), str(tmp_path / "tiny"), verbose=0)
    assert result.metrics["exact_match"] >= 0.9
    translator = Translator.load(tmp_path / "tiny")
    assert translator.translate(["the fox sees the horse", "the horse sees the fox"]) == [
        "여우 말 본다", "말 여우 본다"]


def _peak(optimizer, steps=10**6):
    schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
    values = schedule(np.arange(steps)).numpy()
    return values.max(), values.argmax()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::keras_transformer.recipes.seq2seq.CollapseWarning")
def test_the_peak_learning_rate_does_not_depend_on_the_run_length(tmp_path):
    tiny = train(sees_pairs(1)[:40], str(tmp_path / "tiny"), epochs=1, time_budget=0,
                 **dict(TINY, d_model=32))
    huge = train(sees_pairs(10), str(tmp_path / "huge"), epochs=10**5, time_budget=0,
                 **dict(TINY, d_model=32))
    (tiny_peak, tiny_at), (huge_peak, huge_at) = (
        _peak(result.translator.model.optimizer) for result in (tiny, huge))
    assert tiny_peak == huge_peak and tiny_at == huge_at
    # The paper's peak for d_model 32, reached after the warm-up (the old
    # automatic warm-up, a tenth of the run, made it 0.18 for the tiny run).
    np.testing.assert_allclose(tiny_peak, (32 * 4000) ** -0.5, rtol=1e-5)
    assert tiny_at + 1 == 400


@pytest.mark.slow
def test_a_collapsed_model_is_reported(tmp_path, monkeypatch, corpus):
    monkeypatch.setattr(Translator, "translate",
                        lambda self, texts, **kwargs: ["잘 될 거예요."] * len(list(texts)))
    with pytest.warns(CollapseWarning,
                      match=r"collapsed: only 2.5% .*40 of them .*'잘 될 거예요.'"):
        result = train(corpus["train"], str(tmp_path / "run"), corpus["train"][:40], epochs=1,
                       **TINY)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["distinct_answers"] == result.metrics["distinct_answers"] == 0.025
    # A collapsed epoch is never the best one: its chrF counts as 0.
    assert result.history["val_chrf"] == [0.0] and result.metrics["chrf"] > 0


def test_collapse_warning_only_for_answers_all_alike_or_empty():
    references = [f"답 {i}" for i in range(100)]
    assert collapse_warning(references, references) is None
    assert "only 1.0%" in collapse_warning(["네"] * 100, references)
    assert "60% of the 100 validation answers are empty" in collapse_warning(
        [""] * 60 + references[:40], references)
    # References that are themselves all alike: answering alike is right.
    assert collapse_warning(["네"] * 100, ["네"] * 100) is None


@pytest.mark.slow
def test_special_ids_other_than_0_1_2_3_travel_end_to_end(tmp_path):
    """Real words at ids 0, 1, 2 and the special tokens at the end: any place that
    still treats 0 as <PAD>, 1 as <SOS> or 2 as <END> loses or cuts answers."""
    pairs = sees_pairs()
    learned = WordTokenizer.from_texts([text for pair in pairs for text in pair], verbose=0)
    first = ["본다", "고양이", "개"]
    words = [t for t in learned.vocabulary if t not in SPECIAL_TOKENS and t not in first]
    tokenizer = WordTokenizer(first + words + ["<UNK>", "<END>", "<SOS>", "<PAD>"])
    size = tokenizer.vocab_size
    assert (tokenizer.pad_id, tokenizer.start_id, tokenizer.end_id) == (size - 1, size - 2,
                                                                        size - 3)
    result = train(pairs, str(tmp_path / "run"), tokenizers=(tokenizer, tokenizer), epochs=40,
                   patience=40, **dict(TINY, d_model=64, num_heads=4, dff=128))
    model = result.translator.model
    assert (model.pad_token_idx, model.start_token_idx, model.end_token_idx) == (
        size - 1, size - 2, size - 3)
    assert result.metrics["exact_match"] >= 0.9

    translator = Translator.load(tmp_path / "run")
    sources = ["the cat sees the dog", "the dog sees the cat", "the fox sees the cat"]
    expected = ["고양이 개 본다", "개 고양이 본다", "여우 고양이 본다"]
    assert translator.translate(sources) == expected
    assert translator.translate(sources, method="mmi") == expected
    weights, source_tokens, target_tokens = translator.attention(sources[0])
    assert source_tokens == sources[0].split()
    assert target_tokens == ["고양이", "개", "본다", "<END>"] and weights.shape[1:] == (4, 5)

    exported = export_saved_model(model, tokenizer, tokenizer, str(tmp_path / "saved"),
                                  method="beam")
    served = tf.saved_model.load(exported).signatures["serving_default"](
        text=tf.constant(sources))
    assert [text.decode("utf-8") for text in served["text"].numpy()] == expected


@pytest.mark.parametrize(
    "flags, named",
    [(["--d-model", "100"], "`d_model`"), (["--learning-rate", "-1"], "`learning_rate`"),
     (["--no-shared-vocabulary", "--share-embeddings"], "`share_embeddings`"),
     (["--max-length", "1"], "`max_length`")],
)
def test_bad_training_flag_values_are_one_line_with_exit_2(tmp_path, capsys, flags, named):
    data = tmp_path / "data.csv"
    data.write_text("Q,A\n가끔 궁금해,그 사람도 그럴 거예요.\n", encoding="utf-8")
    status = cli.main(["train", "--data", str(data), "--format", "chatbot", "--out",
                       str(tmp_path / "out"), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and named in err[0], err
    assert not (tmp_path / "out").exists()  # checked before anything is written


@pytest.mark.parametrize("flags, named", [(["--beam-size", "0"], "`beam_size`"),
                                          (["--top-p", "2"], "`top_p`"),
                                          (["--mmi-weight", "-1"], "`mmi_weight`")])
def test_bad_decoding_flag_values_are_one_line_with_exit_2(chatbot_dir, capsys, flags, named):
    out, _ = chatbot_dir
    assert cli.main(["translate", "--model", str(out), *flags, "가끔 궁금해"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err


@pytest.mark.parametrize("error", [ValueError("an internal mistake"), KeyError("internal")])
def test_a_bug_prints_its_traceback_and_asks_for_a_report(chatbot_dir, capsys, monkeypatch,
                                                          error):
    """A ValueError from our own code is not the user's mistake: no one-line
    "error:" that hides the traceback."""
    out, _ = chatbot_dir

    def broken(self, texts, **kwargs):
        raise error

    monkeypatch.setattr(Translator, "translate", broken)
    assert cli.main(["translate", "--model", str(out), "가끔 궁금해"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and f"{type(error).__name__}:" in err
    assert err.strip().splitlines()[-1].endswith(cli.BUG_REPORT)
