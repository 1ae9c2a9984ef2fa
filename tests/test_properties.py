"""Property-based tests (hypothesis): each states an invariant over random input.

Every test runs `KT_HYPOTHESIS_EXAMPLES` examples (200 unless set; see
`tests/conftest.py`). The models and tokenizers are built once per module so
that the examples exercise the code under test, not TensorFlow's start-up.
"""

import csv
import functools
import io
import re
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import example, given
from hypothesis import strategies as st

import keras_transformer as kt
from keras_transformer.data.files import (
    DataFileError,
    _one_line,
    load_chatbot_csv,
    load_parallel_tsv,
    save_parallel_tsv,
)
from keras_transformer.serving.export import export_saved_model
from keras_transformer.text.tokenizers import (
    END,
    PAD,
    SOS,
    TUTORIAL_FILTERS,
    UNK,
    CharTokenizer,
    WordPieceTokenizer,
    WordTokenizer,
    normalize_text,
)

# Any code point but surrogates (which UTF-8 cannot hold): controls, format
# characters, private use, unassigned ones, combining marks, emoji.
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
HANGUL_AND_LATIN = "가나다라마바사아자차카타파하한국어abcdefghij .,!?'"


def text_of(values):
    return [value.decode("utf-8") for value in np.asarray(values).reshape(-1)]


# --- Text: normalisation and the three tokenizers ---------------------------


@given(ANY_TEXT)
@example("A\x00B")  # found by this test: text after a NUL was lost
def test_normalized_text_is_canonical_and_idempotent(text):
    normalized = text_of(normalize_text(tf.constant([text])))[0]
    assert text_of(normalize_text(tf.constant([normalized])))[0] == normalized
    assert normalized == normalized.strip(" ") and "  " not in normalized
    assert unicodedata.is_normalized("NFC", normalized)
    assert not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") or
                   (unicodedata.category(c) == "Zs" and c != " ") for c in normalized)


@given(st.binary(max_size=80))
@example(b"\x00\x80")
def test_any_bytes_normalize_to_valid_utf8(data):
    # Invalid UTF-8 (lone surrogates escaped as bytes, truncated sequences)
    # becomes U+FFFD instead of failing.
    normalized = normalize_text(tf.constant([data])).numpy()[0].decode("utf-8")  # strict
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        assert "\ufffd" in normalized


@functools.cache
def word_tokenizer():
    return WordTokenizer.from_texts(["나는 학교에 간다", "I go to school", "the cat"] * 3,
                                    verbose=0)


@given(st.one_of(ANY_TEXT, st.text(st.sampled_from(HANGUL_AND_LATIN), min_size=1_000,
                                   max_size=20_000)))
def test_word_tokenizer_gives_one_known_id_per_tutorial_word(text):
    tokenizer = word_tokenizer()
    ids = tokenizer.tokenize(text).numpy()
    normalized = text_of(normalize_text(tf.constant([text])))[0]
    assert len(ids) == len(re.sub(TUTORIAL_FILTERS, "", normalized).split())
    assert ((ids >= UNK) & (ids < tokenizer.vocab_size)).all()


@pytest.mark.slow
@given(st.lists(ANY_TEXT, min_size=1, max_size=4))
def test_word_and_char_tokenizers_round_trip_text_they_have_seen(texts):
    for cls in (WordTokenizer, CharTokenizer):
        tokenizer = cls.from_texts(texts, vocab_size=10_000, verbose=0)
        ids = tokenizer.tokenize(texts)
        assert UNK not in ids.flat_values.numpy()
        assert text_of(tokenizer.detokenize(ids)) == text_of(tokenizer.canonicalize(texts))


@functools.cache
def wordpiece_tokenizer():
    words = ["한국어", "학교", "가나다", "abc", "bad", "cage", "hij"]
    return WordPieceTokenizer.from_texts([" ".join(words)] * 5 + list(HANGUL_AND_LATIN),
                                         vocab_size=200, verbose=0)


@pytest.mark.slow
@given(st.text(st.sampled_from(HANGUL_AND_LATIN), max_size=80))
def test_wordpiece_spells_any_text_over_its_alphabet(text):
    tokenizer = wordpiece_tokenizer()
    ids = tokenizer.tokenize(text).numpy()
    assert ((ids > UNK) & (ids < tokenizer.vocab_size)).all()
    spelled = text_of(tokenizer.detokenize(ids[np.newaxis]))[0]
    canonical = text_of(tokenizer.canonicalize([text]))[0]
    assert spelled.replace(" ", "") == canonical.replace(" ", "")


