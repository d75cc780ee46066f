"""The one pairs loop: the target alone and with speculation, measured next to each other, and the
one rule for which measurements form a pair.

Every feature that compares the two (``run``, ``sweep``, prompt sets, concurrency
batches, the cluster's executors, the adaptive sweep's "N more pairs at this setting") asks this
loop for pairs; none alternates modes itself. What it guarantees:

- **ABBA order**: pair ``r`` runs baseline then speculative when ``r`` is even, the other way round
  when odd, so slow drift of the machine cancels instead of posing as speedup. The order belongs to
  the pair's index, not to the call: pairs added later (a resumed or extended run, a cluster item
  split across machines) keep their place in the alternation.
- **a measurement carries its pair**: the loop stamps each baseline and speculative measurement
  with its pair index (``Measurement.pair``, stored as the row's ``repeat``), and
  :func:`whole_pairs` is the one place that turns measurements into pairs, for every view (a
  point's summary, a prompt's figures, concurrency levels, the cluster's per-machine figures, an
  extended run's kept pairs). Order taken plays no part: a half pair left by an interruption or a
  failure is in no pair and shifts none.
- **metered**: every measurement goes through :func:`measure_one` (the engine's measurement, what
  else the machine did meanwhile, its pair index, then the caller's ``keep``: a store row, a list).
- **a baseline is the target alone**: a baseline that drafted anything is a failure
  (``contract.refuse_drafting_baseline``, applied in :func:`metered`, the step every measurement
  and every concurrency batch takes, before it is kept): it stops the loop like any failure and
  its pair has no ratio, whichever engine measured it.
- **stop at the first failure**: a failed measurement ends the loop; what was measured before it
  stays (the caller's ``keep`` has stored it).
- **auto repeats**: between ``at_least`` and ``at_most`` pairs, stopping early once ``settled``
  says the figures are good enough.

The loop measures; the caller decides where a measurement goes and what a pair's figures mean
(:mod:`llamaspec.measure.summary`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from llamaspec.base import host
from llamaspec.measure.contract import PAIR_MODES, Engine, Measurement, ResolvedCase, refuse_drafting_baseline

__all__ = ["PAIR_MODES", "Measure", "Pair", "Pairs", "Taken", "block_order", "failure", "measure_one", "measure_pairs",
           "metered", "order", "whole_pairs"]


@dataclass(frozen=True)
class Pair:
    """A baseline and a speculative measurement of one pair index, both successful."""

    index: int
    baseline: Measurement
    speculative: Measurement

    @property
    def ratio(self) -> float | None:
        """Speculative over baseline decode speed (None when either speed is missing)."""
        b, s = self.baseline.decode_tps, self.speculative.decode_tps
        return s / b if s and b else None


def whole_pairs(measured: Iterable[Measurement]) -> list[Pair]:
    """The pairs among ``measured``, by pair index (ascending): the one rule for which measurements
    form a pair. A pair is whole when its index has exactly one successful measurement of each mode;
    a side that failed, is missing, or was taken twice under one index (measurements of two runs
    mixed by mistake) leaves its index out of every pair. Measurements without a pair index (a
    draft or batch timing, an unpaired shared baseline) are in none."""
    sides: dict[int, dict[str, list[Measurement]]] = {}
    for m in measured:
        if m.pair is not None and m.mode in PAIR_MODES:
            sides.setdefault(m.pair, {}).setdefault(m.mode, []).append(m)
    out = []
    for index in sorted(sides):
        got = sides[index]
        base, spec = got.get("baseline", []), got.get("speculative", [])
        if len(base) == 1 and len(spec) == 1 and base[0].ok and spec[0].ok:
            out.append(Pair(index, base[0], spec[0]))
    return out


def order(pair: int) -> tuple[str, str]:
    """The two modes of pair ``pair`` in the order they run (ABBA)."""
    return PAIR_MODES if pair % 2 == 0 else (PAIR_MODES[1], PAIR_MODES[0])


@dataclass(frozen=True)
class Taken:
    pair: int
    measurement: Measurement


@dataclass(frozen=True)
class Pairs:
    """What one call of :func:`measure_pairs` measured, in order."""

    taken: tuple[Taken, ...]
    failed: str | None  # the first failure's error; None when every measurement succeeded

    @property
    def measurements(self) -> list[Measurement]:
        return [t.measurement for t in self.taken]

    @property
    def complete(self) -> int:
        """Pairs with both sides measured."""
        return len(whole_pairs(self.measurements))


def metered(measure: Callable[[], Measurement]) -> Measurement:
    """One measurement as the run core takes it: what else the machine did meanwhile (CPU steal,
    other processes' load) in ``Measurement.noise``, and a baseline that drafted turned into a
    failure (``contract.refuse_drafting_baseline``)."""
    meter = host.NoiseMeter.start()
    m = measure()
    return refuse_drafting_baseline(replace(m, noise=meter.stop()))


def measure_one(engine: Engine, case: ResolvedCase, mode: str, pair: int | None, log_path: Path,
                keep: Callable[[Measurement], object] = lambda _m: None, block: str | None = None) -> Measurement:
    """The one measure-meter-keep step every measurement of a pair or a block (and every cost
    timing) takes: the engine measures, the meter records what else the machine did (and a
    baseline that drafted becomes a failure), the measurement gets its pair index (baseline and
    speculative only) and its ``block``, and ``keep`` stores it before anything else happens."""
    m = metered(lambda: engine.measure(case, mode, log_path))
    m = replace(m, pair=pair if mode in PAIR_MODES else None, block=block if mode in PAIR_MODES else None)
    keep(m)
    return m


def failure(m: Measurement) -> str | None:
    return None if m.ok else (m.error or f"{m.mode} failed")


Measure = Callable[[str, int], Measurement]  # (mode, pair index) -> one measurement


def _stamped(m: Measurement, mode: str, pair: int) -> Measurement:
    """The loop's measurement carries the loop's pair index, whatever the callback filled in."""
    return m if m.pair == pair or mode not in PAIR_MODES else replace(m, pair=pair)


def measure_pairs(measure: Measure, *, at_least: int, at_most: int | None = None, start: int = 0,
                  after_pair: Callable[[int], Sequence[Measurement]] | None = None,
                  settled: Callable[[], bool] | None = None) -> Pairs:
    """Measure pairs ``start``, ``start + 1``, ... in ABBA order.

    - ``measure(mode, pair)``: one measurement, through :func:`measure_one` (metered, kept).
    - ``at_least`` / ``at_most``: pairs to measure in this call (``at_most`` defaults to
      ``at_least``); after ``at_least`` the loop stops as soon as ``settled()`` is true.
    - ``after_pair(pair)``: called after each complete pair; measurements it returns (the speedup
      model's cost timings, taken once the prompt's length is known) join the result, and a failed
      one ends the loop like any other.
    """
    most = at_least if at_most is None else at_most
    taken: list[Taken] = []
    for pair in range(start, start + most):
        for mode in order(pair):
            m = _stamped(measure(mode, pair), mode, pair)
            taken.append(Taken(pair, m))
            if (error := failure(m)) is not None:
                return Pairs(tuple(taken), error)
        for m in (after_pair(pair) if after_pair else ()):
            taken.append(Taken(pair, m))
            if (error := failure(m)) is not None:
                return Pairs(tuple(taken), error)
        if pair - start + 1 >= at_least and settled is not None and settled():
            break
    return Pairs(tuple(taken), None)


def block_order(count: int, block: str) -> list[int]:
    """The order of a block's ``count`` speculative runs (B S.. B): shuffled by the block's key, the
    same on a rerun, different from block to block, so no setup always runs next to a baseline."""
    import hashlib
    import random

    order = list(range(count))
    random.Random(int(hashlib.sha256(block.encode()).hexdigest()[:12], 16)).shuffle(order)
    return order
