"""Per-machine results of a study: each machine's speedups come from its own paired baselines.

A work item measures its baselines on the machine that measures its speculative runs, so every
ratio here is within one machine; machines are never mixed into one ratio (a fast machine's
baseline against a slow machine's speculative run would be a hardware comparison, not a speedup).

The estimator is the one a single machine uses (:data:`llamaspec.estimators.OVER_MACHINES`): per
machine and case, the run core's own summary (``summary.summarize``) over every pair that machine
measured of that case, its items pooled and paired by pair index (a case split into one item per
repeat is one point again). The same study measured on one machine reports the same figures.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from llamaspec import decide, estimators, stats
from llamaspec.cluster.sink import machine_of
from llamaspec.results import Store, measurements_of
from llamaspec.summary import Summary, summarize


def per_machine(store: Store, study: str) -> dict[str, dict[str, Any]]:
    """For each machine of a study: items done, and per case the point's :class:`Summary` over all
    that machine's pairs of the case (``cases``); ``speedup`` is the case's when the study has one
    case; ``speedups`` every pair's ratio; ``estimator`` names how the speedups were computed."""
    runs = store.runs(group_id=study, status="ok")
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    items: dict[str, int] = defaultdict(int)
    temperature: dict[str, float | None] = {}  # per case: a sampled case has no lossless verdict
    for run in sorted(runs, key=lambda r: r["id"]):
        machine = machine_of(run) or "?"
        items[machine] += 1
        grouped[machine][run["case_name"]] += store.measurements(run["id"])
        temperature[run["case_name"]] = (run.get("settings") or {}).get("temperature")
    out: dict[str, dict[str, Any]] = {}
    for machine, cases in sorted(grouped.items()):
        summaries = {case: summarize(measurements_of(rows), temperature=temperature.get(case)) for case, rows in cases.items()}
        ratios = [r for s in summaries.values() if s.speedup for r in (s.speedup.values or ())]
        spec = [m["decode_tps"] for rows in cases.values() for m in rows if m["mode"] == "speculative" and m["ok"] and m["decode_tps"]]
        base = [m["decode_tps"] for rows in cases.values() for m in rows if m["mode"] == "baseline" and m["ok"] and m["decode_tps"]]
        only = next(iter(summaries.values())) if len(summaries) == 1 else None
        out[machine] = {
            "items": items[machine],
            "estimator": estimators.OVER_MACHINES,
            "cases": summaries,
            "speedup": only.speedup if only else None,
            "speedups": ratios,
            "decode_tps": stats.spread(spec),
            "baseline_decode_tps": stats.spread(base),
        }
    return out


def describe(per: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for machine, s in per.items():
        sp, cases = s["speedup"], s["cases"]
        dec, base = s["decode_tps"], s["baseline_decode_tps"]
        speeds = (f" (speculative {dec.text('{:.1f}') if dec else '-'} t/s, baseline "
                  f"{base.text('{:.1f}') if base else '-'} t/s)")
        if len(cases) == 1:
            lines.append(f"{machine}: {s['items']} items, speedup {sp.text(suffix='x') if sp else '-'}{speeds}")
            continue
        lines.append(f"{machine}: {s['items']} items{speeds}")
        for case, summary in cases.items():
            lines.append(f"  {case:<24} speedup {summary.speedup.text(suffix='x') if summary.speedup else '-'}"
                         f" ({summary.pairs} pairs)")
    if per:
        lines.append(f"speedup: {estimators.POINT}, per machine and case")
    return lines


def per_point(store: Store, study: str) -> dict[str, dict[str, Any]]:
    """A swept study per machine: each point's paired speedup (its own summary, its own baselines on
    its machine), and the point the one decision rule (llamaspec.decide) picks there, with the
    contenders that could still beat it ("tied")."""

    points: dict[str, list[tuple[str, stats.Spread]]] = defaultdict(list)
    for run in sorted(store.runs(group_id=study, status="ok"), key=lambda r: r["id"]):
        speedup = Summary.from_dict(run.get("summary")).speedup
        if speedup is not None:
            label = (run.get("provenance") or {}).get("point") or run["point_key"]
            points[machine_of(run) or "?"].append((f"{run['case_name']} {label}", speedup))
    out: dict[str, dict[str, Any]] = {}
    for machine, found in sorted(points.items()):
        d = decide.decide([decide.Candidate(label, label, spread) for label, spread in found])
        best = d.chosen.label if d.chosen else None
        out[machine] = {"points": dict(found), "best": best, "verdict": d.verdict,
                        "tied": [e.label for e in d.contenders if e.label != best]}
    return out


def describe_points(per: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for machine, s in per.items():
        lines.append(f"{machine}:")
        for label, sp in s["points"].items():
            lines.append(f"  {label:<36} speedup {sp.text(suffix='x')}" + ("   <- best" if label == s["best"] else ""))
        if s["tied"]:
            lines.append(f"  could still beat it: {', '.join(s['tied'])}")
        if s.get("verdict") not in (None, "recommend"):
            lines.append(f"  decision: {s['verdict']}")
    if per:
        lines.append(f"speedup: {estimators.POINT}, per machine and point")
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
