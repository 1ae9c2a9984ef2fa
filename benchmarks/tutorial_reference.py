"""The tutorial's model written plainly, as its readers would (a baseline for the
benchmarks only): Keras Dense/Embedding layers, `mask * -1e9` added to the logits,
post-LN, no validation, no cache. Not part of the package."""

import numpy as np
import tensorflow as tf
from tensorflow import keras


def _positions(length, d_model):
    pos, i = np.arange(length)[:, None], np.arange(d_model)[None, :]
    angles = pos / np.power(10000, (2 * (i // 2)) / np.float32(d_model))
    angles[:, 0::2], angles[:, 1::2] = np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])
    return tf.constant(angles[None], tf.float32)


class TutorialAttention(keras.layers.Layer):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.d = num_heads, d_model
        self.wq, self.wk, self.wv, self.dense = (keras.layers.Dense(d_model) for _ in range(4))

    def _split(self, x):
        x = tf.reshape(x, (tf.shape(x)[0], -1, self.h, self.d // self.h))
        return tf.transpose(x, [0, 2, 1, 3])

    def call(self, v, k, q, mask):
        q, k, v = self._split(self.wq(q)), self._split(self.wk(k)), self._split(self.wv(v))
        logits = tf.matmul(q, k, transpose_b=True) / tf.math.sqrt(float(self.d // self.h))
        logits += mask * -1e9
        out = tf.matmul(tf.nn.softmax(logits, axis=-1), v)
        out = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), (tf.shape(out)[0], -1, self.d))
        return self.dense(out)


class TutorialBlock(keras.layers.Layer):
    def __init__(self, d_model, num_heads, dff, rate, cross):
        super().__init__()
        self.attn = [TutorialAttention(d_model, num_heads) for _ in range(2 if cross else 1)]
        self.ffn = keras.Sequential([keras.layers.Dense(dff, "relu"), keras.layers.Dense(d_model)])
        self.norms = [keras.layers.LayerNormalization(epsilon=1e-6) for _ in range(3)]
        self.drops = [keras.layers.Dropout(rate) for _ in range(3)]

    def call(self, x, memory, self_mask, cross_mask, training=None):
        sources = [(x, self_mask), (memory, cross_mask)][: len(self.attn)]
        for i, (attn, (kv, mask)) in enumerate(zip(self.attn, sources)):
            kv = x if i == 0 else kv
            x = self.norms[i](x + self.drops[i](attn(kv, kv, x, mask), training=training))
        j = len(self.attn)
        return self.norms[j](x + self.drops[j](self.ffn(x), training=training))


class TutorialTransformer(keras.Model):
    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size,
                 target_vocab_size, maximum_position_encoding, rate=0.1):
        super().__init__()
        self.d_model = d_model
        self.pos = _positions(maximum_position_encoding, d_model)
        self.src_emb = keras.layers.Embedding(input_vocab_size, d_model)
        self.tgt_emb = keras.layers.Embedding(target_vocab_size, d_model)
        self.enc = [TutorialBlock(d_model, num_heads, dff, rate, False) for _ in range(num_layers)]
        self.dec = [TutorialBlock(d_model, num_heads, dff, rate, True) for _ in range(num_layers)]
        self.drop_src, self.drop_tgt = keras.layers.Dropout(rate), keras.layers.Dropout(rate)
        self.final_layer = keras.layers.Dense(target_vocab_size)

    def _embed(self, emb, drop, ids, training):
        x = emb(ids) * tf.math.sqrt(float(self.d_model)) + self.pos[:, : tf.shape(ids)[1]]
        return drop(x, training=training)

    def call(self, inputs, training=None):
        inp, tar = inputs
        pad = tf.cast(tf.equal(inp, 0), tf.float32)[:, None, None, :]
        size = tf.shape(tar)[1]
        look_ahead = 1 - tf.linalg.band_part(tf.ones((size, size)), -1, 0)
        combined = tf.maximum(tf.cast(tf.equal(tar, 0), tf.float32)[:, None, None, :], look_ahead)
        x = self._embed(self.src_emb, self.drop_src, inp, training)
        for block in self.enc:
            x = block(x, None, pad, None, training=training)
        y = self._embed(self.tgt_emb, self.drop_tgt, tar, training)
        for block in self.dec:
            y = block(y, x, combined, pad, training=training)
        return self.final_layer(y)
