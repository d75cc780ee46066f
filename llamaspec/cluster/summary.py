"""Per-machine results of a study: each machine's speedups come from its own paired baselines.

A work item measures its baselines on the machine that measures its speculative runs, so every
ratio here is within one machine; machines are never mixed into one ratio (a fast machine's
baseline against a slow machine's speculative run would be a hardware comparison, not a speedup).

The estimator is the one a single machine uses (:data:`llamaspec.measure.estimators.OVER_MACHINES`): per
machine and case, the run core's own summary (``summary.summarize``) over every pair that machine
measured of that case, its items pooled and paired by pair index (a case split into one item per
repeat is one point again). The same study measured on one machine reports the same figures.

A swept study (``sweep --cluster``) is a workload study per machine: each machine's points reach
one decision (``study.study_decisions``), printed machine by machine (:func:`describe_points`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from llamaspec.base import stats
from llamaspec.cluster.sink import machine_of
from llamaspec.decision import workload
from llamaspec.measure import estimators
from llamaspec.measure.summary import Summary, summarize
from llamaspec.store.results import Store
from llamaspec.store.rows import measurements_of


@dataclass(frozen=True)
class MachineFigures:
    """One machine's figures of a study: items it ran, per case the point's :class:`Summary` over
    all that machine's pairs of the case (``cases``); ``speedup`` is the case's when the study has
    one case (None over several: no one figure over them); ``speedups`` every pair's ratio;
    ``estimator`` names how the speedups were computed."""

    items: int
    estimator: str
    cases: dict[str, Summary]
    speedup: stats.Spread | None
    speedups: list[float]
    decode_tps: stats.Spread | None
    baseline_decode_tps: stats.Spread | None

    def to_dict(self) -> dict[str, Any]:
        """For --json: every field, the summaries and spreads as their own dicts."""
        return {"items": self.items, "estimator": self.estimator,
                "cases": {case: s.to_dict() for case, s in self.cases.items()},
                "speedup": self.speedup.to_dict() if self.speedup else None, "speedups": list(self.speedups),
                "decode_tps": self.decode_tps.to_dict() if self.decode_tps else None,
                "baseline_decode_tps": self.baseline_decode_tps.to_dict() if self.baseline_decode_tps else None}


def per_machine(store: Store, study: str) -> dict[str, MachineFigures]:
    """For each machine of a study, its :class:`MachineFigures`: every ratio within that machine."""
    runs = store.runs(group_id=study, status="ok")
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    items: dict[str, int] = defaultdict(int)
    temperature: dict[str, float | None] = {}  # per case: a sampled case has no lossless verdict
    for run in sorted(runs, key=lambda r: r["id"]):
        machine = machine_of(run) or "?"
        items[machine] += 1
        grouped[machine][run["case_name"]] += store.measurements(run["id"])
        temperature[run["case_name"]] = (run.get("settings") or {}).get("temperature")
    out: dict[str, MachineFigures] = {}
    for machine, cases in sorted(grouped.items()):
        summaries = {case: summarize(measurements_of(rows), temperature=temperature.get(case)) for case, rows in cases.items()}
        ratios = [r for s in summaries.values() if s.speedup for r in (s.speedup.values or ())]
        spec = [m["decode_tps"] for rows in cases.values() for m in rows if m["mode"] == "speculative" and m["ok"] and m["decode_tps"]]
        base = [m["decode_tps"] for rows in cases.values() for m in rows if m["mode"] == "baseline" and m["ok"] and m["decode_tps"]]
        only = next(iter(summaries.values())) if len(summaries) == 1 else None
        out[machine] = MachineFigures(items=items[machine], estimator=estimators.OVER_MACHINES, cases=summaries,
                                      speedup=only.speedup if only else None, speedups=ratios,
                                      decode_tps=stats.spread(spec), baseline_decode_tps=stats.spread(base))
    return out


def describe(per: dict[str, MachineFigures]) -> list[str]:
    """Per machine: items, speeds and each case's speedup; then the estimator's name."""
    lines = []
    for machine, s in per.items():
        sp, cases = s.speedup, s.cases
        dec, base = s.decode_tps, s.baseline_decode_tps
        speeds = (f" (speculative {dec.text('{:.1f}') if dec else '-'} t/s, baseline "
                  f"{base.text('{:.1f}') if base else '-'} t/s)")
        if len(cases) == 1:
            lines.append(f"{machine}: {s.items} items, speedup {sp.text(suffix='x') if sp else '-'}{speeds}")
            continue
        lines.append(f"{machine}: {s.items} items{speeds}")
        for case, summary in cases.items():
            lines.append(f"  {case:<24} speedup {summary.speedup.text(suffix='x') if summary.speedup else '-'}"
                         f" ({summary.pairs} pairs)")
    if per:
        lines.append(f"speedup: {estimators.POINT}, per machine and case")
    return lines


def describe_points(per: dict[str, workload.WorkloadDecision]) -> list[str]:
    """Per machine: each setup's workload speedup and its prompts' own, then the decision."""
    lines = []
    for machine, decision in per.items():
        lines.append(f"{machine}:")
        lines += decision.table()
        lines += ["  " + line for line in decision.lines()]
    return lines


def describe_report(report: Any) -> list[str]:
    """What a study did besides its results: items run or resumed, machines refused or lost,
    items failed or not run (one line each; throughput per machine is in the progress lines)."""
    lines = [f"study {report.study}: {len(report.done)} items run, {report.skipped} already stored"
             + (f", {len(report.failed)} failed" if report.failed else "")
             + (f", {len(report.not_run)} not run" if report.not_run else "")]
    lines += [f"  refused: {why}" for why in report.refused.values()]
    lines += [f"  lost: {m} (items handed back and redone elsewhere: {', '.join(keys)})" for m, keys in report.lost.items()]
    lines += [f"  failed: {key}: {why}" for key, why in report.failed.items()]
    lines += [f"  not run: {key}: {why}" for key, why in report.not_run.items()]
    return lines
