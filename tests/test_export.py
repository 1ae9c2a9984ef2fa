"""The string-in, string-out SavedModel, loaded where keras_transformer cannot be imported."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import train_small

from keras_transformer import Translator, cli, export_saved_model

INPUTS = [
    "Minsu read a book in the library yesterday.",
    "민수는 책을 읽었다",
    "",
    "   \t ",
    "Zebras juggle quantum pineapples.",
    "The teacher " + "reads a very long book " * 20,
    "pizza 🍕 party 🎉",
]
# Bytes that are not UTF-8, passed separately (JSON cannot carry them).
BAD_UTF8 = b"caf\xe9 \xff\xfe"

# Run in a fresh interpreter where `import keras_transformer` fails.
LOADER = """
import json, sys
sys.modules["keras_transformer"] = None
import tensorflow as tf
import tensorflow_text  # registers the tokenizers' ops
try:
    import keras_transformer
except ImportError:
    pass
else:
    raise SystemExit("keras_transformer must not be importable here")
served = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.argv[2])
signature = served.signatures["serving_default"](text=tf.constant(texts))
direct = served.translate(tf.constant(texts))
bad = served.translate(tf.constant([bytes.fromhex(sys.argv[3])]))["text"][0]
print(json.dumps({
    "signature": [t.decode("utf-8") for t in signature["text"].numpy()],
    "direct": [t.decode("utf-8") for t in direct["text"].numpy()],
    "ids_dtype": signature["token_ids"].dtype.name,
    "ids_shape": signature["token_ids"].shape.as_list(),
    "bad": bad.numpy().decode("utf-8"),
    "batch_1000": served.translate(tf.constant(texts[:1] * 1000))["text"].shape.as_list(),
}))
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained")
    return out, train_small(out)[0].translator


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    _, translator = trained
    path = str(tmp_path_factory.mktemp("export") / "saved")
    export_saved_model(translator.model, translator.source_tokenizer,
                       translator.target_tokenizer, path)
    return path


def stored_values(path):
    """How many numbers the SavedModel's checkpoint holds."""
    stored = tf.train.list_variables(os.path.join(path, "variables", "variables"))
    return sum(int(np.prod(shape)) for name, shape in stored
               if name != "_CHECKPOINTABLE_OBJECT_GRAPH")


@pytest.mark.slow
def test_saved_model_keeps_each_weight_once_and_no_optimizer(trained, exported, tmp_path):
    """Tracking the trained Keras model beside the signature's variables saved Adam's
    two slots and every weight twice: four times the weights' numbers."""
    _, translator = trained
    model = translator.model
    assert len(model.optimizer.variables) > 2 * len(model.trainable_weights), "not trained"
    assert stored_values(exported) == model.count_params()
    # The bfloat16 serving copy with MMI reranking: still each weight once, and the
    # same tokens as the copy's own `generate`.
    copy = model.serving_copy()
    path = export_saved_model(copy, translator.source_tokenizer, translator.target_tokenizer,
                              str(tmp_path / "mmi"), method="mmi")
    assert stored_values(path) == copy.count_params()
    texts = ["Minsu reads.", "The teacher reads a book in the park."]
    served = tf.saved_model.load(path)  # held: its variables live as long as it does
    np.testing.assert_array_equal(
        served.translate(tf.constant(texts))["token_ids"].numpy(),
        Translator(copy, translator.source_tokenizer, translator.target_tokenizer)
        .generate_ids(texts, method="mmi"),
    )


@pytest.mark.slow
def test_the_tf1_loader_of_tf_serving_runs_the_signature(trained, exported):
    """TF Serving's loader finds the variables through `captured_variables`."""
    import tensorflow_text  # noqa: F401  (registers the tokenizers' ops)

    _, translator = trained
    texts = INPUTS[:3]
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], exported)
        signature = meta.signature_def["serving_default"]
        served = session.run(signature.outputs["text"].name,
                             {signature.inputs["text"].name: np.array(texts, dtype=object)})
    assert [text.decode("utf-8") for text in served] == translator.translate(texts)


