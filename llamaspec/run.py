"""Run an experiment: resolve models, check the pair, measure baseline and speculative runs
interleaved, store everything, and summarise (speedup, acceptance, lossless verdict).

Importable without the CLI::

    from llamaspec import experiment, run
    exp = experiment.load("smollm2-quicksort")
    results = run.run_experiment(exp)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from llamaspec import __version__, paths
from llamaspec.backend import Backend, Measurement, ModelPath, ResolvedCase
from llamaspec.errors import LlamaspecError
from llamaspec.experiment import DEFAULT_SETTINGS, Case, Experiment, ModelRef, Reference
from llamaspec.results import MeasurementRow, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaseResult:
    run_id: int
    case: ResolvedCase
    reference: Reference | None
    measurements: tuple[Measurement, ...]
    summary: dict[str, Any]
    status: str  # ok | failed | interrupted
    error: str | None = None


# --- resolving ---------------------------------------------------------------------------------

def resolve_model(ref: ModelRef) -> ModelPath:
    """The model file for ``name:variant``, fetched or derived if needed (the models room)."""
    from llamaspec import models

    got = models.resolve(ref.model, ref.variant)
    return ModelPath(label=ref.label, path=str(got.path), sha256=got.sha256, metadata=got.metadata.to_dict()
                     if hasattr(got.metadata, "to_dict") else asdict(got.metadata))


def default_threads() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def resolve_case(exp: Experiment, case: Case, check_pair: bool = True) -> ResolvedCase:
    settings = case.settings.over(DEFAULT_SETTINGS)
    if settings.threads is None:
        settings = replace(settings, threads=default_threads())
    target = resolve_model(case.target)
    draft = resolve_model(case.draft) if case.draft else None
    if draft is not None and check_pair:
        from llamaspec import models

        models.check_pair(Path(target.path), Path(draft.path))
    return ResolvedCase(exp.name, case.name, target, draft, case.prompt, case.prompt_file, settings)


# --- summarising -------------------------------------------------------------------------------

def spread(values: Sequence[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "values": list(values)}


def compare_texts(speculative: str | None, baseline: str | None) -> dict[str, Any]:
    """Greedy output with a draft must equal greedy output without one, over the shorter of the two
    (llama-speculative can overshoot n_predict by up to a draft's length)."""
    if speculative is None or baseline is None:
        return {"identical": None, "compared_chars": 0, "first_difference": None}
    a, b = speculative.strip(), baseline.strip()
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), None)
    return {"identical": first is None and n > 0, "compared_chars": n, "first_difference": first,
            "speculative_excerpt": a[max(0, (first or 0) - 20):(first or 0) + 40] if first is not None else None,
            "baseline_excerpt": b[max(0, (first or 0) - 20):(first or 0) + 40] if first is not None else None}


