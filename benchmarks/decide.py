"""How often does a sweep's decision pick a setting that is really worse, and what does it cost?

Replays recorded real sweeps by resampling their pairs: each replay draws pairs with replacement
from the recording, as a new sweep on the same machine would have measured them. The recordings
(``--recordings``, under ``tests/fixtures/llamacpp/0c1e570/``, draft lengths 1..8, 10, 12, 14, 16,
measured in passes, every run's figures in ``<level>/sweep.json``):

- ``sweep-positions`` (the default): llama-speculative-simple with ``--spec-draft-p-min 0``, 20
  pairs a point at Q4_1, Q4_0 and Q2_K, every speculative run counting its acceptance by position;
- ``sweep-accept``: llama-speculative, 30 pairs a point (Q2_K 10), no positions of its own.

The policies that decide on the drawn pairs:

- **old rule**: the tie set (intervals overlapping the best median's) and its shortest draft, as
  llamaspec decided up to commit 7148faa;
- **new rule, fixed grid**: ``llamaspec.decision.decide`` on 3 pairs at every recorded length;
- **adaptive**: ``llamaspec.decision.decide`` on one pair at every length (``llamaspec.studies.sweep``'s first
  pass), then the pairs its ``requests`` ask for (the contenders, the model's unmeasured favourites), until the
  decision is settled or the budget (60 % of the fixed grid's pairs) is spent;
- **long first (positions)**: the adaptive sweep where the program counts acceptance by draft
  position (``llamaspec.studies.sweep.FIRST_LONGEST``): one pair at the two longest lengths, every other
  length predicted from their acceptance by position and the cost timings, one pair at each of the
  (at most three) lengths the model puts within its error of its best (``decide.model_contenders``),
  then what the decision asks for, within ``LONG_BUDGET_SHARE`` of the fixed grid's pairs. On ``sweep-positions`` each
  drawn pair brings its own counts; on ``sweep-accept`` (llama-speculative prints no positions) the
  acceptance by position is llama-speculative-simple's (``-lv 4 --spec-draft-p-min 0``, one greedy
  run per length at each level: ``tests/fixtures/llamacpp/0c1e570/positions/``), attached to the
  point of the same length.
- **oracle**: the same budget spent evenly on the recording's true contenders (its best and every
  length within 5 % of it), the best median taken: what deciding by measurement alone reaches
  with those pairs on this machine's noise when told where to look (the adaptive sweep can do
  better, since the model's curve adds what the pairs alone do not tell);
- **every pair, redrawn** (``--no-floor`` leaves it out): ``llamaspec.decision.decide`` on as many pairs at
  every length as the recording holds (ten times the fixed grid's), drawn the same way: how well
  the recording resolves its own truth. Where even this is wrong more often than the goal allows,
  the 3 % line is finer than what the recording can tell, and no policy on a fraction of its pairs
  can be shown to meet it.

Where the whole recording shows a gain, one more line, the **ceiling** of the long-first budget: at
each length within 5 % of the best, how often its pairs alone, drawn there, show it faster (an
interval above 1.0): what a policy told the answer reaches, since the rule recommends nothing
that its own pairs do not show faster.

A decision is **wrong** (column "wrong") when the true speedup of the setting it recommends (the median of every
recorded pair there) is more than 3 % below the true best, or when it recommends nothing ("no
answer": no draft, or undecided) although the true best is a gain of more than 3 % that the whole
recording shows (some length's interval over all its pairs lies above 1.0: the rule recommends
nothing whose interval includes 1.0, so what every pair on record cannot show, fewer cannot
either; Q4_0's best, 1.04x [0.98-1.08] over 30 pairs, is such a case); ">5% off" is the same with
5 %, since the recording's own medians carry a few per cent of noise; "shown" counts the wrong
decisions that stay wrong by the recording's own 95 % interval at the chosen setting (all of it
more than 3 % below the true best). The goal is judged on "wrong", by its 95 % interval over
the replays (column "(95 %)", Wilson's): "met" when all of it is at or under 5 %, "NOT met" when
all of it is above. Time is the recorded wall time of the pairs a policy drew (speculative run +
baseline), relative to the fixed 3-pair grid of the same replay (the one-off
llama-bench cost timings are the same for every policy and left out).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/decide.py [--replays 200] [--recordings sweep-positions|sweep-accept]
        [--levels q4_1,q4_0,q2_k] [--no-floor]

``--holdout`` replays the workload study on half of the built-in workload's recorded prompts and
holds its answer against the other half (:func:`holdout_main`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec.base import stats
from llamaspec.base.stats import Spread
from llamaspec.decision import decide
from llamaspec.measure import pairs
from llamaspec.measure.summary import Summary
from llamaspec.store.results import measurements_of
from llamaspec.studies import sweep
from llamaspec.views import analysis

RECORDED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "llamacpp" / "0c1e570"
# The recordings to replay (--recordings): llama-speculative-simple's sweeps, every pair counting
# acceptance by position (the default), or llama-speculative's, which count none (their positions
# come from one llama-speculative-simple run per length: POSITIONS).
RECORDINGS = {"sweep-positions": ("q4_1", "q4_0", "q2_k"), "sweep-accept": ("q4_1", "q4_0", "q2_k", "q4_1-later")}
SWEEPS = RECORDED / "sweep-positions"
ACCEPT = RECORDED / "sweep-accept"
POSITIONS = RECORDED / "positions"  # llama-speculative-simple -lv 4, one run per length and level
LONG_BUDGET_SHARE = 0.4  # the long-first policy's pairs, as a share of the fixed grid's
WORSE = 0.03  # a decision is wrong when its setting is truly more than 3 % below the best
FIXED_PAIRS = 3
FIRST_PAIRS = sweep.FIRST_PAIRS  # the adaptive sweep's own first pass


def first_lengths(lengths, by_position: bool = False) -> list[int]:
    """The first pass of the one-prompt policy: every length, shortest first; where the program
    counts acceptance by position, the two longest, longest first (llamaspec.studies.study.first_pass)."""
    every = sorted(set(lengths))
    return every[::-1][:2] if by_position else every

FIRST: tuple[int, ...] | None = None  # --first: other first lengths (None: the sweep's, every length)
BUDGET_SHARE = 0.6
GOAL_WRONG = 0.05  # the goal: at most this share of wrong decisions, at no more than BUDGET_SHARE of the time


@dataclass(frozen=True)
class Pair:
    ratio: float  # speculative decode t/s over the baseline's, measured next to it
    spec_tps: float
    base_tps: float
    seconds: float  # wall time of both runs
    # the speculative run's acceptance by position (drafted, accepted), where its program counted it
    drafted: tuple[int, ...] | None = None
    accepted: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Point:
    draft_max: int
    run: dict[str, Any]  # the exported run: summary, measurements
    summary: Summary
    pairs: tuple[Pair, ...]

    @property
    def true_speedup(self) -> float:
        return statistics.median(p.ratio for p in self.pairs)

    @functools.cached_property
    def true_interval(self) -> Spread:
        """The recording's own 95 % interval on this point's speedup (its 10+ pairs)."""
        return _speedup(tuple(p.ratio for p in self.pairs))


@dataclass(frozen=True)
class Recorded:
    name: str
    data: dict[str, Any]
    points: dict[int, Point]
    # Acceptance by position at each length (drafted, accepted), from the positions recordings of the
    # same level where a length's counts are known; empty where there are none.
    positions: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = dataclasses.field(default_factory=dict)

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(sorted(self.points))

    @property
    def pairs_count_positions(self) -> bool:
        """Whether every recorded pair carries its own acceptance by position."""
        return all(p.drafted is not None for point in self.points.values() for p in point.pairs)

    @property
    def true_best(self) -> float:
        return max(p.true_speedup for p in self.points.values())

    @property
    def every_pair(self) -> dict[int, list[int]]:
        """Draws of every recorded pair at every length: the whole recording."""
        return {k: list(range(len(p.pairs))) for k, p in self.points.items()}

    @property
    def gain_shown(self) -> bool:
        """Whether the whole recording shows some length faster than the target alone."""
        return any(p.true_interval.low > 1.0 for p in self.points.values())


def pairs_of(run: dict[str, Any]) -> tuple[Pair, ...]:
    """The run's pairs as the run core makes them (``pairs.whole_pairs``, by pair index)."""
    out = []
    for p in pairs.whole_pairs(measurements_of(run["measurements"])):
        if p.ratio is not None and p.speculative.decode_tps and p.baseline.decode_tps:
            spec = p.speculative
            out.append(Pair(p.ratio, spec.decode_tps, p.baseline.decode_tps,
                            (spec.wall_seconds or 0.0) + (p.baseline.wall_seconds or 0.0),
                            tuple(spec.drafted_by_position) if spec.drafted_by_position is not None else None,
                            tuple(spec.accepted_by_position) if spec.accepted_by_position is not None else None))
    return tuple(out)


