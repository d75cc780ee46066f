"""What a prompt-set run prints: its summary as a frozen type (``set_summary``), the text
(``render``) and the JSON (``as_json``, with ``DEFINITIONS`` so that a reader needs no source)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llamaspec.base import stats
from llamaspec.decision import workload_runs
from llamaspec.measure import estimators, spectypes
from llamaspec.promptset.measure import SetRun
from llamaspec.promptset.probe import divergence_text
from llamaspec.promptset.recommendation import SetRecommendation, recommend
from llamaspec.promptset.set_figures import Forecast, SetFigures, set_statistics

# What each family of figures measures (in the JSON, so that a reader of it needs no source).
DEFINITIONS = {
    "decode": "speedup, *_speedup, total_speedup, recommendation: decode speed only, tokens after the first over "
              "the time from the first generated token to the last (prompt processing left out)",
    "end_to_end": "e2e_*, recommendation_end_to_end: end to end, prompt included: generated tokens over the "
                  "request's time on the server, prompt processing plus generation (llama-server timings "
                  "prompt_ms + predicted_ms; HTTP and queueing left out)",
    "prompt_ms": "baseline_prompt_ms / speculative_prompt_ms: prompt processing time per request (median); the "
                 "speculative server processes the prompt with the draft model too",
    "set_speedup": f"geomean_speedup, the set's speedup (recommendations decide on it): {estimators.WORKLOAD}",
    "recommendation": "recommendation, recommendation_end_to_end: the workload's one decision (llamaspec.decision.workload) "
                      "over the methods, on the set's prompts (less those ended early, failed on every method or "
                      "without a speedup: left_out), and the same rule per category (categories); a method whose "
                      "output differs on a prompt, or that failed there, is excluded, unless the difference is a "
                      "greedy near-tie (near_ties)",
    "prompt_speedup": f"a prompt's speedup: {estimators.POINT}",
}


@dataclass(frozen=True)
class MethodFigures:
    """One method (case) over the set: what it is, its set figures, and what did not run."""

    case: str
    spec_type: str  # "draft" or the n-gram mode
    draft_len: int | None  # draft: the draft length; n-gram: the m size
    set_id: str
    figures: SetFigures
    not_run: tuple[str, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "spec_type": self.spec_type, "draft_len": self.draft_len, "set_id": self.set_id,
                **self.figures.to_dict(), "not_run": list(self.not_run), "error": self.error}


@dataclass(frozen=True)
class SetSummary:
    """A prompt-set run's figures per method and its recommendations, decode and end to end."""

    experiment: str
    prompt_set: str
    prompts: int
    skipped_lines: tuple[str, ...]
    methods: dict[str, MethodFigures]  # by method label
    recommendation: SetRecommendation  # decode: the whole set, and per category
    recommendation_end_to_end: SetRecommendation
    complete: bool

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "prompt_set": self.prompt_set, "prompts": self.prompts,
                "skipped_lines": list(self.skipped_lines),
                "methods": {label: m.to_dict() for label, m in self.methods.items()},
                "recommendation": self.recommendation.to_dict(),
                "recommendation_end_to_end": self.recommendation_end_to_end.to_dict(),
                "definitions": DEFINITIONS, "complete": self.complete}


def set_summary(result: SetRun) -> SetSummary:
    """The figures of every method of a set run, and which to use per category."""
    figures = {c.label: set_statistics(c.items) for c in result.cases}
    methods = {}
    costs = {}
    for c in result.cases:
        spec_type = c.case.settings.spec_type or "draft"
        draft_len = spectypes.requested_length(c.case.settings)
        methods[c.label] = MethodFigures(c.case.case, spec_type, draft_len, c.set_id, figures[c.label], c.not_run, c.error)
        size = workload_runs.model_bytes(c.case.draft.metadata) if c.case.draft else 0
        costs[c.label] = workload_runs.cost(spectypes.of(spec_type).draft_free, draft_len, size)
    items = {c.label: c.items for c in result.cases}
    return SetSummary(experiment=result.experiment, prompt_set=result.source.label, prompts=len(result.prompts.prompts),
                      skipped_lines=tuple(result.prompts.skipped), methods=methods,
                      recommendation=recommend(items, "decode", costs),
                      recommendation_end_to_end=recommend(items, "end to end", costs),
                      complete=result.complete)


def _fmt(s: stats.Spread | None, suffix: str = "x") -> str:
    return s.text(suffix=suffix) if s else "-"


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "-"


