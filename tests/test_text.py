import re
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import _config
from keras_transformer.text import (
    END,
    PAD,
    SOS,
    SPECIAL_TOKENS,
    UNK,
    CharTokenizer,
    WordPieceTokenizer,
    WordTokenizer,
    get_tokenizer_class,
    load_vocabulary,
    tokenizer_from_config,
)

KINDS = (WordTokenizer, WordPieceTokenizer, CharTokenizer)
# Already in canonical form for every kind: lower case, single spaces, no
# punctuation (the word tokenizer deletes it).
CANONICAL = [
    "가끔 궁금해",
    "오늘 날씨가 너무 좋아요",
    "the teacher reads a book",
    "i like 김치 and bibimbap",
    "pizza 🍕 party 🎉",
    "",
]
# The tutorial's FILTERS and splitting, applied with Python's re.
TUTORIAL_FILTERS = re.compile("([~.,!?\"':;)(])")


def strings(tensor):
    return [text.decode("utf-8") for text in tensor.numpy()]


@pytest.mark.parametrize("cls", KINDS, ids=lambda cls: cls.kind)
def test_round_trip_of_canonical_text(cls):
    tokenizer = cls.from_texts(CANONICAL, vocab_size=500, verbose=0)
    ids = tokenizer.tokenize(CANONICAL)
    assert ids.dtype == tf.int32
    assert strings(tokenizer.detokenize(ids)) == CANONICAL
    assert strings(tokenizer.detokenize(ids.to_tensor())) == CANONICAL  # padded input
    assert UNK not in ids.flat_values.numpy()


@pytest.mark.parametrize("cls", KINDS, ids=lambda cls: cls.kind)
def test_text_is_normalised_before_tokenizing(cls):
    tokenizer = cls.from_texts(CANONICAL, vocab_size=500, verbose=0)
    messy = ["  The   TEACHER\treads\na BOOK ", unicodedata.normalize("NFD", "가끔 궁금해")]
    assert strings(tokenizer.detokenize(tokenizer.tokenize(messy))) == [
        "the teacher reads a book", "가끔 궁금해"
    ]


def test_every_tokenizer_choice_of_the_configs_has_a_class():
    assert sorted(cls.kind for cls in KINDS) == sorted(_config.TOKENIZERS)
    assert {kind: get_tokenizer_class(kind) for kind in _config.TOKENIZERS} == {
        cls.kind: cls for cls in KINDS}
    with pytest.raises(ValueError, match="`tokenizer`.*Received: tokenizer='bpe'"):
        get_tokenizer_class("bpe")


def test_korean_stays_in_syllables():
    tokenizer = CharTokenizer.from_texts([unicodedata.normalize("NFD", "한국어 문장")], verbose=0)
    tokens = set(tokenizer.vocabulary[len(SPECIAL_TOKENS):])
    assert tokens == set("한국어문장") | {"▁"}  # composed syllables, never jamo


def test_word_tokenizer_reproduces_the_tutorial_preprocessing():
    sentences = [
        "12시 땡!", "1지망 학교 떨어졌어", "SNS 시간낭비인 거 아는데 매일 하는 중",
        "가스비 장난 아님.", "\"왜\" 그런 거지? (진짜)", "오늘도 좋은 하루: 보내세요~",
        "It's a test, isn't it?",
    ]
    tokenizer = WordTokenizer.from_texts(sentences, verbose=0)
    tokens = tokenizer.split(tokenizer.normalize(sentences))
    expected = [re.sub(TUTORIAL_FILTERS, "", s.lower()).split() for s in sentences]
    assert [[t.decode("utf-8") for t in row] for row in tokens.to_list()] == expected


def test_wordpiece_spells_unseen_words_from_pieces():
    tokenizer = WordPieceTokenizer.from_texts(["reading readers", "읽었다 읽는다"], verbose=0)
    text = ["readings 읽었는다"]  # new words of known characters
    ids = tokenizer.tokenize(text)
    assert UNK not in ids.flat_values.numpy()
    assert strings(tokenizer.detokenize(ids)) == text


