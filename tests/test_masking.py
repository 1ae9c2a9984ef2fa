import numpy as np

import keras_transformer as kt


def test_padding_mask_marks_pad_positions():
    mask = kt.create_padding_mask(np.array([[7, 6, 0, 0], [1, 2, 3, 0]]))
    assert mask.shape == (2, 1, 1, 4)
    np.testing.assert_array_equal(mask[:, 0, 0].numpy(), [[0, 0, 1, 1], [0, 0, 0, 1]])


def test_padding_mask_with_custom_pad_id():
    mask = kt.create_padding_mask(np.array([[5, 9, 9]]), pad_token_idx=9)
    np.testing.assert_array_equal(mask[0, 0, 0].numpy(), [0, 1, 1])


def test_look_ahead_mask_is_strict_upper_triangle():
    np.testing.assert_array_equal(
        kt.create_look_ahead_mask(5).numpy(), 1 - np.tril(np.ones((5, 5)))
    )


def test_create_masks_combines_look_ahead_and_target_padding():
    inp = np.array([[4, 5, 0]])
    tar = np.array([[1, 6, 0, 0]])
    enc, combined, dec = kt.create_masks(inp, tar)
    np.testing.assert_array_equal(enc.numpy(), dec.numpy())
    assert combined.shape == (1, 1, 4, 4)
    expected = np.maximum(1 - np.tril(np.ones((4, 4))), [0, 0, 1, 1])
    np.testing.assert_array_equal(combined[0, 0].numpy(), expected)
