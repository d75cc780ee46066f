"""The results store as the coordinator writes it: one run row per finished work item, under the
study's id (a ``Group`` of kind ``study``) and the item's key (``point_key``), with the machine that
measured it; and the runs an item made on its way (a machine's study points, ``result["runs"]``),
each under ``GROUP@MACHINE`` (a group of the kind the item made, :func:`machine_suffix`), where
the coordinator decides from them (a cluster study: :func:`llamaspec.cluster.study.study_decisions`).

The machine goes into the runs table's ``machine`` column (what ``report --compare machine``
groups by) and into the run's provenance; ``machine_of(run)`` also reads rows stored before that
column existed (provenance, or the summary where an early version put it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llamaspec.cluster.work import WorkItem
from llamaspec.store.results import Store
from llamaspec.store.rows import Group, MeasurementRow

_ROW_FIELDS = {f.name for f in dataclasses.fields(MeasurementRow)} - {"run_id", "id", "created_at"}
# Fields a row must be given (the others keep their defaults when a worker's llamaspec lacks them).
_REQUIRED = {f.name for f in dataclasses.fields(MeasurementRow)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - {"run_id"}


class StoreSink:
    def __init__(self, store: Store, kind: str = "cluster") -> None:
        self.store = store
        self.kind = kind

    def done_keys(self, study: str) -> set[str]:
        return {r["point_key"] for r in self.store.runs(group_id=study, status="ok") if r.get("point_key")}

    def save(self, study: str, item: WorkItem, machine: str, result: dict[str, Any]) -> None:
        # Runs an item made on its way (a study's points): each stored once, under the machine's own
        # group id (every machine studies the same setups), before the item itself.
        for (group_kind, group_id), runs in _by_group(result.get("runs") or ()).items():
            into = Group(group_kind, group_id + machine_suffix(machine))
            stored = {r["point_key"] for r in self.store.runs(group_id=into.id)}
            for run in runs:
                if run.get("point_key") not in stored:
                    own = {"study": study, **({"tune_config": run["config"]} if run.get("config") else {})}
                    self._store(run, machine, group=into, point_key=run.get("point_key"), kind=run.get("kind") or "sweep",
                                extra=own)
        self._store(result, machine, group=Group("study", study), point_key=item.key, kind=self.kind, extra={},
                    case=item.key)

    def _store(self, result: dict[str, Any], machine: str, *, group: Group, point_key: str | None, kind: str,
               extra: dict[str, Any], case: str | None = None) -> None:
        provenance = {**(result.get("provenance") or {}), "machine": machine, **extra}
        run_id = self.store.start_run(experiment=result.get("experiment") or group.id, case_name=result.get("case") or case or "",
                                      settings=result.get("settings") or {}, provenance=provenance, kind=kind,
                                      group=group, point_key=point_key, machine=machine,
                                      prompt_id=result.get("prompt_id"), category=result.get("category"))
        for i, m in enumerate(result.get("measurements") or ()):
            data: dict[str, Any] = {f: m.get(f) for f in _ROW_FIELDS if f in m or f in _REQUIRED}
            # Executors send each measurement's pair index; one without (an older worker's) gets an
            # index of its own, so it forms no pair with anything (pairs.whole_pairs).
            data["repeat"] = i if data["repeat"] is None else data["repeat"]
            data["argv"] = list(data["argv"] or ())
            self.store.add_measurement(MeasurementRow(run_id=run_id, **data))
        # The summary stays exactly the executor's (Summary.from_dict reads it back field by field).
        summary = result.get("summary") or {}
        self.store.finish_run(run_id, result.get("status") or ("ok" if result.get("ok") else "failed"), summary,
                              result.get("error"))


def _by_group(runs: Any) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The runs an item made, by the group they belong to (a worker before groups had a kind sent
    ``sweep_id``: its runs were a tune's points, the study's form before ``sweep`` held it)."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        key = (str(run.get("group_kind") or "tune"), str(run.get("group_id") or run.get("sweep_id")))
        out.setdefault(key, []).append(run)
    return out


def machine_suffix(machine: str) -> str:
    """What the group id of a run a machine made on its way ends with here (``GROUP@MACHINE``)."""
    return f"@{machine}"


def machine_of(run: dict[str, Any]) -> str | None:
    """The machine a stored run was measured on (the ``machine`` column; provenance for older rows)."""
    return run.get("machine") or (run.get("provenance") or {}).get("machine") or (run.get("summary") or {}).get("machine")
