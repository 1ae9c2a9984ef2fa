"""tf.data pipelines: string pairs -> batches in the tutorial's training layout.

The tutorial trains with `model.fit([index_inputs, index_outputs],
index_targets)`: encoder ids, decoder input `<SOS> + target` and decoder
target `target + <END>`. `make_dataset` yields exactly that, `((inp, dec_in),
dec_out)`, with tokenisation inside the graph.
"""

import tensorflow as tf

from keras_transformer import _config

_ENCODE_BATCH = 1024  # strings tokenised per map call.


def encode_sources(strings, tokenizer, max_length):
    """Source strings `(B,)` -> ragged ids `(B, None)`, cut to `max_length`."""
    return tokenizer.tokenize(strings)[:, :max_length]


def padded_sources(strings, tokenizer, max_length):
    """Source strings `(B,)` -> int32 ids `(B, max_length)`, cut and padded with `<PAD>`.

    The fixed width lets a decoding loop be traced once for every batch.
    """
    return encode_sources(strings, tokenizer, max_length).to_tensor(
        default_value=tokenizer.pad_id, shape=[None, max_length]
    )


def encode_pairs(sources, targets, source_tokenizer, target_tokenizer, max_length):
    """Strings -> `(inp, dec_in, dec_out)` ragged int32 `(B, None)` tensors.

    A source keeps its first `max_length` tokens; a target its first
    `max_length - 1`, so that `<SOS> + target` and `target + <END>` fit in
    `max_length` positions (a cut target still ends in `<END>`, as in the
    tutorial).
    """
    inp = encode_sources(sources, source_tokenizer, max_length)
    target = target_tokenizer.tokenize(targets)[:, : max_length - 1]
    batch = tf.shape(target.row_lengths())[0]
    sos = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], target_tokenizer.start_id))
    end = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], target_tokenizer.end_id))
    return inp, tf.concat([sos, target], axis=1), tf.concat([target, end], axis=1)


def truncation_stats(pairs, source_tokenizer, target_tokenizer, max_length):
    """How many pairs `make_dataset` cuts to fit `max_length`.

    Returns:
        dict with `pairs`, `truncated_sources` (more than `max_length` tokens)
        and `truncated_targets` (more than `max_length - 1` tokens).
    """
    stats = {"pairs": len(pairs), "truncated_sources": 0, "truncated_targets": 0}
    for start in range(0, len(pairs), _ENCODE_BATCH):
        sources, targets = zip(*pairs[start : start + _ENCODE_BATCH])
        source_lengths = source_tokenizer.tokenize(list(sources)).row_lengths()
        target_lengths = target_tokenizer.tokenize(list(targets)).row_lengths()
        stats["truncated_sources"] += int(tf.math.count_nonzero(source_lengths > max_length))
        stats["truncated_targets"] += int(tf.math.count_nonzero(target_lengths > max_length - 1))
    return stats


_SORT_WINDOW = 32  # batches whose rows are sorted by length together.


def _length_sorted_batches(order, lengths, batch_size, seed):
    """Reorders row indices so that consecutive batches hold rows of similar length.

    The rows of every window of `_SORT_WINDOW` batches (in `order`) are sorted
    by length (stable), cut into batches, and the full batches are shuffled
    with the stateless `seed`; a last, smaller batch stays last. Rows are
    padded to the longest of their batch, so this removes most padding while
    each batch still mixes rows from across the window.

    Args:
        order: int32 `(N,)` row indices (already shuffled).
        lengths: int `(N,)` the length of each row of `order`.
        batch_size: int.
        seed: int64 `(2,)` stateless seed.

    Returns:
        int32 `(N,)` row indices.
    """
    n = tf.shape(order)[0]
    window = tf.range(n) // (batch_size * _SORT_WINDOW)  # (N,)
    key = tf.cast(window, tf.int64) * (tf.cast(tf.reduce_max(lengths), tf.int64) + 1)
    order = tf.gather(order, tf.argsort(key + tf.cast(lengths, tf.int64), stable=True))
    full = n // batch_size
    batches = tf.reshape(order[: full * batch_size], (full, batch_size))  # (full, batch)
    batches = tf.gather(batches, tf.random.experimental.stateless_shuffle(tf.range(full), seed))
    return tf.concat([tf.reshape(batches, [-1]), order[full * batch_size :]], axis=0)


