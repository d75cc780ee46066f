"""The pair's costs for the prediction (:class:`PairCosts`), from the first source that has them
(docs/watch.md, "What it predicts"):

1. ``--cost C[,V]`` (:func:`given`): the draft's step in target steps, and the target steps each
   drafted token adds to a verification. A ratio, not a time: the prediction has no speeds then.
2. A stored study of the same files (by sha256) at the same threads, or an earlier watch window
   whose costs were timed here (:func:`stored`).
3. Timed on the spot (:func:`measured`).

Draft-free (n-gram) modes cost no draft model: the draft's step is 0 (the n-gram lookup is not
timed). Every source is re-profiled to the server's round (``llamacpp.profiles.LLAMA_SERVER``).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.registry.engines import round_profile
from llamaspec.theory import CostModel, bench_depth
from llamaspec.watch.serving import Serving
from llamaspec.watch.window import Window

log = logging.getLogger(__name__)

PROFILE = "llama-server"
BASELINE_RUNS = 3


@dataclass(frozen=True)
class PairCosts:
    """A cost model for the server's pair, where it came from and how to name it."""

    cost: CostModel
    source: str  # "given", "stored" or "measured" (the module's three sources)
    label: str  # one line for the output
    absolute: bool  # in milliseconds (timed), not a ratio given with --cost

    @property
    def fit_draft(self) -> bool:
        """The window may set the draft's cost: it is as timed alone (no study fitted it) and the
        target alone's step was measured beside it."""
        return self.absolute and self.cost.timed_cost_ratio is None and self.cost.baseline_step_ms is not None

    def to_dict(self) -> dict[str, Any]:
        c = self.cost
        return {"source": self.source, "label": self.label, "absolute": self.absolute,
                "target_ms_per_token": c.target_ms_per_token, "draft_ms_per_token": c.draft_ms_per_token,
                "verify_batches": [list(b) for b in c.verify_batches], "draft_batches": [list(b) for b in c.draft_batches],
                "baseline_step_ms": c.baseline_step_ms, "depth": c.depth, "cost_ratio": c.cost_ratio,
                "timed_cost_ratio": c.timed_cost_ratio}

    @classmethod
    def from_dict(cls, data: dict[str, Any], label: str) -> PairCosts:
        cost = CostModel(target_ms_per_token=float(data["target_ms_per_token"]),
                         draft_ms_per_token=float(data["draft_ms_per_token"]),
                         verify_batches=tuple((int(s), float(ms)) for s, ms in data.get("verify_batches") or ()),
                         draft_batches=tuple((int(s), float(ms)) for s, ms in data.get("draft_batches") or ()),
                         profile=round_profile(PROFILE), depth=data.get("depth"),
                         baseline_step_ms=data.get("baseline_step_ms"), timed_cost_ratio=data.get("timed_cost_ratio"))
        return cls(cost, "stored", label, bool(data.get("absolute", True)))


def given(text: str, draft_free: bool = False) -> PairCosts:
    """``--cost C[,V]`` as a cost model in target steps."""
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 2 or any(not v >= 0 for v in values):
        raise LlamaspecError(f"--cost {text}: expected C or C,V (numbers >= 0)",
                             hint="C: the draft's step in target steps (0.3); V: target steps each drafted token adds "
                                  "to a verification (0.1), e.g. --cost 0.3,0.1")
    c, v = values[0], (values[1] if len(values) > 1 else 0.0)
    batches = ((1, 1.0), (17, 1.0 + 16 * v)) if v > 0 else ()
    cost = CostModel(target_ms_per_token=1.0, draft_ms_per_token=0.0 if draft_free else c, verify_batches=batches,
                     profile=round_profile(PROFILE))
    words = f"--cost {text}: the draft's step {0.0 if draft_free else c:g} target steps" + (
        f", a verification 1 + {v:g}·k target steps" if v > 0 else ", a verification one target step")
    return PairCosts(cost, "given", words, absolute=False)


def _same_files(run: dict[str, Any], serving: Serving) -> bool:
    models = (run.get("provenance") or {}).get("models") or {}
    target = (models.get("target") or {}).get("sha256")
    draft = (models.get("draft") or {}).get("sha256")
    if target != serving.target_sha256:
        return False
    if not serving.draft_free and draft != serving.draft_sha256:
        return False
    threads = (run.get("settings") or {}).get("threads")
    return serving.threads is None or threads in (None, serving.threads)


