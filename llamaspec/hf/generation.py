"""The torch side of the transformers backend: loading, timing, counting. Imported only when the
backend is opened (torch and transformers at module level here).

- ``load(spec)``: one model and its tokenizer (a checkpoint folder, a PEFT adapter over its base,
  or a GGUF file transformers dequantizes), on a device, in a dtype, optionally bitsandbytes 8/4-bit.
- ``TimingStreamer``: timestamps every ``put`` generate() makes; the first is the prompt, each
  later one the tokens of one target call (one token without an assistant; the accepted drafts
  plus the target's own token with one).
- ``time_forward(model, context, sizes, repetitions)``: one forward pass over n new tokens after a
  cached context, timed (the target's verification batches for the speedup model).
- ``counting(model, rounds)``: while active, each candidate generator ``model`` makes is turned
  into a subclass that records (drafted, accepted) per round from transformers' own
  ``update_candidate_strategy(input_ids, scores, num_matches)`` hook; transformers counts nothing
  itself. Being a subclass also switches off the scikit-learn re-tuning of the confidence
  threshold, which transformers applies to the exact class ``AssistedCandidateGenerator`` only:
  the threshold measured is the threshold asked for. On transformers 5, the generator for an
  assistant with another tokenizer also has its cache rollback counted in the assistant's tokens
  (``rolls_back_in_target_tokens``; the measurement says so in ``stats["assistant"]``).

Works on transformers 4.57 and 5.x: the KV cache is passed to forward() by the name the model
takes (``cache_argument``) and cropped by a count of tokens, which both understand.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers.generation.streamers import BaseStreamer

from llamaspec.base.errors import LlamaspecError
from llamaspec.hf import models as hf_models
from llamaspec.measure.contract import ModelPath

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadSpec:
    """What to load and how: two cases with the same spec share the loaded model."""

    model: ModelPath
    device: str  # cpu, cuda, cuda:N, mps
    dtype: str  # auto, float32, float16, bfloat16
    load_in: str = "none"  # none, 8bit, 4bit

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.model.path, str(self.model.metadata.get("base_path", "")), self.device, self.dtype, self.load_in)


@dataclass
class Loaded:
    spec: LoadSpec
    model: Any  # a PreTrainedModel (a PeftModel for an adapter)
    tokenizer: Any
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def generator(self) -> Any:
        return _generator(self.model)


def _generator(model: Any) -> Any:
    """The transformers model whose generate() runs the loop (under a PEFT wrapper, its base,
    with the LoRA layers injected)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _load_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, ValueError, RuntimeError, KeyError, EnvironmentError]
    try:
        from safetensors import SafetensorError
        errors.append(SafetensorError)
    except ImportError:  # older safetensors: the Rust error class under another name
        pass
    return tuple(errors)


def load(spec: LoadSpec) -> Loaded:
    """Load ``spec.model`` (LlamaspecError naming the model and the first line of the cause)."""
    start = time.monotonic()
    fmt = hf_models.model_format(spec.model)
    path = Path(spec.model.path)
    kwargs: dict[str, Any] = {}
    if spec.dtype != "auto":
        kwargs["dtype"] = getattr(torch, spec.dtype)
    elif fmt != "gguf":  # GGUF tensors are dequantized to float32 unless told otherwise
        kwargs["dtype"] = "auto"
    if spec.load_in != "none":
        kwargs["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_8bit=spec.load_in == "8bit", load_in_4bit=spec.load_in == "4bit")
    if spec.device != "cpu":
        kwargs["device_map"] = {"": spec.device}  # weights go straight to the device (accelerate)
    if fmt == "gguf":
        where, tokenizer_kwargs = path.parent, {"gguf_file": path.name}
        kwargs["gguf_file"] = path.name
    elif fmt == "peft-adapter":
        where, tokenizer_kwargs = hf_models.base_path(spec.model), {}
    else:
        where, tokenizer_kwargs = path, {}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(where), **tokenizer_kwargs)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(where), **kwargs)
        if fmt == "peft-adapter":
            model = _with_adapter(model, path)
    except _load_errors() as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LlamaspecError(f"cannot load {spec.model.label} ({spec.model.path}): {type(exc).__name__}: {first}"[:600],
                             hint="the files may be incomplete or corrupt: fetch them again "
                                  f"(llamaspec models fetch {spec.model.label.split(':')[0]}), or check the path") from None
    model.eval()
    seconds = time.monotonic() - start
    param = next(model.parameters())
    info = {"label": spec.model.label, "format": fmt, "path": spec.model.path, "device": str(param.device),
            "dtype": str(param.dtype).removeprefix("torch."), "load_in": spec.load_in, "load_seconds": round(seconds, 2),
            "parameters": sum(p.numel() for p in model.parameters()), "class": type(model).__name__,
            "generation_config": _diff(_generator(model).generation_config)}
    if fmt == "peft-adapter":
        info["base_path"] = str(where)
    log.info("loaded %s in %.1f s (%s, %s)", spec.model.label, seconds, info["device"], info["dtype"])
    return Loaded(spec, model, tokenizer, seconds, info)


