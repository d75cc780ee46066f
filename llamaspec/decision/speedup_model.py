"""The speedup model fitted to stored points, and its band: what a study's decision weighs.

Reads stored runs (rows of the results store), builds :class:`llamaspec.theory.Observation` s
from what the engine printed, fits :func:`llamaspec.theory.analyze`, and bootstraps the band the
decision rule reads (:class:`llamaspec.decision.decide.ModelView`). Points are fitted together
only when they differ in draft length alone (other axes make groups). The views draw and print
these fits (``llamaspec.views.analysis``); nothing here draws.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import Spread
from llamaspec.decision import decide
from llamaspec.decision.workload_runs import draft_bytes
from llamaspec.measure import spectypes
from llamaspec.measure.settings import SWEEPABLE
from llamaspec.measure.summary import FINISHED, Summary


@dataclass(frozen=True)
class PointRow:
    run_id: int
    label: str  # the non-draft-length axes of the point
    draft_max: int
    summary: Summary
    draft_bytes: int = 0  # the draft file's size (a cheaper draft wins ties with a dearer one)
    spec_type: str = spectypes.DEFAULT  # the point's speculative type (Settings.spec_type)

    @property
    def draft_free(self) -> bool:
        """A draft-free mode (n-gram): no draft model, so no draft cost and no draft length to model."""
        return spectypes.of(self.spec_type).draft_free

    @property
    def speedup(self) -> Spread | None:
        return self.summary.speedup

    @property
    def key(self) -> tuple[str, int]:
        return (self.label, self.draft_max)

    @property
    def name(self) -> str:
        return setting_label(self.label, self.draft_max)

    @property
    def cost(self) -> tuple[float, ...]:
        return (self.draft_max, self.draft_bytes)


def setting_label(group: str, draft_max: int) -> str:
    return f"draft {draft_max}" + (f" ({group})" if group else "")

@dataclass
class FittedGroup:
    label: str
    rows: list[PointRow]
    analysis: Any = None  # theory.Analysis, when it could be fitted
    note: str | None = None
    view: decide.ModelView | None = None  # the model's bootstrap band, for a study's decision

    @property
    def model_error(self) -> float | None:
        """Median |predicted - measured| / measured over the fitted points (``Analysis.median_abs_error``)."""
        return None if self.analysis is None else self.analysis.median_abs_error

def observation(row: PointRow) -> Any:
    """A theory.Observation from a stored point (None when it lacks what the model needs)."""
    from llamaspec import theory
    from llamaspec.registry import engines

    s = row.summary
    spec, base = s.decode_tps, s.baseline_decode_tps
    if row.draft_free:  # the model's round spends draft steps at a draft length; these rounds have neither
        return None
    if not (spec and base and s.n_drafted is not None and s.n_accept is not None and s.n_predict):
        return None
    if (s.n_accept >= s.n_predict or row.draft_max < 1 or s.status != "ok" or s.program is None
            or not engines.knows(s.program) or not s.rounds):
        return None
    return theory.Observation(
        draft_max=row.draft_max, n_drafted=s.n_drafted, n_accept=s.n_accept, n_generated=s.n_predict,
        spec_decode_tps=spec.median, baseline_decode_tps=base.median, rounds=s.rounds,
        drafted_rounds=s.drafted_rounds, profile=engines.round_profile(s.program),
        speedup=s.speedup.median if s.speedup else None,
        positions=(theory.PositionCurve(s.drafted_by_position, s.accepted_by_position)
                   if s.drafted_by_position and s.accepted_by_position else None),
    )


def baseline_step_ms(rows: Sequence[PointRow]) -> float | None:
    """The target-alone step the sweep's own baselines measured: 1000 / the median decode speed of
    every baseline run of these points (SPEED_DEFINITION, sampling included)."""
    speeds = [v for r in rows if r.summary.baseline_decode_tps for v in r.summary.baseline_decode_tps.values if v > 0]
    return 1000.0 / statistics.median(speeds) if speeds else None


def cost_model(rows: Sequence[PointRow], profile: Any) -> Any:
    """The measured costs of these points (llama-bench at the run's depth: the target's batches and
    the draft's step, shared by the points of a sweep), or None when they were not timed.

    The baseline's cost per token is llama-bench's batch of one (the smaller error on most recorded
    sweeps: docs/method.md), except for a program that charges its engine's loop
    (``profile.loop_overhead``: llama-server, transformers): that one takes the baselines' step
    (:func:`baseline_step_ms`), the loop's cost being that step less the timed one.

    The costs are the engine's own (``Capabilities.times_costs``: the ``batch`` and ``draft``
    measurements, stored with the point): ``batch_ms`` and ``cost_depth`` from the batch timing,
    the draft's step from the draft timing, whichever engine took them."""
    from llamaspec import theory

    for r in rows:
        s = r.summary
        if s.batch_ms and 1 in s.batch_ms and s.draft_decode_tps:
            sample = s.sample_ms_per_token or 0.0
            cost = theory.CostModel.from_bench(s.batch_ms, 1000.0 / s.draft_decode_tps.median, profile,
                                               target_sample_ms=sample, draft_sample_ms=sample, depth=s.cost_depth)
            step = baseline_step_ms(rows) if profile.loop_overhead != "none" else None
            return dataclasses.replace(cost, baseline_step_ms=step) if step else cost
    return None


