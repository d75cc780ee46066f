"""One prompt's figures from its measurements, as a frozen type: decode and end-to-end speedups,
acceptance, rounds, the lossless verdict, and how it ended.

``PromptFigures.to_dict`` is the JSON a prompt's run row stores (``runs.summary``) and that a
resumed set reads back (``from_dict``); ``plain`` turns any figures type into JSON values.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.base import stats
from llamaspec.measure.contract import Measurement, acceptance
from llamaspec.measure.pairs import whole_pairs
from llamaspec.measure.summary import summarize as summarize_point
from llamaspec.promptset.probe import Divergence
from llamaspec.studies.prompts import Prompt

# The end-to-end figures of a prompt: a prompt stored before they existed gets them on resume.
E2E_KEYS = ("e2e_speedup", "e2e_speedup_spread", "baseline_e2e_tokens", "baseline_e2e_seconds",
            "speculative_e2e_tokens", "speculative_e2e_seconds", "baseline_prompt_ms", "speculative_prompt_ms")


def fields_dict(figures: Any) -> dict[str, Any]:
    """A frozen figures type as JSON: its fields in order, nested figures as their dicts."""
    return {f.name: plain(getattr(figures, f.name)) for f in dataclasses.fields(figures)}


def plain(value: Any) -> Any:
    """JSON values: a type's own ``to_dict``, a dataclass's fields, tuples as lists."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_dict(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True)
