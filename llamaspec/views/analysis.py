"""From stored runs to figures: the speedup model fitted to a sweep's points, and their plots.

Reads the results store, builds :class:`llamaspec.theory.Observation` s from what llama.cpp
printed, fits :func:`llamaspec.theory.analyze`, and asks :mod:`llamaspec.views.plot` (``draw_group``)
for each group's figures: the drawing is plot's. Points are fitted together only when they
differ in draft length alone (other axes make groups). Nothing here decides: the answer is the
study's, kept with it as it was made (``llamaspec.views.report.stored_answer``), and every view
prints that.

Its size: the three views of stored runs (a point row, a group fitted together, a sweep's
report) and the functions that turn one into the next; each view is built only from the one
before it, here.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.cpu import CpuInfo
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import Spread, percent_text
from llamaspec.decision import decide
from llamaspec.decision.workload_runs import draft_bytes
from llamaspec.measure import estimators, spectypes
from llamaspec.measure.contract import SPEED_DEFINITION
from llamaspec.measure.settings import SWEEPABLE
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Store
from llamaspec.store.rows import built_from

log = logging.getLogger(__name__)



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
class GroupReport:
    label: str
    rows: list[PointRow]
    analysis: Any = None  # theory.Analysis, when it could be fitted
    plots: list[Path] = field(default_factory=list)
    note: str | None = None
    view: decide.ModelView | None = None  # the model's bootstrap band, for a study's decision

    @property
    def model_error(self) -> float | None:
        """Median |predicted - measured| / measured over the fitted points."""
        if self.analysis is None:
            return None
        errors = [abs(p.rel_error) for p in self.analysis.points if p.rel_error is not None]
        return statistics.median(errors) if errors else None


@dataclass
class SweepReport:
    sweep_id: str
    experiment: str
    case: str
    meta: dict[str, str]
    groups: list[GroupReport]

    def row(self, key: object) -> tuple[GroupReport, PointRow] | None:
        return next(((g, r) for g in self.groups for r in g.rows if r.key == key), None)

    def noise(self) -> Any:
        """The machine during every point's measurements, combined (host.NoiseSample; None: not measured)."""
        from llamaspec.base.host import NoiseSample

        return NoiseSample.combine([r.summary.noise for g in self.groups for r in g.rows])

    def render(self) -> str:
        lines = [f"sweep {self.sweep_id}: {self.experiment} / {self.case}",
                 f"  target {self.meta['target']}, draft {self.meta['draft']}; {self.meta['hardware']}, "
                 f"{self.meta['engine']}" + (f", {self.meta['build']}" if self.meta.get('build') else ""),
                 f"  speed: {SPEED_DEFINITION}; speedup: {estimators.POINT}"]
        noise = self.noise()
        if noise is not None:  # beside the base CV column: the measured cause of an unsteady baseline
            lines.append(f"  machine: {noise.text()} ({noise.windows} generations)")
        for g in self.groups:
            if g.label:
                lines.append(f"\n  [{g.label}]")
            lines.append(f"  {'draft':>5} {'spec t/s':>9} {'base t/s':>9} {'base CV':>7} {'speedup [95% CI]':>20} "
                         f"{'accept':>7} {'tok/rnd':>7} {'predicted':>9} {'error':>6}  status")
            fits = {p.draft_max: p for p in (g.analysis.points if g.analysis else ())}
            for r in sorted(g.rows, key=lambda r: r.draft_max):
                s = r.summary
                fit = fits.get(r.draft_max)
                pred = fit.predicted_speedup if fit else None
                err = percent_text(fit.rel_error if fit else None, sign=True)
                cv = s.baseline_decode_tps.cv if s.baseline_decode_tps else None
                status = s.status if s.status != "ok" else ""
                if not s.paired and s.speedup:
                    status = (status + " shared-baseline").strip()
                lines.append(
                    f"  {s.draft.label if s.draft.policy == 'adaptive' else r.draft_max:>5} "
                    f"{_med(s.decode_tps):>9} {_med(s.baseline_decode_tps):>9} {percent_text(cv, 1):>7} "
                    f"{s.speedup.text(suffix='x') if s.speedup else '-':>20} "
                    f"{percent_text(s.acceptance.median if s.acceptance else None, 1):>7} {_num(s.tokens_per_round):>7} "
                    f"{f'{pred:.2f}x' if pred else '-':>9} {err:>6}  {status}")
            for r in g.rows:
                if r.summary.status == "differs":
                    lines.append(f"  draft {r.draft_max}: {r.summary.lossless.text()}")
            if g.analysis is not None:
                a = g.analysis
                lines.append(f"  model: alpha {a.alpha:.3f} (per-token acceptance)"
                             + (f", draft/target cost c = {a.cost.cost_ratio:.2f}" if a.cost else "")
                             + (f" (fitted to the speedups; timed alone {a.cost.timed_cost_ratio:.2f})"
                                if a.cost and a.cost.timed_cost_ratio is not None else ""))
                if a.positions is not None:
                    lines.append(f"  model: tokens per round from the acceptance by position (accepted through "
                                 f"position 1..{a.positions.length}: {a.positions.text()}), alpha beyond it")
                if g.model_error is not None:
                    alone = a.single_alpha.median_abs_error if a.single_alpha is not None else None
                    lines.append(f"  model error: median {percent_text(g.model_error, 1)} over {len(a.points)} points"
                                 + (f" ({a.acceptance_model}; with one alpha {percent_text(alone, 1)})" if alone is not None else ""))
                lines += [f"  assumption contradicted: {c}" for c in a.contradictions]
                drafted = [(p.draft_max, p.drafted_rounds, p.calls) for p in sorted(a.points, key=lambda p: p.draft_max)
                           if p.drafted_rounds is not None]
                if drafted:  # the engine counts the rounds that drafted apart (llama-server's /metrics)
                    lines.append("  rounds that drafted (the engine's count) / rounds (every target call): "
                                 + ", ".join(f"draft {k} {d}/{c}" for k, d, c in drafted))
                if a.cost:
                    lines += [f"  model leaves out: {item}" for item in a.profile.unmodelled]
            if g.note:
                lines.append(f"  note: {g.note}")
            for p in g.plots:
                if p.suffix == ".png":
                    lines.append(f"  plot: {p}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sweep_id": self.sweep_id, "experiment": self.experiment, "case": self.case, "meta": self.meta,
            "speed_definition": SPEED_DEFINITION,
            "noise": noise.to_dict() if (noise := self.noise()) is not None else None,
            "groups": [{
                "label": g.label,
                "points": [{"run_id": r.run_id, "draft_max": r.draft_max, "summary": r.summary.to_dict()} for r in g.rows],
                "model_band": [{"draft_max": b.key[1] if isinstance(b.key, tuple) else b.key, "predicted": b.predicted,
                                "low": b.low, "high": b.high} for b in g.view.bands] if g.view else [],
                "model_error": g.model_error,
                "acceptance_model": g.analysis.acceptance_model if g.analysis else None,
                "single_alpha_error": (g.analysis.single_alpha.median_abs_error
                                       if g.analysis and g.analysis.single_alpha else None),
                "contradictions": list(g.analysis.contradictions) if g.analysis else [],
                "alpha": g.analysis.alpha if g.analysis else None,
                "cost_ratio": g.analysis.cost.cost_ratio if g.analysis and g.analysis.cost else None,
                "timed_cost_ratio": g.analysis.cost.timed_cost_ratio if g.analysis and g.analysis.cost else None,
                "ceiling": g.analysis.ceiling_speedup if g.analysis else None,
                "predicted_best": dataclasses.asdict(g.analysis.best) if g.analysis and g.analysis.best else None,
                "fits": [dataclasses.asdict(p) for p in g.analysis.points] if g.analysis else [],
                "program": g.analysis.profile.name if g.analysis else None,
                "unmodelled": list(g.analysis.profile.unmodelled) if g.analysis else [],
                "plots": [str(p) for p in g.plots],
            } for g in self.groups],
        }


