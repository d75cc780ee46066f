"""One answer for a workload: which setup to run over a set of prompts.

Every way of asking (``sweep`` over the built-in workload, a prompt file, an experiment's prompt
set or one prompt, on any engine; a cluster study, per machine) ends here. Pure: what was
measured in, a frozen :class:`WorkloadDecision` out; no I/O, no engine.

- **A workload** is its prompts, each with a category. **A setup** is a draft file at a draft
  length, a draft-free mode (the n-gram modes), or any other setting measured against the target
  alone; the target alone is the answer "no draft".
- **A cell** is one setup measured on one prompt: the ratios of its pairs (speculative over the
  baseline of its own pair), and what they timed (the target alone's tokens after the first, and
  the loop its output ends in, where it loops: :mod:`llamaspec.measure.timed`).
- **What the answer speaks for.** A prompt too short to time, whose target output loops, or where
  several setups' outputs differ from the target alone's at one and the same place (the
  speculative program's own target pass does not reproduce the target alone's greedy output there,
  whatever is drafted: :func:`diverged_everywhere`), is left out of every decision and named (a looping one counts where the caller says the traffic
  loops: ``count_loops``); the looping prompts' figures are shown apart. The rest are the
  *timed* prompts. By default (``over_prompts``) they are a sample of the user's traffic: a
  setup's estimate is :func:`llamaspec.measure.estimators.over_prompts` over the timed prompts
  it was measured on (at least one in every category the workload's timed prompts have), its
  interval resampling prompts within categories as well as pairs, so it speaks for other prompts
  of the same kinds; its ``n`` counts prompts, and "settled" means settled over prompts. With
  ``over_prompts=False`` the prompts are the whole workload (:func:`llamaspec.measure.estimators.workload`,
  every timed prompt needed, pairs resampled within them): said as such in the output.
- **A setup is a candidate** when its estimate exists and every timed prompt it was measured on
  finished with an output equal to the target alone's; one whose output differs on a prompt, or
  that failed there, is excluded and said.
- **The model**, where one was fitted per prompt (its bootstrap band at each draft length), is
  carried to the workload as the geometric mean over the timed prompts that predict a setup.
- **The decision** is :func:`llamaspec.decision.decide.decide` over the candidates and that model
  view, once for the workload, and once per category (the same rule on that category's timed
  prompts): over prompts, a category with fewer than :data:`MIN_VERDICT_PROMPTS` is labelled and
  gives no verdict; as the whole workload, a category's verdict speaks for its own prompts.

Its size: the cells and what they timed, the prompts left out, the two meanings of the estimate,
the per-category verdicts and the one decision's text and table (every command prints these
lines): each reads the one before it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from llamaspec.base import stats
from llamaspec.decision import decide
from llamaspec.measure import estimators, timed

# A setup's status on a prompt, as a cell carries it: finished with an unchanged output ("ok"),
# finished with an output that differs from the target alone's ("differs"), or not finished.
OK, DIFFERS = "ok", "differs"
# A category's own verdict rests on at least this many timed prompts.
MIN_VERDICT_PROMPTS = 3


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
    timed: int | None = None  # the target alone's tokens after the first on this prompt (Summary.timed_tokens)
    loop: str | None = None  # the loop the target alone's output ends in (timed.Loop.text()); None: none
    asked: int | None = None  # the tokens the runs were asked for (-n): the floor of "too short to time"
    differs_at: int | None = None  # where its output first differs from the target alone's (Lossless.first_difference)
    near_tie: str | None = None  # an OK cell whose output differs at a greedy near-tie (measure/probe.py): what and where
    end_to_end: tuple[float, ...] = ()  # the same pairs' ratios with prompt processing included (Summary.end_to_end)
    probed: bool = False  # a differing output the probe read: not a greedy near-tie (Lossless.probed)


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
class PromptFacts:
    """What a prompt's runs timed, and whether the answer speaks for it."""

    prompt: str
    category: str
    timed: int | None  # the target alone's tokens after the first (None: not measured)
    loop: str | None  # the loop its output ends in
    left_out: str | None  # why it is out of every decision (too short to time, its output loops), in words
    why: str | None = None  # the same as a tag: "too short", "loops", "diverges"

    @property
    def measured(self) -> bool:
        return self.timed is not None

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "category": self.category, "timed_tokens": self.timed, "loop": self.loop,
                "left_out": self.left_out, "why": self.why}


