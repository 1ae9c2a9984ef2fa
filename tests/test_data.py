import hashlib

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import (
    DataFileError,
    chatbot,
    english_korean_corpus,
    load_chatbot_csv,
    load_chatbot_data,
    load_pairs,
    load_parallel_tsv,
    make_dataset,
    save_parallel_tsv,
    truncation_stats,
)
from keras_transformer.data import corpus as grammar
from keras_transformer.text import END, PAD, SOS, WordTokenizer


@pytest.fixture(scope="module")
def small_corpus():
    return english_korean_corpus(train_size=3000, valid_size=100, test_size=200, seed=0)


# The built-in corpus.


def test_corpus_is_deterministic_and_seeded():
    first = english_korean_corpus(train_size=50, valid_size=5, test_size=5, seed=3)
    assert first == english_korean_corpus(train_size=50, valid_size=5, test_size=5, seed=3)
    assert first != english_korean_corpus(train_size=50, valid_size=5, test_size=5, seed=4)


def test_corpus_splits_share_no_sentence(small_corpus):
    sources = [{source for source, _ in small_corpus[split]} for split in grammar.SPLITS]
    assert [len(s) for s in sources] == [3000, 100, 200]
    assert not (sources[0] & sources[1] or sources[0] & sources[2] or sources[1] & sources[2])


def _subject_and_verb(korean):
    """(Korean subject form, Korean verb group) of a generated sentence."""
    words = korean.split()
    for time_words in sorted((ko.split() for ko, _ in grammar.TIMES.values()), key=len,
                             reverse=True):
        if words[: len(time_words)] == time_words:
            words = words[len(time_words):]
            break
    subject = words[0] if words[0] != "내" else " ".join(words[:2])
    return subject, korean


def _korean_forms(subject, verb_name):
    verb = grammar.VERBS[verb_name]
    noun = {**grammar.PERSONS, **grammar.ANIMALS}.get(subject)
    if noun is None:
        noun, subject_form = grammar.PRONOUNS[subject]
        subjects = {grammar.particle(noun, "topic"), subject_form}
    else:
        subjects = {grammar.particle(noun, "topic"), grammar.particle(noun, "subject")}
    endings = {verb.korean_verb(tense, negative)
               for tense in ("present", "past", "future") for negative in (False, True)}
    return subjects, endings


def test_test_split_holds_only_combinations_unseen_in_training(small_corpus):
    held = grammar.held_out_combinations(seed=0)
    assert held["valid"] and held["test"] and not held["valid"] & held["test"]

    def matches(korean, combination):
        subjects, endings = _korean_forms(*combination)
        subject, sentence = _subject_and_verb(korean)
        return subject in subjects and any(sentence.endswith(" " + e) for e in endings)

    for _, korean in small_corpus["test"]:
        assert any(matches(korean, combination) for combination in held["test"]), korean
    for _, korean in small_corpus["train"]:
        assert not any(matches(korean, c) for c in held["test"] | held["valid"]), korean


def test_particles_follow_the_final_consonant():
    assert grammar.particle("선생님", "topic") == "선생님은"
    assert grammar.particle("의사", "topic") == "의사는"
    assert grammar.particle("학생", "subject") == "학생이"
    assert grammar.particle("개", "subject") == "개가"
    assert grammar.particle("책", "object") == "책을"
    assert grammar.particle("사과", "object") == "사과를"


def test_grammar_reorders_and_conjugates():
    assert grammar.VERBS["read"].english("past", True, True) == "did not read"
    assert grammar.VERBS["read"].english("present", False, True) == "reads"
    assert grammar.VERBS["read"].english("present", True, False) == "do not read"
    assert grammar.VERBS["study"].korean_verb("past", True) == "공부 안 했다"
    assert grammar.VERBS["eat"].korean_verb("future", True) == "안 먹을 것이다"


def test_corpus_sentences_end_with_a_verb_and_time_comes_first(small_corpus):
    times = {en: ko for en, (ko, _) in grammar.TIMES.items()}
    for english, korean in small_corpus["train"][:500]:
        assert korean.endswith("다")
        for en, ko in times.items():
            if english.endswith(f" {en}."):
                assert korean.startswith(ko + " ")


