"""A study of an experiment over machines: its work items, its requirements, its id, and the
pool to run it on. The glue ``--cluster`` on run and sweep calls.

``run --cluster``'s items are of kind ``pair`` (see ``executors``): one case, its baselines and
speculative runs on one machine. ``split_repeats`` makes each repeat an item of its own (a one-case
experiment then spreads over machines); the repeat number still alternates the ABBA order.
``sweep --cluster``'s are of kind ``study``: the whole workload study, one per machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from llamaspec.cluster.work import Requirements, WorkItem
from llamaspec.decision import workload


def case_payload(exp: Any, case: Any, repeats: int, repeat_offset: int = 0) -> dict[str, Any]:
    """The portable description of a case: model labels (each machine resolves its own files),
    prompt, and every setting decided on the coordinator."""
    settings = case.settings.over(exp.settings) if hasattr(exp, "settings") else case.settings
    prompt_file = None
    prompt = case.prompt
    if case.prompt_file:
        from pathlib import Path

        # Workers need not share a filesystem: ship the prompt's text.
        prompt = Path(case.prompt_file).read_text()
    return {"experiment": exp.name, "engine": exp.engine, "case": case.name, "target": case.target.label,
            "draft": case.draft.label if case.draft else None, "prompt": prompt, "prompt_file": prompt_file,
            "settings": settings.to_dict(), "repeats": repeats, "repeat_offset": repeat_offset,
            "reference": dataclasses.asdict(case.reference) if getattr(case, "reference", None) else None,
            "experiment_path": str(exp.path) if getattr(exp, "path", "") else None,
            "experiment_sha256": getattr(exp, "sha256", None),
            # the prompt's category and chat form within a workload (only when it has them: a study's
            # id hashes the payload): a chat prompt goes through the target's chat template there too
            **({"category": case.category} if getattr(case, "category", None) else {}),
            **({"chat": True, "history": [list(m) for m in case.history]} if getattr(case, "chat", False) else {})}


def experiment_payload(exp: Any) -> dict[str, Any]:
    """The whole experiment as a work item carries it (every case portable, settings decided here):
    the worker rebuilds it (``executors.experiment_of``) and never reads an experiment file."""
    first = case_payload(exp, exp.cases[0], 1) if exp.cases else {}
    return {"experiment": exp.name, "engine": exp.engine, "repeats": exp.repeats,
            "experiment_path": first.get("experiment_path"), "experiment_sha256": first.get("experiment_sha256"),
            "cases": [case_payload(exp, c, 1) for c in exp.cases]}


def experiment_items(exp: Any, repeats: int | None = None, split_repeats: bool = False) -> list[WorkItem]:
    n = repeats or exp.repeats
    items = []
    for case in exp.cases:
        if split_repeats:
            items += [WorkItem(f"{case.name}#r{r}", "pair", case_payload(exp, case, 1, r)) for r in range(n)]
        else:
            items.append(WorkItem(case.name, "pair", case_payload(exp, case, n)))
    return items


def study_items(exp: Any, machines: list[str], *, axes: dict[str, Any] | None = None,
                modes: tuple[str, ...] | None = None, setups: Any = None, budget: Any = None,
                fixed_grid: bool = False, over_prompts: bool = True, count_loops: bool = False) -> list[WorkItem]:
    """One ``study`` item per machine, pinned there: the best setup (draft length, draft file,
    n-gram mode) is a property of the machine, so each machine runs the whole study for itself and
    no other stands in for it. ``axes``: the setups' settings (``draft_max``, ``draft_variant``), as
    ``sweep`` parses them; ``modes`` ``()``: none, None: every mode the engine runs; ``setups``:
    instead, the setups themselves (an experiment's cases over its prompt set, ``studies.methods``);
    ``budget``: each machine's study budget (a ``studies.budget.Budget``, parsed once, on the coordinator)."""
    from llamaspec.cluster import executors

    payload = {**experiment_payload(exp), "axes": {a: list(v) for a, v in (axes or {}).items()},
               **({"setups": executors.setups_payload(setups)} if setups else {}),
               "modes": list(modes) if modes is not None else None, "fixed_grid": fixed_grid,
               "over_prompts": over_prompts, "count_loops": count_loops,
               **({"budget": dataclasses.asdict(budget)} if budget is not None else {})}
    return [WorkItem(f"study@{m}", "study", payload, machine=m) for m in machines]


def run_studies(exp: Any, address: str | None, store: Any, *, machines: list[str] | None = None, accel: str = "auto",
                **study_options: Any) -> tuple[Any, dict[str, workload.WorkloadDecision]]:
    """``sweep --cluster``: every machine runs the study for itself; each machine's answer is
    decided here, from its points as stored here (:func:`study_decisions`). Returns (ItemsReport,
    machine -> its decision)."""
    from llamaspec.cluster.coordinator import run_items
    from llamaspec.cluster.sink import StoreSink

    check_engine(exp)
    wanted = requirements(exp, accel)
    pool = open_pool(address, machines)
    try:
        names = sorted(w.machine for w in pool.workers())
        items = study_items(exp, names, **study_options)
        sid = cluster_study_id(exp, items, wanted)
        report = run_items(sid, items, pool, StoreSink(store, kind="cluster-study"), wanted)
    finally:
        pool.close()
    return report, study_decisions(store, sid, exp, over_prompts=bool(study_options.get("over_prompts", True)),
                                   count_loops=bool(study_options.get("count_loops")))


def study_decisions(store: Any, study: str, exp: Any, *, over_prompts: bool = True,
                    count_loops: bool = False) -> dict[str, workload.WorkloadDecision]:
    """Each machine's answer to a cluster study, decided on the coordinator from the points its
    study measured (stored here under ``GROUP@MACHINE``) by the decision a study on one machine
    makes (:func:`llamaspec.studies.study.stored_decision`: the same setups, named by the study,
    the same speedup model, scope, ``count_loops``, hold on a changed load and setups measured no
    more), whatever the worker's own search was. ``over_prompts``: the prompts a machine timed are
    a sample of the workload (False: ``--whole-workload``)."""
    from llamaspec.cluster.executors import setups_from
    from llamaspec.cluster.sink import machine_of, machine_suffix
    from llamaspec.studies.state import Load
    from llamaspec.studies.study import stored_decision

    out: dict[str, workload.WorkloadDecision] = {}
    for item in sorted(store.runs(group_id=study, status="ok"), key=lambda r: r["id"]):
        machine = machine_of(item) or "?"
        summary = item.get("summary") or {}
        done = (summary.get("study") or [{}])[0]
        if not done.get("study_id") or not summary.get("setups"):
            continue
        load = Load(tuple((done.get("load") or {}).get("blocks") or ()))
        out[machine] = stored_decision(exp, setups_from(summary["setups"]), store, done["study_id"], load,
                                       stopped=done.get("stopped") or {}, over_prompts=over_prompts,
                                       count_loops=count_loops, where=machine_suffix(machine))
    return dict(sorted(out.items()))


def check_engine(exp: Any) -> None:
    """Refuse, before connecting or queueing anything, an experiment whose engine the workers do not
    run: its measurements would be another engine's, stored under its name."""
    from llamaspec.cluster import executors

    executors.refuse_engine(exp.engine, f"experiment {exp.name}")


def requirements(exp: Any, accel: str = "auto") -> Requirements:
    """The coordinator's own engine version and options (from the engine, through the registry),
    and its model hashes where it has the files (None where it has not: the first machine's then
    binds the others)."""
    from llamaspec.models import store
    from llamaspec.registry import engines

    check_engine(exp)  # the engine is the experiment's, one the workers provide for themselves
    engine = exp.engine
    own = engines.machine_requirements(engine, exp)
    labels = sorted({c.target.label for c in exp.cases} | {c.draft.label for c in exp.cases if c.draft})
    models: dict[str, str | None] = {}
    for label in labels:
        name, _, variant = label.partition(":")
        done = store.finished(name, variant)
        models[label] = done.sha256 if done is not None else None
    return Requirements(commit=own["commit"], accel=accel, engine=engine, options={"rpc": own["rpc"]}, models=models)


def cluster_study_id(exp: Any, items: list[WorkItem], wanted: Requirements) -> str:
    """Same experiment, items and requirements: same study (a rerun resumes it). The id hashes the
    engine's identity (engine, build commit, accelerator, build options), so another build's or
    another accelerator's points are never resumed as this one's."""
    identity = {"engine": wanted.engine, "commit": wanted.commit, "accel": wanted.accel, "options": wanted.options}
    blob = json.dumps({"items": [dataclasses.asdict(i) for i in items], "identity": identity, "models": wanted.models},
                      sort_keys=True, default=str)
    return f"cluster-{exp.name}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


LOCAL = "local"  # --cluster local: this machine alone, through the cluster's code path


def open_pool(address: str | None, machines: list[str] | None = None) -> Any:
    """A Ray pool on the cluster at ``address`` (or RAY_ADDRESS); ``local`` (or neither): this
    machine as the one worker, on the same code path (a dry run before a real cluster)."""
    import os
    import platform

    if address != LOCAL and (address or os.environ.get("RAY_ADDRESS")):
        from llamaspec.cluster import raypool

        raypool.connect(address)
        return raypool.RayPool(machines)
    from llamaspec.cluster.local import LocalPool

    return LocalPool([platform.node() or "local"])


def run_experiment(exp: Any, address: str | None, store: Any, *, split_repeats: bool = False,
                   machines: list[str] | None = None, accel: str = "auto") -> tuple[Any, dict[str, Any]]:
    """The whole of ``run --cluster``: items (the cases), requirements, study id, pool, the study
    loop, the per-machine summary. Returns (ItemsReport, per machine its figures per case,
    :func:`summary.per_machine`)."""
    from llamaspec.cluster import summary
    from llamaspec.cluster.coordinator import run_items
    from llamaspec.cluster.sink import StoreSink

    check_engine(exp)
    repeats = None
    if not isinstance(exp.repeats, int):  # "auto" needs the run core's stopping rule
        from llamaspec.studies import run as runs

        repeats = runs.repeat_bounds(exp.repeats)[1]
    items = experiment_items(exp, repeats, split_repeats)
    wanted = requirements(exp, accel)
    sid = cluster_study_id(exp, items, wanted)
    pool = open_pool(address, machines)
    try:
        report = run_items(sid, items, pool, StoreSink(store), wanted)
    finally:
        pool.close()
    return report, summary.per_machine(store, sid)
