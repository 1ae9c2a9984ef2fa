"""Transformer.generate / inference: cached decoding equals recomputation, beam
search, sampling, padding after <END>, mixed precision and XLA."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_kargs

import keras_transformer as kt
from keras_transformer import _backend, _compat, cli
from keras_transformer.data import reverse_task
from keras_transformer.generation import GenerateConfig, beam_search, mmi_rerank
from keras_transformer.generation.search import greedy_search
from keras_transformer.serving.export import EXPORTED_OPTIONS

PAD, SOS, END = 0, 1, 2


def mixed_length_sources(batch, seed, max_len=8):
    rng = np.random.default_rng(seed)
    inp = np.zeros((batch, max_len), np.int32)
    for row in range(batch):
        length = rng.integers(1, max_len + 1)
        inp[row, :length] = rng.integers(4, 16, size=length)
    return inp


def tutorial_greedy(model, inp, max_length):
    """The tutorial's algorithm: re-run the whole model on the growing prefix,
    eagerly, with `.numpy()` in the loop (batched; <PAD>/<SOS> never chosen,
    as in `generate`)."""
    tar = np.full((len(inp), 1), SOS, np.int32)
    finished = np.zeros(len(inp), bool)
    out = []
    for _ in range(max_length):
        logits = model((inp, tar)).numpy()[:, -1]
        logits[:, [PAD, SOS]] = -np.inf
        token = np.where(finished, PAD, logits.argmax(-1))
        out.append(token)
        finished |= token == END
        if finished.all():
            break
        tar = np.concatenate([tar, token[:, None].astype(np.int32)], axis=1)
    return np.stack(out, axis=1)


def penalised_log_prob(model, inp, seqs, alpha):
    """Length-penalised log-probability of each row of `seqs` (up to <END>)."""
    dec_in = np.concatenate([np.full((len(seqs), 1), SOS), seqs[:, :-1]], axis=1)
    logits = model((inp, dec_in)).numpy()
    logits[..., [PAD, SOS]] = -np.inf
    log_probs = tf.nn.log_softmax(logits).numpy()
    token_log_probs = np.take_along_axis(log_probs, seqs[..., None], axis=-1)[..., 0]
    scores = []
    for row, seq in enumerate(seqs):
        ends = np.flatnonzero(seq == END)
        length = ends[0] + 1 if len(ends) else len(seq)
        scores.append(token_log_probs[row, :length].sum() / ((5 + length) / 6) ** alpha)
    return np.array(scores)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 3, 17])
def test_cached_greedy_equals_the_tutorials_recomputation_on_a_random_model(
    random_model, batch
):
    inp = mixed_length_sources(batch, seed=batch)
    expected = tutorial_greedy(random_model, inp, max_length=10)
    np.testing.assert_array_equal(random_model.generate(inp).numpy(), expected)
    np.testing.assert_array_equal(random_model.generate(inp, use_cache=False).numpy(), expected)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 3, 17])
def test_cached_greedy_equals_the_tutorials_recomputation_on_a_trained_model(
    trained_model, batch
):
    inp = reverse_task(batch, seed=10 + batch)[0]
    expected = tutorial_greedy(trained_model, inp, max_length=10)
    np.testing.assert_array_equal(trained_model.generate(inp).numpy(), expected)


@pytest.mark.slow
def test_trained_model_reverses_unseen_sources(trained_model):
    inp, _, dec_out = reverse_task(50, seed=7)
    out = trained_model.generate(inp).numpy()
    n = out.shape[1]
    assert (out == dec_out[:, :n]).all(axis=1).mean() >= 0.9


@pytest.mark.slow
def test_rows_that_end_early_are_padded_after_end(trained_model):
    inp, _, dec_out = reverse_task(6, seed=5, min_len=2, max_len=8)
    out = trained_model.generate(inp).numpy()
    lengths = (inp != PAD).sum(1)
    assert out.shape[1] == lengths.max() + 1  # stops once every row has ended
    for row, length in enumerate(lengths):
        assert out[row, length] == END
        assert (out[row, length + 1 :] == PAD).all()


@pytest.mark.slow
def test_row_without_end_stops_at_max_length(trained_model):
    inp = reverse_task(4, seed=6, min_len=6, max_len=8)[0]
    out = trained_model.generate(inp, max_length=4).numpy()
    assert out.shape == (4, 4)
    assert not (out == END).any() and not (out == PAD).any()


@pytest.mark.slow
def test_beam_size_one_equals_greedy(random_model, trained_model):
    # Without a length penalty; with one, beam search may go on past greedy's <END>
    # to a longer answer that scores better (the next test).
    for model in (random_model, trained_model):
        inp = mixed_length_sources(5, seed=3)
        np.testing.assert_array_equal(
            model.generate(inp, method="beam", beam_size=1, length_penalty=0.0).numpy(),
            model.generate(inp).numpy(),
        )


def padded_to(width, *arrays):
    return [np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrays]


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.6, 1.0, 2.0])
def test_beam_size_one_never_scores_below_greedy(random_model, trained_model, alpha):
    """Beam 1 follows greedy's path until greedy ends, keeps that answer, and
    replaces it only with a better one. (Wider beams can score below greedy:
    greedy's path may leave the beam before it ends.)"""
    for model in (random_model, trained_model):
        inp = mixed_length_sources(17, seed=4)
        greedy = model.generate(inp).numpy()
        beam = model.generate(inp, method="beam", beam_size=1, length_penalty=alpha).numpy()
        assert beam.dtype == np.int32
        beam, greedy = padded_to(max(greedy.shape[1], beam.shape[1]), beam, greedy)
        beam_scores = penalised_log_prob(model, inp, beam, alpha)
        greedy_scores = penalised_log_prob(model, inp, greedy, alpha)
        assert (beam_scores >= greedy_scores - 1e-4).all()


def every_answer(vocab_size, max_length):
    """Every answer `generate` can give (no <PAD>/<SOS>): token sequences
    ending in <END> after 0..max_length-1 tokens, or max_length tokens without
    one, <PAD> after the end; `(N, max_length)`."""
    words = [token for token in range(vocab_size) if token not in (PAD, SOS, END)]
    answers = []
    for length in range(max_length + 1):
        for body in itertools.product(words, repeat=length):
            answer = list(body) + ([END] if length < max_length else [])
            answers.append(answer + [PAD] * (max_length - len(answer)))
    return np.array(answers, np.int32)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_beam_search_as_wide_as_the_search_space_is_exhaustive_search(alpha):
    """Three words and three steps: 40 answers. A beam of 40 never prunes, so its
    four best answers must be exhaustive search's four best under the length
    penalty (with alpha 2 long answers win; stopping early would miss them)."""
    vocab_size, max_length, beam_size = 6, 3, 40
    keras.utils.set_random_seed(2)
    model = kt.Transformer(**tiny_kargs(num_layers=1, input_vocab_size=vocab_size,
                                        target_vocab_size=vocab_size,
                                        maximum_position_encoding=max_length + 1))
    answers = every_answer(vocab_size, max_length)
    assert len(answers) == 40
    for source in ([3, 4, 5, 0], [5, 5, 0, 0], [4, 3, 3, 5]):
        inp = np.array([source], np.int32)
        best = model.generate(inp, method="beam", beam_size=beam_size, length_penalty=alpha,
                              num_return_sequences=4, max_length=max_length).numpy()[0]
        (best,) = padded_to(max_length, best)
        scores = penalised_log_prob(model, np.repeat(inp, len(answers), 0), answers, alpha)
        np.testing.assert_allclose(
            penalised_log_prob(model, np.repeat(inp, 4, 0), best, alpha),
            np.sort(scores)[::-1][:4], atol=1e-5)


@pytest.mark.parametrize("steps_per_check", [1, 5])
@pytest.mark.parametrize("alpha, answer, steps", [(0.0, [END], 1),
                                                   (2.0, [4, 4, 4, 4, END], 5)])
def test_beam_search_stops_only_when_no_alive_answer_can_win(alpha, answer, steps,
                                                             steps_per_check):
    """One hypothesis; at step 0 <END> has p 0.6, token 4 has 0.4 and then
    leads surely to 4 4 4 4 <END>. Without a length penalty <END> wins at once
    and the search stops; with alpha 2 the long answer scores -0.92 / 2.78
    against -0.51 / 1, so the search must go on although its one beam slot
    holds a finished answer. Checked once every 5 steps (as on a GPU), the
    search runs all 5 and gives the same answer and number of steps."""
    table = np.full((5, 5), -1e4, np.float32)  # (step, vocabulary): <PAD>, <SOS> never
    table[0, END], table[0, 4] = np.log(0.6), np.log(0.4)
    table[1:4, 4] = 0.0
    table[4, END] = 0.0

    def step_fn(tokens, index, state):
        return keras.ops.take(table, index[None], axis=0), state, []

    tokens, log_probs, lengths, n = beam_search(
        step_fn, keras.ops.zeros((1,)), lambda state, rows: state, 1, 1, 5, 5,
        start_token_idx=SOS, end_token_idx=END, pad_token_idx=PAD, length_penalty=alpha,
        steps_per_check=steps_per_check)
    assert int(n) == steps
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(tokens)[0, 0, :len(answer)],
                                  answer)
    assert int(keras.ops.convert_to_numpy(lengths)[0, 0]) == len(answer)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(log_probs)[0, 0],
                               np.log(0.6 if steps == 1 else 0.4), atol=1e-3)


