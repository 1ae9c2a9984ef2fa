"""GenerateConfig: every decoding option, its default and its check."""

import dataclasses
import numbers

from keras_transformer import _backend, _config

METHODS = ("greedy", "beam", "sample", "mmi")
BEAM_METHODS = ("beam", "mmi")


def _option(default, help, *, flag=True, export=False, tensor=False):
    """A decoding option: its default and help text; whether the command line
    has a flag for it (`flag`), whether an exported SavedModel fixes it
    (`export`), and whether the compiled loop takes it as a tensor argument
    (`tensor`: changing it does not compile the loop again) rather than
    fixing it when the loop is traced."""
    return dataclasses.field(
        default=default, metadata={"help": help, "flag": flag, "export": export, "tensor": tensor}
    )


@dataclasses.dataclass(frozen=True)
class GenerateConfig:
    """Every decoding option, its default and its check: the one place they live.

    `Transformer.generate` takes these as keyword arguments, and so do
    `Translator.translate` and the export; the command line's decoding flags
    are generated from them. Adding an option is one field here (and its use
    in `decode`).

    Attributes:
        method: `"greedy"`, `"beam"`, `"sample"` or `"mmi"`: beam search whose
            `beam_size` hypotheses are reranked by `(log p(T|S) - mmi_weight *
            log p(T)) / lp(|T|)`, `p(T)` being the model's probability of the
            answer for an empty source (maximum mutual information, Li et al.,
            2016: it demotes answers that fit any input, like "I don't know")
            and `lp` beam search's length penalty.
        max_length: int. Most tokens to generate, `<END>` included; at most the
            model's `maximum_position_encoding` (`None`: that).
        beam_size: int. Hypotheses per row for `"beam"` and `"mmi"`.
        length_penalty: float. GNMT alpha for `"beam"` and `"mmi"`: answers
            are ranked by `log p / ((5 + length) / 6) ** alpha`; 0 ranks by
            probability alone, a larger alpha favours longer answers.
        mmi_weight: float >= 0. lambda of `"mmi"`; `0` ranks by `log p(T|S)`
            alone. Chosen on ChatbotData's validation split (RESULTS.md).
        temperature: float > 0. For `"sample"`.
        top_k: int. For `"sample"`: keep the k most likely tokens; `0` keeps all.
        top_p: float in (0, 1]. For `"sample"`: nucleus mass.
        seed: int. Makes `"sample"` reproducible (`None`: drawn from Python's
            `random`, which `keras.utils.set_random_seed` seeds).
        num_return_sequences: int. For `"beam"` and `"mmi"`: this many
            hypotheses per row (at most `beam_size`), best first.
        return_attention_weights: bool. `"greedy"` only: also return the
            cross-attention of every generated step.
        jit_compile: bool or `"auto"`, see `resolve_jit_compile`. On
            TensorFlow, `True` compiles the loop with XLA (one compilation per
            input shape, 2-3 s on 2 CPU cores for the tutorial's model, then
            faster per token than TensorFlow's graph), `False` runs it as a
            graph; on JAX `jax.jit` compiles it; on PyTorch `True` is
            `torch.compile` (minutes per input shape, then faster per token).
        use_cache: bool. Decode with the key/value cache; `False` re-runs the
            decoder at every step over a `max_length` buffer that holds the
            prefix (one shape for the compiled loop; slow; `"greedy"` and
            `"sample"` only).

    Raises:
        ValueError: in the Keras message form, naming the argument and value.
    """

    method: str = _option("greedy", "greedy, beam search, sampling, or beam search "
                          "reranked by mutual information (mmi: demotes answers that fit "
                          "any input)", export=True)
    max_length: int = _option(None, "most tokens to generate", flag=False, export=True)
    beam_size: int = _option(4, "for beam and mmi", export=True)
    length_penalty: float = _option(0.6, "GNMT alpha, for beam and mmi", export=True,
                                    tensor=True)
    mmi_weight: float = _option(0.1, "lambda in log p(T|S) - lambda log p(T), for mmi",
                                export=True, tensor=True)
    temperature: float = _option(1.0, "for sample", tensor=True)
    top_k: int = _option(0, "for sample: keep the k most likely tokens (0: all)")
    top_p: float = _option(1.0, "for sample: the nucleus mass", tensor=True)
    seed: int = _option(None, "sampling seed", tensor=True)
    num_return_sequences: int = _option(1, "hypotheses per row", flag=False)
    return_attention_weights: bool = _option(False, "also the cross-attention", flag=False)
    jit_compile: object = _option("auto", "compile the loop", flag=False)
    use_cache: bool = _option(True, "decode with the key/value cache", flag=False)

    def __post_init__(self):
        for name in ("length_penalty", "mmi_weight", "temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"Received an invalid value for argument `{name}`, expected "
                                 f"a number. Received: {name}={value!r}")
        _config.check_choice("method", self.method, METHODS)
        if self.max_length is not None:
            _config.check_positive_int("max_length", self.max_length)
        _config.check_positive_int("beam_size", self.beam_size)
        _config.check_non_negative_int("top_k", self.top_k)
        if not self.temperature > 0:
            raise ValueError(
                "Received an invalid value for argument `temperature`, expected a "
                f"float > 0. Received: temperature={self.temperature!r}"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(
                "Received an invalid value for argument `top_p`, expected a float "
                f"in (0, 1]. Received: top_p={self.top_p!r}"
            )
        if self.return_attention_weights and self.method != "greedy":
            raise ValueError(
                "Received an invalid value for argument `return_attention_weights`: "
                f"only method='greedy' returns weights. Received: method={self.method!r}"
            )
        _config.check_positive_int("num_return_sequences", self.num_return_sequences)
        if self.num_return_sequences > 1 and (
            self.method not in BEAM_METHODS or self.num_return_sequences > self.beam_size
        ):
            raise ValueError(
                "Received an invalid value for argument `num_return_sequences`, expected 1, "
                "or with method='beam' or 'mmi' at most beam_size. Received: "
                f"num_return_sequences={self.num_return_sequences}, method={self.method!r}, "
                f"beam_size={self.beam_size}"
            )
        if not self.mmi_weight >= 0:
            raise ValueError(
                "Received an invalid value for argument `mmi_weight`, expected a float "
                f">= 0. Received: mmi_weight={self.mmi_weight!r}"
            )
        # TensorFlow's XLA bridge does not compile the random draw of sampling.
        xla_sampling = (self.jit_compile is True and self.method == "sample"
                        and _backend.BACKEND == "tensorflow")
        if self.jit_compile not in (True, False, "auto") or xla_sampling:
            raise ValueError(
                "Received an invalid value for argument `jit_compile`, expected True, False "
                "or 'auto' (on TensorFlow, XLA cannot compile the random draw of "
                f"method='sample'). Received: jit_compile={self.jit_compile!r}, "
                f"method={self.method!r}"
            )
        if not self.use_cache and self.method in BEAM_METHODS:
            raise ValueError(
                "Received an invalid value for argument `use_cache`: beam search "
                f"always uses the cache. Received: use_cache=False, method={self.method!r}"
            )

    @classmethod
    def fields(cls, **metadata):
        """The fields whose metadata has these values, e.g. `fields(export=True)`."""
        return [field for field in dataclasses.fields(cls)
                if all(field.metadata[key] == value for key, value in metadata.items())]

    def options(self, **metadata):
        """`{name: value}` of the fields `fields(**metadata)` selects."""
        return {field.name: getattr(self, field.name) for field in self.fields(**metadata)}


def resolve_jit_compile(jit_compile, method):
    """`"auto"` -> whether the decoding loop is compiled: always on JAX; on
    TensorFlow except for sampling (whose draw XLA does not compile); never
    on PyTorch, where `torch.compile` takes minutes (benchmarks/RESULTS.md)."""
    if jit_compile != "auto":
        return jit_compile
    if _backend.BACKEND == "torch":
        return False
    return _backend.BACKEND != "tensorflow" or method != "sample"
