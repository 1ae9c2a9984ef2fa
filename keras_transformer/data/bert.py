"""Inputs of encoder-only models: `[CLS] A [SEP] (B [SEP])` with segment ids,
BERT's masking for the masked language model, and tf.data pipelines.

Every function is made of TensorFlow ops, so it runs eagerly and inside
`tf.data.Dataset.map`.
"""

import math

import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer import _config

MASK_RATE = 0.15
# What becomes of a selected token: [MASK] 80%, a random token 10%, itself 10%.
MASK_SHARES = (0.8, 0.1, 0.1)


def _need_encoder_tokens(tokenizer):
    if tokenizer.cls_id is None or tokenizer.sep_id is None or tokenizer.mask_id is None:
        raise ValueError(
            "Received an invalid value for argument `tokenizer`: its vocabulary lacks "
            "[CLS], [SEP] or [MASK] (learn it with `from_texts(..., encoder_tokens=True)`)"
        )


def pack_inputs(first, second=None, *, cls_id, sep_id, pad_id=0, max_length):
    """Ragged ids of one or two segments -> BERT's packed inputs.

    `[CLS] first [SEP]` with segment ids 0, or `[CLS] first [SEP] second [SEP]`
    with segment ids 0 for the first part and 1 for the second. Segments too
    long for `max_length` are cut, the longer one first (round robin).

    Args:
        first: `tf.RaggedTensor` int `(B, None)`. Token ids of segment A.
        second: `tf.RaggedTensor` int `(B, None)` or `None`. Segment B.
        cls_id, sep_id, pad_id: int. Ids of `[CLS]`, `[SEP]`, `<PAD>`.
        max_length: int. Width of the output, special tokens included.

    Returns:
        `(token_ids, segment_ids)`, int32 `(B, L)` with `L <= max_length` the
        longest packed row, padded with `pad_id` (segment ids with 0).

    Example:
    >>> ids, segments = pack_inputs(tf.ragged.constant([[7, 8], [9]]),
    ...                             tf.ragged.constant([[10], [11]]),
    ...                             cls_id=4, sep_id=5, max_length=8)
    >>> ids.numpy().tolist()
    [[4, 7, 8, 5, 10, 5], [4, 9, 5, 11, 5, 0]]
    >>> segments.numpy().tolist()
    [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]]
    """
    segments = [first] if second is None else [first, second]
    specials = len(segments) + 1
    max_length = _config.check_positive_int("max_length", max_length)
    if max_length <= specials:
        raise ValueError(
            "Received an invalid value for argument `max_length`, expected more than the "
            f"{specials} special tokens. Received: max_length={max_length}"
        )
    segments = [tf.cast(segment, tf.int64) for segment in segments]
    trimmed = tf_text.RoundRobinTrimmer(max_length - specials).trim(segments)
    ids, segment_ids = tf_text.combine_segments(trimmed, cls_id, sep_id)
    return (tf.cast(ids.to_tensor(pad_id), tf.int32),
            tf.cast(segment_ids.to_tensor(0), tf.int32))


def mask_tokens(token_ids, *, mask_id, vocab_size, special_ids, pad_id=0, rate=MASK_RATE,
                seed=None, rng=None):
    """BERT's masking: choose `rate` of the real tokens, then [MASK] 80% of them,
    a random token 10%, leave 10% as they are.

    Special tokens (`special_ids`: `<PAD>`, `[CLS]`, `[SEP]`, ...) are never
    chosen, and a random replacement is never one of them.

    Args:
        token_ids: int tensor `(..., S)`.
        mask_id: int. Id of `[MASK]`.
        vocab_size: int. Random replacements are drawn from `[0, vocab_size)`
            without the special ids.
        special_ids: sequence of int. Ids never chosen or drawn.
        pad_id: int. The label of positions not chosen (the loss ignores
            them: `masked_loss` skips `<PAD>` targets). Defaults to `0`.
        rate: float in (0, 1). Share of real tokens chosen. Defaults to `0.15`.
        seed: int. Op seed of the random draws. Defaults to `None`.
        rng: a `tf.random.Generator` to draw from instead (its state moves
            on with every call, also inside `tf.data`). Defaults to `None`.

    Returns:
        `(inputs, labels)`, int32 like `token_ids`: the masked ids, and the
        original id at chosen positions, `pad_id` elsewhere.
    """
    rate = _config.check_rate("rate", rate)
    token_ids = tf.cast(token_ids, tf.int32)
    special_ids = {int(i) for i in special_ids} | {pad_id, mask_id}
    special = tf.constant(sorted(special_ids), tf.int32)
    allowed = tf.constant([i for i in range(vocab_size) if i not in special_ids], tf.int32)
    shape = tf.shape(token_ids)
    is_special = tf.reduce_any(token_ids[..., tf.newaxis] == special, axis=-1)

    def uniform(offset, *args):
        if rng is not None:
            return rng.uniform(shape, *args)
        return tf.random.uniform(shape, *args, seed=None if seed is None else seed + offset)

    chosen = (uniform(0) < rate) & ~is_special
    fate = uniform(1)
    to_mask = chosen & (fate < MASK_SHARES[0])
    to_random = chosen & (fate >= MASK_SHARES[0]) & (fate < MASK_SHARES[0] + MASK_SHARES[1])
    draws = uniform(2, 0, tf.size(allowed), tf.int32)
    inputs = tf.where(to_mask, mask_id, tf.where(to_random, tf.gather(allowed, draws),
                                                 token_ids))
    labels = tf.where(chosen, token_ids, pad_id)
    return inputs, labels


