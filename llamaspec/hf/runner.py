"""The transformers backend: greedy ``generate()`` with and without an assistant, in this process.

Modes:

- ``baseline``: the target alone;
- ``speculative``: with ``assistant_model`` (spec_type ``draft``), or draft-free prompt lookup
  (spec_type ``prompt-lookup``: ``prompt_lookup_num_tokens``);
- ``draft``: the assistant alone (one draft step's cost: its generate() steps, as it drafts);
- ``batch``: the target's forward pass over 1..17 new tokens after a cached context at the run's
  mean depth, logits for each (a verification's cost; batch 1 is its own step), timed with torch.

The speedup model reads the last two (``hf.profiles.TRANSFORMERS_ASSISTED``): the assistant's step
from ``draft``, the target's batches from ``batch``, generate()'s own loop as the baselines' step
beyond the timed forward pass.

Settings, in llamaspec's names (``llamaspec.measure.settings``):

======================  ======================================================================
``n_predict``           ``max_new_tokens`` (generation stops earlier at end of text, both modes)
``draft_max``           ``num_assistant_tokens`` (prompt lookup: ``prompt_lookup_num_tokens``)
``draft_p_min``         ``assistant_confidence_threshold`` (unset: the assistant's own, 0.4 by
                        default in transformers 4.57 and 5.x; 0 drafts ``draft_max`` tokens every round)
``draft_schedule``      ``num_assistant_tokens_schedule``: constant, heuristic, heuristic_transient
``temperature``/seed    0: greedy (``do_sample=False``); above: sampling, seeded with ``seed``
``threads``             ``torch.set_num_threads``
``dtype``/draft_dtype   weight dtypes of target / assistant (auto: the checkpoint's; GGUF: float32)
``load_in``             bitsandbytes ``8bit`` / ``4bit`` for the target (CUDA GPUs only)
``device``              cpu, cuda, cuda:N, mps, auto (default: the EngineOptions accel)
``universal_assisted``  allow an assistant with another tokenizer (``tokenizer=`` and
                        ``assistant_tokenizer=``: text re-tokenized every round)
``escape``              process ``\\n``-style escapes in a raw prompt, as llama.cpp's ``-e`` (a chat
                        prompt's messages are sent as written)
``timeout``             ``max_time`` of the generation (a generation cut short fails)
======================  ======================================================================

transformers reads the assistant settings from the **assistant's** ``generation_config``, keeps
what the ``heuristic`` schedule learnt across calls, and (with scikit-learn installed) re-tunes the
confidence threshold during generation. So before every generation they are set there again from
the case's settings (``assistant.py``), the re-tuning is switched off (``generation.counting``), and
the values in force at the start and at the end are stored in ``Measurement.stats["assistant"]``.

Models are loaded once and kept while the cases need them (``check`` loads them, so a broken file
fails before anything is measured and no load is timed).

Its size: one engine class whose methods share the loaded models, the hooks installed on
transformers' generation loop and what they counted; the settings table above is most of the
rest. The prompt as the model gets it is ``prompting.py``, the assistant's settings ``assistant.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import resource
import sys
import time
from pathlib import Path
from typing import Any

from llamaspec import theory
from llamaspec.base.errors import LlamaspecError
from llamaspec.hf.assistant import assistant_values, pin_assistant
from llamaspec.hf.prompting import _input_ids, _prompt_form
from llamaspec.measure import spectypes
from llamaspec.measure.contract import (
    Capabilities,
    Deployment,
    EngineOptions,
    Measurement,
    ModelPath,
    ResolvedCase,
    positions_from_rounds,
)
from llamaspec.measure.settings import Settings, defaults_for

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'llamaspec[hf]'"
SPEC_TYPES = ("draft", "prompt-lookup")
HONOURED = frozenset({
    "n_predict", "seed", "temperature", "draft_max", "draft_p_min", "threads", "escape", "spec_type", "timeout",
    "draft_schedule", "dtype", "draft_dtype", "load_in", "device", "universal_assisted",
})
# The program a measurement records per spec_type (Measurement.program): the name of its round
# profile, registered in hf.profiles, which the speedup model reads.
PROGRAM_OF_SPEC_TYPE = {"draft": "transformers-assisted", "prompt-lookup": "transformers-prompt-lookup"}
BATCH_REPETITIONS = 3
CAPABILITIES = Capabilities(
    modes=frozenset({"baseline", "speculative", "draft", "batch"}),
    settings=HONOURED,
    spec_types=SPEC_TYPES,
    draft_policy="capped",  # transformers' default: up to num_assistant_tokens, fewer below the confidence threshold
    keeps_models_loaded=True,
    token_ids=True,
)


def require() -> tuple[Any, Any]:
    """torch and transformers, or one line saying how to get them."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise LlamaspecError(f"the transformers backend needs torch and transformers ({missing} is not installed)",
                             hint=INSTALL_HINT) from None
    return torch, transformers


