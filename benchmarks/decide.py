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
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec.base.stats import percent_text
from llamaspec.studies.budget import parse_budget as budget_of

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


# --- prompts held out: does the interval speak for prompts it never saw? -------------------------------

HOLDOUT = WORKLOADS / "builtin" / "study.json.gz"
SIZES = (8, 13, 20, 30)  # prompts a study times, --holdout's default
SHIFT_TO = 0.97  # the shifted recording: every setup divided so that the best reads this
GOAL_HELD, GOAL_DECIDE, GOAL_LOSS_SHARE, GOAL_REALIZED = 0.90, 0.60, 0.02, 0.60


def draw(rec: Any, n: int, rng: random.Random, again: bool = False) -> tuple[list[str], list[str]]:
    """``n`` of the recording's timed prompts, each category's share of them in proportion to its
    share of the timed prompts (largest remainders, one at least), drawn at random within it; and
    the rest, held out. ``again``: drawn with replacement (the recording as the population, a
    study's prompts no longer a large part of it), none held out."""
    cats: dict[str, list[str]] = {}
    for q in rec.timed():
        cats.setdefault(rec.prompts[q], []).append(q)
    total = sum(len(qs) for qs in cats.values())
    exact = {c: n * len(qs) / total for c, qs in cats.items()}
    take = {c: max(1, int(x)) for c, x in exact.items()}
    for c in sorted(cats, key=lambda c: int(exact[c]) - exact[c]):
        if sum(take.values()) >= n:
            break
        take[c] += 1
    study, held = [], []
    for c, qs in cats.items():
        if again:
            study += rng.choices(qs, k=take[c])
            continue
        drawn = rng.sample(qs, len(qs))
        k = min(take[c], len(qs) - 1)  # a category keeps one prompt held out
        study += drawn[:k]
        held += drawn[k:]
    return study, held


def expected_cover(n: int, m: int, draws: int = 400_000, seed: int = 0) -> float:
    """How often a sound 95 % interval over ``n`` prompts (Student's t at n - 1) holds the figure of
    ``m`` other prompts of the same population: the two means differ by the spread times
    sqrt(1/n + 1/m), so it holds when |T| < t / sqrt(1 + n/m), T Student's t at n - 1 degrees of
    freedom (normal log speedups; held out and studied drawn apart from one finite set, the same)."""
    import numpy as np

    from llamaspec.base import stats

    t = np.random.default_rng(seed).standard_t(n - 1, draws)
    return float(np.mean(np.abs(t) < stats.t975(n - 1) / math.sqrt(1 + n / m)))


@dataclass
class Scored:
    """What one replay's answer gives, against the held-out prompts and the whole recording."""

    verdict: str
    chosen: str | None  # the recommended setup
    bet: str | None  # the best estimate, recommended or not
    realized: float  # following the answer: the chosen setup's whole-recording figure, else 1.00x
    intervals: list[tuple[str, float, float, float | None]]  # setup, low, high, the held-out figure
    loss_chance: float | None  # the answer's chance of a loss (of the best bet where undecided)
    to_settle: int | None


def score(rec: Any, d: Any, held: Sequence[str], weights: dict[str, float], whole: dict[str, float]) -> Scored:
    """One decision (a WorkloadDecision) against the held-out prompts' figures (by the workload's
    weights) and the whole recording's."""
    out = []
    for s in d.setups:
        sp = s.speedup
        if sp is None or sp.n < 2 or s.excluded:
            continue
        out.append((s.label, sp.low, sp.high, rec.over_prompts(s.label, held, weights)))
    dec = d.decision
    chosen = dec.chosen.label if dec.verdict == "recommend" and dec.chosen is not None else None
    bet = dec.chosen.label if dec.chosen is not None else None
    return Scored(dec.verdict, chosen, bet, whole.get(chosen, 1.0) if chosen else 1.0, out, dec.chance_of_loss,
                  dec.prompts_to_settle)


