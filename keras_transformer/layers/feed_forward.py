"""Position-wise feed-forward network, "Attention Is All You Need" eq. 2.

    FFN(x) = act(x W_1 + b_1) W_2 + b_2     (act = ReLU in the paper)

Runs on every Keras backend.
"""

import keras

from keras_transformer import _config
from keras_transformer.layers._stack import Dense


def point_wise_feed_forward_network(d_model, dff, activation="relu", **kwargs):
    """Two dense layers applied to every position independently.

    Args:
        d_model: int. Input and output width.
        dff: int. Inner width.
        activation: str. `"relu"` (the tutorial) or `"gelu"` (BERT). Defaults
            to `"relu"`.
        **kwargs: other keys of the tutorial's `kargs` (ignored); `dtype`
            for both dense layers; `name` and `trainable` for the `Sequential`.

    Returns:
        `keras.Sequential([Dense(dff, activation), Dense(d_model)])` mapping
        `(B, T, d_model)` to `(B, T, d_model)`.

    Example:
    >>> ffn = point_wise_feed_forward_network(d_model=512, dff=2048)
    >>> tuple(ffn(np.zeros((64, 50, 512))).shape)
    (64, 50, 512)
    """
    kwargs = _config.layer_kwargs("point_wise_feed_forward_network", kwargs)
    _config.check_model_args(d_model=d_model, dff=dff)
    _config.check_choice("activation", activation, _config.ACTIVATIONS)
    dtype = kwargs.pop("dtype", None)
    return keras.Sequential(
        [
            Dense(dff, activation=activation, dtype=dtype),  # (B, T, dff)
            Dense(d_model, dtype=dtype),  # (B, T, d_model)
        ],
        name=kwargs.get("name"),
        trainable=kwargs.get("trainable", True),
    )
