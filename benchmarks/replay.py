"""Replaying the workload study on recorded real measurements.

A recording holds, for each prompt of a workload and each setup measured there (a draft length, a
draft-free mode), every pair a fixed-grid study measured (its baseline and speculative
measurements as stored: decode speed, counters, acceptance by position, wall time), and the cost
timings of each prompt. :class:`ReplayEngine` is an engine that measures by drawing those pairs:
asked for a pair of a setup on a prompt, it draws one of that cell's recorded pairs at random
(with replacement) and hands out its two sides, so :func:`llamaspec.studies.study.run_study` runs
unchanged, policy, store and decision included, as it would have on that machine that day.

Two layouts are read: a workload study exported by ``sweep-workload/export.py`` (``study.json``:
prompts, cells, costs), and the one-prompt sweeps of ``sweep-positions``/``sweep-accept``
(``sweep.json``: one prompt, draft lengths only).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.decision import decide
from llamaspec.measure import estimators
from llamaspec.measure.contract import (
    PAIR_MODES,
    Capabilities,
    Command,
    Deployment,
    Measurement,
    ModelPath,
    ResolvedCase,
)
from llamaspec.measure.settings import FIELDS, Settings
from llamaspec.store.results import Store
from llamaspec.store.rows import measurement_of
from llamaspec.studies.experiment import Case, Experiment, ModelRef


def setup_label(values: dict[str, Any]) -> str:
    """How a cell's setup is named: its draft-free mode, else ``draft K``."""
    mode = values.get("spec_type") or "draft"
    return str(mode) if mode != "draft" else f"draft {values['draft_max']}"


@dataclass(frozen=True)
class RecordedPair:
    baseline: dict[str, Any]
    speculative: dict[str, Any]

    @property
    def ratio(self) -> float | None:
        b, s = self.baseline.get("decode_tps"), self.speculative.get("decode_tps")
        return s / b if s and b else None

    @property
    def seconds(self) -> float:
        return float(self.baseline.get("wall_seconds") or 0.0) + float(self.speculative.get("wall_seconds") or 0.0)