def summarize(runs: Sequence[Scored], shifted: Sequence[Scored], best: float, held: int, studied: int) -> dict[str, Any]:
    """The figures of a set of replays (and the same replays on the shifted recording)."""
    every = [(label, lo, hi, f) for r in runs for label, lo, hi, f in r.intervals if f is not None]
    by_setup: dict[str, list[bool]] = {}
    for label, lo, hi, f in every:
        by_setup.setdefault(label, []).append(lo <= f <= hi)
    cover = {k: sum(v) / len(v) for k, v in by_setup.items()}
    worst = min(cover, key=lambda k: cover[k]) if cover else None
    decided = [r for r in runs if r.verdict != "undecided"]
    recommended = [r for r in runs if r.chosen is not None]
    losses = [r for r in recommended if r.realized < 1.0]
    shifted_recommended = [r for r in shifted if r.chosen is not None]
    shifted_decided = [r for r in shifted if r.verdict != "undecided"]
    realized = statistics.fmean(math.log(r.realized) for r in runs) / math.log(best)
    bets = [r for r in runs if r.bet is not None]
    picks: dict[str, int] = {}
    for r in runs:
        picks[r.chosen or r.verdict] = picks.get(r.chosen or r.verdict, 0) + 1
    settle = [r.to_settle for r in runs if r.to_settle is not None]
    return {
        "prompts": studied, "held_out": held, "replays": len(runs),
        "cover": sum(lo <= f <= hi for _l, lo, hi, f in every) / len(every) if every else None,
        "cover_expected": expected_cover(studied, held) if held else None,
        "cover_by_setup": cover, "cover_worst": cover[worst] if worst else None, "cover_worst_setup": worst,
        "decide": len(decided) / len(runs), "recommend": len(recommended) / len(runs),
        "loss_of_decisions": len(losses) / len(recommended) if recommended else 0.0,
        "shifted_recommend": len(shifted_recommended) / len(shifted),
        "shifted_loss_of_decisions": len(shifted_recommended) / len(shifted_decided) if shifted_decided else 0.0,
        "realized_share": realized, "realized": math.exp(statistics.fmean(math.log(r.realized) for r in runs)),
        "width_median": statistics.median(hi / lo for r in runs for _l, lo, hi, _f in r.intervals),
        "bet_width_median": statistics.median(hi / lo for r in bets for label, lo, hi, _f in r.intervals if label == r.bet)
        if bets else None,
        "bet_loss_chance_median": statistics.median(r.loss_chance for r in bets if r.loss_chance is not None)
        if bets else None,
        "to_settle_median": statistics.median(settle) if settle else None, "picks": picks,
    }


