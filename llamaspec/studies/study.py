"""A workload study: setups measured over a workload's prompts, then its one decision.

``llamaspec sweep -m T -md D`` (and ``tune``, and ``sweep NAME``) measures here. A workload is the
experiment's cases, one prompt each (the built-in workload when no prompt is given, or the one
prompt of ``-p``); a setup is a sweep point (a draft length, a draft file, other settings) or a
draft-free n-gram mode; the target alone is the baseline every pair carries. Every pair is stored
as it is measured (kind 'sweep'; each prompt's setups are a sweep of their own, ``STUDY/PROMPT``,
its points keyed as a sweep's), so a rerun of the same command resumes with every pair it had,
and each prompt's sweep report and plots read them as any sweep's.

The adaptive policy (benchmarks/decide.py replays it on recordings):

1. **First pass**, one pair of each on every prompt: the draft-free modes, and the longest
   :data:`llamaspec.studies.sweep.FIRST_LONGEST` draft lengths where the program counts acceptance by
   draft position (their rounds cover every shorter position, so the per-position curve and the
   cost timings predict every other length), else every length.
2. **The model's contenders**: the lengths it predicts within its error of its best (at most
   ``decide.MAX_REQUESTS``), one pair on every prompt.
3. **What the decision asks for** (:func:`llamaspec.decision.decide.next_step` on the workload's decision):
   a setup not measured on every prompt gets a pair on each prompt that lacks one; more pairs for
   a setup go to the prompts whose own noise most widens its interval (:func:`allocate`), until
   the decision is settled or the study's budget is spent.

``fixed_grid`` measures every setup on every prompt with the experiment's repeats instead, in
passes (a pair of every setup on every prompt per pass, the order rotating).

Its size: a study's setups and their costs, its state while it is measured (the store's cells,
each prompt's refitted model, the pace), its two policies, and its result with the deploy
command: each part reads the one before it, and the policies are what benchmarks/decide.py
replays, so they stay beside the state they drive.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.host import NoiseSample
from llamaspec.base.progress import Progress, duration
from llamaspec.decision import decide, workload, workload_runs
from llamaspec.measure.contract import Engine, ResolvedCase
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Group, Store
from llamaspec.studies.experiment import Case, Experiment
from llamaspec.studies.run import check_settings, more_pairs, resolve_case, run_case
from llamaspec.studies.sweep import FIRST_LONGEST, Budget, Point, grid, pairs_per_point

log = logging.getLogger(__name__)

# The draft lengths a study of -m/-md models weighs when none is given (the recordings' grid,
# benchmarks/decide.py): where the program counts acceptance by position only the longest two
# are measured first, and the model picks which of the others to measure.
DEFAULT_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16)
# The bootstrap refits of each prompt's speedup model band (analysis.BOOTSTRAP_REFITS for a sweep's
# report): the study refits after every step, on every prompt whose points changed, and takes the
# band's ends over the prompts, which a coarser percentile of each moves little.
STUDY_REFITS = 100
# The whole study's budget when none is given: DEFAULT_SHARE of the fixed grid's pairs (every setup on
# every prompt at the experiment's repeats), and at most DEFAULT_SECONDS of measuring.
DEFAULT_SHARE = 0.4
DEFAULT_SECONDS = 240.0
DEFAULT_BUDGET_TEXT = "4m"
# A time budget is refused once the first pair says the first pass would take more than this many
# times it (one pair's time is a rough guide: the first pass's setups differ in cost); below that,
# the first pass is measured whole and the output says the budget was short.
TOO_SMALL = 1.5
MODES_AXIS = "spec_type"


@dataclass(frozen=True)
class Setup:
    """One setup of a study: a sweep point (draft length, draft file, other settings) or a draft-free mode."""

    point: Point
    label: str

    @property
    def key(self) -> str:
        return self.point.key

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.point.values)

    @property
    def draft_free(self) -> bool:
        return self.values.get(MODES_AXIS, "draft") != "draft"

    @property
    def length(self) -> int | None:
        k = self.values.get("draft_max")
        return None if self.draft_free or k is None else int(k)

    @property
    def group(self) -> tuple[tuple[str, Any], ...]:
        """The settings the speedup model is fitted over (everything but the draft length)."""
        return tuple((a, v) for a, v in self.point.values if a != "draft_max")

    def with_length(self, k: int) -> Setup:
        values = tuple((a, k if a == "draft_max" else v) for a, v in self.point.values)
        return make_setup(Point(values), self._draft_names)

    _draft_names: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


def make_setup(point: Point, draft_names: Mapping[str, str] | None = None) -> Setup:
    names = dict(draft_names or {})
    values = dict(point.values)
    mode = values.get(MODES_AXIS)
    if mode not in (None, "draft"):
        label = str(mode)
    else:
        parts = [f"draft {values['draft_max']}" if "draft_max" in values else "draft"]
        extra = [names.get(str(v), str(v)) if a == "draft_variant" else f"{a}={v}"
                 for a, v in point.values if a not in ("draft_max", MODES_AXIS)]
        label = parts[0] + (f" ({', '.join(extra)})" if extra else "")
    return Setup(point, label, names)


def setups_for(axes: Mapping[str, Sequence[Any]], modes: Sequence[str] = (),
               draft_names: Mapping[str, str] | None = None) -> tuple[Setup, ...]:
    """The grid of ``axes`` (draft lengths, draft files, other settings), then each draft-free mode."""
    found = [make_setup(p, draft_names) for p in grid(axes)] if axes else []
    found += [make_setup(Point(((MODES_AXIS, m),)), draft_names) for m in modes]
    if not found:
        raise LlamaspecError("nothing to measure: no draft length and no draft-free mode",
                             hint="give --draft 1..16, or a draft-free mode with --modes ngram-simple")
    return tuple(found)


def cost_of(setup: Setup, draft_bytes: int = 0) -> tuple[float, ...]:
    """Smaller is cheaper (:func:`llamaspec.decision.workload_runs.cost`: a draft-free mode, then the
    shorter draft length, then the smaller draft file)."""
    return workload_runs.cost(setup.draft_free, setup.length, draft_bytes)


def study_id(exp: Experiment, axes: Sequence[str], identity: str, engine: str, fixed_grid: bool) -> str:
    """Same experiment (its models, settings and prompts, by its sha256 or its file), the same kinds
    of setup, the same engine build and the same policy: the same study, resumed."""
    blob = {"experiment": exp.name, "sha256": exp.sha256, "cases": [dataclasses.asdict(c) for c in exp.cases],
            "settings": dataclasses.asdict(exp.settings), "axes": sorted(axes), "engine": engine,
            "identity": identity, "repeats": exp.repeats, "policy": "fixed" if fixed_grid else "adaptive"}
    digest = hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{exp.name}-{digest}"


def prompt_group(sid: str, prompt: str) -> str:
    """The group (a sweep of its own) of one prompt's setups in study ``sid``."""
    return f"{sid}/{prompt}"


