"""Attention masks: the tutorial's, Keras's, and the one rule every layer reads them by.

The tutorial's masks are float tensors where 1 marks a position that must NOT
be attended to; they broadcast against the attention logits
`(batch, heads, T_q, T_k)`: `create_padding_mask` -> `(B, 1, 1, S)`,
`create_look_ahead_mask` -> `(T, T)`, `create_masks` -> both combined.

The rule of every layer (`attend_mask`): **a boolean mask is Keras's (True =
attend), a numeric mask the tutorial's (1 = blocked)**. Accepted shapes: Keras's
`(B, S)` padding (boolean) and `(B, T, S)` attention; the tutorial's
`(B, 1, 1, S)`, `(B, 1, T, S)` (or `(B, heads, T, S)`) and `(T, S)` (numeric).
Any other shape is a `ValueError`.

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


def attend_mask(mask, num_heads, query_length, key_length, batch_size=None):
    """Any mask a layer accepts -> boolean, True = attend, rank 4.

    Args:
        mask: `None`; a boolean mask (Keras's: True = attend) of shape
            `(B, S)`, `(B, T, S)` or `(B, 1 or heads, T or 1, S)`; or a
            numeric mask (the tutorial's: 1 = blocked) of shape `(T, S)`,
            `(B, T, S)` or `(B, 1 or heads, T or 1, S)`.
        num_heads: int. The heads H.
        query_length: int or `None`. The queries T (`None`: not checked).
        key_length: int or `None`. The keys S (`None`: not checked).
        batch_size: int or `None`. The batch B (`None`: not checked).

    Returns:
        `None`, or a boolean tensor broadcastable to `(B, H, T, S)`.

    Raises:
        ValueError: the mask has another rank or shape, naming it.

    Example:
    >>> padding = np.array([[True, True, False]])  # Keras: (B, S)
    >>> tutorial = create_padding_mask([[5, 7, 0]])  # (B, 1, 1, S), 1 = blocked
    >>> a = attend_mask(padding, 2, 3, 3)
    >>> b = attend_mask(tutorial, 2, 3, 3)
    >>> bool(keras.ops.all(a == b)), tuple(a.shape)
    (True, (1, 1, 1, 3))
    """
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    boolean = is_keras_mask(mask)
    received = tuple(mask.shape)
    expected = {2: "(B, S)" if boolean else "(T, S)", 3: "(B, T, S)",
                4: "(B, 1 or heads, T or 1, S)"}
    if len(received) == 2 and boolean:
        mask = mask[:, None, None, :]  # (B, 1, 1, S)
    elif len(received) == 2:
        mask = mask[None, None]  # (1, 1, T, S)
    elif len(received) == 3:
        mask = mask[:, None]  # (B, 1, T, S)
    wanted = (batch_size, num_heads, query_length, key_length)
    if len(received) not in expected or any(
        size not in (None, 1, want) for size, want in zip(mask.shape, wanted)
        if want is not None
    ):
        kind = ("boolean mask (Keras's, True = attend)" if boolean
                else "numeric mask (the tutorial's, 1 = blocked)")
        raise ValueError(
            f"Received an invalid value for argument `mask`, expected a {kind} of shape "
            f"{' or '.join(expected.values())}, with B={batch_size}, heads={num_heads}, "
            f"T={query_length} queries and S={key_length} keys. Received: "
            f"mask.shape={received}"
        )
    return attends(mask)


def attends(mask):
    """A boolean mask, True = attend, from either kind: a boolean one (Keras's)
    as it is, a numeric one (the tutorial's, 1 = blocked) where it is <= 0."""
    mask = ops.convert_to_tensor(mask)
    return mask if is_keras_mask(mask) else ops.cast(mask, "float32") <= 0.0


def is_keras_mask(mask):
    """Whether `mask` is boolean: Keras's kind of mask (True = attend, or keep)."""
    return mask is not None and keras.backend.standardize_dtype(mask.dtype) == "bool"
