"""The tests' fixtures and the property tests' settings (the helpers they share
live in `helpers.py`)."""

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
def trained_model():
    return fit_reverse(jit_compile=False)


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
