"""A workload study: setups measured over a workload's prompts, then its one decision.

``llamaspec sweep -m T -md D`` (and ``sweep NAME``) measures here. A workload is the
experiment's cases, one prompt each (the built-in workload when no prompt is given, a prompt file,
or the one prompt of ``-p``); a setup is a sweep point (a draft length, a draft file, other
settings) or a draft-free n-gram mode (:mod:`llamaspec.studies.setups`); the target alone is the
baseline every pair carries. Every pair is stored as it is measured (:mod:`llamaspec.studies.state`),
so a rerun of the same command resumes with every pair it had, and each prompt's sweep report
and plots read them as any sweep's. How the budget is spent, prompt by prompt and setup by setup,
is :mod:`llamaspec.studies.policy`; what the answer speaks for (the prompts as a sample of the
workload, or as the whole of it; the prompts left out as too short to time or looping) is
:mod:`llamaspec.decision.workload`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import duration
from llamaspec.base.stats import percent_text
from llamaspec.decision import decide, workload
from llamaspec.measure import spectypes
from llamaspec.measure.contract import Engine
from llamaspec.store.results import Store
from llamaspec.store.rows import Group, run_meta
from llamaspec.studies import policy
from llamaspec.studies.budget import DEFAULT_BUDGET, DEFAULT_MINUTES, Budget
from llamaspec.studies.experiment import Experiment
from llamaspec.studies.grid import Point
from llamaspec.studies.policy import first_pass
from llamaspec.studies.setups import MODES_AXIS, Setup, cost_of, make_setup, setups_for
from llamaspec.studies.state import Drift, Load, StudyState, prompt_group

log = logging.getLogger(__name__)

# The draft lengths a study of -m/-md models weighs when none is given (the recordings' grid,
# benchmarks/decide.py): where the program counts acceptance by position only the longest two
# are measured first, and the model picks which of the others to measure.
DEFAULT_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16)


def study_id(exp: Experiment, axes: Sequence[str], identity: str, engine: str, fixed_grid: bool,
             over_prompts: bool = True, count_loops: bool = False) -> str:
    """Same experiment (its models, settings and prompts, by its sha256 or its file), the same kinds
    of setup, the same engine build, the same policy and the same meaning of its prompts: the
    same study, resumed."""
    blob = {"experiment": exp.name, "sha256": exp.sha256, "cases": [dataclasses.asdict(c) for c in exp.cases],
            "settings": dataclasses.asdict(exp.settings), "axes": sorted(axes), "engine": engine,
            "identity": identity, "repeats": exp.repeats, "policy": "fixed" if fixed_grid else "adaptive",
            "design": "blocks"}
    if not over_prompts or count_loops:  # the default study keeps the id it had before these options
        blob["scope"] = {"over_prompts": over_prompts, "count_loops": count_loops}
    digest = hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{exp.name}-{digest}"


@dataclass
class StudyResult:
    """How a study ended, and its one decision."""

    study_id: str
    experiment: str
    decision: workload.WorkloadDecision
    stop: str  # "settled" | "budget" | "nothing to measure" | "fixed grid"
    pairs: int  # pairs stored over the whole study (earlier, interrupted runs of it included)
    fixed_grid_pairs: int  # what measuring every setup on every prompt at the experiment's repeats costs
    seconds: float  # this invocation's measuring time
    last_progress: str
    skipped: tuple[tuple[str, str], ...] = ()  # what was not measured, and why
    runs: dict[tuple[str, str], int] = field(default_factory=dict)  # (prompt, setup key) -> its run id
    meta: dict[str, str] = field(default_factory=dict)  # target, draft, hardware, engine, build (rows.run_meta)
    plan: str | None = None  # how many prompts the budget times, as said once the first block gave the pace
    drift: Drift | None = None  # how the figures moved between the study's start and its end
    load: Load | None = None  # what else the machine did while it measured
    stopped: Mapping[str, str] = field(default_factory=dict)  # label -> why the study measured it no more
    block_seconds: float | None = None  # a later block's time at this machine's pace (the minutes more prompts cost)
    baseline_runs: tuple[int, ...] = ()  # the runs that keep the block baselines

    def run_of(self, setup: Hashable) -> int | None:
        """A stored run of ``setup`` (on the workload's first prompt that has one), for its deploy command."""
        return next((self.runs[(p, str(setup))] for p, _c in self.decision.prompts if (p, str(setup)) in self.runs), None)

    def any_run(self) -> int | None:
        return next(iter(self.runs.values()), None)

    def stop_text(self) -> str:
        why = decide.STOP_WORDS.get(self.stop, self.stop)
        share = f" ({percent_text(self.pairs / max(self.fixed_grid_pairs, 1))} of the fixed grid's {self.fixed_grid_pairs})"
        return f"study stopped: {why}, after {self.pairs} runs beside their baselines{share} in {duration(self.seconds)}"

    def render(self) -> str:
        d = self.decision
        m = self.meta
        lines = [f"study {self.study_id}: {self.experiment}"]
        if m:
            lines.append(f"  target {m['target']}, draft {m['draft']}; {m['hardware']}, {m['engine']}"
                         + (f", {m['build']}" if m.get("build") else ""))
        cats = list(dict.fromkeys(c for _p, c in d.prompts))
        lines.append(f"  workload: {len(d.prompts)} prompt{'s' if len(d.prompts) != 1 else ''}"
                     + (f" in {len(cats)} categories" if len(cats) > 1 else "")
                     + "; each setup's speedup over the target alone (the workload's, then each category's)")
        if m.get("traffic") == "warm":
            lines.append("  warm traffic: one long-lived llama-server per setup, the prompts in turn, repeats allowed, as "
                         "a deployed server serves them; a cold study (the default) times a mode that keeps state on a fresh server "
                         "each request")
        if self.plan:
            lines.append(f"  {self.plan}")
        lines += d.table()
        reasons: dict[str, list[str]] = {}
        for what, why in self.skipped:
            reasons.setdefault(why, []).append(what)
        lines += [f"  skipped {', '.join(whats)}: {why}" for why, whats in reasons.items()]
        lines += [f"  measured no more: {label}: {why}" for label, why in self.stopped.items()]
        if self.drift is not None:
            lines.append(f"  {self.drift.text()}")
        if self.load is not None and (said := self.load.text()):
            lines.append(f"  {said}")
        lines += ["", self.stop_text(), *d.lines()]
        if (more := self.settle_text()) is not None:
            lines.insert(lines.index(f"  how sure: {d.decision.sureness}") + 1, f"  {more}")
        return "\n".join(lines)

    def settle_minutes(self) -> tuple[int, int] | None:
        """Undecided: (more prompts, minutes at this machine's pace) for the decision's odds of
        showing its best bet's gain (``Decision.prompts_to_settle``); None where that is unknown."""
        need, pace = self.decision.decision.prompts_to_settle, self.block_seconds
        if need is None or not pace or self.decision.decision.unit != "prompts":
            return None
        more = max(0, need - len(self.decision.timed))
        return more, max(1, math.ceil(more * pace / 60))

    def settle_text(self) -> str | None:
        got = self.settle_minutes()
        if got is None or not got[0]:
            return None
        more, minutes = got
        return (f"to settle: about {more} more prompts, about {minutes} min at this machine's pace "
                f"({duration(self.block_seconds or 0.0)} a prompt); the same command with --budget {minutes}m continues "
                "this study")

    def as_dict(self) -> dict[str, Any]:
        return {"study_id": self.study_id, "experiment": self.experiment, "stop": self.stop, "pairs": self.pairs,
                "fixed_grid_pairs": self.fixed_grid_pairs, "seconds": self.seconds, "last_progress": self.last_progress,
                "plan": self.plan, "drift": self.drift.to_dict() if self.drift else None,
                "load": self.load.to_dict() if self.load else None, "stopped": dict(self.stopped),
                "block_seconds": self.block_seconds,
                "to_settle": dict(zip(("prompts", "minutes"), got, strict=True)) if (got := self.settle_minutes()) else None,
                "answer": workload.verdict_text(self.decision.decision),
                "skipped": [{"what": w, "why": y} for w, y in self.skipped], "meta": self.meta, **self.decision.to_dict(),
                "runs": [{"prompt": p, "setup": s, "run_id": r} for (p, s), r in self.runs.items()]}


def fixed_pairs(exp: Experiment, setups: Sequence[Setup]) -> int:
    return pairs_per_point(exp) * len(setups) * len(exp.cases)


def categories_of(exp: Experiment) -> int:
    return len({c.category or c.name for c in exp.cases})


def run_study(exp: Experiment, setups: Sequence[Setup], engine: Engine, store: Store, budget: Budget | None = None, *,
              fixed_grid: bool = False, over_prompts: bool = True, count_loops: bool = False, time_costs: bool = True,
              on_event: Callable[[str, dict[str, Any]], None] | None = None,
              clock: Callable[[], float] = time.monotonic) -> StudyResult:
    """Measure ``setups`` over ``exp``'s prompts (its cases), in blocks, and decide once
    (:mod:`llamaspec.studies.policy`).

    ``budget``: runs (a setup's speculative run in a block, with its baselines) or measuring time
    for the whole study (None: :data:`llamaspec.studies.budget.DEFAULT_BUDGET`, grown where it times too few prompts); a
    budget of runs below the first block is refused before anything is measured. ``over_prompts``:
    the prompts are a sample of the workload (False: ``--whole-workload``, they are the whole of it);
    ``count_loops``: a prompt whose target output loops counts in the decision; ``time_costs``: the
    speedup model's timings (False: none, ``run``'s one setting has no other length to predict).
    Every run is stored as it is measured. ``clock``: what a time budget is counted on (a replay
    counts the recorded time of the runs it drew)."""
    axes = sorted({a for s in setups for a, _v in s.point.values})
    over_prompts = sampled(exp, over_prompts)
    sid = study_id(exp, axes, engine.identity(), engine.name, fixed_grid, over_prompts, count_loops)
    study = StudyState(exp, setups, engine, store, sid, on_event, clock, over_prompts=over_prompts,
                       count_loops=count_loops, time_costs=time_costs)
    skipped = study.check()
    if not study.setups:
        raise LlamaspecError("nothing left to measure: every setup was skipped",
                             hint="; ".join(f"{w}: {y}" for w, y in skipped) or "give --draft 1..16")
    defaulted = budget is None
    budget = budget or DEFAULT_BUDGET
    least = len(first_pass(study.setups))
    if not fixed_grid and budget.pairs is not None and budget.pairs < least:
        raise LlamaspecError(f"--budget {budget.pairs} runs is too small: the first block alone measures {least} "
                             f"(one of each first setup on one prompt, beside its baselines)",
                             hint=f"give at least --budget {least}, or a time such as --budget {DEFAULT_MINUTES}m")
    log.info("study %s: %d setups (%s) over a workload of %d prompts in %d categories; %s", sid, len(study.setups),
             ", ".join(s.label for s in study.setups), len(exp.cases), categories_of(exp),
             "every setup on every prompt" if fixed_grid else f"within {budget.text()}")
    made: str | None = None
    stopped: dict[str, str] = {}
    if fixed_grid:
        stop, progress = policy.fixed(study, pairs_per_point(exp))
    else:
        stop, progress, made, stopped = policy.adaptive(study, budget, defaulted)
        if budget.pairs is None or study.spent() < budget.pairs:  # the drift's prompt, within a budget of runs
            study.measure_anchor(study.setups)
    runs = study.runs()
    meta = run_meta(store.run(next(iter(runs.values())))) if runs else {}
    load = study.load()
    result = StudyResult(sid, exp.name, answer(study, load, stopped), stop, study.spent(),
                         fixed_pairs(exp, study.setups), study.seconds, progress, tuple(skipped), runs, meta, made,
                         study.drift(), load, stopped,
                         study.block_seconds(max(1, len(study.setups) if fixed_grid else 2)), study.baseline_runs())
    keep(store, exp, result)
    return result


def pairs_per_point(exp: Experiment) -> int:
    """The pairs a fixed grid measures at each point: the experiment's repeats (3 for 'auto')."""
    return exp.repeats if isinstance(exp.repeats, int) else 3


def sampled(exp: Experiment, over_prompts: bool = True) -> bool:
    """Whether a study's prompts are a sample of the workload: one prompt is its own workload (-p,
    the write-up's form)."""
    return over_prompts and len(exp.cases) > 1


def stored_decision(exp: Experiment, setups: Sequence[Setup], store: Store, sid: str, load: Load, *,
                    stopped: Mapping[str, str] | None = None, over_prompts: bool = True, count_loops: bool = False,
                    where: str = "") -> workload.WorkloadDecision:
    """The decision :func:`run_study` makes, made again from the study's points as stored (``where``:
    the suffix of their groups, ``@MACHINE`` for a cluster study's on the coordinator): the same
    state, cells, speedup model, scope, hold and setups measured no more (``stopped``, as the study
    stored them: :attr:`StudyResult.stopped`), no engine."""
    state = StudyState(exp, setups, None, store, sid, None, over_prompts=sampled(exp, over_prompts),
                       count_loops=count_loops, where=where)
    return answer(state, load, stopped or {})


def answer(state: StudyState, load: Load, stopped: Mapping[str, str]) -> workload.WorkloadDecision:
    """The study's decision, held undecided where the load changed while it measured
    (:attr:`Load.changed`: no decision across a change of conditions, its figures kept), and asking
    for no more prompts of a setup the study stopped measuring (it says why apart): an answer that
    asked for them would send a rerun after what it will not measure."""
    wd = state.decision()
    d = wd.decision
    if load.changed and d.verdict in ("recommend", "no draft"):
        d = dataclasses.replace(d, verdict="undecided", settled=False, reason=load.text() or "the load changed while it measured")
    return dataclasses.replace(wd, decision=dataclasses.replace(d, requests=tuple(r for r in d.requests if r.label not in stopped)))


def keep(store: Store, exp: Experiment, result: StudyResult) -> int:
    """The study's decision stored as it was made (a row of kind ``rows.STUDY_KIND`` in the
    study's group): ``report`` shows the newest, the same text the command printed."""
    from llamaspec.store.rows import STUDY_KIND

    run_id = store.start_run(experiment=exp.name, case_name="workload", settings=exp.settings.to_dict(),
                             provenance={"study": result.study_id, "prompts": dict(result.decision.prompts)},
                             kind=STUDY_KIND, group=Group("study", result.study_id), point_key="decision")
    store.finish_run(run_id, "ok", {"study": result.as_dict(), "text": result.render()})
    return run_id


def sweep_setups(exp: Experiment, engine: Engine, axes: Mapping[str, Sequence[Any]],
              modes: Sequence[str] | None = None) -> tuple[Setup, ...]:
    """The setups ``sweep`` weighs: the grid of ``axes`` (each draft file named as the study names
    it), then the draft-free modes (:func:`modes_for`)."""
    from llamaspec.studies import adhoc

    return setups_for(axes, modes_for(engine, modes), adhoc.draft_names(exp))


def own_setup(exp: Experiment) -> Setup:
    """The setting ``exp``'s cases run, as the one setup of a study (``run`` over a workload's
    prompts): their draft-free mode, or the draft at their draft length."""
    s = exp.cases[0].settings.with_defaults()
    return make_setup(Point(((MODES_AXIS, s.spec_type),) if spectypes.of(s.spec_type).draft_free
                            else (("draft_max", s.draft_max),)))


def sample_runs(exp: Experiment) -> int:
    """The runs ``run`` measures of a workload's prompts: a block each (the target alone, the
    setting, the target alone again) times the blocks a prompt gets."""
    return 3 * pairs_per_point(exp) * len(exp.cases)


def sample_plan(exp: Experiment, setup: Setup) -> str:
    """What ``run`` measures of a workload's prompts, said before it measures: the prompts by
    category, the blocks and their runs, and how to ask for more."""
    cats, blocks, n = list(dict.fromkeys(c.category or c.name for c in exp.cases)), pairs_per_point(exp), len(exp.cases)
    return (f"plan: {n} prompt{'s' if n != 1 else ''} in {len(cats)} categories ({', '.join(cats)}), {blocks} block"
            f"{'s' if blocks != 1 else ''} each (the target alone, {setup.label}, the target alone again): {sample_runs(exp)} "
            f"runs of {exp.cases[0].settings.with_defaults().n_predict} tokens after a warm-up; the time left is said after "
            "each run; more prompts: --per-category N, more blocks: --repeats N, every prompt and other settings: "
            "`llamaspec sweep`")


def modes_for(engine: Engine, asked: Sequence[str] | None = None) -> tuple[str, ...]:
    """The draft-free modes a study weighs: those asked for (a mode the engine does not run is
    skipped when the study checks its setups, and said), or every one the engine declares."""
    if asked is not None:
        return tuple(asked)
    return spectypes.draft_free_modes(engine.capabilities)


def deployment(result: StudyResult, engine: Engine, exp: Experiment, store: Store) -> Any:
    """The command that deploys the study's answer: the recommended setup, or the target alone
    when the answer is "no draft"; None while it is undecided (measure first) or nothing finished."""
    from llamaspec.studies import deploy

    d = result.decision
    if d.verdict == "recommend" and d.chosen is not None:
        run_id = result.run_of(d.chosen.key)
        return deploy.for_run(engine, exp, store.run(run_id)) if run_id is not None else None
    if d.verdict == "no draft" and (run_id := result.any_run()) is not None:
        return deploy.for_run(engine, exp, store.run(run_id), speculative=False)
    return None


__all__ = ["DEFAULT_LENGTHS", "MODES_AXIS", "Setup", "StudyResult", "cost_of", "first_pass",
           "make_setup", "prompt_group", "run_study", "setups_for", "sweep_setups", "stored_decision", "study_id"]
