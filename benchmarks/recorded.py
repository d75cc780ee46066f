"""The recorded one-prompt sweeps (``tests/fixtures/llamacpp/0c1e570/sweep-accept``, ``sweep-positions``):
each length's pairs as measured, read back through the run core's own pairing, for the tests that
hold the recordings, the speedup model and the decision rule to them.

- ``sweep-positions``: llama-speculative-simple with ``--spec-draft-p-min 0``, 20 pairs a point at
  Q4_1, Q4_0 and Q2_K, every speculative run counting its acceptance by position;
- ``sweep-accept``: llama-speculative, 30 pairs a point (Q2_K 10), no positions of its own (each
  length's acceptance by position from llama-speculative-simple's log of the same length,
  ``positions/``).

A decision is **wrong** (:func:`wrong`) when the true speedup of the setting it recommends (the
median of every recorded pair there) is more than 3 % below the true best, or when it recommends
nothing although the whole recording shows a gain of more than 3 %; **shown wrong**
(:func:`shown_wrong`) when it stays wrong by the recording's own 95 % interval.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec.base import stats
from llamaspec.base.stats import Spread
from llamaspec.decision import decide, speedup_model
from llamaspec.measure import pairs
from llamaspec.measure.summary import Summary
from llamaspec.store.rows import measurements_of
from llamaspec.studies.policy import FIRST_LONGEST

RECORDED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "llamacpp" / "0c1e570"
SWEEPS = RECORDED / "sweep-positions"
ACCEPT = RECORDED / "sweep-accept"
POSITIONS = RECORDED / "positions"  # llama-speculative-simple -lv 4, one run per length and level
WORSE = 0.03  # a decision is wrong when its setting is truly more than 3 % below the best


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


def rows_for(rec: Recorded, draws: dict[int, list[int]], positions: bool = False) -> list[speedup_model.PointRow]:
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
        rows.append(speedup_model.PointRow(point.run["run_id"], "", k, summary))
    return rows


def _summed_positions(chosen: list[Pair]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The chosen pairs' acceptance by position summed, over the positions each of them counted
    (as the run core sums a point's runs); None where one counted none."""
    if not chosen or any(p.drafted is None or p.accepted is None for p in chosen):
        return None
    n = min(len(p.drafted or ()) for p in chosen)
    return (tuple(sum((p.drafted or ())[i] for p in chosen) for i in range(n)),
            tuple(sum((p.accepted or ())[i] for p in chosen) for i in range(n)))


def group_for(rec: Recorded, draws: dict[int, list[int]], refits: int, positions: bool = False) -> speedup_model.FittedGroup:
    rows = rows_for(rec, draws, positions)
    fit, note = speedup_model.analyze_rows(rows)
    group = speedup_model.FittedGroup("", rows, fit, note=note)
    group.view = speedup_model.model_view(group, refits=refits, grid=rec.grid)
    return group


def new_rule(rec: Recorded, draws: dict[int, list[int]], refits: int, positions: bool = False) -> decide.Decision:
    """The one decision rule (``llamaspec.decision.decide``) on these pairs, the model's band beside them."""
    group = group_for(rec, draws, refits, positions)
    candidates = [decide.Candidate(r.key, r.name, r.speedup, r.cost) for r in group.rows
                  if r.summary.recommendable and r.speedup is not None]
    return decide.decide(candidates, (group.view,) if group.view else ())


def chosen_length(d: decide.Decision) -> int | None:
    if d.verdict != "recommend" or d.chosen is None:
        return None
    key = d.chosen.key
    return int(key[1]) if isinstance(key, tuple) else int(key)  # type: ignore[call-overload]


def prediction_errors(rec: Recorded, first: tuple[int, ...] | None = None) -> tuple[float, float]:
    """The model's median error at the lengths it did not see, fitted on every recorded pair of the
    ``first`` lengths (default: the long-first pass's): (on the acceptance by position, with one α)."""
    from llamaspec import theory
    from llamaspec.registry import engines

    lengths = first or tuple(sorted(rec.grid)[::-1][:FIRST_LONGEST])
    rows = rows_for(rec, {k: list(range(len(rec.points[k].pairs))) for k in lengths}, positions=True)
    everything = rows_for(rec, rec.every_pair, positions=True)
    cost = speedup_model.cost_model(rows, engines.round_profile(rows[0].summary.program or "llama-speculative"))
    obs = [o for r in rows if (o := speedup_model.observation(r)) is not None]
    others = [o for r in everything if r.draft_max not in lengths and (o := speedup_model.observation(r)) is not None]
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