@pytest.mark.parametrize("steps_per_check", [1, 2, 3, 6])
def test_greedy_search_checked_once_a_block_gives_the_same_tokens_and_steps(steps_per_check):
    """Row 0 ends at step 1, row 1 at step 3 of at most 6: whether the loop
    asks after every step or once every 2, 3 or 6 (as on a GPU), it returns
    the same tokens, `<PAD>` after `<END>`, and 3 steps."""
    table = np.full((2, 6, 6), -1e4, np.float32)  # (row, step, vocabulary)
    table[0, 0, 4], table[0, 1:, END] = 0.0, 0.0
    table[1, :2, 5], table[1, 2:, END] = 0.0, 0.0

    def step_fn(tokens, index, state):
        return keras.ops.take(table, index[None], axis=1)[:, 0], state, []

    tokens, n, _ = greedy_search(step_fn, keras.ops.zeros((2,)), 2, 6, SOS, END, PAD,
                                 steps_per_check=steps_per_check)
    assert int(n) == 3
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(tokens),
                                  [[4, END, PAD, PAD, PAD, PAD], [5, 5, END, PAD, PAD, PAD]])


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"method": "beam"}, {"method": "mmi"},
                                     {"method": "sample", "seed": 5},
                                     {"return_attention_weights": True},
                                     {"use_cache": False}])
