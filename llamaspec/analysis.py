"""From stored runs to conclusions: the speedup model fitted to a sweep, plots, a recommendation.

Reads the results store, builds :class:`llamaspec.theory.Observation` s from what llama.cpp
printed, fits :func:`llamaspec.theory.analyze`, and draws :mod:`llamaspec.plot` figures.
Points are fitted together only when they differ in draft length alone (other axes make groups).
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaspec import paths
from llamaspec.errors import LlamaspecError
from llamaspec.results import Store

log = logging.getLogger(__name__)

TARGET_SPEEDUP = 1.2


@dataclass(frozen=True)
class PointRow:
    run_id: int
    label: str  # the non-draft-length axes of the point
    draft_max: int
    summary: dict[str, Any]

    def med(self, key: str) -> float | None:
        return (self.summary.get(key) or {}).get("median")


@dataclass
class GroupReport:
    label: str
    rows: list[PointRow]
    analysis: Any = None  # theory.Analysis, when it could be fitted
    explanation: str | None = None
    plots: list[Path] = field(default_factory=list)
    note: str | None = None

    @property
    def best_measured(self) -> PointRow | None:
        scored = [r for r in self.rows if r.med("speedup")]
        return max(scored, key=lambda r: r.med("speedup") or 0) if scored else None


@dataclass
class SweepReport:
    sweep_id: str
    experiment: str
    case: str
    meta: dict[str, str]
    groups: list[GroupReport]

    def best(self) -> tuple[GroupReport, PointRow] | None:
        found = [(g, g.best_measured) for g in self.groups if g.best_measured]
        if not found:
            return None
        return max(found, key=lambda gr: gr[1].med("speedup") or 0)  # type: ignore[union-attr,return-value]

    def render(self) -> str:
        lines = [f"sweep {self.sweep_id}: {self.experiment} / {self.case}",
                 f"  target {self.meta['target']}, draft {self.meta['draft']}; {self.meta['hardware']}, "
                 f"{self.meta['backend']}, llama.cpp {self.meta['commit']}"]
        for g in self.groups:
            if g.label:
                lines.append(f"\n  [{g.label}]")
            lines.append(f"  {'draft':>5} {'spec t/s':>16} {'base t/s':>9} {'speedup':>17} {'accept':>8} {'tok/call':>8} "
                         f"{'predicted':>9} {'error':>7}")
            fits = {p.draft_max: p for p in (g.analysis.points if g.analysis else ())}
            for r in sorted(g.rows, key=lambda r: r.draft_max):
                s = r.summary
                spec = s.get("decode_tps") or {}
                speed = s.get("speedup") or {}
                fit = fits.get(r.draft_max)
                pred = fit.predicted_speedup if fit else None
                err = f"{fit.rel_error * 100:+.0f}%" if fit and fit.rel_error is not None else "-"
                spec_text = f"{spec.get('median', 0):.2f}" + (f" [{spec['min']:.1f}-{spec['max']:.1f}]" if spec.get("n", 1) > 1 else "")
                speed_text = f"{speed.get('median', 0):.2f}x" + (f" [{speed['min']:.2f}-{speed['max']:.2f}]" if speed.get("n", 1) > 1 else "")
                lines.append(f"  {r.draft_max:>5} {spec_text:>16} {r.med('baseline_decode_tps') or 0:>9.2f} {speed_text:>17} "
                             f"{r.med('accept') or 0:>7.1f}% {s.get('tokens_per_call') or 0:>8.2f} "
                             f"{f'{pred:.2f}x' if pred else '-':>9} {err:>7}")
            if g.analysis is not None:
                a = g.analysis
                lines.append(f"  model: alpha {a.alpha:.3f} (per-token acceptance), ceiling {a.ceiling_speedup:.2f}x"
                             + (f", draft/target cost c = {a.cost.cost_ratio:.2f}" if a.cost else ""))
                if a.cost and a.best:
                    lines.append(f"  predicted best draft length {a.best.draft_max}: {a.best.speedup:.2f}x")
            if g.note:
                lines.append(f"  note: {g.note}")
            if g.explanation:
                lines.append(f"  why not {TARGET_SPEEDUP:.1f}x: {g.explanation}")
            for p in g.plots:
                if p.suffix == ".png":
                    lines.append(f"  plot: {p}")
        best = self.best()
        if best:
            g, r = best
            lines.append(f"\nbest: draft {r.draft_max}{' (' + g.label + ')' if g.label else ''} -> "
                         f"{r.med('speedup'):.2f}x measured (run {r.run_id})")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        best = self.best()
        return {
            "sweep_id": self.sweep_id, "experiment": self.experiment, "case": self.case, "meta": self.meta,
            "best": {"draft_max": best[1].draft_max, "group": best[0].label, "speedup": best[1].med("speedup"),
                     "run_id": best[1].run_id} if best else None,
            "groups": [{
                "label": g.label,
                "points": [{"run_id": r.run_id, "draft_max": r.draft_max, "summary": r.summary} for r in g.rows],
                "alpha": g.analysis.alpha if g.analysis else None,
                "cost_ratio": g.analysis.cost.cost_ratio if g.analysis and g.analysis.cost else None,
                "ceiling": g.analysis.ceiling_speedup if g.analysis else None,
                "predicted_best": dataclasses.asdict(g.analysis.best) if g.analysis and g.analysis.best else None,
                "fits": [dataclasses.asdict(p) for p in g.analysis.points] if g.analysis else [],
                "explanation": g.explanation, "plots": [str(p) for p in g.plots],
            } for g in self.groups],
        }


def observation(row: PointRow) -> Any:
    """A theory.Observation from a stored point (None when it lacks what the model needs)."""
    from llamaspec import theory

    s = row.summary
    spec, base = row.med("decode_tps"), row.med("baseline_decode_tps")
    if not (spec and base and s.get("n_drafted") is not None and s.get("n_accept") is not None and s.get("n_predict")):
        return None
    if s["n_accept"] >= s["n_predict"] or row.draft_max < 1:
        return None
    draft_tps = row.med("draft_decode_tps")
    verify = None
    calls = s["n_predict"] - s["n_accept"]
    if s.get("batch_ms") and calls > 0:
        from llamaspec.llamacpp.parse import BatchTimings

        # one call verifies the draft plus one token in a single batch
        verify = BatchTimings({int(k): v for k, v in s["batch_ms"].items()}).ms(s["n_drafted"] / calls + 1)
    return theory.Observation(
        draft_max=row.draft_max, n_drafted=int(s["n_drafted"]), n_accept=int(s["n_accept"]), n_generated=int(s["n_predict"]),
        spec_decode_tps=spec, baseline_decode_tps=base, target_ms_per_token=1000.0 / base,
        draft_ms_per_token=1000.0 / draft_tps if draft_tps else None,
        verify_ms_per_call=verify if verify and verify > 0 else None,
    )


def analyze_rows(rows: Sequence[PointRow], max_draft: int = 16) -> tuple[Any, str | None, str | None]:
    """(Analysis or None, explanation or None, note or None)."""
    from llamaspec import theory

    obs = [o for o in (observation(r) for r in rows) if o is not None]
    if not obs or all(o.n_drafted == 0 for o in obs):
        return None, None, "nothing was drafted: no acceptance to model"
    try:
        result = theory.analyze(obs, max_draft=max(max_draft, max(o.draft_max for o in obs)))
    except LlamaspecError as exc:
        return None, None, f"the speedup model could not be fitted: {exc.message}"
    note = None if result.cost else "no draft timing measured: speedups are not predicted (only alpha and the ceiling)"
    return result, theory.explain_shortfall(result, TARGET_SPEEDUP), note


def _meta(store: Store, run_id: int) -> dict[str, str]:
    run = store.run(run_id)
    prov = run.get("provenance") or {}
    hw = prov.get("hardware") or {}
    gpus = hw.get("gpus") or []
    hardware = (gpus[0] if gpus else f"{hw.get('cpu', '?')}") + f", {run['settings'].get('threads')} threads"
    return {"target": run.get("target") or "?", "draft": run.get("draft") or f"none ({run['settings'].get('spec_type')})",
            "hardware": hardware, "backend": run.get("backend") or "?", "commit": run.get("llamacpp_commit") or "?",
            "experiment": run["experiment"], "case": run["case_name"]}


def _group_label(settings: dict[str, Any], axes: Sequence[str], draft: str | None) -> str:
    parts = []
    for axis in axes:
        if axis == "draft_max":
            continue
        value = draft.split(":")[-1] if axis == "draft_variant" and draft else settings.get(axis)
        parts.append(f"{axis}={value}")
    return ", ".join(parts)


def rebased(store: Store | None, summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with its speedup against every measurement of its shared baseline (a sweep
    measures it at the start and again at the end), not only those taken before this point."""
    key = summary.get("baseline_key")
    spec = summary.get("decode_tps") or {}
    if store is None or not key or not spec.get("values"):
        return summary
    base = [m["decode_tps"] for m in store.shared(key) if m["decode_tps"]]
    if len(base) <= (summary.get("baseline_decode_tps") or {}).get("n", 0):
        return summary
    from llamaspec.run import spread

    mid = statistics.median(base)
    ratios = [v / mid for v in spec["values"]]
    return {**summary, "baseline_decode_tps": spread(base), "speedup": {**(spread(ratios) or {}), "of_medians": spec["median"] / mid,
                                                                        "paired": False}}


