"""The one pairs loop: the target alone and with speculation, measured next to each other.

Every feature that compares the two (``run``, ``sweep``, ``tune``, prompt sets, the cluster's
executors, the adaptive sweep's "N more pairs at this setting") asks this loop for pairs; none
alternates modes itself. What it guarantees:

- **ABBA order**: pair ``r`` runs baseline then speculative when ``r`` is even, the other way round
  when odd, so slow drift of the machine cancels instead of posing as speedup. The order belongs to
  the pair's index, not to the call: pairs added later (a resumed or extended run, a cluster item
  split across machines) keep their place in the alternation.
- **stop at the first failure**: a failed measurement ends the loop; what was measured before it
  stays (the caller's ``take`` has stored it).
- **auto repeats**: between ``at_least`` and ``at_most`` pairs, stopping early once ``settled``
  says the figures are good enough.

The loop measures; the caller decides where a measurement goes (``take``: a store, a list, a
cluster payload) and what a pair's figures mean (:mod:`llamaspec.summary`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llamaspec import host
from llamaspec.contract import Measurement

PAIR_MODES = ("baseline", "speculative")


def whole_pairs(rows: Sequence[dict[str, Any]]) -> set[int]:
    """The pair indices of stored measurement rows that have both sides measured: a pair left half
    done by an interruption is not one (its rows stay stored, outside every pair)."""
    sides: dict[int, set[str]] = {}
    for r in rows:
        if r["mode"] in PAIR_MODES and r["ok"]:
            sides.setdefault(r["repeat"], set()).add(r["mode"])
    return {rep for rep, modes in sides.items() if modes == set(PAIR_MODES)}


def order(pair: int) -> tuple[str, str]:
    """The two modes of pair ``pair`` in the order they run (ABBA)."""
    return PAIR_MODES if pair % 2 == 0 else PAIR_MODES[::-1]


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
        modes: dict[int, set[str]] = {}
        for t in self.taken:
            if t.measurement.ok:
                modes.setdefault(t.pair, set()).add(t.measurement.mode)
        return sum(1 for m in modes.values() if set(PAIR_MODES) <= m)


def metered(measure: Callable[[], Measurement]) -> Measurement:
    """One measurement with what else the machine did meanwhile (CPU steal, other processes' load)
    in ``Measurement.noise``: every pair's measurement goes through here before it is stored."""
    meter = host.NoiseMeter.start()
    m = measure()
    return replace(m, noise=meter.stop())


def failure(m: Measurement) -> str | None:
    return None if m.ok else (m.error or f"{m.mode} failed")


Measure = Callable[[str, int], Measurement]  # (mode, pair index) -> one measurement


def measure_pairs(measure: Measure, *, at_least: int, at_most: int | None = None, start: int = 0,
                  have_baseline: Callable[[int], bool] = lambda _pair: False,
                  after_pair: Callable[[int], Sequence[Measurement]] | None = None,
                  settled: Callable[[], bool] | None = None) -> Pairs:
    """Measure pairs ``start``, ``start + 1``, ... in ABBA order.

    - ``at_least`` / ``at_most``: pairs to measure in this call (``at_most`` defaults to
      ``at_least``); after ``at_least`` the loop stops as soon as ``settled()`` is true.
    - ``have_baseline(pair)``: that pair's baseline exists already (an explicitly shared baseline):
      only its speculative side is measured.
    - ``after_pair(pair)``: called after each complete pair; measurements it returns (the speedup
      model's cost timings, taken once the prompt's length is known) join the result, and a failed
      one ends the loop like any other.
    """
    most = at_least if at_most is None else at_most
    taken: list[Taken] = []
    for pair in range(start, start + most):
        for mode in order(pair):
            if mode == "baseline" and have_baseline(pair):
                continue
            m = measure(mode, pair)
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