@dataclass(frozen=True)
class SetupFigures:
    """A setup over the workload: its estimate and each prompt's own speedup."""

    setup: Hashable
    label: str
    cost: tuple[float, ...]
    speedup: stats.Spread | None  # the workload estimator over the timed prompts; None until it can be formed
    per_prompt: tuple[tuple[str, stats.Spread | None], ...]  # prompt -> its point speedup (median of its pairs)
    pairs: int  # pairs on the timed prompts
    excluded: str | None = None  # why it may not be recommended (output differs, failed)
    prompts: int = 0  # timed prompts it was measured on
    near_ties: tuple[str, ...] = ()  # its outputs that differ at a greedy near-tie only: kept, each said
    end_to_end: stats.Spread | None = None  # the same estimate, prompt processing included: shown, not decided on

    def to_dict(self) -> dict[str, Any]:
        return {"setup": decide._jsonable(self.setup), "label": self.label, "cost": list(self.cost),
                "speedup": self.speedup.to_dict() if self.speedup else None, "pairs": self.pairs, "prompts": self.prompts,
                "per_prompt": {p: s.to_dict() if s else None for p, s in self.per_prompt}, "excluded": self.excluded,
                "near_ties": list(self.near_ties),
                "end_to_end": self.end_to_end.to_dict() if self.end_to_end else None}


@dataclass(frozen=True)
class CategoryVerdict:
    """The one rule over one category's timed prompts (None below :data:`MIN_VERDICT_PROMPTS` of them)."""

    category: str
    prompts: tuple[str, ...]  # its timed prompts
    decision: decide.Decision | None

    def text(self) -> str:
        n = len(self.prompts)
        if self.decision is None:
            return (f"{self.category}: {n} timed prompt{'s' if n != 1 else ''}, no verdict "
                    f"(a category's verdict needs {MIN_VERDICT_PROMPTS})")
        one = " (one prompt: its interval is over that prompt's pairs alone)" if n == 1 else ""
        return f"{self.category}: {verdict_text(self.decision)}{one}"


@dataclass(frozen=True)
class LoopFigure:
    """A setup on the prompts whose target output loops: apart from the answer."""

    label: str
    speedup: float  # the geometric mean of its medians there
    prompts: tuple[str, ...]


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


def _answer(d: decide.Decision | None) -> Hashable:
    """What a decision answers, for telling whether two agree: a setup, "no draft", or "open"."""
    if d is None:
        return None
    if d.verdict == "recommend" and d.chosen is not None:
        return ("setup", d.chosen.key)
    return d.verdict


