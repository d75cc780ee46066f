"""Throughput against concurrency (``llamaspec concurrency``): both servers with N slots, pairs of
batches in ABBA order.

A batch sends every prompt of the set through N client threads, each prompt a case as every route
makes them (``prompts.workload_cases``, at the case's models and settings). Batches are measured by the one
pairs loop (``pairs.measure_pairs``: ABBA by pair index, metered, stopping at the first failed
batch), each a :class:`Measurement` of its own (``stats`` holds the batch's figures), and paired by
``pairs.whole_pairs``. A level's figures (``level_figures``, pure) are per-mode throughputs over the
batches and speedups as medians of paired batch ratios. Rows stay plain dicts: they are printed as
JSON as they are.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from llamaspec.base import paths, stats
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import Progress
from llamaspec.measure import pairs, spectypes
from llamaspec.measure.contract import Engine, Measurement, ResolvedCase
from llamaspec.studies.prompts import PromptSet, workload_cases

CONCURRENCY_REPEATS = 3
MODES = pairs.PAIR_MODES


def run_concurrency(exp: Any, prompt_set: PromptSet, backend: Engine, levels: Sequence[int], *,
                    repeats: int = CONCURRENCY_REPEATS, resolve: Callable[[Any, Any], ResolvedCase] | None = None
                    ) -> list[dict[str, Any]]:
    """For each case and each N in ``levels``: both servers (target alone, and speculative) started
    with N slots and kept loaded side by side, every prompt's template rendered, then ``repeats``
    pairs of batches: a baseline batch and a speculative batch back to back, in ABBA order over the
    pairs (B S, S B, B S, ...). A batch sends every prompt of the set through N client threads; a
    batch with a failed request ends its level (later batches would fail alike), noted in the row.

    Per level, see :func:`level_figures`: aggregate and per-request throughput per mode over the
    batches, and the speedups as medians of the paired batch ratios with bootstrap intervals."""
    if repeats < 1:
        raise LlamaspecError("concurrency needs at least one pair of batches per level", hint="--batch-pairs 3")
    resolve = resolve or resolver(backend)
    logs = paths.runs_dir() / "concurrency" / time.strftime("%Y%m%d-%H%M%S")
    cases = [(resolve(exp, c), [resolve(exp, r) for r in workload_cases(prompt_set.prompts, c.target, c.draft, c.settings,
                                                                        c.drafts)]) for c in exp.cases]
    total = len(cases) * len(levels) * repeats * len(MODES)
    bar = Progress(f"concurrency {exp.name}", total)
    try:
        return [_level(case, requests, n, backend, logs, repeats, bar) for case, requests in cases for n in levels]
    finally:
        bar.close()


def _level(case: ResolvedCase, requests: Sequence[ResolvedCase], n: int, backend: Engine, logs: Path, repeats: int,
           bar: Progress) -> dict[str, Any]:
    """One case at ``n`` slots (``requests``: its prompts as cases): its servers started, its prompts
    rendered, its pairs of batches, its row."""
    def at_level(c: ResolvedCase) -> ResolvedCase:
        return replace(c, settings=replace(c.settings, parallel=n))

    backend.check(at_level(case))
    log_dir = logs / f"{case.case}-np{n}"
    requests = [at_level(r) for r in requests]
    _warm(requests, backend, log_dir)
    got = _measure_level(case.case, requests, backend, n, log_dir, repeats, bar)
    backend.close()  # this level's servers hold N slots of context each: not kept for the next level
    row = {"case": case.case, "method": method_label(case), "parallel": n,
           **level_figures(got.measurements, n, len(requests))}
    if got.failed:
        row["notes"] = [*row["notes"], f"stopped at the first failed batch ({got.failed}); "
                                       f"{repeats - got.complete} pair(s) of batches not measured"]
    return row


def _measure_level(name: str, requests: Sequence[ResolvedCase], backend: Engine, slots: int, log_dir: Path,
                   repeats: int, bar: Progress) -> pairs.Pairs:
    """``repeats`` pairs of batches at one level, through the one pairs loop (metered, ABBA by pair
    index, stopping at the first failed batch)."""
    def measure(mode: str, r: int) -> Measurement:
        m = pairs.metered(lambda: _concurrent_batch(requests, backend, mode, slots, log_dir, r))
        b = m.stats or {}
        bar.update(bar.done + 1, f"{name}, {slots} slots, pair {r + 1}, {mode}: "
                                 + (f"{b['aggregate_tps']:.1f} aggregate t/s" if b.get("aggregate_tps") else "-")
                                 + (f", {b['failed']} FAILED" if b.get("failed") else ""))
        return m

    return pairs.measure_pairs(measure, at_least=repeats)


def _warm(requests: Sequence[ResolvedCase], backend: Engine, log_dir: Path) -> None:
    """Both servers started and every prompt rendered before any timed batch; one short request
    per mode so that nothing a first request pays lands in a batch."""
    if backend.capabilities.prepares:
        for r in requests:
            backend.prepare(r)
    short = replace(requests[0], settings=replace(requests[0].settings, n_predict=4))
    for mode in MODES:
        backend.measure(short, mode, log_dir / f"{mode}-warmup.json")


def _concurrent_batch(requests: Sequence[ResolvedCase], backend: Engine, mode: str, clients: int,
                      log_dir: Path, repeat: int = 0) -> Measurement:
    """One batch as a measurement of pair ``repeat``: ok when every request succeeded and it
    generated something; its figures (the dict the JSON prints) in ``stats``."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        measured = list(pool.map(lambda ir: backend.measure(ir[1], mode, log_dir / f"{mode}-{repeat}-{ir[0]}.json"),
                                 enumerate(requests)))
    wall = time.monotonic() - t0
    ok = [m for m in measured if m.ok]
    generated = sum(m.n_predict or 0 for m in ok)
    per_request = [m.decode_tps for m in ok if m.decode_tps]
    counted = [m.n_drafted for m in ok if m.n_drafted is not None]
    batch = {"mode": mode, "repeat": repeat, "requests": len(measured), "failed": len(measured) - len(ok),
             "generated": generated, "drafted": sum(counted) if counted else None, "wall_seconds": wall,
             "aggregate_tps": generated / wall if wall > 0 and generated else None,
             "per_request_tps": statistics.median(per_request) if per_request else None,
             "errors": sorted({m.error for m in measured if m.error})[:3]}
    return batch_measurement(batch)