def allocate(pairs: int, have: Mapping[str, Sequence[float]], prompts: Sequence[str], noise: float | None) -> dict[str, int]:
    """Where ``pairs`` more pairs of one setup go. A prompt without a pair of it gets one (all such
    prompts, whatever ``pairs`` says: the setup has no workload estimate without them). Otherwise
    each pair goes to the prompt whose next pair narrows the workload's interval most: the
    variance of a prompt's median falls like s^2/n, so the prompt with the largest
    s^2 (1/n - 1/(n+1)), s its own pair-to-pair noise (the study's pooled noise below two pairs)."""
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
    meta: dict[str, str] = field(default_factory=dict)  # target, draft, hardware, engine, build (analysis.run_meta)

    def run_of(self, setup: Hashable) -> int | None:
        """A stored run of ``setup`` (on the workload's first prompt that has one), for its deploy command."""
        return next((self.runs[(p, str(setup))] for p, _c in self.decision.prompts if (p, str(setup)) in self.runs), None)

    def any_run(self) -> int | None:
        return next(iter(self.runs.values()), None)

    def stop_text(self) -> str:
        why = decide.STOP_WORDS.get(self.stop, self.stop)
        share = f" ({self.pairs / max(self.fixed_grid_pairs, 1):.0%} of the fixed grid's {self.fixed_grid_pairs})"
        return f"study stopped: {why}, after {self.pairs} pairs{share} in {duration(self.seconds)}"

    def render(self) -> str:
        d = self.decision
        m = self.meta
        lines = [f"study {self.study_id}: {self.experiment}"]
        if m:
            lines.append(f"  target {m['target']}, draft {m['draft']}; {m['hardware']}, {m['engine']}"
                         + (f", {m['build']}" if m.get("build") else ""))
        lines.append(f"  workload: {len(d.prompts)} prompt{'s' if len(d.prompts) != 1 else ''}; each setup's speedup over "
                     "the target alone (the workload's, then each prompt's)")
        lines += d.table()
        reasons: dict[str, list[str]] = {}
        for what, why in self.skipped:
            reasons.setdefault(why, []).append(what)
        lines += [f"  skipped {', '.join(whats)}: {why}" for why, whats in reasons.items()]
        lines += ["", self.stop_text(), *d.lines()]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"study_id": self.study_id, "experiment": self.experiment, "stop": self.stop, "pairs": self.pairs,
                "fixed_grid_pairs": self.fixed_grid_pairs, "seconds": self.seconds, "last_progress": self.last_progress,
                "skipped": [{"what": w, "why": y} for w, y in self.skipped], "meta": self.meta, **self.decision.to_dict(),
                "runs": [{"prompt": p, "setup": s, "run_id": r} for (p, s), r in self.runs.items()]}


