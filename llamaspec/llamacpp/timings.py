"""Read llama.cpp's timing blocks (``llama_print_timings``, ``llama_perf_*_print``, ``common_perf_print``):
the lines of one block gathered into a ``Timings``, whichever generation printed them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Timings:
    """One timing block (``llama_print_timings`` / ``llama_perf_*_print`` / ``common_perf_print``).

    Values are as printed; a value printed as ``inf`` or ``nan`` is None. ``eval`` counts only
    single-token decodes: llama.cpp adds every multi-token batch (the prompt, and the drafted
    tokens a target verifies) to ``prompt eval``.
    """

    sources: tuple[str, ...]  # the functions that printed it, in order, e.g. ("common_perf_print",)
    load_ms: float | None = None
    # The sampler: "sample time" (llama_print_timings), "sampling time" (llama_perf_sampler_print),
    # "samplers time" (common_perf_print): ms over that many sampled tokens.
    sample_ms: float | None = None
    sample_runs: int | None = None
    sample_ms_per_token: float | None = None
    sample_tps: float | None = None
    # common_perf_print's "sampling time": samplers plus common/sampling overhead, no count.
    sampling_total_ms: float | None = None
    prompt_eval_ms: float | None = None
    prompt_eval_tokens: int | None = None
    prompt_eval_ms_per_token: float | None = None
    prompt_eval_tps: float | None = None
    eval_ms: float | None = None
    eval_runs: int | None = None
    eval_ms_per_token: float | None = None
    eval_tps: float | None = None
    total_ms: float | None = None
    total_tokens: int | None = None  # from 2024 on: prompt eval tokens + eval runs
    unaccounted_ms: float | None = None
    unaccounted_pct: float | None = None
    graphs_reused: int | None = None
    other: dict[str, float | None] = field(default_factory=dict)  # labels this parser does not know

    @property
    def eval_tokens_per_s(self) -> float | None:
        """Single-token decode speed, computed from ms and runs (not the rounded printed value)."""
        return _rate(self.eval_runs, self.eval_ms)

    @property
    def prompt_tokens_per_s(self) -> float | None:
        return _rate(self.prompt_eval_tokens, self.prompt_eval_ms)


def _rate(count: int | None, ms: float | None) -> float | None:
    if count is None or not ms:
        return None
    return count / ms * 1e3


_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)(?:\(\w*\))?"


_TIMING = re.compile(
    r"^(?P<src>llama_print_timings|llama_perf_context_print|llama_perf_sampler_print|common_perf_print):"
    rf"\s+(?P<label>[a-z][a-z ]*?)\s*=\s*(?P<v>{_NUM})\s*(?:ms)?"
    rf"(?:\s*/\s*(?P<n>{_NUM})\s*(?P<unit>runs|tokens|%))?"
    rf"(?:\s*\(\s*(?P<per>{_NUM}) ms per token,\s*(?P<tps>{_NUM}) tokens per second\))?",
    re.I,
)


def _number(text: str) -> float | None:
    value = float(text.split("(")[0])
    return value if math.isfinite(value) else None


def _int(text: str) -> int | None:
    value = _number(text)
    return int(value) if value is not None else None


_FIELDS = {
    "load": ("load_ms", None, None, None),
    "sample": ("sample_ms", "sample_runs", "sample_ms_per_token", "sample_tps"),
    "samplers": ("sample_ms", "sample_runs", "sample_ms_per_token", "sample_tps"),
    "prompt eval": ("prompt_eval_ms", "prompt_eval_tokens", "prompt_eval_ms_per_token", "prompt_eval_tps"),
    "eval": ("eval_ms", "eval_runs", "eval_ms_per_token", "eval_tps"),
    "total": ("total_ms", "total_tokens", None, None),
    "unaccounted": ("unaccounted_ms", "unaccounted_pct", None, None),
}


_INT_FIELDS = {"sample_runs", "prompt_eval_tokens", "eval_runs", "total_tokens", "graphs_reused"}


class _Block:
    def __init__(self) -> None:
        self.sources: list[str] = []
        self.values: dict[str, Any] = {}
        self.other: dict[str, float | None] = {}

    def add(self, m: re.Match[str]) -> None:
        src = m.group("src")
        if src not in self.sources:
            self.sources.append(src)
        label = re.sub(r"\s+", " ", m.group("label").strip().lower())
        label = label[:-5] if label.endswith(" time") else label
        if label == "graphs reused":
            self.values["graphs_reused"] = _int(m.group("v"))
            return
        if label == "sampling":
            # common_perf_print: the whole sampling time, no count; llama_perf_sampler_print: the sampler
            label = "sample" if m.group("n") is not None else "sampling total"
        if label == "sampling total":
            self.values["sampling_total_ms"] = _number(m.group("v"))
            return
        names = _FIELDS.get(label)
        if names is None:
            self.other[label] = _number(m.group("v"))
            return
        groups = ("v", "n", "per", "tps")
        for name, group in zip(names, groups, strict=True):
            if name is None or m.group(group) is None:
                continue
            self.values[name] = _int(m.group(group)) if name in _INT_FIELDS else _number(m.group(group))

    def timings(self) -> Timings | None:
        if not self.sources:
            return None
        return Timings(sources=tuple(self.sources), other=self.other, **self.values)


def _format(sources: set[str]) -> str:
    if "common_perf_print" in sources:
        return "common_perf"
    if sources & {"llama_perf_context_print", "llama_perf_sampler_print"}:
        return "llama_perf"
    if "llama_print_timings" in sources:
        return "llama_print_timings"
    return "none"
