import numpy as np

import keras_transformer as kt


def test_positional_encoding_matches_paper_formula():
    pe = kt.positional_encoding(50, 512).numpy()
    assert pe.shape == (1, 50, 512)
    pos, i = 17, 100
    angle = pos / 10000 ** (2 * (i // 2) / 512)
    np.testing.assert_allclose(pe[0, pos, i], np.sin(angle), atol=1e-6)
    np.testing.assert_allclose(pe[0, pos, i + 1], np.cos(angle), atol=1e-6)


def test_get_angles_broadcasts_positions_and_dims():
    angles = kt.get_angles(np.arange(3)[:, None], np.arange(4)[None, :], 4)
    assert angles.shape == (3, 4)
    np.testing.assert_allclose(angles[:, 0], angles[:, 1])
    np.testing.assert_allclose(angles[2, 2], 2 / 100)
