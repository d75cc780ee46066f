"""A prompt set's figures, over the whole set and per category, as frozen types.

- total-token speedup: all speculative decode tokens over their time, against the same for the
  baseline (prompts weighted by their length), with a bootstrap interval over prompts;
- end to end, prompt included (``e2e_*``): the same total over each request's whole time on the
  server, and the geometric mean of per-prompt end-to-end speedups;
- mean, geometric mean and median of per-prompt speedups, each with a 95 % bootstrap interval;
- acceptance, accepted tokens per round and tokens per round (Spec-Bench's tau) where the engine
  knows the rounds, and the paper's model through the measured point (``Forecast``);
- lossless rate, and the differing prompts whose divergence was a greedy near-tie;
- prompts that ended early listed apart and kept out of every speedup, failed prompts, and the
  prompts whose output differs.

``to_dict`` gives the JSON ``--json`` prints (the keys of the dicts these types replaced).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.base import stats
from llamaspec.measure import estimators
from llamaspec.measure.contract import acceptance, drafted_per_round, mean_accepted, tokens_per_round
from llamaspec.promptset.probe import Divergence, divergence_text
from llamaspec.promptset.prompt_figures import PromptFigures, fields_dict, median_or_none

FORECAST_BASIS = "Leviathan et al.'s model through the measured point (verification costs one target step)"


@dataclass(frozen=True)
class Forecast:
    """The paper's model through a group's one measured point (``theory.fit_one_point``): alpha,
    the cost ratio it implies and the draft length it predicts best. A forecast, to check with a
    sweep."""

    alpha: float
    drafted_per_round: float
    cost_ratio: float
    best_draft: int
    best_speedup: float
    basis: str = FORECAST_BASIS


@dataclass(frozen=True)
class GroupFigures:
    """Speedups, acceptance and lossless rate over some prompts (a set, or one category).
    Speedups are over the counted prompts: finished, not ended early, with a speedup. The set's
    speedup is ``geomean_speedup`` (the prompt-set estimator, ``estimator``); the others are shown
    beside it, each named."""

    prompts: int
    counted: int
    ended_early: int
    failed: int
    total_speedup: stats.Spread | None
    mean_speedup: stats.Spread | None
    geomean_speedup: stats.Spread | None
    median_speedup: stats.Spread | None
    e2e_counted: int  # counted prompts that have server timings
    e2e_total_speedup: stats.Spread | None
    e2e_geomean_speedup: stats.Spread | None
    baseline_prompt_ms: float | None
    speculative_prompt_ms: float | None
    acceptance: float | None  # accepted over drafted tokens, a fraction (contract.acceptance)
    n_drafted: int
    n_accept: int
    # as backend.Measurement defines them, over the set's rounds (Spec-Bench's tau = tokens per round)
    tokens_per_round: float | None
    mean_accepted: float | None
    model: Forecast | None
    lossless_rate: float | None
    lossless_checked: int
    differing: int
    differs_near_tie: int  # differing prompts whose divergence the target alone saw as a near-tie
    near_tie_max_gap: float | None
    estimator: str = estimators.WORKLOAD  # how geomean_speedup, the set's speedup, is computed

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@dataclass(frozen=True)
class EndedEarly:
    id: str
    category: str
    n_predict: int | None
    note: str


@dataclass(frozen=True)
class FailedPrompt:
    id: str
    category: str
    error: str | None


@dataclass(frozen=True)
class DifferingPrompt:
    id: str
    category: str
    first_difference: int | None
    divergence: Divergence | None
    label: str  # divergence_text's


@dataclass(frozen=True)
class SetFigures:
    """Set-level figures, per-category figures, and the prompts set apart."""

    set: GroupFigures
    categories: dict[str, GroupFigures]
    ended_early: tuple[EndedEarly, ...] = ()
    failed: tuple[FailedPrompt, ...] = ()
    differs: tuple[DifferingPrompt, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


def _ratio_of_totals(items: Sequence[PromptFigures], end_to_end: bool = False) -> float | None:
    if end_to_end:
        bt = sum(i.baseline_e2e_tokens for i in items)
        bs = sum(i.baseline_e2e_seconds for i in items)
        st = sum(i.speculative_e2e_tokens for i in items)
        ss = sum(i.speculative_e2e_seconds for i in items)
    else:
        bt = sum(i.baseline_tokens for i in items)
        bs = sum(i.baseline_seconds for i in items)
        st = sum(i.speculative_tokens for i in items)
        ss = sum(i.speculative_seconds for i in items)
    if not (bt and bs and st and ss):
        return None
    return (st / ss) / (bt / bs)


def total_speedup(items: Sequence[PromptFigures], end_to_end: bool = False) -> stats.Spread | None:
    """Total-token speedup with a bootstrap interval over prompts (in a Spread: ``median`` holds it).

    Decode (default): tokens after the first over generation time. ``end_to_end``: every
    generated token over the whole request, prompt processing included (the prompts that have
    server timings)."""
    if end_to_end:
        items = [i for i in items if i.e2e_speedup]
    value = _ratio_of_totals(items, end_to_end)
    if value is None:
        return None
    index = [float(i) for i in range(len(items))]

    def estimator(sample: Sequence[float]) -> float:
        return _ratio_of_totals([items[int(i)] for i in sample], end_to_end) or math.nan

    low, high = stats.bootstrap(index, estimator) if len(items) > 1 else (value, value)
    per = [s for s in ((i.e2e_speedup if end_to_end else i.speedup) for i in items) if s]
    return stats.Spread(median=value, low=low, high=high, n=len(items), min=min(per, default=value),
                        max=max(per, default=value), cv=None)


def group_statistics(items: Sequence[PromptFigures]) -> GroupFigures:
    """Speedups, acceptance and lossless rate over some prompts (a set, or one category)."""
    ok = [i for i in items if i.status == "ok"]
    early = [i for i in ok if i.ended_early]
    counted = [i for i in ok if not i.ended_early and i.speedup]
    speedups = [i.speedup for i in counted if i.speedup]
    drafted = sum(i.n_drafted or 0 for i in counted)
    accepted = sum(i.n_accept or 0 for i in counted)
    rounds = [i.rounds for i in counted]
    known_rounds = bool(counted) and all(r is not None for r in rounds)
    n_rounds = sum(r for r in rounds if r is not None)
    lossless = [i.lossless for i in ok if i.lossless is not None]
    e2e = [i.e2e_speedup for i in counted if i.e2e_speedup]
    near_ties = [i.divergence for i in ok if i.lossless is False and i.divergence is not None and i.divergence.near_tie]
    return GroupFigures(
        prompts=len(items), counted=len(counted), ended_early=len(early),
        failed=len(items) - len(ok),
        total_speedup=total_speedup(counted),
        mean_speedup=stats.mean_spread(speedups),
        geomean_speedup=estimators.prompt_set([i.speedup_spread.values if i.speedup_spread and i.speedup_spread.values
                                               else (i.speedup,) for i in counted if i.speedup]),
        median_speedup=stats.spread(speedups),
        e2e_counted=len(e2e),
        e2e_total_speedup=total_speedup(counted, end_to_end=True),
        e2e_geomean_speedup=stats.mean_spread(e2e, geometric=True),
        baseline_prompt_ms=median_or_none([i.baseline_prompt_ms for i in counted]),
        speculative_prompt_ms=median_or_none([i.speculative_prompt_ms for i in counted]),
        acceptance=acceptance(accepted, drafted),
        n_drafted=drafted, n_accept=accepted,
        tokens_per_round=tokens_per_round(accepted, n_rounds) if known_rounds else None,
        mean_accepted=mean_accepted(accepted, n_rounds) if known_rounds else None,
        model=_model_forecast(drafted, accepted, n_rounds if known_rounds else None, speedups),
        lossless_rate=sum(lossless) / len(lossless) if lossless else None,
        lossless_checked=len(lossless),
        differing=sum(1 for i in ok if i.lossless is False),
        differs_near_tie=len(near_ties),
        near_tie_max_gap=max((d.gap for d in near_ties if d.gap is not None), default=None),
    )


def _model_forecast(drafted: int, accepted: int, rounds: int | None, speedups: Sequence[float]) -> Forecast | None:
    """The paper's model through these prompts' one measured point (acceptance and drafted tokens
    per round from the counters, the geometric-mean speedup): alpha, the cost ratio it implies and
    the draft length it predicts best (``theory.fit_one_point``). None without rounds or drafts."""
    if not rounds or not drafted or not speedups:
        return None
    from llamaspec import theory

    share, per_round = acceptance(accepted, drafted), drafted_per_round(drafted, rounds)
    if share is None or per_round is None:
        return None
    fit = theory.fit_one_point(share, per_round, stats.geometric_mean(speedups))
    if fit is None:
        return None
    return Forecast(alpha=fit.alpha, drafted_per_round=fit.draft_len, cost_ratio=fit.cost_ratio,
                    best_draft=fit.best_draft, best_speedup=fit.best_speedup)


def set_statistics(items: Sequence[PromptFigures]) -> SetFigures:
    """Set-level figures, per-category figures, and the prompts set apart."""
    categories = sorted({i.category for i in items})
    return SetFigures(
        set=group_statistics(items),
        categories={c: group_statistics([i for i in items if i.category == c]) for c in categories},
        ended_early=tuple(EndedEarly(i.id, i.category, i.n_predict, i.ended_early_note or f"{i.n_predict} tokens")
                          for i in items if i.status == "ok" and i.ended_early),
        failed=tuple(FailedPrompt(i.id, i.category, i.error) for i in items if i.status != "ok"),
        differs=tuple(DifferingPrompt(i.id, i.category, i.first_difference, i.divergence,
                                      divergence_text(i.divergence, i.first_difference))
                      for i in items if i.lossless is False),
    )
