"""A workload study while it is measured: its cells in the store, each prompt's refitted model,
the pace, the load, what each prompt timed, and its decision (:class:`StudyState`).

The policies that drive it (:mod:`llamaspec.studies.policy`) ask it what is measured and tell it
what to measure next; :func:`llamaspec.studies.study.run_study` makes one and reads its decision.

A prompt is measured in **blocks** (:meth:`StudyState.measure_block`): the target alone, then one
speculative run of each setup asked for, in an order shuffled block by block, then the target alone
again (B S1..Sk B). Each run's ratio is over the two baselines of its own block, measured around it
(:data:`llamaspec.measure.estimators.BLOCK`): no ratio's baseline was measured before other prompts
or minutes apart, whatever the schedule. A setup asked for later on a prompt measured earlier gets
a new block. Every measurement is stored as it is measured (kind 'sweep', one run a setup on a
prompt; the block baselines in a run of kind ``rows.BASELINES_KIND``; each prompt's runs a sweep of
their own, ``STUDY/PROMPT``), so a rerun of the same study finds them here again.

Its size: the block and what it stores, and what the study reads back from the stored runs (the
cells, the model's predictions, the pace, the load, the drift); each reads what the block wrote.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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
from llamaspec.decision import speedup_model, workload, workload_runs
from llamaspec.measure import spectypes
from llamaspec.measure.contract import Engine, Measurement, ResolvedCase
from llamaspec.measure.summary import FINISHED, Summary
from llamaspec.store.results import Store
from llamaspec.store.rows import BASELINES_KIND, Group
from llamaspec.studies.experiment import Case, Experiment
from llamaspec.studies.run import check_settings, resolve_case
from llamaspec.studies.setups import MODES_AXIS, Setup, cost_of

log = logging.getLogger(__name__)

# The bootstrap refits of each prompt's speedup model band (speedup_model.BOOTSTRAP_REFITS for a sweep's
# report): the study refits after every step, on every prompt whose points changed, and takes the
# band's ends over the prompts, which a coarser percentile of each moves little.
STUDY_REFITS = 100


# The point key of the run that keeps a prompt's block baselines.
BASELINES_POINT = "target alone"


def prompt_group(sid: str, prompt: str) -> str:
    """The group (a sweep of its own) of one prompt's setups in study ``sid``."""
    return f"{sid}/{prompt}"


# The load beside a study is said when other processes (and the hypervisor) took this share of the
# CPU or more while it measured; a change of this much between the study's halves is a change of
# load, across which it does not decide.
LOAD_SAID, LOAD_CHANGE = 0.05, 0.05
# The drift over the study is said as the machine's when the same cells (or the target alone's speed)
# moved this much between their first and last blocks.
DRIFT_SAID = 0.1


@dataclass(frozen=True)
class Drift:
    """How the figures moved over the study, on what was measured twice: the cells (a setup on a
    prompt) measured in more than one block, their last block's log ratio against their first's,
    and the baselines of the prompts measured in more than one block, their last block's speed
    against their first's. The same setup on the same prompt: what moves is the machine. An adaptive
    study measures its first prompt once more at its end (:meth:`StudyState.measure_anchor`)."""

    change: float | None  # the ratios' mean change, last block over first, minus one; None: not measured
    cells: int
    pace: float | None = None  # the target alone's speed, last block over first, minus one
    prompts: int = 0

    def text(self) -> str:
        if self.change is None:
            return "drift over the study: not measured (no setup was measured on one prompt in two blocks)"
        pace = (f"; the target alone's speed {percent_text(self.pace, 1, sign=True)} on {self.prompts} prompt"
                f"{'s' if self.prompts != 1 else ''}" if self.pace is not None else "")
        said = (f"drift over the study: {percent_text(self.change, 1, sign=True)} (the speedups of {self.cells} setup-prompt "
                f"cell{'s' if self.cells != 1 else ''} measured in two blocks or more, the last against the first{pace})")
        moved = max(abs(self.change), abs(self.pace or 0.0))
        if moved >= DRIFT_SAID:
            said += (f": the machine's pace moved by {percent_text(moved)} while it measured; each ratio is over the "
                     "baselines beside its run, but a machine whose pace moves is one whose load does too: a quieter "
                     "machine, or -t below the cores, measures what speculation gains alone")
        return said

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "cells": self.cells, "pace": self.pace, "prompts": self.prompts}


