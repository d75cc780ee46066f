"""Sweeps: one experiment over a grid of settings (draft length first of all), resumable.

Each point is stored like a run (kind 'sweep', with the sweep's id and the point's key).
Rerunning the same sweep skips the points already measured; Ctrl-C leaves every finished point
stored. The target-only baseline depends only on target-side settings, so one baseline per
distinct target setting is measured and shared by all the points that have it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.backend import Backend
from llamaspec.errors import LlamaspecError
from llamaspec.experiment import Case, Experiment, ModelRef
from llamaspec.progress import Progress
from llamaspec.results import Store
from llamaspec.run import CaseResult, check_settings, resolve_case, run_case
from llamaspec.settings import FIELDS, SWEEPABLE, SettingError, Settings, check

log = logging.getLogger(__name__)

# sweepable axis -> how to parse one value: every setting whose schema says it is sweepable, plus
# "draft_variant", which swaps the draft model's variant.
AXES: dict[str, Callable[[str], Any]] = {**SWEEPABLE, "draft_variant": str}
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?::(\d+))?$")


def _axis_help(axis: str) -> str:
    return (FIELDS[axis].metadata["help"] if axis in FIELDS else "") or axis.replace("_", " ")


def parse_values(axis: str, text: str) -> tuple[Any, ...]:
    """``1,2,4,8``, ``1..16``, ``1..16:2`` or a mix (``1..4,8,16``); order kept, duplicates dropped."""
    if axis not in AXES:
        raise LlamaspecError(f"cannot sweep {axis!r}", hint=f"sweepable: {', '.join(AXES)}")
    option = f"--{axis.replace('_', '-')}"
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise LlamaspecError(f"--{axis.replace('_', '-')}: empty value in {text!r}",
                             hint="give a comma-separated list or a range, e.g. 1,2,4,8 or 1..16")
    values: list[Any] = []
    for part in parts:
        m = _RANGE.match(part)
        if m:
            lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            if hi < lo or step < 1:
                raise LlamaspecError(f"--{axis.replace('_', '-')}: empty range {part!r}", hint="write low..high, e.g. 1..16")
            if AXES[axis] is str:
                raise LlamaspecError(f"--{axis.replace('_', '-')}: ranges need numbers, got {part!r}")
            for v in range(lo, hi + 1, step):  # each value checked, as a listed one is
                try:
                    values.append(check(axis, v) if axis in SWEEPABLE else v)
                except SettingError as exc:
                    raise LlamaspecError(f"{option}: {part!r}: {v}: {exc}", hint=f"{option}: {_axis_help(axis)}") from None
            continue
        try:
            values.append(check(axis, AXES[axis](part)) if axis in SWEEPABLE else part)
        except (ValueError, SettingError) as exc:
            if isinstance(exc, SettingError):
                raise LlamaspecError(f"{option}: {part!r}: {exc}", hint=f"{option}: {_axis_help(axis)}") from None
            raise LlamaspecError(f"--{axis.replace('_', '-')}: {part!r} is not a valid value",
                                 hint="give a comma-separated list or a range, e.g. 1,2,4,8 or 1..16") from None
    for v in values:
        if isinstance(v, (int, float)) and v < 0:
            raise LlamaspecError(f"--{axis.replace('_', '-')}: negative value {v}")
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class Point:
    values: tuple[tuple[str, Any], ...]  # (axis, value) in grid order

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.values, default=str).encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values)

    def apply(self, case: Case) -> Case:
        settings: dict[str, Any] = {}
        draft = case.draft
        for axis, value in self.values:
            if axis == "draft_variant":
                if draft is None:
                    raise LlamaspecError(f"case {case.name} has no draft model to vary", hint="drop --draft-variant")
                draft = ModelRef(draft.model, value)
            else:
                settings[axis] = value
        return dataclasses.replace(case, draft=draft, settings=Settings(**settings).over(case.settings))


def grid(axes: Mapping[str, Sequence[Any]]) -> list[Point]:
    if not axes:
        raise LlamaspecError("nothing to sweep", hint="give at least one axis, e.g. --draft 1..16")
    names = list(axes)
    return [Point(tuple(zip(names, combo, strict=True))) for combo in itertools.product(*(axes[n] for n in names))]


def sweep_id(exp: Experiment, case: Case, axes: Mapping[str, Sequence[Any]], identity: str, shared_baseline: bool) -> str:
    """Same experiment case, base settings, grid axes, engine build and baseline policy: same sweep."""
    blob = {"experiment": exp.name, "case": case.name, "axes": sorted(axes), "build": identity, "repeats": exp.repeats,
            "settings": dataclasses.asdict(case.settings), "target": case.target.label, "prompt": case.prompt,
            "prompt_file": case.prompt_file, "draft": case.draft.label if case.draft else None,
            "shared_baseline": shared_baseline, "engine": exp.backend}
    return f"{exp.name}-{hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class SweepResult:
    sweep_id: str
    experiment: str
    case: str
    points: tuple[tuple[Point, dict[str, Any]], ...]  # point and its stored run row
    measured: int
    reused: int


def run_sweep(exp: Experiment, axes: Mapping[str, Sequence[Any]], backend: Backend, store: Store,
              on_event: Callable[[str, dict[str, Any]], None] | None = None, shared_baseline: bool = False) -> list[SweepResult]:
    """Measure every point of the grid, each next to its own baseline (pairs inside the point).

    ``shared_baseline`` is the explicit cost saver: points with the same target-side settings
    reuse one baseline, measured with the first of them; their speedups are then not paired,
    and the summaries and reports say so.
    """
    from llamaspec import host

    points = grid(axes)
    hw = host.hardware()
    out = []
    for case in exp.cases:
        sid = sweep_id(exp, case, axes, backend.identity(), shared_baseline)
        resolved = [(p, resolve_case(exp, p.apply(case), backend)) for p in points]
        for _p, rc in resolved:  # refuse values the build does not take before measuring anything
            check_settings(rc, backend)
            backend.check(rc)
        todo = [(p, rc) for p, rc in resolved if store.finished_point(sid, p.key) is None]
        reused = len(points) - len(todo)
        if reused:
            log.info("sweep %s: %d of %d points already measured, resuming with the other %d", sid, reused, len(points), len(todo))
        bar = Progress(f"sweep {exp.name}/{case.name}", total=max(len(todo), 1))
        for i, (point, rc) in enumerate(todo):
            bar.update(i, point.label)
            result: CaseResult = run_case(rc, backend, store, repeats=exp.repeats, hardware=hw, reference=case.reference,
                                          exp=exp, kind="sweep", sweep_id=sid, point_key=point.key,
                                          shared_baseline=shared_baseline, baseline_scope=sid, time_costs=True,
                                          warmup=i == 0, on_event=on_event)
            s = result.summary
            log.info("  %-28s %s", point.label,
                     f"speedup {s.speedup.text(suffix='x')}, accept {s.accept.median if s.accept else 0:.1f}%"
                     + ("" if s.status == "ok" else f" [{s.status}]") if s.speedup else f"{s.status}: {result.error}")
            if result.status == "failed":
                bar.close()
                raise LlamaspecError(f"sweep point {point.label} failed: {result.error}",
                                     hint=f"finished points are stored (sweep {sid}); fix the cause and rerun the same command to resume")
        bar.close()
        rows = [(p, store.finished_point(sid, p.key) or {}) for p in points]
        out.append(SweepResult(sid, exp.name, case.name, tuple(rows), len(todo), reused))
    return out
