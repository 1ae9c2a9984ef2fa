"""Attention masks of the tutorial: float tensors where 1 marks a position that
must NOT be attended to.

Shapes broadcast against attention logits `(batch, heads, T_q, T_k)`:
`create_padding_mask` -> `(B, 1, 1, S)`, `create_look_ahead_mask` -> `(T, T)`.
Runs on every Keras backend (`keras.ops` only).
"""

import keras
from keras import ops


def create_padding_mask(seq, pad_token_idx=0):
    """Marks the `<PAD>` positions of a batch of token ids.

    Args:
        seq: int tensor `(batch, seq_len)`. Token ids.
        pad_token_idx: int. The id of `<PAD>`. Defaults to `0`.

    Returns:
        float32 tensor `(batch, 1, 1, seq_len)`: 1.0 at padding, 0.0 elsewhere.

    Example:
    >>> keras.ops.convert_to_numpy(create_padding_mask([[5, 7, 0]]))[0, 0, 0]
    array([0., 0., 1.], dtype=float32)
    """
    seq = ops.convert_to_tensor(seq)
    mask = ops.cast(ops.equal(seq, ops.cast(pad_token_idx, seq.dtype)), "float32")
    return mask[:, None, None, :]  # (B, 1, 1, S)


def create_look_ahead_mask(size):
    """Marks the future positions each query position must not see.

    Args:
        size: int or scalar int tensor. The sequence length T.

    Returns:
        float32 tensor `(size, size)`: 1.0 above the diagonal, 0.0 on and below.

    Example:
    >>> keras.ops.convert_to_numpy(create_look_ahead_mask(3))
    array([[0., 1., 1.],
           [0., 0., 1.],
           [0., 0., 0.]], dtype=float32)
    """
    positions = ops.arange(size)  # (T,)
    return ops.cast(positions[None, :] > positions[:, None], "float32")  # (T, T)


def create_masks(inp, tar, pad_token_idx=0):
    """The three masks of the tutorial's `Transformer.call`.

    Args:
        inp: int tensor `(batch, src_len)`. Source token ids.
        tar: int tensor `(batch, tgt_len)`. Decoder input token ids.
        pad_token_idx: int. The id of `<PAD>`. Defaults to `0`.

    Returns:
        A tuple `(enc_padding_mask, combined_mask, dec_padding_mask)`:
        the source padding mask `(B, 1, 1, S)` for encoder self-attention,
        look-ahead combined with target padding `(B, 1, T, T)` for decoder
        self-attention, and the source padding mask `(B, 1, 1, S)` for the
        decoder's attention over the encoder output.
    """
    enc_padding_mask = create_padding_mask(inp, pad_token_idx)  # (B, 1, 1, S)
    dec_padding_mask = enc_padding_mask
    look_ahead_mask = create_look_ahead_mask(ops.shape(tar)[1])  # (T, T)
    dec_target_padding_mask = create_padding_mask(tar, pad_token_idx)  # (B, 1, 1, T)
    combined_mask = ops.maximum(dec_target_padding_mask, look_ahead_mask)  # (B, 1, T, T)
    return enc_padding_mask, combined_mask, dec_padding_mask


def is_keras_mask(mask):
    """Whether `mask` is a Keras boolean mask (True = keep), not an attention mask."""
    return mask is not None and keras.backend.standardize_dtype(mask.dtype) == "bool"


def as_attention_mask(mask):
    """Accepts a Keras boolean mask `(B, S)` (True = keep) as an attention mask.

    Keras attaches such masks to layer outputs and passes them to layers with a
    `mask` argument; they become the tutorial's float `(B, 1, 1, S)` mask with
    1 = do not attend. Float masks and `None` pass through unchanged.
    """
    if not is_keras_mask(mask):
        return mask
    return ops.cast(ops.logical_not(mask), "float32")[:, None, None, :]