@dataclass(frozen=True)
class WorkloadDecision:
    """The workload's one decision, and the same rule's verdict per category."""

    decision: decide.Decision
    categories: tuple[CategoryVerdict, ...]
    setups: tuple[SetupFigures, ...]
    prompts: tuple[tuple[str, str], ...]  # (prompt, category), in the workload's order: every prompt of it
    noise: float | None  # the pooled pair-to-pair noise (sd of log ratios) the estimator used
    estimator: str = estimators.OVER_PROMPTS
    facts: tuple[PromptFacts, ...] = ()  # each prompt's timed tokens, loop and whether it is left out
    loops: tuple[LoopFigure, ...] = ()  # the setups on the looping prompts left out
    over_prompts: bool = True  # the prompts are a sample of the workload (False: they are the whole of it)
    prompt_noise: float | None = None  # the pooled between-prompt noise (sd of log speedups within categories)
    n_predict: int | None = None  # the tokens the prompts were asked for (-n): the floor of "too short"

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    @property
    def chosen(self) -> decide.Estimate | None:
        return self.decision.chosen

    @property
    def timed(self) -> tuple[str, ...]:
        """The prompts the answer rests on: measured, and not left out."""
        return tuple(f.prompt for f in self.facts if f.measured and f.left_out is None)

    @property
    def left_out(self) -> tuple[PromptFacts, ...]:
        return tuple(f for f in self.facts if f.left_out is not None)

    @property
    def categories_disagree(self) -> bool:
        """Whether some category's answer differs from the workload's (then each is printed)."""
        return any(c.decision is not None and _answer(c.decision) != _answer(self.decision) for c in self.categories)

    def speaks_for(self) -> str:
        """Which prompts the answer speaks for, in a few words."""
        timed_ = self.timed
        cats = sorted({c for p, c in self.prompts if p in timed_})
        what = f"{len(timed_)} timed prompt{'s' if len(timed_) != 1 else ''}"
        if len(cats) > 1:
            what += f" in {len(cats)} categories ({', '.join(cats)})"
        if not self.over_prompts:
            return what + ", the whole workload (--whole-workload: the interval is over these prompts' pairs)"
        total = len(self.prompts)
        sampled = f" of the workload's {total}" if total > len(timed_) else ""
        return what + sampled + ": the interval speaks for other prompts of these kinds"

    def lines(self) -> list[str]:
        """The decision as every command prints it: the rule's lines, what was left out, the categories."""
        out = self.decision.lines()
        out[0] += f" over {self.speaks_for()}"
        verdicts = [c for c in self.categories if c.decision is not None]
        labelled = [c for c in self.categories if c.decision is None]
        if len(self.categories) > 1 and labelled and not verdicts:
            out.append(f"  by category: no verdict yet (a category's verdict needs {MIN_VERDICT_PROMPTS} timed prompts; "
                       "timed: " + ", ".join(f"{c.category} {len(c.prompts)}" for c in self.categories) + ")")
        elif len(self.categories) > 1:
            if self.categories_disagree or labelled:
                out.append("  by category (the same rule on each category's timed prompts"
                           + (f"; a verdict needs {MIN_VERDICT_PROMPTS}):" if self.over_prompts else "):"))
                out += [f"    {c.text()}" for c in self.categories]
            elif verdicts:
                out.append(f"  by category: every category agrees ({', '.join(c.category for c in verdicts)})")
        left = self.left_out
        if left:
            out.append(f"  left out of the answer ({len(left)}): " + "; ".join(f"{f.prompt} ({f.left_out})" for f in left))
        if self.loops:
            prompts = sorted({p for lf in self.loops for p in lf.prompts})
            shown = ", ".join(f"{lf.label} {lf.speedup:.2f}x" for lf in self.loops[:4])
            out.append(f"  on the looping prompts ({', '.join(prompts)}), apart from the answer: {shown}"
                       " (--count-loops: your traffic loops too, count them)")
        excluded = [s for s in self.setups if s.excluded]
        out += [f"  excluded: {s.label}: {s.excluded}" for s in excluded]
        e2e = [(s.label, s.end_to_end) for s in self.setups if s.end_to_end is not None and not s.excluded]
        if e2e:
            out.append("  end to end (prompt processing included, as the engine times it; shown, not decided on): "
                       + ", ".join(f"{label} {spread.text(suffix='x')}" for label, spread in e2e))
        out += [f"  kept: {s.label}: output differs at a greedy near-tie only (batched verification's rounding, not the "
                f"draft): {'; '.join(s.near_ties)}" for s in self.setups if s.near_ties and not s.excluded]
        out.append(f"  estimate: {self.estimator}")
        return out

    def table(self) -> list[str]:
        """Each setup's workload speedup and its speedup per category, best first; then each
        measured prompt: the tokens it timed, its loop, whether it is left out."""
        cats = list(dict.fromkeys(c for _p, c in self.prompts))
        of = dict(self.prompts)
        timed_ = set(self.timed)
        width = {c: max(6, len(c)) for c in cats}
        head = (f"  {'setup':<22} {'workload [95% CI]':>20} " + " ".join(f"{c:>{width[c]}}" for c in cats)
                + f" {'prompts':>7} {'pairs':>6}")
        rows = []
        marks = {e.key: "contender" for e in self.decision.contenders}
        if self.decision.verdict == "recommend" and self.decision.chosen is not None:
            marks[self.decision.chosen.key] = "recommended"
        ranked = sorted(self.setups, key=lambda s: (s.speedup is None, -(s.speedup.median if s.speedup else 0)))
        for s in ranked:
            own = dict(s.per_prompt)
            by_cat = []
            for c in cats:
                meds = [sp.median for p, sp in own.items() if sp is not None and p in timed_ and of.get(p) == c]
                by_cat.append(f"{stats.geometric_mean(meds):.2f}x" if meds else "-")
            cells = " ".join(f"{v:>{width[c]}}" for v, c in zip(by_cat, cats, strict=True))
            note = s.excluded and f"excluded ({s.excluded})" or marks.get(s.setup, "")
            rows.append(f"  {s.label:<22} {s.speedup.text(suffix='x') if s.speedup else '-':>20} {cells} "
                        f"{s.prompts:>7} {s.pairs:>6}" + (f"  {note}" if note else ""))
        alone = "recommended" if self.decision.verdict == "no draft" else ""
        rows.append(f"  {'target alone':<22} {'1.00x':>20} " + " ".join(f"{'1.00x':>{width[c]}}" for c in cats)
                    + f" {'-':>7} {'-':>6}" + (f"  {alone}" if alone else ""))
        return [head, *rows, *self.prompt_lines(ranked[:3])]

    def prompt_lines(self, shown: Sequence[SetupFigures]) -> list[str]:
        """Each measured prompt: its category, the tokens it timed, and the best setups' speedup there
        (or why it is left out)."""
        measured = [f for f in self.facts if f.measured]
        if not measured:
            return []
        out = [f"  prompts measured ({len(measured)} of {len(self.prompts)}; tokens timed: the target alone's after "
               f"the first, {timed.floor(self.n_predict)} or more to be timed):"]
        width = max(len(f.prompt) for f in measured)
        cwidth = max(len(f.category) for f in measured)
        for f in measured:
            figures = []
            for s in shown:
                sp = dict(s.per_prompt).get(f.prompt)
                if sp is not None:
                    figures.append(f"{s.label} {sp.median:.2f}x")
            tail = f"left out: {f.left_out}" if f.left_out else ", ".join(figures)
            loop = f"{f.loop}; " if f.loop and not f.left_out else ""
            out.append(f"    {f.prompt:<{width}} {f.category:<{cwidth}} {f.timed:>5} tokens  {loop}{tail}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision.to_dict(), "estimator": self.estimator, "over_prompts": self.over_prompts,
                "speaks_for": self.speaks_for(),
                "prompts": [{"prompt": p, "category": c} for p, c in self.prompts],
                "facts": [f.to_dict() for f in self.facts], "timed_prompts": list(self.timed),
                "left_out": [f.to_dict() for f in self.left_out],
                "loops": [{"setup": lf.label, "speedup": lf.speedup, "prompts": list(lf.prompts)} for lf in self.loops],
                "categories": [{"category": c.category, "prompts": list(c.prompts),
                                "verdict": verdict_text(c.decision) if c.decision else None,
                                "decision": c.decision.to_dict() if c.decision else None} for c in self.categories],
                "categories_disagree": self.categories_disagree, "noise_log_sd": self.noise,
                "prompt_noise_log_sd": self.prompt_noise, "setups": [s.to_dict() for s in self.setups]}


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


