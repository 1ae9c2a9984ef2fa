"""Scale: several devices and processes, mixed precision, static shapes for XLA and TPUs."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from helpers import TINY_TRAIN, run_two_workers, tiny_kargs

import keras_transformer as kt
from keras_transformer import train
from keras_transformer.data import english_korean_corpus, reverse_task
from keras_transformer.data.pipeline import padded_sources

CHILD = os.path.join(os.path.dirname(__file__), "distributed_child.py")
TINY = dict(TINY_TRAIN, samples=0)


@pytest.mark.slow
def test_mirrored_over_two_cpus_computes_the_one_device_gradients(tmp_path):
    """Plain SGD: each weight moves by exactly -learning rate x gradient, so a
    gradient N times too big or too small (the replicas' losses summed, or
    averaged twice) shows; Adam, invariant to the gradient's scale, would hide it."""
    subprocess.run([sys.executable, CHILD, "mirrored", str(tmp_path)], check=True,
                   timeout=300)
    one, two = (np.load(tmp_path / f"{name}.npz") for name in ("one_device", "mirrored"))
    assert int(one["replicas"]) == 1 and int(two["replicas"]) == 2
    names = sorted(key for key in one.files if key.startswith("before_"))
    assert names and len(names) == len([k for k in two.files if k.startswith("before_")])
    for name in names:
        index = name.split("_")[1]
        np.testing.assert_array_equal(one[name], two[name])  # the same initial weights
        np.testing.assert_allclose(two[f"gradient_{index}"], one[f"gradient_{index}"],
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(two[f"final_{index}"], one[f"final_{index}"],
                                   rtol=1e-4, atol=1e-5)
    largest = max(np.abs(one[f"gradient_{n.split('_')[1]}"]).max() for n in names)
    assert largest > 1e-2  # the steps did move the weights
    # Evaluation in batches of 32 and 3, the last split 2 + 1 over the replicas.
    np.testing.assert_allclose(float(two["accuracy"]), float(one["accuracy"]), atol=1e-6)
    np.testing.assert_allclose(float(one["accuracy"]), float(one["numpy_accuracy"]),
                               atol=1e-6)
    # MaskedAccuracy counts tokens, over the batches and over the replicas.
    for result in (one, two):
        np.testing.assert_allclose(float(result["token_accuracy"]),
                                   float(one["numpy_token_accuracy"]), atol=1e-6)
    assert abs(float(one["numpy_token_accuracy"]) - float(one["numpy_accuracy"])) > 1e-4


@pytest.mark.slow
def test_two_worker_processes_end_with_identical_weights(tmp_path):
    assert run_two_workers("multi_worker", tmp_path) == [0, 0]
    chief, other = (np.load(tmp_path / f"weights-{i}.npz") for i in range(2))
    assert len(chief.files) == len(other.files) > 10
    for name in chief.files:
        np.testing.assert_array_equal(chief[name], other[name])
    # The chief writes into the output directory, the other worker beside it.
    assert (tmp_path / "run" / "model.keras").exists()
    assert (tmp_path / "run" / "worker-1" / "model.keras").exists()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_training_learns_the_reverse_task(policy):
    keras.utils.set_random_seed(0)
    model = kt.Transformer(**tiny_kargs(d_model=64, dff=128), dtype=policy)
    model.compile(keras.optimizers.Adam(2e-3), loss=kt.masked_loss,
                  metrics=[kt.masked_accuracy])
    if policy == "mixed_float16":  # dynamic loss scaling, from compile
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    inp, dec_in, dec_out = reverse_task(3000)
    # Four epochs: 0.98 held-out accuracy in float32 (2026-11-27).
    model.fit([inp, dec_in], dec_out, batch_size=64, epochs=4, verbose=0)
    assert model.encoder.enc_layers[0].mha.compute_dtype == policy.split("_")[1]
    test_inp, test_dec_in, test_dec_out = reverse_task(256, seed=99)
    _, accuracy = model.evaluate([test_inp, test_dec_in], test_dec_out, verbose=0)
    assert accuracy > 0.9


@pytest.mark.slow
def test_static_shapes_give_the_xla_train_step_one_shape(tmp_path, monkeypatch):
    """Without `static_shape`, batches are padded to their longest row
    (`test_data.py`), and XLA would compile each shape it meets."""
    traces = []  # Keras calls train_step in Python once per trace of the step
    original = kt.Transformer.train_step
    monkeypatch.setattr(kt.Transformer, "train_step",
                        lambda self, data: traces.append(data) or original(self, data))
    corpus = english_korean_corpus(train_size=64, valid_size=16, test_size=0, seed=4)
    result = train(corpus["train"], str(tmp_path), corpus["valid"], epochs=1,
                   jit_compile=True, static_shape=True, **TINY)
    assert {tuple(batch[1].shape) for batch in traces} == {(32, 16)}
    translator = result.translator
    sources = padded_sources([s for s, _ in corpus["valid"]], translator.source_tokenizer,
                             translator.max_length).numpy()
    assert sources.shape == (16, translator.max_length)
    np.testing.assert_array_equal(translator.model.generate(sources, jit_compile=True),
                                  translator.model.generate(sources))


def test_recipe_checks_the_scale_options(tmp_path):
    corpus = english_korean_corpus(train_size=20, valid_size=4, test_size=0, seed=5)
    with pytest.raises(ValueError, match="mixed_precision"):
        train(corpus["train"], str(tmp_path), mixed_precision="fp8", **TINY)
    with pytest.raises(ValueError, match="strategy"):
        train(corpus["train"], str(tmp_path), strategy="horovod", **TINY)
    with pytest.raises(ValueError, match="do not fill one batch"):
        train(corpus["train"], str(tmp_path), static_shape=True, **TINY)
