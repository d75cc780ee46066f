"""How a workload study spends its budget: which prompts, which setups, in what order.

The adaptive policy (benchmarks/decide.py replays it on recordings, through
:func:`llamaspec.studies.study.run_study`):

1. **The plan.** Once the first pair says how long a pair takes, the study says how many of the
   workload's prompts it samples (:func:`plan`): as many as the first pass and the model's
   contenders fit into :data:`PLAN_SHARE` of the budget, at least one a category. Over prompts
   (the default) the sample is drawn category by category, the category with the fewest timed
   prompts first (the prompts of each in an order shuffled by the study's id, the same on every
   rerun); as the whole workload (``over_prompts=False``), every prompt is measured.
2. **The first pass**, prompt by prompt: on each sampled prompt one pair of every draft-free mode
   and of the longest :data:`llamaspec.studies.sweep.FIRST_LONGEST` draft lengths where the
   program counts acceptance by draft position (their rounds cover every shorter position, so
   the curve and the cost timings predict every other length), else of every length; the
   setups' order rotates from prompt to prompt, so each setup's pairs are spread over the whole
   study. Over several prompts, a prompt's first cell measures a whole pair; its other new cells
   (here and in the steps below) share that baseline, one to one, and measure their speculative
   runs only; a cell's later pairs are whole (:func:`llamaspec.measure.summary.summarize`). On one
   prompt every pair is whole. A prompt whose first pair shows it too short to time, or looping, gets no more pairs
   (it is left out of the decision) and the next prompt of its category takes its place.
3. **The model's contenders**: the lengths it predicts within its error of its best (at most
   ``decide.MAX_REQUESTS``), one pair on each sampled prompt; none where the model sees no gain
   at any length, even within its error.
4. **What the decision asks for** (:func:`llamaspec.decision.decide.next_step`): a setup not
   measured on a sampled prompt gets a pair there first; then each more goes where it narrows
   the setup's interval most (:func:`allocate_sampled`): a prompt not sampled yet, of the
   category whose next prompt helps most, or one more pair on a sampled prompt; as the whole
   workload, to the prompts whose own noise most widens it (:func:`allocate`). Until the
   decision is settled or the budget is spent.

``fixed_grid`` measures every setup on every prompt with the experiment's repeats instead, in
passes (a pair of every setup on every prompt per pass, the order rotating).

Its size: the plan, the sample, the four steps and the two allocations of the adaptive policy,
and the fixed grid; the policy is what benchmarks/decide.py replays, so its steps stay together.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import Progress, duration
from llamaspec.decision import decide, workload
from llamaspec.studies.experiment import Case
from llamaspec.studies.setups import Setup
from llamaspec.studies.state import StudyState
from llamaspec.studies.sweep import FIRST_LONGEST, Budget

log = logging.getLogger(__name__)

DEFAULT_BUDGET_TEXT = "4m"
# A time budget is refused once the first pair says the first pass would take more than this many
# times it (one pair's time is a rough guide: the first pass's setups differ in cost); below that,
# the first pass is measured whole and the output says the budget was short.
TOO_SMALL = 1.5
MAX_DEFAULT_SECONDS = 30 * 60  # the most the default budget grows to, for the first pass
# The first pass and the model's contenders take at most this share of the budget; the rest goes
# where the decision asks.
PLAN_SHARE = 0.75


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
    """How many of the workload's prompts the first pass samples, and about how long it takes."""

    prompts: int
    of: int  # the workload's prompts
    categories: int
    first: int  # the first pass's setups on each prompt
    contenders: int  # the model's lengths measured next on each prompt, at most
    seconds: float | None  # the first pass and the contenders, at the pace of the first pair
    whole: bool = False  # every prompt: the prompts are the whole workload

    def text(self, budget: Budget) -> str:
        each = f"the first pass's {self.first} setups" + (f" and up to {self.contenders} of the model's lengths"
                                                          if self.contenders else "")
        about = f": about {duration(self.seconds)}" if self.seconds is not None else ""
        if self.whole:
            what = f"every one of the {self.of} prompts (the whole workload)"
        else:
            per = self.prompts / max(1, self.categories)
            what = (f"{self.prompts} of {self.of} prompts (about {per:.0f} a category)" if self.prompts < self.of
                    else f"all {self.of} prompts")
        return f"plan: {what}, each with {each}{about}; then what the decision asks for, within {budget.text()}"


