"""How a workload study spends its budget (:mod:`llamaspec.studies.budget`): prompts before
setups, each prompt in blocks.

Every measurement is a block on one prompt (:meth:`llamaspec.studies.state.StudyState.measure_block`:
the target alone, the setups' speculative runs in a shuffled order, the target alone again), so
every ratio's baseline is measured beside its run, whatever the policy does next. The adaptive
policy (benchmarks/decide.py replays it on recordings, through :func:`llamaspec.studies.study.run_study`):

1. **The first prompts** (:data:`FIRST_PROMPTS`, the categories taking turns): a block of every
   first-pass setup: every draft-free mode and, per draft file, the longest
   :data:`FIRST_LONGEST` draft lengths where the program counts acceptance
   by draft position (their rounds cover every shorter position, so the speedup model predicts every
   other length), else every length.
2. **Setups that trail stop** (:func:`trailing`): a setup slower than the best one on the prompts
   both were measured on (paired: in the same blocks), :data:`PRUNE_PROMPTS` or more, by
   :data:`PRUNE_GAP` or more on their mean and by more than its standard error, is measured no
   more; of the draft-free modes, the :data:`KEEP_MODES` best on the first prompts go on; so does
   no setup the decision says can no longer be the answer (not among its contenders). Their
   figures stay in the answer. **The model's contender**: the draft length the speedup model puts
   best, where it sees a gain within its error, joins the blocks from the next prompt on.
3. **Then every remaining minute buys prompts**: the next prompt (of the category with the fewest
   timed prompts, in an order shuffled by the study's id, the same on a rerun) gets a block of the
   setups still measured. A prompt too short to time, or looping, is left out and the next of its
   category takes its place. Once every prompt is measured (or there is one prompt), each gets
   another block, the fewest first.
4. **Until** the decision is settled, the budget is spent, or nothing is left to measure.

The plan (:class:`Plan`) is said once the first block gives the pace: how many prompts the budget
times. A default budget that cannot time :data:`LEAST_PROMPTS` prompts grows to (up to
:data:`MAX_DEFAULT_MINUTES`, said); a given one is kept, and the plan says how many minutes would.

``fixed_grid`` measures every setup on every prompt in ``repeats`` blocks each instead, in passes
(a block on every prompt per pass, the categories taking turns).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamaspec.base.progress import Progress, duration
from llamaspec.decision import workload
from llamaspec.studies.budget import MAX_DEFAULT_MINUTES, Budget
from llamaspec.studies.experiment import Case
from llamaspec.studies.setups import Setup

if TYPE_CHECKING:
    from llamaspec.studies.state import StudyState

log = logging.getLogger(__name__)

# Every first-pass setup is measured on this many prompts before any stops.
FIRST_PROMPTS = 2
# A setup stops being measured once it trails the best on at least PRUNE_PROMPTS shared prompts, by
# PRUNE_GAP or more on their geometric mean and by more than that mean's standard error; of the
# draft-free modes, KEEP_MODES go on past the first prompts (the n-gram modes read within a few per
# cent of each other on most workloads: measuring five of them costs the prompts that decide).
PRUNE_PROMPTS, PRUNE_GAP, KEEP_MODES = 3, 0.03, 2
# A default budget grows to time at least this many prompts, up to MAX_DEFAULT_MINUTES.
LEAST_PROMPTS = 8
# Where the program counts acceptance by draft position (llama-speculative-simple, llama-server,
# transformers), the first pass measures only the longest lengths of the grid: their rounds cover
# every shorter position, so the curve and the cost timings predict every other length
# (llamaspec.theory.positions states the assumption, and the sweep says when a measured point
# contradicts it). Two, not one: the draft's cost is fitted over both, and a curve cut short near
# the end of generation (positions left out where the counts are not certain) is pooled over two.
FIRST_LONGEST = 2
def first_pass(setups: Sequence[Setup], by_position: bool = True) -> list[Setup]:
    """The setups measured first: every draft-free mode, and per draft group its
    :data:`FIRST_LONGEST` longest lengths (``by_position``) or every length, longest first."""
    out = [s for s in setups if s.draft_free]
    groups: dict[object, list[Setup]] = {}
    for s in setups:
        if not s.draft_free:
            groups.setdefault(s.group, []).append(s)
    for members in groups.values():
        ranked = sorted(members, key=lambda s: -(s.length or 0))
        out += ranked[:FIRST_LONGEST] if by_position else ranked
    return out


@dataclass(frozen=True)
class Plan:
    """How many of the workload's prompts the budget times, and how."""

    prompts: int  # the prompts it times, about
    of: int  # the workload's prompts
    first: int  # the first blocks' setups
    later: int  # the later blocks' setups, about
    first_seconds: float  # a first block's time
    later_seconds: float  # a later block's time
    least_minutes: int | None = None  # where the budget times fewer than LEAST_PROMPTS: the minutes that would

    def text(self, budget: Budget) -> str:
        head = (f"plan: about {self.prompts} of {self.of} prompts within {budget.text()}: the first {min(FIRST_PROMPTS, self.prompts)} "
                f"in a block of {self.first} setups each (about {duration(self.first_seconds)} a prompt), then a block of the "
                f"{self.later} still measured (about {duration(self.later_seconds)} a prompt); each block is the target alone, "
                "the setups in a shuffled order, the target alone again")
        if self.least_minutes is not None:
            head += (f"; too few prompts for an interval over prompts to decide a gain of 10-20 %: --budget "
                     f"{self.least_minutes}m times {LEAST_PROMPTS}")
        return head