BOOTSTRAP_REFITS = 200
# The error a model fitted to fewer points than theory.FIT_MIN_LENGTHS is taken to have: its median
# error at the lengths it did not see on the sweep-accept recordings (docs/results.md), rounded up.
PREDICTION_ERROR = 0.05


def _pairs(s: Summary) -> list[tuple[float, float, float]]:
    """(ratio, speculative t/s, baseline t/s) of each pair, in pair order ([] if a ratio has no
    baseline of its own): a paired summary's three spreads, or one whose runs share baselines one to
    one, hold the same pairs in the same order (``summary.summarize``)."""
    if not (s.own_baselines and s.speedup and s.decode_tps and s.baseline_decode_tps):
        return []
    ratios, spec, base = s.speedup.values, s.decode_tps.values, s.baseline_decode_tps.values
    if len(spec) < len(ratios) or len(base) < len(ratios):
        return []
    return list(zip(ratios, spec, base, strict=False))


def model_view(group: FittedGroup, refits: int = BOOTSTRAP_REFITS, seed: int = 0,
               grid: Sequence[int] | None = None) -> decide.ModelView | None:
    """The fitted model's band: every point's pairs resampled (with replacement) and the model
    refitted ``refits`` times; the 95 % percentile interval of its prediction at every draft
    length (those of ``grid`` only, when given: the lengths a sweep may measure), and the best
    length of each refit. None without a fit with costs."""
    from llamaspec import theory

    a = group.analysis
    if a is None or a.cost is None or not a.curve or group.model_error is None:
        return None
    fitted = [(o, _pairs(r.summary)) for r in group.rows if (o := observation(r)) is not None]
    if not fitted or any(not pairs for _o, pairs in fitted):
        return None
    rng = random.Random(seed)
    curves: dict[int, list[float]] = {p.draft_max: [] for p in a.curve}
    bests: list[int] = []
    for _ in range(refits):
        obs, base_all = [], []
        for o, pairs in fitted:
            pick = [pairs[rng.randrange(len(pairs))] for _ in pairs]
            base_all += [b for _r, _s, b in pick]
            obs.append(dataclasses.replace(o, speedup=statistics.median(r for r, _s, _b in pick),
                                           spec_decode_tps=statistics.median(sp for _r, sp, _b in pick),
                                           baseline_decode_tps=statistics.median(b for _r, _s, b in pick)))
        cost = a.cost
        if cost.baseline_step_ms is not None:
            cost = dataclasses.replace(cost, baseline_step_ms=1000.0 / statistics.median(base_all))
        fit = theory.analyze(obs, cost, max_draft=a.max_draft)
        for p in fit.curve:
            curves[p.draft_max].append(p.speedup)
        if fit.best is not None:
            bests.append(fit.best.draft_max)
    bytes_ = max((r.draft_bytes for r in group.rows), default=0)
    allowed = set(grid) | {r.draft_max for r in group.rows} if grid is not None else None
    bands = []
    for p in a.curve:
        if allowed is not None and p.draft_max not in allowed:
            continue
        values = sorted(curves[p.draft_max])
        lo, hi = values[int(0.025 * (len(values) - 1))], values[int(math.ceil(0.975 * (len(values) - 1)))]
        bands.append(decide.Band((group.label, p.draft_max), setting_label(group.label, p.draft_max), p.speedup,
                                 min(lo, p.speedup), max(hi, p.speedup), (p.draft_max, bytes_)))
    best = a.best.draft_max if a.best else a.curve[0].draft_max
    best_range = tuple((group.label, k) for k in sorted(k for k in set(bests) if bests.count(k) >= 0.025 * len(bests)))
    # Over fewer lengths than the cost fit needs to be judged (a first pass of the longest lengths,
    # predicting the rest from their acceptance by position), the error over the points says
    # little: the model's error out of sample on the recordings counts instead, where larger.
    error = group.model_error
    if len(fitted) < theory.FIT_MIN_LENGTHS or a.positions is not None:
        error = max(error, PREDICTION_ERROR)
    return decide.ModelView(tuple(bands), (group.label, best), best_range or ((group.label, best),), error)


