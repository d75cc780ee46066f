"""Measuring a prompt set, and resuming it.

Per prompt and per case: the servers prepared, then the one pairs loop (``pairs.measure_pairs``)
measures baseline and speculative generations seconds apart, each stored as it is taken; the
prompt's figures go into its run row (``kind="promptset"``, ``group_id`` the set's key,
``point_key`` the prompt), so a rerun skips what is finished. A server that died or hung stops the
case (later prompts would fail alike); a prompt the server refused does not.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from llamaspec.base import paths, progress
from llamaspec.base.stats import percent
from llamaspec.measure import pairs
from llamaspec.measure.contract import Engine, Measurement, ResolvedCase
from llamaspec.promptset import runcore
from llamaspec.promptset.probe import divergence, divergence_text
from llamaspec.promptset.prompt_figures import E2E_KEYS, PromptFigures, prompt_summary
from llamaspec.promptset.sources import method_label, prompt_case, set_key
from llamaspec.store.results import Store
from llamaspec.store.rows import Group, MeasurementRow, measurements_of
from llamaspec.studies.prompts import Prompt, PromptSet, PromptSource

Event = Callable[[str, dict[str, Any]], None]
# the server is gone or stuck, or its target-only run drafts (contract.refuse_drafting_baseline):
# later prompts would fail alike
STOPPING_ERRORS = ("server", "timeout", "drafted")


@dataclass(frozen=True)
class CaseSet:
    """One case (method) over the set: its per-prompt figures and what did not run."""

    case: ResolvedCase
    set_id: str
    items: tuple[PromptFigures, ...]
    not_run: tuple[str, ...] = ()  # prompt ids left after a stopping failure
    error: str | None = None

    @property
    def label(self) -> str:
        return method_label(self.case)


@dataclass(frozen=True)
class SetRun:
    experiment: str
    source: PromptSource
    prompts: PromptSet
    cases: tuple[CaseSet, ...]

    @property
    def complete(self) -> bool:
        return all(not c.not_run for c in self.cases)


def run_set(exp: Any, prompt_set: PromptSet, backend: Engine, store: Store, *, repeats: int = 1,
            hardware: dict[str, Any] | None = None, on_event: Event | None = None,
            resolve: Callable[[Any, Any], ResolvedCase] | None = None) -> SetRun:
    """Measure every case of ``exp`` on every prompt of the set; stored per prompt; resumable."""
    emit = on_event or (lambda _e, _d: None)
    resolve = resolve or runcore.resolver(backend)
    cases = [resolve(exp, c) for c in exp.cases]
    for case in cases:
        backend.check(case)
    hw = hardware or {}
    total = len(cases) * len(prompt_set.prompts)
    clock = Clock(total)
    out: list[CaseSet] = []
    for case in cases:
        set_id = set_key(backend, case, prompt_set.source, repeats)
        items: list[PromptFigures] = []
        not_run: list[str] = []
        error = None
        for index, prompt in enumerate(prompt_set.prompts):
            done = store.finished_point(set_id, prompt.id)
            if done is not None and done.get("summary"):
                items.append(_with_end_to_end(done["summary"], prompt, store, done["id"]))
                clock.tick(skipped=True)
                emit("skip", {"case": case.case, "prompt": prompt.id})
                continue
            emit("start", {"case": case.case, "prompt": prompt.id, "index": index, "count": len(prompt_set.prompts)})
            _prepare(backend, prompt_case(case, prompt))
            summary = _run_prompt(prompt_case(case, prompt), prompt, backend, store, set_id, repeats, hw)
            items.append(summary)
            clock.tick()
            emit("done", {"case": case.case, "prompt": prompt.id, "summary": summary, "eta": clock.eta()})
            if summary.status != "ok" and summary.error_kind in STOPPING_ERRORS:
                not_run = [p.id for p in prompt_set.prompts[index + 1:]]
                error = summary.error
                emit("stopped", {"case": case.case, "error": error, "not_run": not_run})
                break
        out.append(CaseSet(case, set_id, tuple(items), tuple(not_run), error))
    return SetRun(exp.name, prompt_set.source, prompt_set, tuple(out))


def _with_end_to_end(stored: dict[str, Any], prompt: Prompt, store: Store, run_id: int) -> PromptFigures:
    """A finished prompt's figures as stored. One stored before the end-to-end figures existed
    gets them from its stored measurements (their server timings), so that a resumed set has them
    for every prompt."""
    figures = PromptFigures.from_dict(stored)
    if "e2e_speedup" in stored:
        return figures
    again = prompt_summary(prompt, measurements_of(store.measurements(run_id)))
    return replace(figures, **{k: getattr(again, k) for k in E2E_KEYS})


def _prepare(backend: Engine, case: ResolvedCase) -> None:
    """Servers started (side by side) and the prompt rendered before the prompt's first timing,
    where the engine can (llama-server). A server that cannot start raises here, as the
    measurement would; one that died is left for the measurement to report."""
    if backend.capabilities.prepares:
        backend.prepare(case)


def _run_prompt(case: ResolvedCase, prompt: Prompt, backend: Engine, store: Store, set_id: str, repeats: int,
                hardware: dict[str, Any]) -> PromptFigures:
    run_id = store.start_run(experiment=case.experiment, case_name=case.case,
                             settings={**case.settings.to_dict(), "prompt_id": prompt.id, "category": prompt.category},
                             provenance=runcore.provenance(backend, case, hardware), kind="promptset",
                             group=Group("promptset", set_id), point_key=prompt.id)
    logs = paths.runs_dir() / f"{run_id:06d}"
    measured: list[Measurement] = []

    def keep(m: Measurement) -> None:
        store.add_measurement(MeasurementRow.of(m, run_id=run_id))
        measured.append(m)

    def measure(mode: str, r: int) -> Measurement:
        return pairs.measure_one(backend, case, mode, r, logs / f"{mode}-{r}.json", keep)

    try:
        pairs.measure_pairs(measure, at_least=repeats)
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", prompt_summary(prompt, measured, case.settings.temperature).to_dict(),
                         "interrupted by the user")
        raise
    summary = prompt_summary(prompt, measured, case.settings.temperature)
    if summary.lossless is False:  # outside every timing: one more request to the target alone
        summary = replace(summary, divergence=divergence(backend, case, measured, logs / "divergence.json"))
    store.finish_run(run_id, summary.status, summary.to_dict(), summary.error)
    return summary


class Clock:
    """Progress with an ETA from the prompts measured so far (resumed ones cost nothing)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.measured = 0
        self.start = time.monotonic()

    def tick(self, skipped: bool = False) -> None:
        self.done += 1
        self.measured += 0 if skipped else 1

    def eta(self) -> float | None:
        if not self.measured:
            return None
        return (time.monotonic() - self.start) / self.measured * (self.total - self.done)