def make_dataset(pairs, source_tokenizer, target_tokenizer, max_length, batch_size=64,
                 shuffle=False, seed=None, bucket=True, drop_remainder=False, epochs=None,
                 initial_epoch=0, static_shape=False, token_dropout=0.0):
    """A `tf.data.Dataset` of `((inp, dec_in), dec_out)` int32 batches for `fit`.

    Tokenisation runs in the graph; the encoded pairs are cached, then
    shuffled (every epoch, seeded), grouped into batches of similar length
    (or padded batches with `bucket=False`), padded with `<PAD>` to the
    longest row of each batch, and prefetched.

    Args:
        pairs: list of `(source, target)` strings.
        source_tokenizer, target_tokenizer: `keras_transformer.text.Tokenizer`.
        max_length: int. `maximum_position_encoding` of the model.
        batch_size: int. Defaults to `64`.
        shuffle: bool. Defaults to `False`.
        seed: int or `None`. Shuffle seed. Defaults to `None`.
        bucket: bool. Group rows by length. Defaults to `True`. Without
            `epochs`, rows go to length buckets as they come and the number
            of batches is unknown to TensorFlow (`cardinality()` is
            `UNKNOWN`); `bucket=False` keeps it known. With `epochs`, each
            pass sorts its rows by length within windows of 32 batches and
            shuffles the batches, all seeded by `(seed, e)`.
        drop_remainder: bool. Drop a last, smaller batch. Defaults to `False`.
        epochs: int or `None`. With an int, one dataset holds the passes
            `initial_epoch, ..., epochs - 1`, pass `e` shuffled by `(seed, e)`
            alone, so that a run resumed at epoch `e` sees the batches that a
            run that never stopped would have seen. Give `fit` the
            `steps_per_epoch`. Defaults to `None`: one pass per iteration,
            reshuffled every iteration.
        initial_epoch: int. The first pass, with `epochs`. Defaults to `0`.
        static_shape: bool. Rows padded to `max_length`, not to the
            longest row of their batch; with `drop_remainder=True` every
            batch is `(batch_size, max_length)` (what TPUs and a
            once-compiled XLA step need). Overrides `bucket`. Defaults to
            `False`.
        token_dropout: float in [0, 1). With `epochs`: each source token is
            replaced with `<UNK>` with this probability, drawn anew every
            pass (seeded by `(seed, e)`), so that the model learns to answer
            from the rest of the sentence and meets `<UNK>` in training as
            it does on unknown words. Defaults to `0.0`.

    Returns:
        `tf.data.Dataset` with element spec `((int32 (B, None), int32 (B, None)),
        int32 (B, None))`.
    """
    _config.check_positive_int("max_length", max_length)
    _config.check_positive_int("batch_size", batch_size)
    if max_length < 2:
        raise ValueError(
            "Received an invalid value for argument `max_length`, expected an integer "
            f">= 2 (<SOS> or <END> plus one token). Received: max_length={max_length}"
        )
    if not pairs:
        raise ValueError("Received an invalid value for argument `pairs`: it is empty.")
    _config.check_rate("token_dropout", token_dropout)
    if token_dropout and epochs is None:
        raise ValueError(
            "Received an invalid value for argument `token_dropout`: it needs `epochs` (the "
            f"training passes it draws for). Received: token_dropout={token_dropout}"
        )
    sources, targets = (list(column) for column in zip(*pairs))

    def encode(source, target):
        inp, dec_in, dec_out = encode_pairs(
            source, target, source_tokenizer, target_tokenizer, max_length
        )
        return (inp, dec_in), dec_out

    dataset = tf.data.Dataset.from_tensor_slices((sources, targets))
    dataset = dataset.batch(_ENCODE_BATCH).map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    # Unbatched rows are rank-0 ragged; passing them through a map makes them
    # plain tensors, which `padded_batch` needs.
    dataset = dataset.unbatch().map(lambda inputs, target: (inputs, target))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(pairs))).cache()

    target_pad = tf.constant(target_tokenizer.pad_id, tf.int32)
    padding = ((tf.constant(source_tokenizer.pad_id, tf.int32), target_pad), target_pad)

    def batches(rows, sort):
        return _padded_batches(rows, batch_size, max_length, padding, sort, static_shape,
                               drop_remainder)

    if epochs is None:
        if shuffle:
            dataset = dataset.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
        dataset = batches(dataset, bucket)
    else:
        order = _EpochOrder(len(pairs), batch_size, 0 if seed is None else seed, shuffle,
                            bucket and not static_shape, token_dropout, source_tokenizer.unk_id)
        # All rows as one element of ragged tensors, to permute in the graph.
        everything = dataset.ragged_batch(len(pairs))

        def one_pass(epoch):
            permuted = everything.map(lambda inputs, target: order(epoch, inputs, target))
            return batches(permuted.unbatch().map(lambda inputs, target: (inputs, target)),
                           sort=False)

        dataset = tf.data.Dataset.range(initial_epoch, epochs).flat_map(one_pass)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _padded_batches(rows, batch_size, max_length, padding, sort, static_shape, drop_remainder):
    """Rows padded to the longest of their batch (or to `max_length` with
    `static_shape`); with `sort`, batched by length buckets as they come."""
    if static_shape:
        shape = tf.TensorShape([max_length])
        return rows.padded_batch(batch_size, padded_shapes=((shape, shape), shape),
                                 padding_values=padding, drop_remainder=drop_remainder)
    if not sort:
        return rows.padded_batch(batch_size, padding_values=padding,
                                 drop_remainder=drop_remainder)
    boundaries = list(range(8, max_length + 1, 8))
    return rows.bucket_by_sequence_length(
        lambda x, y: tf.maximum(tf.shape(x[0])[0], tf.shape(y)[0]),
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
        padding_values=padding,
        drop_remainder=drop_remainder,
    )


