"""A workload study while it is measured: its cells in the store, each prompt's refitted model,
the pace, what each prompt timed, and its decision (:class:`StudyState`).

The policies that drive it (:mod:`llamaspec.studies.policy`) ask it what is measured and tell it
what to measure next; :func:`llamaspec.studies.study.run_study` makes one and reads its decision.
Every pair is stored as it is measured (kind 'sweep'; each prompt's setups are a sweep of their
own, ``STUDY/PROMPT``), so a rerun of the same study finds them here again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.host import NoiseSample
from llamaspec.base.stats import percent_text
from llamaspec.decision import workload, workload_runs
from llamaspec.measure import spectypes, timed
from llamaspec.measure.contract import Engine, ResolvedCase
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Store
from llamaspec.store.rows import Group
from llamaspec.studies.experiment import Case, Experiment
from llamaspec.studies.run import check_settings, more_pairs, resolve_case, run_case
from llamaspec.studies.setups import MODES_AXIS, Setup, cost_of

log = logging.getLogger(__name__)

# The bootstrap refits of each prompt's speedup model band (analysis.BOOTSTRAP_REFITS for a sweep's
# report): the study refits after every step, on every prompt whose points changed, and takes the
# band's ends over the prompts, which a coarser percentile of each moves little.
STUDY_REFITS = 100


def prompt_group(sid: str, prompt: str) -> str:
    """The group (a sweep of its own) of one prompt's setups in study ``sid``."""
    return f"{sid}/{prompt}"


@dataclass(frozen=True)
class Drift:
    """How the speedups moved over the study: on the cells (a setup on a prompt) measured in both
    halves of the study's pairs (split at the median of the order they were measured in), the mean
    change of their log median, the second half's against the first's. The same setup on the same
    prompt: what moves is the machine. An adaptive study measures its first cell once more at its
    end (:meth:`StudyState.measure_anchor`), so that there is always one."""

    change: float | None  # second half over first, minus one; None: not measured
    cells: int
    pairs: int

    def text(self) -> str:
        if self.change is None:
            return "drift over the study: not measured (no setup was measured on one prompt in both halves of the study)"
        return (f"drift over the study: {percent_text(self.change, 1, sign=True)} (the speedups of {self.cells} setup-prompt cell"
                f"{'s' if self.cells != 1 else ''} measured in both halves of the study's {self.pairs} pairs: the "
                "second half's against the first's)")

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "cells": self.cells, "pairs": self.pairs}


