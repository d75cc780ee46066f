"""Run an experiment: resolve models, check the pair, measure baseline and speculative runs
interleaved, store everything, and summarise (speedup, acceptance, lossless verdict).

Importable without the CLI::

    from llamaspec import experiment, run
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
from dataclasses import asdict, dataclass, replace
from typing import Any

from llamaspec import __version__, paths, stats
from llamaspec.backend import SPEED_DEFINITION, Backend, Measurement, ResolvedCase
from llamaspec.errors import LlamaspecError
from llamaspec.experiment import Case, Experiment, Reference
from llamaspec.results import MeasurementRow, Store
from llamaspec.summary import Summary, summarize

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaseResult:
    run_id: int
    case: ResolvedCase
    reference: Reference | None
    measurements: tuple[Measurement, ...]
    summary: Summary
    engine: str = ""  # the backend that measured it

    @property
    def status(self) -> str:
        return self.summary.status

    @property
    def error(self) -> str | None:
        return self.summary.error


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
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def resolve_case(exp: Experiment, case: Case, backend: Backend) -> ResolvedCase:
    """The case with its models on disk in the engine's form and every setting decided."""
    settings = case.settings.with_defaults()
    if settings.threads is None:
        settings = replace(settings, threads=default_threads())
    target = backend.resolve_model(case.target.model, case.target.variant)
    draft = backend.resolve_model(case.draft.model, case.draft.variant) if case.draft else None
    return ResolvedCase(exp.name, case.name, target, draft, case.prompt, case.prompt_file, settings)


def check_settings(case: ResolvedCase, backend: Backend) -> None:
    """Refuse, before anything runs, a setting this backend does not honour: set to something other
    than its built-in default, and not among the settings the backend declares."""
    from llamaspec.settings import DEFAULTS

    unknown = [f.name for f in dataclasses.fields(case.settings)
               if getattr(case.settings, f.name) not in (None, getattr(DEFAULTS, f.name))
               and f.name not in backend.capabilities.settings]
    if unknown:
        engines = sorted(_backends_for(unknown))
        raise LlamaspecError(f"the {backend.name} backend has no equivalent of {', '.join(unknown)}",
                             hint="drop those settings from the experiment"
                                  + (f", or use the backend that has them (backend: {', '.join(engines)})" if engines else ""))


def _backends_for(names: Sequence[str]) -> set[str]:
    """The engines these settings belong to."""
    from llamaspec.settings import FIELDS

    return {engine for n in names if (engine := FIELDS[n].metadata["engine"])}


# --- provenance and keys -----------------------------------------------------------------------

