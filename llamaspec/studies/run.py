"""Run an experiment: resolve models, check the pair, measure baseline and speculative runs
interleaved, store everything, and summarise (speedup, acceptance, lossless verdict).

Importable without the CLI::

    from llamaspec.studies import experiment, run
    exp = experiment.load("smollm2-quicksort")
    results = run.run_experiment(exp)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

from llamaspec import __version__
from llamaspec.base import paths, stats
from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import pairs, probe
from llamaspec.measure.contract import SPEED_DEFINITION, Engine, Measurement, ModelPath, ResolvedCase, engine_provenance
from llamaspec.measure.summary import FINISHED, CaseResult, Reference, Summary, requested_draft, summarize
from llamaspec.store.results import Store
from llamaspec.store.rows import Group, MeasurementRow, measurements_of
from llamaspec.studies.experiment import Case, Experiment, ModelRef

log = logging.getLogger(__name__)


# --repeats auto: pairs until the speedup's 95 % interval is within +-AUTO_HALF_WIDTH of its median.
AUTO_MIN, AUTO_MAX, AUTO_HALF_WIDTH = 3, 10, 0.03
Repeats = int | str  # a count, or "auto"


def repeat_bounds(repeats: Repeats) -> tuple[int, int]:
    """(at least, at most) pairs for a repeats setting."""
    if repeats == "auto":
        return AUTO_MIN, AUTO_MAX
    if not isinstance(repeats, int) or repeats < 1:
        raise LlamaspecError(f"repeats must be a positive count or 'auto', got {repeats!r}", hint="e.g. --repeats 5")
    return repeats, repeats


# --- resolving ---------------------------------------------------------------------------------

def default_threads() -> int:
    """Threads when a case sets none: the machine's physical cores (every engine, every machine)."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def resolve_case(exp: Experiment, case: Case, backend: Engine,
                 models: Callable[[ModelRef], ModelPath] | None = None) -> ResolvedCase:
    """The case with its models on disk in the engine's form and every setting decided: the one
    resolver (a cluster worker's too), with the one default for threads (:func:`default_threads`).
    ``models``: where a model's file comes from (default: the engine's ``resolve_model``; a cluster
    worker: the files its machine fetched or derived)."""
    find = models or (lambda ref: backend.resolve_model(ref.model, ref.variant))
    settings = case.settings.with_defaults()
    if settings.threads is None:
        settings = replace(settings, threads=default_threads())
    target = find(case.target)
    draft = find(case.draft) if case.draft else None
    return ResolvedCase(exp.name, case.name, target, draft, case.prompt, case.prompt_file, settings,
                        prompt_id=case.name if case.category else None, category=case.category, chat=case.chat,
                        history=case.history)


def check_settings(case: ResolvedCase, backend: Engine) -> None:
    """Refuse, before anything runs, a setting this backend does not honour: set to something other
    than its built-in default, and not among the settings the engine declares."""
    from llamaspec.measure.settings import defaults_for

    defaults = defaults_for(case.settings.spec_type)  # a draft-free mode's default program is its own
    unknown = [f.name for f in dataclasses.fields(case.settings)
               if getattr(case.settings, f.name) not in (None, getattr(defaults, f.name))
               and f.name not in backend.capabilities.settings]
    if unknown:
        engines = sorted(_engines_for(unknown))
        raise LlamaspecError(f"the {backend.name} engine has no equivalent of {', '.join(unknown)}",
                             hint="drop those settings from the experiment"
                                  + (f", or use the engine that has them (engine: {', '.join(engines)})" if engines else ""))


def _engines_for(names: Sequence[str]) -> set[str]:
    """The engines these settings belong to."""
    from llamaspec.measure.settings import FIELDS

    return {engine for n in names if (engine := FIELDS[n].metadata["engine"])}


# --- provenance and keys -----------------------------------------------------------------------