def load(level: str, root: Path = SWEEPS, positions: Path | None = POSITIONS) -> Recorded:
    """One recorded sweep; where its pairs counted no positions, each length's acceptance by
    position from the ``positions`` logs of the same level."""
    data = json.loads((root / level / "sweep.json").read_text())
    points = {}
    for run in data["points"]:
        if run["status"] != "ok":
            continue
        points[int(run["draft_max"])] = Point(int(run["draft_max"]), run, Summary.from_dict(run["summary"]), pairs_of(run))
    rec = Recorded(level, data, points)
    if positions is None or rec.pairs_count_positions:
        return rec
    return dataclasses.replace(rec, positions=load_positions(positions / level.split("-")[0], points))


def load_positions(folder: Path, lengths: Any) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each length's acceptance by position, parsed from its llama-speculative-simple log
    (``draft-<k>.log``) by llamaspec's own parser; lengths whose counts it leaves out are absent."""
    import re

    from llamaspec.llamacpp import parse

    commands = folder.parent / "commands.txt"  # each log's command line, with the -n it ran with
    listed = commands.read_text() if commands.is_file() else ""
    out = {}
    for k in lengths:
        path = folder / f"draft-{k}.log"
        if not path.is_file():
            continue
        text = path.read_text()
        n = re.search(rf"^{re.escape(folder.name)}/draft-{k}\.log: .* -n (\d+) ", listed, re.M)
        found = parse.positions(parse.parse_speculative(text, text), int(n.group(1)) if n else None)
        if found.drafted and found.accepted:
            out[int(k)] = (found.drafted, found.accepted)
    return out


