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

# The files that take longest, longest first (seconds of one worker in the clean-clone
# `.ci/run` of 2026-11-26 on 2 cores, 17.8 minutes in all). `pytest-xdist` hands each
# worker the next file in this order (`pytest_configure` turns off its own reordering
# by number of tests, which put files of a few long tests, such as test_scale.py,
# last), so the short files even out the end: that run's pytest took 978 s for
# 1,919 s of tests.
LONGEST_FIRST = (
    "test_generation.py",  # 237
    "test_recipe.py",  # 221
    "test_bert.py",  # 176
    "test_transformer.py",  # 171
    "test_scale.py",  # 168
    "test_backends.py",  # 142
    "test_faults.py",  # 113
    "test_serving.py",  # 109
    "test_export.py",  # 92
    "03_build_transformer.ipynb",  # 72
    "05_chatbot.ipynb",  # 67
    "06_savedmodel.ipynb",  # 62
    "test_properties.py",  # 57
    "07_bert_classification.ipynb",  # 54
    "04_train_translator.ipynb",  # 45
    "test_harness.py",  # 37
)


def pytest_configure(config):
    """Keep the order of `LONGEST_FIRST` under `--dist loadfile`: by default
    pytest-xdist sends the files with the most tests first."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


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
