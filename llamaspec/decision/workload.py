"""One answer for a workload: which setup to run over a set of prompts.

Every way of asking (``sweep`` and ``tune`` over the built-in workload, a prompt file or one
prompt; ``prompts run`` on llama-server; a cluster study, per machine) ends here. Pure: what was
measured in, a frozen :class:`WorkloadDecision` out; no I/O, no engine.

- **A workload** is its prompts, each with a category. **A setup** is a draft file at a draft
  length, a draft-free mode (the n-gram modes), or any other setting measured against the target
  alone; the target alone is the answer "no draft".
- **A cell** is one setup measured on one prompt: the ratios of its pairs (speculative over the
  baseline of its own pair). A setup is a candidate when every prompt has a cell for it, each
  finished with an output equal to the target alone's; one whose output differs on a prompt, or
  that failed there, is excluded and said.
- **The estimate** of a setup is the workload estimator (:func:`llamaspec.measure.estimators.workload`:
  the geometric mean of the prompts' speedups, its interval from pairs resampled within prompts).
- **The model**, where one was fitted per prompt (its bootstrap band at each draft length), is
  carried to the workload the same way: the geometric mean over the prompts of the predicted
  speedups and of their band's ends (wider than the workload's own band: the prompts' errors are
  taken to run the same way), at the setups every prompt predicts.
- **The decision** is :func:`llamaspec.decision.decide.decide` over the candidates and that model view,
  once for the workload, and once per category under it (the same rule on that category's
  prompts), so "draft 8 for code; chat: no draft" is said where categories disagree.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamaspec.base import stats

# A setup's status on a prompt, as a cell carries it: finished with an unchanged output ("ok"),
from llamaspec.decision import decide
from llamaspec.measure import estimators

# finished with an output that differs from the target alone's ("differs"), or not finished.
OK, DIFFERS = "ok", "differs"


@dataclass(frozen=True)
class Cell:
    """One setup measured on one prompt."""

    prompt: str
    setup: Hashable
    label: str  # how the output names the setup: "draft 8", "ngram-simple"
    ratios: tuple[float, ...]  # each pair's speculative over baseline decode speed
    cost: tuple[float, ...] = ()  # smaller is cheaper (decide.Candidate.cost)
    status: str = OK
    why: str | None = None  # differs / failed: what the store says


@dataclass(frozen=True)
class Prediction:
    """The speedup model's band for one setup on one prompt (its ``group``: the draft file and the
    other settings it was fitted over, so that one model view is made per group)."""

    prompt: str
    setup: Hashable
    label: str
    group: str
    predicted: float
    low: float
    high: float
    error: float  # that prompt's model error (decide.ModelView.error)
    cost: tuple[float, ...] = ()


@dataclass(frozen=True)
class SetupFigures:
    """A setup over the workload: its estimate and each prompt's own speedup."""

    setup: Hashable
    label: str
    cost: tuple[float, ...]
    speedup: stats.Spread | None  # the workload estimator; None until every prompt has a cell
    per_prompt: tuple[tuple[str, stats.Spread | None], ...]  # prompt -> its point speedup (median of its pairs)
    pairs: int
    excluded: str | None = None  # why it may not be recommended (output differs, failed)

    def to_dict(self) -> dict[str, Any]:
        return {"setup": decide._jsonable(self.setup), "label": self.label, "cost": list(self.cost),
                "speedup": self.speedup.to_dict() if self.speedup else None, "pairs": self.pairs,
                "per_prompt": {p: s.to_dict() if s else None for p, s in self.per_prompt}, "excluded": self.excluded}


@dataclass(frozen=True)
class CategoryVerdict:
    """The one rule over one category's prompts."""

    category: str
    prompts: tuple[str, ...]
    decision: decide.Decision

    def text(self) -> str:
        d = self.decision
        one = " (one prompt: its interval is over that prompt's pairs alone)" if len(self.prompts) == 1 else ""
        return f"{self.category}: {verdict_text(d)}{one}"


def verdict_text(d: decide.Decision) -> str:
    """``draft 8 1.41x [1.30-1.52]``, ``no draft``, ``undecided`` or ``nothing``: a decision in a few words."""
    if d.verdict == "recommend" and d.chosen is not None:
        return f"{d.chosen.label} {d.chosen.measured.text(suffix='x')}"
    if d.verdict == "no draft":
        best = f" (best: {d.chosen.label} {d.chosen.measured.text(suffix='x')})" if d.chosen else ""
        return f"no draft{best}"
    if d.verdict == "undecided":
        best = f" (best so far: {d.chosen.label} {d.chosen.measured.text(suffix='x')})" if d.chosen else ""
        return f"undecided{best}"
    return "nothing to recommend"