def analyze_rows(rows: Sequence[PointRow]) -> tuple[Any, str | None]:
    """(Analysis or None, note or None)."""
    from llamaspec import theory
    from llamaspec.registry import engines

    if rows and all(r.draft_free for r in rows):
        modes = ", ".join(sorted({r.spec_type for r in rows}))
        return None, (f"{modes} drafts without a draft model, from the text itself: the speedup model (a draft "
                            "model's cost at a draft length) does not predict it; the measured figures stand")
    if any(r.summary.draft.policy == "adaptive" for r in rows):
        # The model spends k draft steps a round at the requested k; an adaptive program (Sep 2023)
        # changes k within the run, so its points would be fitted at a length they never used.
        return None, "the program adapts its draft length during the run: the speedup model (fixed k) does not apply"
    try:
        obs = [o for o in (observation(r) for r in rows) if o is not None]
    except LlamaspecError as exc:  # counters that contradict the program's loop
        return None, f"the speedup model could not be fitted: {exc.message}"
    if not obs and any(r.summary.n_drafted for r in rows) and not any(engines.knows(r.summary.program) for r in rows):
        named = sorted({r.summary.program or "none" for r in rows})
        return None, (f"these runs name no round profile the speedup model knows (program {', '.join(named)}): "
                            "no alpha or prediction (the measured figures stand)")
    if not obs or all(o.n_drafted == 0 for o in obs):
        return None, "nothing was drafted: no acceptance to model"
    try:
        result = theory.analyze(obs, cost_model(rows, obs[0].profile), max_draft=max(16, max(o.draft_max for o in obs)))
    except LlamaspecError as exc:
        return None, f"the speedup model could not be fitted: {exc.message}"
    note = None if result.cost else "no draft timing measured: speedups are not predicted (only alpha and the ceiling)"
    return result, note

def _group_label(settings: dict[str, Any], axes: Sequence[str], draft: str | None) -> str:
    parts = []
    for axis in axes:
        if axis == "draft_max":
            continue
        # a catalog draft by its variant; a file or repo (a '/' in the label) by the whole label:
        # two repos' Q4_0 files are two groups, not one
        value = (draft if "/" in draft else draft.split(":")[-1]) if axis == "draft_variant" and draft else settings.get(axis)
        parts.append(f"{axis}={value}")
    return ", ".join(parts)


def rows_to_groups(runs: Sequence[dict[str, Any]], axes: Sequence[str]) -> dict[str, list[PointRow]]:
    groups: dict[str, list[PointRow]] = {}
    for run in runs:
        label = _group_label(run["settings"], axes, run.get("draft"))
        groups.setdefault(label, []).append(PointRow(run["id"], label, int(run["settings"].get("draft_max") or 0),
                                                     Summary.from_dict(run.get("summary")), draft_bytes(run),
                                                     run["settings"].get("spec_type") or spectypes.DEFAULT))
    return groups

def fit_groups(runs: Sequence[dict[str, Any]], axes: Sequence[str], grid: Sequence[int] | None = None,
               refits: int = BOOTSTRAP_REFITS) -> list[FittedGroup]:
    """These runs grouped by the settings of ``axes`` other than the draft length (each length's
    newest point), each group's model fitted; ``grid``: the draft lengths the model's band is given
    at (None: every length it predicts); ``refits``: the bootstrap refits of that band."""
    groups = []
    for label, rows in rows_to_groups(runs, axes).items():
        rows = latest_per_draft(rows)
        analysis, note = analyze_rows(rows)
        group = FittedGroup(label, rows, analysis, note=note)
        group.view = model_view(group, refits=refits, grid=grid)
        groups.append(group)
    return groups


def latest_per_draft(rows: list[PointRow]) -> list[PointRow]:
    latest: dict[int, PointRow] = {}
    for r in sorted(rows, key=lambda r: r.run_id):
        latest[r.draft_max] = r
    return sorted(latest.values(), key=lambda r: r.draft_max)


def finished(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs that measured something to show: ok, or ok but with a differing output."""
    return [r for r in runs if r["status"] in FINISHED]

def axes_of(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The settings that vary between these runs (draft variant included)."""
    keys = tuple(SWEEPABLE)
    axes = [k for k in keys if len({str(r["settings"].get(k)) for r in runs}) > 1]
    if len({r.get("draft") for r in runs}) > 1:
        axes.append("draft_variant")
    return axes
