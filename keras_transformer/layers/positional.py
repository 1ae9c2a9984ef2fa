"""Sinusoidal positional encoding of "Attention Is All You Need", section 3.5.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))
"""

import numpy as np
from keras import ops


def get_angles(pos, i, d_model):
    """The angle `pos / 10000^(2*(i//2) / d_model)` of the tutorial.

    Args:
        pos: array of positions, e.g. `(position, 1)`.
        i: array of dimension indices, e.g. `(1, d_model)`.
        d_model: int. The model width.

    Returns:
        NumPy array broadcast from `pos` and `i`.
    """
    angle_rates = 1 / np.power(10000, (2 * (i // 2)) / np.float32(d_model))
    return pos * angle_rates


def positional_encoding(position, d_model):
    """The table of sinusoidal encodings for `position` positions.

    Sine on even dimensions, cosine on odd ones, as in the tutorial.

    Args:
        position: int. Number of positions (the tutorial's
            `maximum_position_encoding`).
        d_model: int. The model width.

    Returns:
        float32 tensor of the Keras backend `(1, position, d_model)`.

    Example:
    >>> tuple(positional_encoding(50, 512).shape)
    (1, 50, 512)
    """
    angle_rads = get_angles(
        np.arange(position)[:, np.newaxis], np.arange(d_model)[np.newaxis, :], d_model
    )  # (position, d_model)
    angle_rads[:, 0::2] = np.sin(angle_rads[:, 0::2])  # 2i
    angle_rads[:, 1::2] = np.cos(angle_rads[:, 1::2])  # 2i + 1
    return ops.convert_to_tensor(angle_rads[np.newaxis, ...], dtype="float32")  # (1, P, D)
