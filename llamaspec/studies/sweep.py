"""Sweeps: one experiment over a grid of settings (draft length first of all), resumable.

Each point is stored like a run (kind 'sweep', with the sweep's id and the point's key), measured
in passes (a pair at every point per pass). Rerunning the same sweep keeps every pair already
measured and measures only what is missing; Ctrl-C leaves every finished pair stored. The target-only baseline depends only on target-side settings, so one baseline per
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

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import Progress
from llamaspec.base.stats import percent
from llamaspec.measure.contract import Engine, ResolvedCase
from llamaspec.measure.pairs import whole_pairs
from llamaspec.measure.settings import FIELDS, SWEEPABLE, SettingError, Settings, check
from llamaspec.measure.summary import CaseResult, Summary
from llamaspec.store.results import Group, Store, measurements_of
from llamaspec.studies.experiment import Case, Experiment, ModelRef
from llamaspec.studies.run import check_settings, more_pairs, resolve_case, run_case

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
        """The case at this point. A draft-free spec type (an n-gram mode) runs without the
        case's draft model."""
        settings: dict[str, Any] = {}
        draft = case.draft
        for axis, value in self.values:
            if axis == "draft_variant":
                if draft is None:
                    raise LlamaspecError(f"case {case.name} has no draft model to vary", hint="drop --draft-variant")
                draft = ModelRef(draft.model, value)
            else:
                settings[axis] = value
        merged = Settings(**settings).over(case.settings)
        if merged.spec_type not in (None, "draft"):
            return dataclasses.replace(case, draft=None, drafts=(), settings=merged)
        return dataclasses.replace(case, draft=draft, settings=merged)


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
            "shared_baseline": shared_baseline, "engine": exp.engine}
    return f"{exp.name}-{hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class SweepResult:
    """One case's grid as measured: its points with their stored runs, how many were measured now and how many reused."""

    sweep_id: str
    experiment: str
    case: str
    points: tuple[tuple[Point, int | None], ...]  # each point and its finished run's id in the store (None: none)
    measured: int
    reused: int


def run_sweep(exp: Experiment, axes: Mapping[str, Sequence[Any]], backend: Engine, store: Store,
              on_event: Callable[[str, dict[str, Any]], None] | None = None, shared_baseline: bool = False) -> list[SweepResult]:
    """Measure every point of the grid, each next to its own baseline (pairs inside the point).

    With a number of repeats, the grid is measured in passes: one pair at every point, then one
    more at every point per pass (the order rotating from pass to pass), until each has the
    experiment's repeats. A shared machine drifts over the minutes a sweep takes, and pairing only
    cancels what the two sides of one pair share: measured point after point, each point would
    carry the few minutes it was measured in (on the 2-core VM, a fixed grid of 30 pairs per point
    measured so read draft 16 4 % below draft 14, its baselines drifting from 34.8 to 40.5 t/s
    across the points, while the two measured side by side read alike). ``repeats:
    auto`` stops each point when its interval is narrow, so it measures point after point.

    ``shared_baseline`` is the explicit cost saver: points with the same target-side settings
    reuse one baseline, measured with the first of them; their speedups are then not paired,
    and the summaries and reports say so. It measures point after point.
    """
    from llamaspec.base import host

    points = grid(axes)
    hw = host.hardware()
    passes = isinstance(exp.repeats, int) and exp.repeats > 1 and not shared_baseline
    first = 1 if passes else exp.repeats
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
        bar = Progress(f"sweep {exp.name}/{case.name}" + (" (pass 1)" if passes else ""), total=max(len(todo), 1))
        try:
            for i, (point, rc) in enumerate(todo):
                bar.update(i, point.label)
                result: CaseResult = run_case(rc, backend, store, repeats=first, hardware=hw, reference=case.reference,
                                              exp=exp, kind="sweep", group=Group("sweep", sid), point_key=point.key,
                                              shared_baseline=shared_baseline, baseline_scope=sid, time_costs=True,
                                              warmup=i == 0, on_event=on_event)
                log.info("  %-28s %s", point.label, _point_text(result.summary))
                _raise_if_point_failed(point, result, sid)
        finally:
            bar.close()
        topped = (measure_in_passes(exp, case, sid, resolved, backend, store, int(exp.repeats), on_event)
                  if passes else set())
        rows = [(p, (store.finished_point(sid, p.key) or {}).get("id")) for p in points]
        measured = len({p.key for p, _rc in todo} | topped)
        out.append(SweepResult(sid, exp.name, case.name, tuple(rows), measured, len(points) - measured))
    return out


