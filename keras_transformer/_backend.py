"""What the core needs from its Keras backend that `keras.ops` has no public API for.

The core (the layers, `Transformer`, `generation`, `training`, the BERT models)
is written in `keras.ops`, `keras.layers` and `keras.random`; these helpers
are the only place in it that asks which backend runs. Each has one branch
per backend (TensorFlow, JAX, PyTorch), and TensorFlow is imported only when
it is the backend, so the core runs where TensorFlow is not installed.

- `concrete`: a tensor's values when it has them (eager), for early checks.
- `check_length`: a run-time check of a sequence length that is unknown
  while tracing (only TensorFlow traces unknown lengths).
- `compile_decoding`: the compiled decoding loop: `tf.function` (with XLA on
  request), `jax.jit` over the model's variables, PyTorch without gradients
  (eager, or `torch.compile` on request).
- `stateless_categorical`: a draw that depends only on `(seed, step)`.
- `in_xla_context`, `xla_dropout`: TensorFlow's faster dropout under XLA.
- `apart_from_bias`: XLA:CPU's faster one-row products (batch-1 decoding).
- `joins_projections`: where a decoding step's q/k/v products run as one.
- `has_fused_attention`: where `keras.ops.dot_product_attention` pays.
- `steps_per_check`: how often the decoding loop asks whether every row ended.
- `replica_token_count`: the token count of the whole global batch under a
  `tf.distribute` strategy.
- `TrainerMixin`: TensorFlow's `fit` workarounds (a model and optimizer built
  before the first trace; multi-worker training), nothing elsewhere.
"""

import math

import keras
import numpy as np

BACKEND = keras.backend.backend()

if BACKEND == "tensorflow":
    import tensorflow as tf

    from keras_transformer import _compat
elif BACKEND == "jax":
    import jax
elif BACKEND == "torch":
    import torch
else:
    raise ImportError(
        "keras_transformer runs on the Keras backends 'tensorflow', 'jax' and 'torch'; "
        f"the backend is {BACKEND!r}. Set KERAS_BACKEND before importing Keras."
    )


def concrete(x):
    """The values of `x` as a NumPy array, or `None` while `x` is being traced."""
    if isinstance(x, np.ndarray):
        return x
    if BACKEND == "tensorflow":
        return x.numpy() if tf.executing_eagerly() and hasattr(x, "numpy") else None
    if BACKEND == "jax":
        return None if isinstance(x, jax.core.Tracer) else np.asarray(x)
    if x.device.type == "meta" or torch.compiler.is_compiling():  # torch
        return None
    return x.detach().cpu().numpy()


def check_length(length, limit, message):
    """Fails at run time when a traced `length` exceeds `limit`.

    Only TensorFlow traces sequences of unknown length (JAX and PyTorch see
    every shape), so elsewhere there is nothing left to check.
    """
    if BACKEND == "tensorflow":
        tf.debugging.assert_less_equal(length, limit, message=message)


def compile_decoding(model, fn, jit_compile):
    """`fn(*tensors)` compiled once per input shape, for `model`'s decoding loop;
    its arguments may be NumPy arrays.

    Args:
        model: the `keras.Model` whose variables `fn` reads.
        fn: a function of tensors built from `keras.ops` and the model's layers.
        jit_compile: bool. TensorFlow: `True` compiles with XLA, `False` runs
            a TensorFlow graph. JAX: `True` wraps `fn` in `jax.jit` with the
            variables passed in (so later training is seen), `False` runs it
            op by op. PyTorch: without gradients, `True` through
            `torch.compile`, `False` eagerly.
    """
    if BACKEND == "tensorflow":
        # `fn` is written for every backend (`keras.ops` loops, Python `if`s on
        # Python values only), so AutoGraph has nothing to convert: without it
        # the first greedy call of the tests' model compiles in 3 s, not 5.5.
        return tf.function(fn, jit_compile=jit_compile, autograph=False)
    if BACKEND == "jax":
        variables = model.variables  # the objects once; their values at every call

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args)

        run = jax.jit(stateless) if jit_compile else stateless
        return lambda *args: run([v.value for v in variables], *args)

    def without_gradients(*args):  # torch
        args = keras.tree.map_structure(keras.ops.convert_to_tensor, args)
        with torch.no_grad():
            return fn(*args)

    return torch.compile(without_gradients) if jit_compile else without_gradients


def stateless_categorical(logits, seed, step):
    """One id per row drawn from softmax(`logits`) `(B, V)`, as int32 `(B,)`.

    The draw depends only on the scalar ints `seed` and `step`, so a seed
    reproduces a whole sampled sequence (on one backend: each backend has its
    own generator).
    """
    if BACKEND == "tensorflow":
        pair = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
        return tf.random.stateless_categorical(logits, 1, pair, dtype=tf.int32)[:, 0]
    if BACKEND == "jax":
        key = jax.random.fold_in(jax.random.key(seed), step)
        return jax.random.categorical(key, logits, axis=-1).astype("int32")
    generator = torch.Generator(device=logits.device)  # torch
    generator.manual_seed(int(seed) * 1_000_003 + int(step))
    probs = torch.softmax(logits.float(), dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0].to(torch.int32)


def in_xla_context():
    """Whether the ops created now will be compiled by XLA:CPU's TensorFlow bridge."""
    return BACKEND == "tensorflow" and _compat.in_xla_context()