@pytest.mark.slow
def test_saved_model_serves_strings_without_the_package(trained, exported):
    _, translator = trained
    result = subprocess.run(
        [sys.executable, "-c", LOADER, exported, json.dumps(INPUTS), BAD_UTF8.hex()],
        capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    expected = translator.translate(INPUTS)
    assert served["signature"] == expected
    assert served["direct"] == expected
    assert served["ids_dtype"] == "int32" and served["ids_shape"][0] == len(INPUTS)
    assert served["bad"] == translator.translate(BAD_UTF8.decode("utf-8", "replace"))
    assert served["batch_1000"] == [1000]


def test_saved_model_holds_the_vocabularies_as_assets(trained, exported):
    out, _ = trained
    for name in ("source_vocab.txt", "target_vocab.txt"):
        with open(os.path.join(exported, "assets", name), encoding="utf-8") as f:
            exported_vocabulary = f.read()
        with open(out / name, encoding="utf-8") as f:
            assert exported_vocabulary == f.read()


@pytest.mark.slow
def test_saved_model_cli_lists_the_signature(exported):
    result = subprocess.run(
        [shutil.which("saved_model_cli", path=os.path.dirname(sys.executable))
         or "saved_model_cli", "show", "--dir", exported, "--all"],
        capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    signature = result.stdout.split("signature_def['serving_default']")[1]
    assert "inputs['text']" in signature and "DT_STRING" in signature
    assert "outputs['token_ids']" in signature and "DT_INT32" in signature


@pytest.mark.slow
def test_saved_model_cli_run_prints_the_translations(trained, exported):
    _, translator = trained
    texts = INPUTS[:2]
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "saved-model-cli", "run", "--dir",
         exported, "--tag_set", "serve", "--signature_def", "serving_default",
         "--input_exprs", f"text={json.dumps(texts)}"],
        capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.split("Result for output key text:")[1]
    for translation in translator.translate(texts):  # printed as escaped UTF-8 bytes
        assert str(translation.encode("utf-8"))[1:] in printed


@pytest.mark.slow
def test_export_replaces_an_old_model_and_leaves_it_on_failure(trained, tmp_path, monkeypatch):
    _, translator = trained
    path = str(tmp_path / "model")
    args = (translator.model, translator.source_tokenizer, translator.target_tokenizer, path)
    export_saved_model(*args)
    export_saved_model(*args, method="beam", beam_size=2)  # replaces it
    assert sorted(os.listdir(tmp_path)) == ["model"]

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.saved_model, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_saved_model(*args)
    assert sorted(os.listdir(tmp_path)) == ["model"]  # no half-written directory left
    monkeypatch.undo()
    # The surviving export decodes with beam search exactly as `generate` does.
    served = tf.saved_model.load(path)
    texts = INPUTS[:2] + ["Minsu reads.", "The teacher reads a book in the park."]
    np.testing.assert_array_equal(
        served.translate(tf.constant(texts))["token_ids"].numpy(),
        translator.generate_ids(texts, method="beam", beam_size=2),
    )


def test_cli_export(trained, tmp_path, capsys):
    out, _ = trained
    target = tmp_path / "cli_export"
    assert cli.main(["export", "--model", str(out), "--out", str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert (target / "saved_model.pb").exists()


def test_export_rejects_sampling(trained, tmp_path):
    _, translator = trained
    with pytest.raises(ValueError, match="method"):
        export_saved_model(translator.model, translator.source_tokenizer,
                           translator.target_tokenizer, str(tmp_path / "x"), method="sample")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_keras_export_of_the_forward_pass_still_works(trained, tmp_path):
    _, translator = trained
    ids = tf.TensorSpec([None, None], tf.int32)
    translator.model.export(str(tmp_path / "forward"), input_signature=[(ids, ids)],
                            verbose=False)
    served = tf.saved_model.load(str(tmp_path / "forward"))
    inputs = (translator.encode(["Minsu reads a book."]), tf.constant([[1, 5, 6]]))
    np.testing.assert_allclose(served.serve(inputs), translator.model(inputs), atol=1e-5)
