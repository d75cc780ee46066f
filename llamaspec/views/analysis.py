"""From stored runs to a sweep's report: each group's points, the speedup model fitted to them
(:mod:`llamaspec.decision.speedup_model`, the fit a study's decision weighs) and their plots.

Asks :mod:`llamaspec.views.plot` (``draw_group``) for each group's figures: the drawing is plot's.
Nothing here decides: the answer is the study's, kept with it as it was made
(``llamaspec.views.report.stored_answer``), and every view prints that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import Spread, percent_text
from llamaspec.decision.speedup_model import FittedGroup, axes_of, finished, fit_groups
from llamaspec.measure import estimators, spectypes
from llamaspec.measure.contract import SPEED_DEFINITION
from llamaspec.store.results import Store
from llamaspec.store.rows import run_meta


@dataclass
class SweepReport:
    sweep_id: str
    experiment: str
    case: str
    meta: dict[str, str]
    groups: list[FittedGroup]
    plots: dict[str, list[Path]] = field(default_factory=dict)  # each group's figures, by its label

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
                    f"{_num(s.decode_tps):>9} {_num(s.baseline_decode_tps):>9} {percent_text(cv, 1):>7} "
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
            for p in self.plots.get(g.label, []):
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
                "plots": [str(p) for p in self.plots.get(g.label, [])],
            } for g in self.groups],
        }


def _num(value: Spread | float | None) -> str:
    """A figure (a spread's median) to two places, or "-"."""
    value = value.median if isinstance(value, Spread) else value
    return f"{value:.2f}" if value is not None else "-"


def report_for_runs(runs: Sequence[dict[str, Any]], name: str, axes: Sequence[str], plot: bool,
                    out_dir: Path) -> SweepReport:
    """The report over these runs, grouped by the settings of ``axes`` other than the draft
    length (:func:`speedup_model.fit_groups`), each group drawn under ``out_dir`` with ``plot``."""
    if not runs:
        raise LlamaspecError(f"no finished runs for {name}", hint="run `llamaspec sweep NAME --draft 1..16` first")
    meta = run_meta(runs[0])  # a stored run as the store gives it: no second read
    report = SweepReport(name, meta["experiment"], meta["case"], meta, fit_groups(runs, axes))
    if plot:
        from llamaspec.views import plot as plots

        for g in report.groups:
            report.plots[g.label] = plots.draw_group(g, meta, out_dir, stem_prefix=_slug(g.label))
    return report


def sweep_report(store: Store, sweep_id: str, plot: bool = True) -> SweepReport:
    runs = [r for r in finished(store.runs(group_id=sweep_id)) if r["kind"] == "sweep"]
    return report_for_runs(runs, sweep_id, axes_of(runs), plot, paths.plots_dir() / sweep_id)

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
    return report_for_runs(runs, experiment, axes_of(runs), plot, paths.plots_dir() / _slug(experiment))


def plot_study(store: Store, study: dict[str, Any]) -> list[Any]:
    """The figures of a study as it was kept (:meth:`StudyResult.as_dict`, the same the command
    printed): each setup's workload speedup with each timed prompt's beside it, the recommended
    one marked, then each measured prompt's draft-length figures (speed, acceptance, speedup
    against draft length, with the model's band); the PNGs' paths. Nothing here decides."""
    from llamaspec.studies.state import prompt_group
    from llamaspec.views import plot, plotdata

    decision = study.get("decision") or {}
    chosen = decision.get("chosen") if decision.get("verdict") == "recommend" else None
    timed = set(study.get("timed_prompts") or [])
    categories = {p["prompt"]: p["category"] for p in study.get("prompts") or []}
    rows = []
    for s in study.get("setups") or []:
        sp = s.get("speedup")
        if not sp:
            continue
        per = {p: v["median"] for p, v in (s.get("per_prompt") or {}).items() if v and p in timed}
        rows.append(plotdata.WorkloadRow(s["label"], sp["median"], sp["low"], sp["high"], per,
                                     chosen is not None and s["label"] == chosen.get("label")))
    rows.sort(key=lambda r: -r.speedup)
    folder = paths.plots_dir() / study["study_id"]
    title = f"{study['experiment']}: " + (study.get("answer") or decision.get("verdict", ""))
    out = [p for p in plot.plot_workload(rows, {p: c for p, c in categories.items() if p in timed}, title, folder)
           if p.suffix == ".png"] if rows else []
    measured = [f["prompt"] for f in study.get("facts") or [] if f.get("timed_tokens") is not None]
    for prompt in measured:
        runs = [r for r in finished(store.runs(group_id=prompt_group(study["study_id"], prompt)))
                if spectypes.needs_draft(r["settings"].get("spec_type"))]
        if not runs:
            continue
        report = report_for_runs(runs, prompt, axes_of(runs), True, folder / prompt)
        out += [p for ps in report.plots.values() for p in ps if p.suffix == ".png"]
    return out