def _answer(d: decide.Decision) -> Hashable:
    """What a decision answers, for telling whether two agree: a setup, "no draft", or "open"."""
    if d.verdict == "recommend" and d.chosen is not None:
        return ("setup", d.chosen.key)
    return d.verdict


@dataclass(frozen=True)
class WorkloadDecision:
    """The workload's one decision, and the same rule's verdict per category."""

    decision: decide.Decision
    categories: tuple[CategoryVerdict, ...]
    setups: tuple[SetupFigures, ...]
    prompts: tuple[tuple[str, str], ...]  # (prompt, category), in the workload's order
    noise: float | None  # the pooled pair-to-pair noise (sd of log ratios) the estimator used
    estimator: str = estimators.WORKLOAD

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    @property
    def chosen(self) -> decide.Estimate | None:
        return self.decision.chosen

    @property
    def categories_disagree(self) -> bool:
        """Whether some category's answer differs from the workload's (then each is printed)."""
        return any(_answer(c.decision) != _answer(self.decision) for c in self.categories)

    def setup(self, key: Hashable) -> SetupFigures | None:
        return next((s for s in self.setups if s.setup == key), None)

    def lines(self) -> list[str]:
        """The decision as every command prints it: the rule's lines, then the categories."""
        out = self.decision.lines()
        cats = sorted({c for _p, c in self.prompts})
        out[0] += f" over {len(self.prompts)} prompt{'s' if len(self.prompts) != 1 else ''}" + (
            f" ({', '.join(cats)})" if len(cats) > 1 else "")
        if len(self.categories) > 1:
            if self.categories_disagree:
                out.append("  by category (the same rule on each category's prompts):")
                out += [f"    {c.text()}" for c in self.categories]
            else:
                out.append(f"  by category: every category agrees ({', '.join(c.category for c in self.categories)})")
        excluded = [s for s in self.setups if s.excluded]
        out += [f"  excluded: {s.label}: {s.excluded}" for s in excluded]
        out.append(f"  estimate: {self.estimator}")
        return out

    def table(self) -> list[str]:
        """Each setup's workload speedup and its prompts' own, best first."""
        prompts = [p for p, _c in self.prompts]
        width = max([6, *(len(p) for p in prompts)])
        head = f"  {'setup':<22} {'workload [95% CI]':>20} " + " ".join(f"{p[:width]:>{width}}" for p in prompts) + "  pairs"
        rows = []
        marks = {e.key: "contender" for e in self.decision.contenders}
        if self.decision.verdict == "recommend" and self.decision.chosen is not None:
            marks[self.decision.chosen.key] = "recommended"
        ranked = sorted(self.setups, key=lambda s: (s.speedup is None, -(s.speedup.median if s.speedup else 0)))
        for s in ranked:
            own = dict(s.per_prompt)
            cells = " ".join(f"{(f'{sp.median:.2f}x' if (sp := own.get(p)) else '-'):>{width}}" for p in prompts)
            note = s.excluded and f"excluded ({s.excluded})" or marks.get(s.setup, "")
            rows.append(f"  {s.label:<22} {s.speedup.text(suffix='x') if s.speedup else '-':>20} {cells}  {s.pairs:>5}"
                        + (f"  {note}" if note else ""))
        alone = "recommended" if self.decision.verdict == "no draft" else ""
        rows.append(f"  {'target alone':<22} {'1.00x':>20} " + " ".join(f"{'1.00x':>{width}}" for _p in prompts)
                    + f"  {'-':>5}" + (f"  {alone}" if alone else ""))
        return [head, *rows]

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision.to_dict(), "estimator": self.estimator,
                "prompts": [{"prompt": p, "category": c} for p, c in self.prompts],
                "categories": [{"category": c.category, "prompts": list(c.prompts), "verdict": verdict_text(c.decision),
                                "decision": c.decision.to_dict()} for c in self.categories],
                "categories_disagree": self.categories_disagree, "noise_log_sd": self.noise,
                "setups": [s.to_dict() for s in self.setups]}


@dataclass
class _Setup:
    label: str
    cost: tuple[float, ...]
    cells: dict[str, Cell] = field(default_factory=dict)


def _setups(cells: Sequence[Cell]) -> dict[Hashable, _Setup]:
    out: dict[Hashable, _Setup] = {}
    for c in cells:
        s = out.setdefault(c.setup, _Setup(c.label, c.cost))
        if c.prompt in s.cells:
            raise ValueError(f"two cells for {c.label} on prompt {c.prompt}")
        s.cells[c.prompt] = c
    return out


