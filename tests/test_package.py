"""The package as a whole: a light import, the core on its own, the public names."""

import json
import os
import subprocess
import sys

import pytest

import keras_transformer as kt

APPLICATION = ("sacrebleu", "tensorflow_text", "keras_transformer.recipe",
               "keras_transformer.translator", "keras_transformer.export",
               "keras_transformer.plotting", "keras_transformer.text",
               "keras_transformer.data")

BUILD_AND_RUN = """
import tensorflow as tf
layer = kt.EncoderLayer(d_model=16, num_heads=2, dff=32)
layer(tf.ones((2, 5, 16)), None)
model = kt.Transformer(num_layers=1, d_model=16, num_heads=2, dff=32, input_vocab_size=20,
                       target_vocab_size=20, maximum_position_encoding=8)
model((tf.ones((2, 4), tf.int32), tf.ones((2, 3), tf.int32)))
model.generate(tf.ones((2, 4), tf.int32), method="mmi")
"""


def run_python(code):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, check=False,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_import_and_a_layer_load_no_application_module():
    loaded = json.loads(run_python(
        "import sys, json\nimport keras_transformer as kt\n" + BUILD_AND_RUN
        + f"\nprint(json.dumps(sorted(m for m in sys.modules if m in {APPLICATION!r})))"
    ).strip().splitlines()[-1])
    assert loaded == []


@pytest.mark.slow
def test_the_encoder_only_recipes_do_not_load_the_translation_recipe():
    loaded = json.loads(run_python(
        "import sys, json\nimport keras_transformer.classification\n"
        "print(json.dumps(sorted(m for m in sys.modules if m in "
        "('sacrebleu', 'keras_transformer.recipe', 'keras_transformer.translator'))))"
    ).strip().splitlines()[-1])
    assert loaded == []


@pytest.mark.slow
def test_the_core_needs_neither_matplotlib_sacrebleu_nor_tensorflow_text():
    """Keras itself imports matplotlib when it is installed, so the core is
    shown not to need it: it runs with all three made unimportable."""
    run_python(
        "import sys\n"
        "for name in ('matplotlib', 'sacrebleu', 'tensorflow_text'):\n"
        "    sys.modules[name] = None\n"
        "import keras_transformer as kt\n" + BUILD_AND_RUN
    )


def test_application_names_load_on_first_use():
    for name in ("train", "TrainConfig", "TrainResult", "Translator", "evaluate",
                 "export_saved_model"):
        assert getattr(kt, name).__name__ == name
        assert name in dir(kt) and name in kt.__all__


def test_notebooks_install_themselves_are_stored_clean_and_listed():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    notebooks = sorted(name for name in os.listdir(os.path.join(root, "notebooks"))
                       if name.endswith(".ipynb"))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert len(notebooks) >= 8
    for name in notebooks:
        with open(os.path.join(root, "notebooks", name), encoding="utf-8") as f:
            cells = json.load(f)["cells"]
        code = [cell for cell in cells if cell["cell_type"] == "code"]
        source = "".join("".join(cell["source"]) for cell in cells)
        assert all(not cell["outputs"] and cell["execution_count"] is None for cell in code), name
        assert 'find_spec("keras_transformer") is None' in "".join(code[0]["source"]), name
        assert 'print("all checks passed")' in "".join(code[-1]["source"]), name
        # no machine paths: 06 once built dirname(sys.executable)/saved_model_cli
        assert not any(path in source for path in ("/work/", "/home/", "dirname(sys.executable)"))
        assert f"(notebooks/{name})" in readme, f"{name} is not in the README's table"