def test_corpus_rejects_bad_sizes():
    with pytest.raises(ValueError, match="train_size"):
        english_korean_corpus(train_size=-1)


# File loaders.


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return str(path)


def test_chatbot_csv_with_tricky_fields(tmp_path):
    text = (
        "\ufefflabel,A,Q,extra\r\n"
        '0,"안녕, 반가워","안녕하세요",x\r\n'
        "\r\n"
        '1,"그는 ""괜찮아""라고 했어","여러 줄\n질문",y\r\n'
        "2,답,질문\r\n"
    )
    path = write(tmp_path, "chat.csv", text)
    assert load_chatbot_csv(path) == [
        ("안녕하세요", "안녕, 반가워"),
        ("여러 줄\n질문", '그는 "괜찮아"라고 했어'),
        ("질문", "답"),
    ]


@pytest.mark.parametrize(
    "text, line, match",
    [
        ("Q,label\n안녕,0\n", 1, "lacks the column"),
        ('Q,A\n"열린 따옴표,답\n', 2, "malformed CSV"),
        ("Q,A,label\n질문만\n", 2, "expected at least 2 fields"),
        (b"Q,A\n\xff\xfe,x\n", 2, "not valid UTF-8"),
    ],
)
def test_malformed_chatbot_csv_names_file_and_line(tmp_path, text, line, match):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(DataFileError, match=f"bad.csv:{line}: .*{match}"):
        load_chatbot_csv(path)


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        load_chatbot_csv(write(tmp_path, "empty.csv", ""))
    with pytest.raises(ValueError, match="no such file"):
        load_parallel_tsv(str(tmp_path / "missing.tsv"))
    with pytest.raises(ValueError, match="holds no sentence pairs"):
        load_pairs(write(tmp_path, "blank.tsv", "\n\n"), "tsv")
    with pytest.raises(ValueError, match="format"):
        load_pairs(write(tmp_path, "x.tsv", "a\tb\n"), "json")


def test_parallel_tsv(tmp_path):
    path = write(tmp_path, "pairs.tsv", "\ufeffI eat.\t나는 먹는다\tCC-BY\r\n\nHi\t안녕\n")
    assert load_parallel_tsv(path) == [("I eat.", "나는 먹는다"), ("Hi", "안녕")]
    with pytest.raises(DataFileError, match="bad.tsv:2: .*no tab"):
        load_parallel_tsv(write(tmp_path, "bad.tsv", "a\tb\nno tab here\n"))


def test_tsv_save_and_load_round_trip(tmp_path, small_corpus):
    path = str(tmp_path / "corpus.tsv")
    save_parallel_tsv(small_corpus["valid"] + [("tab\tinside", "line\nbreak")], path)
    assert load_parallel_tsv(path) == small_corpus["valid"] + [("tab inside", "line break")]


# The tf.data pipeline.


# ChatbotData, the book's data set.


def test_load_chatbot_data_downloads_once_and_verifies_the_checksum(tmp_path, monkeypatch):
    """The download path, offline: the "server" is a local file with CRLF lines, like
    the real one."""
    remote = tmp_path / "ChatbotData .csv"
    remote.write_bytes("Q,A,label\r\n12시 땡!,하루가 또 가네요.,0\r\n"
                       "\"쉼표, 있는 질문\",네,1\r\n".encode("utf-8"))
    monkeypatch.setattr(chatbot, "CHATBOT_DATA_URL", remote.as_uri())
    monkeypatch.setattr(chatbot, "CHATBOT_DATA_SHA256",
                        hashlib.sha256(remote.read_bytes()).hexdigest())
    cache = tmp_path / "cache"
    expected = [("12시 땡!", "하루가 또 가네요."), ("쉼표, 있는 질문", "네")]
    assert load_chatbot_data(cache_dir=str(cache)) == expected
    assert (cache / "datasets" / "ChatbotData.csv").read_bytes() == remote.read_bytes()
    remote.unlink()  # the second call reads the cached copy
    assert load_chatbot_data(cache_dir=str(cache)) == expected
    # A copy that does not match the checksum is fetched again, and refused.
    remote.write_bytes(b"Q,A,label\r\ntampered,file,0\r\n")
    with pytest.raises(ValueError, match="hash"):
        load_chatbot_data(cache_dir=str(tmp_path / "fresh"))
    # Offline (here: nothing at the address) is an OSError a notebook falls back on.
    remote.unlink()
    with pytest.raises(ConnectionError, match="sample=True"):
        load_chatbot_data(cache_dir=str(tmp_path / "offline"))