def plan(study: StudyState, budget: Budget, first: int, later: int) -> Plan | None:
    """The plan at the pace measured so far (None before a block gives it)."""
    first_s, later_s = study.block_seconds(first), study.block_seconds(later)
    if first_s is None or later_s is None:
        return None
    n = len(study.cases)
    if budget.seconds is not None:
        head = min(FIRST_PROMPTS, n)
        fit = head if budget.seconds <= head * first_s else head + math.floor((budget.seconds - head * first_s) / later_s)
        n = min(n, max(1, fit if head * first_s < budget.seconds else math.floor(budget.seconds / first_s)))
    if budget.pairs is not None:
        head = min(FIRST_PROMPTS, n)
        n = min(n, head + max(0, (budget.pairs - head * first) // max(1, later)))
    least = None
    if n < min(LEAST_PROMPTS, len(study.cases)):
        need = min(FIRST_PROMPTS, LEAST_PROMPTS) * first_s + max(0, LEAST_PROMPTS - FIRST_PROMPTS) * later_s
        least = math.ceil(need / 60)
    return Plan(n, len(study.cases), first, later, first_s, later_s, least)


class Clock:
    """The study's progress line: blocks, the pace, and what is left of the budget."""

    def __init__(self, study: StudyState, budget: Budget | None, label: str) -> None:
        self.study, self.budget = study, budget
        self.bar = Progress(label, total=self._total(budget), eta=False)
        self.start = study.clock()

    @staticmethod
    def _total(budget: Budget | None) -> float:
        return budget.seconds if budget and budget.seconds else float(budget.pairs) if budget and budget.pairs else 1.0

    def retarget(self, budget: Budget) -> None:
        """The budget changed (a default grown to time enough prompts): the bar counts to the new one."""
        self.budget = budget
        self.bar.total = self._total(budget)

    def elapsed(self) -> float:
        return self.study.clock() - self.start

    def spent(self) -> bool:
        b = self.budget
        return bool(b and ((b.seconds is not None and self.elapsed() >= b.seconds)
                           or (b.pairs is not None and self.study.spent() >= b.pairs)))

    def update(self, note: str) -> None:
        done = self.elapsed() if self.budget and self.budget.seconds else float(self.study.spent())
        left = ""
        if self.budget and self.budget.seconds:
            left = f", at most {duration(max(0.0, self.budget.seconds - self.elapsed()))} left"
        blocks = self.study.blocks_here
        self.bar.update(min(done, self.bar.total), f"{note} [{blocks} block{'s' if blocks != 1 else ''}, "
                        f"{self.study.spent()} runs beside their baselines{left}]")

    def close(self) -> None:
        self.bar.close()


class _Sample:
    """The prompts in the order a study takes them: over prompts, the next of the category with
    the fewest timed prompts (each category's in the study's shuffled order, those measured before
    first); as the whole workload, every prompt in the workload's order."""

    def __init__(self, study: StudyState) -> None:
        self.study = study
        self.queues = study.order() if study.over_prompts else {"": list(study.cases)}
        self.taken: list[Case] = []  # measured and timed
        self.left: list[Case] = []  # measured and left out (too short, looping)

    def next_case(self) -> Case | None:
        """The next prompt not measured yet; None when every one is."""
        done = {c.name for c in (*self.taken, *self.left)}
        counts = {cat: sum(1 for c in self.taken if self.study.prompts[c.name] == cat) for cat in self.queues}
        for cat in sorted(self.queues, key=lambda c: counts.get(c, 0)):
            for case in self.queues[cat]:
                if case.name not in done:
                    return case
        return None

    def again(self) -> Case | None:
        """Every prompt measured: the timed one with the fewest blocks, for another block."""
        return min(self.taken, key=lambda c: (self.study.blocks_on(c), self.taken.index(c)), default=None)

    def add(self, case: Case) -> None:
        why = self.study.left_out(case)
        if why is not None:
            log.info("%s is left out of the decision: %s", case.name, why)
            self.left.append(case)
        else:
            self.taken.append(case)


def trailing(cells: Sequence[workload.Cell], active: Sequence[Setup], timed: Sequence[str]) -> list[tuple[Setup, str]]:
    """The setups of ``active`` that trail the best one: slower by :data:`PRUNE_GAP` or more on the
    mean log ratio, and by more than its standard error (a gap that holds from prompt to prompt,
    not one prompt's). Over several prompts the comparison is paired: on the
    :data:`PRUNE_PROMPTS` or more of ``timed`` both were measured on, each prompt's median (the
    same blocks); on one prompt, over its blocks' ratios (:data:`PRUNE_PROMPTS` or more each).
    Each with why, in words."""
    logs: dict[str, dict[str, list[float]]] = {}
    for c in cells:
        if c.status == workload.OK and c.ratios and c.prompt in timed:
            logs.setdefault(str(c.setup), {})[c.prompt] = [math.log(r) for r in c.ratios if r > 0]
    one = len(timed) == 1

    def units(key: str) -> int:
        return sum(len(v) for v in logs.get(key, {}).values()) if one else len(logs.get(key, {}))

    def mean(key: str) -> float:
        return statistics.fmean(x for v in logs[key].values() for x in v) if one else statistics.fmean(
            statistics.median(v) for v in logs[key].values())

    have = [s for s in active if units(s.key) >= PRUNE_PROMPTS]
    if len(have) < 2:
        return []
    best = max(have, key=lambda s: mean(s.key))
    out = []
    for s in have:
        if s is best:
            continue
        if one:
            a, b = [x for v in logs[best.key].values() for x in v], [x for v in logs[s.key].values() for x in v]
            gap = statistics.fmean(a) - statistics.fmean(b)
            se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
            where = f"over {len(b)} blocks"
        else:
            shared = sorted(set(logs[s.key]) & set(logs[best.key]))
            if len(shared) < PRUNE_PROMPTS:
                continue
            gaps = [statistics.median(logs[best.key][p]) - statistics.median(logs[s.key][p]) for p in shared]
            gap, se = statistics.fmean(gaps), statistics.stdev(gaps) / math.sqrt(len(gaps))
            where = f"on the {len(shared)} prompts both were measured on, in the same blocks"
        if gap >= math.log1p(PRUNE_GAP) and gap > se:
            out.append((s, f"{best.label} ran {math.exp(gap):.2f}x as fast {where} (geometric mean)"))
    return out


def paired_ranking(cells: Sequence[workload.Cell], setups: Sequence[Setup], timed: Sequence[str]) -> list[Setup]:
    """``setups`` best first, by the mean log ratio on the timed prompts every one of them was
    measured on (paired: the same blocks); in the given order where they share no prompt."""
    logs: dict[str, dict[str, float]] = {}
    for c in cells:
        if c.status == workload.OK and c.ratios and c.prompt in timed:
            logs.setdefault(str(c.setup), {})[c.prompt] = math.log(statistics.median(c.ratios))
    shared = set(timed)
    for s in setups:
        shared &= set(logs.get(s.key, {}))
    if not shared:
        return list(setups)
    return sorted(setups, key=lambda s: -statistics.fmean(logs[s.key][p] for p in shared))


def adaptive(study: StudyState, budget: Budget, defaulted: bool = False) -> tuple[str, str, str | None, dict[str, str]]:
    """The adaptive policy (the module's docstring): (why it stopped, its last progress line, the
    plan as said, the setups it stopped measuring: label -> why). ``defaulted``: the budget is the
    default one: it grows to time :data:`LEAST_PROMPTS` prompts at the first block's pace."""
    clock = Clock(study, budget, f"study {study.exp.name}")
    active = first_pass(study.setups, by_position=True)
    sample = _Sample(study)
    stopped: dict[str, str] = {}  # measured no more: they trail
    resting: dict[str, str] = {}  # not measured while the decision says they cannot be the answer
    made: Plan | None = None
    said_positions = False

    def said() -> dict[str, str]:  # the setups out of the blocks at the end, and why
        return {**stopped, **resting}

    try:
        for name in list(study.touched):  # a resumed study: its prompts first, as measured
            sample.add(study.by_name[name])
        while True:
            wd = study.decision()
            # settled, once every setup the blocks measure has a figure (not on the first ones alone)
            measured = {str(c.setup) for c in study.cells() if c.ratios}
            if wd.decision.settled and all(s.key in measured for s in active):
                return "settled", wd.decision.sureness, made.text(budget) if made else None, said()
            if clock.spent():
                return "budget", f"budget spent: {wd.decision.sureness}", made.text(budget) if made else None, said()
            fresh = sample.next_case()
            case = fresh or sample.again()
            if case is None:
                return ("nothing to measure", f"nothing left to measure: {wd.decision.sureness}",
                        made.text(budget) if made else None, said())
            later = bool(sample.taken) and (len(sample.taken) >= FIRST_PROMPTS or fresh is None)
            if later:
                active = _later(study, wd, active, stopped)
            failed = {key for _p, key in study.failed()}  # a setup that failed anywhere is out of the answer
            active = [s for s in active if s.key not in failed]
            if not active:
                return ("nothing to measure", f"every setup measured has failed: {wd.decision.sureness}",
                        made.text(budget) if made else None, said())
            block = _open(study, wd, active, resting) if later else active
            if budget.pairs is not None:  # a budget of runs: the setups measured least first
                block = sorted(block, key=lambda s: study.blocks_of(case, s))[:max(1, budget.pairs - study.spent())]
            clock.update(f"{case.name}: a block of {len(block)} setup{'s' if len(block) != 1 else ''}")
            study.measure_block(case, block)
            if case not in sample.taken and case not in sample.left:
                sample.add(case)
            if not said_positions and any(not s.draft_free for s in active) and study.measured_cells():
                said_positions = True
                if not study.counts_positions():
                    rest = [s for s in first_pass(study.setups, by_position=False) if s not in active]
                    if rest:
                        log.info("the program counts no acceptance by draft position: every length is measured")
                        active += rest
            if made is None:
                made = plan(study, budget, len(active), _about_later(active))
                if made is not None:
                    if defaulted and made.least_minutes is not None and budget.seconds is not None:
                        grown = 60.0 * min(MAX_DEFAULT_MINUTES, made.least_minutes)
                        if grown > budget.seconds:
                            log.warning("the default budget grows from %s to %s: at this machine's pace (about %s a "
                                        "block) %s times too few prompts to decide on; give --budget to choose",
                                        duration(budget.seconds), duration(grown), duration(made.later_seconds),
                                        duration(budget.seconds))
                            budget = dataclasses.replace(budget, seconds=grown)
                            clock.retarget(budget)
                            made = plan(study, budget, made.first, made.later)
                    if made is not None:
                        log.log(logging.WARNING if made.least_minutes else logging.INFO, "%s", made.text(budget))
    finally:
        clock.close()


def _about_later(active: Sequence[Setup]) -> int:
    """The setups a later block measures, about, before any has stopped: the best draft length and
    the best n-gram mode or two."""
    return min(len(active), 3)


def _later(study: StudyState, wd: workload.WorkloadDecision, active: list[Setup], stopped: dict[str, str]) -> list[Setup]:
    """The setups the next block measures: those that trail, or that the decision says can no longer
    be the answer (said once), stop; the model's contender joins."""
    for s, why in trailing(study.cells(), active, wd.timed):
        log.info("%s is measured no more: %s", s.label, why)
        stopped[s.label] = why
    modes = [s for s in active if s.draft_free and s.label not in stopped]
    if len(modes) > KEEP_MODES:
        ranked = paired_ranking(study.cells(), modes, wd.timed)
        for s in ranked[KEEP_MODES:]:
            why = f"trails {ranked[0].label} and {ranked[1].label} on its first prompts (the {KEEP_MODES} best modes go on)"
            log.info("%s is measured no more: %s", s.label, why)
            stopped[s.label] = why
    kept = [s for s in active if s.label not in stopped]
    for view in wd.decision.models:
        best = next((b for b in view.bands if b.key == view.best), None)
        setup = study.by_key.get(str(view.best))
        if (best is None or setup is None or setup in kept or setup.label in stopped
                or best.predicted * (1 + view.error) <= 1.0):
            continue
        log.info("the speedup model puts %s best (%.2fx predicted): it joins the blocks", setup.label, best.predicted)
        kept.append(setup)
    return kept or active[:1]


def _open(study: StudyState, wd: workload.WorkloadDecision, active: list[Setup], resting: dict[str, str]) -> list[Setup]:
    """The setups of ``active`` the next block measures: not those the decision says can no longer be
    the answer (measured twice or more, outside its contenders). Unlike a trailing setup's stop,
    this one is the decision's today: a setup it brings back among its contenders is measured again.
    ``resting`` holds why each is out now (said once each)."""
    d = wd.decision
    out: dict[str, str] = {}
    if d.contenders:
        open_ = {str(e.key) for e in d.contenders}
        for e in d.estimates:
            setup = study.by_key.get(str(e.key))
            if setup in active and str(e.key) not in open_ and e.measured.n >= 2:
                out[setup.label] = (f"it can no longer be the answer: {e.measured.text(suffix='x')} against "
                                    f"{d.contenders[0].label}'s {d.contenders[0].measured.text(suffix='x')}")
    for label, why in out.items():
        if label not in resting:
            log.info("%s is measured no more while the decision stands: %s", label, why)
    resting.clear()
    resting.update(out)
    return [s for s in active if s.label not in resting] or active[:1]


def fixed(study: StudyState, want: int) -> tuple[str, str]:
    """Every setup on every prompt in ``want`` blocks each, in passes (a block on every prompt per
    pass, prompt by prompt with the categories taking turns)."""
    clock = Clock(study, Budget(pairs=want * len(study.setups) * len(study.cases)), f"study {study.exp.name} (fixed grid)")
    queues = [list(q) for q in study.order().values()]
    cases = [q.pop(0) for _ in range(len(study.cases)) for q in queues if q][:len(study.cases)]
    try:
        for turn in range(want):
            for case in cases:
                todo = [s for s in study.setups if study.blocks_of(case, s) <= turn]
                if todo:
                    clock.update(f"pass {turn + 1} of {want}: {case.name}, a block of {len(todo)} setups")
                    study.measure_block(case, todo)
    finally:
        clock.close()
    return "fixed grid", f"every setup on every prompt, {want} blocks each"


__all__ = ["FIRST_PROMPTS", "KEEP_MODES", "LEAST_PROMPTS", "PRUNE_GAP", "PRUNE_PROMPTS", "Clock",
           "Plan", "adaptive", "first_pass", "fixed", "paired_ranking", "plan", "trailing"]