def plan(workload_prompts: int, categories: int, first: int, contenders: int, per_prompt: float | None, budget: Budget,
         over_prompts: bool = True) -> Plan:
    """The first pass's sample: every prompt as the whole workload; over prompts, as many as one pair
    of each first setup and contender on each fits into :data:`PLAN_SHARE` of the budget (its
    time at ``per_prompt`` seconds a prompt, its pairs), at least one a category, at most every prompt."""
    per = first + contenders
    n = workload_prompts
    if over_prompts:
        if budget.seconds is not None and per_prompt:
            n = min(n, math.floor(PLAN_SHARE * budget.seconds / per_prompt))
        if budget.pairs is not None:
            n = min(n, math.floor(PLAN_SHARE * budget.pairs / per))
        n = max(min(categories, workload_prompts), n)
    return Plan(n, workload_prompts, categories, first, contenders, n * per_prompt if per_prompt else None,
                whole=not over_prompts)


def least_pairs(workload_prompts: int, categories: int, first: int, first_pairs: int = 1,
                over_prompts: bool = True) -> int:
    """The fewest pairs a study can decide on: ``first_pairs`` of each first setup on one prompt a
    category (every prompt, as the whole workload)."""
    return first_pairs * first * (workload_prompts if not over_prompts else min(categories, workload_prompts))


class Clock:
    """The study's progress line: pairs, the pace, and what is left of the budget."""

    def __init__(self, study: StudyState, budget: Budget | None, label: str) -> None:
        self.study, self.budget = study, budget
        self.bar = Progress(label, total=self._total(budget), eta=False)
        self.start = study.clock()

    @staticmethod
    def _total(budget: Budget | None) -> float:
        return budget.seconds if budget and budget.seconds else float(budget.pairs) if budget and budget.pairs else 1.0

    def retarget(self, budget: Budget) -> None:
        """The budget changed (a default grown to the first pass): the bar counts to the new one."""
        self.budget = budget
        self.bar.total = self._total(budget)

    def elapsed(self) -> float:
        return self.study.clock() - self.start

    def spent(self) -> bool:
        return bool(self.budget and self.budget.seconds is not None and self.elapsed() >= self.budget.seconds)

    def update(self, note: str) -> None:
        pace = self.study.pair_seconds
        done = self.elapsed() if self.budget and self.budget.seconds else float(self.study.spent())
        left = ""
        if self.budget and self.budget.seconds:
            left = f", at most {duration(max(0.0, self.budget.seconds - self.elapsed()))} left"
        elif self.budget and self.budget.pairs and pace:
            left = f", at most {duration(max(0, self.budget.pairs - self.study.spent()) * pace)} left"
        self.bar.update(min(done, self.bar.total), f"{note} [{self.study.spent()} pairs"
                        + (f", {pace:.1f} s a pair" if pace else "") + f"{left}]")

    def close(self) -> None:
        self.bar.close()


def _fit_first_pass(study: StudyState, least: int, first: int, budget: Budget, clock: Clock, defaulted: bool,
                    again: bool = False) -> Budget:
    """Once the first pair says how long a baseline and a speculative run take, the budget against
    the least first pass (a prompt of each category: its baseline and each first setup's run).
    The default budget grows to hold it within :data:`PLAN_SHARE` (in whole minutes, up to
    :data:`MAX_DEFAULT_SECONDS`; said in the log), so that a quarter is left for what the decision
    asks: the one-line command answers on a slower machine too, only later. ``again``: asked once
    more as the first pass goes on (the first pair, of a cheap mode, can be quicker than the
    rest): the default only grows further, if at all. It is refused instead where other processes held the CPU during the
    pair (on a busy machine a pair at several threads can take many times longer: the pace says
    nothing) or the first pass needs more than that; a given time budget that cannot pay for it
    by far is refused. What is measured stays stored. Returns the budget."""
    each, seconds = study.prompt_seconds(first), budget.seconds
    if each is None or seconds is None:
        return budget
    need = least / first * each  # a prompt: its baseline, shared, and each first setup's speculative run
    if need <= (PLAN_SHARE * seconds if defaulted else seconds):
        return budget
    busy = study.noise is not None and study.noise.noisy
    grown = 60.0 * math.ceil(need / PLAN_SHARE / 60)
    if defaulted and not busy and grown <= MAX_DEFAULT_SECONDS:
        log.log(logging.INFO if again else logging.WARNING,
                "the default budget grows from %s to %s: the first pass alone (%d pairs, about %.1f s a prompt) takes "
                "about %s here; give --budget to choose", duration(seconds), duration(grown), least, each, duration(need))
        budget = dataclasses.replace(budget, seconds=grown)
        clock.retarget(budget)
        return budget
    if need <= seconds or again:  # a default that fits the first pass, not the quarter after it: not grown on a busy machine
        return budget
    if defaulted or need > seconds * TOO_SMALL:
        named = f"the default budget ({duration(seconds)})" if defaulted else f"--budget {duration(seconds)}"
        raise LlamaspecError(f"{named} is too small: the first pass alone takes about "
                             f"{duration(need)} ({least} pairs, about {each:.1f} s a prompt)"
                             + (f"; {study.noise.text()}" if busy and study.noise else ""),
                             hint=(("the machine was busy: rerun when it is idle, or with fewer threads (-t 1); " if busy else "")
                                   + f"give at least --budget {math.ceil(need / 60)}m (the pair measured is stored; "
                                   "the same command resumes), or fewer draft lengths or modes"))
    log.warning("the first pass takes about %s, more than the budget's %s: it is measured whole (nothing less is decided "
                "on), then the study stops; give --budget %dm or more to settle the decision", duration(need),
                duration(seconds), math.ceil(1.5 * need / 60))
    return budget


