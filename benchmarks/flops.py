"""The matmul FLOPs of the encoder-decoder Transformer, counted exactly.

A matmul of (m, k) by (k, n) costs 2*m*k*n. Per example, S source and T target
positions, width d, inner width f, vocabulary V, L layers:
  encoder layer: Q, K, V, output projections 4 * 2*S*d*d; QK^T and AV
                 2 * 2*S*S*d; feed-forward 2 * 2*S*d*f
  decoder layer: self-attention 4 * 2*T*d*d + 2 * 2*T*T*d; cross-attention
                 Q and output 2 * 2*T*d*d, K and V 2 * 2*S*d*d, QK^T and AV
                 2 * 2*T*S*d; feed-forward 2 * 2*T*d*f
  output projection: 2*T*d*V
A training step costs 3x the forward pass (forward, and backward for inputs and
for weights). Embedding look-ups, softmax, LayerNorm and the optimizer update
are not counted. Imports nothing, so that every benchmark, on any backend, can
use it.
"""


def forward_flops(num_layers, d_model, dff, vocab, src_len, tgt_len, **_):
    """Matmul FLOPs of one forward pass of one example (see the module docstring)."""
    d, f, S, T = d_model, dff, src_len, tgt_len
    encoder = 4 * 2 * S * d * d + 2 * 2 * S * S * d + 2 * 2 * S * d * f
    decoder = (
        4 * 2 * T * d * d + 2 * 2 * T * T * d  # masked self-attention
        + 2 * 2 * T * d * d + 2 * 2 * S * d * d + 2 * 2 * T * S * d  # cross-attention
        + 2 * 2 * T * d * f  # feed-forward
    )
    return num_layers * (encoder + decoder) + 2 * T * d * vocab


def train_step_flops(cfg):
    """Matmul FLOPs of one training step of `cfg` (`bench_peers.CONFIGS` form)."""
    return 3 * cfg["batch"] * forward_flops(cfg["num_layers"], cfg["d_model"], cfg["dff"],
                                            cfg["vocab"], cfg["seq"], cfg["seq"])
