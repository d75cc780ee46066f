"""Per-machine results of a study: each machine's speedups come from its own paired baselines.

A work item measures its baselines on the machine that measures its speculative runs, so every
ratio here is within one machine; machines are never mixed into one ratio (a fast machine's
baseline against a slow machine's speculative run would be a hardware comparison, not a speedup).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from llamaspec import decide, stats
from llamaspec.cluster.sink import machine_of
from llamaspec.results import Store


def item_speedups(run: dict[str, Any], measurements: list[dict[str, Any]]) -> list[float]:
    """Speculative over baseline decode speed per repeat, pairing only measurements of this run
    (one machine) with the same repeat number."""
    by_repeat: dict[int, dict[str, float]] = defaultdict(dict)
    for m in measurements:
        if m.get("ok") and m.get("decode_tps") and m.get("mode") in ("baseline", "speculative"):
            by_repeat[int(m["repeat"])][m["mode"]] = float(m["decode_tps"])
    return [p["speculative"] / p["baseline"] for _r, p in sorted(by_repeat.items()) if "speculative" in p and "baseline" in p]


def per_machine(store: Store, study: str) -> dict[str, dict[str, Any]]:
    """For each machine of a study: items done, the geometric mean of its items' speedups (each item's
    median over its repeats) with a bootstrap interval, and every repeat's speedup."""
    runs = store.runs(group_id=study, status="ok")
    grouped: dict[str, list[tuple[str, list[float], list[dict[str, Any]]]]] = defaultdict(list)
    for run in runs:
        ms = store.measurements(run["id"])
        grouped[machine_of(run) or "?"].append((run["point_key"], item_speedups(run, ms), ms))
    out: dict[str, dict[str, Any]] = {}
    for machine, items in sorted(grouped.items()):
        per_item = [stats.spread(s).median for _k, s, _m in items if s]  # type: ignore[union-attr]
        all_ratios = [r for _k, s, _m in items for r in s]
        spec = [m["decode_tps"] for _k, _s, ms in items for m in ms if m["mode"] == "speculative" and m["ok"] and m["decode_tps"]]
        base = [m["decode_tps"] for _k, _s, ms in items for m in ms if m["mode"] == "baseline" and m["ok"] and m["decode_tps"]]
        out[machine] = {
            "items": len(items),
            "speedup": stats.mean_spread(per_item, geometric=True),
            "speedups": all_ratios,
            "decode_tps": stats.spread(spec),
            "baseline_decode_tps": stats.spread(base),
        }
    return out


def describe(per: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for machine, s in per.items():
        sp = s["speedup"]
        dec, base = s["decode_tps"], s["baseline_decode_tps"]
        lines.append(f"{machine}: {s['items']} items, speedup {sp.text(suffix='x') if sp else '-'}"
                     f" (speculative {dec.text('{:.1f}') if dec else '-'} t/s, baseline {base.text('{:.1f}') if base else '-'} t/s)")
    return lines


def per_point(store: Store, study: str) -> dict[str, dict[str, Any]]:
    """A swept study per machine: each point's paired speedup (its own summary, its own baselines on
    its machine), and the point the one decision rule (llamaspec.decide) picks there, with the
    contenders that could still beat it ("tied")."""
    from llamaspec.summary import Summary

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