def stored(store: Any, serving: Serving) -> PairCosts | None:
    """The costs of the newest timed watch window of the server's files, else of the newest stored
    study of them with llama-bench's costs (``llamaspec sweep`` or run), the draft's cost as that
    study fitted it to its measured speedups where it could (``speedup_model.analyze_rows``)."""
    if serving.target_sha256 is None or (not serving.draft_free and serving.draft_sha256 is None):
        return None
    for row in store.windows(target_sha256=serving.target_sha256,
                             draft_sha256=None if serving.draft_free else serving.draft_sha256, limit=20):
        costs = row.get("costs") or {}
        if costs.get("source") == "measured" and row.get("threads") in (None, serving.threads):
            found = PairCosts.from_dict(costs, f"timed here by llamaspec watch on {row['finished_at']} "
                                               f"(stored window {row['id']})")
            return _for(found, serving)
    from llamaspec.decision import speedup_model
    from llamaspec.measure.summary import FINISHED

    runs = [r for r in store.runs() if r["status"] in FINISHED and _same_files(r, serving)]
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in runs:  # newest first
        by_group.setdefault(r.get("group_id") or f"run-{r['id']}", []).append(r)
    for group, members in by_group.items():
        rows = speedup_model.latest_per_draft([row for rows in speedup_model.rows_to_groups(members, []).values()
                                               for row in rows])
        if not any(r.summary.batch_ms and (r.summary.draft_decode_tps or serving.draft_free) for r in rows):
            continue
        fit, _ = speedup_model.analyze_rows(rows)
        cost = fit.cost if fit is not None and fit.cost is not None else None
        if cost is None:
            row = next(r for r in rows if r.summary.batch_ms)
            step = 1000.0 / row.summary.draft_decode_tps.median if row.summary.draft_decode_tps else 0.0
            cost = CostModel.from_bench(row.summary.batch_ms or {}, step, round_profile(PROFILE), depth=row.summary.cost_depth)
        engine = members[0].get("engine")
        fitted = f"c {cost.cost_ratio:.2f} fitted to its measured speedups, {cost.timed_cost_ratio:.2f} timed alone" \
            if cost.timed_cost_ratio is not None else f"c {cost.cost_ratio:.2f} as timed"
        label = f"stored study {group} ({members[0]['experiment']}, {engine}, {members[0]['started_at'][:10]}; {fitted})"
        cost = dataclasses.replace(cost, profile=round_profile(PROFILE),
                                   baseline_step_ms=cost.baseline_step_ms if engine == "llama-server" else None)
        return _for(PairCosts(cost, "stored", label, absolute=True), serving)
    return None


def _for(found: PairCosts, serving: Serving) -> PairCosts:
    """The costs as the server's speculation spends them (an n-gram mode runs no draft model)."""
    if serving.draft_free and found.cost.draft_ms_per_token > 0:
        return dataclasses.replace(found, cost=found.cost.with_cost_ratio(0.0),
                                   label=found.label + "; the draft's step 0 (n-gram mode)")
    return found


def bench_build(argv: tuple[str, ...]) -> Any:
    """The server's own build (its binary's folder) when it holds llama-bench."""
    from llamaspec.llamacpp import cache

    program = Path(argv[0]) if "/" in argv[0] else Path(shutil.which(argv[0]) or argv[0])
    if not program.is_file():
        raise LlamaspecError(f"cannot find the server's binary {argv[0]} to time the costs with its build",
                             hint="give the costs with --cost C, or run `llamaspec sweep` on the same files")
    return cache.prebuilt(program.parent, roles=("bench", "server"))