class _Sample:
    """The prompts a study samples, category by category (over prompts), or every prompt in the
    workload's order (as the whole workload)."""

    def __init__(self, study: StudyState, first: Sequence[Setup] = (), first_pairs: int = 1) -> None:
        self.study = study
        queues = study.order() if study.over_prompts else {"": list(study.cases)}
        # a resumed study takes first the prompts its first pass finished (stable: the order kept otherwise)
        done = {c.name for cases in queues.values() for c in cases
                if c.name in study.touched and all(study.pairs_of(c, s) >= first_pairs for s in first)}
        self.queues = {cat: sorted(cases, key=lambda c: c.name not in done) for cat, cases in queues.items()}
        self.taken: list[Case] = []  # measured in the first pass and timed
        self.left: list[Case] = []  # measured and left out (too short, looping)
        self.seen: set[str] = set()

    def next_case(self) -> Case | None:
        """The next prompt of the category with the fewest timed prompts that has one left."""
        counts = {cat: sum(1 for c in self.taken if self.study.prompts[c.name] == cat) for cat in self.queues}
        for cat in sorted(self.queues, key=lambda c: counts.get(c, 0)):
            for case in self.queues[cat]:
                if case.name not in self.seen:
                    self.seen.add(case.name)
                    return case
        return None

    def covered(self) -> bool:
        """Every category has a timed prompt, or none left to try."""
        have = {self.study.prompts[c.name] for c in self.taken}
        return all(cat in have or all(c.name in self.seen for c in cases) for cat, cases in self.queues.items()
                   if cat or not self.study.over_prompts)

    def untried(self, category: str) -> Case | None:
        """The next prompt of ``category`` that nothing has measured yet."""
        return next((c for c in self.queues.get(category, []) if c.name not in self.seen
                     and c.name not in self.study.touched), None)