def rows_to_groups(runs: Sequence[dict[str, Any]], axes: Sequence[str], store: Store | None = None) -> dict[str, list[PointRow]]:
    groups: dict[str, list[PointRow]] = {}
    for run in runs:
        label = _group_label(run["settings"], axes, run.get("draft"))
        groups.setdefault(label, []).append(PointRow(run["id"], label, int(run["settings"].get("draft_max") or 0),
                                                     rebased(store, run["summary"] or {})))
    return groups


def report_for_runs(store: Store, runs: Sequence[dict[str, Any]], name: str, axes: Sequence[str], plot: bool,
                    out_dir: Path) -> SweepReport:
    if not runs:
        raise LlamaspecError(f"no finished runs for {name}", hint="run `llamaspec sweep NAME --draft 1..16` first")
    meta = _meta(store, runs[0]["id"])
    groups = []
    for label, rows in rows_to_groups(runs, axes, store).items():
        rows = _latest_per_draft(rows)
        analysis, explanation, note = analyze_rows(rows)
        group = GroupReport(label, rows, analysis, explanation, note=note)
        if plot:
            group.plots = draw(group, meta, out_dir, stem_prefix=_slug(label))
        groups.append(group)
    return SweepReport(name, meta["experiment"], meta["case"], meta, groups)