def _with_adapter(model: Any, adapter: Path) -> Any:
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise LlamaspecError(f"{adapter} is a PEFT adapter, and peft is not installed ({exc.name} missing)",
                             hint="pip install 'llamaspec[hf]'") from None
    return PeftModel.from_pretrained(model, str(adapter))


def _diff(config: Any) -> dict[str, Any]:
    try:
        return {k: v for k, v in config.to_diff_dict().items() if k != "transformers_version"}
    except (AttributeError, TypeError, ValueError):
        return {}


def same_vocabulary(a: Any, b: Any) -> str | None:
    """None when the two tokenizers map the same strings to the same ids; else what differs."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va == vb:
        return None
    if len(va) != len(vb):
        return f"{len(va)} vs {len(vb)} tokens"
    first = next((t for t in sorted(va) if vb.get(t) != va[t]), None)
    return f"token {first!r} is id {va.get(first)} vs {vb.get(first)}"


# --- timing ------------------------------------------------------------------------------------

class TimingStreamer(BaseStreamer):
    """Timestamps of generate()'s ``put`` calls: ``[(seconds, n_tokens), ...]`` after the prompt."""

    def __init__(self) -> None:
        self.prompt_at: float | None = None
        self.puts: list[tuple[float, int]] = []
        self.ended_at: float | None = None

    def put(self, value: Any) -> None:
        now = time.perf_counter()  # put() gets .cpu() tensors: the device has finished by now
        if self.prompt_at is None:  # generate() first puts the prompt itself
            self.prompt_at = now
            return
        self.puts.append((now, int(value.numel())))

    def end(self) -> None:
        self.ended_at = time.perf_counter()

    def decode(self) -> tuple[int, float] | None:
        """Tokens after the first target call, and the seconds from that call's tokens to the last.

        Without an assistant the first call gives one token, so this is SPEED_DEFINITION exactly.
        With one, the first call (the target's prompt processing fused with the first
        verification) gives the first token plus its accepted drafts at once; they are left out
        with it, rather than counted as tokens that took no time.
        """
        if len(self.puts) < 2:
            return None
        tokens = sum(n for _, n in self.puts[1:])
        return tokens, self.puts[-1][0] - self.puts[0][0]


def time_forward(model: Any, context: Any, sizes: Sequence[int], repetitions: int) -> dict[int, float]:
    """Median milliseconds of one forward pass of ``model`` over n new tokens after ``context``
    (held in the KV cache), logits for every one of them (a verification's shape), for each n in
    ``sizes``. The cache is cropped back to the context after each pass, so every pass sees the
    same depth; one unrecorded pass over the sizes first (allocations, kernel selection). The
    device is synchronized around each timed pass."""
    kind = context.device.type
    sync: Any = (torch.cuda.synchronize if kind == "cuda" else torch.mps.synchronize if kind == "mps"
                 else (lambda: None))
    depth = int(context.shape[1])
    times: dict[int, list[float]] = {n: [] for n in sizes}
    name = cache_argument(model)
    with torch.inference_mode():
        cache = transformers.DynamicCache()
        model(context, **{name: cache}, use_cache=True)
        for rep in range(repetitions + 1):
            for n in sizes:
                ids = context[:, -n:] if n <= depth else context[:, :1].repeat(1, n)
                sync()
                start = time.perf_counter()
                model(ids, **{name: cache}, use_cache=True)
                sync()
                if rep:
                    times[n].append((time.perf_counter() - start) * 1000.0)
                cache.crop(-n)  # back to the context: a count to remove (transformers 5 takes no length)
    return {n: statistics.median(v) for n, v in times.items()}


