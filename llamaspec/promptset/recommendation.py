"""Which method to use over a prompt set: the workload's one decision
(:func:`llamaspec.decision.workload.decide_workload`, on :data:`llamaspec.measure.estimators.WORKLOAD`), the set's
prompts the workload and its methods the setups; over the whole set, and the same rule per category.
Decode and end to end are two decisions on two kinds of ratio (:data:`BASES`).

- **A cell** is one method on one prompt: that prompt's pair ratios (``speedup_spread.values``, or
  ``e2e_speedup_spread.values`` end to end), as its run row stores them.
- **The workload** is the set's prompts, less those kept out of every speedup: a prompt that ended
  early (the target alone stopped before ``n_predict``), one that failed on every method (the
  prompt's fault, not a method's: the server refused it), and one no method has a ratio for. Each
  is said.
- **A method that failed on a prompt, or whose output differs there, is excluded** and said;
  except where the difference is a greedy near-tie the target alone saw (its top two within
  ``NEAR_TIE``: float rounding of batched verification flips such a pair, probed by
  :mod:`llamaspec.promptset.probe`): that cell counts, and the method stays a candidate, labelled
  (:class:`NearTie`). A method whose every difference is such a near-tie is therefore decided on
  like one that never differed; its lossless rate stays as measured.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.decision import decide, workload
from llamaspec.promptset.probe import divergence_text
from llamaspec.promptset.prompt_figures import PromptFigures
from llamaspec.promptset.set_figures import GroupFigures

BASES = {"decode": "speedup_spread", "end to end": "e2e_speedup_spread"}  # basis -> the PromptFigures field of its ratios


@dataclass(frozen=True)
class NearTie:
    """A candidate method whose output differs on some prompts of a scope, each at a greedy near-tie."""

    method: str
    scope: str  # "all", or a category
    differing: int
    checked: int  # prompts of the scope whose output was compared
    max_gap: float | None

    def text(self) -> str:
        bound = f" (gap <= {self.max_gap:.2g})" if self.max_gap is not None else ""
        return f"output differs on {self.differing} of {self.checked} prompts, each at a greedy near-tie{bound}"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "scope": self.scope, "differing": self.differing, "checked": self.checked,
                "max_gap": self.max_gap, "note": self.text()}


@dataclass(frozen=True)
class SetRecommendation:
    """A prompt set's one decision on one basis, the near-ties it counted, the prompts it left out."""

    basis: str  # of BASES
    decision: workload.WorkloadDecision
    near_ties: tuple[NearTie, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()  # (prompt id, why)

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    @property
    def method(self) -> str | None:
        """The recommended method's label (None: no draft, undecided or nothing)."""
        return chosen(self.decision.decision)

    def category(self, name: str) -> decide.Decision | None:
        """The rule on one category's prompts (the whole set's decision where the set has one
        category); None where the category has too few timed prompts for a verdict of its own."""
        if {c for _p, c in self.decision.prompts} == {name}:
            return self.decision.decision
        found = next((c for c in self.decision.categories if c.category == name), None)
        if found is None:
            raise KeyError(name)
        return found.decision

    def lines(self) -> list[str]:
        out = self.decision.lines()
        out += [f"  near-tie: {t.method} ({'the whole set' if t.scope == 'all' else t.scope}): {t.text()}"
                for t in self.near_ties]
        if self.left_out:
            out.append("  left out of the workload: " + "; ".join(f"{p} ({why})" for p, why in self.left_out))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"basis": self.basis, "method": self.method, **self.decision.to_dict(),
                "near_ties": [t.to_dict() for t in self.near_ties],
                "left_out": [{"prompt": p, "why": why} for p, why in self.left_out]}


def chosen(d: decide.Decision) -> str | None:
    return d.chosen.label if d.verdict == "recommend" and d.chosen is not None else None


def near_tie_note(g: GroupFigures) -> str | None:
    """``output differs on 1 of 48 prompts, each at a greedy near-tie (gap <= 0.0035)`` when every
    difference of a group is a probed near-tie; None when its output never differed or when a
    difference is not a near-tie (or was not probed)."""
    if not g.differing or g.differs_near_tie < g.differing:
        return None
    return NearTie("", "", g.differing, g.lossless_checked, g.near_tie_max_gap).text()