@dataclass
class Recording:
    """A workload's recorded cells: prompt -> setup label -> its pairs."""

    name: str
    prompts: dict[str, str]  # prompt -> category, in the workload's order
    setups: dict[str, dict[str, Any]]  # label -> the settings that make it (spec_type, draft_max)
    cells: dict[str, dict[str, list[RecordedPair]]]
    costs: dict[str, dict[str, dict[str, Any]]]  # prompt -> mode (draft, batch) -> a recorded timing
    settings: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    _facts: dict[str, str | None] = field(default_factory=dict, init=False, repr=False, compare=False)

    def facts(self) -> dict[str, str | None]:
        """Each prompt's reason to be left out of a decision (too short to time, its output loops), or
        None, from its first recorded baseline (the target alone's output is the same in every cell)."""
        if not self._facts:
            self._facts.update(self._find_facts())
        return dict(self._facts)

    def _find_facts(self) -> dict[str, str | None]:
        from llamaspec.decision import workload
        from llamaspec.measure import timed

        out: dict[str, str | None] = {}
        asked = self.settings.get("n_predict")
        differs = {}  # prompt -> each differing cell's first difference, as its stored summary says
        for c in self.meta.get("cells") or []:
            lossless = ((c.get("summary") or {}).get("lossless") or {})
            if (c.get("summary") or {}).get("status") == "differs":
                differs.setdefault(c["prompt"], []).append(lossless.get("first_difference"))
        for q in self.prompts:
            base = next((p.baseline for pairs in self.cells[q].values() for p in pairs), None)
            why = None
            if base is not None and base.get("n_predict"):
                if timed.too_short(int(base["n_predict"]) - 1, asked):
                    why = "too short to time"
                elif timed.loop_of(base.get("text")) is not None:
                    why = "loops"
            if why is None and workload.diverged_everywhere(differs.get(q, [])):
                why = "diverges from the target alone in every setup"
            out[q] = why
        return out

    def timed(self) -> list[str]:
        """The prompts a study's answer rests on: those no study leaves out (:meth:`facts`)."""
        facts = self.facts()
        return [q for q in self.prompts if facts.get(q) is None]

    def weights(self) -> dict[str, float]:
        """Each category's weight in a study of the whole recording: its share of the timed prompts."""
        counts: dict[str, int] = {}
        for q in self.timed():
            counts[self.prompts[q]] = counts.get(self.prompts[q], 0) + 1
        return {c: n / sum(counts.values()) for c, n in counts.items()}

    def over_prompts(self, label: str, prompts: Sequence[str], weights: dict[str, float] | None = None) -> float | None:
        """The setup's speedup over ``prompts`` by the over-prompts estimator's point estimate (per
        category the mean log median of every recorded pair, the categories weighed by ``weights``,
        None: by their prompts here), the prompts too short to time or looping left out, as a study
        leaves them out."""
        facts = self.facts()
        by_cat: dict[str, list[float]] = {}
        for q in prompts:
            if facts.get(q) is not None:
                continue
            ratios = [r for p in self.cells[q].get(label, []) if (r := p.ratio)]
            if not ratios:
                return None
            by_cat.setdefault(self.prompts[q], []).append(math.log(statistics.median(ratios)))
        if not by_cat:
            return None
        w = {c: (weights or {}).get(c, 0.0) if weights else float(len(v)) for c, v in by_cat.items()}
        total = sum(w.values())
        return math.exp(sum(w[c] / total * statistics.fmean(v) for c, v in by_cat.items())) if total > 0 else None

    def truth(self, label: str) -> float | None:
        """The setup's workload speedup over every recorded pair (the estimator's point estimate)."""
        ratios = [[r for p in self.cells[q].get(label, []) if (r := p.ratio)] for q in self.prompts]
        if any(not r for r in ratios):
            return None
        return math.exp(statistics.fmean(math.log(statistics.median(r)) for r in ratios))

    def truth_spread(self, label: str) -> Any:
        ratios = [[r for p in self.cells[q].get(label, []) if (r := p.ratio)] for q in self.prompts]
        return estimators.workload(ratios, estimators.pooled_log_sd(ratios)) if all(ratios) else None

    def pair_seconds(self, label: str) -> float:
        """A pair's mean recorded wall time at this setup, over the prompts."""
        got = [p.seconds for q in self.prompts for p in self.cells[q].get(label, [])]
        return statistics.fmean(got) if got else 0.0

    def fixed_grid_seconds(self, repeats: int = 3) -> float:
        """What measuring every setup on every prompt with ``repeats`` pairs costs, by the recorded wall times."""
        return sum(repeats * statistics.fmean([p.seconds for p in pairs]) for q in self.prompts
                   for pairs in self.cells[q].values() if pairs)


def _pairs(measurements: Sequence[dict[str, Any]]) -> list[RecordedPair]:
    """A cell's recorded pairs: by pair index; in a recording measured in blocks (B S1..Sk B), each
    speculative run with its block's two baselines interpolated at its place, as the study divides
    it (``summary.summarize``): its baseline side is that interpolation, the first baseline's other
    fields kept, and says so (``interpolated``)."""
    if any(m.get("block") for m in measurements):
        import math

        bases: dict[str, list[dict[str, Any]]] = {}
        for m in measurements:
            if m.get("mode") == "baseline" and m.get("ok") and m.get("block") and m.get("decode_tps"):
                bases.setdefault(m["block"], []).append(m)
        out = []
        for m in measurements:
            around = sorted(bases.get(m.get("block") or "", []), key=lambda b: int(b.get("repeat") or 0))
            if m.get("mode") != "speculative" or not m.get("ok") or not around:
                continue
            b0, b1 = around[0], around[-1]
            p0, p1 = int(b0.get("repeat") or 0), int(b1.get("repeat") or 0)
            t = (int(m.get("repeat") or 0) - p0) / (p1 - p0) if p1 > p0 else 0.5
            tps = math.exp((1 - t) * math.log(b0["decode_tps"]) + t * math.log(b1["decode_tps"]))
            out.append(RecordedPair({**b0, "decode_tps": tps, "interpolated": True}, m))
        return out
    sides: dict[int, dict[str, dict[str, Any]]] = {}
    for m in measurements:
        if m.get("mode") in PAIR_MODES and m.get("ok") and m.get("repeat") is not None:
            sides.setdefault(int(m["repeat"]), {})[m["mode"]] = m
    return [RecordedPair(s["baseline"], s["speculative"]) for _i, s in sorted(sides.items()) if len(s) == 2]