def test_load_chatbot_data_reads_a_local_copy_and_the_shipped_sample(tmp_path):
    local = tmp_path / "mine.csv"
    local.write_text("Q,A,label\n가끔 궁금해,그 사람도 그럴 거예요.,0\n", encoding="utf-8")
    assert load_chatbot_data(str(local)) == [("가끔 궁금해", "그 사람도 그럴 거예요.")]
    sample = load_chatbot_data(sample=True)
    assert len(sample) == 1000 and len(set(sample)) > 990
    assert all(question.strip() and answer.strip() for question, answer in sample)


@pytest.fixture(scope="module")
def tokenizers(small_corpus):
    sources, targets = zip(*small_corpus["train"])
    return (WordTokenizer.from_texts(sources, verbose=0),
            WordTokenizer.from_texts(targets, verbose=0))


@pytest.mark.parametrize("bucket", [False, True])
def test_dataset_yields_the_tutorial_layout(small_corpus, tokenizers, bucket):
    dataset = make_dataset(small_corpus["train"], *tokenizers, max_length=16, batch_size=32,
                           shuffle=True, seed=0, bucket=bucket)
    spec = dataset.element_spec
    assert [s.dtype for s in (*spec[0], spec[1])] == [tf.int32] * 3
    rows = 0
    for (inp, dec_in), dec_out in dataset:
        assert inp.shape[0] == dec_in.shape[0] == dec_out.shape[0] <= 32
        assert dec_in.shape == dec_out.shape and inp.shape[1] <= 16 and dec_in.shape[1] <= 16
        dec_in, dec_out = dec_in.numpy(), dec_out.numpy()
        assert (dec_in[:, 0] == SOS).all()
        np.testing.assert_array_equal(dec_in[:, 1:], np.where(dec_out[:, :-1] == END, PAD,
                                                              dec_out[:, :-1]))
        lengths = (dec_out != PAD).sum(1)
        assert (dec_out[np.arange(len(lengths)), lengths - 1] == END).all()
        rows += len(lengths)
    assert rows == 3000


def test_static_shape_gives_every_batch_one_shape(small_corpus, tokenizers):
    pairs = small_corpus["train"][:100]
    varying = make_dataset(pairs, *tokenizers, max_length=16, batch_size=32)
    static = make_dataset(pairs, *tokenizers, max_length=16, batch_size=32, static_shape=True,
                          drop_remainder=True)
    assert varying.element_spec[1].shape.as_list() == [None, None]
    assert len({tuple(dec_out.shape) for _, dec_out in varying}) > 1
    assert static.element_spec[1].shape.as_list() == [32, 16]
    assert [tuple(dec_out.shape) for _, dec_out in static] == [(32, 16)] * 3


def test_dataset_cuts_long_pairs_and_counts_them(tokenizers):
    long_pair = (" ".join(["minsu"] * 30), " ".join(["민수는"] * 30))
    pairs = [long_pair, ("minsu", "민수는")]
    assert truncation_stats(pairs, *tokenizers, max_length=8) == {
        "pairs": 2, "truncated_sources": 1, "truncated_targets": 1
    }
    (inp, dec_in), dec_out = next(iter(make_dataset(pairs, *tokenizers, max_length=8,
                                                    bucket=False)))
    assert inp.shape == (2, 8) and dec_in.shape == dec_out.shape == (2, 8)
    assert dec_out[0, -1] == END  # a cut target still ends in <END>


def test_dataset_checks_arguments(tokenizers):
    with pytest.raises(ValueError, match="max_length"):
        make_dataset([("a", "b")], *tokenizers, max_length=1)
    with pytest.raises(ValueError, match="pairs"):
        make_dataset([], *tokenizers, max_length=8)