def adaptive(study: StudyState, budget: Budget, first_pairs: int, defaulted: bool = False) -> tuple[str, str, str | None]:
    """The adaptive policy (the module's docstring): (why it stopped, its last progress line, the
    plan as said, within the budget as it ended). ``defaulted``: the budget is the default one; it
    grows to hold the first pass at the pace of the first pair (:func:`_fit_first_pass`), and where
    the program turns out to count no positions, by the lengths the first pass adds (the default
    spends the same beyond its first pass) rather than refusing its own default."""
    clock = Clock(study, budget, f"study {study.exp.name}")
    first = first_pass(study.setups, by_position=True)
    sample = _Sample(study, first, first_pairs)
    categories = len({study.prompts[c.name] for c in study.cases})
    try:
        contenders = min(decide.MAX_REQUESTS, len([s for s in study.setups if not s.draft_free and s not in first]))
        made: Plan | None = None
        if study.touched:  # resumed: the plan is what it was, at the pace its stored pairs took
            made = plan(len(study.cases), categories, len(first), contenders,
                        study.prompt_seconds(len(first) + contenders, stored=True), budget, study.over_prompts)
            log.info("resumed with %d prompt%s measured; %s", len(study.touched), "" if len(study.touched) == 1 else "s",
                     made.text(budget))
        by_position_checked = False
        i = 0
        while True:
            if made is not None and len(sample.taken) >= made.prompts and sample.covered():
                break
            if made is not None and clock.spent() and sample.covered():
                log.info("the budget is spent: the first pass ends after %d prompts", len(sample.taken))
                break
            case = sample.next_case()
            if case is None:
                break
            for j in range(len(first)):
                setup = first[(i + j) % len(first)]  # the setups' order rotates from prompt to prompt
                if study.pairs_of(case, setup) < first_pairs:
                    clock.update(f"first pass: {setup.label} on {case.name}")
                    study.measure(case, setup, first_pairs - study.pairs_of(case, setup), share=True)
                    least = least_pairs(len(study.cases), categories, len(first), first_pairs, study.over_prompts)
                    each = study.prompt_seconds(len(first) + contenders)
                    if made is None and each:
                        budget = _fit_first_pass(study, least, len(first), budget, clock, defaulted)
                        made = plan(len(study.cases), categories, len(first), contenders, each, budget,
                                    study.over_prompts)
                        log.info("%s", made.text(budget))
                    elif defaulted and each:
                        grown = _fit_first_pass(study, least, len(first), budget, clock, defaulted, again=True)
                        if grown != budget:
                            budget = grown
                            made = plan(len(study.cases), categories, len(first), contenders, each, budget,
                                        study.over_prompts)
                if study.left_out(case) is not None:
                    break
            why = study.left_out(case)
            if why is not None:
                log.info("%s is left out of the decision: %s", case.name, why)
                sample.left.append(case)
            else:
                sample.taken.append(case)
            i += 1
            if not by_position_checked and sample.taken and any(not s.draft_free for s in first):
                by_position_checked = True
                rest = [] if study.counts_positions() else [s for s in first_pass(study.setups, by_position=False)
                                                             if s not in first]
                if rest:
                    first, budget, made = _every_length_first(study, sample, clock, first, rest, budget, made, defaulted,
                                                              first_pairs)
                    contenders = 0
        taken = [c for c in sample.taken if study.left_out(c) is None]
        wd = study.decision()
        # the lengths the model puts near its best, where it sees a gain there within its error at all
        near = [b.key for b in decide.model_contenders(wd.decision.models, [s.key for s in first], study.measurable())
                if b.predicted * (1 + _error_of(wd.decision.models, b.key)) > 1.0]
        if near:
            log.info("first pass done: the model predicts the other lengths from the acceptance by position, and measures "
                     "next %s, its best predictions within its error of its best",
                     ", ".join(study.by_key[k].label for k in near if k in study.by_key))
        for k in near:
            setup = study.by_key[str(k)]
            for case in taken:
                # a pairs budget holds here too: a resumed study refits on every stored pair and may name
                # contenders its first run did not
                if clock.spent() or (budget.pairs is not None and study.spent() >= budget.pairs):
                    break
                if study.pairs_of(case, setup) < first_pairs:
                    clock.update(f"the model's contender {setup.label} on {case.name}")
                    study.measure(case, setup, first_pairs, share=True)
        stop, progress = _decide_and_measure(study, clock, budget, sample)
        return stop, progress, made.text(budget) if made is not None else None
    finally:
        clock.close()


def _every_length_first(study: StudyState, sample: _Sample, clock: Clock, first: list[Setup], rest: list[Setup],
                        budget: Budget, made: Plan | None, defaulted: bool,
                        first_pairs: int) -> tuple[list[Setup], Budget, Plan | None]:
    """The program counts no acceptance by draft position: the first pass measures every length
    (the prompts already taken get the others too). A default budget grows by what that adds; a
    given one too small for it is refused. Returns the first pass, the budget and the plan."""
    log.info("the program counts no acceptance by draft position: every length is measured first")
    categories = len({study.prompts[c.name] for c in study.cases})
    first = first + rest
    whole = least_pairs(len(study.cases), categories, len(first), first_pairs, study.over_prompts)
    if defaulted and budget.pairs is not None:
        grown = budget.pairs + len(rest) * first_pairs * max(1, made.prompts if made else 1)
        log.info("the default budget grows from %d to %d pairs: the first pass measures every length", budget.pairs, grown)
        budget = dataclasses.replace(budget, pairs=grown)
        clock.retarget(budget)
    if budget.pairs is not None and budget.pairs < whole:
        raise LlamaspecError(
            f"--budget {budget.pairs} pairs is too small: the program counts no acceptance by draft position, so the "
            f"first pass measures every length: {whole} pairs",
            hint=f"give at least --budget {whole} (the pairs measured are stored; the same command resumes), or a "
                 "program that counts positions: --program speculative-simple")
    if made is not None:
        made = plan(len(study.cases), categories, len(first), 0, study.prompt_seconds(len(first)), budget,
                    study.over_prompts)
        log.info("%s", made.text(budget))
    for case in sample.taken:
        for setup in rest:
            if study.pairs_of(case, setup) < first_pairs:
                clock.update(f"first pass: {setup.label} on {case.name}")
                study.measure(case, setup, first_pairs - study.pairs_of(case, setup), share=True)
    return first, budget, made


