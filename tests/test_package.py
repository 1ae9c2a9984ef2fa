"""The package as a whole: a light import, the core on its own, the public names."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import keras_transformer as kt

APPLICATION = ("sacrebleu", "tensorflow_text", "keras_transformer.recipes",
               "keras_transformer.recipes.seq2seq", "keras_transformer.serving",
               "keras_transformer.serving.translator", "keras_transformer.serving.export",
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
# The floor that runs on every Keras backend (DESIGN.md): these folders and
# modules; everything else in the package is the application.
CORE_FOLDERS = ("layers", "models", "generation", "training")
CORE = ("_backend", "_compat", "_config") + tuple(
    module for folder in CORE_FOLDERS
    for module in [folder] + [f"{folder}.{path.stem}"
                              for path in sorted((PACKAGE / folder).glob("*.py"))
                              if path.stem != "__init__"]
)


def source(module):
    """The file of `module`, a name below the package ("layers.attention")."""
    path = PACKAGE / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def is_module(name):
    path = PACKAGE / name.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").exists()


def package_imports(module):
    """The package's modules that `module` imports anywhere in its file (at the
    top or inside a function), by their names below the package. Importing
    `layers.attention` from outside `layers` runs `layers/__init__.py` first,
    so the folder counts as imported too."""
    tree = ast.parse(source(module).read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_transformer"):
            base = node.module.removeprefix("keras_transformer").lstrip(".")
            for alias in node.names:
                name = f"{base}.{alias.name}".lstrip(".")
                found.add(name if is_module(name) else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name.removeprefix("keras_transformer.") for alias in node.names
                         if alias.name.startswith("keras_transformer."))
    folder = module if source(module).name == "__init__.py" else module.rpartition(".")[0]
    for name in list(found):
        parent = name.rpartition(".")[0]
        if parent and not (folder + ".").startswith(parent + "."):
            found.add(parent)
    return found - {"", module}


def assert_no_cycle(graph):
    """`graph`: `{module: the modules it imports}`; fails naming a cycle's path."""
    done, path = set(), []

    def visit(module):
        assert module not in path, f"import cycle: {' -> '.join(path + [module])}"
        if module not in done:
            path.append(module)
            for imported in sorted(graph[module]):
                visit(imported)
            path.pop()
            done.add(module)

    for module in graph:
        visit(module)


def test_the_core_imports_no_application_module_and_has_no_import_cycle():
    """No module of a core folder imports the application (text/, data/,
    recipes/, serving/, cli, plotting...), and the core has no import cycle.
    Read from the source, so a function-level import counts as well."""
    assert {"layers.attention", "models.transformer", "generation.beam",
            "training.losses"} <= set(CORE)
    graph = {module: package_imports(module) for module in CORE}
    assert {module: sorted(imports - set(CORE)) for module, imports in graph.items()
            if imports - set(CORE)} == {}
    assert_no_cycle(graph)


def test_no_benchmark_script_imports_another_that_imports_it_back():
    """One script per question: a script may use another's workload, never in a cycle."""
    scripts = {path.stem: path for path in (PACKAGE.parent / "benchmarks").glob("*.py")}
    graph = {}
    for name, path in scripts.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {node.module for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and node.module in scripts}
    assert {"bench_train", "bench_peers", "machine"} <= set(graph)
    assert_no_cycle(graph)


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
        "import sys, json\nimport keras_transformer.recipes.classify\n"
        "print(json.dumps(sorted(m for m in sys.modules if m in "
        "('sacrebleu', 'keras_transformer.recipes.seq2seq',"
        " 'keras_transformer.serving.translator'))))"
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


def test_notebooks_install_themselves_are_stored_executed_and_listed():
    """Stored by `tools/store_notebooks.py`: every cell run, no error, the run
    recorded, no path of the machine that ran them, modest in size."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    notebooks = sorted(name for name in os.listdir(os.path.join(root, "notebooks"))
                       if name.endswith(".ipynb"))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert len(notebooks) >= 8
    for name in notebooks:
        path = os.path.join(root, "notebooks", name)
        assert os.path.getsize(path) < 1_500_000, name
        with open(path, encoding="utf-8") as f:
            notebook = json.load(f)
        cells = notebook["cells"]
        code = [cell for cell in cells if cell["cell_type"] == "code"]
        assert all(cell["execution_count"] is not None for cell in code), name
        outputs = [output for cell in code for output in cell["outputs"]]
        assert not [output for output in outputs if output["output_type"] == "error"], name
        run = notebook["metadata"]["keras_transformer"]
        assert run["mode"] in ("full", "fast") and run["version"] and run["date"], name
        run_line = f"> 아래 출력을 만든 실행: keras_transformer {run['version']}, {run['date']}"
        assert run_line in "".join(cells[0]["source"]), name
        source = "".join("".join(cell["source"]) for cell in cells)
        source += json.dumps(outputs, ensure_ascii=False)
        assert 'find_spec("keras_transformer") is None' in "".join(code[0]["source"]), name
        assert 'print("모든 확인을 통과했습니다")' in "".join(code[-1]["source"]), name
        # no machine paths: 06 once built dirname(sys.executable)/saved_model_cli
        assert not any(path in source for path in ("/work/", "/home/", "/tmp/",
                                                   "dirname(sys.executable)")), name
        assert f"(notebooks/{name})" in readme, f"{name} is not in the README's table"


def test_the_application_subpackages_load_as_attributes():
    assert kt.data.load_chatbot_data(sample=True, columns=("Q", "label"))[0][1] in "012"
    assert kt.text.WordTokenizer.__name__ == "WordTokenizer"
    assert {"data", "text"} <= set(dir(kt))