@functools.cache
def graph_tokenize():
    return tf.function(word_tokenizer().tokenize)


@given(ANY_TEXT)
def test_tokenizers_agree_inside_tf_function(text):
    tokenizer = word_tokenizer()
    np.testing.assert_array_equal(graph_tokenize()(tf.constant([text])).flat_values.numpy(),
                                  tokenizer.tokenize([text]).flat_values.numpy())


# --- Data files ------------------------------------------------------------

FIELD = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\ufeff"),
                max_size=30)


def write(tmp_path_factory, name, data):
    path = tmp_path_factory.mktemp("files") / name
    path.write_bytes(data)
    return str(path)


def chatbot_csv(pairs, bom):
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["Q", "A", "label"])
    writer.writerows([question, answer, 0] for question, answer in pairs)
    return ("\ufeff" if bom else "").encode() + buffer.getvalue().encode("utf-8")


@given(st.lists(st.tuples(FIELD, FIELD), max_size=8), st.booleans())
def test_chatbot_csv_round_trips_any_text(tmp_path_factory, pairs, bom):
    path = write(tmp_path_factory, "ChatBotData.csv", chatbot_csv(pairs, bom))
    assert load_chatbot_csv(path) == pairs


@given(st.lists(st.tuples(FIELD, FIELD), min_size=1, max_size=8), st.data())
def test_a_truncated_csv_gives_a_prefix_or_names_the_file(tmp_path_factory, pairs, data):
    full = chatbot_csv(pairs, bom=False)
    cut = data.draw(st.integers(0, len(full)))
    path = write(tmp_path_factory, "cut.csv", full[:cut])
    try:
        loaded = load_chatbot_csv(path)
    except DataFileError as error:
        assert str(error).startswith(path)
        return
    whole = max(0, len(loaded) - 1)  # the last row read may be cut short
    assert len(loaded) <= len(pairs) and loaded[:whole] == pairs[:whole]


@given(st.binary(max_size=200), st.sampled_from(["chatbot", "tsv"]))
def test_random_bytes_give_pairs_or_an_error_naming_the_file(tmp_path_factory, data, kind):
    path = write(tmp_path_factory, f"random.{kind}", data)
    loader = load_chatbot_csv if kind == "chatbot" else load_parallel_tsv
    try:
        pairs = loader(path)
    except DataFileError as error:
        assert str(error).startswith(path)
        return
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in pairs)
    if kind == "tsv":
        assert not any("\n" in s + t or "\t" in s + t for s, t in pairs)


@given(st.lists(st.tuples(FIELD, FIELD), max_size=8))
def test_tsv_keeps_every_pair_on_one_line(tmp_path_factory, pairs):
    path = str(tmp_path_factory.mktemp("tsv") / "pairs.tsv")
    save_parallel_tsv(pairs, path)
    expected = [(_one_line(s), _one_line(t)) for s, t in pairs]
    assert load_parallel_tsv(path) == [p for p in expected if f"{p[0]}\t{p[1]}".strip()]


# --- Masks, attention, the model and decoding --------------------------------

BATCH, LENGTH, VOCAB = 3, 7, 12


def padded_ids(min_tokens=0):
    """(BATCH, LENGTH) ids: random tokens, then random-length padding."""
    lengths = st.lists(st.integers(min_tokens, LENGTH), min_size=BATCH, max_size=BATCH)
    tokens = st.lists(st.integers(UNK, VOCAB - 1), min_size=BATCH * LENGTH,
                      max_size=BATCH * LENGTH)
    return st.tuples(lengths, tokens).map(
        lambda drawn: np.where(np.arange(LENGTH) < np.array(drawn[0])[:, None],
                               np.array(drawn[1]).reshape(BATCH, LENGTH), PAD).astype(np.int32)
    )


@functools.cache
def attention_layer():
    return kt.MultiHeadAttention(d_model=8, num_heads=2)