def summarize(measurements: Sequence[Measurement], baseline: Sequence[Measurement] = ()) -> dict[str, Any]:
    spec = [m for m in measurements if m.mode == "speculative" and m.ok]
    base = [m for m in (*measurements, *baseline) if m.mode == "baseline" and m.ok]
    summary: dict[str, Any] = {"repeats": len(spec), "baseline_repeats": len(base)}
    spec_tps = [m.decode_tps for m in spec if m.decode_tps]
    base_tps = [m.decode_tps for m in base if m.decode_tps]
    summary["decode_tps"] = spread(spec_tps)
    summary["encode_tps"] = spread([m.encode_tps for m in spec if m.encode_tps])
    summary["baseline_decode_tps"] = spread(base_tps)
    summary["draft_decode_tps"] = spread([m.decode_tps for m in (*measurements, *baseline)
                                          if m.mode == "draft" and m.ok and m.decode_tps])
    batches = [m for m in (*measurements, *baseline) if m.mode == "batch" and m.ok and m.stats]
    summary["batch_ms"] = {int(k): v for k, v in batches[0].stats["batch_ms"].items()} if batches else None  # type: ignore[index]
    if spec_tps and base_tps:
        own = [m.decode_tps for m in measurements if m.mode == "baseline" and m.ok and m.decode_tps]
        if len(own) == len(spec_tps):
            # Pair each speculative run with the baseline measured next to it, so drift cancels.
            ratios = [s / b for s, b in zip(spec_tps, own, strict=True)]
        else:  # a shared baseline (sweeps): against its median
            ratios = [s / statistics.median(base_tps) for s in spec_tps]
        summary["speedup"] = {**(spread(ratios) or {}), "of_medians": statistics.median(spec_tps) / statistics.median(base_tps),
                              "paired": len(own) == len(spec_tps)}
    else:
        summary["speedup"] = None
    if spec:
        mid = sorted(spec, key=lambda m: m.decode_tps or 0)[len(spec) // 2]
        summary["accept"] = spread([m.accept for m in spec if m.accept is not None])
        summary["n_drafted"] = mid.n_drafted
        summary["n_accept"] = mid.n_accept
        summary["n_predict"] = mid.n_predict
        summary["n_prompt"] = mid.n_prompt
        summary.update(derived_counters(mid.n_predict, mid.n_drafted, mid.n_accept))
        summary["peak_rss_bytes"] = max((m.peak_rss_bytes or 0) for m in spec) or None
    if base:
        summary["baseline_peak_rss_bytes"] = max((m.peak_rss_bytes or 0) for m in base) or None
        summary["baseline_n_predict"] = base[0].n_predict
    verdicts = [compare_texts(s.text, b.text) for s, b in zip(spec, base, strict=False)]
    summary["lossless"] = {
        "identical": all(v["identical"] for v in verdicts) if verdicts else None,
        "checked": len(verdicts),
        "compared_chars": min((v["compared_chars"] for v in verdicts), default=0),
        "first_mismatch": next((v for v in verdicts if v["identical"] is False), None),
    }
    return summary


def derived_counters(n_predict: int | None, n_drafted: int | None, n_accept: int | None) -> dict[str, float | None]:
    """Each target call (a verification batch) yields the accepted draft tokens plus one of its own,
    so calls = n_predict - n_accept; tokens per call and mean accepted length follow."""
    if n_predict is None or n_accept is None:
        return {"target_calls": None, "tokens_per_call": None, "mean_accepted": None}
    calls = n_predict - n_accept
    if calls <= 0:
        return {"target_calls": None, "tokens_per_call": None, "mean_accepted": None}
    return {"target_calls": calls, "tokens_per_call": n_predict / calls, "mean_accepted": n_accept / calls}


# --- running -----------------------------------------------------------------------------------

def provenance(backend: Backend, case: ResolvedCase, hardware: dict[str, Any]) -> dict[str, Any]:
    models = {"target": asdict(case.target)}
    if case.draft:
        models["draft"] = asdict(case.draft)
    return {
        "llamacpp": backend.provenance(),
        "backend": backend.name,
        "models": models,
        "hardware": hardware,
        "llamaspec": {"version": __version__, "git": _own_commit(), "argv": sys.argv, "python": sys.version.split()[0]},
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _own_commit() -> str | None:
    head = paths.project_root() / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (head.parent / ref[5:]).read_text().strip()[:12]
        return ref[:12]
    except OSError:
        return None


def baseline_key(backend: Backend, case: ResolvedCase, scope: str | None = None) -> str:
    """Same target, prompt and target-side settings on the same build (within one sweep, when
    scoped): same baseline. Scoping keeps a baseline from another day posing as today's."""
    s = case.settings
    prov = backend.provenance()
    blob = {"scope": scope, "build": prov.get("build_key") or prov.get("commit"),
            "bin": prov.get("bin_dir"), "target": case.target.sha256 or case.target.path,
            "prompt": case.prompt, "prompt_file": case.prompt_file,
            "settings": {k: getattr(s, k) for k in ("n_predict", "seed", "temperature", "threads", "gpu_layers", "ctx_size",
                                                     "batch_size", "escape")}}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


Event = Callable[[str, dict[str, Any]], None]


def measurement_row(run_id: int, repeat: int, m: Measurement, key: str | None) -> MeasurementRow:
    return MeasurementRow(run_id=run_id, mode=m.mode, repeat=repeat, ok=m.ok, error=m.error, argv=list(m.argv),
                          exit_code=m.exit_code, wall_seconds=m.wall_seconds, peak_rss_bytes=m.peak_rss_bytes,
                          n_prompt=m.n_prompt, n_predict=m.n_predict, encode_tps=m.encode_tps, decode_tps=m.decode_tps,
                          n_drafted=m.n_drafted, n_accept=m.n_accept, accept=m.accept, text=m.text, stats=m.stats,
                          log_path=m.log_path, baseline_key=key if m.mode != "speculative" else None)


def stored_measurements(rows: list[dict[str, Any]]) -> list[Measurement]:
    return [Measurement(mode=r["mode"], ok=True, error=None, argv=tuple(r["argv"]), exit_code=r["exit_code"],
                        wall_seconds=r["wall_seconds"], peak_rss_bytes=r["peak_rss_bytes"], n_prompt=r["n_prompt"],
                        n_predict=r["n_predict"], encode_tps=r["encode_tps"], decode_tps=r["decode_tps"], text=r["text"],
                        stats=r["stats"], log_path=r["log_path"]) for r in rows]


def run_case(case: ResolvedCase, backend: Backend, store: Store, *, repeats: int = 1, hardware: dict[str, Any],
             reference: Reference | None = None, kind: str = "run", sweep_id: str | None = None,
             point_key: str | None = None, reuse_baseline: bool = False, baseline_scope: str | None = None,
             time_costs: bool = False, warmup: bool = False, on_event: Event | None = None) -> CaseResult:
    """Measure one case ``repeats`` times, baseline and speculative interleaved (ABBA order so that
    machine drift does not pose as speedup).

    - ``reuse_baseline``: baselines already stored for the same target settings (and scope) are
      reused; sweeps share one baseline across draft lengths.
    - ``time_costs``: the draft model alone is timed ``repeats`` times, and the target on batches
      of 1..17 tokens once (llama-bench), both shared likewise: the speedup model's draft and
      verification costs, which the pinned llama-speculative does not print.
    - ``warmup``: one short unrecorded generation first, so cold caches do not count.
    """
    emit = on_event or (lambda _event, _data: None)
    backend.check(case)
    key = baseline_key(backend, case, baseline_scope)
    draft_key = baseline_key(backend, replace(case, target=case.draft), baseline_scope) if time_costs and case.draft else None
    run_id = store.start_run(experiment=case.experiment, case_name=case.case, settings=asdict(case.settings),
                             provenance=provenance(backend, case, hardware), kind=kind, sweep_id=sweep_id,
                             point_key=point_key)
    logs = paths.runs_dir() / f"{run_id:06d}"
    shared = stored_measurements(store.shared(key))[:repeats] if reuse_baseline else []
    if draft_key:
        shared += stored_measurements(store.shared(draft_key, "draft"))[:repeats] + stored_measurements(store.shared(key, "batch"))[:1]
    have_base = sum(m.mode == "baseline" for m in shared)
    have_draft = sum(m.mode == "draft" for m in shared)
    steps = [("draft", r) for r in range(have_draft, repeats)] if draft_key else []
    if draft_key and not any(m.mode == "batch" for m in shared) and getattr(backend, "can_time_batches", lambda: False)():
        steps.append(("batch", 0))
    for r in range(repeats):
        pair = ["baseline", "speculative"] if r % 2 == 0 else ["speculative", "baseline"]
        steps += [(mode, r) for mode in pair if mode == "speculative" or r >= have_base]
    measured: list[Measurement] = []
    status, error = "ok", None
    try:
        if warmup and len(steps) > 1:
            emit("start", {"case": case.case, "mode": "warm-up", "repeat": 0, "repeats": 1})
            backend.measure(replace(case, settings=replace(case.settings, n_predict=16)), "baseline", logs / "warmup.log")
        for mode, r in steps:
            emit("start", {"case": case.case, "mode": mode, "repeat": r, "repeats": repeats})
            m = backend.measure(case, mode, logs / f"{mode}-{r}.log")
            store.add_measurement(measurement_row(run_id, r, m, draft_key if mode == "draft" else key))
            measured.append(m)
            emit("done", {"case": case.case, "mode": mode, "repeat": r, "measurement": m})
            if not m.ok:
                status, error = "failed", m.error
                break
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", summarize(measured, shared), "interrupted by the user")
        raise
    summary = summarize(measured, shared)
    summary["baseline_key"] = key
    summary["baseline_reused"] = have_base
    store.finish_run(run_id, status, summary, error)
    return CaseResult(run_id, case, reference, tuple(measured), summary, status, error)


def measure_shared(case: ResolvedCase, mode: str, key: str, backend: Backend, store: Store, *, repeats: int,
                   hardware: dict[str, Any], kind: str, sweep_id: str | None, point_key: str | None = None) -> list[Measurement]:
    """Measure ``mode`` ``repeats`` times in a run row of its own, stored under the shared ``key``
    (a sweep's closing baseline, a draft variant's timing); stops at the first failure."""
    run_id = store.start_run(experiment=case.experiment, case_name=case.case, settings=asdict(case.settings),
                             provenance=provenance(backend, case, hardware), kind=kind, sweep_id=sweep_id,
                             point_key=point_key)
    done: list[Measurement] = []
    for r in range(repeats):
        m = backend.measure(case, mode, paths.runs_dir() / f"{run_id:06d}" / f"{mode}-{r}.log")
        store.add_measurement(measurement_row(run_id, r, m, key))
        done.append(m)
        if not m.ok:
            break
    failed = next((m for m in done if not m.ok), None)
    store.finish_run(run_id, "failed" if failed else "ok", {}, failed.error if failed else None)
    return done


def run_experiment(exp: Experiment, backend: Backend | None = None, store: Store | None = None,
                   on_event: Event | None = None, warmup: bool = False) -> list[CaseResult]:
    from llamaspec import host
    from llamaspec.llamacpp.build import find
    from llamaspec.llamacpp.runner import LlamaCppBackend

    backend = backend or LlamaCppBackend(find())
    store = store or Store.open()
    hw = host.hardware()
    results = []
    for case in exp.cases:
        resolved = resolve_case(exp, case)
        results.append(run_case(resolved, backend, store, repeats=exp.repeats, hardware=hw, reference=case.reference,
                                warmup=warmup, on_event=on_event))
    return results


def raise_if_failed(results: Sequence[CaseResult]) -> None:
    failed = [r for r in results if r.status != "ok"]
    if failed:
        r = failed[0]
        log_path = next((m.log_path for m in r.measurements if not m.ok), None)
        raise LlamaspecError(f"case {r.case.case} failed: {r.error}" + (f" (log: {log_path})" if log_path else ""),
                             hint=f"the failed run is stored as run {r.run_id}; see `llamaspec results show {r.run_id}`")
