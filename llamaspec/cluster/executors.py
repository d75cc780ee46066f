"""What a worker does with a work item, by the item's ``kind``: small adapters onto llamaspec's
own measuring code, each returning one plain result dict:

``ok``, ``status`` (ok | failed), ``error``, ``experiment``, ``case``, ``settings`` (dict),
``provenance`` (dict), ``measurements`` (list of dicts with the fields of
``llamaspec.measure.contract.Measurement`` plus ``repeat``, the pair index), ``summary`` (dict).

Every item carries its case or its whole experiment as the coordinator decided it
(``study.case_payload``, ``study.experiment_payload``); the worker rebuilds it
(:func:`experiment_of`), resolves it with the run core's one resolver (``run.resolve_case``: the
same defaults, threads included, as on one machine) on this machine's model files, and measures
through the run core's pairs loop and measuring step. No experiment file is read on a worker.

- ``pair``: one case measured ``repeats`` times, baseline and speculative interleaved (ABBA), on
  this machine's llama.cpp build with the engine the payload names (``engine``: the
  experiment's, llama.cpp or llama-server); the speedup of each repeat is against the baseline
  measured next to it, on the same machine.
- ``study``: an experiment's whole workload study on this machine (items of this kind are pinned:
  the best setup is a property of the machine), through ``llamaspec.studies.study.run_study`` into
  the scratch store; every point it measured goes back whole (:func:`point_of`), and the
  coordinator decides the machine's answer from them (``study.study_decisions``), whatever the
  search here was.

A new kind is one function and one ``EXECUTORS`` entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llamaspec.base.errors import LlamaspecError
from llamaspec.cluster.work import WorkItem

if TYPE_CHECKING:
    from llamaspec.measure.contract import ResolvedCase
    from llamaspec.measure.pairs import Pairs
    from llamaspec.studies.experiment import Case, Experiment, ModelRef


class MachineWorker(Protocol):
    """What an executor uses of the worker that runs it (``cluster.worker.MachineWorker``): the
    worker calls its executors, so they know it by this shape and never import it."""

    machine: str
    env: Any  # what the engine provided on this machine
    scratch: Path
    state: dict[str, Any]


Executor = Callable[[MachineWorker, WorkItem], dict[str, Any]]


def get(kind: str) -> Executor:
    if kind not in EXECUTORS:
        raise LlamaspecError(f"this worker does not know work items of kind {kind!r}",
                             hint=f"known kinds: {', '.join(EXECUTORS)}; upgrade llamaspec on the worker")
    return EXECUTORS[kind]


def refuse_engine(name: str | None, what: str) -> None:
    """Raise unless ``name`` is an engine the workers can provide for themselves (None: the item
    names none, e.g. a no-op). A measurement taken with another engine than the experiment names
    would be stored under the experiment's name as if it were the experiment's, so any other
    engine is refused before anything is queued."""
    from llamaspec.registry import engines

    known = engines.cluster_engines()
    if name is not None and name not in known:
        raise LlamaspecError(f"{what} uses the {name} engine; cluster workers measure with {' and '.join(known)} only",
                             hint="run it on one machine (without --cluster and RAY_ADDRESS), or set "
                                  f"`engine: {known[0]}` in the experiment")


def check_items(items: Any) -> None:
    """Every item's engine is one the workers run (the coordinator calls this before queueing)."""
    for item in items:
        if item.kind in MEASURING:
            refuse_engine(engine_of(item.payload), f"work item {item.key} of {item.payload.get('experiment') or 'the study'}")


def engine_of(payload: dict[str, Any]) -> str | None:
    """The engine a work item names (``backend`` in items queued before the key was ``engine``)."""
    found = payload.get("engine") or payload.get("backend")
    return str(found) if found else None


def _engine(worker: MachineWorker, name: str) -> Any:
    """This machine's engine of that name (opened by what the engine provided here), kept between items."""
    refuse_engine(name, f"a work item on {worker.machine}")
    return worker.env.open(name)


def _hardware(worker: MachineWorker) -> dict[str, Any]:
    """This machine's hardware, as the run core records it (once per worker: it asks for GPUs)."""
    if "hardware" not in worker.state:
        from llamaspec.base.host import hardware

        worker.state["hardware"] = hardware()
    return dict(worker.state["hardware"])


def experiment_of(payload: dict[str, Any]) -> Experiment:
    """The experiment a work item carries (``study.experiment_payload``, or one case's
    ``study.case_payload``): rebuilt from the payload, never from a file on the worker (the
    coordinator decided every setting; the worker's checkout need not have the file, or the same one)."""
    from llamaspec.studies.experiment import Experiment

    cases = payload.get("cases") or [payload]
    repeats = payload.get("repeats") or 1
    return Experiment(name=str(payload.get("experiment") or "cluster"), description="",
                      engine=engine_of(payload) or "llama.cpp", repeats=repeats,
                      cases=tuple(case_of(c) for c in cases), path=str(payload.get("experiment_path") or ""),
                      sha256=payload.get("experiment_sha256"))