def _error_of(models: Sequence[decide.ModelView], key: object) -> float:
    return next((m.error for m in models if m.band(key) is not None), 0.0)


def _decide_and_measure(study: StudyState, clock: Clock, budget: Budget, sample: _Sample) -> tuple[str, str]:
    """Step 4 of the policy: measure what the decision asks for until it is settled or the budget ends."""
    last = -1
    while True:
        wd = study.decision()
        spent = study.spent()
        step = decide.next_step(wd.decision, spent, budget.pairs, study.measurable())
        if step.stop is None and spent == last:  # asked for pairs that nothing could add (a setup failed)
            step = decide.Step((), "nothing to measure", f"nothing left to measure: {wd.decision.sureness}")
        if step.stop is None and clock.spent() and budget.seconds is not None:
            step = decide.Step((), "budget", f"time budget spent ({duration(budget.seconds)}): {wd.decision.sureness}")
        log.info("%s", step.progress)
        if step.stop is not None:
            return step.stop, step.progress
        last = spent
        for r in step.requests:
            setup = study.by_key[str(r.key)]
            if study.over_prompts:
                todo = allocate_sampled(r.pairs, setup, wd, study, sample)
            else:
                have = {c.prompt: c.ratios for c in study.cells() if c.setup == setup.key and c.status == workload.OK}
                timed = [c.name for c in study.cases if study.left_out(c) is None]
                todo = [(study.by_name[p], n) for p, n in allocate(r.pairs, have, timed, wd.noise).items()]
            for case, n in todo:
                clock.update(f"{setup.label} on {case.name}: {n} more pair{'s' if n != 1 else ''}")
                study.measure(case, setup, n, share=True)
                if clock.spent():
                    break
            if clock.spent():
                break


def allocate(pairs: int, have: Mapping[str, Sequence[float]], prompts: Sequence[str], noise: float | None) -> dict[str, int]:
    """As the whole workload, where ``pairs`` more pairs of one setup go. A prompt without a pair of
    it gets one (all such prompts, whatever ``pairs`` says: the setup has no workload estimate
    without them). Otherwise each pair goes to the prompt whose next pair narrows the workload's
    interval most: the variance of a prompt's median falls like s^2/n, so the prompt with the
    largest s^2 (1/n - 1/(n+1)), s its own pair-to-pair noise (the study's pooled noise below two
    pairs)."""
    missing = [p for p in prompts if not have.get(p)]
    if missing:
        return {p: 1 for p in missing}
    n = {p: len(have[p]) for p in prompts}
    sd = {}
    for p in prompts:
        logs = [math.log(v) for v in have[p] if v > 0]
        sd[p] = statistics.stdev(logs) if len(logs) >= 2 else (noise if noise is not None else 1.0)
    out: dict[str, int] = {}
    for _ in range(max(0, pairs)):
        p = max(prompts, key=lambda q: (sd[q] ** 2 * (1 / n[q] - 1 / (n[q] + 1)), -n[q]))
        n[p] += 1
        out[p] = out.get(p, 0) + 1
    return out


# Where a study has not measured the noise yet: the sd of log speedups between prompts of one
# category, and between pairs on one prompt (the orders seen on the offline pair).
PROMPT_NOISE_GUESS, PAIR_NOISE_GUESS = 0.10, 0.05