class _Study:
    """One study being measured: its cells in the store, its pace, its decision."""

    def __init__(self, exp: Experiment, setups: Sequence[Setup], engine: Engine, store: Store, sid: str,
                 on_event: Callable[[str, dict[str, Any]], None] | None, shared_baseline: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from llamaspec.base import host

        self.exp, self.setups, self.engine, self.store, self.sid = exp, list(setups), engine, store, sid
        self.by_key = {s.key: s for s in self.setups}
        self.cases: list[Case] = list(exp.cases)
        self.prompts = {c.name: c.category or c.name for c in self.cases}
        self.hw = host.hardware()
        self.on_event = on_event
        self.resolved: dict[tuple[str, str], ResolvedCase] = {}
        self.failed: dict[tuple[str, str], str] = {}
        self.measured_here = 0  # pairs this invocation measured
        self.seconds = 0.0  # ... and the time they took, warm-up and cost timings included
        self.pair_time = 0.0  # the pairs' own generations (baseline and speculative), for the pace
        self.warm = False
        self.noise: NoiseSample | None = None  # the machine during the last pairs measured (steal, other load)
        self.shared_baseline = shared_baseline
        self.clock = clock
        self._fits: dict[tuple[str, Any], tuple[Any, list[workload.Prediction]]] = {}  # refitted only when points change

    def group(self, case: Case) -> str:
        return prompt_group(self.sid, case.name)

    def resolve(self, case: Case, setup: Setup) -> ResolvedCase:
        key = (case.name, setup.key)
        if key not in self.resolved:
            rc = resolve_case(self.exp, setup.point.apply(case), self.engine)
            self.resolved[key] = dataclasses.replace(rc, prompt_id=case.name, category=case.category or case.name)
        return self.resolved[key]

    def check(self) -> list[tuple[str, str]]:
        """Refuse settings the build does not take before anything is measured; a draft-free mode
        the program cannot run is skipped, and said."""
        skipped = []
        offered = self.engine.capabilities.spec_types
        for setup in list(self.setups):
            mode = setup.values.get(MODES_AXIS)
            if setup.draft_free and mode not in offered:
                runs = ", ".join(m for m in offered if m != "draft") or "none"
                skipped.append((setup.label, f"the {self.engine.name} engine does not run it here (its draft-free modes: {runs})"))
                self.setups.remove(setup)
                continue
            for case in self.cases:
                rc = self.resolve(case, setup)
                try:
                    check_settings(rc, self.engine)
                    self.engine.check(rc)
                except LlamaspecError as exc:
                    if not setup.draft_free:
                        raise
                    skipped.append((setup.label, f"{exc.message} ({exc.hint})" if exc.hint else exc.message))
                    self.setups.remove(setup)
                    break
        self.by_key = {s.key: s for s in self.setups}
        return skipped

    def row(self, case: Case, setup: Setup) -> dict[str, Any] | None:
        return self.store.finished_point(self.group(case), setup.key)

    def pairs_of(self, case: Case, setup: Setup) -> int:
        row = self.row(case, setup)
        return Summary.from_dict(row.get("summary")).pairs if row else 0

    def measure(self, case: Case, setup: Setup, pairs: int) -> None:
        """``pairs`` more pairs of ``setup`` on ``case``'s prompt (its first ones start the run)."""
        if (case.name, setup.key) in self.failed or pairs < 1:
            return
        rc = self.resolve(case, setup)
        row = self.row(case, setup)
        start = self.clock()
        if row is None:
            result = run_case(rc, self.engine, self.store, repeats=pairs, hardware=self.hw, exp=self.exp, kind="sweep",
                              group=Group("sweep", self.group(case)), point_key=setup.key,
                              baseline_scope=self.sid, time_costs=not setup.draft_free, warmup=not self.warm,
                              shared_baseline=self.shared_baseline, on_event=self.on_event)
            self.warm = True
        else:
            result = more_pairs(row["id"], rc, self.engine, self.store, pairs, baseline_scope=self.sid,
                                on_event=self.on_event)
        self.seconds += self.clock() - start
        self.measured_here += pairs
        self.noise = result.summary.noise or self.noise
        sides = [m for m in result.measurements if m.mode in ("baseline", "speculative") and m.pair is not None]
        new = set(sorted({m.pair for m in sides if m.pair is not None})[-pairs:])  # this call's pairs: the last indices
        self.pair_time += sum(m.wall_seconds or 0.0 for m in sides if m.pair in new)
        if result.status == "failed":
            self.failed[(case.name, setup.key)] = result.error or "failed"
            log.warning("%s failed on %s: %s (it is left out of the decision; every pair measured is stored)",
                        setup.label, case.name, result.error)

    @property
    def pair_seconds(self) -> float | None:
        """A pair's time so far: its two generations, not the warm-up or the cost timings a
        prompt's first draft pair takes once."""
        return self.pair_time / self.measured_here if self.measured_here and self.pair_time else None

    def cells(self) -> list[workload.Cell]:
        """The study's cells: its stored rows through the one runs-to-cells function
        (:func:`llamaspec.decision.workload_runs.workload_of_runs`), each named by the setup it was measured
        for; a setup that failed on a prompt, by its failure."""
        measured = [(s, r) for s in self.setups for c in self.cases
                    if (c.name, s.key) not in self.failed and (r := self.row(c, s)) is not None]
        by_run = {r["id"]: s for s, r in measured}

        def setup_of(run: Mapping[str, Any]) -> workload_runs.RunSetup:
            s = by_run[run["id"]]
            return workload_runs.RunSetup(s.key, s.label, cost_of(s, workload_runs.draft_bytes(run)))

        out, _prompts = workload_runs.workload_of_runs([r for _s, r in measured], setup_of)
        for (name, key), why in self.failed.items():
            setup = self.by_key.get(key) or next(s for s in self.setups if s.key == key)
            out.append(workload.Cell(name, key, setup.label, (), cost_of(setup), "failed", why))
        return out

    def predictions(self) -> list[workload.Prediction]:
        """Each prompt's speedup model, fitted to its draft setups, at every length of the grid."""
        lengths = sorted({s.length for s in self.setups if s.length is not None})
        out = []
        for case in self.cases:
            rows = [(s, r) for s in self.setups if not s.draft_free and (r := self.row(case, s)) is not None]
            by_group: dict[tuple[tuple[str, Any], ...], list[dict[str, Any]]] = {}
            for s, r in rows:
                by_group.setdefault(s.group, []).append(r)
            for group, runs in by_group.items():
                state = tuple(sorted((r["id"], Summary.from_dict(r.get("summary")).pairs) for r in runs))
                cached = self._fits.get((case.name, group))
                if cached is None or cached[0] != state:
                    cached = (state, self._fit(case, group, runs, lengths))
                    self._fits[(case.name, group)] = cached
                out += cached[1]
        return out

    def _fit(self, case: Case, group: Any, runs: list[dict[str, Any]], lengths: list[int]) -> list[workload.Prediction]:
        from llamaspec.base import paths
        from llamaspec.views import analysis
        report = analysis.report_for_runs(self.store, runs, self.sid, ["draft_max"], False,
                                          paths.plots_dir() / self.sid, grid=lengths, refits=STUDY_REFITS)
        template = next(s for s in self.setups if s.group == group and not s.draft_free)
        out = []
        for g in report.groups:
            if g.view is None:
                continue
            for band in g.view.bands:
                k = int(band.key[1]) if isinstance(band.key, tuple) else int(band.key)  # type: ignore[call-overload]
                setup = template.with_length(k)
                out.append(workload.Prediction(case.name, setup.key, setup.label, repr(group), band.predicted,
                                               band.low, band.high, g.view.error,
                                               cost_of(setup, int(band.cost[1]) if len(band.cost) > 1 else 0)))
        return out

    def decision(self) -> workload.WorkloadDecision:
        return workload.decide_workload(self.cells(), self.prompts, self.predictions())

    def spent(self) -> int:
        return sum(len(c.ratios) for c in self.cells())

    def counts_positions(self) -> bool:
        """Whether every draft setup measured so far counted acceptance by draft position."""
        found = [Summary.from_dict(r.get("summary")) for s in self.setups if not s.draft_free
                 for c in self.cases if (r := self.row(c, s)) is not None]
        found = [s for s in found if s.n_drafted]
        return bool(found) and all(s.drafted_by_position for s in found)

    def measurable(self) -> list[str]:
        """The setups more pairs may go to: every one that has not failed on a prompt."""
        failed = {key for _case, key in self.failed}
        return [s.key for s in self.setups if s.key not in failed]

    def runs(self) -> dict[tuple[str, str], int]:
        return {(c.name, s.key): r["id"] for s in self.setups for c in self.cases if (r := self.row(c, s)) is not None}


def first_pass(setups: Sequence[Setup], by_position: bool = True) -> list[Setup]:
    """The setups measured first: every draft-free mode, and per draft group its
    :data:`FIRST_LONGEST` longest lengths (``by_position``) or every length, longest first."""
    out = [s for s in setups if s.draft_free]
    groups: dict[Any, list[Setup]] = {}
    for s in setups:
        if not s.draft_free:
            groups.setdefault(s.group, []).append(s)
    for members in groups.values():
        ranked = sorted(members, key=lambda s: -(s.length or 0))
        out += ranked[:FIRST_LONGEST] if by_position else ranked
    return out


def fixed_pairs(exp: Experiment, setups: Sequence[Setup]) -> int:
    return pairs_per_point(exp) * len(setups) * len(exp.cases)


def default_budget(exp: Experiment, setups: Sequence[Setup], least: int) -> Budget:
    """:data:`DEFAULT_SHARE` of the fixed grid's pairs, rounded down (at least the first pass), within
    :data:`DEFAULT_SECONDS` of measuring."""
    return Budget(pairs=max(least, math.floor(DEFAULT_SHARE * fixed_pairs(exp, setups))), seconds=DEFAULT_SECONDS)


def least_budget(exp: Experiment, setups: Sequence[Setup], first_pairs: int = 1) -> int:
    """The fewest pairs a study can decide on: its first pass, ``first_pairs`` of each first setup on every prompt."""
    return first_pairs * len(first_pass(setups)) * len(exp.cases)


def run_study(exp: Experiment, setups: Sequence[Setup], engine: Engine, store: Store, budget: Budget | None = None, *,
              fixed_grid: bool = False, first_pairs: int = 1, shared_baseline: bool = False,
              on_event: Callable[[str, dict[str, Any]], None] | None = None,
              clock: Callable[[], float] = time.monotonic) -> StudyResult:
    """Measure ``setups`` over ``exp``'s prompts (its cases) and decide once (the module's policy).

    ``budget``: pairs or measuring time for the whole study (None: :func:`default_budget`); a pairs
    budget below the first pass is refused before anything is measured, a time budget once the
    first pair says how long a pair takes. Every pair is stored as it is measured. ``clock``: what a
    time budget is counted on (a replay counts the recorded time of the pairs it drew)."""
    axes = sorted({a for s in setups for a, _v in s.point.values})
    fixed_grid = fixed_grid or shared_baseline  # a shared baseline is a cost saver for the fixed grid
    sid = study_id(exp, axes, engine.identity(), engine.name, fixed_grid) + ("-shared" if shared_baseline else "")
    study = _Study(exp, setups, engine, store, sid, on_event, shared_baseline, clock)
    skipped = study.check()
    if not study.setups:
        raise LlamaspecError("nothing left to measure: every setup was skipped",
                             hint="; ".join(f"{w}: {y}" for w, y in skipped) or "give --draft 1..16")
    least = least_budget(exp, study.setups, first_pairs)
    defaulted = budget is None
    budget = budget or default_budget(exp, study.setups, least)
    if not fixed_grid and budget.pairs is not None and budget.pairs < least:
        raise LlamaspecError(f"--budget {budget.pairs} pairs is too small: the first pass alone measures {least} "
                             f"({first_pairs} pair{'s' if first_pairs != 1 else ''} of {len(first_pass(study.setups))} "
                             f"setups on each of {len(exp.cases)} prompts)",
                             hint=f"give at least --budget {least}, or a time such as --budget {DEFAULT_BUDGET_TEXT}")
    log.info("study %s: %d setups (%s) over %d prompts (%s); %s", sid, len(study.setups),
             ", ".join(s.label for s in study.setups), len(exp.cases), ", ".join(study.prompts),
             "every setup on every prompt" if fixed_grid else
             f"first {least} pairs, then what the decision asks for, within {budget.text()}")
    if fixed_grid:
        stop, progress = _fixed(study, pairs_per_point(exp))
    else:
        stop, progress = _adaptive(study, budget, first_pairs, defaulted)
    from llamaspec.views import analysis

    runs = study.runs()
    meta = analysis.run_meta(store, next(iter(runs.values()))) if runs else {}
    result = StudyResult(sid, exp.name, study.decision(), stop, study.spent(), fixed_pairs(exp, study.setups),
                         study.seconds, progress, tuple(skipped), runs, meta)
    keep(store, exp, result)
    return result


def keep(store: Store, exp: Experiment, result: StudyResult) -> int:
    """The study's decision stored as it was made (a row of kind ``results.STUDY_KIND`` in the
    study's group): ``report`` shows the newest, the same text the command printed."""
    from llamaspec.store.results import STUDY_KIND

    run_id = store.start_run(experiment=exp.name, case_name="workload", settings=exp.settings.to_dict(),
                             provenance={"study": result.study_id, "prompts": dict(result.decision.prompts)},
                             kind=STUDY_KIND, group=Group("study", result.study_id), point_key="decision")
    store.finish_run(run_id, "ok", {"study": result.as_dict(), "text": result.render()})
    return run_id


class _Clock:
    """The study's progress line: pairs, the pace, and what is left of the budget."""

    def __init__(self, study: _Study, budget: Budget | None, label: str) -> None:
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


def _announce(study: _Study, first: int, budget: Budget, defaulted: bool = False) -> None:
    """Once the first pair says how long a pair takes: the first pass's time, and a time budget
    that cannot pay for it refused (what is measured stays stored). ``defaulted``: the budget is
    the default one, and the refusal says so; where other processes held the CPU during the pair,
    it says that too (on a busy machine a pair at several threads can take many times longer)."""
    pace = study.pair_seconds
    if pace is None:
        return
    need = first * pace
    log.info("about %s for the first pass (%d pairs of about %.1f s), then what the decision asks for, within %s",
             duration(need), first, pace, budget.text())
    if budget.seconds is None or need <= budget.seconds:
        return
    if need > budget.seconds * TOO_SMALL:
        named = f"the default budget ({duration(budget.seconds)})" if defaulted else f"--budget {duration(budget.seconds)}"
        busy = study.noise is not None and study.noise.noisy
        raise LlamaspecError(f"{named} is too small: the first pass alone takes about {duration(need)} ({first} pairs "
                             f"of about {pace:.1f} s)" + (f"; {study.noise.text()}" if busy and study.noise else ""),
                             hint=(("the machine was busy: rerun when it is idle, or with fewer threads (-t 1); " if busy else "")
                                   + f"give at least --budget {math.ceil(need / 60)}m (the pair measured is stored; "
                                   "the same command resumes), or fewer draft lengths or modes"))
    log.warning("the first pass takes about %s, more than the budget's %s: it is measured whole (nothing less is decided "
                "on), then the study stops; give --budget %dm or more to settle the decision", duration(need),
                duration(budget.seconds), math.ceil(1.5 * need / 60))


def _adaptive(study: _Study, budget: Budget, first_pairs: int, defaulted: bool = False) -> tuple[str, str]:
    """``defaulted``: the budget is :func:`default_budget`'s, not the user's; where the program turns
    out to count no positions, it grows by the lengths the first pass adds (the default spends the
    same beyond its first pass) rather than refusing its own default."""
    clock = _Clock(study, budget, f"study {study.exp.name}")
    cases = study.cases
    try:
        first = first_pass(study.setups, by_position=True)
        total_first = first_pairs * len(first) * len(cases)
        i = 0
        announced = False
        while i < len(first):
            setup = first[i]
            for j in range(len(cases)):
                case = cases[(i + j) % len(cases)]  # the prompts' order rotates from setup to setup
                if study.pairs_of(case, setup) < first_pairs:
                    clock.update(f"first pass: {setup.label} on {case.name}")
                    study.measure(case, setup, first_pairs - study.pairs_of(case, setup))
                    if not announced:
                        _announce(study, total_first, budget, defaulted)
                        announced = True
            i += 1
            if i == len(first) and not study.counts_positions():
                rest = [s for s in first_pass(study.setups, by_position=False) if s not in first]
                if rest:
                    log.info("the program counts no acceptance by draft position: every length is measured first")
                    first += rest
                    whole = first_pairs * len(first) * len(cases)
                    if defaulted and budget.pairs is not None:
                        grown = budget.pairs + whole - total_first
                        log.info("the default budget grows from %d to %d pairs: the first pass measures every length",
                                 budget.pairs, grown)
                        budget = dataclasses.replace(budget, pairs=grown)
                        clock.retarget(budget)
                    if budget.pairs is not None and budget.pairs < whole:
                        raise LlamaspecError(
                            f"--budget {budget.pairs} pairs is too small: the program counts no acceptance by draft "
                            f"position, so the first pass measures every length: {whole} pairs",
                            hint=f"give at least --budget {whole} (the pairs measured are stored; the same command "
                                 "resumes), or a program that counts positions: --program speculative-simple")
        measured = {s.key for s in first}
        wd = study.decision()
        near = [b.key for b in decide.model_contenders(wd.decision.models, list(measured), study.measurable())]
        if near:
            log.info("first pass done: the model predicts the other lengths from the acceptance by position, and measures "
                     "next %s, its best predictions within its error of its best",
                     ", ".join(study.by_key[k].label for k in near if k in study.by_key))
        for k in near:
            setup = study.by_key[str(k)]
            for case in cases:
                if study.pairs_of(case, setup) < first_pairs:
                    clock.update(f"the model's contender {setup.label} on {case.name}")
                    study.measure(case, setup, first_pairs)
        last = -1
        while True:
            wd = study.decision()
            spent = study.spent()
            step = decide.next_step(wd.decision, spent, budget.pairs, study.measurable())
            if step.stop is None and spent == last:  # asked for pairs that nothing could add (a setup failed)
                step = decide.Step((), "nothing to measure", f"nothing left to measure: {wd.decision.sureness}")
            if step.stop is None and budget.seconds is not None and clock.elapsed() >= budget.seconds:
                step = decide.Step((), "budget", f"time budget spent ({duration(budget.seconds)}): {wd.decision.sureness}")
            log.info("%s", step.progress)
            if step.stop is not None:
                return step.stop, step.progress
            last = spent
            for r in step.requests:
                setup = study.by_key[str(r.key)]
                have = {c.prompt: c.ratios for c in study.cells() if c.setup == setup.key and c.status == workload.OK}
                for name, n in allocate(r.pairs, have, [c.name for c in cases], wd.noise).items():
                    case = next(c for c in cases if c.name == name)
                    clock.update(f"{setup.label} on {name}: {n} more pair{'s' if n != 1 else ''}")
                    study.measure(case, setup, n)
                if budget.seconds is not None and clock.elapsed() >= budget.seconds:
                    break
    finally:
        clock.close()


def _fixed(study: _Study, want: int) -> tuple[str, str]:
    """Every setup on every prompt, ``want`` pairs each, in passes (one pair of each per pass, the
    order rotating from pass to pass, so the machine's drift falls on every setup alike)."""
    clock = _Clock(study, Budget(pairs=want * len(study.setups) * len(study.cases)), f"study {study.exp.name} (fixed grid)")
    cells = [(c, s) for s in study.setups for c in study.cases]
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


def modes_for(engine: Engine, asked: Sequence[str] | None = None) -> tuple[str, ...]:
    """The draft-free modes a study weighs: those asked for (a mode the engine does not run is
    skipped when the study checks its setups, and said), or every one the engine declares."""
    if asked is not None:
        return tuple(asked)
    return tuple(m for m in engine.capabilities.spec_types if m != "draft")


def plot_study(store: Store, result: StudyResult) -> list[Any]:
    """The study's figure (each setup's workload speedup, each prompt's beside it), then each
    prompt's draft-length figures (speed, acceptance, speedup against draft length, with the
    model's band; the draft-free modes are one point each, in the first figure); the PNGs' paths."""
    from llamaspec.base import paths
    from llamaspec.views import analysis, plot
    d = result.decision
    chosen = d.chosen.key if d.verdict == "recommend" and d.chosen is not None else None
    rows = [plot.WorkloadRow(s.label, s.speedup.median, s.speedup.low, s.speedup.high,
                             {p: sp.median for p, sp in s.per_prompt if sp is not None}, s.setup == chosen)
            for s in sorted(d.setups, key=lambda s: -(s.speedup.median if s.speedup else 0)) if s.speedup is not None]
    folder = paths.plots_dir() / result.study_id
    out = [p for p in plot.plot_workload(rows, dict(d.prompts), f"{result.experiment}: {workload.verdict_text(d.decision)}",
                                         folder) if p.suffix == ".png"] if rows else []
    for prompt, _category in d.prompts:
        runs = [r for r in analysis.finished(store.runs(group_id=prompt_group(result.study_id, prompt)))
                if (r["settings"].get("spec_type") or "draft") == "draft"]
        if not runs:
            continue
        report = analysis.report_for_runs(store, runs, prompt, analysis.axes_of(runs), True, folder / prompt)
        out += [p for g in report.groups for p in g.plots if p.name == "dashboard.png"]
    return out


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


__all__ = ["DEFAULT_LENGTHS", "Setup", "StudyResult", "allocate", "first_pass", "least_budget",
           "make_setup", "run_study", "setups_for", "study_id"]