def test_decoding_checked_once_a_block_equals_checked_every_step(trained_model, monkeypatch,
                                                                 options):
    """On a GPU the loop asks whether every row ended once every few steps
    (`_backend.steps_per_check`): the steps it runs after that change nothing.
    Rows of 4-9 tokens, at most 10, checked every 5 steps."""
    inp = reverse_task(17, seed=71)[0]
    expected = keras.tree.flatten(fresh_copy(trained_model).generate(inp, **options))
    monkeypatch.setattr(_backend, "steps_per_check", lambda x, max_length: 5)
    got = keras.tree.flatten(fresh_copy(trained_model).generate(inp, **options))
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in expected]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a),
                                      keras.ops.convert_to_numpy(b))


def test_mmi_ranks_with_the_length_penalty():
    tokens = np.arange(2 * 3).reshape(1, 2, 3).astype(np.int32)
    log_probs, lengths = np.array([[-2.0, -2.6]], np.float32), np.array([[1, 10]], np.int32)
    prior = np.array([[-1.0, -4.0]], np.float32)

    def order(weight, alpha):
        ranked = mmi_rerank(tokens, log_probs, lengths, prior, weight, alpha)
        return keras.ops.convert_to_numpy(ranked)[0, :, 0] // 3

    assert list(order(0.0, 0.0)) == [0, 1]  # by log p(T|S)
    assert list(order(0.0, 1.0)) == [1, 0]  # -2 / 1 < -2.6 / 2.5
    assert list(order(0.5, 0.0)) == [1, 0]  # -2 + 0.5 < -2.6 + 2


def test_top_k_one_sampling_equals_greedy(random_model):
    inp = mixed_length_sources(6, seed=8)
    np.testing.assert_array_equal(
        random_model.generate(inp, method="sample", top_k=1, seed=3).numpy(),
        random_model.generate(inp).numpy(),
    )


def test_same_seed_gives_same_samples(random_model):
    inp = mixed_length_sources(8, seed=9)
    kwargs = dict(method="sample", temperature=1.5, top_k=8, top_p=0.9)
    first = random_model.generate(inp, seed=11, **kwargs).numpy()
    np.testing.assert_array_equal(random_model.generate(inp, seed=11, **kwargs).numpy(), first)
    assert not np.array_equal(random_model.generate(inp, seed=12, **kwargs).numpy(), first)
    assert ((first >= 0) & (first < 16)).all() and not (first == SOS).any()


