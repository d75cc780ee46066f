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
from llamaspec.experiment import Case, Experiment, ModelRef, Settings
from llamaspec.progress import Progress
from llamaspec.results import Store
from llamaspec.run import CaseResult, resolve_case, run_case

log = logging.getLogger(__name__)

# sweepable axis -> how to parse one value. "draft_variant" swaps the draft model's variant.
AXES: dict[str, Callable[[str], Any]] = {
    "draft_max": int,
    "draft_p_min": float,
    "threads": int,
    "gpu_layers": lambda v: v if v in ("all", "none") else int(v),
    "draft_variant": str,
    "spec_type": str,
}
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?::(\d+))?$")


def parse_values(axis: str, text: str) -> tuple[Any, ...]:
    """``1,2,4,8``, ``1..16``, ``1..16:2`` or a mix (``1..4,8,16``); order kept, duplicates dropped."""
    if axis not in AXES:
        raise LlamaspecError(f"cannot sweep {axis!r}", hint=f"sweepable: {', '.join(AXES)}")
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
            values.extend(range(lo, hi + 1, step))
            continue
        try:
            values.append(AXES[axis](part))
        except ValueError:
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


def sweep_id(exp: Experiment, case: Case, axes: Mapping[str, Sequence[Any]], build_key: str) -> str:
    """Same experiment case, same base settings, same grid axes and same build: same sweep."""
    blob = {"experiment": exp.name, "case": case.name, "axes": sorted(axes), "build": build_key, "repeats": exp.repeats,
            "settings": dataclasses.asdict(case.settings), "target": case.target.label, "prompt": case.prompt,
            "prompt_file": case.prompt_file, "draft": case.draft.label if case.draft else None}
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
              on_event: Callable[[str, dict[str, Any]], None] | None = None) -> list[SweepResult]:
    from llamaspec import host

    points = grid(axes)
    build_key = str(backend.provenance().get("build_key") or backend.provenance().get("commit"))
    hw = host.hardware()
    out = []
    for case in exp.cases:
        sid = sweep_id(exp, case, axes, build_key)
        resolved = [(p, resolve_case(exp, p.apply(case))) for p in points]
        for _p, rc in resolved:  # refuse values the build does not take before measuring anything
            backend.check(rc)
        todo = [(p, rc) for p, rc in resolved if store.finished_point(sid, p.key) is None]
        reused = len(points) - len(todo)
        if reused:
            log.info("sweep %s: %d of %d points already measured, resuming with the other %d", sid, reused, len(points), len(todo))
        bar = Progress(f"sweep {exp.name}/{case.name}", total=max(len(todo), 1))
        for i, (point, rc) in enumerate(todo):
            bar.update(i, point.label)
            result: CaseResult = run_case(rc, backend, store, repeats=exp.repeats, hardware=hw, reference=case.reference,
                                          kind="sweep", sweep_id=sid, point_key=point.key, reuse_baseline=True,
                                          baseline_scope=sid, time_costs=True, warmup=i == 0, on_event=on_event)
            s = result.summary
            speed = (s.get("speedup") or {}).get("median")
            log.info("  %-28s %s", point.label,
                     f"speedup {speed:.2f}x, accept {(s.get('accept') or {}).get('median', 0):.1f}%" if speed else f"failed: {result.error}")
            if result.status != "ok":
                bar.close()
                raise LlamaspecError(f"sweep point {point.label} failed: {result.error}",
                                     hint=f"finished points are stored (sweep {sid}); fix the cause and rerun the same command to resume")
        bar.close()
        if len(todo) > 1:
            _close_baselines(exp, sid, [rc for _p, rc in todo], backend, store, hw)
        rows = [(p, store.finished_point(sid, p.key) or {}) for p in points]
        out.append(SweepResult(sid, exp.name, case.name, tuple(rows), len(todo), reused))
    return out


def _close_baselines(exp: Experiment, sid: str, cases: Sequence[Any], backend: Backend, store: Store,
                     hw: dict[str, Any]) -> None:
    """Measure each shared baseline again after the last point, so that a sweep's speedups rest on
    the target's speed at both ends of the sweep rather than at its start alone (the report uses
    the median of all of them)."""
    from llamaspec.run import baseline_key, measure_shared

    seen: set[str] = set()
    for rc in cases:
        key = baseline_key(backend, rc, sid)
        if key not in seen:
            seen.add(key)
            measure_shared(rc, "baseline", key, backend, store, repeats=exp.repeats, hardware=hw, kind="sweep-baseline",
                           sweep_id=sid)
