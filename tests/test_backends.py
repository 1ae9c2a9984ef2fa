"""The same model on TensorFlow, JAX and PyTorch.

`backend_child.py` runs the core's checks once per backend, each in its own
process (the backend is chosen before Keras is imported): TensorFlow first,
which trains the reference model, then JAX and PyTorch, which load its
weights. These tests compare what the three runs wrote.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

CHILD = os.path.join(os.path.dirname(__file__), "backend_child.py")
LEGACY = os.path.join(os.path.dirname(__file__), "data", "legacy")
# One child process per backend, each training or loading a model: the slow tier.
pytestmark = pytest.mark.slow

BACKENDS = ("tensorflow", "jax", "torch")
OTHERS = BACKENDS[1:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`{backend: (arrays, facts)}` from one child run per backend.

    With `KT_BACKEND_RUNS` naming a directory where the children already ran
    (on another machine: `benchmarks/bench_gpu.py` runs JAX and PyTorch on a
    GPU), their results are compared instead.
    """
    done = os.environ.get("KT_BACKEND_RUNS")
    out_dir = Path(done) if done else tmp_path_factory.mktemp("backends")
    results = {}
    for backend in BACKENDS:
        if not done:
            env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
            child = subprocess.run([sys.executable, CHILD, str(out_dir)], env=env,
                                   capture_output=True, text=True)
            if child.returncode:
                pytest.fail(f"backend_child.py failed on {backend}:\n{child.stderr[-4000:]}")
        with open(out_dir / f"{backend}.json") as f:
            results[backend] = (dict(np.load(out_dir / f"{backend}.npz")), json.load(f))
    results["dir"] = out_dir
    return results


@pytest.mark.parametrize("backend", OTHERS)
def test_weights_saved_on_tensorflow_give_the_same_logits(runs, backend):
    np.testing.assert_allclose(runs[backend][0]["logits"], runs["tensorflow"][0]["logits"],
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", OTHERS)
@pytest.mark.parametrize("method", ["greedy", "beam", "beam_top2", "mmi"])
def test_decoded_tokens_are_equal_across_backends(runs, backend, method):
    reference = runs["tensorflow"][0][method]
    assert len(np.unique(reference)) > 3  # a trained model, not one token repeated
    np.testing.assert_array_equal(runs[backend][0][method], reference)
    assert runs[backend][1]["inference"] == runs["tensorflow"][1]["inference"]


@pytest.mark.parametrize("backend", OTHERS)
def test_a_keras_file_saved_on_tensorflow_loads(runs, backend):
    np.testing.assert_allclose(runs[backend][0]["logits_from_tensorflow_keras"],
                               runs["tensorflow"][0]["logits"], atol=1e-5, rtol=0)


def test_a_keras_file_saved_on_jax_loads_on_pytorch(runs):
    np.testing.assert_allclose(runs["torch"][0]["logits_from_jax_keras"],
                               runs["tensorflow"][0]["logits"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", OTHERS)
def test_a_keras_file_saved_on_another_backend_loads_on_tensorflow(runs, backend):
    model = keras.saving.load_model(runs["dir"] / f"{backend}.keras")
    reference = runs["tensorflow"][0]
    logits = model((reference["inp"], reference["tar"]))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), reference["logits"], atol=1e-5,
                               rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_keras_file_saved_before_the_rewrite_loads(runs, backend):
    arrays = runs[backend][0]
    expected = np.load(os.path.join(LEGACY, "expected.npz"))
    np.testing.assert_allclose(arrays["legacy_logits"], expected["logits"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(arrays["legacy_mlm_logits"], expected["mlm_logits"], atol=1e-5,
                               rtol=0)
    np.testing.assert_array_equal(arrays["legacy_tokens"], expected["tokens"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_cached_decoding_equals_the_full_recomputation(runs, backend):
    arrays = runs[backend][0]
    tokens = arrays["tar"] != 0  # after <END>, padding is neither cached nor masked alike
    np.testing.assert_allclose(arrays["cached_logits"][tokens], arrays["full_logits"][tokens],
                               atol=1e-5, rtol=0)
    np.testing.assert_array_equal(arrays["greedy"], arrays["greedy_no_cache"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_lowers_the_loss(runs, backend):
    losses = runs[backend][1]["fit_losses"]
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_bfloat16_gives_float32_logits_and_no_nan_on_a_padded_row(runs, backend):
    facts = runs[backend][1]
    assert facts["bfloat16_logits_dtype"] == "float32"
    assert facts["bfloat16_logits_finite"]
    assert facts["bfloat16_generate_shape"][0] == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_mask_rule_and_two_attention_paths_agree(runs, backend):
    # `mask_checks.mask_differences`: boolean (Keras's) against numeric (the
    # tutorial's) masks in every layer and stack, `keras.layers.MultiHeadAttention`
    # with copied weights, `keras.ops.dot_product_attention` against the
    # explicit softmax, and Keras's implicit masks.
    differences = runs[backend][1]["mask_differences"]
    assert len(differences) == 22
    assert {name: value for name, value in differences.items() if value > 1e-5} == {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_precision_attention_has_no_nan_on_a_fully_masked_row(runs, backend):
    assert runs[backend][1]["half_precision_finite"] == {"mixed_float16": True,
                                                         "mixed_bfloat16": True}


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampling_with_a_seed_is_reproducible(runs, backend):
    assert runs[backend][1]["sample_reproducible"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_index_without_a_cache_is_a_value_error(runs, backend):
    assert "no `cache` was given" in runs[backend][1]["cache_index_error"]


@pytest.mark.parametrize("backend", OTHERS)
def test_the_core_runs_where_tensorflow_cannot_be_imported(runs, backend):
    assert not runs[backend][1]["tensorflow_importable"]
    assert runs["tensorflow"][1]["tensorflow_importable"]


@pytest.mark.parametrize("backend", OTHERS)
def test_the_application_says_it_needs_tensorflow(runs, backend):
    error = runs[backend][1]["application_error"]
    assert "keras_transformer.train needs the TensorFlow backend" in error
    assert repr(backend) in error