def case_of(payload: dict[str, Any]) -> Case:
    """One case of a payload (``study.case_payload``): model labels, prompt, settings, reference."""
    from llamaspec.measure.settings import Settings
    from llamaspec.measure.summary import Reference
    from llamaspec.studies.experiment import Case, ModelRef

    def ref(label: str) -> ModelRef:
        model, _, variant = label.partition(":")
        return ModelRef(model, variant)

    reference = payload.get("reference")
    return Case(name=str(payload.get("case") or "case"), target=ref(payload["target"]),
                draft=ref(payload["draft"]) if payload.get("draft") else None,
                prompt=payload.get("prompt"), prompt_file=payload.get("prompt_file"),
                settings=Settings.from_dict(payload.get("settings") or {}),
                reference=Reference.from_dict(reference) if reference else None, category=payload.get("category"),
                chat=bool(payload.get("chat")), history=tuple((str(r), str(t)) for r, t in payload.get("history") or ()))


def resolved_case(worker: MachineWorker, payload: dict[str, Any], backend: Any) -> ResolvedCase:
    """The payload's case with this machine's model files, resolved by the run core's one resolver
    (``run.resolve_case``: the same setting defaults and thread rule as on one machine)."""
    from llamaspec.studies import run

    exp = experiment_of(payload)
    return run.resolve_case(exp, exp.cases[0], backend, models=lambda ref: worker.env.model(_label(ref)))


def _label(ref: ModelRef) -> str:
    """The label the coordinator sent: ``name:variant``, or a GGUF path as it was (no variant)."""
    return ref.label if ref.variant else ref.model


def _measure_pairs(backend: Any, case: ResolvedCase, logs: Path, repeats: int, offset: int = 0) -> Pairs:
    """The run core's one pairs loop and its one measuring step on this machine; ``offset``: a split
    repeat keeps its place in the ABBA order."""
    from llamaspec.measure import pairs

    suffix = ".json" if backend.capabilities.keeps_models_loaded else ".log"
    return pairs.measure_pairs(lambda mode, r: pairs.measure_one(backend, case, mode, r, logs / f"{mode}-{r}{suffix}"),
                               at_least=repeats, start=offset)


def _rows(got: Pairs) -> list[dict[str, Any]]:
    """The measurements as the store's rows have them (the sink stores them as they are)."""
    from llamaspec.store.rows import MeasurementRow

    return [dataclasses.asdict(MeasurementRow.of(t.measurement, run_id=0, repeat=t.pair)) for t in got.taken]


def _provenance(worker: MachineWorker, backend: Any, case: ResolvedCase) -> dict[str, Any]:
    from llamaspec.studies import run

    return run.provenance(backend, case, _hardware(worker))


def pair(worker: MachineWorker, item: WorkItem) -> dict[str, Any]:
    from llamaspec.measure.summary import requested_draft, summarize
    from llamaspec.studies import run as runs

    backend = _engine(worker, engine_of(item.payload) or "llama.cpp")
    case = resolved_case(worker, item.payload, backend)
    runs.check_settings(case, backend)  # a setting this engine would ignore: refused, as on one machine
    backend.check(case)
    got = _measure_pairs(backend, case, worker.scratch / "logs" / safe_name(item.key)[:80], int(item.payload.get("repeats", 1)),
                         int(item.payload.get("repeat_offset", 0)))
    # The run core's one summary (speedup of paired runs, lossless verdict, drafted-length check).
    summary = summarize(got.measurements, requested_draft=requested_draft(case), temperature=case.settings.temperature,
                        status="failed" if got.failed else "ok",
                        error=got.failed)
    return {
        "ok": summary.status == "ok", "status": summary.status, "error": summary.error,
        "experiment": case.experiment, "case": case.case, "prompt_id": case.prompt_id, "category": case.category,
        "settings": case.settings.to_dict(), "provenance": _provenance(worker, backend, case), "measurements": _rows(got),
        "summary": summary.to_dict(),
    }


def item_setups(payload: dict[str, Any], exp: Any, engine: Any) -> Any:
    """A ``study`` item's setups: those the coordinator named (an experiment's cases over its prompt
    set), else the grid of its ``axes`` and its ``modes`` as ``sweep`` makes them on this engine."""
    from llamaspec.studies import study as studies

    if payload.get("setups"):
        return setups_from(payload["setups"])
    return studies.sweep_setups(exp, engine, {a: tuple(v) for a, v in (payload.get("axes") or {}).items()},
                             tuple(payload["modes"]) if payload.get("modes") is not None else None)