@functools.lru_cache(maxsize=200_000)
def _speedup(ratios: tuple[float, ...]) -> Spread:
    s = stats.spread(ratios)
    assert s is not None
    return s


def _values(values: tuple[float, ...]) -> Spread:
    """Median and values only (what the model reads from the speeds); no bootstrap."""
    return Spread(statistics.median(values), min(values), max(values), len(values), min(values), max(values),
                  stats.cv(values), values)


def rows_for(rec: Recorded, draws: dict[int, list[int]], positions: bool = False) -> list[analysis.PointRow]:
    """The sweep's points as if these pairs (indices into each point's recording) had been measured;
    ``positions``: with each length's acceptance by position (where recorded), as a program that
    counts it would have stored it."""
    rows = []
    for k, picks in sorted(draws.items()):
        if not picks:
            continue
        point = rec.points[k]
        chosen = [point.pairs[i] for i in picks]
        summary = dataclasses.replace(point.summary, pairs=len(chosen),
                                      speedup=_speedup(tuple(p.ratio for p in chosen)),
                                      decode_tps=_values(tuple(p.spec_tps for p in chosen)),
                                      baseline_decode_tps=_values(tuple(p.base_tps for p in chosen)))
        counted = _summed_positions(chosen) if positions else None
        if counted is None and positions and k in rec.positions:
            counted = rec.positions[k]
        if counted is not None:
            summary = dataclasses.replace(summary, drafted_by_position=counted[0], accepted_by_position=counted[1])
        rows.append(analysis.PointRow(point.run["run_id"], "", k, summary))
    return rows