def _med(s: Spread | None) -> str:
    return f"{s.median:.2f}" if s else "-"


def _num(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


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
    if s.n_accept >= s.n_predict or row.draft_max < 1 or s.status != "ok" or s.program is None or not engines.knows(s.program):
        return None
    if not s.rounds:
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


def cost_model(rows: Sequence[PointRow], profile: Any, step_from_baselines: bool = False) -> Any:
    """The measured costs of these points (llama-bench at the run's depth: the target's batches and
    the draft's step, shared by the points of a sweep), or None when they were not timed.

    ``step_from_baselines``: the baseline's cost per token is what the sweep's own baselines
    measured (:func:`baseline_step_ms`), not llama-bench's batch of one. Off by default: over six
    recorded sweeps llama-bench's step had the smaller median error in four (the demo's sweep twice:
    3.6 % and 6.9 % against 5.7 % and 20.2 %; sweep-t1 5.1 % against 10.0 %; Q4_0 15.1 % against
    29.6 %), the baselines' in two (Q4_1 10.9 % against 26.7 %; Q2_K 7.5 % against 7.7 %).

    A program that charges its engine's loop (``profile.loop_overhead``: llama-server, transformers)
    always takes the baselines' step: the loop's cost is that step less the timed one.

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
            from_baselines = step_from_baselines or profile.loop_overhead != "none"
            step = baseline_step_ms(rows) if from_baselines else None
            return dataclasses.replace(cost, baseline_step_ms=step) if step else cost
    return None


BOOTSTRAP_REFITS = 200
# The speedup model's median error at the lengths it did not see, predicting draft 1..12 from the
# longest two (14 and 16) on their acceptance by position and costs: 3.5 % (Q4_1), 2.6 % (Q4_0),
# 2.3 % (Q4_1 three hours later) on the recordings of tests/fixtures/llamacpp/0c1e570/sweep-accept
# with positions/ (benchmarks/decide.py prints it). Rounded up: the error a model fitted to fewer
# points than theory.FIT_MIN_LENGTHS is taken to have.
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


def model_view(group: GroupReport, refits: int = BOOTSTRAP_REFITS, seed: int = 0,
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
    common = sorted(set(bests), key=lambda k: -bests.count(k))
    best_range = tuple((group.label, k) for k in sorted(k for k in common if bests.count(k) >= 0.025 * len(bests)))
    # Over fewer lengths than the cost fit needs to be judged (a first pass of the longest lengths,
    # predicting the rest from their acceptance by position), the error over the points says
    # little: the model's error out of sample on the recordings counts instead, where larger.
    error = group.model_error
    if len(fitted) < theory.FIT_MIN_LENGTHS or a.positions is not None:
        error = max(error, PREDICTION_ERROR)
    return decide.ModelView(tuple(bands), (group.label, best), best_range or ((group.label, best),), error)


def analyze_rows(rows: Sequence[PointRow], max_draft: int = 16) -> tuple[Any, str | None]:
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
        result = theory.analyze(obs, cost_model(rows, obs[0].profile), max_draft=max(max_draft, max(o.draft_max for o in obs)))
    except LlamaspecError as exc:
        return None, f"the speedup model could not be fitted: {exc.message}"
    note = None if result.cost else "no draft timing measured: speedups are not predicted (only alpha and the ceiling)"
    return result, note


def run_meta(store: Store, run_id: int) -> dict[str, str]:
    run = store.run(run_id)
    prov = run.get("provenance") or {}
    hw = prov.get("hardware") or {}
    gpus = hw.get("gpus") or []
    cpu = CpuInfo.from_hardware(hw)
    threads = f", {run['settings'].get('threads')} threads"
    source = built_from(run)
    return {"target": run.get("target") or "?", "draft": run.get("draft") or f"none ({run['settings'].get('spec_type')})",
            # the CPU's kind and speed flags: two machines with one CPU name can differ in speed
            "hardware": (gpus[0] if gpus else cpu.text()) + threads,
            "machine": (gpus[0] if gpus else cpu.short()) + threads,  # shorter, for a figure's title
            # an engine built from source: its accelerator and build ("llama.cpp 0c1e570"); an engine in
            # a library: its identity (library versions, device), and no build
            "engine": (run.get("accel") or "?") if source else str(prov.get("identity") or run.get("engine")),
            "build": f"{source} {run.get('engine_version') or '?'}" if source else "",
            "experiment": run["experiment"], "case": run["case_name"],
            "traffic": str((prov.get("engine") or {}).get("traffic") or "")}  # llama-server: warm or cold


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


def report_for_runs(store: Store, runs: Sequence[dict[str, Any]], name: str, axes: Sequence[str], plot: bool,
                    out_dir: Path, grid: Sequence[int] | None = None, refits: int = BOOTSTRAP_REFITS) -> SweepReport:
    """The report over these runs, grouped by the settings of ``axes`` other than the draft
    length; ``grid``: the draft lengths the model's band is given at (None: every length it
    predicts); ``refits``: the bootstrap refits of that band."""
    if not runs:
        raise LlamaspecError(f"no finished runs for {name}", hint="run `llamaspec sweep NAME --draft 1..16` first")
    meta = run_meta(store, runs[0]["id"])
    groups = []
    for label, rows in rows_to_groups(runs, axes).items():
        rows = _latest_per_draft(rows)
        analysis, note = analyze_rows(rows)
        group = GroupReport(label, rows, analysis, note=note)
        group.view = model_view(group, refits=refits, grid=grid)
        if plot:
            from llamaspec.views import plot as plots

            group.plots = plots.draw_group(group, meta, out_dir, stem_prefix=_slug(label))
        groups.append(group)
    return SweepReport(name, meta["experiment"], meta["case"], meta, groups)


def _latest_per_draft(rows: list[PointRow]) -> list[PointRow]:
    latest: dict[int, PointRow] = {}
    for r in sorted(rows, key=lambda r: r.run_id):
        latest[r.draft_max] = r
    return sorted(latest.values(), key=lambda r: r.draft_max)


def finished(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs that measured something to show: ok, or ok but with a differing output."""
    return [r for r in runs if r["status"] in ("ok", "differs")]