def batch_measurement(batch: dict[str, Any]) -> Measurement:
    """A batch's figures as the measurement of its pair (``repeat``) the pairs loop takes."""
    if batch["failed"]:
        error: str | None = f"{batch['failed']} of {batch['requests']} requests failed" + (
            f": {batch['errors'][0]}" if batch["errors"] else "")
    else:
        error = None if batch["aggregate_tps"] else "the batch generated nothing"
    return Measurement(mode=batch["mode"], ok=error is None, error=error, argv=(), exit_code=None,
                       wall_seconds=batch["wall_seconds"], peak_rss_bytes=None, n_predict=batch["generated"],
                       n_drafted=batch.get("drafted"),  # a baseline batch that drafted is refused (pairs.metered)
                       stats=dict(batch), pair=batch["repeat"])


def level_figures(batches: Sequence[Measurement], slots: int, prompts: int) -> dict[str, Any]:
    """One concurrency level's figures from its batches (pure; each batch a measurement of its pair
    with its figures in ``stats``, see :func:`batch_measurement`).

    - per mode: ``aggregate_tps`` (tokens the batch generated over its wall time) and
      ``per_request_tps`` (the median request's decode speed in a batch), each a Spread over the
      batches that completed (a batch with a failed request generated less: left out, counted);
    - ``aggregate_speedup`` / ``per_request_speedup``: medians of the paired batch ratios
      (speculative over the baseline batch of the same pair, ``pairs.whole_pairs``) with 95 %
      bootstrap intervals;
    - ``pairs``: usable pairs; ``unpaired``: completed batches whose partner failed (their
      throughput is in the per-mode figures, not in any speedup). Without a pair the speedups are
      None and ``paired`` is False: no ratio of batches measured apart is ever reported.
    """
    whole = pairs.whole_pairs(batches)
    both = [(p.speculative.stats or {}, p.baseline.stats or {}) for p in whole]
    agg = [s["aggregate_tps"] / b["aggregate_tps"] for s, b in both]
    req = [s["per_request_tps"] / b["per_request_tps"] for s, b in both if s["per_request_tps"] and b["per_request_tps"]]
    done = {mode: [b.stats or {} for b in batches if b.mode == mode and b.ok] for mode in MODES}
    notes: list[str] = []
    if prompts % slots:
        notes.append(f"{prompts} prompts over {slots} slots: the last wave runs {prompts % slots} requests at once")
    if prompts < slots:
        notes.append(f"fewer prompts ({prompts}) than slots ({slots}): the level never runs {slots} requests at once")
    unpaired = sum(len(d) for d in done.values()) - 2 * len(whole)
    if unpaired:
        notes.append(f"{unpaired} batch(es) without a completed partner: in the per-mode figures, not in the speedups")

    def per_mode(mode: str) -> dict[str, Any]:
        mine = [b.stats or {} for b in batches if b.mode == mode]
        agg_s = stats.spread([b["aggregate_tps"] for b in done[mode]])
        req_s = stats.spread([b["per_request_tps"] for b in done[mode]])
        return {"batches": len(mine), "completed": len(done[mode]), "failed_requests": sum(b["failed"] for b in mine),
                "aggregate_tps": agg_s.to_dict() if agg_s else None,
                "per_request_tps": req_s.to_dict() if req_s else None,
                "errors": sorted({e for b in mine for e in b["errors"]})[:3], "runs": [dict(b) for b in mine]}

    agg_speedup, req_speedup = stats.spread(agg), stats.spread(req)
    return {"prompts": prompts, "repeats": max((b.pair for b in batches if b.pair is not None), default=-1) + 1,
            "pairs": len(whole), "paired": bool(whole), "unpaired": unpaired,
            "baseline": per_mode("baseline"), "speculative": per_mode("speculative"),
            "aggregate_speedup": agg_speedup.to_dict() if agg_speedup else None,
            "per_request_speedup": req_speedup.to_dict() if req_speedup else None,
            "notes": notes}


