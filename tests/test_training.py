import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt


def test_custom_schedule_follows_the_paper():
    schedule = kt.CustomSchedule(d_model=512, warmup_steps=4000)
    for step in (0, 99, 3999, 9999):
        n = step + 1
        expected = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-6)
    peak = float(schedule(3999))
    assert float(schedule(1000)) < peak and float(schedule(20000)) < peak


def test_custom_schedule_serialises():
    schedule = kt.CustomSchedule(128, warmup_steps=10)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(clone(5)) == float(schedule(5))


def test_the_recipes_optimizer_is_the_papers_adam_peaking_where_asked():
    from keras_transformer.training import default_learning_rate, recipe_optimizer

    adam = recipe_optimizer(256, 400)
    assert type(adam) is keras.optimizers.Adam
    assert (adam.beta_1, adam.beta_2, adam.epsilon) == (0.9, 0.98, 1e-9)
    schedule = adam.get_config()["learning_rate"]["config"]
    assert schedule == {"d_model": 256, "warmup_steps": 400,
                        "peak_learning_rate": default_learning_rate(256)}
    adamw = recipe_optimizer(256, 400, learning_rate=1e-3, weight_decay=0.01)
    assert type(adamw) is keras.optimizers.AdamW and adamw.weight_decay == 0.01
    assert adamw.get_config()["learning_rate"]["config"]["peak_learning_rate"] == 1e-3


def reference_loss(y_true, logits, smoothing):
    vocab = logits.shape[-1]
    log_probs = tf.nn.log_softmax(logits).numpy()
    target = np.eye(vocab)[y_true] * (1 - smoothing) + smoothing / vocab
    per_token = -(target * log_probs).sum(-1)
    mask = y_true != 0
    return per_token[mask].mean()


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_masked_loss_is_mean_over_non_pad_tokens(smoothing):
    rng = np.random.default_rng(0)
    y_true = np.array([[5, 6, 2, 0, 0], [7, 2, 0, 0, 0]])
    logits = rng.normal(size=(2, 5, 9)).astype("float32")
    got = float(kt.masked_loss(y_true, logits, label_smoothing=smoothing))
    np.testing.assert_allclose(got, reference_loss(y_true, logits, smoothing), rtol=1e-5)
    loss = kt.MaskedLoss(label_smoothing=smoothing)
    np.testing.assert_allclose(float(loss(y_true, logits)), got, rtol=1e-6)


def test_padding_does_not_dilute_the_loss():
    logits = tf.random.normal((1, 3, 9))
    y_true = np.array([[5, 6, 2]])
    padded_logits = tf.concat([logits, tf.random.normal((1, 4, 9))], axis=1)
    padded_true = np.array([[5, 6, 2, 0, 0, 0, 0]])
    np.testing.assert_allclose(
        float(kt.masked_loss(y_true, logits)), float(kt.masked_loss(padded_true, padded_logits)),
        rtol=1e-6,
    )


def test_masked_loss_rejects_bad_label_smoothing():
    with pytest.raises(ValueError, match="`label_smoothing`.*Received: label_smoothing=1.5"):
        kt.MaskedLoss(label_smoothing=1.5)


def test_masked_accuracy_ignores_padding():
    y_true = np.array([[3, 4, 0, 0]])
    logits = tf.one_hot([[3, 5, 0, 0]], 6)
    assert float(kt.masked_accuracy(y_true, logits)) == 0.5


def test_metrics_weigh_every_token_the_same_across_batches_of_different_lengths():
    """Batch 1: 2 tokens, both right; batch 2: 7 tokens, 1 right. Per token:
    3 / 9 right, where the mean of the batches' means is (1 + 1 / 7) / 2."""
    rng = np.random.default_rng(0)
    short = np.array([[5, 0], [6, 0]])
    long = np.array([[5, 6, 7, 0], [7, 6, 5, 4]])
    batches = [(short, np.eye(9)[[[5, 0], [6, 0]]] * 3.0),
               (long, np.eye(9)[[[5, 8, 8, 0], [8, 8, 8, 8]]] * 3.0)]
    batches = [(y, logits + rng.normal(0, 0.1, logits.shape)) for y, logits in batches]
    accuracy, cross_entropy = kt.MaskedAccuracy(), kt.MaskedCrossEntropy(label_smoothing=0.1)
    for y_true, logits in batches:
        accuracy.update_state(y_true, logits)
        cross_entropy.update_state(y_true, logits)
    np.testing.assert_allclose(float(accuracy.result()), 3 / 9, rtol=1e-6)
    counts = [(y_true != 0).sum() for y_true, _ in batches]
    losses = [float(kt.masked_loss(y_true, logits, label_smoothing=0.1))
              for y_true, logits in batches]
    np.testing.assert_allclose(float(cross_entropy.result()),
                               np.dot(counts, losses) / sum(counts), rtol=1e-5)
    assert abs(float(cross_entropy.result()) - np.mean(losses)) > 0.1
    restored = kt.MaskedCrossEntropy.from_config(cross_entropy.get_config())
    assert (restored.label_smoothing, restored.name) == (0.1, "masked_cross_entropy")