def diverged_everywhere(differs_at: Sequence[int | None]) -> str | None:
    """Why a prompt is left out when several setups' outputs differ from the target alone's at one
    and the same place (``differs_at``: each differing setup's first difference): whatever they
    draft, the speculative program's own target pass does not reproduce the target alone's greedy
    output there (the two programs batch the target's arithmetic differently, which moves a greedy
    choice between two near-equal tokens); None when fewer than two differ, or at different places
    (each such setup is excluded instead)."""
    found = [d for d in differs_at if d is not None]
    if len(found) < 2 or len(set(found)) != 1:
        return None
    return (f"the speculative program's target does not reproduce the target alone's greedy output: {len(found)} setups, "
            f"whatever they draft, diverge at the same character {found[0]} (a near-tie between the two programs' "
            "arithmetic, not a setup's doing)")


def prompt_facts(cells: Sequence[Cell], prompts: Mapping[str, str], count_loops: bool = False,
                 over_prompts: bool = True) -> tuple[PromptFacts, ...]:
    """Each prompt of the workload: what its runs timed (the first cell that says), and why it is
    left out of the answer: too short to time (by the tokens its runs were asked for), (unless
    ``count_loops``) its output loops, every unprobed differing setup diverges at one place
    (:func:`diverged_everywhere`), or, over prompts (the prompts a sample: another takes its place),
    a setup's output differs at a greedy near-tie or where no probe could tell one
    (:func:`diverged_here`; a setup that differs unprobed on most of its prompts is excluded
    instead, :func:`wrong_outputs`). The one near-tie rule: a divergence is a fact of the prompt;
    a difference the probe read and found no near-tie excludes its setup, as does an unprobed one
    on a workload of its own prompts (``over_prompts`` False: none may be left out for it, and a
    setup at a probed near-tie is kept and said)."""
    timed_of: dict[str, tuple[int, int | None]] = {}
    loop_of: dict[str, str] = {}
    for c in cells:
        if c.timed is not None:
            timed_of.setdefault(c.prompt, (c.timed, c.asked))
        if c.loop is not None:
            loop_of.setdefault(c.prompt, c.loop)
    diverged: dict[str, list[int | None]] = {}
    unprobed: dict[str, list[Cell]] = {}
    wrong = wrong_outputs(cells)
    for c in cells:
        unprobed_difference = c.status == DIFFERS and not c.probed  # a probed wrong output is its setup's
        if unprobed_difference:
            diverged.setdefault(c.prompt, []).append(c.differs_at)
        if over_prompts and (unprobed_difference or c.near_tie is not None) and c.setup not in wrong:
            unprobed.setdefault(c.prompt, []).append(c)
    out = []
    for p, cat in prompts.items():
        t, asked = timed_of.get(p, (None, None))
        loop = loop_of.get(p)
        diverges = diverged_everywhere(diverged.get(p, [])) or diverged_here(unprobed.get(p, []))
        if t is not None and timed.too_short(t, asked):
            out.append(PromptFacts(p, cat, t, loop, timed.short_text(t, asked), "too short"))
        elif loop is not None and not count_loops:
            out.append(PromptFacts(p, cat, t, loop, f"its output {loop}", "loops"))
        else:
            out.append(PromptFacts(p, cat, t, loop, diverges, "diverges" if diverges else None))
    return tuple(out)