@dataclass(frozen=True)
class Load:
    """What else the machine did while the study measured: per block, in the order measured, the
    share of the CPU that other processes and the hypervisor took (``host.NoiseSample``).

    Speculation loses more to a load beside it than the target alone does, so the figure is the
    load's too: it is said, and a load that changed between the study's halves by
    :data:`LOAD_CHANGE` or more is a change of conditions the study does not decide across."""

    blocks: tuple[float, ...]

    @property
    def median(self) -> float | None:
        return statistics.median(self.blocks) if self.blocks else None

    @property
    def halves(self) -> tuple[float, float] | None:
        if len(self.blocks) < 4:
            return None
        mid = len(self.blocks) // 2
        return statistics.median(self.blocks[:mid]), statistics.median(self.blocks[mid:])

    @property
    def changed(self) -> bool:
        h = self.halves
        return h is not None and abs(h[1] - h[0]) >= LOAD_CHANGE

    def text(self) -> str | None:
        """The load in one line, where there is something to say (None on a quiet machine)."""
        if not self.blocks:
            return None
        h = self.halves
        if self.changed and h is not None:
            return (f"the load changed while it measured: other processes took {percent_text(h[0])} of the CPU in the "
                    f"study's first half and {percent_text(h[1])} in its second (per block {percent_text(min(self.blocks))}"
                    f"-{percent_text(max(self.blocks))}); speculation loses most of its gain to a load beside it, so no "
                    "decision is made across the change: rerun on a quieter machine, or with -t below the cores")
        m = self.median or 0.0
        if m < LOAD_SAID:
            return f"load: other processes took {percent_text(m)} of the CPU while it measured (median over {len(self.blocks)} blocks)"
        return (f"load: other processes took {percent_text(m)} of the CPU while it measured (median over {len(self.blocks)} "
                "blocks): the figures hold for a machine this busy; speculation loses most of its gain to a load beside it "
                "(a quieter machine, or -t below the cores, measures what it gains alone)")

    def to_dict(self) -> dict[str, Any]:
        return {"blocks": list(self.blocks), "median": self.median, "changed": self.changed}