def test_nucleus_sampling_with_tiny_top_p_is_greedy(random_model):
    inp = mixed_length_sources(4, seed=10)
    np.testing.assert_array_equal(
        random_model.generate(inp, method="sample", top_p=1e-6, seed=1).numpy(),
        random_model.generate(inp).numpy(),
    )


@pytest.mark.slow
def test_generation_is_traced_once_per_input_shape_and_method(random_model):
    inp = mixed_length_sources(3, seed=1)
    for _ in range(3):
        random_model.generate(inp)
        random_model.generate(mixed_length_sources(3, seed=5))
    random_model.generate(mixed_length_sources(5, seed=2))
    (decode,) = random_model._generate_fns._functions.values()
    assert decode.experimental_get_tracing_count() == 2


@pytest.mark.slow
@pytest.mark.parametrize("batch, methods", [(1, ["beam"]), (3, ["beam", "mmi"]), (17, ["beam"])])
def test_default_xla_decoding_equals_the_tensorflow_graph(random_model, trained_model, batch,
                                                         methods):
    # The default (XLA, joined q/k/v projection, constant special-token ban)
    # against `jit_compile=False`, on mixed source lengths. (Greedy's default
    # is checked against the tutorial's recomputation above.)
    for model, inp in ((random_model, mixed_length_sources(batch, seed=20 + batch)),
                       (trained_model, reverse_task(batch, seed=30 + batch)[0])):
        for method in methods:
            np.testing.assert_array_equal(
                model.generate(inp, method=method).numpy(),
                model.generate(inp, method=method, jit_compile=False).numpy(),
            )


def fresh_copy(model):
    """`model`'s weights in a new model, whose decoding is traced anew."""
    if not model.built:
        model.build(((None, 4), (None, 4)))
    copy = kt.Transformer.from_config(model.get_config())
    copy.build(((None, 4), (None, 4)))
    copy.set_weights(model.get_weights())
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 17])
def test_products_kept_apart_from_the_bias_decode_the_same_tokens(
    random_model, trained_model, batch, monkeypatch
):
    # Greedy steps at batch 1 under XLA:CPU keep each one-row product out of
    # the bias add's fusion (faster); the tokens are those of the fused
    # products, also at the tutorial's width, where XLA does fuse them. Beam
    # search (4 rows) and a batch of 17 have no one-row product: controls.
    cases = [(random_model, mixed_length_sources(batch, seed=40 + batch)),
             (trained_model, reverse_task(batch, seed=50 + batch)[0])]
    if batch == 1:
        keras.utils.set_random_seed(3)
        wide = kt.Transformer(**tiny_kargs(d_model=512, num_heads=8, dff=2048))
        cases.append((wide, mixed_length_sources(batch, seed=61)))
    kept_apart = []
    barrier = _compat.optimization_barrier
    monkeypatch.setattr(_compat, "optimization_barrier",
                        lambda product: kept_apart.append(product) or barrier(product))
    expected = [[fresh_copy(model).generate(inp, method=method).numpy()
                 for method in ("greedy", "beam")] for model, inp in cases]
    # Every product of a traced batch-1 greedy step: 2 layers x 6 (self-attention's
    # q, k and v joined in one), and the output; none in beam search or wider batches.
    assert len(kept_apart) == (3 * 13 if batch == 1 else 0)
    if not kept_apart:  # nothing kept apart, nothing to undo
        return
    monkeypatch.setattr(_backend, "apart_from_bias", lambda product: product)
    for (model, inp), (greedy, _) in zip(cases, expected):
        np.testing.assert_array_equal(fresh_copy(model).generate(inp).numpy(), greedy)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mixed_float16", "mixed_bfloat16"])
def test_generate_under_mixed_precision(trained_model, policy, name):
    policy(name)
    model = kt.Transformer(**trained_model.get_config())
    inp = reverse_task(17, seed=13)[0]
    model((inp, inp))
    model.set_weights(trained_model.get_weights())
    expected = trained_model.generate(inp, max_length=9).numpy()  # (17, 9)
    for kwargs in ({}, {"jit_compile": True}, {"method": "beam"}):
        out = model.generate(inp, max_length=9, **kwargs).numpy()
        assert out.dtype == np.int32
        assert (out == expected).all(axis=1).mean() >= 0.9