def load(path: Path) -> Recording:
    """A recording: a workload study's ``study.json`` (or ``study.json.gz``), or a one-prompt ``sweep.json``."""
    if path.suffix == ".gz":
        import gzip

        data = json.loads(gzip.decompress(path.read_bytes()).decode())
    else:
        data = json.loads(path.read_text())
    if "cells" in data:
        prompts = {p["id"]: p["category"] for p in data["prompts"]}
        cells: dict[str, dict[str, list[RecordedPair]]] = {q: {} for q in prompts}
        setups: dict[str, dict[str, Any]] = {}
        costs: dict[str, dict[str, dict[str, Any]]] = {q: {} for q in prompts}
        for c in data["cells"]:
            label = setup_label(c["values"])
            setups[label] = c["values"]
            cells[c["prompt"]][label] = _pairs(c["measurements"])
            for m in c["measurements"]:
                if m.get("mode") in ("draft", "batch") and m.get("ok"):
                    costs[c["prompt"]].setdefault(m["mode"], m)
        # a study times the costs once (its first timed prompt's cell holds them): every prompt shares them
        shared = next((c for c in costs.values() if c), {})
        costs = {q: c or shared for q, c in costs.items()}
        return Recording(path.parent.name, prompts, setups, cells, costs, data["settings"], data)
    prompt = data["case"]
    cells = {prompt: {}}
    setups = {}
    costs = {prompt: {}}
    for point in data["points"]:
        values = {"draft_max": point["draft_max"]}
        label = setup_label(values)
        setups[label] = values
        cells[prompt][label] = _pairs(point["measurements"])
        for m in point["measurements"]:
            if m.get("mode") in ("draft", "batch") and m.get("ok"):
                costs[prompt].setdefault(m["mode"], m)
    return Recording(path.parent.name, {prompt: prompt}, setups, cells, costs, data["settings"], data)


class ReplayEngine:
    """An engine whose measurements are recorded pairs, drawn at random per (prompt, setup)."""

    name = "llama.cpp"

    def __init__(self, rec: Recording, seed: int) -> None:
        self.rec = rec
        self.rng = random.Random(seed)
        self.seed = seed
        modes = tuple(dict.fromkeys(v.get("spec_type") for v in rec.setups.values() if v.get("spec_type") not in (None, "draft")))
        self.capabilities = Capabilities(modes=frozenset({"baseline", "speculative", "draft", "batch"}),
                                         settings=frozenset(FIELDS), spec_types=("draft", *modes), draft_policy="capped")
        self._owed: dict[str, dict[str, Any]] = {}  # prompt -> the baseline of the speculative run just drawn
        self._kept: dict[str, tuple[str, RecordedPair]] = {}  # prompt -> (setup, the pair whose baseline was served)
        self.seconds = 0.0  # the recorded wall time of every run drawn
        self.pairs = 0  # speculative runs drawn

    def identity(self) -> str:
        return f"replay-{self.rec.name}"

    def provenance(self) -> dict[str, Any]:
        return {"version": "replay", "build_key": self.identity()}

    def resolve_model(self, model: str, variant: str) -> ModelPath:
        return ModelPath(f"{model}:{variant}", f"/replay/{model}-{variant}.gguf", variant)

    def close(self) -> None:
        return None

    def _label(self, case: ResolvedCase) -> str:
        return setup_label({"spec_type": case.settings.spec_type, "draft_max": case.settings.draft_max})

    def check(self, case: ResolvedCase) -> None:
        label = self._label(case)
        if label not in self.rec.cells.get(case.case, {}):
            raise LlamaspecError(f"{label} was not recorded on {case.case}", hint="replay the recorded setups only")

    def deployment(self, case: ResolvedCase, speculative: bool = True) -> Deployment:
        return Deployment(self.name, speculative, "replay", (Command.shell("replay", ["replay"]),))

    def measure(self, case: ResolvedCase, mode: str, log_path: Any) -> Measurement:
        """One run as the study asks for it, whatever its order (pairs, a shared baseline, or a block
        B S1 .. Sk B), each side drawn from the recorded pairs of its prompt so that runs asked for
        next to each other are runs recorded next to each other:

        - a speculative run: the speculative side of a recorded pair of its setup on the prompt: the
          pair whose baseline was just served (a baseline asked first), else one drawn at random,
          whose baseline is then owed to the next baseline asked for on the prompt;
        - a baseline: the owed one, else the baseline of a pair drawn at random from the setup the
          study names with it (from any setup on the prompt where it names none recorded), that
          pair's speculative side kept for the next run of that setup on the prompt.

        Pairs asked for in either order (ABBA) are recorded pairs; a block's last baseline is its
        last run's recorded neighbour, its first one a baseline of the prompt from the recording."""
        if mode in ("draft", "batch"):
            return measurement_of(self.rec.costs[case.case][mode])
        q, cells = case.case, self.rec.cells[case.case]
        if Path(str(log_path)).name.startswith("warmup"):
            return measurement_of(next(p.baseline for pairs in cells.values() for p in pairs))
        label = self._label(case)
        if mode == "baseline":
            row = self._owed.pop(q, None)
            if row is None:
                cell = label if label in cells else self.rng.choice(sorted(k for k, v in cells.items() if v))
                pair = cells[cell][self.rng.randrange(len(cells[cell]))]
                self._kept[q] = (cell, pair)
                row = pair.baseline
        else:
            kept = self._kept.get(q)
            if kept is not None and kept[0] == label:
                del self._kept[q]
                pair = kept[1]
            else:
                pair = cells[label][self.rng.randrange(len(cells[label]))]
                self._owed[q] = pair.baseline
            row = pair.speculative
            self.pairs += 1
        self.seconds += float(row.get("wall_seconds") or 0.0)
        return dataclasses.replace(measurement_of(row), pair=None)


