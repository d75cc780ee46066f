"""The results store as the coordinator writes it: one run row per finished work item, under the
study's id (``sweep_id``) and the item's key (``point_key``), with the machine that measured it.

The machine goes into the runs table's ``machine`` column (what ``report --compare machine``
groups by) and into the run's provenance; ``machine_of(run)`` also reads rows stored before that
column existed (provenance, or the summary where an early version put it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llamaspec.cluster.work import WorkItem
from llamaspec.results import MeasurementRow, Store

_ROW_FIELDS = {f.name for f in dataclasses.fields(MeasurementRow)} - {"run_id", "id", "created_at"}
# Fields a row must be given (the others keep their defaults when a worker's llamaspec lacks them).
_REQUIRED = {f.name for f in dataclasses.fields(MeasurementRow)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - {"run_id"}


class StoreSink:
    def __init__(self, store: Store, kind: str = "cluster") -> None:
        self.store = store
        self.kind = kind

    def done_keys(self, study: str) -> set[str]:
        return {r["point_key"] for r in self.store.runs(sweep_id=study, status="ok") if r.get("point_key")}

    def save(self, study: str, item: WorkItem, machine: str, result: dict[str, Any]) -> None:
        provenance = {**(result.get("provenance") or {}), "machine": machine}
        if item.payload.get("point"):
            provenance["point"] = item.payload["point"]  # the sweep point's label (the key is its hash)
        run_id = self.store.start_run(experiment=result.get("experiment") or study, case_name=result.get("case") or item.key,
                                      settings=result.get("settings") or {}, provenance=provenance, kind=self.kind,
                                      sweep_id=study, point_key=item.key, machine=machine,
                                      prompt_id=result.get("prompt_id"), category=result.get("category"),
                                      backend_name=provenance.get("backend"))
        for i, m in enumerate(result.get("measurements") or ()):
            data: dict[str, Any] = {f: m.get(f) for f in _ROW_FIELDS if f in m or f in _REQUIRED}
            data["repeat"] = i if data["repeat"] is None else data["repeat"]
            data["argv"] = list(data["argv"] or ())
            self.store.add_measurement(MeasurementRow(run_id=run_id, **data))
        # The summary stays exactly the executor's (Summary.from_dict reads it back field by field).
        summary = result.get("summary") or {}
        self.store.finish_run(run_id, result.get("status") or ("ok" if result.get("ok") else "failed"), summary,
                              result.get("error"))


def machine_of(run: dict[str, Any]) -> str | None:
    """The machine a stored run was measured on (the ``machine`` column; provenance for older rows)."""
    return run.get("machine") or (run.get("provenance") or {}).get("machine") or (run.get("summary") or {}).get("machine")