def holdout_main(argv: list[str]) -> int:
    """``--holdout``: studies of some of a recording's timed prompts (drawn by category, anew each
    replay), every interval they report held against the figure of the prompts they did not time,
    and their answers followed on the whole recording; the same again on the recording with every
    setup shifted to a loss. By default the decision is applied directly to the drawn prompts (a
    study that timed them with every setup: ``decide_direct``), at each of ``--prompts`` sizes;
    ``--through-study`` replays the whole study (its policy, budget and store) on ``--share`` of
    each category's prompts instead."""
    import replay as replays

    ap = argparse.ArgumentParser(description=holdout_main.__doc__.split("\n\n")[0] if holdout_main.__doc__ else None)
    ap.add_argument("--replays", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recording", type=Path, default=HOLDOUT)
    ap.add_argument("--prompts", default=",".join(map(str, SIZES)), help="the prompts a study times, one size or several")
    ap.add_argument("--shift-to", type=float, default=SHIFT_TO, help="the shifted recording's best setup")
    ap.add_argument("--scale-to", type=float, default=None,
                    help="replay the recording with every setup scaled so that its best reads this (its prompts' "
                         "spread kept): the rule's power at a gain the recording's machine did not show")
    ap.add_argument("--through-study", action="store_true", help="replay the whole study (its policy and budget)")
    ap.add_argument("--share", type=float, default=0.5, help="--through-study: each category's share of prompts it gets")
    ap.add_argument("--budget", default=None, help="--through-study: its budget (default: its own, on the recorded clock)")
    ap.add_argument("--write", type=Path, default=None, help="keep the result as JSON here")
    a = ap.parse_args(argv)
    rec = replays.load(a.recording)
    if a.scale_to is not None:
        rec = replays.shifted(rec, a.scale_to)
        print(f"{a.recording.parent.name}: every setup scaled so that the best reads {a.scale_to:.2f}x (--scale-to)")
    low = replays.shifted(rec, a.shift_to)
    timed_ = rec.timed()
    weights = rec.weights()
    whole = {k: f for k in rec.setups if (f := rec.over_prompts(k, timed_, weights)) is not None}
    whole_low = {k: f for k in low.setups if (f := low.over_prompts(k, timed_, weights)) is not None}
    best = max(whole, key=lambda k: whole[k])
    print(f"{a.recording.parent.name}: {len(timed_)} timed prompts of {len(rec.prompts)}; the whole recording's best "
          f"{best} {whole[best]:.3f}x; shifted: every setup divided by {whole[best] / a.shift_to:.3f}")
    started = time.monotonic()
    rows = []
    if a.through_study:
        rows.append(_through_study(a, rec, low, weights, whole, whole_low, best))
    else:
        for again in (False, True):
            for n in (int(x) for x in a.prompts.split(",")):
                runs, shifted = [], []
                held_sizes = []
                for i in range(a.replays):
                    study, held = draw(rec, n, random.Random(a.seed * 1_000_003 + i), again)
                    held_sizes.append(len(held))
                    runs.append(score(rec, replays.decide_direct(rec, study), held, weights, whole))
                    shifted.append(score(low, replays.decide_direct(low, study), held, weights, whole_low))
                rows.append({**summarize(runs, shifted, whole[best], round(statistics.fmean(held_sizes)), len(study)),
                             "drawn": "with replacement" if again else "held out"})
    print(f"{'prompts':>7} {'held':>4} {'cover':>6} {'expect':>6} {'worst setup':>22} {'decide':>6} {'recomm':>6} "
          f"{'loss':>5} {'shifted':>7} {'realized':>13} {'width':>5} {'bet':>5} {'to settle':>9}")
    for r in rows:
        worst = f"{r['cover_worst_setup']} {percent_text(r['cover_worst'], 1)}" if r["cover_worst_setup"] else "-"
        print(f"{r['prompts']:>7} {r['held_out'] or 'again':>4} {percent_text(r['cover'], 1):>6} "
              f"{percent_text(r['cover_expected'], 1):>6} {worst:>22} {percent_text(r['decide'], 1):>6} "
              f"{percent_text(r['recommend'], 1):>6} {percent_text(r['loss_of_decisions'], 1):>5} "
              f"{percent_text(r['shifted_recommend'], 1):>7} {r['realized']:>6.3f}x {percent_text(r['realized_share']):>4} "
              f"{r['width_median']:>5.2f} {r['bet_width_median'] or 0:>5.2f} {r['to_settle_median'] or '-':>9}")
    print(f"held: the timed prompts a study did not get ('again': drawn with replacement, the recording as the "
          f"population; nothing held out); cover: every reported interval (each setup with one, decided or not) holding the held-out prompts' figure; "
          f"expect: a sound 95 % interval's rate at these sizes; decide: recommend or no draft; loss: of the "
          f"recommendations, the share below 1.00x on the whole recording; shifted: the replays that recommend "
          f"(a loss, each) with every setup shifted so the best reads {a.shift_to:.2f}x; realized: following the answer "
          f"(undecided 1.00x), against {whole[best]:.3f}x on the log scale; width: median high over low, of every "
          f"interval and of the best bet's")
    print(f"goals: cover {percent_text(GOAL_HELD)} or more for every setup, decide {percent_text(GOAL_DECIDE)} or more, "
          f"losses {percent_text(GOAL_LOSS_SHARE)} or fewer (shifted too), realized {percent_text(GOAL_REALIZED)} or more")
    print(f"({a.replays} replays a size in {time.monotonic() - started:.0f} s)", file=sys.stderr)
    if a.write is not None:
        from llamaspec.studies.run import own_commit

        commit = own_commit()
        a.write.write_text(json.dumps({"command": "python benchmarks/decide.py --holdout " + " ".join(argv),
                                       "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit,
                                       "machine": _machine(),
                                       "path": "the whole study" if a.through_study else "the decision on the drawn prompts",
                                       "replays": a.replays, "best": best, "best_speedup": whole[best],
                                       "shift_to": a.shift_to, "scale_to": a.scale_to, "rows": rows}, indent=1) + "\n")
    return 0


def _machine() -> str:
    """The CPU the replays ran on, as /proc/cpuinfo names it (the figures are the recording's: any
    machine replays them alike)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def _through_study(a: Any, rec: Any, low: Any, weights: dict[str, float], whole: dict[str, float],
                   whole_low: dict[str, float], best: str) -> dict[str, Any]:
    """``--through-study``: each replay a whole study (its own policy, budget and store) on
    ``--share`` of each category's prompts; held out, the timed prompts it was not given."""
    import os
    import tempfile

    import replay as replays

    os.environ["LLAMASPEC_DATA"] = tempfile.mkdtemp(prefix="llamaspec-holdout-")
    budget = budget_of(a.budget) if a.budget else None
    cats: dict[str, list[str]] = {}
    for q, c in rec.prompts.items():
        cats.setdefault(c, []).append(q)
    timed_ = set(rec.timed())
    runs, shifted, studied, held_sizes = [], [], [], []
    for i in range(a.replays):
        rng = random.Random(a.seed + i)
        given: list[str] = []
        for qs in cats.values():
            given += rng.sample(qs, max(1, round(a.share * len(qs))))
        held = [q for q in rec.prompts if q in timed_ and q not in given]
        keep = [q for q in rec.prompts if q in given]
        result, _engine = replays.replay(replays.restrict(rec, keep), a.seed + i, budget)
        runs.append(score(rec, result.decision, held, weights, whole))
        studied.append(len(result.decision.timed))
        held_sizes.append(len(held))
        result, _engine = replays.replay(replays.restrict(low, keep), a.seed + i, budget)
        shifted.append(score(low, result.decision, held, weights, whole_low))
    return {**summarize(runs, shifted, whole[best], round(statistics.fmean(held_sizes)), round(statistics.median(studied))),
            "drawn": "the whole study"}


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
        from llamaspec.studies.run import own_commit

        commit = own_commit()
        a.write.write_text(json.dumps({"command": "python benchmarks/decide.py " + " ".join(argv), "pooled": False,
                                       "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit,
                                       "replays": a.replays, "rows": kept, "goals": goals}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