def open_engine(options: EngineOptions) -> TransformersEngine:
    return TransformersEngine(options)  # torch and transformers required there


def deployment(case: ResolvedCase, options: EngineOptions, speculative: bool = True) -> Deployment:
    """The Python that deploys ``case`` (no torch imported here: the snippet imports it)."""
    from llamaspec.hf import deploy

    return deploy.deployment(case, options.accel, speculative)


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one case runs here, from its settings: device, dtypes, 8/4-bit, the speculative mode."""

    device: str
    dtype: str
    draft_dtype: str
    load_in: str
    spec_type: str
    universal: bool


class TransformersEngine:
    name = "transformers"
    capabilities = CAPABILITIES

    def __init__(self, options: EngineOptions | None = None) -> None:
        self.torch, self.transformers = require()
        self.options = options or EngineOptions()
        self._loaded: dict[tuple[str, ...], Any] = {}  # LoadSpec.key -> generation.Loaded

    # --- the contract ---------------------------------------------------------------------------

    def identity(self) -> str:
        return f"transformers {self.transformers.__version__} torch {self.torch.__version__} {self.default_device()}"

    def provenance(self) -> dict[str, Any]:
        from llamaspec.hf import generation

        versions = {"transformers": self.transformers.__version__, "torch": self.torch.__version__}
        for name in ("accelerate", "peft", "bitsandbytes", "tokenizers", "gguf"):
            module = sys.modules.get(name)
            versions[name] = getattr(module, "__version__", None) if module else _version_of(name)
        device = self.default_device()
        return {
            "version": self.transformers.__version__,
            "accel": device,  # what it computed on: cpu, cuda, mps
            "versions": versions,
            "device": device,
            "device_name": self.torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
            "torch_threads": self.torch.get_num_threads(),
            "sklearn_available": generation.sklearn_available(),
            "confidence_retuning": "off (llamaspec's counting subclass; the threshold stays as set)",
            "speed_basis": SPEED_BASIS,
            "loaded": [loaded.info for loaded in self._loaded.values()],
        }

    def resolve_model(self, model: str, variant: str) -> ModelPath:
        from llamaspec.hf import models

        return models.resolve_model(model, variant)

    def check(self, case: ResolvedCase) -> None:
        plan = self.plan(case)
        target = self._ensure(case.target, plan.device, plan.dtype, plan.load_in)
        if case.draft is not None and spectypes.needs_draft(plan.spec_type):
            draft = self._ensure(case.draft, plan.device, plan.draft_dtype, "none")
            self.universal(case, plan, target, draft)
        self._evict(keep=self._keys(case, plan))

    def universal(self, case: ResolvedCase, plan: Plan, target: Any, draft: Any) -> bool:
        """Whether generate() must run universal assisted decoding for this pair (LlamaspecError when
        it cannot run the pair at all). transformers decides by the models' vocabulary sizes: equal,
        the ids are taken to mean the same; different, it wants both tokenizers."""
        from llamaspec.hf import generation

        differs = generation.same_vocabulary(target.tokenizer, draft.tokenizer)
        sizes = (target.generator.config.get_text_config().vocab_size, draft.generator.config.get_text_config().vocab_size)
        pair = f"the assistant {case.draft.label if case.draft else '?'} and the target {case.target.label}"
        if sizes[0] == sizes[1]:
            if differs:
                raise LlamaspecError(f"{pair} have different tokenizers ({differs}) with vocabularies of the same size "
                                     f"({sizes[0]}): transformers takes their ids to mean the same and cannot run them",
                                     hint="pick an assistant with the target's tokenizer, or one with a vocabulary of "
                                          "another size (universal assisted decoding)")
            return False  # the same tokenizer: plain assisted generation whatever universal_assisted says
        if not plan.universal:
            reason = f"different tokenizers ({differs})" if differs else f"vocabularies of {sizes[0]} and {sizes[1]} entries"
            raise LlamaspecError(f"{pair} have {reason}",
                                 hint="set universal_assisted: true (universal assisted decoding: text re-tokenized "
                                      "every round), or pick an assistant with the target's tokenizer")
        return True

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        base: dict[str, Any] = {"mode": mode, "argv": (), "exit_code": None, "log_path": str(log_path)}
        try:
            plan = self.plan(case)
            if mode not in self.capabilities.modes:
                raise LlamaspecError(f"the transformers backend does not measure mode {mode!r}",
                                     hint=f"it measures {', '.join(sorted(self.capabilities.modes))}")
            if mode == "draft" and case.draft is None:
                raise LlamaspecError("this case has no assistant to time", hint="drop the draft measurement")
            target = self._ensure(case.target, plan.device, plan.dtype, plan.load_in)
            if mode == "batch":
                return self._time_batches(case, target, log_path, base)
            draft = (self._ensure(case.draft, plan.device, plan.draft_dtype, "none")
                     if case.draft is not None and (mode == "draft" or (mode == "speculative" and spectypes.needs_draft(plan.spec_type)))
                     else None)
        except LlamaspecError as exc:
            return Measurement(ok=False, error=exc.message, wall_seconds=0.0, peak_rss_bytes=None, **base)
        return self._generate(case, mode, plan, target, draft, log_path, base)

    def deployment(self, case: ResolvedCase, speculative: bool = True) -> Deployment:
        from llamaspec.hf import deploy

        s = case.settings
        return deploy.deployment(case, self.options.accel, speculative,
                                 device=s.device if s.device not in (None, "auto") else self.default_device())

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = ("baseline", "speculative")) -> None:
        """Not declared (capabilities.prepares is False): models load on first use and stay loaded; not declared in capabilities."""

    def top_tokens(self, case: ResolvedCase, position: int, prefix: Any, log_path: Path,
                   n: int = 2) -> list[dict[str, Any]] | None:
        """Not declared (capabilities.top_tokens is False): no probe of the target's probabilities."""
        return None

    def close(self) -> None:
        self._loaded.clear()
        self._free()

    # --- planning ------------------------------------------------------------------------------

    def default_device(self) -> str:
        accel = self.options.accel
        if accel == "cuda" or (accel == "auto" and self.torch.cuda.is_available()):
            return "cuda"
        if accel == "metal" or (accel == "auto" and self.torch.backends.mps.is_available()):
            return "mps"
        return "cpu"

    def plan(self, case: ResolvedCase) -> Plan:
        """The case's settings as this backend runs them; LlamaspecError for what it cannot honour."""
        s = case.settings
        defaults = defaults_for(s.spec_type)
        ignored = [f.name for f in dataclasses.fields(Settings)
                   if f.name not in HONOURED and getattr(s, f.name) not in (None, getattr(defaults, f.name))]
        if ignored:
            raise LlamaspecError(f"the transformers backend has no equivalent of {', '.join(ignored)}",
                                 hint=f"drop {'it' if len(ignored) == 1 else 'them'} from the experiment "
                                      f"(it honours {', '.join(sorted(HONOURED))})")
        spec_type = s.spec_type or "draft"
        if spec_type not in SPEC_TYPES:
            raise LlamaspecError(f"spec_type {spec_type!r} is not a transformers mode",
                                 hint="use draft (an assistant model) or prompt-lookup (draft-free)")
        if spectypes.needs_draft(spec_type) and case.draft is None:
            raise LlamaspecError(f"case {case.case} has no assistant model",
                                 hint="give it a draft model, or set spec_type: prompt-lookup")
        device = s.device or "auto"
        if device == "auto":
            device = self.default_device()
        if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
            raise LlamaspecError(f"unknown device {device!r}", hint="use cpu, cuda, cuda:N, mps or auto")
        load_in = s.load_in or "none"
        if load_in != "none":
            if not device.startswith("cuda") or not self.torch.cuda.is_available():
                where = "torch sees none here" if not self.torch.cuda.is_available() else f"this run is on {device}"
                raise LlamaspecError(f"load_in: {load_in} needs a CUDA GPU (bitsandbytes), and {where}",
                                     hint="drop load_in (weights then load in dtype), or run on a machine with an NVIDIA GPU")
            if _version_of("bitsandbytes") is None:
                raise LlamaspecError(f"load_in: {load_in} needs bitsandbytes, which is not installed",
                                     hint="pip install bitsandbytes (CUDA machines only)")
        if device.startswith("cuda") and not self.torch.cuda.is_available():
            raise LlamaspecError(f"device {device} asked for, and torch sees no CUDA GPU here",
                                 hint="use device: cpu (or auto), or a CUDA build of torch on a machine with an NVIDIA GPU")
        if device == "mps" and not self.torch.backends.mps.is_available():
            raise LlamaspecError("device mps asked for, and torch sees no Apple GPU here", hint="use device: cpu (or auto)")
        dtype = s.dtype or "auto"
        if device == "cpu" and s.threads:
            self.torch.set_num_threads(s.threads)
        return Plan(device, dtype, s.draft_dtype or dtype, load_in, spec_type, bool(s.universal_assisted))

    # --- models --------------------------------------------------------------------------------

    def _keys(self, case: ResolvedCase, plan: Plan) -> set[tuple[str, ...]]:
        from llamaspec.hf.generation import LoadSpec

        keys: set[tuple[str, ...]] = {LoadSpec(case.target, plan.device, plan.dtype, plan.load_in).key}
        if case.draft is not None:
            keys.add(LoadSpec(case.draft, plan.device, plan.draft_dtype, "none").key)
        return keys

    def _ensure(self, model: ModelPath, device: str, dtype: str, load_in: str) -> Any:
        from llamaspec.hf import generation

        spec = generation.LoadSpec(model, device, dtype, load_in)
        if spec.key not in self._loaded:
            self._loaded[spec.key] = generation.load(spec)
        return self._loaded[spec.key]

    def _evict(self, keep: set[tuple[str, ...]]) -> None:
        """Drop the models no longer needed (one case's pair stays loaded across its measurements)."""
        gone = [k for k in self._loaded if k not in keep]
        for k in gone:
            del self._loaded[k]
        if gone:
            self._free()

    def _free(self) -> None:
        import gc

        gc.collect()
        if self.torch.cuda.is_available():
            self.torch.cuda.empty_cache()

    # --- one generation ------------------------------------------------------------------------

    def _generate(self, case: ResolvedCase, mode: str, plan: Plan, target: Any, draft: Any, log_path: Path,
                  base: dict[str, Any]) -> Measurement:
        from llamaspec.hf import generation

        torch = self.torch
        s = case.settings
        runner = draft if mode == "draft" else target
        n_predict = s.n_predict if s.n_predict is not None else 256
        tokenizer = runner.tokenizer
        model = runner.generator
        input_ids = _input_ids(case, tokenizer).to(model.device)
        sampling = bool(s.temperature)
        kwargs: dict[str, Any] = {"max_new_tokens": n_predict, "do_sample": sampling,
                                  "attention_mask": torch.ones_like(input_ids)}
        if sampling:
            kwargs["temperature"] = s.temperature
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
            kwargs["pad_token_id"] = tokenizer.eos_token_id  # silences the open-end warning; no padding happens at batch 1
        if s.timeout:
            kwargs["max_time"] = s.timeout
        assistant_stats: dict[str, Any] | None = None
        draft_max = s.draft_max if s.draft_max is not None else 8
        if mode == "speculative" and plan.spec_type == "prompt-lookup":
            kwargs["prompt_lookup_num_tokens"] = draft_max
            assistant_stats = {"mode": "prompt-lookup", "prompt_lookup_num_tokens": draft_max,
                               "max_matching_ngram_size": 2}
        elif mode == "speculative":
            try:
                universal = self.universal(case, plan, target, draft)
            except LlamaspecError as exc:
                return Measurement(ok=False, error=exc.message, wall_seconds=0.0, peak_rss_bytes=None, **base)
            assistant_stats = pin_assistant(draft, s, draft_max)
            kwargs["assistant_model"] = draft.generator
            if universal:
                kwargs["tokenizer"] = target.tokenizer
                kwargs["assistant_tokenizer"] = draft.tokenizer
        # what was asked of generate(), as the record's command line
        base = {**base, "argv": ("generate", f"model={runner.info['path']}", *(f"{k}={v}" for k, v in _printable(kwargs).items()))}
        rounds: list[tuple[int, int]] = []
        made: list[str] = []
        rollbacks: list[int] = []  # rounds whose assistant-cache rollback llamaspec corrected (transformers 5)
        streamer = generation.TimingStreamer()
        kwargs["streamer"] = streamer
        on_cuda = str(model.device).startswith("cuda")
        if on_cuda:
            torch.cuda.reset_peak_memory_stats()
        torch.manual_seed(s.seed if s.seed is not None else 20)
        start = time.perf_counter()
        try:
            with generation.counting(model, rounds, made, rollbacks), torch.inference_mode():
                out = model.generate(input_ids, **kwargs)
        except (RuntimeError, ValueError, TypeError) as exc:  # what generate() raises for a failure of its own
            seconds = time.perf_counter() - start
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self._log(log_path, {"mode": mode, "error": f"{type(exc).__name__}: {first}", "kwargs": _printable(kwargs)})
            return Measurement(ok=False, error=f"generate() failed: {type(exc).__name__}: {first}"[:500],
                               wall_seconds=seconds, peak_rss_bytes=_peak_rss(), **base)
        seconds = time.perf_counter() - start
        ids = tuple(int(t) for t in out[0, input_ids.shape[1]:].tolist())
        text = tokenizer.decode(list(ids), skip_special_tokens=True)
        eos = _eos_ids(model, tokenizer)
        end_of_text = len(ids) < n_predict and bool(ids) and ids[-1] in eos
        decode = streamer.decode()
        first_at = streamer.puts[0][0] if streamer.puts else None
        stats: dict[str, Any] = {
            # full precision: decode_tps and encode_tps are derived from these, and a rounded copy
            # would disagree with them on a fast machine (23 tokens in 47 ms)
            "generate_seconds": seconds,
            "first_tokens_seconds": first_at - start if first_at else None,
            "first_call_tokens": streamer.puts[0][1] if streamer.puts else None,
            "target_calls": len(streamer.puts),
            "decode_tokens": decode[0] if decode else None,
            "decode_seconds": decode[1] if decode else None,
            "speed_basis": SPEED_BASIS,
            "model": runner.info["label"],
            "prompt_form": _prompt_form(case, tokenizer),
        }
        if on_cuda:
            stats["cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        counters: dict[str, Any] = {"draft_policy": "none"}
        if mode == "speculative":
            drafted = sum(d for d, _ in rounds)
            accepted = sum(a for _, a in rounds)
            if assistant_stats is not None and spectypes.needs_draft(plan.spec_type):
                assistant_stats["end"] = assistant_values(draft)
            assistant_stats = {**(assistant_stats or {}), "candidate_generator": made[0] if made else None,
                               "universal": "tokenizer" in kwargs}
            if rollbacks:  # what was measured is transformers' loop with this one correction: say so
                assistant_stats["cache_rollback_corrected"] = {
                    "rounds": len(rollbacks), "by_tokens": rollbacks,
                    "why": "transformers 5 rolls the assistant's cache back by a length in target tokens "
                           "(AssistedCandidateGeneratorDifferentTokenizers); llamaspec uses the assistant's own"}
            stats["assistant"] = assistant_stats
            stats["per_round"] = [list(r) for r in rounds]
            by = positions_from_rounds(rounds)  # each round's candidates and accepted count, from the hook
            stats["by_position"] = {"drafted": by.drafted, "accepted": by.accepted, "note": by.note}
            counters = {**by.fields(), "n_drafted": drafted, "n_accept": accepted, "rounds": len(rounds),
                        "draft_len": _draft_len(plan, assistant_stats, draft_max),
                        "draft_policy": _draft_policy(plan, assistant_stats),
                        "program": PROGRAM_OF_SPEC_TYPE[plan.spec_type]}
        elif mode == "baseline" and made:
            # generate() without an assistant drafted all the same: the model's generation config asks
            # for a candidate generator (prompt_lookup_num_tokens, say). Counted, and so refused by the
            # run core (contract.refuse_drafting_baseline): this is not the target alone.
            stats["candidate_generator"] = made[0]
            counters = {**counters, "n_drafted": sum(d for d, _ in rounds), "n_accept": sum(a for _, a in rounds)}
        timed_out = s.timeout is not None and seconds >= s.timeout and len(ids) < n_predict and not end_of_text
        measurement = Measurement(
            ok=not timed_out,
            error=f"generation cut short by the timeout ({s.timeout:.0f} s) after {len(ids)} tokens" if timed_out else None,
            wall_seconds=seconds,
            peak_rss_bytes=_peak_rss(),
            n_prompt=int(input_ids.shape[1]),
            n_predict=len(ids),
            encode_tps=input_ids.shape[1] / (first_at - start) if first_at and first_at > start else None,
            decode_tps=decode[0] / decode[1] if decode and decode[1] > 0 else None,
            speed_basis=SPEED_BASIS,
            text=text,
            tokens=ids,
            end_of_text=end_of_text,
            stats=stats,
            **counters,
            **base,
        )
        self._log(log_path, {"mode": mode, "case": case.case, "kwargs": _printable(kwargs), "stats": stats,
                             "counters": counters, "n_predict": len(ids), "decode_tps": measurement.decode_tps,
                             "text": text})
        return measurement

    def _time_batches(self, case: ResolvedCase, target: Any, log_path: Path, base: dict[str, Any]) -> Measurement:
        """The target's forward pass over 1..17 new tokens at the run's mean depth (the prompt's
        tokens plus half the generation; the context is the prompt's tokens repeated to that
        length: a dense model's cost depends on how many tokens it attends to, not which)."""
        from llamaspec.hf import generation

        s = case.settings
        model = target.generator
        prompt_ids = _input_ids(case, target.tokenizer).to(model.device)
        n_prompt = int(prompt_ids.shape[1])
        depth = theory.bench_depth(n_prompt, s.n_predict if s.n_predict is not None else 256)
        context = prompt_ids.repeat(1, -(-depth // max(n_prompt, 1)))[:, :depth]
        start = time.perf_counter()
        try:
            batch_ms = generation.time_forward(model, context, theory.VERIFY_BATCH_SIZES, BATCH_REPETITIONS)
        except (RuntimeError, ValueError, TypeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return Measurement(ok=False, error=f"timing the target's forward pass failed: {type(exc).__name__}: {first}"[:500],
                               wall_seconds=time.perf_counter() - start, peak_rss_bytes=_peak_rss(), **base)
        seconds = time.perf_counter() - start
        stats = {"batch_ms": batch_ms, "depth": depth, "repetitions": BATCH_REPETITIONS,
                 "depth_basis": "prompt tokens as the target's tokenizer counted them, plus half of n_predict",
                 "model": target.info["label"]}
        self._log(log_path, {"mode": "batch", "case": case.case, "stats": stats})
        return Measurement(ok=True, error=None, wall_seconds=seconds, peak_rss_bytes=_peak_rss(), n_prompt=n_prompt,
                           decode_tps=1000.0 / batch_ms[1], stats=stats,
                           speed_basis="torch: one forward pass over one new token at the run's depth (1000 / ms)",
                           **{**base, "argv": ("forward", f"model={target.info['path']}", f"depth={depth}",
                                               f"tokens={theory.VERIFY_BATCH_SIZES[0]}..{theory.VERIFY_BATCH_SIZES[-1]}")})

    @staticmethod
    def _log(path: Path, record: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps(record, default=str) + "\n")


SPEED_BASIS = ("streamer timestamps: tokens after the first target call over the time from that call's tokens to the "
               "last (without an assistant: after the first token, SPEED_DEFINITION exactly; with one, the first "
               "call's accepted drafts are left out with it)")


def _draft_len(plan: Plan, assistant: dict[str, Any], draft_max: int) -> int:
    if plan.spec_type == "prompt-lookup":
        return draft_max
    end = assistant.get("end") or {}
    return int(end.get("num_assistant_tokens", draft_max))


def _draft_policy(plan: Plan, assistant: dict[str, Any]) -> str:
    if plan.spec_type == "prompt-lookup":
        return "capped"  # up to N tokens, none when the n-gram is not found
    start = assistant.get("start") or {}
    if start.get("num_assistant_tokens_schedule", "constant") != "constant":
        return "adaptive"
    # never "fixed", even with no confidence threshold: the assistant drafts at most what is left
    # of max_new_tokens (less one) and stops at its end of text
    return "capped"


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _peak_rss() -> int:
    """This process's peak resident memory so far (both models live here: not per mode)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _printable(kwargs: dict[str, Any]) -> dict[str, Any]:
    shown = {k: (type(v).__name__ if k in ("streamer", "tokenizer", "assistant_tokenizer") else v)
             for k, v in kwargs.items() if k != "attention_mask"}
    if "assistant_model" in kwargs:
        shown["assistant_model"] = getattr(kwargs["assistant_model"], "name_or_path", type(kwargs["assistant_model"]).__name__)
    return shown


def _version_of(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
