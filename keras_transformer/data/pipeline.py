"""tf.data pipelines: string pairs -> batches in the tutorial's training layout.

The tutorial trains with `model.fit([index_inputs, index_outputs],
index_targets)`: encoder ids, decoder input `<SOS> + target` and decoder
target `target + <END>`. `make_dataset` yields exactly that, `((inp, dec_in),
dec_out)`, with tokenisation inside the graph.
"""

import tensorflow as tf

from keras_transformer import _config
from keras_transformer.text.tokenizers import END, SOS

_ENCODE_BATCH = 1024  # strings tokenised per map call.


def encode_sources(strings, tokenizer, max_length):
    """Source strings `(B,)` -> ragged ids `(B, None)`, cut to `max_length`."""
    return tokenizer.tokenize(strings)[:, :max_length]


def padded_sources(strings, tokenizer, max_length):
    """Source strings `(B,)` -> int32 ids `(B, max_length)`, cut and padded with `<PAD>`.

    The fixed width lets a decoding loop be traced once for every batch.
    """
    return encode_sources(strings, tokenizer, max_length).to_tensor(shape=[None, max_length])


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
    sos = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], tf.constant(SOS, tf.int32)))
    end = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], tf.constant(END, tf.int32)))
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
        stats["truncated_sources"] += int(tf.reduce_sum(tf.cast(source_lengths > max_length, tf.int32)))
        stats["truncated_targets"] += int(
            tf.reduce_sum(tf.cast(target_lengths > max_length - 1, tf.int32))
        )
    return stats


def make_dataset(pairs, source_tokenizer, target_tokenizer, max_length, batch_size=64,
                 shuffle=False, seed=None, bucket=True, drop_remainder=False, epochs=None,
                 initial_epoch=0, static_shape=False):
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
        bucket: bool. Group rows by length. Defaults to `True`. The number
            of batches is then unknown to TensorFlow (`cardinality()` is
            `UNKNOWN`); `bucket=False` keeps it known.
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

    def batches(rows):
        if static_shape:
            shape = tf.TensorShape([max_length])
            return rows.padded_batch(batch_size, padded_shapes=((shape, shape), shape),
                                     drop_remainder=drop_remainder)
        if not bucket:
            return rows.padded_batch(batch_size, drop_remainder=drop_remainder)
        boundaries = list(range(8, max_length + 1, 8))
        return rows.bucket_by_sequence_length(
            lambda x, y: tf.maximum(tf.shape(x[0])[0], tf.shape(y)[0]),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            drop_remainder=drop_remainder,
        )

    if epochs is None:
        if shuffle:
            dataset = dataset.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
        dataset = batches(dataset)
    else:
        rows, base_seed = dataset, 0 if seed is None else seed
        # All rows as one element of ragged tensors, to permute in the graph.
        everything = rows.ragged_batch(len(pairs))

        def one_pass(epoch):
            if not shuffle:
                return batches(rows)
            order = tf.random.experimental.stateless_shuffle(
                tf.range(len(pairs)), seed=tf.stack([tf.constant(base_seed, tf.int64), epoch])
            )
            permuted = everything.map(
                lambda inputs, target: tf.nest.map_structure(
                    lambda t: tf.gather(t, order), (inputs, target)
                )
            )
            return batches(permuted.unbatch().map(lambda inputs, target: (inputs, target)))

        dataset = tf.data.Dataset.range(initial_epoch, epochs).flat_map(one_pass)
    return dataset.prefetch(tf.data.AUTOTUNE)
