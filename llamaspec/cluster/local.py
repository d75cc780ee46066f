"""Machines as threads in this process: one-machine studies (the same code path as a cluster,
without Ray) and tests of the coordinator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from llamaspec.cluster.work import Requirements, WorkItem
from llamaspec.cluster.worker import MachineWorker


class WorkerLost(RuntimeError):
    """A local stand-in for a machine that went away (raised by a worker to simulate it)."""


class LocalHandle:
    def __init__(self, machine: str, worker: Any) -> None:
        self.machine = machine
        self.worker = worker
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llamaspec-{machine}")  # one item at a time

    def prepare(self, wanted: Requirements) -> Future[dict[str, Any]]:
        return self._thread.submit(self.worker.prepare, wanted)

    def submit(self, item: WorkItem) -> Future[dict[str, Any]]:
        return self._thread.submit(self.worker.execute, item)

    def shutdown(self) -> None:
        """Close the worker in its own thread (what it opened there, a SQLite store, is that thread's), then end it."""
        close = getattr(self.worker, "close", None)
        if close is not None:
            self._thread.submit(close).result()
        self._thread.shutdown(wait=True, cancel_futures=True)


class LocalPool:
    def __init__(self, machines: Sequence[str] = ("local",), factory: Callable[[str], Any] = MachineWorker) -> None:
        self._handles = [LocalHandle(m, factory(m)) for m in machines]

    def workers(self) -> list[LocalHandle]:
        return list(self._handles)

    def is_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, WorkerLost)

    def close(self) -> None:
        for h in self._handles:
            h.shutdown()