def apart_from_bias(product):
    """`product`, a matrix product about to get its bias added, kept out of
    one fusion with that addition where this is faster.

    Under XLA:CPU (TensorFlow, `jit_compile=True`, no GPU) a one-row product
    fused with the bias add that follows it is emitted as a loop that reads
    the kernel 1.2-1.3x slower than the product alone, which is most of a
    batch-1 decoding step. Measured (`bench_against.py`, AMD EPYC, 2 cores,
    2026-11-26): without it batch-1 greedy decoding takes 1.22x as long. With
    more rows the fusion is as fast or faster, so it is kept; so it is on the
    other backends, and in an exported SavedModel, whose batch size is unknown
    when it is traced.
    """
    if not in_xla_context() or len(product.shape) < 2:
        return product
    rows = product.shape[:-1]
    if None not in rows and math.prod(rows) == 1 and not tf.config.list_logical_devices("GPU"):
        return _compat.optimization_barrier(product)
    return product


def joins_projections(x):
    """Whether a decoding step's three self-attention projections of `x` run
    as one product by the joined kernels (`MultiHeadAttention`): only where a
    compiler sees the whole decoding loop and joins the kernels once, outside
    it: XLA on TensorFlow (`jit_compile=True`, the default) and on JAX, whose
    `while_loop` compiles its body even without `jax.jit`. A loop run step by
    step (a TensorFlow graph, as in an exported SavedModel; PyTorch) would
    join them at every step, which costs more than it saves (13% of a batch-1
    step in a TensorFlow graph, benchmarks/RESULTS.md). Measured where it runs
    (`bench_against.py`, AMD EPYC, 2 cores, 2026-11-26): without it batch-1
    greedy decoding takes 1.058x as long on JAX, 1.03-1.05x on TensorFlow."""
    if BACKEND == "tensorflow":
        return in_xla_context()
    return BACKEND == "jax" and concrete(x) is None  # traced: inside a compiled loop


def has_fused_attention(x):
    """Whether `keras.ops.dot_product_attention` may run a fused (flash)
    attention kernel for `x`: on a GPU through JAX (cuDNN's flash attention)
    or PyTorch (`scaled_dot_product_attention`'s flash kernels). Never on
    TensorFlow, whose Keras op is made of the explicit softmax's operations,
    nor on a CPU, where Keras's op measured slower than the explicit softmax
    in one process (`benchmarks/bench_against.py`, AMD EPYC, 2 cores):
    TensorFlow training 3%; JAX training 3%, batch-1 greedy decoding 12% and
    batch-64 decoding 6%; PyTorch batch-64 decoding 5%. (A TPU's Splash
    kernel, which Keras reaches by other rules, is left out: not measured.)
    """
    return _on_gpu(x)


def steps_per_check(x, max_length):
    """How many decoding steps run between two checks whether every row has
    ended, in a loop of `max_length` steps over `x`'s rows (the argument
    `steps_per_check` of `greedy_search` and `beam_search`).

    XLA's while loop on a GPU copies a condition that depends on the data to
    the host at every step and waits for it; a loop of known length XLA runs
    on the device. So on a GPU through JAX the decoding loop runs blocks of
    the largest divisor of `max_length` up to 8 steps, and may run up to 7
    steps after every row ended: the loop of a batch-1 sentence of 24 tokens
    took 2.9 ms instead of 4.5 on an H200 (`benchmarks/RESULTS.md`).
    Elsewhere 1: PyTorch runs its loop eagerly, where blocks measured no
    faster on that GPU, and a CPU reads the condition where it computed it.
    """
    if BACKEND != "jax" or not _on_gpu(x):  # PyTorch: see above
        return 1
    return max(d for d in range(1, 9) if max_length % d == 0)


def _on_gpu(x):
    """Whether `x` is on a GPU under JAX or PyTorch (TensorFlow: always False,
    none of the GPU-only paths above was measured there)."""
    if BACKEND == "torch":
        return x.device.type == "cuda"
    return BACKEND == "jax" and jax.default_backend() == "gpu"


def xla_dropout(inputs, rate, seed_generator):
    """Dropout drawn with ThreeFry, which XLA:CPU generates about 4x faster
    than the default Philox (TensorFlow under `jit_compile=True` only).
    Measured (`bench_against.py`, AMD EPYC, 2 cores, 2026-11-26): with
    Keras's dropout an XLA training step of the tutorial's model takes 1.09x
    as long."""
    seed = tf.cast(tf.math.floormod(seed_generator.next(), tf.int32.max - 1), tf.int32)
    return tf.nn.experimental.stateless_dropout(inputs, rate, seed, rng_alg="threefry")


def replica_token_count(count):
    """`(count over the global batch, number of replicas)` for a per-replica `count`.

    Under a `tf.distribute` strategy each replica holds a slice of the global
    batch. JAX and PyTorch compute the loss over the global batch at once.
    """
    if BACKEND == "tensorflow":
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            return (context.all_reduce(tf.distribute.ReduceOp.SUM, count),
                    context.num_replicas_in_sync)
    return count, 1


class _NoMixin:
    """Nothing to add to `keras.Model` on this backend."""


TrainerMixin = _compat.TensorFlowFit if BACKEND == "tensorflow" else _NoMixin