def _excluded(s: _Setup) -> str | None:
    bad = [c for c in s.cells.values() if c.status != OK]
    if not bad:
        return None
    differs = [c.prompt for c in bad if c.status == DIFFERS]
    failed = [c.prompt for c in bad if c.status != DIFFERS]
    parts = ([f"output differs on {', '.join(differs)}"] if differs else []) + (
        [f"{'failed' if len(failed) == len(s.cells) else 'failed on'} {', '.join(failed)}"
         + (f" ({bad[0].why})" if bad[0].why and len(failed) == len(bad) else "")] if failed else [])
    return "; ".join(parts)


def figures(cells: Sequence[Cell], prompts: Sequence[str], noise: float | None) -> tuple[SetupFigures, ...]:
    """Each setup over these prompts: its workload estimate (where every prompt has an unchanged
    output for it) and each prompt's own speedup."""
    out = []
    for key, s in _setups(cells).items():
        mine = {p: c for p, c in s.cells.items() if p in prompts}
        if not mine:
            continue
        excluded = _excluded(_Setup(s.label, s.cost, mine))
        complete = not excluded and all(p in mine and mine[p].ratios for p in prompts)
        spread = estimators.workload([mine[p].ratios for p in prompts], noise) if complete else None
        per = tuple((p, stats.spread(mine[p].ratios) if p in mine and mine[p].ratios else None) for p in prompts)
        out.append(SetupFigures(key, s.label, s.cost, spread, per, sum(len(c.ratios) for c in mine.values()), excluded))
    return tuple(out)


def model_views(predictions: Sequence[Prediction], prompts: Sequence[str]) -> tuple[decide.ModelView, ...]:
    """The speedup model over the workload, one view per fitted group: at each setup every prompt
    predicts, the geometric mean of the predictions and of each band end; its error the median of
    the prompts' own errors."""
    groups: dict[str, dict[Hashable, dict[str, Prediction]]] = {}
    for p in predictions:
        if p.prompt in prompts:
            groups.setdefault(p.group, {}).setdefault(p.setup, {})[p.prompt] = p
    views = []
    for setups in groups.values():
        bands = []
        errors = []
        for key, per in setups.items():
            if any(q not in per for q in prompts):
                continue
            rows = [per[q] for q in prompts]
            first = rows[0]
            bands.append(decide.Band(key, first.label, stats.geometric_mean([r.predicted for r in rows]),
                                     stats.geometric_mean([r.low for r in rows]),
                                     stats.geometric_mean([r.high for r in rows]), first.cost))
            errors += [r.error for r in rows]
        if not bands:
            continue
        best = max(bands, key=lambda b: (b.predicted, [-c for c in b.cost]))
        views.append(decide.ModelView(tuple(bands), best.key, (best.key,), statistics.median(errors)))
    return tuple(views)


def decide_workload(cells: Sequence[Cell], prompts: Mapping[str, str], predictions: Sequence[Prediction] = (), *,
                    tolerance: float = decide.TOLERANCE, half_width: float = decide.HALF_WIDTH,
                    step: int = decide.STEP) -> WorkloadDecision:
    """The one decision over ``prompts`` (prompt -> category, in the workload's order), from the
    cells measured and the model's predictions; then the same rule per category."""
    order = list(prompts)
    unknown = sorted({c.prompt for c in cells} - set(order))
    if unknown:
        raise ValueError(f"cells for prompts outside the workload: {', '.join(unknown)}")
    noise = estimators.pooled_log_sd(c.ratios for c in cells if c.status == OK)

    def one(names: Sequence[str]) -> tuple[decide.Decision, tuple[SetupFigures, ...]]:
        found = figures(cells, names, noise)
        candidates = [decide.Candidate(s.setup, s.label, s.speedup, s.cost) for s in found if s.speedup is not None]
        return decide.decide(candidates, model_views(predictions, names), tolerance=tolerance, half_width=half_width,
                             step=step), found

    overall, setups = one(order)
    cats = list(dict.fromkeys(prompts[p] for p in order))
    verdicts = tuple(CategoryVerdict(cat, tuple(names), one(names)[0])
                     for cat in cats if (names := [p for p in order if prompts[p] == cat]))
    return WorkloadDecision(overall, verdicts if len(cats) > 1 else (), setups,
                            tuple((p, prompts[p]) for p in order), noise)


def spread_sd(s: stats.Spread) -> float:
    """A workload spread's standard error on the log scale (from its 95 % interval)."""
    if s.n < 2 or s.low <= 0 or s.high <= 0:
        return math.inf
    return (math.log(s.high) - math.log(s.low)) / (2 * 1.96)


__all__ = ["DIFFERS", "OK", "CategoryVerdict", "Cell", "Prediction", "SetupFigures", "WorkloadDecision",
           "decide_workload", "figures", "model_views", "verdict_text"]