def diverged_here(differing: Sequence[Cell]) -> str | None:
    """Why a prompt is left out when a setup's output differs there at a greedy near-tie the probe
    found, or where no probe read the target's top two (the engine gives no token probabilities: a
    near-tie and a wrong output cannot be told apart): a near-tie is a fact of the prompt, not of
    the setup."""
    ties = [c for c in differing if c.near_tie is not None]
    if ties:
        return f"its output with {ties[0].label} differs from the target alone's at a greedy near-tie ({ties[0].near_tie})"
    if not differing:
        return None
    shown = ", ".join(f"{c.label}" + (f" at character {c.differs_at}" if c.differs_at is not None else "")
                      for c in differing[:3])
    return (f"its output with {shown} differs from the target alone's where this engine cannot tell a greedy "
            "near-tie from a wrong output (no token probabilities)")


def wrong_outputs(cells: Sequence[Cell]) -> set[Hashable]:
    """The setups whose output differs unprobed on more than half of the prompts they were measured
    on (two or more): a pattern, not a near-tie's chance; each stays excluded rather than leaving
    its prompts out."""
    out = set()
    for key, s in _setups(cells).items():
        measured = [c for c in s.cells.values() if c.status in (OK, DIFFERS)]
        bad = [c for c in measured if c.status == DIFFERS and not c.probed]
        if len(bad) >= 2 and 2 * len(bad) > len(measured):
            out.add(key)
    return out