class _EpochOrder:
    """Pass `epoch` of all the rows: their order (shuffled, then length-sorted within
    windows) and token dropout, drawn from `(seed, epoch)` alone."""

    def __init__(self, n_rows, batch_size, seed, shuffle, sort, token_dropout, unk_id):
        self.n_rows, self.batch_size, self.seed = n_rows, batch_size, seed
        self.shuffle, self.sort = shuffle, sort
        self.token_dropout, self.unk_id = token_dropout, unk_id

    def __call__(self, epoch, inputs, target):
        seed = tf.constant(self.seed, tf.int64)
        order = tf.range(self.n_rows)
        if self.shuffle:
            order = tf.random.experimental.stateless_shuffle(order, seed=tf.stack([seed, epoch]))
        if self.sort:
            lengths = tf.maximum(inputs[0].row_lengths(), target.row_lengths())
            order = _length_sorted_batches(order, tf.gather(lengths, order), self.batch_size,
                                           seed=tf.stack([-1 - seed, epoch]))
        (inp, dec_in), dec_out = tf.nest.map_structure(lambda t: tf.gather(t, order),
                                                       (inputs, target))
        if self.token_dropout:
            noise = tf.random.stateless_uniform(tf.shape(inp.flat_values),
                                                seed=tf.stack([seed, epoch + 2**31]))
            inp = inp.with_flat_values(tf.where(noise < self.token_dropout, self.unk_id,
                                                inp.flat_values))
        return (inp, dec_in), dec_out
