"""The tests' fixtures and the property tests' settings (the helpers they share
live in `helpers.py`)."""

import fcntl
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest
from helpers import fit_reverse, tiny_kargs
from hypothesis import HealthCheck, settings

import keras_transformer as kt

# Property tests: KT_HYPOTHESIS_EXAMPLES examples each (200 by default), no
# per-example deadline (TensorFlow traces functions on first use), no example
# database written into the checkout.
settings.register_profile(
    "keras_transformer",
    max_examples=int(os.environ.get("KT_HYPOTHESIS_EXAMPLES", "200")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("keras_transformer")


@pytest.fixture(scope="session")
def trained_model(tmp_path_factory):
    """`fit_reverse`'s model, trained once a run: under `pytest -n` the first
    worker that asks trains and saves it, and the others load that file."""
    run_dir = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_dir = run_dir.parent  # this run's directory, shared by its workers
    path = run_dir / "trained_model.keras"
    with open(run_dir / "trained_model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return keras.saving.load_model(path)
        model = fit_reverse(jit_compile=False)
        model.save(path)
        return model


@pytest.fixture
def random_model():
    keras.utils.set_random_seed(1)
    return kt.Transformer(**tiny_kargs())


@pytest.fixture
def policy():
    """Sets a global dtype policy for one test and restores float32 after."""

    def set_policy(name):
        keras.mixed_precision.set_global_policy(name)

    yield set_policy
    keras.mixed_precision.set_global_policy("float32")
