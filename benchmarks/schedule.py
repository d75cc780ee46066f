"""Does the study's schedule change its figure? Blocks (B S1..Sk B, as a study measures) against
whole ABBA pairs, on the same prompts and setups, on a quiet machine and with a process beside it.

For each condition (``quiet``, then ``loaded``: a process that keeps ``--load`` of one core busy,
in short bursts, at normal priority, outside this process's tree so the meter counts it as another's), it measures the same prompts of the built-in workload and
the same setups twice, interleaved prompt by prompt (the order of the two designs alternating):

- **blocks**: the study's own measurement (:meth:`llamaspec.studies.state.StudyState.measure_block`
  through :func:`llamaspec.studies.study.run_study`, ``--fixed-grid --whole-workload``): ``--repeats``
  blocks a prompt, each the target alone, every setup in a shuffled order, the target alone again;
- **pairs**: each setup on each prompt as ``llamaspec run`` measures it (:func:`llamaspec.studies.run.run_case`),
  ``--repeats`` whole pairs in ABBA order.

It prints each setup's figure over the prompts by each design (the geometric mean of the prompts'
medians, with the workload estimator's 95 % interval over pairs), whether the two intervals
overlap, and the other processes' share of the CPU each design recorded. The design holds where
the two agree within their intervals in both conditions.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/schedule.py [--prompts rw-translate-french,math-discount,mt-recursion]
        [--draft 6] [--modes ngram-cache] [--repeats 4] [--load 0.25] [--conditions quiet,loaded] [--write FILE]
    PYTHONPATH=$PWD .venv/bin/python benchmarks/schedule.py --store ~/.local/share/llamaspec/results.sqlite

``--store``: how far each speculative run of a study lies from the nearest baseline of its own block.

Defaults: the cached build of the pinned llama.cpp, the offline pair (SmolLM2-135M F32 target, Q4_1
draft) under models/smollm2-135m/, ``-n 64``, the default threads (the machine's cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llamaspec.base import host
from llamaspec.measure import estimators
from llamaspec.studies.run import own_commit

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "models" / "smollm2-135m"


BURN = ("import sys, time\nshare, period = float(sys.argv[1]), 0.02\nwhile True:\n    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < share * period:\n        pass\n    time.sleep(period * (1 - share))\n")


def _burner(share: float) -> int:
    """A process that keeps ``share`` of one core busy, in 20 ms periods, outside this process's tree
    (started through a shell that exits: the meter counts this process's children as its own); its pid."""
    import subprocess

    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" {share} >/dev/null 2>&1 & echo $!', BURN],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _workload(names: list[str]) -> Path:
    """The named prompts of the built-in workload, as a prompt file of their own."""
    source = ROOT / "llamaspec" / "data" / "prompts" / "workload.jsonl"
    lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    found = {d["id"]: d for d in lines if "id" in d}
    missing = [n for n in names if n not in found]
    if missing:
        sys.exit(f"not in the built-in workload: {', '.join(missing)}")
    out = Path(tempfile.mkdtemp(prefix="llamaspec-schedule-")) / "prompts.jsonl"
    out.write_text("".join(json.dumps(found[n]) + "\n" for n in names))
    return out


def _figure(per_prompt: list[list[float]]) -> dict[str, Any]:
    spread = estimators.workload(per_prompt, estimators.pooled_log_sd(per_prompt))
    assert spread is not None
    return {"median": spread.median, "low": spread.low, "high": spread.high,
            "prompts": [statistics.median(r) for r in per_prompt]}


def _load_of(samples: list[host.NoiseSample | None]) -> float | None:
    got = host.NoiseSample.combine(samples)
    return None if got is None or got.other_load is None else got.other_load + (got.steal or 0.0)


def condition(names: list[str], draft: int, modes: tuple[str, ...], repeats: int, n_predict: int) -> dict[str, Any]:
    """Both designs on the prompts, interleaved prompt by prompt; their figures and loads."""
    from llamaspec.cli.options import experiment_or_study, open_engine, overrides
    from llamaspec.cli.sweep import load_workload
    from llamaspec.store.results import Store
    from llamaspec.store.rows import measurements_of
    from llamaspec.studies import adhoc
    from llamaspec.studies import study as studies
    from llamaspec.studies.run import resolve_case, run_case

    os.environ["LLAMASPEC_DATA"] = tempfile.mkdtemp(prefix="llamaspec-schedule-data-")
    exp = experiment_or_study(None, str(PAIR / "ggml-model-f32.gguf"), (str(PAIR / "ggml-model-q4_1.gguf"),), None,
                              settings=adhoc.workload_settings(overrides({}, n_predict)), repeats=repeats,
                              command="sweep", workload=load_workload(str(_workload(names)), None, None))
    engine = open_engine(exp, "cpu", None)
    setups = studies.sweep_setups(exp, engine, {"draft_max": (draft,)}, modes)
    store = Store.open()
    blocks: dict[str, dict[str, list[float]]] = {s.label: {} for s in setups}
    pairs: dict[str, dict[str, list[float]]] = {s.label: {} for s in setups}
    loads: dict[str, list[host.NoiseSample | None]] = {"blocks": [], "pairs": []}
    hw = host.hardware()
    try:
        for i, case in enumerate(exp.cases):
            one = dataclasses.replace(exp, cases=(case,))
            for design in (("blocks", "pairs") if i % 2 == 0 else ("pairs", "blocks")):
                if design == "blocks":
                    result = studies.run_study(one, setups, engine, store, fixed_grid=True, over_prompts=False)
                    for s in result.decision.setups:
                        blocks[s.label][case.name] = list(dict(s.per_prompt)[case.name].values)  # type: ignore[union-attr]
                    rows = [m for r in store.runs() for m in store.measurements(r["id"])
                            if (r["group_id"] or "").startswith(result.study_id)]
                    loads["blocks"] += [m.noise for m in measurements_of(rows)]
                else:
                    for s in setups:
                        rc = resolve_case(exp, s.point.apply(case), engine)
                        got = run_case(rc, engine, store, repeats=repeats, hardware=hw)
                        assert got.summary.speedup is not None, got.summary.error
                        pairs[s.label][case.name] = list(got.summary.speedup.values)
                        loads["pairs"] += [m.noise for m in got.measurements]
    finally:
        engine.close()
    out: dict[str, Any] = {"setups": {}, "load": {k: _load_of(v) for k, v in loads.items()}}
    for s in setups:
        b = _figure([blocks[s.label][c.name] for c in exp.cases])
        p = _figure([pairs[s.label][c.name] for c in exp.cases])
        out["setups"][s.label] = {"blocks": b, "pairs": p, "agree": b["low"] <= p["high"] and p["low"] <= b["high"]}
    return out


def farthest(store_path: Path) -> tuple[int, float]:
    """In a results store: (the speculative runs measured in blocks, the farthest any of them lies
    from the nearest baseline of its own block, in seconds, by the stored times)."""
    import datetime
    import sqlite3

    db = sqlite3.connect(str(store_path))
    rows = db.execute("SELECT mode, block, created_at FROM measurements WHERE block IS NOT NULL").fetchall()

    def at(text: str) -> float:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()

    bases: dict[str, list[float]] = {}
    for mode, block, when in rows:
        if mode == "baseline":
            bases.setdefault(block, []).append(at(when))
    gaps = [min(abs(at(when) - b) for b in bases[block]) for mode, block, when in rows
            if mode == "speculative" and bases.get(block)]
    return len(gaps), max(gaps, default=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--prompts", default="rw-translate-french,math-discount,mt-recursion")
    ap.add_argument("--draft", type=int, default=6)
    ap.add_argument("--modes", default="ngram-cache")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--load", type=float, default=0.25, help="the share of one core the process beside it keeps busy")
    ap.add_argument("--conditions", default="quiet,loaded")
    ap.add_argument("--write", type=Path, default=None)
    ap.add_argument("--store", type=Path, default=None,
                    help="only say how far each speculative run in this results store lies from its block's baselines")
    a = ap.parse_args(argv)
    if a.store is not None:
        runs, worst = farthest(a.store)
        print(f"{runs} speculative runs in blocks; the farthest from a baseline of its own block: {worst:.0f} s "
              "(the stored times, whole seconds, each stored as its run ends)")
        return 0
    names = [p for p in a.prompts.split(",") if p]
    modes = tuple(m for m in a.modes.split(",") if m and m != "none")
    report: dict[str, Any] = {"command": "python benchmarks/schedule.py " + " ".join(argv or sys.argv[1:]),
                              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "machine": host.hardware().get("cpu") or "?", "conditions": {}}
    for cond in a.conditions.split(","):
        burner = _burner(a.load) if cond == "loaded" else None
        started = time.monotonic()
        try:
            got = condition(names, a.draft, modes, a.repeats, a.n)
        finally:
            if burner is not None:
                os.kill(burner, signal.SIGTERM)
        got["seconds"] = time.monotonic() - started
        report["conditions"][cond] = got
        loads = ", ".join(f"{k} {v:.1%}" if v is not None else f"{k} ?" for k, v in got["load"].items())
        print(f"{cond} (other processes' share of the CPU: {loads}; {got['seconds']:.0f} s)")
        for label, f in got["setups"].items():
            b, p = f["blocks"], f["pairs"]
            print(f"  {label:<14} blocks {b['median']:.3f}x [{b['low']:.3f}-{b['high']:.3f}]   "
                  f"pairs {p['median']:.3f}x [{p['low']:.3f}-{p['high']:.3f}]   "
                  f"{'agree' if f['agree'] else 'DISAGREE'}   per prompt: "
                  + ", ".join(f"{x:.2f}/{y:.2f}" for x, y in zip(b["prompts"], p["prompts"], strict=True)))
    ok = all(f["agree"] for c in report["conditions"].values() for f in c["setups"].values())
    print(f"the two designs agree within their intervals: {'yes' if ok else 'NO'}")
    if a.write is not None:
        report["commit"] = own_commit()
        a.write.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