def progress_printer(stream: Any = None) -> Event:
    """Progress lines on stderr: each prompt's speedups (decode, end to end), with an ETA."""
    out = stream or sys.stderr
    counts = {"done": 0}

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == "done":
            counts["done"] += 1
            s: PromptFigures = data["summary"]
            eta = data.get("eta")
            eta_text = f", ETA {progress.duration(eta)}" if eta is not None else ""
            if s.status != "ok":
                what = f"failed: {s.error}"
            elif s.ended_early:
                what = f"ended early: {s.ended_early_note or str(s.n_predict) + ' tokens'} (kept out of speedups)"
            else:
                acc = f", accept {percent(s.acceptance):.0f}%" if s.acceptance is not None else ""
                differs = f", OUTPUT {divergence_text(s.divergence, s.first_difference)}"
                e2e = f", {s.e2e_speedup:.2f}x end to end" if s.e2e_speedup else ""
                what = f"{s.speedup:.2f}x decode{e2e}{acc}" + ("" if s.lossless is not False else differs)
            print(f"[{counts['done']}] {data['case']} {data['prompt']}: {what}{eta_text}", file=out, flush=True)
        elif event == "stopped":
            print(f"{data['case']}: stopped ({data['error']}); {len(data['not_run'])} prompts not run: "
                  "rerun the same command to resume", file=out, flush=True)

    return on_event