def provenance(backend: Backend, case: ResolvedCase, hardware: dict[str, Any], exp: Experiment | None = None,
               reference: Reference | None = None) -> dict[str, Any]:
    from llamaspec import lock

    models = {"target": asdict(case.target)}
    if case.draft:
        models["draft"] = asdict(case.draft)
    return {
        "engine": backend.provenance(),
        "backend": backend.name,
        "identity": backend.identity(),
        "models": models,
        "hardware": hardware,
        "experiment": {"path": exp.path, "sha256": exp.sha256, "reference": asdict(reference) if reference else None}
        if exp else None,
        "lock": lock.held(),
        "speed_definition": SPEED_DEFINITION,
        "llamaspec": {"version": __version__, "git": _own_commit(), "argv": sys.argv, "python": sys.version.split()[0]},
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _own_commit() -> str | None:
    head = paths.project_root() / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (head.parent / ref[5:]).read_text().strip()[:12]
        return ref[:12]
    except OSError:
        return None


def baseline_key(backend: Backend, case: ResolvedCase, scope: str | None = None) -> str:
    """Same engine build, target, prompt and target-side settings (within one sweep, when scoped):
    the same baseline. Scoping keeps a baseline from another day posing as today's."""
    blob = {"scope": scope, "engine": backend.name, "identity": backend.identity(),
            "target": case.target.sha256 or case.target.path, "prompt": case.prompt, "prompt_file": case.prompt_file,
            "chat": case.chat, "settings": case.settings.target_side()}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


Event = Callable[[str, dict[str, Any]], None]


def measurement_row(run_id: int, repeat: int, m: Measurement, key: str | None) -> MeasurementRow:
    return MeasurementRow.of(m, run_id=run_id, repeat=repeat, baseline_key=key if m.mode != "speculative" else None)


def stored_measurements(rows: list[dict[str, Any]]) -> list[Measurement]:
    return [Measurement(mode=r["mode"], ok=bool(r["ok"]), error=r.get("error"), argv=tuple(r["argv"]),
                        exit_code=r["exit_code"], wall_seconds=r["wall_seconds"], peak_rss_bytes=r["peak_rss_bytes"],
                        n_prompt=r["n_prompt"], n_predict=r["n_predict"], encode_tps=r["encode_tps"],
                        decode_tps=r["decode_tps"], speed_basis=r.get("speed_basis"), n_drafted=r.get("n_drafted"),
                        n_accept=r.get("n_accept"), accept=r.get("accept"), rounds=r.get("rounds"),
                        draft_len=r.get("draft_len"), draft_policy=r.get("draft_policy"), text=r["text"],
                        tokens=tuple(r["tokens"]) if r.get("tokens") is not None else None,
                        end_of_text=bool(r.get("end_of_text")), stats=r["stats"], log_path=r["log_path"]) for r in rows]


# --- measuring -----------------------------------------------------------------------------------

def run_case(case: ResolvedCase, backend: Backend, store: Store, *, repeats: Repeats = 1, hardware: dict[str, Any],
             reference: Reference | None = None, exp: Experiment | None = None, kind: str = "run",
             sweep_id: str | None = None, point_key: str | None = None, shared_baseline: bool = False,
             baseline_scope: str | None = None, time_costs: bool = False, warmup: bool = False,
             on_event: Event | None = None) -> CaseResult:
    """Measure one case: baseline and speculative in pairs, next to each other, the order
    alternating (ABBA) so that machine drift does not pose as speedup.

    - ``repeats``: pairs to measure, or ``"auto"``: at least 3, then more until the speedup's 95 %
      interval is within +-3 % of its median, at most 10.
    - ``shared_baseline``: an explicit cost saver: baselines stored under the same key (same
      target-side settings, same scope) are reused instead of measuring this point's own; the
      summary then says the speedup is not paired.
    - ``time_costs``: the draft model's step and the target's batches of 1..17 tokens are timed
      once each for the speedup model (the engine repeats inside), shared under their keys within
      the scope.
    - ``warmup``: one short unrecorded generation first, so cold caches do not count.
    """
    emit = on_event or (lambda _event, _data: None)
    check_settings(case, backend)
    backend.check(case)
    at_least, at_most = repeat_bounds(repeats)
    key = baseline_key(backend, case, baseline_scope)
    caps = backend.capabilities
    costs = time_costs and case.draft is not None and caps.times_costs
    draft_key = baseline_key(backend, replace(case, target=case.draft), baseline_scope) if costs and case.draft else None
    run_id = store.start_run(experiment=case.experiment, case_name=case.case, settings=asdict(case.settings),
                             provenance=provenance(backend, case, hardware, exp, reference), kind=kind,
                             sweep_id=sweep_id, point_key=point_key, prompt_id=case.prompt_id, category=case.category,
                             backend_name=backend.name)
    logs = paths.runs_dir() / f"{run_id:06d}"
    shared = stored_measurements(store.shared(key))[:at_most] if shared_baseline else []
    if draft_key:
        shared += stored_measurements(store.shared(draft_key, "draft"))[:at_most] + stored_measurements(store.shared(key, "batch"))[:1]
    measured: list[Measurement] = []
    summarize_now = lambda status="ok", error=None: summarize(  # noqa: E731
        measured, shared, requested_draft=case.settings.draft_max if case.draft or case.settings.spec_type != "draft" else None,
        status=status, error=error, baseline_key=key, threads_hint=(case.settings.threads or 0) >= default_threads() > 1)

    def step(mode: str, r: int) -> Measurement:
        emit("start", {"case": case.case, "mode": mode, "repeat": r, "repeats": at_most if repeats == "auto" else at_least})
        m = backend.measure(case, mode, logs / f"{mode}-{r}.log")
        store.add_measurement(measurement_row(run_id, r, m, draft_key if mode == "draft" else key))
        measured.append(m)
        emit("done", {"case": case.case, "mode": mode, "repeat": r, "measurement": m})
        return m

    try:
        if warmup:
            emit("start", {"case": case.case, "mode": "warm-up", "repeat": 0, "repeats": 1})
            backend.measure(replace(case, settings=replace(case.settings, n_predict=16)), "baseline", logs / "warmup.log")
        failed = None
        have_base = sum(m.mode == "baseline" for m in shared)
        r = 0
        while not failed and r < at_most:
            pair = ("baseline", "speculative") if r % 2 == 0 else ("speculative", "baseline")
            for mode in pair:
                if mode == "baseline" and r < have_base:
                    continue
                failed = _failure(step(mode, r))
                if failed:
                    break
            r += 1
            if draft_key and r == 1 and not failed:
                # After the first pair, so the engine knows the prompt's real length in tokens (the
                # depth the costs are timed at); one timing each, the engine repeats inside.
                if not any(m.mode == "draft" for m in shared):
                    failed = _failure(step("draft", 0))
                if not failed and not any(m.mode == "batch" for m in shared):
                    failed = _failure(step("batch", 0))
            if r >= at_least and (repeats != "auto" or stats.interval_reached(summarize_now().speedup, AUTO_HALF_WIDTH)):
                break
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", summarize_now("interrupted", "interrupted by the user").to_dict(),
                         "interrupted by the user")
        raise
    summary = summarize_now("failed", failed) if failed else summarize_now()
    store.finish_run(run_id, summary.status, summary.to_dict(), summary.error)
    return CaseResult(run_id, case, reference, tuple(measured), summary, engine=backend.name)


def _failure(m: Measurement) -> str | None:
    return None if m.ok else (m.error or f"{m.mode} failed")


def measure_shared(case: ResolvedCase, mode: str, key: str, backend: Backend, store: Store, *, repeats: int,
                   hardware: dict[str, Any], kind: str, sweep_id: str | None, point_key: str | None = None) -> list[Measurement]:
    """Measure ``mode`` ``repeats`` times in a run row of its own, stored under the shared ``key``
    (a draft variant's timing); stops at the first failure."""
    run_id = store.start_run(experiment=case.experiment, case_name=case.case, settings=asdict(case.settings),
                             provenance=provenance(backend, case, hardware), kind=kind, sweep_id=sweep_id,
                             point_key=point_key)
    done: list[Measurement] = []
    for r in range(repeats):
        m = backend.measure(case, mode, paths.runs_dir() / f"{run_id:06d}" / f"{mode}-{r}.log")
        store.add_measurement(measurement_row(run_id, r, m, key))
        done.append(m)
        if not m.ok:
            break
    failed = next((m for m in done if not m.ok), None)
    store.finish_run(run_id, "failed" if failed else "ok", {}, failed.error if failed else None)
    return done


def run_experiment(exp: Experiment, backend: Backend, store: Store | None = None, on_event: Event | None = None,
                   warmup: bool = False, repeats: Repeats | None = None) -> list[CaseResult]:
    from llamaspec import host

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
