"""The Transformer model: invariances, training, saving, mixed precision."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import fit_reverse, tiny_kargs

import keras_transformer as kt
from keras_transformer.data import reverse_task


def test_causality_future_decoder_tokens_change_no_earlier_logit(random_model):
    inp = tf.constant([[4, 5, 6, 7, 0, 0]])
    tar_a = tf.constant([[1, 8, 9, 10, 11, 12]])
    for t in range(tar_a.shape[1] - 1):
        tar_b = tf.concat([tar_a[:, : t + 1], tf.constant([[13] * (5 - t)])], axis=1)
        logits_a = random_model((inp, tar_a)).numpy()
        logits_b = random_model((inp, tar_b)).numpy()
        np.testing.assert_allclose(logits_a[:, : t + 1], logits_b[:, : t + 1], atol=1e-5)
        assert not np.allclose(logits_a[:, t + 1 :], logits_b[:, t + 1 :])


def test_appending_source_padding_changes_no_logit(random_model):
    tar = tf.constant([[1, 8, 9], [1, 10, 0]])
    short = tf.constant([[4, 5, 6], [7, 8, 0]])
    padded = tf.concat([short, tf.zeros((2, 5), tf.int32)], axis=1)
    np.testing.assert_allclose(
        random_model((short, tar)).numpy(), random_model((padded, tar)).numpy(), atol=1e-5
    )


def test_inference_calls_are_deterministic_and_training_calls_use_dropout(random_model):
    x = (tf.constant([[4, 5, 6]]), tf.constant([[1, 7, 8]]))
    np.testing.assert_array_equal(random_model(x).numpy(), random_model(x).numpy())
    np.testing.assert_array_equal(
        random_model(x).numpy(), random_model(x, training=False).numpy()
    )
    assert not np.allclose(random_model(x, training=True).numpy(), random_model(x).numpy())


def test_return_attention_weights_has_every_layer_keyed_as_in_the_tutorial(random_model):
    inp, tar = tf.ones((2, 6), tf.int32) * 4, tf.ones((2, 3), tf.int32)
    logits, weights = random_model((inp, tar), return_attention_weights=True)
    assert logits.shape == (2, 3, 16)
    expected = {
        "encoder_layer1": (2, 4, 6, 6),
        "encoder_layer2": (2, 4, 6, 6),
        "decoder_layer1_block1": (2, 4, 3, 3),
        "decoder_layer1_block2": (2, 4, 3, 6),
        "decoder_layer2_block1": (2, 4, 3, 3),
        "decoder_layer2_block2": (2, 4, 3, 6),
    }
    assert {name: tuple(w.shape) for name, w in weights.items()} == expected
    np.testing.assert_allclose(weights["decoder_layer2_block2"].numpy().sum(-1), 1.0, atol=1e-5)


def held_out_accuracy(model):
    inp, dec_in, dec_out = reverse_task(512, seed=1)  # 16 full batches: one shape to compile
    return model.evaluate([inp, dec_in], dec_out, verbose=0, return_dict=True)[
        "masked_accuracy"
    ]


@pytest.mark.slow
def test_fit_with_tutorial_kargs_learns_the_reverse_task(trained_model):
    assert held_out_accuracy(trained_model) >= 0.99


@pytest.mark.slow
def test_fit_traces_its_step_once_and_trains_as_with_keras_own_build(monkeypatch):
    """The model, its metrics and optimizer are built before `fit` traces its
    step (`_compat.TensorFlowFit`): one trace where Keras' own build gives two,
    and the same trained weights."""
    traces = []
    train_step = kt.Transformer.train_step
    monkeypatch.setattr(kt.Transformer, "train_step",
                        lambda self, data: traces.append(1) or train_step(self, data))
    inp, dec_in, dec_out = reverse_task(96, seed=4)

    def fit():
        keras.utils.set_random_seed(2)
        model = kt.Transformer(**tiny_kargs(num_layers=1))
        model.compile("adam", loss=kt.masked_loss, metrics=[kt.masked_accuracy],
                      jit_compile=False)
        model.fit([inp, dec_in], dec_out, batch_size=32, epochs=2, verbose=0)
        return model.get_weights()

    built_first = fit()
    assert len(traces) == 1
    monkeypatch.setattr(kt.Transformer, "_maybe_symbolic_build",
                        keras.Model._maybe_symbolic_build)
    keras_build = fit()
    assert len(traces) == 3
    for ours, theirs in zip(built_first, keras_build, strict=True):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_fit_with_jit_compile_learns_the_reverse_task():
    model = fit_reverse(jit_compile=True, epochs=12, n=3008)  # 47 full batches: one XLA shape
    assert model.jit_compile
    assert held_out_accuracy(model) >= 0.99


@pytest.mark.slow
def test_keras_file_round_trip_gives_identical_predictions(trained_model, tmp_path):
    path = tmp_path / "model.keras"
    trained_model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, kt.Transformer)
    inp, dec_in, _ = reverse_task(8, seed=2)
    np.testing.assert_array_equal(
        loaded.predict([inp, dec_in], verbose=0), trained_model.predict([inp, dec_in], verbose=0)
    )
    np.testing.assert_array_equal(loaded.generate(inp).numpy(), trained_model.generate(inp).numpy())


@pytest.mark.slow
def test_tf_saved_model_save_and_reload_runs(trained_model, tmp_path):
    inp, dec_in, _ = reverse_task(4, seed=3)
    expected = trained_model([inp, dec_in]).numpy()
    tf.saved_model.save(trained_model, str(tmp_path))
    serve = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    specs = serve.structured_input_signature[1]
    names = sorted(specs)
    feeds = {
        name: tf.cast(array[: specs[name].shape[0]], specs[name].dtype)
        for name, array in zip(names, (inp, dec_in))
    }
    (output,) = serve(**feeds).values()
    np.testing.assert_allclose(output.numpy(), expected[: output.shape[0]], atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_a_model_whose_encoder_and_decoder_ran_first_builds_and_decodes(norm_first):
    # The tutorial's `inference` calls the encoder and decoder of a model directly.
    keras.utils.set_random_seed(0)
    model = kt.Transformer(**tiny_kargs(norm_first=norm_first))
    inp, tar = reverse_task(2)[:2]
    enc_padding_mask, look_ahead_mask, dec_padding_mask = kt.create_masks(inp, tar)
    enc_output = model.encoder(inp, enc_padding_mask)
    expected, _ = model.decoder(tar, enc_output, look_ahead_mask, dec_padding_mask)
    count = len(model.weights)
    tokens = model.generate(inp)
    assert len(model.weights) == count + 2  # the output layer's kernel and bias
    logits = model((inp, tar))
    np.testing.assert_allclose(logits.numpy(), model.final_layer(expected).numpy(), atol=1e-5)
    built_as_usual = kt.Transformer(**tiny_kargs(norm_first=norm_first))
    built_as_usual((inp, tar))
    built_as_usual.set_weights(model.get_weights())
    np.testing.assert_array_equal(built_as_usual.generate(inp), tokens)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [{"share_embeddings": True}, {"norm_first": True, "activation": "gelu",
                                  "position_encoding": "learned"}],
    ids=["shared", "pre_ln_gelu_learned"],
)
def test_model_options_train_and_round_trip(options, tmp_path):
    keras.utils.set_random_seed(0)
    model = kt.Transformer(**tiny_kargs(**options))
    model.compile("adam", loss=kt.masked_loss, metrics=[kt.masked_accuracy])
    inp, dec_in, dec_out = reverse_task(64)
    history = model.fit([inp, dec_in], dec_out, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded([inp, dec_in]).numpy(), model([inp, dec_in]).numpy())
    if options.get("share_embeddings"):
        assert loaded.encoder.embedding is loaded.decoder.embedding
        unshared = kt.Transformer(**tiny_kargs())
        unshared([inp, dec_in])
        assert model.count_params() < unshared.count_params()


def contains_seven_task(n, seed):
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, 10), np.int32)
    labels = np.zeros((n,), np.float32)
    for row in range(n):
        length = rng.integers(3, 11)
        ids[row, :length] = rng.choice([t for t in range(4, 16) if t != 7], size=length)
        if rng.random() < 0.5:
            ids[row, rng.integers(length)] = 7
            labels[row] = 1.0
    return ids, labels


@pytest.mark.slow
def test_encoder_drops_into_a_functional_classifier(tmp_path):
    keras.utils.set_random_seed(0)
    ids = keras.Input(shape=(None,), dtype="int32")
    encoder = kt.Encoder(**tiny_kargs(num_layers=1))
    pooled = keras.layers.GlobalAveragePooling1D()(encoder(ids))  # masked mean
    outputs = keras.layers.Dense(1, activation="sigmoid")(pooled)
    classifier = keras.Model(ids, outputs)
    classifier.compile(keras.optimizers.Adam(3e-3), "binary_crossentropy", metrics=["accuracy"])
    x, y = contains_seven_task(2000, seed=0)
    classifier.fit(x, y, batch_size=64, epochs=8, verbose=0)
    x_test, y_test = contains_seven_task(500, seed=1)
    assert classifier.evaluate(x_test, y_test, verbose=0)[1] >= 0.95

    classifier.save(tmp_path / "classifier.keras")
    loaded = keras.models.load_model(tmp_path / "classifier.keras")
    np.testing.assert_array_equal(loaded.predict(x_test, verbose=0),
                                  classifier.predict(x_test, verbose=0))


def test_encoder_output_carries_a_keras_mask_for_pooling():
    encoder = kt.Encoder(**tiny_kargs())
    ids = tf.constant([[4, 5, 0, 0]])
    np.testing.assert_array_equal(
        encoder.compute_mask(ids).numpy(), [[True, True, False, False]]
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fits_with_float32_logits_and_no_nan(name, policy):
    policy(name)
    keras.utils.set_random_seed(0)
    model = kt.Transformer(**tiny_kargs())
    model.compile("adam", loss=kt.masked_loss, metrics=[kt.masked_accuracy])
    inp, dec_in, dec_out = reverse_task(64)
    history = model.fit([inp, dec_in], dec_out, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()

    assert model.encoder.enc_layers[0].mha.compute_dtype == name.split("_")[1]
    fully_padded = np.zeros_like(inp[:2])
    logits, weights = model((fully_padded, dec_in[:2]), return_attention_weights=True)
    assert logits.dtype == tf.float32
    assert np.isfinite(logits.numpy()).all()
    for w in weights.values():
        assert np.isfinite(tf.cast(w, tf.float32).numpy()).all()
