"""Which method to use over a prompt set, per category and over all prompts: the one decision
rule (``llamaspec.decide``) over the methods whose output never differed, or differed only at
greedy near-ties."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llamaspec import decide, estimators, stats
from llamaspec.promptset.set_figures import GroupFigures, SetFigures

NO_METHOD = "no method with counted prompts and identical output (or output that differs only at greedy near-ties)"


@dataclass(frozen=True)
class Recommendation:
    """One category's recommendation: ``method`` is the chosen method's label, ``"baseline"`` (no
    method is a gain), ``"undecided"`` (intervals too wide: ``measure_next``, ``best``) or None (no
    candidate). The fields after ``measure_next`` belong to a chosen method."""

    method: str | None
    reason: str
    excluded: tuple[str, ...] = ()  # methods whose output differs (not only at near-ties)
    tied: tuple[str, ...] = ()  # contenders that might still beat the chosen one
    measure_next: tuple[decide.Request, ...] = ()
    best: str | None = None  # baseline / undecided: the best measured method
    speedup: stats.Spread | None = None
    significant: bool = False  # the interval lies above 1
    how_sure: str | None = None
    near_tie_only: bool = False  # the chosen method's output differs, each time at a greedy near-tie
    differing: int = 0
    lossless_checked: int = 0
    near_tie_max_gap: float | None = None
    note: str | None = None
    tied_near_tie_only: tuple[str, ...] = ()

    @property
    def chosen(self) -> bool:
        """A method is recommended (not the baseline, not undecided, not none)."""
        return self.method not in (None, "baseline", "undecided")

    def to_dict(self) -> dict[str, Any]:
        """The JSON of each kind, as ``--json`` prints it."""
        if self.method is None:
            return {"method": None, "reason": self.reason, "excluded": list(self.excluded)}
        if not self.chosen:
            return {"method": self.method, "reason": self.reason, "tied": list(self.tied),
                    "excluded": list(self.excluded), "measure_next": [r.to_dict() for r in self.measure_next],
                    "best": self.best}
        return {"method": self.method, "speedup": self.speedup.to_dict() if self.speedup else None,
                "tied": list(self.tied), "excluded": list(self.excluded), "significant": self.significant,
                "reason": self.reason, "how_sure": self.how_sure, "near_tie_only": self.near_tie_only,
                "differing": self.differing, "lossless_checked": self.lossless_checked,
                "near_tie_max_gap": self.near_tie_max_gap, "note": self.note,
                "tied_near_tie_only": list(self.tied_near_tie_only)}


def near_tie_note(g: GroupFigures) -> str | None:
    """``output differs on 1 of 48 prompts, each at a greedy near-tie (gap <= 0.0035)`` when every
    difference of a group is a probed near-tie; None when its output never differed or when a
    difference is not a near-tie (or was not probed)."""
    if not g.differing or g.differs_near_tie < g.differing:
        return None
    bound = f" (gap <= {g.near_tie_max_gap:.2g})" if g.near_tie_max_gap is not None else ""
    return f"output differs on {g.differing} of {g.lossless_checked} prompts, each at a greedy near-tie{bound}"


def recommend(methods: dict[str, SetFigures], metric: str = estimators.PROMPT_SET_METRIC) -> dict[str, Recommendation]:
    """Per category (and "all"): the method the one decision rule (``llamaspec.decide``) picks by
    ``metric`` (a ``GroupFigures`` speedup) among those whose output never differed or differed
    only at greedy near-ties, the contenders that might still beat it ("tied"), "baseline" when
    none is a gain ("no draft") or "undecided" when the intervals are too wide to tell (with what
    to measure next).

    A method with a difference that is not a near-tie, or was not probed, is excluded. One whose
    every difference is a near-tie the target alone saw (its top two within NEAR_TIE: float
    rounding of batched verification flips such a pair) stays a candidate, labelled
    (``near_tie_only``, ``note``): its lossless rate stays as measured."""
    out: dict[str, Recommendation] = {}
    names = sorted({c for s in methods.values() for c in s.categories}) + ["all"]
    for category in names:
        candidates: list[tuple[str, stats.Spread]] = []
        excluded: list[str] = []
        notes: dict[str, str] = {}
        groups: dict[str, GroupFigures] = {}
        for label, figures in methods.items():
            g = figures.set if category == "all" else figures.categories.get(category)
            if not g:
                continue
            groups[label] = g
            if g.lossless_rate is not None and g.lossless_rate < 1.0:
                note = near_tie_note(g)
                if note is None:
                    excluded.append(label)
                    continue
                notes[label] = note
            spread = getattr(g, metric)
            if spread is not None:
                candidates.append((label, spread))
        if not candidates:
            out[category] = Recommendation(None, NO_METHOD, excluded=tuple(excluded))
            continue
        decision = decide.decide([decide.Candidate(label, label, spread) for label, spread in candidates])
        if decision.verdict != "recommend" or decision.chosen is None:
            best_label = decision.chosen.label if decision.chosen else candidates[0][0]
            out[category] = Recommendation("baseline" if decision.verdict == "no draft" else "undecided",
                                           decision.reason, excluded=tuple(excluded),
                                           measure_next=tuple(decision.requests), best=best_label)
            continue
        best = decision.chosen.label
        best_spread = decision.chosen.measured
        tied = [e.label for e in decision.contenders]
        g = groups[best]
        out[category] = Recommendation(
            best, decision.reason, excluded=tuple(excluded), tied=tuple(t for t in tied if t != best),
            speedup=best_spread, significant=best_spread.low > 1.0, how_sure=decision.sureness,
            near_tie_only=best in notes, differing=g.differing if best in notes else 0,
            lossless_checked=g.lossless_checked, near_tie_max_gap=g.near_tie_max_gap if best in notes else None,
            note=notes.get(best), tied_near_tie_only=tuple(t for t in tied if t != best and t in notes))
    return out
