"""The core's checks on one Keras backend, in its own process (`test_backends.py`).

    KERAS_BACKEND=jax python tests/backend_child.py OUT_DIR

The backend is chosen before Keras is imported, so each backend needs its own
process. The TensorFlow run comes first: it trains the reference model and
writes `OUT_DIR/reference.weights.h5`. Every run then loads those weights,
loads the `.keras` files that earlier runs saved, saves its own
(`OUT_DIR/<backend>.keras`) and writes what it measured to
`OUT_DIR/<backend>.npz` (arrays) and `OUT_DIR/<backend>.json` (facts), which
`test_backends.py` compares. On JAX and PyTorch, importing TensorFlow fails
in these runs: the core must work where TensorFlow is not installed.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if __name__ == "__main__" and os.environ.get("KERAS_BACKEND") in ("jax", "torch"):
    sys.modules["tensorflow"] = None  # `import tensorflow` raises ImportError

import keras
import mask_checks
import numpy as np

import keras_transformer as kt

KARGS = {"num_layers": 2, "d_model": 32, "num_heads": 4, "dff": 64, "input_vocab_size": 16,
         "target_vocab_size": 16, "maximum_position_encoding": 10, "rate": 0.1}
LEGACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "legacy")


def reverse_pairs(n, seed):
    """The toy reverse task (`keras_transformer.data.reverse_task`) in NumPy
    alone: that package's `tf.data` pipelines import TensorFlow."""
    rng = np.random.default_rng(seed)
    inp = np.zeros((n, 8), "int32")
    dec_in = np.zeros((n, 9), "int32")
    dec_out = np.zeros((n, 9), "int32")
    for row, length in enumerate(rng.integers(3, 9, n)):
        ids = rng.integers(4, 16, length)
        inp[row, :length] = ids
        dec_in[row, :length + 1] = [1, *ids[::-1]]
        dec_out[row, :length + 1] = [*ids[::-1], 2]
    return inp, dec_in, dec_out


def fit_losses(model, epochs):
    model.compile(keras.optimizers.Adam(3e-3), loss=kt.masked_loss)
    inp, dec_in, dec_out = reverse_pairs(512, seed=0)
    history = model.fit([inp, dec_in], dec_out, batch_size=32, epochs=epochs, verbose=0)
    return history.history["loss"]


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def cached_and_full_logits(model, inp, tar):
    """The decoder's logits for `tar`, step by step with the cache and at once."""
    enc_output, padding_mask = model.encode(inp)
    cache = model.init_cache(enc_output, tar.shape[1])
    steps = []
    for index in range(tar.shape[1]):
        logits, cache, _ = model.decode_step(tar[:, index], index, cache, padding_mask)
        steps.append(numpy(logits))
    full, _ = model.decode(tar, enc_output, padding_mask)
    return np.stack(steps, axis=1), numpy(full)


def main(out_dir):
    backend = keras.backend.backend()
    facts, arrays = {"backend": backend}, {}
    inp, tar, _ = reverse_pairs(6, seed=1)

    keras.utils.set_random_seed(0)
    trained = kt.Transformer(**KARGS)
    facts["fit_losses"] = fit_losses(trained, epochs=8)
    reference = os.path.join(out_dir, "reference.weights.h5")
    if backend == "tensorflow":
        trained.save_weights(reference)

    model = kt.Transformer(**KARGS)
    model.build(((None, 8), (None, 9)))
    model.load_weights(reference)
    arrays["inp"], arrays["tar"] = inp, tar
    arrays["logits"] = numpy(model((inp, tar)))
    arrays["greedy"] = numpy(model.generate(inp))
    arrays["greedy_no_cache"] = numpy(model.generate(inp, use_cache=False))
    arrays["beam"] = numpy(model.generate(inp, method="beam", beam_size=4))
    arrays["beam_top2"] = numpy(model.generate(inp, method="beam", num_return_sequences=2))
    arrays["mmi"] = numpy(model.generate(inp, method="mmi"))
    arrays["cached_logits"], arrays["full_logits"] = cached_and_full_logits(model, inp, tar)
    facts["inference"] = model.inference(inp[:1])
    first = numpy(model.generate(inp, method="sample", top_k=5, top_p=0.9, seed=7))
    again = numpy(model.generate(inp, method="sample", top_k=5, top_p=0.9, seed=7))
    facts["sample_reproducible"] = bool(np.array_equal(first, again))

    for other in ("tensorflow", "jax", "torch"):
        path = os.path.join(out_dir, f"{other}.keras")
        if other != backend and os.path.exists(path):
            arrays[f"logits_from_{other}_keras"] = numpy(keras.saving.load_model(path)((inp, tar)))
    model.save(os.path.join(out_dir, f"{backend}.keras"))

    half = kt.Transformer(**KARGS, dtype="mixed_bfloat16")
    half.build(((None, 8), (None, 9)))
    half.set_weights(model.get_weights())
    padded = np.concatenate([inp[:2], np.zeros_like(inp[:1])])  # last row: only <PAD>
    half_logits = half((padded, tar[:3]))
    facts["bfloat16_logits_dtype"] = keras.backend.standardize_dtype(half_logits.dtype)
    facts["bfloat16_logits_finite"] = bool(np.isfinite(numpy(half_logits)).all())
    facts["bfloat16_generate_shape"] = list(half.generate(padded).shape)

    facts["mask_differences"] = mask_checks.mask_differences()
    facts["half_precision_finite"] = mask_checks.half_precision_finite()

    attention = kt.MultiHeadAttention(d_model=8, num_heads=2)
    x = np.ones((1, 1, 8), "float32")
    try:
        attention(x, x, x, None, cache_index=0)
        facts["cache_index_error"] = None
    except ValueError as error:
        facts["cache_index_error"] = str(error)

    expected = np.load(os.path.join(LEGACY, "expected.npz"))
    old = keras.saving.load_model(os.path.join(LEGACY, "transformer.keras"))
    arrays["legacy_logits"] = numpy(old((expected["inp"], expected["tar"])))
    arrays["legacy_tokens"] = numpy(old.generate(expected["inp"], max_length=6))
    old_mlm = keras.saving.load_model(os.path.join(LEGACY, "mlm.keras"))
    arrays["legacy_mlm_logits"] = numpy(old_mlm(expected["inp"]))

    try:
        import tensorflow  # noqa: F401
        facts["tensorflow_importable"] = True
    except ImportError:
        facts["tensorflow_importable"] = False
    if backend != "tensorflow":
        try:
            kt.train  # noqa: B018
            facts["application_error"] = None
        except ImportError as error:
            facts["application_error"] = str(error)
    np.savez(os.path.join(out_dir, f"{backend}.npz"), **arrays)
    with open(os.path.join(out_dir, f"{backend}.json"), "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main(sys.argv[1])