def render_concurrency(rows: Sequence[dict[str, Any]]) -> str:
    """Throughput against slots: medians over the batches [95 % interval]; speedups are medians
    of paired batch ratios."""
    def fmt(d: dict[str, Any] | None, f: str = "{:.1f}", suffix: str = "") -> str:
        s = stats.Spread.from_dict(d)
        return s.text(f, suffix) if s else "-"

    lines = ["Aggregate t/s: tokens a batch generated over its wall time; per-request t/s: the median request's",
             "decode speed in a batch. Median over the batches [95 % interval]; speedup: median of paired batch ratios.",
             f"{'method':<36} {'N':>2} {'pairs':>5} {'aggregate t/s base':>20} {'spec':>20} {'agg speedup':>19}"
             f" {'per-request t/s base':>20} {'spec':>20} {'per-req speedup':>19}"]
    for r in rows:
        agg = fmt(r["aggregate_speedup"], "{:.2f}", "x") if r["paired"] else "UNPAIRED"
        req = fmt(r["per_request_speedup"], "{:.2f}", "x") if r["paired"] else "UNPAIRED"
        lines.append(f"{r['method'][:36]:<36} {r['parallel']:>2} {r['pairs']:>5}"
                     f" {fmt(r['baseline']['aggregate_tps']):>20} {fmt(r['speculative']['aggregate_tps']):>20} {agg:>19}"
                     f" {fmt(r['baseline']['per_request_tps']):>20} {fmt(r['speculative']['per_request_tps']):>20}"
                     f" {req:>19}")
        for mode in MODES:
            if r[mode]["failed_requests"]:
                lines.append(f"    {mode}: {r[mode]['failed_requests']} failed requests; {'; '.join(r[mode]['errors'])}")
        for note in r["notes"]:
            lines.append(f"    note: {note}")
    return "\n".join(lines)



def resolver(backend: Engine) -> Callable[[Any, Any], ResolvedCase]:
    """The run core's case resolver with its settings check, for ``backend``."""
    from llamaspec.studies import run

    def resolve(exp: Any, case: Any) -> ResolvedCase:
        resolved = run.resolve_case(exp, case, backend)
        run.check_settings(resolved, backend)
        return resolved

    return resolve


def method_label(case: ResolvedCase) -> str:
    """A case as the table names it: its name, and its draft and length or its n-gram mode."""
    s = case.settings
    spec_type = s.spec_type or "draft"
    if spectypes.needs_draft(spec_type):
        return f"{case.case} (draft {case.draft.label if case.draft else '?'}, k={s.draft_max})"
    sizes = ", ".join(f"{k[-1]}={getattr(s, k)}" for k in ("ngram_size_n", "ngram_size_m") if getattr(s, k) is not None)
    return f"{case.case} ({spec_type}{', ' + sizes if sizes else ''})"