def experiment_of(rec: Recording, repeats: int = 3) -> Experiment:
    """The recording's workload as an experiment: one case per prompt, the recorded settings."""
    settings = Settings.from_dict({k: v for k, v in rec.settings.items() if k not in ("draft_max", "spec_type")})
    target, draft = ModelRef("replay", "target"), ModelRef("replay", "draft")
    cases = tuple(Case(q, target, draft, f"recorded prompt {q}", None, settings, category=cat)
                  for q, cat in rec.prompts.items())
    return Experiment(f"replay-{rec.name}", "a recorded workload", "llama.cpp", repeats, cases, settings=settings)


def replay(rec: Recording, seed: int, budget: Any = None, *, fixed_grid: bool = False, repeats: int = 3,
           lengths: Sequence[int] | None = None, modes: Sequence[str] | None = None) -> tuple[Any, ReplayEngine]:
    """One study on pairs drawn from the recording: (its StudyResult, the engine with what it drew).
    A time budget counts the recorded time of the pairs drawn, as the study would have spent it."""
    from llamaspec.studies import study

    engine = ReplayEngine(rec, seed)
    recorded = sorted(int(v["draft_max"]) for v in rec.setups.values() if (v.get("spec_type") or "draft") == "draft")
    axes = {"draft_max": tuple(lengths or recorded)}
    found = modes if modes is not None else tuple(m for m in engine.capabilities.spec_types if m != "draft")
    setups = study.setups_for(axes, found)
    from unittest import mock

    from llamaspec.base import host

    # the recorded pairs' time is not this process's: the machine's load is not measured against it
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(host.NoiseMeter, "stop", lambda self: None):
        store = Store.open(Path(tmp) / "replay.sqlite")
        try:
            result = study.run_study(experiment_of(rec, repeats), setups, engine, store, budget, fixed_grid=fixed_grid,
                                     clock=lambda: engine.seconds)
        finally:
            store.close()
    return result, engine


# --- the assessment of a policy on a recording ----------------------------------------------------

OFF = 0.05  # a decision is "off" when its setup is truly more than 5 % below the best


@dataclass
class Outcome:
    """What one replay decided, judged against the recording's truth."""

    verdict: str
    chosen: str | None
    off: bool  # more than OFF below the best, or no answer where the recording shows a gain past it
    loss: bool  # recommends a setup whose recorded speedup is below 1.0
    seconds: float  # the recorded time of the pairs it drew (cost timings left out: the same for every policy)
    pairs: int
    covered: int  # model bands (one per predicted setup) that cover the recorded truth
    bands: int
    pooled_covered: int  # combined estimates (measured and the model, precision weighted) whose interval covers it
    pooled: int