def _ratios(item: PromptFigures, basis: str) -> tuple[float, ...]:
    spread = getattr(item, BASES[basis])
    if spread is None:
        return ()
    if spread.values:
        return tuple(spread.values)
    return (spread.median,)  # a row stored before its ratios were kept: its one figure


def _near_tie(item: PromptFigures) -> bool:
    return item.lossless is False and item.divergence is not None and bool(item.divergence.near_tie)


def _left_out(prompt: str, items: Sequence[PromptFigures], basis: str) -> str | None:
    """Why a prompt is kept out of the workload (None: it is in)."""
    ok = [i for i in items if i.status == "ok"]
    early = next((i for i in ok if i.ended_early and i.lossless is not False), None)
    if early is not None:
        return f"ended early: {early.ended_early_note or f'{early.n_predict} tokens'}"
    if not ok:
        return f"failed on every method: {items[0].error}" if items else "not measured"
    if not any(_ratios(i, basis) for i in ok):
        return "no method has a speedup for it" + (" end to end (no server timings)" if basis == "end to end" else "")
    return None


def _cell(method: str, item: PromptFigures, basis: str, cost: tuple[float, ...]) -> workload.Cell:
    if item.status != "ok":
        return workload.Cell(item.id, method, method, (), cost, "failed", item.error or item.error_kind)
    if item.lossless is False and not _near_tie(item):
        return workload.Cell(item.id, method, method, _ratios(item, basis), cost, workload.DIFFERS,
                             divergence_text(item.divergence, item.first_difference))
    return workload.Cell(item.id, method, method, _ratios(item, basis), cost)


def _near_ties(methods: Mapping[str, Sequence[PromptFigures]], decision: workload.WorkloadDecision) -> tuple[NearTie, ...]:
    """For each scope (the set; each category where the categories' answers are printed, as they
    disagree) and each method it keeps in the running (the chosen one and its contenders): its
    near-tie differences there."""
    scopes: list[tuple[str, decide.Decision, set[str]]] = [("all", decision.decision, {p for p, _c in decision.prompts})]
    if decision.categories_disagree:
        scopes += [(c.category, c.decision, set(c.prompts)) for c in decision.categories if c.decision is not None]
    out = []
    for scope, d, prompts in scopes:
        running: list[Hashable] = [e.key for e in d.contenders] or ([d.chosen.key] if d.chosen else [])
        for key in running:
            items = [i for i in methods.get(str(key), ()) if i.id in prompts and i.status == "ok"]
            ties = [i for i in items if _near_tie(i)]
            if ties:
                gaps = [i.divergence.gap for i in ties if i.divergence is not None and i.divergence.gap is not None]
                out.append(NearTie(str(key), scope, len(ties), sum(1 for i in items if i.lossless is not None),
                                   max(gaps, default=None)))
    return tuple(out)


def recommend(methods: Mapping[str, Sequence[PromptFigures]], basis: str = "decode",
              costs: Mapping[str, tuple[float, ...]] | None = None) -> SetRecommendation:
    """The set's one decision on ``basis`` (a key of :data:`BASES`) over ``methods`` (label -> its
    prompts' figures, in the set's order): cells as the module says, then
    :func:`llamaspec.decision.workload.decide_workload`. ``costs``: each method's (smaller is cheaper,
    :func:`llamaspec.decision.workload_runs.cost`); without them the methods cost alike."""
    if basis not in BASES:
        raise ValueError(f"basis {basis!r}: one of {', '.join(BASES)}")
    by_prompt: dict[str, list[PromptFigures]] = {}
    category: dict[str, str] = {}
    for items in methods.values():
        for item in items:
            by_prompt.setdefault(item.id, []).append(item)
            category.setdefault(item.id, item.category)
    left_out = tuple((p, why) for p, items in by_prompt.items() if (why := _left_out(p, items, basis)) is not None)
    out = {p for p, _why in left_out}
    prompts = {p: category[p] for p in by_prompt if p not in out}
    cells = [_cell(label, item, basis, (costs or {}).get(label, ()))
             for label, items in methods.items() for item in items if item.id in prompts]
    decision = workload.decide_workload(cells, prompts, over_prompts=False)  # a set's prompts are the whole of it
    return SetRecommendation(basis, decision, _near_ties(methods, decision), left_out)