def provenance(backend: Engine, case: ResolvedCase, hardware: dict[str, Any], exp: Experiment | None = None,
               reference: Reference | None = None) -> dict[str, Any]:
    from llamaspec.base import lock

    models = {"target": asdict(case.target)}
    if case.draft:
        models["draft"] = asdict(case.draft)
    return {
        "engine": engine_provenance(backend),
        "identity": backend.identity(),
        "models": models,
        "hardware": hardware,
        "experiment": {"path": exp.path, "sha256": exp.sha256, "reference": asdict(reference) if reference else None}
        if exp else None,
        "lock": lock.held(),
        "speed_definition": SPEED_DEFINITION,
        "llamaspec": own_provenance(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def own_provenance() -> dict[str, Any]:
    """llamaspec itself as a result's provenance names it: version, commit of its clone, argv, Python."""
    return {"version": __version__, "git": own_commit(), "argv": sys.argv, "python": sys.version.split()[0]}


def own_commit() -> str | None:
    """The commit of llamaspec's own clone (12 hex digits); None for an installed llamaspec."""
    clone = paths.checkout()  # llamaspec's own clone; an installed llamaspec has its version only
    if clone is None:
        return None
    head = clone / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (head.parent / ref[5:]).read_text().strip()[:12]
        return ref[:12]
    except OSError:
        return None


def baseline_key(backend: Engine, case: ResolvedCase, scope: str | None = None) -> str:
    """Same engine build, target, prompt and target-side settings (within one sweep, when scoped):
    the same baseline. Scoping keeps a baseline from another day posing as today's."""
    blob = {"scope": scope, "engine": backend.name, "identity": backend.identity(),
            "target": case.target.sha256 or case.target.path, "prompt": case.prompt, "prompt_file": case.prompt_file,
            "chat": case.chat, **({"history": case.history} if case.history else {}), "settings": case.settings.target_side()}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


Event = Callable[[str, dict[str, Any]], None]


def measurement_row(run_id: int, repeat: int, m: Measurement, key: str | None) -> MeasurementRow:
    return MeasurementRow.of(m, run_id=run_id, repeat=repeat, baseline_key=key if m.mode != "speculative" else None)


# --- measuring -----------------------------------------------------------------------------------

def run_case(case: ResolvedCase, backend: Engine, store: Store, *, repeats: Repeats = 1, hardware: dict[str, Any],
             reference: Reference | None = None, exp: Experiment | None = None, kind: str = "run",
             group: Group | None = None, point_key: str | None = None,
             baseline_scope: str | None = None, time_costs: bool = False, warmup: bool = False,
             on_event: Event | None = None) -> CaseResult:
    """Measure one case: baseline and speculative in pairs, next to each other, the order
    alternating (ABBA) so that machine drift does not pose as speedup (:mod:`llamaspec.measure.pairs`).

    - ``repeats``: pairs to measure, or ``"auto"``: at least 3, then more until the speedup's 95 %
      interval is within +-3 % of its median, at most 10.
    - ``time_costs``: the draft model's step and the target's batches of 1..17 tokens are timed
      once each for the speedup model (the engine repeats inside), shared under their keys within
      the scope.
    - ``warmup``: one short unrecorded generation first, so cold caches do not count.
    """
    at_least, at_most = repeat_bounds(repeats)
    point = open_point(case, backend, store, hardware=hardware, reference=reference, exp=exp, kind=kind, group=group,
                       point_key=point_key, scope=baseline_scope, time_costs=time_costs, on_event=on_event)
    if warmup:
        point.warm_up()
    settled = (lambda: stats.interval_reached(point.summary().speedup, AUTO_HALF_WIDTH)) if repeats == "auto" else None
    summary = point.measure(at_least, at_most, 0, settled, shown=at_most if repeats == "auto" else at_least)
    return point.result(summary, reference)


def open_point(case: ResolvedCase, backend: Engine, store: Store, *, hardware: dict[str, Any],
               run_id: int | None = None, reference: Reference | None = None, exp: Experiment | None = None,
               kind: str = "run", group: Group | None = None, point_key: str | None = None, scope: str | None = None,
               time_costs: bool = False, on_event: Event | None = None) -> Point:
    """A stored run of ``case`` to measure into: ``run_id``'s (its measurements so far loaded), or a
    new one (its settings checked first)."""
    if run_id is None:
        check_settings(case, backend)
        backend.check(case)
        run_id = store.start_run(experiment=case.experiment, case_name=case.case, settings=asdict(case.settings),
                                 provenance=provenance(backend, case, hardware, exp, reference), kind=kind,
                                 group=group, point_key=point_key, prompt_id=case.prompt_id, category=case.category)
        before: list[Measurement] = []
    else:
        before = measurements_of(store.measurements(run_id))
    return Point(case, backend, store, run_id, scope, time_costs, on_event, before)


class Point:
    """One stored run being measured: where its measurements go and how it is summarised. Its
    measurements come in pairs (:meth:`measure`) or, in a workload study, one at a time in the
    prompt's blocks (:meth:`step` with the block)."""

    def __init__(self, case: ResolvedCase, backend: Engine, store: Store, run_id: int, scope: str | None,
                 time_costs: bool, on_event: Event | None, before: Sequence[Measurement] = ()) -> None:
        self.case, self.backend, self.store, self.run_id = case, backend, store, run_id
        self.emit: Event = on_event or (lambda _event, _data: None)
        self.key = baseline_key(backend, case, scope)
        costs = time_costs and case.draft is not None and backend.capabilities.times_costs
        # The speedup model's cost timings (the draft's step, the target's batches) do not depend on the
        # prompt's text: timed once within the scope (a study: at its first timed prompt's depth), under
        # keys without the prompt, and shared by every prompt of it.
        unprompted = replace(case, prompt=None, prompt_file=None, history=(), chat=False)
        self.draft_key = baseline_key(backend, replace(unprompted, target=case.draft), scope) if costs and case.draft else None
        self.batch_key = baseline_key(backend, unprompted, scope) if costs else None
        self.logs = paths.runs_dir() / f"{run_id:06d}"
        self.measured: list[Measurement] = list(before)
        self.before = len(before)
        self.shared: list[Measurement] = []
        self.share()

    def share(self) -> None:
        """What this run's figures take from elsewhere: the baselines of the blocks its runs were
        measured in, and the cost timings shared within the scope."""
        blocks = sorted({m.block for m in self.measured if m.block is not None and m.mode == "speculative"})
        self.shared = measurements_of(self.store.in_blocks(blocks)) if blocks else []
        if self.draft_key:
            self.shared += (measurements_of(self.store.shared(self.draft_key, "draft"))[:1]
                            + measurements_of(self.store.shared(self.batch_key or self.key, "batch"))[:1])

    def summary(self, status: str = "ok", error: str | None = None) -> Summary:
        c = self.case
        return summarize(self.measured, self.shared,
                         requested_draft=requested_draft(c), temperature=c.settings.temperature,
                         status=status, error=error, baseline_key=self.key,
                         threads_hint=(c.settings.threads or 0) >= default_threads() > 1)

    def result(self, summary: Summary, reference: Reference | None = None) -> CaseResult:
        return CaseResult(self.run_id, self.case, reference, tuple(self.measured), summary, engine=self.backend.name,
                          engine_settings=self.backend.capabilities.settings)

    def warm_up(self) -> None:
        """One short unrecorded generation of the target alone, so cold caches do not count."""
        self.emit("start", {"case": self.case.case, "mode": "warm-up", "repeat": 0, "repeats": 1})
        self.backend.measure(replace(self.case, settings=replace(self.case.settings, n_predict=16)), "baseline",
                             self.logs / "warmup.log")

    def step(self, mode: str, r: int, shown: int, block: str | None = None) -> Measurement:
        """One measurement of ``mode``, stored at once: pair ``r`` (a pair's index; in ``block``, the
        run's place in the block, its baselines 0 and k + 1)."""
        self.emit("start", {"case": self.case.case, "mode": mode, "repeat": r, "repeats": shown})
        key = self.draft_key if mode == "draft" else self.batch_key if mode == "batch" else self.key
        name = f"{mode}-{r}" + (f"-block{block.rsplit('/', 1)[-1]}" if block else "")
        m = pairs.measure_one(self.backend, self.case, mode, r, self.logs / f"{name}.log", block=block,
                              keep=lambda m: self.store.add_measurement(measurement_row(self.run_id, r, m, key)))
        self.measured.append(m)
        self.emit("done", {"case": self.case.case, "mode": mode, "repeat": r, "measurement": m})
        return m

    def costs(self, r: int, shown: int) -> list[Measurement]:
        """The speedup model's cost timings, once within the scope: after the first pair or block, so
        the engine knows the prompt's real length in tokens (the depth the costs are timed at); one
        timing each, the engine repeats inside."""
        if not self.draft_key or any(m.mode in ("draft", "batch") for m in (*self.measured, *self.shared)):
            return []
        if self.store.shared(self.draft_key, "draft"):  # timed since this point opened: by a setup earlier in its block
            self.share()
            return []
        done: list[Measurement] = []
        for mode in ("draft", "batch"):
            done.append(m := self.step(mode, r, shown))
            if not m.ok:
                break
        return done

    def measure(self, at_least: int, at_most: int, start: int, settled: Callable[[], bool] | None, shown: int) -> Summary:
        """Pairs ``start``, ``start + 1``, ... (:func:`llamaspec.measure.pairs.measure_pairs`), then the run finished."""
        try:
            got = pairs.measure_pairs(lambda mode, r: self.step(mode, r, shown), at_least=at_least, at_most=at_most,
                                      start=start, after_pair=lambda r: self.costs(r, shown), settled=settled)
        except KeyboardInterrupt:
            self.interrupted()
            raise
        return self.finish(got.failed)

    def finish(self, failed: str | None = None) -> Summary:
        """The run finished with its figures over everything measured (a failure named)."""
        self.share()
        summary = self.summary("failed", failed) if failed else self.summary()
        if summary.status == "differs":  # at a greedy near-tie, or a wrong output: the probe tells which
            summary = replace(summary, lossless=probe.near_tie(self.backend, self.case, [*self.shared, *self.measured],
                                                               summary.lossless, self.logs / "divergence.json"))
        self.store.finish_run(self.run_id, summary.status, summary.to_dict(), summary.error)
        return summary

    def interrupted(self) -> None:
        """Finished on an interruption: a run that had a result before keeps its complete pairs or
        blocks as its result (a half pair or half block is left out of the figures, its rows stay
        stored); a run interrupted before it ever finished is 'interrupted'."""
        if self.before:
            self.share()
            kept = summarize(self.measured, self.shared, requested_draft=requested_draft(self.case),
                             temperature=self.case.settings.temperature, baseline_key=self.key)
            if kept.status in FINISHED:
                self.store.finish_run(self.run_id, kept.status, kept.to_dict(), None)
                return
        self.store.finish_run(self.run_id, "interrupted", self.summary("interrupted", "interrupted by the user").to_dict(),
                              "interrupted by the user")


def run_experiment(exp: Experiment, backend: Engine, store: Store | None = None, on_event: Event | None = None,
                   warmup: bool = False, repeats: Repeats | None = None) -> list[CaseResult]:
    from llamaspec.base import host

    store = store or Store.open()
    hw = host.hardware()
    results = []
    for case in exp.cases:
        resolved = resolve_case(exp, case, backend)
        results.append(run_case(resolved, backend, store, repeats=repeats or exp.repeats, hardware=hw,
                                reference=case.reference, exp=exp, warmup=warmup, on_event=on_event))
    return results


def raise_if_failed(results: Sequence[CaseResult]) -> None:
    """A failed or differing case ends the command with a non-zero exit (after the report)."""
    bad = [r for r in results if r.status != "ok"]
    if not bad:
        return
    r = bad[0]
    if r.status == "differs":
        raise LlamaspecError(f"case {r.case.case}: the output with a draft differs from the target alone: "
                             f"{r.summary.lossless.text()}",
                             hint=f"greedy speculation must not change the output; run {r.run_id} is stored as 'differs' "
                                  f"(`llamaspec results show {r.run_id}`)")
    log_path = next((m.log_path for m in r.measurements if not m.ok), None)
    raise LlamaspecError(f"case {r.case.case} failed: {r.error}" + (f" (log: {log_path})" if log_path else ""),
                         hint=f"the failed run is stored as run {r.run_id}; see `llamaspec results show {r.run_id}`")