def sweep_report(store: Store, sweep_id: str, plot: bool = True) -> SweepReport:
    runs = [r for r in finished(store.runs(group_id=sweep_id)) if r["kind"] == "sweep"]
    axes = axes_of(runs)
    return report_for_runs(store, runs, sweep_id, axes, plot, paths.plots_dir() / sweep_id)


def axes_of(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The settings that vary between these runs (draft variant included)."""
    keys = tuple(SWEEPABLE)
    axes = [k for k in keys if len({str(r["settings"].get(k)) for r in runs}) > 1]
    if len({r.get("draft") for r in runs}) > 1:
        axes.append("draft_variant")
    return axes


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).strip("_")


def experiment_report(store: Store, experiment: str, plot: bool = True) -> SweepReport:
    """The experiment's history: its latest sweep if it has one, else all its finished runs by draft length."""
    runs = finished(store.runs(experiment=experiment))
    if not runs:
        raise LlamaspecError(f"no finished runs of {experiment!r} in {store.path}",
                             hint=f"run `llamaspec run {experiment}` or `llamaspec sweep {experiment} --draft 1..8` first")
    sweeps = [r for r in runs if r["kind"] == "sweep"]
    if sweeps:
        return sweep_report(store, sweeps[0]["group_id"], plot)
    return report_for_runs(store, runs, experiment, axes_of(runs), plot, paths.plots_dir() / _slug(experiment))
