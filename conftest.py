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

# The files that take longest, longest first (seconds on 2 cores, one worker each, in a
# whole `-n 2 --dist loadfile` run of 2026-11-26). `pytest-xdist` hands each worker the
# next file in collection order, so starting with these leaves the short files to even out
# the end: the run took 19.2 minutes with one worker idle for its last minutes, against
# 17.3 minutes of work per worker.
LONGEST_FIRST = (
    "test_generation.py",  # 288
    "test_bert.py",  # 258
    "test_scale.py",  # 252
    "test_recipe.py",  # 220
    "test_transformer.py",  # 170
    "test_backends.py",  # 161
    "test_faults.py",  # 103
    "test_serving.py",  # 91
    "test_harness.py",  # 87
    "05_chatbot.ipynb",  # 86
    "test_export.py",  # 79
    "test_properties.py",  # 72
    "03_build_transformer.ipynb",  # 64
    "06_savedmodel.ipynb",  # 49
    "04_train_translator.ipynb",  # 46
    "07_bert_classification.ipynb",  # 43
)


def pytest_collection_modifyitems(items):
    """Every notebook belongs to the slow tier (each trains or plots for seconds);
    the longest files run first (`LONGEST_FIRST`)."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    """The names every docstring example may use without importing them."""
    doctest_namespace.update(tf=tf, keras=keras, np=np)
