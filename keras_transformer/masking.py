"""Attention masks of the tutorial: float tensors where 1 marks a position that
must NOT be attended to.

Shapes broadcast against attention logits `(batch, heads, T_q, T_k)`:
`create_padding_mask` -> `(B, 1, 1, S)`, `create_look_ahead_mask` -> `(T, T)`.
"""

import tensorflow as tf


def create_padding_mask(seq, pad_token_idx=0):
    """Marks the `<PAD>` positions of a batch of token ids.

    Args:
        seq: int tensor `(batch, seq_len)`. Token ids.
        pad_token_idx: int. The id of `<PAD>`. Defaults to `0`.

    Returns:
        float32 tensor `(batch, 1, 1, seq_len)`: 1.0 at padding, 0.0 elsewhere.

    Example:
    >>> create_padding_mask([[5, 7, 0]])[0, 0, 0].numpy()
    array([0., 0., 1.], dtype=float32)
    """
    seq = tf.convert_to_tensor(seq)
    mask = tf.cast(tf.equal(seq, tf.cast(pad_token_idx, seq.dtype)), tf.float32)
    return mask[:, tf.newaxis, tf.newaxis, :]  # (B, 1, 1, S)


def create_look_ahead_mask(size):
    """Marks the future positions each query position must not see.

    Args:
        size: int or scalar int tensor. The sequence length T.

    Returns:
        float32 tensor `(size, size)`: 1.0 above the diagonal, 0.0 on and below.

    Example:
    >>> create_look_ahead_mask(3).numpy()
    array([[0., 1., 1.],
           [0., 0., 1.],
           [0., 0., 0.]], dtype=float32)
    """
    return 1.0 - tf.linalg.band_part(tf.ones((size, size)), -1, 0)  # (T, T)


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
    look_ahead_mask = create_look_ahead_mask(tf.shape(tar)[1])  # (T, T)
    dec_target_padding_mask = create_padding_mask(tar, pad_token_idx)  # (B, 1, 1, T)
    combined_mask = tf.maximum(dec_target_padding_mask, look_ahead_mask)  # (B, 1, T, T)
    return enc_padding_mask, combined_mask, dec_padding_mask


def as_attention_mask(mask):
    """Accepts a Keras boolean mask `(B, S)` (True = keep) as an attention mask.

    Keras attaches such masks to layer outputs and passes them to layers with a
    `mask` argument; they become the tutorial's float `(B, 1, 1, S)` mask with
    1 = do not attend. Float masks and `None` pass through unchanged.
    """
    if mask is None or mask.dtype != tf.bool:
        return mask
    return tf.cast(tf.logical_not(mask), tf.float32)[:, tf.newaxis, tf.newaxis, :]