def setups_payload(setups: Any) -> list[dict[str, Any]]:
    """Setups as a work item and a study's result carry them (:func:`setups_from` reads them)."""
    return [{"label": s.label, "values": [list(v) for v in s.point.values],
             **({"names": dict(s._draft_names)} if s._draft_names else {})} for s in setups]


def setups_from(sent: Any) -> tuple[Any, ...]:
    """Setups as a payload or a study's result carries them (:func:`setups_payload`)."""
    from llamaspec.studies.grid import Point
    from llamaspec.studies.setups import Setup

    return tuple(Setup(Point(tuple((a, v) for a, v in s["values"])), s["label"], s.get("names") or {}) for s in sent)


def study(worker: MachineWorker, item: WorkItem) -> dict[str, Any]:
    """The experiment's workload study, whole, on this machine (scratch store: resumable while the
    worker lives), over the setups the payload's ``axes`` and ``modes`` make, as ``sweep`` makes them."""
    from llamaspec.measure.contract import engine_provenance
    from llamaspec.store.results import Store
    from llamaspec.studies import study as studies
    from llamaspec.studies.budget import Budget

    p = item.payload
    exp = experiment_of(p)  # the command line's overrides applied on the coordinator
    store = worker.state.get("store")
    if store is None:
        store = worker.state["store"] = Store.open(worker.scratch / "scratch.sqlite")
    engine = _engine(worker, exp.engine)
    setups = item_setups(p, exp, engine)
    result = studies.run_study(exp, setups, engine, store, Budget(**p["budget"]) if p.get("budget") else None,
                               fixed_grid=bool(p.get("fixed_grid")), over_prompts=bool(p.get("over_prompts", True)),
                               count_loops=bool(p.get("count_loops")))
    # Every point goes back whole (POINT_KEYS: its prompt, settings, provenance, measurements,
    # summary): the coordinator stores it as its own run, so the scratch store here is never the
    # only copy, and decides this machine's answer from them (study.study_decisions).
    points = [point_of(store, store.run(run_id)) for run_id in (*result.runs.values(), *result.baseline_runs)]
    return {"ok": True, "status": "ok", "error": None, "experiment": exp.name, "case": item.key,
            "settings": {}, "provenance": {"engine": engine_provenance(engine), "hardware": _hardware(worker)},
            "measurements": [], "runs": points,
            "summary": {"study": [result.as_dict()], "text": result.render(), "setups": setups_payload(setups)}}


# What a point sent back by a searching item (``result["runs"]``) holds: enough for the
# coordinator to store it as a run (``sink.StoreSink``) and to read it as a cell of the machine's
# workload (``workload_runs.workload_of_runs``: its prompt and category, its settings and draft,
# its summary's pair ratios and status).
POINT_KEYS = ("experiment", "case", "prompt_id", "category", "kind", "group_kind", "group_id", "point_key", "settings",
              "provenance", "measurements", "summary", "status", "error")


def point_of(store: Any, row: dict[str, Any]) -> dict[str, Any]:
    """One stored run of this worker's scratch store as the coordinator takes it (:data:`POINT_KEYS`),
    under its own group (the coordinator stores it under ``GROUP@MACHINE``)."""
    return {"experiment": row["experiment"], "case": row["case_name"], "prompt_id": row.get("prompt_id"),
            "category": row.get("category"), "kind": row["kind"], "group_kind": row["group_kind"],
            "group_id": row["group_id"], "point_key": row["point_key"], "settings": row["settings"],
            "provenance": row["provenance"], "measurements": store.measurements(row["id"]),
            "summary": row["summary"] or {}, "status": row["status"], "error": row["error"]}


def noop(worker: MachineWorker, item: WorkItem) -> dict[str, Any]:
    """No llama.cpp: use ``spin`` seconds of this process's CPU time (or do nothing), for measuring
    the cluster's own overhead and throughput (CPU time, so a busy machine shows as a slow one)."""
    import os
    import time

    spin = float(item.payload.get("spin", 0.0))
    start = time.perf_counter()
    cpu0 = time.process_time()
    n = 0
    while time.process_time() - cpu0 < spin:
        n += sum(i * i for i in range(1000))
    return {"ok": True, "status": "ok", "error": None, "experiment": item.payload.get("experiment", "noop"),
            "case": item.key, "settings": {}, "provenance": {"pid": os.getpid()}, "measurements": [],
            "summary": {"seconds": time.perf_counter() - start, "pid": os.getpid()}}


def safe_name(text: str) -> str:
    """``text`` as a file name (a work item's key, a machine's name)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


MEASURING = frozenset({"pair", "study"})  # kinds that time llama.cpp: under the machine's lock
EXECUTORS: dict[str, Executor] = {"pair": pair, "study": study, "noop": noop}