def cache_argument(model: Any) -> str:
    """The name forward() takes the KV cache by: ``cache`` from transformers 5.x (``past_key_values``
    is deprecated there, to be removed in 5.40), ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


# --- counting ----------------------------------------------------------------------------------

@functools.cache
def _counting_class(base: Any) -> type:
    class Counting(base):  # type: ignore[valid-type, misc]
        _llamaspec_rounds: list[tuple[int, int]]

        def update_candidate_strategy(self, input_ids: Any, scores: Any, num_matches: Any) -> None:
            # scores: the target's logits over the candidates plus one, so candidates = width - 1
            # (in target tokens also under universal assisted decoding).
            self._llamaspec_rounds.append((int(scores.shape[1]) - 1, int(num_matches)))
            super().update_candidate_strategy(input_ids, scores, num_matches)

    if rolls_back_in_target_tokens(base):
        class Rolled(Counting):
            _llamaspec_rollbacks: list[int]
            _last_ids_length: int  # transformers 5's, in target tokens for this class

            def _update_past_and_masks(self, input_ids: Any, *args: Any, **kwargs: Any) -> bool:
                # transformers 5 rolls the assistant's cache back by the last round's length less
                # this round's input, and this class records that length in target tokens while the
                # input and the cache are in the assistant's: the rollback is off by the difference
                # (no new token for the assistant to read, and generate() fails reshaping 0 tokens;
                # or entries of a rejected draft left in the cache). The assistant's own last
                # length is its cache plus the one token the cache never holds.
                cache = self.assistant_kwargs.get("cache")
                if cache is not None:
                    own = int(cache.get_seq_length()) + 1
                    if own != self._last_ids_length:
                        self._llamaspec_rollbacks.append(self._last_ids_length - own)
                    self._last_ids_length = own
                return bool(super()._update_past_and_masks(input_ids, *args, **kwargs))

        Rolled.__name__ = Rolled.__qualname__ = f"Counting{base.__name__}"
        return Rolled
    Counting.__name__ = Counting.__qualname__ = f"Counting{base.__name__}"
    return Counting


def rolls_back_in_target_tokens(generator_class: Any) -> bool:
    """Whether ``generator_class`` (a candidate generator) is transformers 5's assisted generator for
    an assistant with another tokenizer, which keeps ``_last_ids_length`` in the target's tokens
    but rolls the assistant's cache back by it (its ``UniversalSpeculativeDecodingGenerator``
    subclass, for sampling, keeps its own and is left as it is)."""
    from transformers.generation import candidate_generator as cg

    different = getattr(cg, "AssistedCandidateGeneratorDifferentTokenizers", None)
    universal = getattr(cg, "UniversalSpeculativeDecodingGenerator", None)
    return (int(transformers.__version__.split(".")[0]) >= 5 and different is not None
            and issubclass(generator_class, different)
            and not (universal is not None and issubclass(generator_class, universal)))


@contextlib.contextmanager
def counting(model: Any, rounds: list[tuple[int, int]], made: list[str], rollbacks: list[int]) -> Iterator[None]:
    """While active, ``model``'s candidate generators append (drafted, accepted) to ``rounds`` per
    round and their class names to ``made``; where llamaspec corrects transformers 5's rollback
    of an assistant's cache under universal assisted decoding (``rolls_back_in_target_tokens``),
    how far off each corrected round was, to ``rollbacks``."""
    cls = type(model)

    def make(*args: Any, **kwargs: Any) -> Any:
        generator = cls._get_candidate_generator(model, *args, **kwargs)
        made_by: Any = type(generator)
        made.append(made_by.__name__)
        generator.__class__ = _counting_class(made_by)
        generator._llamaspec_rounds = rounds
        generator._llamaspec_rollbacks = rollbacks
        return generator

    model._get_candidate_generator = make  # this instance only; removed again below
    try:
        yield
    finally:
        del model._get_candidate_generator


def sklearn_available() -> bool:
    from transformers.utils import is_sklearn_available

    return bool(is_sklearn_available())