def _latest_per_draft(rows: list[PointRow]) -> list[PointRow]:
    latest: dict[int, PointRow] = {}
    for r in sorted(rows, key=lambda r: r.run_id):
        latest[r.draft_max] = r
    return sorted(latest.values(), key=lambda r: r.draft_max)


def sweep_report(store: Store, sweep_id: str, plot: bool = True) -> SweepReport:
    runs = [r for r in store.runs(sweep_id=sweep_id, status="ok") if r["kind"] == "sweep"]
    axes = _axes_of(runs)
    return report_for_runs(store, runs, sweep_id, axes, plot, paths.plots_dir() / sweep_id)


def _axes_of(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The settings that vary between these runs (draft variant included)."""
    keys = ("draft_max", "draft_p_min", "threads", "gpu_layers", "spec_type")
    axes = [k for k in keys if len({str(r["settings"].get(k)) for r in runs}) > 1]
    if len({r.get("draft") for r in runs}) > 1:
        axes.append("draft_variant")
    return axes


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).strip("_")


def draw(group: GroupReport, meta: dict[str, str], out_dir: Path, stem_prefix: str = "") -> list[Path]:
    from llamaspec import plot

    fits = {p.draft_max: p for p in (group.analysis.points if group.analysis else ())}
    points = []
    for r in group.rows:
        spec = r.summary.get("decode_tps") or {}
        base = r.med("baseline_decode_tps")
        if not spec.get("median") or not base:
            continue
        fit = fits.get(r.draft_max)
        points.append(plot.PlotPoint(
            draft_max=r.draft_max, decode_tps=spec["median"], baseline_tps=base,
            accept=accept / 100.0 if (accept := r.med("accept")) is not None else None,
            predicted_speedup=fit.predicted_speedup if fit else None,
            decode_tps_min=spec.get("min"), decode_tps_max=spec.get("max")))
    if not points:
        return []
    label = f"{meta['experiment']}/{meta['case']}" + (f" [{group.label}]" if group.label else "")
    pm = plot.PlotMeta(meta["target"], meta["draft"], meta["hardware"], meta["backend"], meta["commit"], label)
    a = group.analysis
    folder = out_dir / stem_prefix if stem_prefix else out_dir
    return plot.plot_all(points, pm, folder, predicted_speedup=a.speedup_curve if a and a.cost else None,
                         predicted_accept=a.accept_curve if a else None)


def experiment_report(store: Store, experiment: str, plot: bool = True) -> SweepReport:
    """The experiment's history: its latest sweep if it has one, else all its finished runs by draft length."""
    runs = store.runs(experiment=experiment, status="ok")
    if not runs:
        raise LlamaspecError(f"no finished runs of {experiment!r} in {store.path}",
                             hint=f"run `llamaspec run {experiment}` or `llamaspec sweep {experiment} --draft 1..8` first")
    sweeps = [r for r in runs if r["kind"] == "sweep"]
    if sweeps:
        return sweep_report(store, sweeps[0]["sweep_id"], plot)
    return report_for_runs(store, runs, experiment, _axes_of(runs), plot, paths.plots_dir() / _slug(experiment))