class StudyState:
    """One study being measured: its cells in the store, its pace, its load, its decision.

    ``over_prompts``: the prompts are a sample of the workload (the default), not the whole of it;
    ``count_loops``: a prompt whose target output loops counts in the decision; ``where``: the
    suffix of its prompts' groups in ``store`` (a cluster study's points on the coordinator,
    ``@MACHINE``, decided there without an engine: ``study.stored_decision``); ``time_costs``:
    the speedup model's cost timings after a draft setup's first block (False: none)."""

    def __init__(self, exp: Experiment, setups: Sequence[Setup], engine: Engine | None, store: Store, sid: str,
                 on_event: Callable[[str, dict[str, Any]], None] | None,
                 clock: Callable[[], float] = time.monotonic, *, over_prompts: bool = True,
                 count_loops: bool = False, where: str = "", time_costs: bool = True) -> None:
        from llamaspec.base import host

        self.exp, self.setups, self.store, self.sid, self.where = exp, list(setups), store, sid, where
        self.engine: Engine = engine  # type: ignore[assignment]  # None: it only decides
        self.by_key = {s.key: s for s in self.setups}
        self.cases: list[Case] = list(exp.cases)
        self.by_name = {c.name: c for c in self.cases}
        self.prompts = {c.name: c.category or c.name for c in self.cases}
        self.hw = host.hardware() if engine is not None else {}
        self.on_event = on_event
        self.over_prompts, self.count_loops, self.time_costs = over_prompts, count_loops, time_costs
        self.resolved: dict[tuple[str, str], ResolvedCase] = {}
        self.blocks_here = 0  # blocks this invocation measured
        self.seconds = 0.0  # ... and the time they took, warm-up and cost timings included
        self.side_time = {"baseline": 0.0, "speculative": 0.0}  # the blocks' own runs by side, and how many of each
        self.side_runs = {"baseline": 0, "speculative": 0}
        self.warm = False
        self.noise: NoiseSample | None = None  # the machine during the last block measured (steal, other load)
        self.clock = clock
        self._fits: dict[tuple[str, Any], tuple[Any, list[workload.Prediction]]] = {}  # refitted only when points change
        self._runs: dict[str, list[dict[str, Any]]] = {}  # each prompt's stored runs, newest first (read once a block)
        self.touched: list[str] = [c.name for c in self.cases if self.baselines_rows(c)]

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

    def left_out(self, case: Case) -> str | None:
        """Why ``case``'s prompt is out of every decision, from what its runs timed and their outputs
        (the decision's own rule, :func:`llamaspec.decision.workload.prompt_facts`); None while it is
        timed or not measured."""
        facts = workload.prompt_facts(self.cells(), self.prompts, self.count_loops, self.over_prompts)
        return next(f for f in facts if f.prompt == case.name).left_out

    # --- measuring ---------------------------------------------------------------------------------

    def group(self, case: Case) -> str:
        return prompt_group(self.sid, case.name) + self.where

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

    def stored(self, case: Case) -> list[dict[str, Any]]:
        """Every stored run of ``case``'s prompt in this study (its setups' and its block baselines'), newest first."""
        if case.name not in self._runs:
            self._runs[case.name] = self.store.runs(group_id=self.group(case))
        return self._runs[case.name]

    def row(self, case: Case, setup: Setup | str) -> dict[str, Any] | None:
        """The newest finished run of ``setup`` on ``case``'s prompt (a point key: its block baselines')."""
        point = setup.key if isinstance(setup, Setup) else setup
        return next((r for r in self.stored(case) if r["point_key"] == point and r["status"] in FINISHED), None)

    def baselines_point(self, case: Case, setup: Setup) -> str:
        """The point key of the run that keeps the baselines of ``setup``'s blocks on ``case``'s prompt:
        one a prompt and target-side settings (a setup that changes the target's own settings, its
        threads say, is measured against the target alone at those settings)."""
        side = json.dumps(self.resolve(case, setup).settings.target_side(), sort_keys=True, default=str)
        return f"{BASELINES_POINT} {hashlib.sha256(side.encode()).hexdigest()[:8]}"

    def baselines_rows(self, case: Case) -> list[dict[str, Any]]:
        """The runs that keep ``case``'s block baselines (none before its first block)."""
        return [r for r in self.stored(case) if r["kind"] == BASELINES_KIND and r["status"] in FINISHED]

    def blocks_of(self, case: Case, setup: Setup) -> int:
        """How many blocks ``setup`` was measured in on ``case``'s prompt (its ratios)."""
        row = self.row(case, setup)
        return Summary.from_dict(row.get("summary")).pairs if row else 0

    def blocks_on(self, case: Case) -> int:
        """How many blocks were measured on ``case``'s prompt."""
        return len({m["block"] for r in self.baselines_rows(case) for m in self.store.measurements(r["id"]) if m.get("block")})

    def new_block(self, case: Case) -> str:
        """A name for the next block on ``case``'s prompt, unused by any block begun there before (an
        interrupted block's runs are never pooled with a later one's)."""
        prefix = f"{self.sid}/{case.name}/"
        return f"{prefix}{self.store.blocks_begun(prefix)}"

    def measure_block(self, case: Case, setups: Sequence[Setup]) -> None:
        """One block on ``case``'s prompt: the target alone, one speculative run of each of ``setups``
        (those not failed there) in an order shuffled by the block's key, the target alone again
        (setups that change the target's own settings: a block for each such setting). Each
        run is stored as it is measured; each setup's run is finished with its figures after the
        block (its ratios over the baselines of its own blocks); after a draft setup's first block
        the speedup model's costs are timed, once within the study. A baseline that fails ends the
        block and the study (every run measured is stored); a setup that fails is left out on this
        prompt."""
        sides: dict[str, list[Setup]] = {}
        failed = self.failed()
        for s in setups:
            if (case.name, s.key) not in failed:
                sides.setdefault(self.baselines_point(case, s), []).append(s)
        for point, todo in sides.items():
            self._block(case, todo, point)

    def _block(self, case: Case, todo: Sequence[Setup], baselines: str) -> None:
        from llamaspec.measure.pairs import block_order
        from llamaspec.studies.run import open_point

        block = self.new_block(case)
        start = self.clock()
        group = Group("sweep", self.group(case))
        base_row = self.row(case, baselines)
        base = open_point(self.resolve(case, todo[0]), self.engine, self.store, hardware=self.hw,
                          run_id=base_row["id"] if base_row else None, exp=self.exp, kind=BASELINES_KIND, group=group,
                          point_key=baselines, scope=self.sid, on_event=self.on_event)
        points = {}
        for s in todo:
            row = self.row(case, s)
            points[s.key] = open_point(self.resolve(case, s), self.engine, self.store, hardware=self.hw,
                                       run_id=row["id"] if row else None, exp=self.exp, kind="sweep", group=group,
                                       point_key=s.key, scope=self.sid, time_costs=self.time_costs and not s.draft_free,
                                       on_event=self.on_event)
        if case.name not in self.touched:
            self.touched.append(case.name)
        order = [todo[i] for i in block_order(len(todo), block)]
        measured: list[Measurement] = []
        failed: dict[str, str] = {}
        try:
            if not self.warm:
                base.warm_up()
                self.warm = True
            # each run's place in its block (the baselines 0 and k + 1) is its pair index: its ratio is
            # over the two baselines interpolated at that place (summary.summarize)
            first = base.step("baseline", 0, len(order) + 1, block)
            measured.append(first)
            if first.ok:
                for place, s in enumerate(order, start=1):
                    m = points[s.key].step("speculative", place, len(order), block)
                    measured.append(m)
                    if not m.ok:
                        failed[s.key] = m.error or "failed"
                measured.append(base.step("baseline", len(order) + 1, len(order) + 1, block))
                for s in order:  # the speedup model's cost timings, once within the study: after the block
                    if s.key not in failed and not s.draft_free:
                        bad = next((c for c in points[s.key].costs(0, len(order)) if not c.ok), None)
                        if bad is not None:
                            failed[s.key] = bad.error or f"{bad.mode} timing failed"
        except KeyboardInterrupt:
            for p in (base, *points.values()):
                p.interrupted()
            raise
        finally:
            self._runs.clear()
        base_failed = next((m.error or "the target alone failed" for m in measured if m.mode == "baseline" and not m.ok), None)
        base.finish(base_failed)
        for s in todo:
            why = failed.get(s.key) or (base_failed if not any(m.block == block for m in points[s.key].measured) else None)
            summary = points[s.key].finish(why)
            if summary.status == "failed":
                log.warning("%s failed on %s: %s (it is left out of the decision there; every run measured is stored)",
                            s.label, case.name, summary.error or why)
        self._runs.clear()
        if base_failed is not None:
            raise LlamaspecError(f"the target alone failed on {case.name}: {base_failed}",
                                 hint="every run measured is stored; `llamaspec results list` shows them, and the same "
                                      "command resumes the study")
        self.seconds += self.clock() - start
        self.blocks_here += 1
        self.noise = NoiseSample.combine([m.noise for m in measured]) or self.noise
        for m in measured:
            if m.ok and m.mode in self.side_time:
                self.side_time[m.mode] += m.wall_seconds or 0.0
                self.side_runs[m.mode] += 1

    def block_seconds(self, setups: int, stored: bool = False) -> float | None:
        """About how long a block of ``setups`` speculative runs takes: two baselines and the runs,
        at this invocation's pace of each (``stored``: as the study's stored runs took them, for a
        resumed study before it measures)."""
        time_, runs = dict(self.side_time), dict(self.side_runs)
        if stored or not all(runs.values()):
            time_, runs = {"baseline": 0.0, "speculative": 0.0}, {"baseline": 0, "speculative": 0}
            for m in self._block_measurements():
                if m.mode in time_ and m.ok:
                    time_[m.mode] += m.wall_seconds or 0.0
                    runs[m.mode] += 1
        if not all(runs.values()):
            return None
        return 2 * time_["baseline"] / runs["baseline"] + setups * time_["speculative"] / runs["speculative"]

    def _block_measurements(self) -> list[Measurement]:
        """Every stored baseline and speculative run of the study's blocks, in the order measured."""
        from llamaspec.store.rows import measurements_of

        rows = []
        for name in self.touched:
            case = self.by_name[name]
            for r in [*self.baselines_rows(case), *(self.row(case, s) for s in self.setups)]:
                if r is not None:
                    rows += [m for m in self.store.measurements(r["id"]) if m.get("block")]
        return measurements_of(sorted(rows, key=lambda m: m["id"]))

    # --- what is measured, and the decision ---------------------------------------------------------

    def measured_cells(self) -> list[tuple[Case, Setup, dict[str, Any]]]:
        failed = self.failed()
        return [(c, s, r) for c in (self.by_name[n] for n in self.touched) for s in self.setups
                if (c.name, s.key) not in failed and (r := self.row(c, s)) is not None]

    def cells(self) -> list[workload.Cell]:
        """The study's cells: its stored runs through the one runs-to-cells function
        (:func:`llamaspec.decision.workload_runs.workload_of_runs`: of a setup's runs on a prompt the
        newest finished or failed one counts), each named by the setup it was measured for, in the
        order the prompts were measured and the setups given, those that failed last."""
        def setup_of(run: Mapping[str, Any]) -> workload_runs.RunSetup:
            s = self.by_key[run["point_key"]]
            return workload_runs.RunSetup(s.key, s.label, cost_of(s, workload_runs.draft_bytes(run)))

        runs = [r for n in self.touched for r in self.stored(self.by_name[n]) if r["point_key"] in self.by_key]
        out, _prompts = workload_runs.workload_of_runs(runs, setup_of)
        prompts, setups = {n: i for i, n in enumerate(self.touched)}, list(self.by_key)
        return sorted(out, key=lambda c: (c.status == "failed", prompts.get(c.prompt, 0), setups.index(str(c.setup))))

    def failed(self) -> dict[tuple[str, str], str]:
        """(prompt, setup key) -> why, for each setup whose newest run on a prompt failed: it is left
        out there, and a resumed study does not measure it there again."""
        return {(c.prompt, str(c.setup)): c.why or "failed" for c in self.cells() if c.status == "failed"}

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
        template = next(s for s in self.setups if s.group == group and not s.draft_free)
        out = []
        for g in speedup_model.fit_groups(runs, [], grid=lengths, refits=STUDY_REFITS):
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
        """The ratios measured over the whole study (a speculative run in a block each)."""
        return sum(len(c.ratios) for c in self.cells())

    def counts_positions(self) -> bool:
        """Whether every draft setup measured so far counted acceptance by draft position."""
        found = [Summary.from_dict(r.get("summary")) for _c, s, r in self.measured_cells() if not s.draft_free]
        found = [s for s in found if s.n_drafted]
        return bool(found) and all(s.drafted_by_position for s in found)

    def baseline_runs(self) -> tuple[int, ...]:
        """The runs that keep the study's block baselines, every prompt's."""
        return tuple(r["id"] for name in self.touched for r in self.baselines_rows(self.by_name[name]))

    def runs(self) -> dict[tuple[str, str], int]:
        return {(c.name, s.key): r["id"] for c, s, r in self.measured_cells()}

    def measure_anchor(self, setups: Sequence[Setup]) -> None:
        """One more block on the study's first prompt, with those of ``setups`` measured there, at its
        end: the drift over the study is then measured on at least one prompt."""
        first = next((self.by_name[n] for n in self.touched), None)
        if first is None or not self.blocks_here:
            return
        again = [s for s in setups if self.row(first, s) is not None]
        if again:
            log.info("the drift over the study: %s once more, as at its start", first.name)
            self.measure_block(first, again)

    def load(self) -> Load:
        """:class:`Load` over the study's blocks, in the order measured."""
        by_block: dict[str, list[NoiseSample | None]] = {}
        for m in self._block_measurements():
            if m.block is not None:
                by_block.setdefault(m.block, []).append(m.noise)
        shares = []
        for samples in by_block.values():
            n = NoiseSample.combine(samples)
            if n is not None and n.other_load is not None:
                shares.append(n.other_load + (n.steal or 0.0))
        return Load(tuple(shares))

    def drift(self) -> Drift:
        """:class:`Drift` over the cells and prompts measured in more than one block (each prompt's
        blocks of one target-side setting: their baselines are the same target's)."""
        import math

        from llamaspec.store.rows import measurements_of

        changes, paces = [], []
        for case in (self.by_name[n] for n in self.touched):
            cells: dict[str, dict[str, Measurement]] = {}  # block -> the run id (or "baseline") -> its first measurement
            bases: dict[str, list[Measurement]] = {}
            side: dict[str, int] = {}  # block -> the baselines run it belongs to
            for r in self.baselines_rows(case):
                for m in measurements_of(self.store.measurements(r["id"])):
                    if m.block is not None and m.ok and m.decode_tps:
                        bases.setdefault(m.block, []).append(m)
                        side[m.block] = r["id"]
            for cell in (row for s in self.setups if (row := self.row(case, s)) is not None):
                for m in measurements_of(self.store.measurements(cell["id"])):
                    if m.block is not None and m.ok and m.decode_tps:
                        cells.setdefault(m.block, {}).setdefault(str(cell["id"]), m)
            for run in set(side.values()):
                order = sorted((b for b in bases if side[b] == run), key=lambda b: int(b.rsplit("/", 1)[-1]))
                if len(order) < 2:
                    continue
                b0, b1 = (statistics.fmean(math.log(m.decode_tps or 1.0) for m in bases[b]) for b in (order[0], order[-1]))
                paces.append(b1 - b0)
                first, last = cells.get(order[0], {}), cells.get(order[-1], {})
                changes += [math.log((last[c].decode_tps or 1.0) / (first[c].decode_tps or 1.0)) - (b1 - b0)
                            for c in set(first) & set(last)]
        if not changes:
            return Drift(None, 0)
        return Drift(math.exp(statistics.fmean(changes)) - 1.0, len(changes),
                     math.exp(statistics.fmean(paces)) - 1.0 if paces else None, len(paces))


__all__ = ["BASELINES_POINT", "LOAD_CHANGE", "STUDY_REFITS", "Drift", "Load", "StudyState", "prompt_group"]