def _logs_by_category(cells: Mapping[str, Cell], prompts: Sequence[str], of: Mapping[str, str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for p in prompts:
        c = cells.get(p)
        if c is not None and c.status == OK and c.ratios and all(r > 0 for r in c.ratios):
            out.setdefault(of[p], []).append(math.log(statistics.median(c.ratios)))
    return out


def figures(cells: Sequence[Cell], prompts: Sequence[str], of: Mapping[str, str], noise: float | None, *,
            over_prompts: bool = True, prompt_noise: float | None = None,
            weights: Mapping[str, float] | None = None) -> tuple[SetupFigures, ...]:
    """Each setup over these timed ``prompts`` (``of``: prompt -> category): its workload estimate and
    each prompt's own speedup. Over prompts, a setup needs an unchanged output on every timed prompt
    it was measured on and at least one such prompt in each of their categories; its spread is no
    less than ``prompt_noise`` (the study's between-prompt noise). As the whole workload, it needs
    every prompt (``noise``: the pair-to-pair noise that spreads a prompt measured once)."""
    cats = list(dict.fromkeys(of[p] for p in prompts))
    out = []
    for key, s in _setups(cells).items():
        mine = {p: c for p, c in s.cells.items() if p in prompts}
        per = tuple((p, stats.spread(c.ratios) if c.ratios else None) for p, c in s.cells.items())
        if not mine:
            out.append(SetupFigures(key, s.label, s.cost, None, per, 0, None, 0))
            continue
        excluded = _excluded(_Setup(s.label, s.cost, mine))
        measured = [p for p in prompts if p in mine and mine[p].ratios]
        spread = None
        if not excluded and over_prompts and {of[p] for p in measured} == set(cats):
            groups = {c: [list(mine[p].ratios) for p in measured if of[p] == c] for c in cats}
            spread = estimators.over_prompts(groups, weights, prompt_noise)
        elif not excluded and not over_prompts and len(measured) == len(prompts):
            spread = estimators.workload([mine[p].ratios for p in prompts], noise)
        out.append(SetupFigures(key, s.label, s.cost, spread, per, sum(len(mine[p].ratios) for p in measured), excluded,
                                len(measured), tuple(c.near_tie for c in mine.values() if c.near_tie)))
    return tuple(out)


def model_views(predictions: Sequence[Prediction], prompts: Sequence[str]) -> tuple[decide.ModelView, ...]:
    """The speedup model over the workload, one view per fitted group: at each setup, the geometric
    mean over the ``prompts`` that predict it of the predictions and of each band end (a setup
    predicted on fewer of them than the best-covered one is left out); its error the median of
    the prompts' own errors."""
    groups: dict[str, dict[Hashable, dict[str, Prediction]]] = {}
    for p in predictions:
        if p.prompt in prompts:
            groups.setdefault(p.group, {}).setdefault(p.setup, {})[p.prompt] = p
    views = []
    for setups in groups.values():
        most = max(len(per) for per in setups.values())
        bands = []
        errors = []
        for key, per in setups.items():
            if len(per) < most:
                continue
            rows = list(per.values())
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


def _loop_figures(cells: Sequence[Cell], looping: Sequence[str]) -> tuple[LoopFigure, ...]:
    out = []
    for s in _setups(cells).values():
        meds = {p: statistics.median(c.ratios) for p, c in s.cells.items() if p in looping and c.status == OK and c.ratios}
        if meds:
            out.append(LoopFigure(s.label, stats.geometric_mean(list(meds.values())), tuple(meds)))
    return tuple(sorted(out, key=lambda lf: -lf.speedup))


def decide_workload(cells: Sequence[Cell], prompts: Mapping[str, str], predictions: Sequence[Prediction] = (), *,
                    over_prompts: bool = True, count_loops: bool = False) -> WorkloadDecision:
    """The one decision over the workload ``prompts`` (prompt -> category, in the workload's order,
    every prompt of it, measured or not), from the cells measured and the model's predictions;
    then the same rule per category. ``over_prompts``: the prompts are a sample of the workload
    (False: the whole of it); ``count_loops``: a looping prompt counts."""
    order = list(prompts)
    unknown = sorted({c.prompt for c in cells} - set(order))
    if unknown:
        raise ValueError(f"cells for prompts outside the workload: {', '.join(unknown)}")
    facts = prompt_facts(cells, prompts, count_loops, over_prompts)
    n_predict = next((c.asked for c in cells if c.asked is not None), None)
    timed_ = [f.prompt for f in facts if f.left_out is None and any(c.prompt == f.prompt and c.ratios for c in cells)]
    looping = [f.prompt for f in facts if f.why == "loops" and f.measured]
    noise = estimators.pooled_log_sd(c.ratios for c in cells if c.status == OK and c.prompt in timed_)
    per_setup = [_logs_by_category(s.cells, timed_, prompts) for s in _setups(cells).values()]
    between = estimators.between_prompts(per_setup)
    # the categories weigh by their share of the workload's prompts (those not left out)
    counts: dict[str, int] = {}
    for f in facts:
        if f.left_out is None:
            counts[f.category] = counts.get(f.category, 0) + 1
    weights = {c: n / max(1, sum(counts.values())) for c, n in counts.items()}
    unit = "prompts" if over_prompts else "pairs"

    def one(names: Sequence[str]) -> tuple[decide.Decision, tuple[SetupFigures, ...]]:
        found = figures(cells, names, prompts, noise, over_prompts=over_prompts, prompt_noise=between,
                        weights=weights)
        candidates = [decide.Candidate(s.setup, s.label, s.speedup, s.cost) for s in found if s.speedup is not None]
        return decide.decide(candidates, model_views(predictions, names), unit=unit), found

    overall, setups = one(timed_)
    setups = _with_end_to_end(setups, cells, timed_, prompts, over_prompts, weights)
    cats = list(dict.fromkeys(prompts[p] for p in order))
    verdicts = []
    for cat in cats:
        names = [p for p in timed_ if prompts[p] == cat]
        if not names and not any(f.category == cat and f.measured for f in facts):
            continue
        enough = len(names) >= (MIN_VERDICT_PROMPTS if over_prompts else 1)  # as the whole workload: its prompts' own
        verdicts.append(CategoryVerdict(cat, tuple(names), one(names)[0] if enough else None))
    return WorkloadDecision(overall, tuple(verdicts) if len(cats) > 1 else (), setups,
                            tuple((p, prompts[p]) for p in order), noise,
                            estimators.OVER_PROMPTS if over_prompts else estimators.WORKLOAD, facts,
                            _loop_figures(cells, looping), over_prompts, between, n_predict)


def _with_end_to_end(setups: tuple[SetupFigures, ...], cells: Sequence[Cell], timed_: Sequence[str],
                     prompts: Mapping[str, str], over_prompts: bool,
                     weights: Mapping[str, float]) -> tuple[SetupFigures, ...]:
    """Each setup's estimate once more on its cells' end-to-end ratios (where the engine timed the
    prompt: every cell that has decode ratios has them), by the same estimator, its noise taken
    from those ratios the same way: shown beside the decode figure, never decided on."""
    if not any(c.end_to_end for c in cells):
        return setups
    # a setup with a timed prompt whose pairs have no end-to-end timing gets no end-to-end figure
    whole = {s.setup for s in setups} - {c.setup for c in cells if c.ratios and c.prompt in timed_ and not c.end_to_end}
    e2e = [replace(c, ratios=c.end_to_end) for c in cells]
    noise = estimators.pooled_log_sd(c.ratios for c in e2e if c.status == OK and c.prompt in timed_)
    between = estimators.between_prompts([_logs_by_category(s.cells, timed_, prompts) for s in _setups(e2e).values()])
    found = {s.setup: s.speedup for s in figures(e2e, timed_, prompts, noise, over_prompts=over_prompts,
                                                  prompt_noise=between, weights=weights)}
    return tuple(replace(s, end_to_end=found.get(s.setup) if s.setup in whole else None) for s in setups)


__all__ = ["DIFFERS", "MIN_VERDICT_PROMPTS", "OK", "CategoryVerdict", "Cell", "LoopFigure", "Prediction", "PromptFacts",
           "SetupFigures", "WorkloadDecision", "decide_workload", "diverged_everywhere", "figures", "model_views",
           "prompt_facts", "verdict_text"]
