"""The worker: one per machine, owning that machine's llama.cpp build and model files, running
one work item at a time.

It is a plain class; ``llamaspec.cluster.raypool`` wraps it in a Ray actor pinned to its machine
(Ray runs an actor's calls one after another, so "one at a time" holds by construction), and
``llamaspec.cluster.local`` runs it in a thread for one-machine studies and tests.

Nothing here raises across the boundary: ``prepare`` and ``execute`` return ``ok: False`` with
the error and its hint, so the coordinator prints the worker's own message.
"""

from __future__ import annotations

import logging
import platform
import tempfile
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.cluster import executors
from llamaspec.cluster.work import Requirements, WorkerInfo, WorkItem

log = logging.getLogger(__name__)


class MachineWorker:
    def __init__(self, machine: str, scratch: str | None = None, reap: bool = False) -> None:
        self.machine = machine
        self.env: Any = None  # what the engine provided here (engines.provide_machine), once prepared
        self.wanted: Requirements | None = None
        self.scratch = Path(scratch or tempfile.mkdtemp(prefix=f"llamaspec-worker-{executors.safe_name(machine)}-"))
        self.state: dict[str, Any] = {}  # executors keep per-machine things here (a scratch store, an engine)
        if reap:  # a worker process of its own (a Ray actor): servers must not outlive it, even killed
            from llamaspec.cluster import reaper

            self.reaper = reaper.watch(log_path=self.scratch / "reaper.log")

    def prepare(self, wanted: Requirements) -> dict[str, Any]:
        """Fetch the source, build llama.cpp and fetch/derive the models, all through llamaspec's own
        cached, sha256-checked steps (a second study on the same machine reuses them)."""
        try:
            return {"ok": True, "info": self._prepare(wanted)}
        except LlamaspecError as exc:
            return {"ok": False, "error": exc.message, "hint": exc.hint}

    def _prepare(self, wanted: Requirements) -> WorkerInfo:
        from llamaspec.registry import engines

        self.wanted = wanted
        if wanted.engine is None:
            return WorkerInfo(machine=self.machine, host=platform.node(), commit=None)
        self.env = engines.provide_machine(wanted.engine, wanted.accel, dict(wanted.options), list(wanted.models),
                                            self.machine)
        shas = {label: self.env.model(label).sha256 for label in wanted.models}
        return WorkerInfo(machine=self.machine, host=platform.node(), commit=self.env.commit, models=shas)

    def execute(self, item: WorkItem) -> dict[str, Any]:
        if self.wanted is None:
            return {"ok": False, "error": f"worker {self.machine} was not prepared", "hint": "call prepare() first"}
        try:
            run = executors.get(item.kind)
            if item.kind in executors.MEASURING:
                from llamaspec.base import lock

                # The machine-wide measurement lock, as `llamaspec run` takes it: a user's own run on
                # this machine (or another study's worker) and this item would measure each other.
                with lock.measuring(f"llamaspec cluster item {item.key} on {self.machine}",
                                    on_wait=lambda holder: log.info("%s: waiting for another measurement here: pid %s (%s)",
                                                                    self.machine, holder.get("pid"), holder.get("what"))):
                    result = run(self, item)
            else:
                result = run(self, item)
        except LlamaspecError as exc:
            result = {"ok": False, "status": "failed", "error": exc.message, "hint": exc.hint}
        result["machine"] = self.machine
        return result

    def close(self) -> None:
        """Stop what this worker keeps running (llama-servers) and close its scratch store."""
        if self.env is not None:
            self.env.close()
        store = self.state.pop("store", None)
        if store is not None:
            store.close()