def _summed_positions(chosen: list[Pair]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The chosen pairs' acceptance by position summed, over the positions each of them counted
    (as the run core sums a point's runs); None where one counted none."""
    if not chosen or any(p.drafted is None or p.accepted is None for p in chosen):
        return None
    n = min(len(p.drafted or ()) for p in chosen)
    return (tuple(sum((p.drafted or ())[i] for p in chosen) for i in range(n)),
            tuple(sum((p.accepted or ())[i] for p in chosen) for i in range(n)))


def group_for(rec: Recorded, draws: dict[int, list[int]], refits: int, positions: bool = False) -> analysis.GroupReport:
    rows = rows_for(rec, draws, positions)
    fit, explanation, note = analysis.analyze_rows(rows)
    group = analysis.GroupReport("", rows, fit, explanation, note=note)
    group.view = analysis.model_view(group, refits=refits, grid=rec.grid)
    return group


def new_rule(rec: Recorded, draws: dict[int, list[int]], refits: int, positions: bool = False) -> decide.Decision:
    return group_for(rec, draws, refits, positions).decision


def old_rule(rec: Recorded, draws: dict[int, list[int]]) -> int | None:
    """The old rule: the points whose interval overlaps the best median's, then the shortest
    draft among them that measured above 1.0 (None: no draft)."""
    rows = [r for r in rows_for(rec, draws) if r.speedup is not None]
    best = max(rows, key=lambda r: r.speedup.median if r.speedup else 0.0)
    assert best.speedup is not None
    ties = [r for r in rows if r.speedup is not None and r.speedup.overlaps(best.speedup) and r.speedup.median > 1.0]
    return min(r.draft_max for r in ties) if ties else None


def chosen_length(d: decide.Decision) -> int | None:
    if d.verdict != "recommend" or d.chosen is None:
        return None
    key = d.chosen.key
    return int(key[1]) if isinstance(key, tuple) else int(key)  # type: ignore[call-overload]


def seconds(rec: Recorded, draws: dict[int, list[int]]) -> float:
    return sum(rec.points[k].pairs[i].seconds for k, picks in draws.items() for i in picks)


def adaptive(rec: Recorded, rng: random.Random, refits: int, budget: int) -> tuple[decide.Decision, dict[int, list[int]], str]:
    """Coarse grid first, then what the decision asks for, until settled or out of pairs."""
    first = FIRST if FIRST is not None else first_lengths(rec.grid)
    draws = {k: [rng.randrange(len(rec.points[k].pairs)) for _ in range(FIRST_PAIRS)] for k in first if k in rec.points}
    return _until_stop(rec, rng, refits, budget, draws, positions=False)


def long_first(rec: Recorded, rng: random.Random, refits: int, budget: int) -> tuple[decide.Decision, dict[int, list[int]], str]:
    """The first pass at the longest lengths, every other one predicted from their acceptance by
    position, then what the decision asks for (``llamaspec.studies.sweep``'s adaptive loop where the program
    counts positions)."""
    first = first_lengths(rec.grid, by_position=True)
    draws = {k: [rng.randrange(len(rec.points[k].pairs)) for _ in range(FIRST_PAIRS)] for k in first}
    group = group_for(rec, draws, refits, positions=True)
    for b in decide.model_contenders([group.view] if group.view else [], [("", k) for k in draws]):
        draws[_length(b.key)] = [rng.randrange(len(rec.points[_length(b.key)].pairs)) for _ in range(FIRST_PAIRS)]
    return _until_stop(rec, rng, refits, budget, draws, positions=True)


def _until_stop(rec: Recorded, rng: random.Random, refits: int, budget: int, draws: dict[int, list[int]],
                positions: bool) -> tuple[decide.Decision, dict[int, list[int]], str]:
    """The adaptive loop after its first pass: decide, then draw the pairs the decision asks for."""
    measurable = [("", k) for k in rec.grid]
    while True:
        d = new_rule(rec, draws, refits, positions=positions)
        step = decide.next_step(d, sum(len(v) for v in draws.values()), budget, measurable)
        if step.stop:
            return d, draws, step.stop
        for r in step.requests:
            k = _length(r.key)
            draws.setdefault(k, []).extend(rng.randrange(len(rec.points[k].pairs)) for _ in range(r.pairs))


def prediction_errors(rec: Recorded, first: tuple[int, ...] | None = None) -> tuple[float, float]:
    """The model's median error at the lengths it did not see, fitted on every recorded pair of the
    ``first`` lengths (default: the long-first pass's): (on the acceptance by position, with one α)."""
    from llamaspec import theory

    lengths = first or tuple(first_lengths(rec.grid, by_position=True))
    rows = rows_for(rec, {k: list(range(len(rec.points[k].pairs))) for k in lengths}, positions=True)
    everything = rows_for(rec, rec.every_pair, positions=True)
    cost = analysis.cost_model(rows, theory.round_profile(rows[0].summary.program or "llama-speculative"))
    obs = [o for r in rows if (o := analysis.observation(r)) is not None]
    others = [o for r in everything if r.draft_max not in lengths and (o := analysis.observation(r)) is not None]
    out = []
    for use in (True, False):
        fit = theory.analyze(obs, cost, use_positions=use)
        out.append(statistics.median(abs((fit.speedup_at(o.drafted_per_round) or 0.0) / o.measured_speedup - 1)
                                     for o in others))
    return out[0], out[1]


def _length(key: Any) -> int:
    return int(key[1]) if isinstance(key, tuple) else int(key)


def wrong(rec: Recorded, k: int | None, worse: float = WORSE) -> bool:
    """Whether recommending length ``k`` (None: no draft, or undecided) is a wrong decision: its
    true speedup more than ``worse`` below the true best. Recommending nothing is wrong only where
    the whole recording shows a gain (some length's interval over all its pairs above 1.0) and the
    best is more than ``worse`` above 1.0: the decision rule never recommends a setting whose
    interval includes 1.0, so where every pair on record cannot show a gain, neither can fewer."""
    best = rec.true_best
    if k is None:
        return rec.gain_shown and best > 1.0 + worse
    return rec.points[k].true_speedup < best * (1.0 - worse)


def shown_wrong(rec: Recorded, k: int | None, worse: float = WORSE) -> bool:
    """Wrong even allowing for the recording's own noise: the whole 95 % interval of the chosen
    point's recorded pairs lies more than ``worse`` below the true best (for "no draft": the best
    point's whole interval lies above 1 + ``worse``)."""
    best = rec.true_best
    if k is None:
        top = max(rec.points.values(), key=lambda p: p.true_speedup)
        return top.true_interval.low > 1.0 + worse
    return rec.points[k].true_interval.high < best * (1.0 - worse)


@dataclass
class Tally:
    wrong: int = 0
    wrong5: int = 0  # more than 5 % below the best (the recording's own noise is several %)
    shown: int = 0  # wrong even by the recording's own interval at the chosen point (shown_wrong)
    no_answer: int = 0
    seconds: float = 0.0
    pairs: int = 0
    settled: int = 0
    picks: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, rec: Recorded, k: int | None, draws: dict[int, list[int]], settled: bool = False) -> None:
        self.wrong += wrong(rec, k)
        self.wrong5 += wrong(rec, k, 0.05)
        self.shown += shown_wrong(rec, k)
        self.no_answer += k is None
        self.seconds += seconds(rec, draws)
        self.pairs += sum(len(v) for v in draws.values())
        self.settled += settled
        label = "none" if k is None else str(k)
        self.picks[label] = self.picks.get(label, 0) + 1


def replay(rec: Recorded, replays: int, refits: int, seed: int = 0, floor: bool = True) -> dict[str, Tally]:
    rng = random.Random(seed)
    floor_rng = random.Random(seed + 1_000_003)  # its own stream: the other rows draw as without it
    fixed_pairs = FIXED_PAIRS * len(rec.grid)
    budget = int(BUDGET_SHARE * fixed_pairs)
    out = {"old rule, fixed 3-pair grid": Tally(), "new rule, fixed 3-pair grid": Tally(), "adaptive (new rule)": Tally(),
           LONG: Tally(), ORACLE: Tally(), **({FLOOR: Tally()} if floor else {})}
    long_rng = random.Random(seed + 2_000_003)  # its own stream: the other rows draw as without it
    top = contenders(rec)
    for _ in range(replays):
        draws = {k: [rng.randrange(len(p.pairs)) for _ in range(FIXED_PAIRS)] for k, p in rec.points.items()}
        out["old rule, fixed 3-pair grid"].add(rec, old_rule(rec, draws), draws)
        d = new_rule(rec, draws, refits)
        out["new rule, fixed 3-pair grid"].add(rec, chosen_length(d), draws, d.settled)
        d, adaptive_draws, _why = adaptive(rec, rng, refits, budget)
        out["adaptive (new rule)"].add(rec, chosen_length(d), adaptive_draws, d.settled)
        d, long_draws, _why = long_first(rec, long_rng, refits, long_budget(rec))
        out[LONG].add(rec, chosen_length(d), long_draws, d.settled)
        share = {k: budget // len(top) + (i < budget % len(top)) for i, k in enumerate(top)}
        oracle_draws = {k: [rng.randrange(len(rec.points[k].pairs)) for _ in range(n)] for k, n in share.items()}
        out[ORACLE].add(rec, oracle(rec, oracle_draws), oracle_draws)
        if floor:
            whole = {k: [floor_rng.randrange(len(p.pairs)) for _ in p.pairs] for k, p in rec.points.items()}
            d = new_rule(rec, whole, refits)
            out[FLOOR].add(rec, chosen_length(d), whole, d.settled)
    return out


# Measurement alone, told where the answer lies (the recording's best and every length within 5 %
# of it): the adaptive budget spent evenly there, the best median taken. When this is wrong more
# often than the goal allows, the machine's run-to-run noise is what limits a decision by
# measurement; only the model's curve can help beyond it.
ORACLE = "oracle: told the contenders"
# The first pass at the longest lengths, the rest predicted from their acceptance by position.
LONG = "long first (positions)"
# The rule on a redrawing of the whole recording: the floor that the recording's own noise sets.
FLOOR = "every pair, redrawn"


def contenders(rec: Recorded, within: float = 0.05) -> list[int]:
    return [k for k in rec.grid if rec.points[k].true_speedup >= rec.true_best * (1 - within)]


def oracle(rec: Recorded, draws: dict[int, list[int]]) -> int | None:
    medians = {k: statistics.median(rec.points[k].pairs[i].ratio for i in picks) for k, picks in draws.items() if picks}
    k = max(medians, key=lambda k: medians[k])
    return k if medians[k] > 1.0 else None


def long_budget(rec: Recorded) -> int:
    """The long-first policy's pairs: ``LONG_BUDGET_SHARE`` of the fixed 3-pair grid's."""
    return int(LONG_BUDGET_SHARE * FIXED_PAIRS * len(rec.grid))


def ceiling(rec: Recorded, pairs: int, draws: int = 300, seed: int = 3) -> dict[int, float]:
    """At each true contender (within 5 % of the best), the share of ``pairs`` pairs drawn there
    alone whose interval lies above 1.0: how often a policy told the answer and spending its whole
    budget on it could recommend at all. Where even the best of these is under 1 - GOAL_WRONG, no
    policy on that budget meets the goal under the decision rule (it recommends only a setting
    shown faster by its own pairs)."""
    rng = random.Random(seed)
    out = {}
    for k in contenders(rec):
        got = rec.points[k].pairs
        shown = sum(_speedup(tuple(got[rng.randrange(len(got))].ratio for _ in range(pairs))).low > 1.0 for _ in range(draws))
        out[k] = shown / draws
    return out


def share_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson 95 % interval on a share of ``hits`` in ``n`` replays: the replays are a sample
    too (at 100 replays a measured 4 % is 1.6-9.8 %), so the goal is judged on this, not the share
    alone."""
    if n <= 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def verdict(hits: int, n: int, rel_time: float, goal: float = GOAL_WRONG, time_goal: float = BUDGET_SHARE) -> str:
    """The goal's verdict on one sweep's adaptive row: "met" when the whole interval on its wrong
    share lies at or under ``goal``, "NOT met" when the whole of it lies above, else "not shown
    either way" (more replays cannot settle it when the truth sits near the line)."""
    if rel_time > time_goal:
        return "NOT met"
    low, high = share_interval(hits, n)
    return "met" if high <= goal else "NOT met" if low > goal else "not shown either way"


def policies_main(argv: list[str] | None = None) -> int:
    """``--policies``: the one-prompt policies side by side (old rule, fixed grid, adaptive, long
    first, oracle, every pair) on the one-prompt recordings, as before the workload study."""
    global FIRST, FIRST_PAIRS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--refits", type=int, default=100, help="bootstrap refits of the model per decision")
    ap.add_argument("--recordings", choices=sorted(RECORDINGS), default="sweep-positions",
                    help="which recorded sweeps to replay (tests/fixtures/llamacpp/0c1e570/<this>/)")
    ap.add_argument("--levels", default=None, help="the recordings' levels to replay (default: all of them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", default=None, help="the adaptive policy's first lengths (default: every length)")
    ap.add_argument("--first-pairs", type=int, default=FIRST_PAIRS, help="pairs per length in the first pass")
    ap.add_argument("--no-floor", action="store_true", help="leave out the rule on every pair, redrawn (half the time)")
    a = ap.parse_args(argv)
    FIRST = tuple(int(k) for k in a.first.split(",")) if a.first else None
    FIRST_PAIRS = a.first_pairs
    print(f"{'sweep':<10} {'policy':<28} {'wrong':>6} {'(95 %)':>11} {'>5% off':>7} {'shown':>6} {'no answer':>9} {'settled':>7} "
          f"{'pairs':>6} {'time vs fixed':>13}  picks")
    verdicts: dict[str, str] = {}
    long_verdicts: dict[str, str] = {}  # the long-first policy, on ">5% off" at LONG_BUDGET_SHARE of the time
    floors: dict[str, str] = {}  # levels whose whole recording, redrawn, misses the goal's share
    root = RECORDED / a.recordings
    for level in (a.levels.split(",") if a.levels else RECORDINGS[a.recordings]):
        rec = load(level, root)
        started = time.monotonic()
        tallies = replay(rec, a.replays, a.refits, a.seed, floor=not a.no_floor)
        fixed = tallies["new rule, fixed 3-pair grid"].seconds
        truth = ", ".join(f"{k}: {p.true_speedup:.2f}x" for k, p in sorted(rec.points.items()))
        print(f"{level:<10} truth (median of {min(len(p.pairs) for p in rec.points.values())}+ pairs): {truth}")
        if rec.positions or rec.pairs_count_positions:
            first = first_lengths(rec.grid, by_position=True)
            curve, one = prediction_errors(rec)
            print(f"{level:<10} model fitted to draft {' and '.join(map(str, first))} (every recorded pair), at the other "
                  f"lengths: median error {curve:.1%} on the acceptance by position, {one:.1%} with one alpha")
        whole = new_rule(rec, rec.every_pair, a.refits)
        print(f"{level:<10} every pair on record: {whole.lines()[0]}"
              + ("" if rec.gain_shown else " (no length shown faster: recommending nothing is right)"))
        if rec.gain_shown:
            budget = long_budget(rec)
            top = ceiling(rec, budget)
            print(f"{level:<10} long first's {budget} pairs all at one length within 5 % of the best, shown faster: "
                  + ", ".join(f"draft {k} {v:.0%}" for k, v in sorted(top.items(), key=lambda kv: -kv[1])))
        for name, t in tallies.items():
            share = t.wrong / a.replays
            rel = t.seconds / fixed if fixed else float("nan")
            picks = ", ".join(f"{k}:{n}" for k, n in sorted(t.picks.items(), key=lambda kv: -kv[1])[:6])
            low, high = share_interval(t.wrong, a.replays)
            print(f"{level:<10} {name:<28} {share:>6.1%} {f'{low:.0%}-{high:.0%}':>11} {t.wrong5 / a.replays:>7.1%} "
                  f"{t.shown / a.replays:>6.1%} {t.no_answer / a.replays:>9.1%} {t.settled / a.replays:>7.1%} "
                  f"{t.pairs / a.replays:>6.1f} {rel:>12.0%}  {picks}")
            if name.startswith("adaptive"):
                verdicts[level] = verdict(t.wrong, a.replays, rel)
            if name == LONG:
                long_verdicts[level] = verdict(t.wrong5, a.replays, rel, time_goal=LONG_BUDGET_SHARE)
            if name == FLOOR and low > GOAL_WRONG:
                floors[level] = f"{share:.0%} [{low:.0%}-{high:.0%}] at {level}"
        print(f"{level:<10} ({a.replays} replays in {time.monotonic() - started:.0f} s)", file=sys.stderr)
    overall = ("met" if all(v == "met" for v in verdicts.values()) else
               "NOT met" if any(v == "NOT met" for v in verdicts.values()) else "not shown either way")
    print(f"goal (adaptive: at most {GOAL_WRONG * 100:.0f} % wrong, by the 95 % interval over the replays, at no more than "
          f"{BUDGET_SHARE * 100:.0f} % of the fixed grid's time): {overall} ({', '.join(f'{k} {v}' for k, v in verdicts.items())})")
    overall = ("met" if all(v == "met" for v in long_verdicts.values()) else
               "NOT met" if any(v == "NOT met" for v in long_verdicts.values()) else "not shown either way")
    print(f"goal (long first: at most {GOAL_WRONG * 100:.0f} % of decisions more than 5 % below the best, by "
          f"the 95 % interval over the replays, at no more than {LONG_BUDGET_SHARE * 100:.0f} % of the fixed grid's time): "
          f"{overall} ({', '.join(f'{k} {v}' for k, v in long_verdicts.items())})"
          + ("; it rests on llama-speculative's timings and speedups with llama-speculative-simple's acceptance by "
             "position of the same lengths" if a.recordings == "sweep-accept" else
             "; every pair's timings, speedup and acceptance by position from the same llama-speculative-simple runs"))
    if floors:
        print(f"the recordings cannot resolve the {WORSE * 100:.0f} % line: on every pair on record, redrawn, the rule "
              f"itself is wrong {', '.join(floors.values())}, more than the goal allows a sweep on a fraction of them")
    return 0


# --- the workload study, replayed (the default) --------------------------------------------------------

WORKLOADS = RECORDED / "sweep-workload"
GOAL_OFF, GOAL_LOSS, GOAL_TIME, GOAL_COVER = 0.05, 0.01, 0.40, 0.95


def recordings() -> list[tuple[str, Path]]:
    """Every recording the study is replayed on: the workload studies (the built-in set; a pair
    that does not pay), then the one-prompt sweeps at three acceptance levels."""
    found = [(d.name, d / "study.json") for d in sorted(WORKLOADS.iterdir()) if (d / "study.json").is_file()]
    return found + [(f"{level} (one prompt)", SWEEPS / level / "sweep.json") for level in RECORDINGS["sweep-positions"]]


def workload_rows(name: str, path: Path, per_prompt: bool) -> list[tuple[str, Any]]:
    import replay as replays

    rec = replays.load(path)
    rows = [(f"{name}: {len(rec.prompts)} prompt{'s' if len(rec.prompts) != 1 else ''}", rec)]
    if per_prompt and len(rec.prompts) > 1:
        rows += [(f"{name}: {q} alone", replays.restrict(rec, [q])) for q in rec.prompts]
    return rows


# --- prompts held out: does the answer speak for prompts it never saw? -------------------------------

HOLDOUT = WORKLOADS / "builtin" / "study.json.gz"
GOAL_HELD = 0.90


def holdout_main(argv: list[str]) -> int:
    """``--holdout``: the study replayed on half of each category's prompts of a recording of the
    built-in workload (drawn anew each replay), at its default budget on the recorded clock; its
    answer's interval held against the other half, measured with every recorded pair (the
    over-prompts point estimate over the held-out prompts that can be timed). An undecided answer
    claims no interval: it counts as holding, and is counted apart."""
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
    held_in = held_out = undecided = decided = 0
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
        if truth is not None and interval.low <= truth <= interval.high:
            held_in += 1
        else:
            held_out += 1
            misses.append(f"{d.verdict} {d.chosen.label} {interval.text(suffix='x')}, held out {truth:.2f}x"
                          if truth is not None else f"{d.chosen.label}: no held-out figure")
    n = a.replays
    lo, hi = replays.wilson(held_in, n)
    dlo, dhi = replays.wilson(held_in - undecided, max(decided, 1))
    verdict = "met" if lo >= GOAL_HELD else "NOT met" if hi < GOAL_HELD else "not shown either way"
    print(f"answers holding on the held-out prompts: {held_in / n:.0%} [{lo:.0%}-{hi:.0%}] of {n} replays "
          f"(undecided {undecided / n:.0%}; of the {decided} that decided, {(held_in - undecided) / max(decided, 1):.0%} "
          f"[{dlo:.0%}-{dhi:.0%}]); goal at least {GOAL_HELD:.0%}: {verdict}")
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
                                       "undecided": undecided / n, "decided_held": (held_in - undecided) / max(decided, 1),
                                       "prompts_timed_median": statistics.median(sampled), "picks": picks,
                                       "goal": GOAL_HELD, "verdict": verdict, "misses": misses}, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--policies" in argv:
        return policies_main([a for a in argv if a != "--policies"])
    if "--holdout" in argv:
        return holdout_main([a for a in argv if a != "--holdout"])
    ap = argparse.ArgumentParser(description="The workload study replayed on recorded real measurements: how often "
                                             "its one decision is off, recommends a loss or stays undecided, how "
                                             "often the model's band covers the truth, and its time against the "
                                             "fixed grid's. (--policies: the one-prompt policies compared.)")
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="replay only the recordings whose name contains this")
    ap.add_argument("--per-prompt", action="store_true", help="each prompt of a workload recording alone, too")
    ap.add_argument("--pooled", action="store_true",
                    help="the rule ranking on the model-pooled estimate (decide.POOLED), for comparison")
    ap.add_argument("--write", type=Path, default=None,
                    help="keep the rows as JSON here (docs/results.md's table: tests/fixtures/llamacpp/0c1e570/"
                         "sweep-workload/replays.json, then `make docs`)")
    a = ap.parse_args(argv)
    import os
    import tempfile

    decide.POOLED = a.pooled

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
            print(f"{label:<38} {f'{best} {truths[best]:.2f}x':>18} {f'{off / n:.1%} [{lo:.0%}-{hi:.0%}]':>16} "
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
                         + (f" (covers {pooled_cover:.0%})" if pooled else " (never formed)"))
    print(f"goals (at most {GOAL_OFF:.0%} more than 5 % below the best by the 95 % interval over the replays, at most "
          f"{GOAL_LOSS:.0%} recommending a loss, at most {GOAL_TIME:.0%} of the fixed grid's time; the model-pooled "
          f"estimate may decide only where its interval covers the truth at least {GOAL_COVER:.0%} of the time; the "
          f"rule {'ranked on it (--pooled)' if decide.POOLED else 'ranked on the measured medians'}):")
    for line in goals:
        print(f"  {line}")
    if a.write is not None:
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        a.write.write_text(json.dumps({"command": "python benchmarks/decide.py " + " ".join(argv), "pooled": decide.POOLED,
                                       "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit,
                                       "replays": a.replays, "rows": kept, "goals": goals}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
