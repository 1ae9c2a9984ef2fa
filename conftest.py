"""Root pytest configuration, shared by the tests, the docstring examples of the
package (`--doctest-modules`) and the notebooks (run by nbmake).

Test runs execute the notebooks in their fast mode (small training) unless
KT_NOTEBOOK_FAST is already set; the notebook kernels inherit this variable.
"""

import os

os.environ.setdefault("KT_NOTEBOOK_FAST", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402


def pytest_collection_modifyitems(items):
    """Every notebook belongs to the slow tier (each trains or plots for seconds)."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    """The names every docstring example may use without importing them."""
    doctest_namespace.update(tf=tf, keras=keras, np=np)