def test_wordpiece_keeps_punctuation_as_tokens():
    tokenizer = WordPieceTokenizer.from_texts(["Hello, world! (yes)"], verbose=0)
    assert strings(tokenizer.detokenize(tokenizer.tokenize(["Hello, world! (yes)"]))) == [
        "hello, world! ( yes)"
    ]


@pytest.mark.parametrize("cls", KINDS, ids=lambda cls: cls.kind)
def test_unknown_text_and_bad_bytes_do_not_fail(cls):
    tokenizer = cls.from_texts(["abc"], verbose=0)
    ids = tokenizer.tokenize(tf.constant([b"\xff\xfe bad", "zzz", "<END> <PAD>"]))
    flat = ids.flat_values.numpy()
    assert set(flat) <= set(range(UNK, tokenizer.vocab_size))  # never PAD, SOS or END


def test_literal_special_tokens_in_text_are_unknown():
    tokenizer = WordTokenizer.from_texts(["hello"], lower_case=False, verbose=0)
    assert tokenizer.tokenize(["<END> <SOS> <PAD> hello"]).to_list() == [[UNK, UNK, UNK, 4]]


def test_detokenize_reads_up_to_end_and_drops_pad_and_sos():
    tokenizer = WordTokenizer(list(SPECIAL_TOKENS) + ["a", "b"])
    ids = tf.constant([[SOS, 4, 5, END, 4, 4], [4, PAD, 5, PAD, PAD, PAD], [4, 99, -1, 5, 5, 5]])
    assert strings(tokenizer.detokenize(ids)) == ["a b", "a b", "a <UNK> <UNK> b b b"]
    assert tokenizer.detokenize(tf.constant([4, 5, END])).numpy() == b"a b"


@pytest.mark.parametrize("cls", KINDS, ids=lambda cls: cls.kind)
def test_tokenizers_run_inside_tf_function_and_tf_data(cls):
    tokenizer = cls.from_texts(CANONICAL, vocab_size=500, verbose=0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(text):
        return tokenizer.detokenize(tokenizer.tokenize(text))

    assert strings(round_trip(tf.constant(CANONICAL))) == CANONICAL
    dataset = tf.data.Dataset.from_tensor_slices(CANONICAL).batch(2).map(tokenizer.tokenize)
    rows = [row for batch in dataset for row in batch.to_list()]
    assert rows == tokenizer.tokenize(CANONICAL).to_list()


def test_scalar_input_gives_one_row():
    tokenizer = WordTokenizer.from_texts(["a b"], verbose=0)
    ids = tokenizer.tokenize("a b")
    assert ids.shape == (2,)
    assert tokenizer.detokenize(ids).numpy() == b"a b"


@pytest.mark.parametrize("cls", KINDS, ids=lambda cls: cls.kind)
def test_vocabulary_file_round_trip(cls, tmp_path):
    tokenizer = cls.from_texts(CANONICAL, vocab_size=500, verbose=0)
    path = tmp_path / "vocab.txt"
    tokenizer.save_vocabulary(path)
    assert len(path.read_text(encoding="utf-8").splitlines()) == tokenizer.vocab_size
    clone = tokenizer_from_config(tokenizer.get_config(), load_vocabulary(path))
    assert type(clone) is cls
    np.testing.assert_array_equal(
        clone.tokenize(CANONICAL).flat_values, tokenizer.tokenize(CANONICAL).flat_values
    )


def test_vocabulary_size_is_respected_by_word_tokenizer():
    tokenizer = WordTokenizer.from_texts(["a a a b b c"], vocab_size=6, verbose=0)
    assert tokenizer.vocabulary == list(SPECIAL_TOKENS) + ["a", "b"]


@pytest.mark.parametrize(
    "content, match",
    [("a\nb\n", "lacks the special token"), ("<PAD>\n<SOS>\n<END>\n<UNK>\nx\nx\n", "duplicate"),
     ("<PAD>\n<SOS>\n<END>\n<UNK>\n\nx\n", "empty")],
)
def test_bad_vocabulary_file_names_the_file(tmp_path, content, match):
    path = tmp_path / "vocab.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}.*{match}"):
        load_vocabulary(path)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="tokenizer"):
        get_tokenizer_class("bpe")
    with pytest.raises(ValueError, match="vocab_size"):
        WordTokenizer.from_texts(["a"], vocab_size=4, verbose=0)