class StudyState:
    """One study being measured: its cells in the store, its pace, its decision.

    ``over_prompts``: the prompts are a sample of the workload (the default), not the whole of it;
    ``count_loops``: a prompt whose target output loops counts in the decision."""

    def __init__(self, exp: Experiment, setups: Sequence[Setup], engine: Engine, store: Store, sid: str,
                 on_event: Callable[[str, dict[str, Any]], None] | None, shared_baseline: bool = False,
                 clock: Callable[[], float] = time.monotonic, *, over_prompts: bool = True,
                 count_loops: bool = False) -> None:
        from llamaspec.base import host

        self.exp, self.setups, self.engine, self.store, self.sid = exp, list(setups), engine, store, sid
        self.by_key = {s.key: s for s in self.setups}
        self.cases: list[Case] = list(exp.cases)
        self.by_name = {c.name: c for c in self.cases}
        self.prompts = {c.name: c.category or c.name for c in self.cases}
        self.hw = host.hardware()
        self.on_event = on_event
        self.over_prompts, self.count_loops = over_prompts, count_loops
        self.resolved: dict[tuple[str, str], ResolvedCase] = {}
        self.failed: dict[tuple[str, str], str] = {}
        self.measured_here = 0  # pairs this invocation measured
        self.seconds = 0.0  # ... and the time they took, warm-up and cost timings included
        self.pair_time = 0.0  # the pairs' own generations (baseline and speculative), for the pace
        self.side_time = {"baseline": 0.0, "speculative": 0.0}  # ... by side, and how many of each
        self.side_runs = {"baseline": 0, "speculative": 0}
        self.warm = False
        self.noise: NoiseSample | None = None  # the machine during the last pairs measured (steal, other load)
        self.shared_baseline = shared_baseline
        # Over several prompts, a prompt's new cells share its first baseline (the spread between
        # prompts outweighs the pair noise, and the time saved buys prompts); on one prompt the pair
        # noise is the whole interval, and every pair is measured whole.
        self.shares = len(self.cases) > 1
        self.clock = clock
        self._fits: dict[tuple[str, Any], tuple[Any, list[workload.Prediction]]] = {}  # refitted only when points change
        self._rows: dict[tuple[str, str], dict[str, Any] | None] = {}  # the store's newest finished row of a cell
        self.touched: list[str] = [c.name for c in self.cases if any(self.row(c, s) is not None for s in self.setups)]

    # --- the workload's prompts -------------------------------------------------------------------

    def order(self) -> dict[str, list[Case]]:
        """Each category's prompts in the order a sample takes them: shuffled by the study's id (the
        same order on every rerun, so a resumed study samples the same prompts), categories in the
        workload's order; the prompts already measured first."""
        rng = random.Random(int(hashlib.sha256(self.sid.encode()).hexdigest()[:12], 16))
        out: dict[str, list[Case]] = {}
        for c in self.cases:
            out.setdefault(self.prompts[c.name], []).append(c)
        for cases in out.values():
            rng.shuffle(cases)
            cases.sort(key=lambda c: c.name not in self.touched)  # stable: measured first, then the shuffle
        return out

    @property
    def n_predict(self) -> int | None:
        """The tokens each prompt is asked for (-n), as resolved: the floor of "too short to time"."""
        case = self.cases[0]
        setup = self.setups[0]
        return self.resolve(case, setup).settings.n_predict

    def left_out(self, case: Case) -> str | None:
        """Why ``case``'s prompt is out of every decision, from what its runs timed: too short to time,
        its output loops (unless loops count), or several setups diverge from the target alone at one
        place (:func:`llamaspec.decision.workload.diverged_everywhere`); None while it is timed or not
        measured."""
        differs_at: list[int | None] = []
        for s in self.setups:
            row = self.row(case, s)
            if row is None:
                continue
            summary = Summary.from_dict(row.get("summary"))
            if summary.timed_tokens is not None and timed.too_short(summary.timed_tokens, self.n_predict):
                return timed.short_text(summary.timed_tokens, self.n_predict)
            if summary.loop is not None and not self.count_loops:
                return f"its output {summary.loop.text()}"
            if summary.output_differs:
                differs_at.append(summary.lossless.first_difference)
        return workload.diverged_everywhere(differs_at)

    # --- measuring ---------------------------------------------------------------------------------

    def group(self, case: Case) -> str:
        return prompt_group(self.sid, case.name)

    def resolve(self, case: Case, setup: Setup) -> ResolvedCase:
        key = (case.name, setup.key)
        if key not in self.resolved:
            rc = resolve_case(self.exp, setup.point.apply(case), self.engine)
            self.resolved[key] = dataclasses.replace(rc, prompt_id=case.name, category=case.category or case.name)
        return self.resolved[key]

    def check(self) -> list[tuple[str, str]]:
        """Refuse settings the build does not take before anything is measured; a draft-free mode
        the program cannot run is skipped, and said."""
        skipped = []
        offered = self.engine.capabilities.spec_types
        for setup in list(self.setups):
            mode = setup.values.get(MODES_AXIS)
            if setup.draft_free and mode not in offered:
                runs = ", ".join(spectypes.draft_free_modes(self.engine.capabilities)) or "none"
                skipped.append((setup.label, f"the {self.engine.name} engine does not run it here (its draft-free modes: {runs})"))
                self.setups.remove(setup)
                continue
            for case in self.cases:
                rc = self.resolve(case, setup)
                try:
                    check_settings(rc, self.engine)
                    self.engine.check(rc)
                except LlamaspecError as exc:
                    if not setup.draft_free:
                        raise
                    skipped.append((setup.label, f"{exc.message} ({exc.hint})" if exc.hint else exc.message))
                    self.setups.remove(setup)
                    break
        self.by_key = {s.key: s for s in self.setups}
        return skipped

    def row(self, case: Case, setup: Setup) -> dict[str, Any] | None:
        key = (case.name, setup.key)
        if key not in self._rows:
            self._rows[key] = self.store.finished_point(self.group(case), setup.key)
        return self._rows[key]

    def pairs_of(self, case: Case, setup: Setup) -> int:
        row = self.row(case, setup)
        return Summary.from_dict(row.get("summary")).pairs if row else 0

    def measure(self, case: Case, setup: Setup, pairs: int, share: bool = False) -> None:
        """``pairs`` more pairs of ``setup`` on ``case``'s prompt (its first ones start the run).
        ``share``: a new cell's first pairs take the prompt's baselines already measured in this
        study, where there are (its speculative runs only; over several prompts, :attr:`shares`);
        its later pairs are whole."""
        if (case.name, setup.key) in self.failed or pairs < 1:
            return
        rc = self.resolve(case, setup)
        row = self.row(case, setup)
        start = self.clock()
        try:
            if row is None:
                result = run_case(rc, self.engine, self.store, repeats=pairs, hardware=self.hw, exp=self.exp, kind="sweep",
                                  group=Group("sweep", self.group(case)), point_key=setup.key,
                                  baseline_scope=self.sid, time_costs=not setup.draft_free, warmup=not self.warm,
                                  shared_baseline=self.shared_baseline or (share and self.shares),
                                  on_event=self.on_event)
                self.warm = True
            else:
                result = more_pairs(row["id"], rc, self.engine, self.store, pairs, baseline_scope=self.sid,
                                    on_event=self.on_event)
        finally:
            self._rows.pop((case.name, setup.key), None)
        if case.name not in self.touched:
            self.touched.append(case.name)
        self.seconds += self.clock() - start
        self.measured_here += pairs
        self.noise = result.summary.noise or self.noise
        sides = [m for m in result.measurements if m.mode in ("baseline", "speculative") and m.pair is not None]
        new = set(sorted({m.pair for m in sides if m.pair is not None})[-pairs:])  # this call's pairs: the last indices
        self.pair_time += sum(m.wall_seconds or 0.0 for m in sides if m.pair in new)
        for m in (m for m in sides if m.pair in new):
            self.side_time[m.mode] += m.wall_seconds or 0.0
            self.side_runs[m.mode] += 1
        if result.status == "failed":
            self.failed[(case.name, setup.key)] = result.error or "failed"
            log.warning("%s failed on %s: %s (it is left out of the decision; every pair measured is stored)",
                        setup.label, case.name, result.error)

    @property
    def pair_seconds(self) -> float | None:
        """A pair's time so far: its two generations, not the warm-up or the cost timings a
        prompt's first draft pair takes once."""
        return self.pair_time / self.measured_here if self.measured_here and self.pair_time else None

    def prompt_seconds(self, setups: int, stored: bool = False) -> float | None:
        """About how long ``setups`` new cells of one pair take on a new prompt: a baseline they
        share and ``setups`` speculative runs (a pair each on one prompt), at this invocation's pace of each
        (``stored``: as the study's stored pairs took them, for a resumed study before it measures)."""
        time, runs = dict(self.side_time), dict(self.side_runs)
        if stored:
            time, runs = {"baseline": 0.0, "speculative": 0.0}, {"baseline": 0, "speculative": 0}
            for _c, _s, r in self.measured_cells():
                for m in self.store.measurements(r["id"]):
                    if m.get("mode") in time and m.get("ok"):
                        time[m["mode"]] += float(m.get("wall_seconds") or 0.0)
                        runs[m["mode"]] += 1
        if not all(runs.values()):
            return None
        base, spec = time["baseline"] / runs["baseline"], time["speculative"] / runs["speculative"]
        return base + setups * spec if self.shares else setups * (base + spec)

    # --- what is measured, and the decision ---------------------------------------------------------

    def measured_cells(self) -> list[tuple[Case, Setup, dict[str, Any]]]:
        return [(c, s, r) for c in (self.by_name[n] for n in self.touched) for s in self.setups
                if (c.name, s.key) not in self.failed and (r := self.row(c, s)) is not None]

    def cells(self) -> list[workload.Cell]:
        """The study's cells: its stored rows through the one runs-to-cells function
        (:func:`llamaspec.decision.workload_runs.workload_of_runs`), each named by the setup it was measured
        for; a setup that failed on a prompt, by its failure."""
        measured = self.measured_cells()
        by_run = {r["id"]: s for _c, s, r in measured}

        def setup_of(run: Mapping[str, Any]) -> workload_runs.RunSetup:
            s = by_run[run["id"]]
            return workload_runs.RunSetup(s.key, s.label, cost_of(s, workload_runs.draft_bytes(run)))

        out, _prompts = workload_runs.workload_of_runs([r for _c, _s, r in measured], setup_of)
        for (name, key), why in self.failed.items():
            setup = self.by_key.get(key) or next(s for s in self.setups if s.key == key)
            out.append(workload.Cell(name, key, setup.label, (), cost_of(setup), "failed", why))
        return out

    def predictions(self) -> list[workload.Prediction]:
        """Each measured prompt's speedup model, fitted to its draft setups, at every length of the grid."""
        lengths = sorted({s.length for s in self.setups if s.length is not None})
        out = []
        for name in self.touched:
            case = self.by_name[name]
            rows = [(s, r) for s in self.setups if not s.draft_free and (r := self.row(case, s)) is not None]
            by_group: dict[tuple[tuple[str, Any], ...], list[dict[str, Any]]] = {}
            for s, r in rows:
                by_group.setdefault(s.group, []).append(r)
            for group, runs in by_group.items():
                state = tuple(sorted((r["id"], Summary.from_dict(r.get("summary")).pairs) for r in runs))
                cached = self._fits.get((case.name, group))
                if cached is None or cached[0] != state:
                    cached = (state, self._fit(case, group, runs, lengths))
                    self._fits[(case.name, group)] = cached
                out += cached[1]
        return out

    def _fit(self, case: Case, group: Any, runs: list[dict[str, Any]], lengths: list[int]) -> list[workload.Prediction]:
        from llamaspec.base import paths
        from llamaspec.views import analysis
        report = analysis.report_for_runs(self.store, runs, self.sid, ["draft_max"], False,
                                          paths.plots_dir() / self.sid, grid=lengths, refits=STUDY_REFITS)
        template = next(s for s in self.setups if s.group == group and not s.draft_free)
        out = []
        for g in report.groups:
            if g.view is None:
                continue
            for band in g.view.bands:
                k = int(band.key[1]) if isinstance(band.key, tuple) else int(band.key)  # type: ignore[call-overload]
                setup = template.with_length(k)
                out.append(workload.Prediction(case.name, setup.key, setup.label, repr(group), band.predicted,
                                               band.low, band.high, g.view.error,
                                               cost_of(setup, int(band.cost[1]) if len(band.cost) > 1 else 0)))
        return out

    def decision(self) -> workload.WorkloadDecision:
        return workload.decide_workload(self.cells(), self.prompts, self.predictions(), over_prompts=self.over_prompts,
                                        count_loops=self.count_loops)

    def spent(self) -> int:
        return sum(len(c.ratios) for c in self.cells())

    def counts_positions(self) -> bool:
        """Whether every draft setup measured so far counted acceptance by draft position."""
        found = [Summary.from_dict(r.get("summary")) for _c, s, r in self.measured_cells() if not s.draft_free]
        found = [s for s in found if s.n_drafted]
        return bool(found) and all(s.drafted_by_position for s in found)

    def measurable(self) -> list[str]:
        """The setups more pairs may go to: every one that has not failed on a prompt."""
        failed = {key for _case, key in self.failed}
        return [s.key for s in self.setups if s.key not in failed]

    def runs(self) -> dict[tuple[str, str], int]:
        return {(c.name, s.key): r["id"] for c, s, r in self.measured_cells()}

    def measure_anchor(self) -> None:
        """One more pair of the study's first cell (the first setup on the first prompt it measured),
        at its end: the drift over the study is then measured on at least one cell."""
        measured = self.measured_cells()
        if not measured or not self.measured_here:
            return
        case, setup, _row = min(measured, key=lambda c: c[2]["id"])
        log.info("the drift over the study: %s on %s once more, as at its start", setup.label, case.name)
        self.measure(case, setup, 1)

    def drift(self) -> Drift:
        """:class:`Drift` over the study's pairs, in the order they were measured (the store's
        measurement ids)."""
        import math

        from llamaspec.measure.pairs import lone_runs, whole_pairs
        from llamaspec.store.rows import measurement_of

        cells: list[list[tuple[int, float]]] = []  # each cell's pairs: (when, log ratio)
        for _c, _s, r in self.measured_cells():
            rows = self.store.measurements(r["id"])
            ids: dict[int, int] = {}
            for m in rows:
                if m.get("repeat") is not None:
                    ids[int(m["repeat"])] = max(ids.get(int(m["repeat"]), 0), int(m["id"]))
            measured = [measurement_of(m) for m in rows]
            cell = [(ids[p.index], math.log(ratio)) for p in whole_pairs(measured)
                    if (ratio := p.ratio) is not None and ratio > 0 and p.index in ids]
            # a speculative run on a baseline it shares with the prompt's other setups, one to one, in order
            lone = lone_runs(measured)
            key = Summary.from_dict(r.get("summary")).baseline_key
            shared = [measurement_of(b) for b in self.store.shared(key)[:len(lone)]] if lone and key else []
            cell += [(ids[m.pair], math.log(m.decode_tps / b.decode_tps)) for m, b in zip(lone, shared, strict=False)
                     if m.pair in ids and m.decode_tps and b.decode_tps]
            cells.append(cell)
        order = sorted(t for cell in cells for t, _r in cell)
        if len(order) < 2:
            return Drift(None, 0, len(order))
        middle = order[len(order) // 2]
        changes = []
        for cell in cells:
            first = [r for t, r in cell if t < middle]
            second = [r for t, r in cell if t >= middle]
            if first and second:
                changes.append(statistics.fmean(second) - statistics.fmean(first))
        if not changes:
            return Drift(None, 0, len(order))
        return Drift(math.exp(statistics.fmean(changes)) - 1.0, len(changes), len(order))


__all__ = ["STUDY_REFITS", "Drift", "StudyState", "prompt_group"]
