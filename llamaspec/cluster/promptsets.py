"""A prompt set over the machines: one work item per (case, prompt), kind ``prompt``, and the
set's figures per machine.

Each item is measured start to finish on one machine (its baseline and speculative generation
seconds apart on that machine's llama-server), so every per-prompt speedup is within one machine.
The set-level figures are then computed per machine with ``promptset.set_statistics`` (the same
total-token, geometric-mean and mean speedups with bootstrap intervals as a one-machine run).
Across machines only the per-prompt ratios are pooled ("all machines": geometric and arithmetic
means of within-machine ratios); total-token speedups are never pooled across machines, because
tokens and seconds of a fast machine would outweigh a slow one's.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from llamaspec.base import stats
from llamaspec.cluster.sink import machine_of
from llamaspec.cluster.work import WorkItem
from llamaspec.measure import estimators
from llamaspec.store.results import Store

if TYPE_CHECKING:
    from llamaspec.promptset import GroupFigures, PromptFigures, SetFigures

ALL = "all machines"


def prompt_items(exp: Any, prompt_set: Any, repeats: int) -> list[WorkItem]:
    """One ``prompt`` item per case and prompt, keyed ``case/prompt-id``, case by case in set order."""
    from llamaspec.cluster.study import case_payload

    items = []
    for case in exp.cases:
        base = case_payload(exp, case, repeats)
        for p in prompt_set.prompts:
            # Prompt sets run on llama-server whatever the experiment's engine (as on one machine):
            # the item names the engine that measures it.
            payload = {**base, "engine": "llama-server", "prompt": p.prompt, "prompt_id": p.id, "category": p.category,
                       "prompt_item": dataclasses.asdict(p)}
            items.append(WorkItem(f"{case.name}/{p.id}", "prompt", payload))
    return items


def per_machine(store: Store, study: str) -> dict[str, dict[str, SetFigures]]:
    """case -> machine -> ``promptset.set_statistics`` of that machine's prompts (plus ``ALL``:
    per-prompt ratios pooled over machines, each ratio within its machine)."""
    from llamaspec import promptset

    latest: dict[str, dict[str, Any]] = {}  # a failed item measured again by a rerun counts once, as rerun
    for run in store.runs(group_id=study):
        if (run["status"] in ("ok", "failed") and (run.get("summary") or {}).get("id") is not None
                and (run["point_key"] not in latest or run["id"] > latest[run["point_key"]]["id"])):
            latest[run["point_key"]] = run
    grouped: dict[str, dict[str, list[PromptFigures]]] = defaultdict(lambda: defaultdict(list))
    for run in sorted(latest.values(), key=lambda r: r["id"]):
        grouped[run["case_name"]][machine_of(run) or "?"].append(promptset.PromptFigures.from_dict(run["summary"]))
    out: dict[str, dict[str, SetFigures]] = {}
    for case, machines in grouped.items():
        out[case] = {m: promptset.set_statistics(items) for m, items in sorted(machines.items())}
        if len(machines) > 1:
            pooled = promptset.set_statistics([i for items in machines.values() for i in items])
            out[case][ALL] = dataclasses.replace(pooled, set=_unpooled(pooled.set),
                                                 categories={c: _unpooled(g) for c, g in pooled.categories.items()})
    return out


def _unpooled(group: GroupFigures) -> GroupFigures:
    """Tokens and seconds of different machines are not one figure (decode, and end to end)."""
    return dataclasses.replace(group, total_speedup=None, e2e_total_speedup=None)


def describe(per: dict[str, dict[str, SetFigures]]) -> list[str]:
    """One line per case and machine: prompts counted, total-token and geometric-mean speedups with
    their 95 % intervals, acceptance, identical-output rate."""
    def fmt(s: stats.Spread | None) -> str:
        return s.text(suffix="x") if s else "-"

    lines = []
    for case, machines in per.items():
        lines.append(f"{case}:")
        for machine, figures in machines.items():
            s = figures.set
            acc = stats.percent_text(s.acceptance, 1)
            same = stats.percent_text(s.lossless_rate)
            total = fmt(s.total_speedup) if machine != ALL else "(not pooled)"
            lines.append(f"  {machine:<14} {s.counted:>3} prompts  total-token {total:<24} geomean "
                         f"{fmt(s.geomean_speedup):<24} accept {acc:>6}  identical {same}"
                         + (f"  ({s.failed} failed)" if s.failed else "")
                         + (f"  ({s.ended_early} ended early, not counted)" if s.ended_early else ""))
    if per:
        lines.append(f"a set's speedup: {estimators.WORKLOAD}, per machine")
    return lines


def run_prompt_set(exp: Any, prompt_set: Any, address: str | None, store: Store, *, repeats: int = 1,
                   machines: list[str] | None = None, accel: str = "auto") -> tuple[Any, dict[str, dict[str, SetFigures]]]:
    """The whole of ``prompts run --cluster``: items, requirements, study id (a rerun resumes), the
    study loop, the per-machine set figures. Returns (StudyReport, per_machine(...))."""
    from llamaspec.cluster.coordinator import run_study
    from llamaspec.cluster.sink import StoreSink
    from llamaspec.cluster.study import open_pool, requirements, study_id

    items = prompt_items(exp, prompt_set, repeats)
    wanted = requirements(exp, accel)
    sid = study_id(exp, items, wanted)
    pool = open_pool(address, machines)
    try:
        report = run_study(sid, items, pool, StoreSink(store, kind="cluster-prompt"), wanted)
    finally:
        pool.close()
    return report, per_machine(store, sid)