def render(summary: SetSummary) -> str:
    lines = [f"{summary.experiment} over {summary.prompt_set}: {summary.prompts} prompts",
             "decode: tokens after the first over generation time (prompt left out); end to end: every generated",
             "token over prompt processing plus generation (server timings). Speedups: speculative over the target",
             "alone, paired per prompt; geometric mean: the set's speedup [95 % interval, each prompt's pairs",
             "resampled]; total-token [95 % bootstrap interval over prompts]."]
    if summary.skipped_lines:
        lines.append(f"  skipped {len(summary.skipped_lines)} malformed entries: {summary.skipped_lines[0]} ...")
    for label, m in summary.methods.items():
        s = m.figures.set
        lines.append("")
        lines.append(f"{label}")
        lines.append(f"  decode:      total-token speedup {_fmt(s.total_speedup)}   geometric mean (the set's speedup) "
                     f"{_fmt(s.geomean_speedup)}   mean {_fmt(s.mean_speedup)}   ({s.counted} prompts counted)")
        if s.e2e_counted:
            lines.append(f"  end to end, prompt included: total-time speedup {_fmt(s.e2e_total_speedup)}   "
                         f"geometric mean {_fmt(s.e2e_geomean_speedup)}   ({s.e2e_counted} prompts)   prompt "
                         f"processing {_ms(s.baseline_prompt_ms)} alone vs {_ms(s.speculative_prompt_ms)} "
                         "speculative (median)")
        else:
            lines.append("  end to end, prompt included: - (no prompt timings from this backend)")
        tau = f"{s.tokens_per_round:.2f}" if s.tokens_per_round is not None else "-"
        acc = stats.percent_text(s.acceptance, 1)
        rate = f"{stats.percent_text(s.lossless_rate)} of {s.lossless_checked}" if s.lossless_rate is not None else "-"
        mean_acc = f"{s.mean_accepted:.2f}" if s.mean_accepted is not None else "-"
        lines.append(f"  accept {acc}   accepted/round {mean_acc}   tokens/round (Spec-Bench's tau) {tau}"
                     f"   identical output {rate}")
        lines.append(f"  {'':<16} {'':>3} {'decode':^45} {'end to end, prompt included':^45}".rstrip())
        lines.append(f"  {'category':<16} {'n':>3} {'geomean speedup':>22} {'total-token':>22} {'geomean speedup':>22}"
                     f" {'total-time':>22} {'accept':>7} {'same':>5}  model: best draft (alpha)")
        for cat, g in m.figures.categories.items():
            acc = stats.percent_text(g.acceptance)
            same = stats.percent_text(g.lossless_rate)
            lines.append(f"  {cat:<16} {g.counted:>3} {_fmt(g.geomean_speedup):>22} {_fmt(g.total_speedup):>22}"
                         f" {_fmt(g.e2e_geomean_speedup):>22} {_fmt(g.e2e_total_speedup):>22}"
                         f" {acc:>7} {same:>5}  {_forecast(g.model)}")
        if any(g.model for g in m.figures.categories.values()):
            lines.append("  model column: Leviathan et al.'s model through each category's measured point (its "
                         "acceptance and speedup at the drafted length): a forecast to check with a sweep")
        if m.figures.ended_early:
            lines.append("  ended early (not in speedups): " + ", ".join(
                f"{e.id} ({e.note or str(e.n_predict) + ' tokens'})" for e in m.figures.ended_early))
        if m.figures.differs:
            lines.append("  OUTPUT DIFFERS from the baseline (counted as not lossless): " + "; ".join(
                f"{d.id} {d.label or divergence_text(None, d.first_difference)}" for d in m.figures.differs))
        if m.figures.failed:
            lines.append("  failed: " + "; ".join(f"{f.id}: {f.error}" for f in m.figures.failed))
        if m.not_run:
            lines.append(f"  NOT RUN ({len(m.not_run)} prompts, after: {m.error}); rerun the same command to resume")
    for recommendation, title in ((summary.recommendation, "decode"),
                                  (summary.recommendation_end_to_end, "end to end, prompt included")):
        lines.append("")
        lines.append(f"Recommendation, {title} (one decision over the set's prompts; a method whose output differs "
                     "on a prompt is excluded unless the difference is a greedy near-tie):")
        lines.extend("  " + line for line in recommendation.lines())
    return "\n".join(lines)


def _forecast(model: Forecast | None) -> str:
    if not model:
        return "-"
    return f"k={model.best_draft} -> {model.best_speedup:.2f}x (alpha {model.alpha:.2f})"


def as_json(summary: SetSummary) -> str:
    """Set-level and per-category figures (per-prompt values left out of the intervals' dicts)."""
    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k != "values"}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj
    return json.dumps(strip(summary.to_dict()), indent=2, default=str)