@pytest.mark.slow
def test_attention_weights_of_generate_equal_a_teacher_forced_pass(trained_model):
    inp = reverse_task(3, seed=14)[0]
    tokens, weights = trained_model.generate(inp, return_attention_weights=True)
    tokens = tokens.numpy()
    n = tokens.shape[1]
    assert set(weights) == {"decoder_layer1_block2", "decoder_layer2_block2"}
    dec_in = np.concatenate([np.full((3, 1), SOS), tokens[:, :-1]], axis=1)
    _, forced = trained_model((inp, dec_in), return_attention_weights=True)
    for name, w in weights.items():
        assert w.shape == (3, 4, n, inp.shape[1])
        for row in range(3):
            steps = np.flatnonzero(tokens[row] == END)[0] + 1
            np.testing.assert_allclose(
                w[row, :, :steps].numpy(), forced[name][row, :, :steps].numpy(), atol=1e-5
            )


@pytest.mark.slow
def test_inference_is_the_tutorials_list_of_ids(trained_model):
    inp = reverse_task(1, seed=15)[0]
    ids = trained_model.inference(inp)
    row = trained_model.generate(inp).numpy()[0].tolist()
    assert isinstance(ids, list) and all(isinstance(t, int) for t in ids)
    assert ids == row[: row.index(END)]
    assert ids == trained_model.inference(inp[0])
    with pytest.raises(ValueError, match="`x`.*Received: x.shape"):
        trained_model.inference(np.ones((2, 3), np.int32))


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"max_length": 11}, "max_length"),
        ({"max_length": 0}, "max_length"),
        ({"method": "topk"}, "method"),
        ({"beam_size": 0, "method": "beam"}, "beam_size"),
        ({"temperature": 0.0, "method": "sample"}, "temperature"),
        ({"top_p": 0.0, "method": "sample"}, "top_p"),
        ({"top_k": -1, "method": "sample"}, "top_k"),
        ({"return_attention_weights": True, "method": "beam"}, "return_attention_weights"),
        ({"use_cache": False, "method": "beam"}, "use_cache"),
        ({"jit_compile": True, "method": "sample"}, "jit_compile"),
        ({"jit_compile": "yes"}, "jit_compile"),
    ],
)
def test_generate_rejects_bad_arguments(random_model, kwargs, arg):
    with pytest.raises(ValueError, match=f"`{arg}`.*Received: "):
        random_model.generate(np.array([[4, 5]]), **kwargs)


def test_generate_rejects_an_option_it_does_not_have(random_model):
    with pytest.raises(TypeError, match=r"\['beam_width'\].*GenerateConfig"):
        random_model.generate(np.array([[4, 5]]), beam_width=3)


def test_every_decoding_option_comes_from_generate_config():
    """The command line's flags, their defaults and the export's options are
    `GenerateConfig`'s: an option added there reaches them all."""
    flagged = {field.name: field.default for field in GenerateConfig.fields(flag=True)}
    args = cli.build_parser().parse_args(["translate", "--model", "m", "text"])
    assert cli._generate_options(args) == flagged
    chat = cli.build_parser().parse_args(["chat", "--model", "m", "--beam-size", "8"])
    assert cli._generate_options(chat) == dict(flagged, method="mmi", beam_size=8)
    assert EXPORTED_OPTIONS == {field.name for field in GenerateConfig.fields(export=True)}
    assert EXPORTED_OPTIONS <= set(flagged) | {"max_length"}


def test_generate_rejects_ids_outside_the_vocabulary(random_model):
    with pytest.raises(ValueError, match=r"`x`.*\[0, 16\)"):
        random_model.generate(np.array([[4, 16]]))


@pytest.mark.slow
def test_bfloat16_serving_copy_decodes_like_the_float32_model(trained_model):
    fast = trained_model.serving_copy()
    assert {w.dtype for w in fast.weights} == {"bfloat16"}
    inp = reverse_task(17, seed=16)[0]
    expected = trained_model.generate(inp).numpy()
    for kwargs in ({}, {"jit_compile": False}, {"method": "beam"}):
        out = fast.generate(inp, **kwargs).numpy()
        assert out.dtype == np.int32
        width = max(out.shape[1], expected.shape[1])
        out, want = (np.pad(t, [(0, 0), (0, width - t.shape[1])]) for t in (out, expected))
        assert (out == want).all(axis=1).mean() >= 0.9
    with pytest.raises(ValueError, match="`dtype`.*Received: "):
        trained_model.serving_copy("int8")
