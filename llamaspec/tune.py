"""``llamaspec tune``: find a configuration that beats the target alone, measuring as little as
the speedup model allows.

1. Draft length, with the experiment's draft: measure a coarse set (1, 2, 4, 8), fit the model,
   then measure its predicted best length and the neighbours.
2. Other draft variants of the same model: time each draft alone first (one cheap run). With
   that cost, even a draft that is always accepted (alpha = 1) has a best possible speedup; a
   variant whose bound is below the best already measured cannot win and is skipped.
3. The build's draft-free n-gram modes (no draft cost to bound them): measured once each at the
   best draft length.
4. Settling: more pairs where the decision is unsure (:func:`llamaspec.decide.next_step`: the
   chosen configuration until its interval is narrow, the rivals that could still beat it), until
   the decision is settled or the budget (by default twice the pairs of steps 1-3 at the
   experiment's repeats) is spent. The result says which ended it.

Every point is stored like a sweep point (resumable: a rerun skips what is stored), and the
result names the best configuration, its measured speedup, and what the search cost against a
full grid of the same axes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamaspec import analysis, decide, spectypes
from llamaspec.contract import Engine
from llamaspec.errors import LlamaspecError
from llamaspec.experiment import Case, Experiment, ModelRef
from llamaspec.results import Group, Store
from llamaspec.run import resolve_case, run_case
from llamaspec.settings import Settings
from llamaspec.summary import Summary
from llamaspec.sweep import Budget, pairs_per_point

log = logging.getLogger(__name__)

COARSE = (1, 2, 4, 8)
MAX_DRAFT = 16
NGRAM_MODES = ("ngram-simple", "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache")


@dataclass(frozen=True)
class Config:
    draft_variant: str | None  # None: draft-free
    spec_type: str
    draft_max: int

    @property
    def label(self) -> str:
        who = f"draft {self.draft_variant}" if self.draft_variant else self.spec_type
        return f"{who}, draft_max {self.draft_max}"


@dataclass
class TuneResult:
    experiment: str
    case: str
    tune_id: str
    measured: list[tuple[Config, dict[str, Any]]] = field(default_factory=list)  # config, stored run row
    skipped: list[tuple[str, str]] = field(default_factory=list)  # what, why
    seconds: float = 0.0
    full_grid_points: int = 0
    budget_pairs: int | None = None  # the most pairs the tune may measure in all (None: time only)
    stop: str = ""  # why settling ended: "settled", "budget" or "nothing to measure"
    stop_progress: str = ""  # the last thing the settling step said

    @staticmethod
    def summary(row: dict[str, Any]) -> Summary:
        return Summary.from_dict(row.get("summary"))

    def speedup(self, row: dict[str, Any]) -> float:
        s = self.summary(row).speedup
        return s.median if s else 0.0

    @property
    def pairs(self) -> int:
        """Pairs measured over every configuration (an interrupted earlier tune's included)."""
        return sum(self.summary(r).pairs for _c, r in self.measured)

    @property
    def candidates(self) -> list[tuple[Config, dict[str, Any]]]:
        """Finished points with an unchanged output: the only ones that may be recommended."""
        return [(c, r) for c, r in self.measured if r.get("status") == "ok" and self.summary(r).speedup]

    @property
    def best(self) -> tuple[Config, dict[str, Any]] | None:
        ok = self.candidates
        return max(ok, key=lambda cr: self.speedup(cr[1])) if ok else None

    @property
    def decision(self) -> decide.Decision:
        """The one decision rule (llamaspec.decide) over the configurations measured: cheaper means
        a shorter draft, then a draft-free mode before a draft model, then a smaller draft file."""
        return decide.decide([decide.Candidate(config, config.label, s, _cost(config, row))
                              for config, row in self.candidates if (s := self.summary(row).speedup) is not None])

    @property
    def recommended(self) -> tuple[Config, dict[str, Any]] | None:
        """The configuration the decision recommends (None: no draft, undecided or nothing)."""
        d = self.decision
        if d.verdict != "recommend" or d.chosen is None:
            return None
        return next((c, r) for c, r in self.candidates if c == d.chosen.key)

    def render(self, target: float = analysis.TARGET_SPEEDUP) -> str:
        lines = [f"tune {self.tune_id}: {self.experiment} / {self.case}",
                 f"  {'configuration':<34} {'speedup [95% CI]':>20} {'accept':>8} {'spec t/s':>9} {'base t/s':>9}  run"]
        decision = self.decision
        marks = {e.key: "contender" for e in decision.contenders}
        if decision.verdict == "recommend" and decision.chosen is not None:
            marks[decision.chosen.key] = "recommended"
        for config, row in sorted(self.measured, key=lambda cr: (cr[0].draft_variant or "~" + cr[0].spec_type, cr[0].draft_max)):
            s = self.summary(row)
            status = row.get("status") if row.get("status") != "ok" else marks.get(config, "")
            lines.append(f"  {config.label:<34} {s.speedup.text(suffix='x') if s.speedup else '-':>20} "
                         f"{f'{s.accept.median:.1f}%' if s.accept else '-':>8} "
                         f"{s.decode_tps.median if s.decode_tps else 0:>9.2f} "
                         f"{s.baseline_decode_tps.median if s.baseline_decode_tps else 0:>9.2f}  {row.get('id')} {status}")
        for what, why in self.skipped:
            lines.append(f"  skipped {what}: {why}")
        n = len(self.measured)
        lines.append(f"  cost: {n} points measured in {self.seconds:.0f} s, against {self.full_grid_points} for the full grid "
                     f"({n / max(self.full_grid_points, 1):.0%})")
        if self.stop:
            budget = f" of a budget of {self.budget_pairs}" if self.budget_pairs is not None else ""
            lines.append(f"  settling stopped: {decide.STOP_WORDS.get(self.stop, self.stop)}, after {self.pairs} pairs in all{budget}")
        rec, best = self.recommended, self.best
        found = decision.lines()
        if rec:
            verdict = "beats" if self.speedup(rec[1]) >= target else "does not reach"
            found[0] += f" (run {rec[1]['id']}); {verdict} the {target:.1f}x aim"
        elif best and decision.verdict != "nothing":
            found[0] += f" (best: {best[0].label}, run {best[1]['id']})"
        lines += found
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        best, rec = self.best, self.recommended
        return {"tune_id": self.tune_id, "experiment": self.experiment, "case": self.case, "seconds": self.seconds,
                "full_grid_points": self.full_grid_points, "measured_points": len(self.measured),
                "best": {**dataclasses.asdict(best[0]), "speedup": self.speedup(best[1]), "run_id": best[1]["id"]} if best else None,
                "recommended": {**dataclasses.asdict(rec[0]), "speedup": self.speedup(rec[1]), "run_id": rec[1]["id"]} if rec else None,
                "decision": self.decision.to_dict(),
                "settling": {"stop": self.stop, "pairs": self.pairs, "budget_pairs": self.budget_pairs,
                             "last_progress": self.stop_progress},
                "points": [{**dataclasses.asdict(c), "run_id": r.get("id"), "status": r.get("status"),
                            "summary": self.summary(r).to_dict()} for c, r in self.measured],
                "skipped": [{"what": w, "why": y} for w, y in self.skipped]}


def _cost(config: Config, row: dict[str, Any]) -> tuple[float, ...]:
    draft = ((row.get("provenance") or {}).get("models") or {}).get("draft") or {}
    size = (draft.get("metadata") or {}).get("file_size")
    return (config.draft_max, 0 if config.draft_variant is None else 1, size if isinstance(size, (int, float)) else 0)


def _case_for(case: Case, config: Config) -> Case:
    settings = Settings(draft_max=config.draft_max, spec_type=config.spec_type).over(case.settings)
    if config.draft_variant is None:
        return dataclasses.replace(case, draft=None, settings=settings)
    assert case.draft is not None
    return dataclasses.replace(case, draft=ModelRef(case.draft.model, config.draft_variant), settings=settings)


def tune(exp: Experiment, backend: Engine, store: Store, variants: tuple[str, ...] | None = None,
         modes: tuple[str, ...] | None = None, on_point: Callable[[Config, dict[str, Any]], None] | None = None,
         budget: Budget | None = None) -> list[TuneResult]:
    """Tune every case that has a draft. ``budget``: what the settling step may spend (pairs, or
    wall time counted from the start of each case's tune); None: as many pairs again as the search."""
    from llamaspec import host

    hw = host.hardware()
    return [_tune_case(exp, case, backend, store, hw, variants, modes, on_point, budget) for case in exp.cases
            if case.draft is not None]


def tune_key(exp: Experiment, case: Case, backend: Engine) -> str:
    """The tune's id: same experiment, case, settings, models, prompt, repeats and engine (its name
    and ``identity()``: the build for llama.cpp; transformers, torch and the device for
    transformers): the same tune, resumed. Another engine version starts afresh, never reusing
    points another version measured."""
    assert case.draft is not None
    blob = {"exp": exp.name, "case": case.name, "settings": dataclasses.asdict(case.settings),
            "engine": backend.name, "identity": backend.identity(), "draft": case.draft.label,
            "target": case.target.label, "prompt": case.prompt, "repeats": exp.repeats}
    return f"tune-{exp.name}-{hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:10]}"


def _tune_case(exp: Experiment, case: Case, backend: Engine, store: Store, hw: dict[str, Any],
               variants: tuple[str, ...] | None, modes: tuple[str, ...] | None,
               on_point: Callable[[Config, dict[str, Any]], None] | None, budget: Budget | None) -> TuneResult:
    from llamaspec import models

    assert case.draft is not None
    tune_id = tune_key(exp, case, backend)
    result = TuneResult(exp.name, case.name, tune_id)
    start = time.monotonic()

    def measure(config: Config) -> dict[str, Any]:
        key = hashlib.sha256(json.dumps(dataclasses.asdict(config), sort_keys=True).encode()).hexdigest()[:16]
        row = store.finished_point(tune_id, key)
        if row is None:
            resolved = resolve_case(exp, _case_for(case, config), backend)
            done = run_case(resolved, backend, store, repeats=exp.repeats, hardware=hw, exp=exp, kind="sweep",
                            group=Group("tune", tune_id), point_key=key, baseline_scope=tune_id,
                            time_costs=config.draft_variant is not None, warmup=not result.measured)
            row = store.run(done.run_id)
        result.measured.append((config, row))
        if on_point:
            on_point(config, row)
        return row

    def rows_of(variant: str | None) -> list[analysis.PointRow]:
        return [analysis.PointRow(r["id"], "", c.draft_max, TuneResult.summary(r))
                for c, r in result.measured if c.draft_variant == variant and r.get("status") == "ok"]

    def search_lengths(variant: str, first: tuple[int, ...]) -> Any:
        for k in first:
            measure(Config(variant, "draft", k))
        fit, _why, _note = analysis.analyze_rows(rows_of(variant), MAX_DRAFT)
        if fit is not None and fit.cost is not None and fit.best is not None:
            done_k = {c.draft_max for c, _ in result.measured if c.draft_variant == variant}
            for k in (fit.best.draft_max - 1, fit.best.draft_max, fit.best.draft_max + 1):
                if 1 <= k <= MAX_DRAFT and k not in done_k:
                    measure(Config(variant, "draft", k))
        return fit

    base_fit = search_lengths(case.draft.variant, COARSE)
    if variants is not None:
        candidates = variants
    elif case.draft.given:  # a model named by its location: the drafts the case compares, or itself alone
        candidates = tuple(d.variant for d in case.drafts) or (case.draft.variant,)
    else:
        candidates = models.load_catalog().entry(case.draft.model).plain_variants
    others = [v for v in candidates if v != case.draft.variant]
    for variant in others:
        best_now = max((result.speedup(r) for _c, r in result.measured), default=0.0)
        bound = _bound(exp, case, variant, backend, store, hw, tune_id, base_fit)
        if bound is not None and bound < best_now:
            result.skipped.append((f"draft {variant}", f"even with every draft accepted the model predicts at most "
                                   f"{bound:.2f}x, below the {best_now:.2f}x already measured"))
            continue
        best_k = result.best[0].draft_max if result.best else 4
        search_lengths(variant, tuple(sorted({max(1, best_k // 2), best_k})))
    available = spectypes.draft_free_modes(backend.capabilities, case.settings.program)
    chosen_modes = [m for m in (modes or NGRAM_MODES) if m in available]
    if not available:
        why = (f"llama-{case.settings.program} requires a draft model; program: speculative-simple or `engine: "
               "llama-server` runs them" if case.settings.program and "program" in backend.capabilities.settings
               else f"the {backend.name} engine of this build runs none")
        result.skipped.append(("draft-free n-gram modes", why))
    best_k = result.best[0].draft_max if result.best else 4
    for mode in chosen_modes:
        measure(Config(None, mode, best_k))
    _settle(result, exp, case, backend, store, budget, start)
    result.seconds = time.monotonic() - start
    result.full_grid_points = (1 + len(others)) * MAX_DRAFT + len(chosen_modes) * MAX_DRAFT
    return result


def _settle(result: TuneResult, exp: Experiment, case: Case, backend: Engine, store: Store, budget: Budget | None,
            start: float) -> None:
    """Step 4: the pairs the decision asks for, until it is settled or the budget is spent. The
    search's own points, reread from the store, count: a rerun resumes with every pair it had."""
    from llamaspec.run import more_pairs

    # spent counts the pairs asked for, not those the store holds afterwards: a request that adds
    # fewer (an output that differs) still moves the tune towards its budget, so it always ends.
    spent = result.pairs
    limit = budget.pairs if budget is not None else 2 * pairs_per_point(exp) * len(result.measured)
    result.budget_pairs = limit
    while True:
        decision = result.decision
        step = decide.next_step(decision, spent, limit, [c for c, _r in result.candidates])
        if step.stop is None and budget is not None and budget.seconds is not None and time.monotonic() - start >= budget.seconds:
            step = decide.Step((), "budget", f"time budget spent ({budget.seconds:.0f} s): {decision.sureness}")
        log.info("tune %s: %s", result.tune_id, step.progress)
        result.stop, result.stop_progress = step.stop or "", step.progress
        if step.stop is not None:
            break
        for r in step.requests:
            i, (config, row) = next((i, cr) for i, cr in enumerate(result.measured) if cr[0] == r.key)
            resolved = resolve_case(exp, _case_for(case, config), backend)
            done = more_pairs(row["id"], resolved, backend, store, r.pairs, baseline_scope=result.tune_id)
            result.measured[i] = (config, store.run(row["id"]))
            spent += r.pairs
            if done.status == "failed":
                raise LlamaspecError(f"tune {result.tune_id}: more pairs for {config.label} failed: {done.error}",
                                     hint="every pair measured so far is stored; fix the cause and rerun the same "
                                          "command to resume")


def _bound(exp: Experiment, case: Case, variant: str, backend: Engine, store: Store, hw: dict[str, Any], tune_id: str,
           base_fit: Any) -> float | None:
    """The best speedup any draft length could give with this variant if every draft were accepted."""
    if base_fit is None or base_fit.cost is None:
        return None
    from llamaspec.run import baseline_key, measure_shared

    resolved = resolve_case(exp, _case_for(case, Config(variant, "draft", 1)), backend)
    assert resolved.draft is not None
    key = baseline_key(backend, dataclasses.replace(resolved, target=resolved.draft), tune_id)
    timed = [row["decode_tps"] for row in store.shared(key, "draft")]
    if not timed:
        done = measure_shared(resolved, "draft", key, backend, store, repeats=1, hardware=hw, kind="draft-timing",
                              group=Group("tune", tune_id), point_key=f"draft-{variant}")
        timed = [m.decode_tps for m in done if m.ok and m.decode_tps]
    if not timed or not timed[0]:
        return None
    tps = timed[0]
    cost = dataclasses.replace(base_fit.cost, draft_ms_per_token=1000.0 / tps)
    return max(cost.speedup(1.0, k) for k in range(1, MAX_DRAFT + 1))
