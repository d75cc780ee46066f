"""How often does the workload study's answer go wrong, and does it speak for prompts it never saw?

Replays the study (:func:`llamaspec.studies.study.run_study`, its own policy, store and decision)
on recorded real measurements: a replay engine (``benchmarks/replay.py``) hands out the recorded
pairs of each setup on each prompt at random, with replacement, as a new study on the same machine
would have measured them; a time budget counts the recorded time of the pairs drawn.

- the default: every recording under ``tests/fixtures/llamacpp/0c1e570/`` (the workload studies
  of ``sweep-workload/``, the one-prompt sweeps of ``sweep-positions/``), each replayed
  ``--replays`` times: how often the answer is more than 5 % below the recording's best (Wilson's
  95 % interval over the replays), recommends a loss or stays undecided, how often the model's
  band and the model-pooled estimate cover the recorded truth, and the study's time against the
  fixed 3-pair grid's;
- ``--holdout``: the study on half of each category's prompts of the built-in workload's
  recording, its answer's interval held against the other half (:func:`holdout_main`).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/decide.py [--replays 100] [--per-prompt] [--write FILE]
    PYTHONPATH=$PWD .venv/bin/python benchmarks/decide.py --holdout [--replays 100] [--write FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from llamaspec.base.stats import percent_text
from llamaspec.studies import sweep

RECORDED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "llamacpp" / "0c1e570"
SWEEPS = RECORDED / "sweep-positions"
ONE_PROMPT_LEVELS = ("q4_1", "q4_0", "q2_k")


# --- the workload study, replayed (the default) --------------------------------------------------------

WORKLOADS = RECORDED / "sweep-workload"
GOAL_OFF, GOAL_LOSS, GOAL_TIME, GOAL_COVER = 0.05, 0.01, 0.40, 0.95


def recordings() -> list[tuple[str, Path]]:
    """Every recording the study is replayed on: the workload studies (the built-in workload of 54
    chat prompts; the former four raw prompts; a pair that does not pay), then the one-prompt sweeps
    at three acceptance levels."""
    found = [(d.name, f) for d in sorted(WORKLOADS.iterdir()) for f in (d / "study.json", d / "study.json.gz") if f.is_file()]
    return found + [(f"{level} (one prompt)", SWEEPS / level / "sweep.json") for level in ONE_PROMPT_LEVELS]


PER_PROMPT_MOST = 8  # --per-prompt: a row for each prompt of the recordings of this many prompts or fewer


def workload_rows(name: str, path: Path, per_prompt: bool) -> list[tuple[str, Any]]:
    import replay as replays

    rec = replays.load(path)
    rows = [(f"{name}: {len(rec.prompts)} prompt{'s' if len(rec.prompts) != 1 else ''}", rec)]
    if per_prompt and 1 < len(rec.prompts) <= PER_PROMPT_MOST:
        left = rec.facts()
        rows += [(f"{name}: {q} alone", replays.restrict(rec, [q])) for q in rec.prompts if not left.get(q)]
        for q in (q for q in rec.prompts if left.get(q)):
            print(f"{name}: {q} alone: no row (left out of every study: {left[q]})", file=sys.stderr)
    return rows


# --- prompts held out: does the answer speak for prompts it never saw? -------------------------------

HOLDOUT = WORKLOADS / "builtin" / "study.json.gz"
GOAL_HELD = 0.90


def holdout_main(argv: list[str]) -> int:
    """``--holdout``: the study replayed on half of each category's prompts of a recording of the
    built-in workload (drawn anew each replay), at its default budget on the recorded clock; its
    answer's interval held against the other half, measured with every recorded pair (the
    over-prompts point estimate over the held-out prompts that can be timed), and against the whole
    recording's figure. An undecided answer claims no interval: it counts as holding, and is
    counted apart. (A held-out half is a sample too: a sound 95 % interval for the workload holds
    its figure less often than 95 % of the time, about 83 % at equal halves.)"""
    import os
    import tempfile

    import replay as replays

    ap = argparse.ArgumentParser(description=holdout_main.__doc__.split("\n\n")[0] if holdout_main.__doc__ else None)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recording", type=Path, default=HOLDOUT)
    ap.add_argument("--share", type=float, default=0.5, help="each category's share of prompts the study gets")
    ap.add_argument("--budget", default=None, help="the study's budget (default: its own default, on the recorded clock)")
    ap.add_argument("--write", type=Path, default=None, help="keep the result as JSON here")
    a = ap.parse_args(argv)
    os.environ["LLAMASPEC_DATA"] = tempfile.mkdtemp(prefix="llamaspec-holdout-")
    rec = replays.load(a.recording)
    budget = sweep.parse_budget(a.budget) if a.budget else None
    cats: dict[str, list[str]] = {}
    for q, c in rec.prompts.items():
        cats.setdefault(c, []).append(q)
    left = {q: why for q, why in rec.facts().items() if why}
    print(f"{a.recording.parent.name}: {len(rec.prompts)} prompts in {len(cats)} categories, {len(left)} left out by any "
          f"study ({', '.join(f'{q} ({w})' for q, w in sorted(left.items()))})")
    held_in = held_out = undecided = decided = whole_in = 0
    misses: list[str] = []
    picks: dict[str, int] = {}
    sampled: list[int] = []
    seconds: list[float] = []
    started = time.monotonic()
    for i in range(a.replays):
        rng = random.Random(a.seed + i)
        study_prompts, held = [], []
        for qs in cats.values():
            drawn = rng.sample(qs, len(qs))
            k = max(1, round(a.share * len(qs)))
            study_prompts += drawn[:k]
            held += drawn[k:]
        sub = replays.restrict(rec, [q for q in rec.prompts if q in study_prompts])
        result, engine = replays.replay(sub, a.seed + i, budget)
        d = result.decision
        sampled.append(len(d.timed))
        seconds.append(engine.seconds)
        label = d.chosen.label if d.chosen is not None else None
        picks[label if d.verdict == "recommend" and label else d.verdict] = picks.get(
            label if d.verdict == "recommend" and label else d.verdict, 0) + 1
        if d.verdict == "undecided" or d.chosen is None:
            undecided += 1
            held_in += 1
            continue
        decided += 1
        truth = rec.over_prompts(d.chosen.label, held)
        interval = d.chosen.measured
        whole = rec.over_prompts(d.chosen.label, list(rec.prompts))
        whole_in += whole is not None and interval.low <= whole <= interval.high
        if truth is not None and interval.low <= truth <= interval.high:
            held_in += 1
        else:
            held_out += 1
            misses.append(f"{d.verdict} {d.chosen.label} {interval.text(suffix='x')}, held out {truth:.2f}x, "
                          f"whole {whole:.2f}x"
                          if truth is not None else f"{d.chosen.label}: no held-out figure")
    n = a.replays
    lo, hi = replays.wilson(held_in, n)
    dlo, dhi = replays.wilson(held_in - undecided, max(decided, 1))
    verdict = "met" if lo >= GOAL_HELD else "NOT met" if hi < GOAL_HELD else "not shown either way"
    print(f"answers holding on the held-out prompts: {percent_text(held_in / n)} [{percent_text(lo)}-{percent_text(hi)}] of {n} replays "
          f"(undecided {percent_text(undecided / n)}; of the {decided} that decided, {percent_text((held_in - undecided) / max(decided, 1))} "
          f"[{percent_text(dlo)}-{percent_text(dhi)}]); goal at least {percent_text(GOAL_HELD)}: {verdict}")
    wlo, whi = replays.wilson(whole_in, max(decided, 1))
    print(f"of the {decided} that decided, {percent_text(whole_in / max(decided, 1))} [{percent_text(wlo)}-{percent_text(whi)}] cover the whole "
          "recording's figure (every timed prompt, those the study saw included)")
    print(f"prompts a study timed: median {statistics.median(sampled):.0f} of {len(study_prompts)}; its recorded time "
          f"median {statistics.median(seconds):.0f} s; answers: "
          + ", ".join(f"{k} {v}" for k, v in sorted(picks.items(), key=lambda kv: -kv[1])))
    for line in misses[:10]:
        print(f"  missed: {line}")
    print(f"({n} replays in {time.monotonic() - started:.0f} s)", file=sys.stderr)
    if a.write is not None:
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        a.write.write_text(json.dumps({"command": "python benchmarks/decide.py --holdout " + " ".join(argv),
                                       "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit,
                                       "replays": n, "held": held_in / n, "held_low": lo, "held_high": hi,
                                       "undecided": undecided / n, "decided": decided, "decided_held": (held_in - undecided) / max(decided, 1),
                                       "decided_whole": whole_in / max(decided, 1),
                                       "prompts_timed_median": statistics.median(sampled), "picks": picks,
                                       "goal": GOAL_HELD, "verdict": verdict, "misses": misses}, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--holdout" in argv:
        return holdout_main([a for a in argv if a != "--holdout"])
    ap = argparse.ArgumentParser(description="The workload study replayed on recorded real measurements: how often "
                                             "its one decision is off, recommends a loss or stays undecided, how "
                                             "often the model's band covers the truth, and its time against the "
                                             "fixed grid's. (--holdout: the answer against prompts the study never saw.)")
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="replay only the recordings whose name contains this")
    ap.add_argument("--per-prompt", action="store_true", help=f"each prompt of a workload recording of {PER_PROMPT_MOST} prompts or fewer alone, too")
    ap.add_argument("--write", type=Path, default=None,
                    help="keep the rows as JSON here (docs/results.md's table: tests/fixtures/llamacpp/0c1e570/"
                         "sweep-workload/replays.json, then `make docs`)")
    a = ap.parse_args(argv)
    import os
    import tempfile

    import replay as replays

    os.environ["LLAMASPEC_DATA"] = tempfile.mkdtemp(prefix="llamaspec-replay-")  # the replays' stores and logs
    print(f"{'workload':<38} {'best (truth)':>18} {'>5% off':>16} {'a loss':>7} {'undecided':>9} {'band covers':>11} "
          f"{'pooled covers':>13} {'time':>5}  picks")
    goals: list[str] = []
    kept: list[dict[str, Any]] = []
    for name, path in recordings():
        if a.only and a.only not in name:
            continue
        for label, rec in workload_rows(name, path, a.per_prompt):
            started = time.monotonic()
            outcomes = []
            for i in range(a.replays):
                result, engine = replays.replay(rec, a.seed + i)
                outcomes.append(replays.judge(rec, result, engine))
            n = len(outcomes)
            off = sum(o.off for o in outcomes)
            loss = sum(o.loss for o in outcomes)
            undecided = sum(o.verdict == "undecided" for o in outcomes)
            covered, bands = sum(o.covered for o in outcomes), sum(o.bands for o in outcomes)
            pooled_cover = (sum(o.pooled_covered for o in outcomes) / pooled
                            if (pooled := sum(o.pooled for o in outcomes)) else float("nan"))
            time_share = statistics.fmean(o.seconds for o in outcomes) / rec.fixed_grid_seconds()
            truths = {k: t for k in rec.setups if (t := rec.truth(k)) is not None}
            best = max(truths, key=lambda k: truths[k])
            picks: dict[str, int] = {}
            for o in outcomes:
                picks[o.chosen or o.verdict] = picks.get(o.chosen or o.verdict, 0) + 1
            lo, hi = replays.wilson(off, n)
            cover = covered / bands if bands else float("nan")
            print(f"{label:<38} {f'{best} {truths[best]:.2f}x':>18} {f'{percent_text(off / n, 1)} [{percent_text(lo)}-{percent_text(hi)}]':>16} "
                  f"{loss / n:>7.1%} {undecided / n:>9.1%} {cover:>11.1%} {pooled_cover:>13.1%} {time_share:>5.0%}  "
                  + ", ".join(f"{k}:{v}" for k, v in sorted(picks.items(), key=lambda kv: -kv[1])[:5]))
            print(f"  ({n} replays in {time.monotonic() - started:.0f} s)", file=sys.stderr)
            kept.append({"workload": label, "best": best, "best_speedup": truths[best], "off": off / n, "off_low": lo,
                         "off_high": hi, "loss": loss / n, "undecided": undecided / n,
                         "band_covers": covered / bands if bands else None,
                         "pooled_covers": pooled_cover if pooled_cover == pooled_cover else None, "time": time_share,
                         "picks": ", ".join(f"{k} {v}" for k, v in sorted(picks.items(), key=lambda kv: -kv[1])[:4])})
            goals.append(f"{label}: off {'met' if hi <= GOAL_OFF else 'NOT met' if lo > GOAL_OFF else 'not shown'}, "
                         f"loss {'met' if loss / n <= GOAL_LOSS else 'NOT met'}, time "
                         f"{'met' if time_share <= GOAL_TIME else 'NOT met'}, the pooled estimate "
                         + ("may decide" if pooled and pooled_cover >= GOAL_COVER else "may not decide")
                         + (f" (covers {percent_text(pooled_cover)})" if pooled else " (never formed)"))
    print(f"goals (at most {percent_text(GOAL_OFF)} more than 5 % below the best by the 95 % interval over the replays, at most "
          f"{percent_text(GOAL_LOSS)} recommending a loss, at most {percent_text(GOAL_TIME)} of the fixed grid's time; the model-pooled "
          f"estimate may decide only where its interval covers the truth at least {percent_text(GOAL_COVER)} of the time; the "
          "rule ranked on the measured medians):")
    for line in goals:
        print(f"  {line}")
    if a.write is not None:
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        a.write.write_text(json.dumps({"command": "python benchmarks/decide.py " + " ".join(argv), "pooled": False,
                                       "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit,
                                       "replays": a.replays, "rows": kept, "goals": goals}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