def judge(rec: Recording, result: Any, engine: ReplayEngine) -> Outcome:
    """One replay against the recording's truth (its every pair, by the workload estimator)."""
    d = result.decision
    # the truth as the study's answer means it: over the prompts that can be timed, by their categories
    truths = {label: t for label in rec.setups if (t := rec.over_prompts(label, list(rec.prompts))) is not None}
    best_label = max(truths, key=lambda k: truths[k])
    best = truths[best_label]
    shown = rec.truth_spread(best_label)
    gain = best > 1 + OFF and shown is not None and shown.low > 1.0  # the whole recording shows a gain worth having
    chosen = d.chosen.label if d.verdict == "recommend" and d.chosen is not None else None
    off = gain if chosen is None else truths.get(chosen, 0.0) < (1 - OFF) * best
    loss = chosen is not None and truths.get(chosen, 0.0) < 1.0
    covered = bands = 0
    for view in d.decision.models:
        for band in view.bands:
            truth = truths.get(band.label)
            if truth is None:
                continue
            bands += 1
            covered += band.low <= truth <= band.high
    pooled_covered = pooled = 0
    for m in d.decision.estimates:  # the pooled estimate (whether or not the rule used it): its 95 % interval
        e = decide.estimate(decide.Candidate(m.key, m.label, m.measured, m.cost), d.decision.models, pooled=True)
        truth = truths.get(e.label)
        if truth is None or e.upper is None or e.band is None:
            continue
        pooled += 1
        pooled_covered += 2 * e.estimate - e.upper <= truth <= e.upper
    return Outcome(d.verdict, chosen, off, loss, engine.seconds, engine.pairs, covered, bands, pooled_covered, pooled)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95 % interval of a share k/n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def restrict(rec: Recording, prompts: Sequence[str]) -> Recording:
    """The recording as a workload of some of its prompts."""
    keep = {q: rec.prompts[q] for q in prompts}
    return dataclasses.replace(rec, name=f"{rec.name}:{'+'.join(prompts)}", prompts=keep,
                               cells={q: rec.cells[q] for q in keep}, costs={q: rec.costs[q] for q in keep})


def shifted(rec: Recording, to: float = 0.97) -> Recording:
    """The recording with every speculative run's decode speed divided by one factor, so that the
    best setup's whole-recording figure reads ``to`` (below 1.0: every setup a loss, as on a
    machine where no setup pays): what a rule recommends there is a loss, whatever it picks."""
    figures = [f for label in rec.setups if (f := rec.over_prompts(label, list(rec.prompts))) is not None]
    factor = max(figures) / to

    def slower(row: dict[str, Any]) -> dict[str, Any]:
        return {**row, "decode_tps": row["decode_tps"] / factor} if row.get("decode_tps") else row

    cells = {q: {label: [RecordedPair(p.baseline, slower(p.speculative)) for p in pairs] for label, pairs in per.items()}
             for q, per in rec.cells.items()}
    return dataclasses.replace(rec, name=f"{rec.name} shifted to {to:.2f}x", cells=cells)


def cells_of(rec: Recording, prompts: Sequence[str]) -> list[Any]:
    """Every recorded setup on each of ``prompts`` as a decision's cells (its recorded pairs' ratios;
    a prompt drawn twice is a second prompt, ``name#2``): a study that timed these prompts and
    measured every setup on each."""
    from llamaspec.decision import workload, workload_runs

    out = []
    seen: dict[str, int] = {}
    for q in prompts:
        seen[q] = seen.get(q, 0) + 1
        name = q if seen[q] == 1 else f"{q}#{seen[q]}"
        for label, pairs in rec.cells[q].items():
            ratios = tuple(r for p in pairs if (r := p.ratio))
            if ratios:
                values = rec.setups[label]
                cost = workload_runs.cost((values.get("spec_type") or "draft") != "draft", values.get("draft_max"))
                decoded = pairs[0].baseline.get("n_predict")
                out.append(workload.Cell(name, label, label, ratios, cost, timed=int(decoded) - 1 if decoded else None))
    return out


def decide_direct(rec: Recording, prompts: Sequence[str]) -> Any:
    """The decision over ``prompts`` of the recording applied directly, as a study would reach it had
    it timed these prompts with every setup on each (no policy, no engine): the same
    :func:`llamaspec.decision.workload.decide_workload`, the categories weighed by the whole
    recording's timed prompts."""
    from llamaspec.decision import workload

    cells = cells_of(rec, prompts)
    names = list(dict.fromkeys(c.prompt for c in cells))
    workload_prompts = {q: rec.prompts[q] for q in rec.timed()}
    workload_prompts.update({n: rec.prompts[n.split("#")[0]] for n in names})
    return workload.decide_workload(cells, workload_prompts)