def baseline_step_ms(build: Any, case: Any, window: Window, log_dir: Path) -> float:
    """The target alone's step on the server's flags, as the llama-server engine measures a baseline:
    the median of ``BASELINE_RUNS`` generations of the built-in workload's first prompt (served as
    the workload serves it), each a window's mean request."""
    import statistics

    from llamaspec.llamacpp.server import ServerEngine
    from llamaspec.measure.contract import refuse_drafting_baseline
    from llamaspec.studies import adhoc

    first = adhoc.builtin_workload().prompts[0]
    length = round(window.tokens / window.requests) if window.requests else 64
    alone = dataclasses.replace(case, draft=None, prompt=first.prompt, prompt_file=None, chat=first.chat,
                                history=first.history,
                                settings=dataclasses.replace(case.settings, spec_type=None, draft_max=None,
                                                             n_predict=min(max(length, 32), 256)))
    engine = ServerEngine(build, servers_dir=log_dir / "servers")
    try:
        # a target-only run that drafted times speculation, not the target's step: refused as in a pair
        runs = [refuse_drafting_baseline(engine.measure(alone, "baseline", log_dir / f"baseline-{i}.log"))
                for i in range(BASELINE_RUNS)]
    finally:
        engine.close()
    failed = next((m for m in runs if not m.ok or not m.decode_tps), None)
    if failed is not None:
        raise LlamaspecError(f"timing the target alone failed: {failed.error or 'no decode speed'}",
                             hint=f"see {failed.log_path}; or give --cost C[,V]")
    return 1000.0 / statistics.median(m.decode_tps for m in runs if m.decode_tps)


def measured(serving: Serving, window: Window, log_dir: Path, processing: int | None = None) -> PairCosts:
    """Time the pair's costs on the spot, under the measurement lock: llama-bench beside the
    server's binary on the server's own flags and files, at the window's mean context depth, and
    the target alone (:func:`baseline_step_ms`). The watched server keeps serving meanwhile
    (``processing``: the requests it was generating, said in the label); the window's speed then
    sets the draft's cost (``forecast.calibrate``)."""
    if serving.argv is None or not serving.files_here:
        raise LlamaspecError("the server's files or command line are not readable on this machine, so its costs "
                             "cannot be timed here",
                             hint="give them with --cost C[,V], or run `llamaspec sweep -m T -md D` on the same files")
    from llamaspec.base import lock
    from llamaspec.llamacpp import command, costs, programhelp
    from llamaspec.measure.contract import ModelPath, ResolvedCase

    build = bench_build(serving.argv)
    cmd = command.parse(list(serving.argv))
    settings = cmd.settings.with_defaults()
    target = ModelPath("target", str(serving.target), serving.target_sha256)
    draft = None if serving.draft_free or serving.draft is None else ModelPath("draft", serving.draft, serving.draft_sha256)
    case = ResolvedCase("watch", serving.url, target, draft, None, None, settings)
    depth = window.depth if window.depth is not None else bench_depth(window.prompt_tokens, window.tokens)
    generation = programhelp.program_flags(Path(build.program("bench"))).generation
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log.info("timing the pair's costs with llama-bench at depth %d (the server keeps serving%s) ...", depth,
             f"; {processing} request(s) being generated now" if processing else "")
    with lock.measuring(f"llamaspec watch {serving.url}: the pair's costs"):
        batch = costs.measure(build, generation, case, "batch", log_dir / f"{stamp}-batch.log", depth, True)
        step = costs.measure(build, generation, case, "draft", log_dir / f"{stamp}-draft.log", depth, True) \
            if draft is not None else None
        alone_ms = baseline_step_ms(build, case, window, log_dir / stamp) if batch.ok else None
    for m in (batch, step):
        if m is not None and not m.ok:
            raise LlamaspecError(f"timing the costs failed: {m.error}", hint=f"see {m.log_path}; or give --cost C[,V]")
    batch_ms = (batch.stats or {}).get("batch_ms") or {}
    draft_ms = 1000.0 / step.decode_tps if step is not None and step.decode_tps else 0.0
    cost = dataclasses.replace(CostModel.from_bench({int(k): float(v) for k, v in batch_ms.items()}, draft_ms,
                                                    round_profile(PROFILE), depth=depth), baseline_step_ms=alone_ms)
    label = f"timed here now: llama-bench (-t {settings.threads}, depth {depth}), c {cost.cost_ratio:.2f}"
    label += f"; the target alone {1000.0 / alone_ms:.1f} t/s" if alone_ms else ""
    label += f"; {processing} request(s) were being served meanwhile" if processing else ""
    return PairCosts(cost, "measured", label, absolute=True)
