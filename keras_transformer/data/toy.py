"""A toy sequence-to-sequence task: reverse a sequence of token ids."""

import numpy as np

from keras_transformer import _config


def reverse_task(n, vocab_size=16, min_len=3, max_len=8, seed=0):
    """Pairs (ids, ids reversed + `<END>`) in the tutorial's training layout.

    Ids 4 .. vocab_size-1 are content; 0-3 are `<PAD>`, `<SOS>`, `<END>`,
    `<UNK>`.

    Args:
        n: int. Number of pairs.
        vocab_size: int > 4. Vocabulary size. Defaults to `16`.
        min_len: int. Shortest source. Defaults to `3`.
        max_len: int. Longest source. Defaults to `8`.
        seed: int. Seed of the NumPy generator. Defaults to `0`.

    Returns:
        int32 arrays `(index_inputs (n, max_len), index_outputs (n, max_len + 1),
        index_targets (n, max_len + 1))` padded with 0: the source, `<SOS>` +
        target (decoder input) and target + `<END>` (what `fit` predicts), as
        in `model.fit([index_inputs, index_outputs], index_targets)`.

    Example:
    >>> inp, dec_in, dec_out = reverse_task(1, min_len=3, max_len=3, seed=1)
    >>> bool((dec_out[0, :3] == inp[0, ::-1]).all() and dec_out[0, 3] == 2)
    True
    """
    n = _config.check_positive_int("n", n)
    min_len = _config.check_positive_int("min_len", min_len)
    max_len = _config.check_positive_int("max_len", max_len)
    if vocab_size <= 4 or min_len > max_len:
        raise ValueError(
            "Received invalid values for arguments `vocab_size`, `min_len`, "
            "`max_len`: expected vocab_size > 4 and min_len <= max_len. Received: "
            f"vocab_size={vocab_size}, min_len={min_len}, max_len={max_len}"
        )
    rng = np.random.default_rng(seed)
    inp = np.zeros((n, max_len), np.int32)
    dec_in = np.zeros((n, max_len + 1), np.int32)
    dec_out = np.zeros((n, max_len + 1), np.int32)
    for row in range(n):
        length = rng.integers(min_len, max_len + 1)
        source = rng.integers(4, vocab_size, size=length)
        target = [*source[::-1], 2]
        inp[row, :length] = source
        dec_out[row, : length + 1] = target
        dec_in[row, : length + 1] = [1, *target[:-1]]
    return inp, dec_in, dec_out