class PromptFigures:
    """One prompt's figures for one method (its pairs made by ``pairs.whole_pairs``).

    Decode figures: tokens after the first over generation time; ``e2e_*``: every generated token
    over the request's time on the server, prompt processing included, over the pairs that have
    server timings. ``*_tokens``/``*_seconds`` are what set-level total-token speedups add up."""

    id: str
    category: str
    status: str  # "ok" | "failed"
    error: str | None = None
    error_kind: str | None = None  # the measurement's Measurement.error_kind ("server", "timeout", "prompt", ...)
    repeats: int = 0  # pairs measured
    paired: bool = False
    speedup: float | None = None  # median of the paired decode ratios
    speedup_spread: stats.Spread | None = None
    baseline_tps: float | None = None
    speculative_tps: float | None = None
    n_prompt: int | None = None
    n_predict: int | None = None
    ended_early: bool = False  # end of text before n_predict (either side): kept out of every speedup
    ended_early_note: str | None = None
    baseline_tokens: int = 0
    baseline_seconds: float = 0.0
    speculative_tokens: int = 0
    speculative_seconds: float = 0.0
    speculative_n_predict: int = 0
    e2e_speedup: float | None = None
    e2e_speedup_spread: stats.Spread | None = None
    baseline_e2e_tokens: int = 0
    baseline_e2e_seconds: float = 0.0
    speculative_e2e_tokens: int = 0
    speculative_e2e_seconds: float = 0.0
    baseline_prompt_ms: float | None = None  # median prompt processing time per request
    speculative_prompt_ms: float | None = None
    n_drafted: int | None = None
    n_accept: int | None = None
    acceptance: float | None = None  # accepted over drafted tokens, a fraction (contract.acceptance)
    rounds: int | None = None  # None unless every speculative measurement knows its rounds
    lossless: bool | None = None
    first_difference: int | None = None
    lossless_unit: str | None = None  # tokens (ids) | chars (text)
    lossless_text: str | None = None
    divergence: Divergence | None = None  # set by the run when the output differs and the engine can probe it
    draft_len: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PromptFigures:
        """A stored prompt's figures (``to_dict``'s JSON); keys a version before this one lacked
        take their defaults, keys this version does not know are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("speedup_spread", "e2e_speedup_spread"):
            if key in values:
                values[key] = stats.Spread.from_dict(values[key])
        if "divergence" in values:
            values["divergence"] = Divergence.from_dict(values["divergence"])
        return cls(**values)


def _ended_early_note(base: Sequence[Measurement], spec: Sequence[Measurement]) -> str | None:
    """Which side stopped at end of text, and after how many tokens: a speculative output that
    diverged and then ended is not the baseline ending early."""
    def ended(ms: Sequence[Measurement]) -> int | None:
        counts = [m.n_predict or 0 for m in ms if m.end_of_text]
        return min(counts) if counts else None

    b, s = ended(base), ended(spec)
    if b is None and s is None:
        return None
    if s is None:
        return f"{b} tokens"
    if b is None:
        ran = max((m.n_predict or 0 for m in base), default=0)
        return f"the speculative output ended after {s} tokens, the baseline ran on to {ran}"
    return f"{b} tokens" if b == s else f"baseline after {b} tokens, speculative after {s}"


def decode_totals(m: Measurement) -> tuple[int, float] | None:
    """(tokens after the first, seconds) behind one decode speed: what total-token speedups add up."""
    if not m.ok or not m.decode_tps or not m.n_predict or m.n_predict < 2:
        return None
    tokens = m.n_predict - 1
    return tokens, tokens / m.decode_tps


def request_totals(m: Measurement) -> tuple[int, float] | None:
    """(generated tokens, seconds from the start of prompt processing to the last token) of one
    request: what end-to-end speedups add up. From llama-server's ``timings`` (``prompt_ms`` runs
    from the prompt's first batch to the first sampled token, ``predicted_ms`` from there to the
    last token, so their sum is the whole request on the server, without HTTP and queueing);
    None where the engine gives no such timings."""
    if not m.ok or not m.n_predict:
        return None
    prompt_ms, predicted_ms = m.prompt_ms, m.generation_ms
    if prompt_ms is None or predicted_ms is None:
        return None
    if prompt_ms + predicted_ms <= 0:
        return None
    return m.n_predict, (prompt_ms + predicted_ms) / 1000.0


def median_or_none(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def prompt_summary(prompt: Prompt, measured: Sequence[Measurement], temperature: float | None = None) -> PromptFigures:
    """One prompt's figures from its measurements (paired by their pair index, ``pairs.whole_pairs``).

    The speedup (median of paired ratios) and the lossless verdict are the run core's own
    (``summary.summarize``, ``summary.compare_outputs``): one definition for a prompt and a point.
    Sampled (``temperature`` above 0): no lossless verdict (``lossless`` None, its text says why).
    """
    point = summarize_point(measured, temperature=temperature)
    whole = whole_pairs(measured)  # every figure that sets the two modes side by side: whole pairs only
    base = [p.baseline for p in whole]
    spec = [p.speculative for p in whole]
    speed = point.speedup
    verdict = point.lossless
    totals_b = [t for t in (decode_totals(m) for m in base) if t]
    totals_s = [t for t in (decode_totals(m) for m in spec) if t]
    drafted = sum(m.n_drafted or 0 for m in spec)
    accepted = sum(m.n_accept or 0 for m in spec)
    rounds = [m.rounds for m in spec]
    failed = next((m for m in measured if not m.ok), None)
    # End to end: the decode speedup's pairs (pairs.whole_pairs, by pair index).
    e2e_pairs = [(s_, b_) for p in whole
                 if (s_ := request_totals(p.speculative)) and (b_ := request_totals(p.baseline))]
    e2e = stats.spread([(ns / ts) / (nb / tb) for (ns, ts), (nb, tb) in e2e_pairs])
    return PromptFigures(
        id=prompt.id, category=prompt.category,
        status="failed" if failed else "ok",
        error=failed.error if failed else None,
        error_kind=failed.error_kind if failed else None,
        repeats=point.pairs,
        paired=point.paired,
        speedup=speed.median if speed else None,
        speedup_spread=speed,
        baseline_tps=statistics.median([m.decode_tps for m in base if m.decode_tps]) if totals_b else None,
        speculative_tps=statistics.median([m.decode_tps for m in spec if m.decode_tps]) if totals_s else None,
        n_prompt=base[0].n_prompt if base else (spec[0].n_prompt if spec else None),
        n_predict=base[0].n_predict if base else None,
        ended_early=any(m.end_of_text for m in (*base, *spec)),
        ended_early_note=_ended_early_note(base, spec),
        baseline_tokens=sum(t for t, _ in totals_b), baseline_seconds=sum(s for _, s in totals_b),
        speculative_tokens=sum(t for t, _ in totals_s), speculative_seconds=sum(s for _, s in totals_s),
        speculative_n_predict=sum(m.n_predict or 0 for m in spec),
        # end to end, prompt included: generated tokens over prompt processing plus generation
        e2e_speedup=e2e.median if e2e else None,
        e2e_speedup_spread=e2e,
        baseline_e2e_tokens=sum(b_[0] for _s, b_ in e2e_pairs),
        baseline_e2e_seconds=sum(b_[1] for _s, b_ in e2e_pairs),
        speculative_e2e_tokens=sum(s_[0] for s_, _b in e2e_pairs),
        speculative_e2e_seconds=sum(s_[1] for s_, _b in e2e_pairs),
        baseline_prompt_ms=median_or_none([m.prompt_ms for m in base]),
        speculative_prompt_ms=median_or_none([m.prompt_ms for m in spec]),
        n_drafted=drafted if spec else None, n_accept=accepted if spec else None,
        acceptance=acceptance(accepted, drafted),
        rounds=sum(r for r in rounds if r is not None) if spec and all(r is not None for r in rounds) else None,
        lossless=verdict.identical if spec and base else None,
        first_difference=verdict.first_difference if verdict.verdict == "differs" else None,
        lossless_unit=verdict.unit,
        lossless_text=verdict.text() if spec and base else None,
        divergence=None,
        draft_len=spec[0].draft_len if spec else None,
    )
