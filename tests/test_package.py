"""The package as a whole: a light import, the core on its own, the public names."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

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


PACKAGE = Path(kt.__file__).parent
# The floor that runs on every Keras backend (DESIGN.md); the rest is the application.
CORE = ("_backend", "_compat", "_config", "_stack", "attention", "bert", "decoder", "encoder",
        "feed_forward", "generation", "masking", "positional", "training", "transformer")


def package_imports(module):
    """The package's modules that `module` imports anywhere in its file (at the
    top or inside a function), by their names below the package."""
    tree = ast.parse((PACKAGE / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_transformer"):
            base = node.module.removeprefix("keras_transformer").lstrip(".")
            for alias in node.names:
                name = f"{base}.{alias.name}".lstrip(".")
                is_module = (PACKAGE / f"{name.replace('.', '/')}.py").exists()
                found.add(name if is_module else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name.removeprefix("keras_transformer.") for alias in node.names
                         if alias.name.startswith("keras_transformer."))
    return found - {""}


def test_the_core_imports_no_application_module_and_has_no_import_cycle():
    # Read from the source, so a function-level import counts as well.
    graph = {module: package_imports(module) for module in CORE}
    assert {module: sorted(imports - set(CORE)) for module, imports in graph.items()
            if imports - set(CORE)} == {}
    done, path = set(), []

    def visit(module):
        assert module not in path, f"import cycle: {' -> '.join(path + [module])}"
        if module not in done:
            path.append(module)
            for imported in sorted(graph[module]):
                visit(imported)
            path.pop()
            done.add(module)

    for module in CORE:
        visit(module)


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