def allocate_sampled(count: int, setup: Setup, wd: workload.WorkloadDecision, study: StudyState,
                     sample: _Sample) -> list[tuple[Case, int]]:
    """Over prompts, where ``count`` more of ``setup`` go. A timed sampled prompt without a pair of
    it gets one first (all of them: its estimate should rest on the prompts the others rest on).
    Otherwise each goes where it narrows the setup's interval most, by the variance of its estimate
    (per category c, weight w_c, prompts n_c, each prompt p with m_p pairs:
    w_c^2 / n_c^2 * sum over p of (b^2 + s^2 / m_p), b the between-prompt noise, s the pair noise):
    a prompt of a category not sampled yet (one pair), or one more pair on a sampled prompt."""
    timed = set(wd.timed)
    of = study.prompts
    have = {c.prompt: len(c.ratios) for c in study.cells()
            if c.setup == setup.key and c.status == workload.OK and c.ratios and c.prompt in timed}
    missing = [study.by_name[p] for p in study.touched if p in timed and p not in have]
    if missing:
        return [(c, 1) for c in missing]
    b2 = (wd.prompt_noise if wd.prompt_noise is not None else PROMPT_NOISE_GUESS) ** 2
    s2 = (wd.noise if wd.noise is not None else PAIR_NOISE_GUESS) ** 2
    counts: dict[str, int] = {}
    for f in wd.facts:
        if f.left_out is None:
            counts[f.category] = counts.get(f.category, 0) + 1
    total = sum(counts.values()) or 1
    weight = {c: n / total for c, n in counts.items()}
    m = dict(have)  # prompt -> pairs
    chosen: dict[str, int] = {}
    fresh: dict[str, list[Case]] = {}  # category -> prompts taken for this request

    def var(cat: str, extra: dict[str, int], new: int) -> float:
        ps = [p for p in m if of[p] == cat]
        n = len(ps) + new
        if not n:
            return math.inf
        total_ = sum(b2 + s2 / (m[p] + extra.get(p, 0)) for p in ps) + new * (b2 + s2)
        return weight.get(cat, 0.0) ** 2 * total_ / n ** 2

    for _ in range(max(0, count)):
        options: list[tuple[float, str, str | None]] = []  # (gain, category, prompt: None for a new one)
        for cat in weight:
            now = var(cat, chosen, len(fresh.get(cat, [])))
            nxt = sample.untried(cat)
            if nxt is not None and nxt not in fresh.get(cat, []):
                options.append((now - var(cat, chosen, len(fresh.get(cat, [])) + 1), cat, None))
            for p in (q for q in m if of[q] == cat):
                options.append((now - var(cat, {**chosen, p: chosen.get(p, 0) + 1}, len(fresh.get(cat, []))), cat, p))
        if not options:
            break
        _gain, cat, prompt = max(options, key=lambda o: (o[0], o[2] is None))
        if prompt is None:
            case = sample.untried(cat)
            if case is None:
                break
            sample.seen.add(case.name)
            fresh.setdefault(cat, []).append(case)
        else:
            chosen[prompt] = chosen.get(prompt, 0) + 1
    out = [(study.by_name[p], n) for p, n in chosen.items()]
    out += [(c, 1) for cases in fresh.values() for c in cases]
    return out


def fixed(study: StudyState, want: int) -> tuple[str, str]:
    """Every setup on every prompt, ``want`` pairs each, in passes (one pair of each per pass, prompt
    by prompt with the categories taking turns, the order rotating from pass to pass, so the
    machine's drift falls on every setup and category alike)."""
    clock = Clock(study, Budget(pairs=want * len(study.setups) * len(study.cases)), f"study {study.exp.name} (fixed grid)")
    queues = [list(q) for q in study.order().values()]  # prompt by prompt, the categories taking turns
    cases = [q.pop(0) for _ in range(len(study.cases)) for q in queues if q][:len(study.cases)]
    cells = [(c, s) for c in cases for s in study.setups]  # each setup spread over the pass
    try:
        if study.shared_baseline:  # one baseline per prompt, shared: each cell's pairs at once, cell after cell
            for case, setup in cells:
                if study.pairs_of(case, setup) == 0:
                    clock.update(f"{setup.label} on {case.name} ({want} pairs, shared baseline)")
                    study.measure(case, setup, want)
            return "fixed grid", f"every setup on every prompt, {want} pairs each, the baseline shared"
        for turn in range(want):
            rotated = cells[turn % len(cells):] + cells[:turn % len(cells)]
            for case, setup in rotated:
                if study.pairs_of(case, setup) <= turn:
                    clock.update(f"pass {turn + 1} of {want}: {setup.label} on {case.name}")
                    study.measure(case, setup, 1)
    finally:
        clock.close()
    return "fixed grid", f"every setup on every prompt, {want} pairs each"


__all__ = ["PLAN_SHARE", "TOO_SMALL", "Clock", "Plan", "adaptive", "allocate", "allocate_sampled", "first_pass",
           "fixed", "least_pairs", "plan"]