@pytest.mark.slow
@given(padded_ids(), st.integers(0, 2**31 - 1))
def test_padding_masks_give_finite_weights_that_skip_padding(ids, seed):
    x = tf.random.stateless_normal((BATCH, LENGTH, 8), seed=[seed, 0])
    mask = kt.create_padding_mask(ids)
    output, weights = attention_layer()(x, x, x, mask)
    weights = weights.numpy()
    assert np.isfinite(output.numpy()).all() and np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    # A source with a token gives its padding no weight; an all-padding one
    # (nothing to attend to) spreads it evenly instead of producing NaN.
    padded = ids == PAD
    some = ~padded.all(axis=1)
    assert (weights[some][np.broadcast_to(padded[some][:, None, None, :],
                                          weights[some].shape)] == 0).all()
    np.testing.assert_allclose(weights[~some], 1.0 / LENGTH, rtol=1e-5)


@functools.cache
def random_model():
    tf.keras.utils.set_random_seed(0)
    model = kt.Transformer(num_layers=2, d_model=16, num_heads=2, dff=32, input_vocab_size=VOCAB,
                           target_vocab_size=VOCAB, maximum_position_encoding=LENGTH + 1,
                           end_token_idx=END, rate=0.0)
    model.build(((None, None), (None, None)))
    return model


@functools.cache
def forward():
    model = random_model()  # built outside the trace
    return tf.function(lambda source, target: model((source, target)))


@pytest.mark.slow
@given(padded_ids(), padded_ids(min_tokens=1), st.integers(1, LENGTH - 1))
def test_decoder_outputs_never_depend_on_later_positions(source, target, position):
    changed = target.copy()
    changed[:, position:] = (target[:, position:] + 1) % VOCAB
    before = forward()(source, target).numpy()[:, :position]
    after = forward()(source, changed).numpy()[:, :position]
    np.testing.assert_allclose(before, after, atol=1e-5)


@pytest.mark.slow
@given(padded_ids(), st.sampled_from([1, 4, LENGTH]))
def test_generated_rows_are_well_formed_and_independent_of_the_batch(source, max_length):
    model = random_model()
    out = model.generate(source, max_length=max_length).numpy()
    assert out.shape[0] == BATCH and out.shape[1] <= max_length
    for row, source_row in zip(out, source):
        ended = np.flatnonzero(row == END)
        body = row[: ended[0]] if ended.size else row
        assert ((body > END) & (body < VOCAB)).all()  # never <PAD> or <SOS> inside
        if ended.size:
            assert (row[ended[0] + 1:] == PAD).all()
        alone = model.generate(source_row[np.newaxis], max_length=max_length).numpy()[0]
        width = min(len(alone), len(row))
        np.testing.assert_array_equal(alone[:width], row[:width])
        assert (alone[width:] == PAD).all() and (row[width:] == PAD).all()


@pytest.mark.slow
@given(padded_ids(min_tokens=1))
def test_extra_source_padding_does_not_change_the_output(source):
    model = random_model()
    longer = np.pad(source, ((0, 0), (0, 1)))  # one width more: one more trace, not many
    np.testing.assert_array_equal(model.generate(longer).numpy(), model.generate(source).numpy())


# --- The exported SavedModel ---------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    texts = ["나는 학교에 간다", "너는 집에 간다", "I go to school", "you go home"]
    source = WordTokenizer.from_texts(texts, verbose=0)
    target = WordTokenizer.from_texts(texts, verbose=0)
    tf.keras.utils.set_random_seed(1)
    model = kt.Transformer(num_layers=1, d_model=16, num_heads=2, dff=32,
                           input_vocab_size=source.vocab_size,
                           target_vocab_size=target.vocab_size, maximum_position_encoding=10,
                           end_token_idx=END)
    model.build(((None, None), (None, None)))
    path = export_saved_model(model, source, target, str(tmp_path_factory.mktemp("export")))
    return tf.saved_model.load(path).signatures["serving_default"], kt.Translator(
        model, source, target)


@pytest.mark.slow
@given(st.lists(st.one_of(ANY_TEXT, st.sampled_from(["나는 학교에 간다", "you go home"])),
                min_size=1, max_size=3))
def test_the_signature_answers_any_strings_like_the_translator(served, texts):
    signature, translator = served
    result = signature(text=tf.constant(texts))
    assert text_of(result["text"]) == translator.translate(texts)
    ids = result["token_ids"].numpy()
    assert ids.shape[0] == len(texts) and not (ids == SOS).any()