def measure_in_passes(exp: Experiment, case: Case, sid: str, resolved: Sequence[tuple[Point, ResolvedCase]],
                      backend: Engine, store: Store, want: int,
                      on_event: Callable[[str, dict[str, Any]], None] | None = None) -> set[str]:
    """One more pair at every stored point of sweep ``sid`` per pass, the order rotated each pass,
    until every point has ``want`` pairs; a point whose output differs gets no more (greedy output
    does not change with more pairs). Returns the keys of the points that got pairs."""
    have: dict[str, tuple[int, int]] = {}  # point key -> (run id, whole pairs stored)
    for point, _rc in resolved:
        row = store.finished_point(sid, point.key)
        if row is not None and row["status"] == "ok":
            have[point.key] = row["id"], len(whole_pairs(measurements_of(store.measurements(row["id"]))))
    missing = sum(max(0, want - n) for _id, n in have.values())
    if not missing:
        return set()
    bar = Progress(f"sweep {exp.name}/{case.name} (passes: {want} pairs at every point)", total=missing)
    done, topped = 0, set()
    turn = 0  # pass 1 went in the grid's order; each pass after starts one point later
    try:
        while any(n < want for _id, n in have.values()):
            turn += 1
            for point, rc in [*resolved[turn % len(resolved):], *resolved[:turn % len(resolved)]]:
                if point.key not in have or have[point.key][1] >= want:
                    continue
                run_id, n = have[point.key]
                bar.update(done, f"{point.label}: pair {n + 1} of {want}")
                result = more_pairs(run_id, rc, backend, store, 1, baseline_scope=sid, on_event=on_event)
                done += 1
                topped.add(point.key)
                _raise_if_point_failed(point, result, sid)
                if result.status == "ok":
                    have[point.key] = run_id, n + 1
                else:  # its output differs: more pairs would not change that
                    del have[point.key]
    finally:
        bar.close()
    for point, _rc in resolved:
        if point.key in topped and (final := store.finished_point(sid, point.key)) is not None:
            log.info("  %-28s %s", point.label, _point_text(Summary.from_dict(final["summary"])))
    return topped


def _point_text(s: Summary) -> str:
    if s.speedup is None:
        return f"{s.status}: {s.error}"
    return (f"speedup {s.speedup.text(suffix='x')}, accept {percent(s.acceptance.median) if s.acceptance else 0:.1f}%"
            + ("" if s.status == "ok" else f" [{s.status}]"))


def _raise_if_point_failed(point: Point, result: CaseResult, sid: str) -> None:
    if result.status == "failed":
        raise LlamaspecError(f"sweep point {point.label} failed: {result.error}",
                             hint=f"every pair measured so far is stored (sweep {sid}); fix the cause and rerun "
                                  "the same command to resume")


# --- what an adaptive study spends (llamaspec.studies.study measures it) ---------------------------------

# One pair of each setup in the first pass, not two at a coarse subset of lengths: the counters of
# one greedy run are exact, so the model sees every length's acceptance at once (on the 2 December
# recordings, benchmarks/decide.py, that took the adaptive sweep's wrong decisions from 47 % to 16 %
# at Q4_1 and from 57 % to 4 % at Q4_0, at the same budget).
FIRST_PAIRS = 1
# Where the program counts acceptance by draft position (llama-speculative-simple, llama-server,
# transformers), the first pass measures only the longest lengths of the grid: their rounds cover
# every shorter position, so the curve and the cost timings predict every other length
# (llamaspec.theory.positions states the assumption, and the sweep says when a measured point
# contradicts it). Two, not one: the draft's cost is fitted over both, and a curve cut short near
# the end of generation (positions left out where the counts are not certain) is pooled over two.
FIRST_LONGEST = 2
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|pairs?)?\s*$", re.I)


@dataclass(frozen=True)
class Budget:
    """How much an adaptive sweep may spend: pairs (baseline + speculative), wall time, or both."""

    pairs: int | None = None
    seconds: float | None = None

    def text(self) -> str:
        parts = ([f"{self.pairs} pairs"] if self.pairs is not None else []) + (
            [f"{self.seconds:.0f} s"] if self.seconds is not None else [])
        return " or ".join(parts) or "none"


def parse_budget(text: str) -> Budget:
    """``10m``, ``90s``, ``1h`` (wall time) or ``40`` / ``40 pairs``."""
    m = _BUDGET.match(text or "")
    if not m:
        raise LlamaspecError(f"--budget: {text!r} is neither a time nor a number of pairs",
                             hint="e.g. --budget 10m, --budget 90s or --budget 40 (pairs)")
    value, unit = float(m.group(1)), (m.group(2) or "pairs").lower()
    if value <= 0:
        raise LlamaspecError(f"--budget: {text!r} allows nothing to be measured", hint="give a positive budget, e.g. 10m")
    if unit.startswith("pair"):
        if value != int(value):
            raise LlamaspecError(f"--budget: {text!r}: pairs are counted whole", hint="e.g. --budget 40")
        return Budget(pairs=int(value))
    return Budget(seconds=value * {"s": 1, "m": 60, "h": 3600}[unit])


def pairs_per_point(exp: Experiment) -> int:
    """The pairs a fixed grid measures at each point: the experiment's repeats (3 for 'auto')."""
    return exp.repeats if isinstance(exp.repeats, int) else 3


def fixed_grid_pairs(exp: Experiment, lengths: Sequence[int]) -> int:
    """What the fixed grid would measure: every length at the experiment's repeats."""
    return len(lengths) * pairs_per_point(exp)