def max_predictions(max_length, rate=MASK_RATE):
    """How many masked positions per text an MLM batch keeps (BERT's
    `max_predictions_per_seq`): 1.5 times the expected number, plus one."""
    return math.ceil(1.5 * rate * max_length) + 1


def mlm_dataset(texts, tokenizer, max_length, batch_size, rate=MASK_RATE, shuffle=False,
                seed=0):
    """Texts -> batches `(inputs, labels)` for `MaskedLanguageModel.fit`.

    Each text is one segment, `[CLS] text [SEP]`. With `shuffle=True` (for
    training) the masking is drawn anew every time a batch is made, from a
    generator seeded with `seed` (RoBERTa's dynamic masking), so every epoch
    masks other tokens; without it (for validation) every pass over the data
    masks the same tokens, so that validation losses compare. `inputs` is a dict: `token_ids` and
    `segment_ids` `(B, S)` and `masked_positions` `(B, P)`, the chosen
    positions (`P = max_predictions(max_length, rate)`, the rare extra ones
    left unpredicted, padding pointing at position 0); `labels` `(B, P)` are
    the original tokens there, `<PAD>` for padding (which the loss skips).
    """
    _need_encoder_tokens(tokenizer)
    special = tokenizer.control_ids + (tokenizer.unk_id,)
    width = max_predictions(max_length, rate)
    rng = tf.random.Generator.from_seed(seed) if shuffle else None

    def mask(ids, segments):
        inputs, labels = mask_tokens(ids, mask_id=tokenizer.mask_id,
                                     vocab_size=tokenizer.vocab_size, special_ids=special,
                                     pad_id=tokenizer.pad_id, rate=rate, seed=seed, rng=rng)
        chosen = labels != tokenizer.pad_id
        positions = tf.broadcast_to(tf.range(tf.shape(ids)[1]), tf.shape(ids))
        positions = tf.ragged.boolean_mask(positions, chosen)[:, :width]
        labels = tf.ragged.boolean_mask(labels, chosen)[:, :width]
        features = {"token_ids": inputs, "segment_ids": segments,
                    "masked_positions": positions.to_tensor(0, shape=[None, width])}
        return features, labels.to_tensor(tokenizer.pad_id, shape=[None, width])

    return _batches(texts, tokenizer, max_length, batch_size, shuffle, seed).map(
        mask, num_parallel_calls=tf.data.AUTOTUNE
    ).prefetch(tf.data.AUTOTUNE)


def classification_dataset(texts, labels, tokenizer, max_length, batch_size, shuffle=False,
                           seed=0):
    """Texts and int labels -> batches `((token_ids, segment_ids), labels)`."""
    _need_encoder_tokens(tokenizer)
    return _batches(texts, tokenizer, max_length, batch_size, shuffle, seed,
                    labels=labels).prefetch(tf.data.AUTOTUNE)


def _batches(texts, tokenizer, max_length, batch_size, shuffle, seed, labels=None):
    """Batches of packed `(token_ids, segment_ids)`, with their labels when given.

    The texts are tokenised once, up front; a batch is packed when it is made.
    """
    ids = tokenizer.tokenize(list(texts))[:, : max_length - 2]  # (N, None)
    elements = ids if labels is None else (ids, tf.constant(labels, tf.int32))
    data = tf.data.Dataset.from_tensor_slices(elements)
    if shuffle:
        data = data.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)

    def pack(ids):
        return pack_inputs(ids, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                           pad_id=tokenizer.pad_id, max_length=max_length)

    data = data.ragged_batch(batch_size)
    if labels is None:
        return data.map(pack, num_parallel_calls=tf.data.AUTOTUNE)
    return data.map(lambda ids, label: (pack(ids), label), num_parallel_calls=tf.data.AUTOTUNE)
