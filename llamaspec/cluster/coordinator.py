"""The coordinator: shards a study's work items over the machines, stores every result itself,
hands a lost machine's unfinished work back to the queue, and reports per-machine progress.

It knows machines only through the small ``Pool``/``WorkerHandle`` interface below (futures in,
plain dicts out), so the same loop drives Ray actors (``llamaspec.cluster.raypool``) and local
threads (``llamaspec.cluster.local``), and is tested without either.

Rules, stated once:

- each machine measures one item at a time (two measurements sharing a machine would measure
  each other); an item carries its own baselines, measured on the same machine;
- the coordinator is the only writer of the results store (``Sink``); workers return results;
- a machine whose llama.cpp commit or model hashes differ from the study's is refused before
  anything runs, with one line naming it and the difference; so is one that cannot prepare
  (no compiler, no disk);
- a machine that dies mid-study hands its unfinished items back; finished ones stay stored; a
  rerun skips stored items (``Sink.done_keys``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from llamaspec.base.errors import LlamaspecError
from llamaspec.cluster.queue import WorkQueue
from llamaspec.cluster.work import Requirements, WorkerInfo, WorkItem, mismatch, pin

log = logging.getLogger(__name__)


class WorkerHandle(Protocol):
    """One machine's worker as the coordinator sees it."""

    machine: str

    def prepare(self, wanted: Requirements) -> Future[dict[str, Any]]:
        """Build/fetch what the study needs there; resolves to ``{"ok": True, "info": WorkerInfo}``
        or ``{"ok": False, "error": ..., "hint": ...}``."""
        ...

    def submit(self, item: WorkItem) -> Future[dict[str, Any]]:
        """Run one item there; resolves to the executor's result dict (``ok`` true or false)."""
        ...


class Pool(Protocol):
    def workers(self) -> list[WorkerHandle]:
        ...

    def is_lost(self, exc: BaseException) -> bool:
        """Whether a future's exception means the machine (or its worker) went away."""
        ...

    def close(self) -> None:
        ...


class Sink(Protocol):
    """Where finished items go: the results store, written by the coordinator alone."""

    def done_keys(self, study: str) -> set[str]:
        ...

    def save(self, study: str, item: WorkItem, machine: str, result: dict[str, Any]) -> None:
        ...


@dataclass
class ItemsReport:
    study: str
    total: int
    skipped: int  # already stored by an earlier run
    done: dict[str, str] = field(default_factory=dict)  # key -> machine
    failed: dict[str, str] = field(default_factory=dict)  # key -> error (stored as failed)
    refused: dict[str, str] = field(default_factory=dict)  # machine -> why
    lost: dict[str, list[str]] = field(default_factory=dict)  # machine -> keys handed back
    not_run: dict[str, str] = field(default_factory=dict)  # key -> why (pinned to a machine that is not there)
    per_machine: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0


def admit(pool: Pool, wanted: Requirements, timeout: float = 3600.0) -> tuple[list[tuple[WorkerHandle, WorkerInfo]], dict[str, str], Requirements]:
    """Prepare every machine (in parallel) and keep those that match the study and each other.

    Open requirements (a commit or model hash the study leaves to the machines) are pinned by the
    first machine in name order that prepared; later ones must match it."""
    workers = sorted(pool.workers(), key=lambda w: w.machine)
    if not workers:
        raise LlamaspecError("the cluster has no llamaspec machines",
                             hint="start workers with `ray start --address HEAD:6379 --resources '{\"llamaspec:NAME\": 1}'`")
    futures = {w.prepare(wanted): w for w in workers}
    deadline = time.monotonic() + timeout
    while True:
        _done, waiting = wait(futures, timeout=min(30.0, max(0.0, deadline - time.monotonic())))
        if not waiting or time.monotonic() >= deadline:
            break
        # A first study on a machine builds llama.cpp and fetches models there: minutes, not a hang.
        log.info("waiting for %s to prepare (building llama.cpp or fetching models there, or the machine is "
                 "busy with another study)", ", ".join(sorted(futures[f].machine for f in waiting)))
    refused: dict[str, str] = {}
    admitted: list[tuple[WorkerHandle, WorkerInfo]] = []
    pinned = wanted
    for fut, w in sorted(futures.items(), key=lambda kv: kv[1].machine):
        if not fut.done():
            refused[w.machine] = f"worker {w.machine} did not finish preparing within {timeout:.0f} s"
            continue
        try:
            answer = fut.result()
        except BaseException as exc:  # noqa: BLE001 - a lost machine's future raises the transport's error
            if not pool.is_lost(exc):
                raise
            refused[w.machine] = f"worker {w.machine} went away while preparing: {_short(exc)}"
            continue
        if not answer.get("ok"):
            refused[w.machine] = f"worker {w.machine} cannot prepare: {answer.get('error')}" + (
                f" ({answer['hint']})" if answer.get("hint") else "")
            continue
        info: WorkerInfo = answer["info"]
        why = mismatch(pinned, info)
        if why:
            refused[w.machine] = why
            continue
        pinned = pin(pinned, info)
        admitted.append((w, info))
    for line in refused.values():
        log.warning("refused: %s", line)
    return admitted, refused, pinned


def run_items(study: str, items: Sequence[WorkItem], pool: Pool, sink: Sink, wanted: Requirements, *,
              on_progress: Callable[[str], None] | None = None, progress_every: float = 10.0,
              on_result: Callable[[str, str, dict[str, Any]], None] | None = None) -> ItemsReport:
    """Run ``items`` over the pool's machines; store each result through ``sink`` as it arrives."""
    from llamaspec.cluster import executors

    executors.check_items(items)  # an engine the workers do not run: refused before anything is queued
    start = time.monotonic()
    stored = sink.done_keys(study)
    todo = [i for i in items if i.key not in stored]
    report = ItemsReport(study, total=len(items), skipped=len(items) - len(todo))
    if report.skipped:
        log.info("%d of %d items already stored: resuming", report.skipped, len(items))
    if not todo:
        return report
    admitted, report.refused, _pinned = admit(pool, wanted)
    if not admitted:
        first = next(iter(report.refused.values()), "no machine answered")
        raise LlamaspecError(f"no machine can take part in study {study}: {first}",
                             hint="fix or remove the refused workers (see the lines above), then rerun")
    queue = WorkQueue(todo)
    idle = [w for w, _info in admitted]
    alive = {w.machine for w in idle}
    in_flight: dict[Future[dict[str, Any]], tuple[WorkerHandle, WorkItem]] = {}
    progress = on_progress or (lambda line: log.info("%s", line))
    last_progress = 0.0

    def drop_orphans() -> None:
        for item in queue.orphans(alive):
            why = report.refused.get(item.machine or "") or f"machine {item.machine} is not taking part (lost or not in the cluster)"
            report.not_run[item.key] = why
            log.warning("not run: %s, pinned to %s: %s", item.key, item.machine, why)

    drop_orphans()
    while not queue.finished():
        for w in list(idle):
            item = queue.take(w.machine)
            if item is None:
                continue
            idle.remove(w)
            in_flight[w.submit(item)] = (w, item)
        if not in_flight:
            left = len(queue.pending)
            raise LlamaspecError(f"every machine of study {study} was lost; {left} of {len(todo)} items are not done "
                                 f"({len(report.done)} finished and stored)",
                                 hint="bring the machines back (or add others) and rerun the same command: it resumes")
        finished, _ = wait(list(in_flight), timeout=progress_every, return_when=FIRST_COMPLETED)
        for fut in finished:
            w, item = in_flight.pop(fut)
            try:
                result = fut.result()
            except BaseException as exc:  # noqa: BLE001 - see is_lost
                if not pool.is_lost(exc):
                    raise
                queue.give_back(item.key)
                report.lost.setdefault(w.machine, []).append(item.key)
                alive.discard(w.machine)
                drop_orphans()
                log.warning("machine %s was lost (%s): item %s goes back to the queue; %d machine(s) left",
                            w.machine, _short(exc), item.key, len(alive))
                continue
            sink.save(study, item, w.machine, result)
            queue.complete(item.key)
            report.done[item.key] = w.machine
            if not result.get("ok", False):
                report.failed[item.key] = str(result.get("error"))
            if on_result is not None:
                on_result(item.key, w.machine, result)
            idle.append(w)
        now = time.monotonic()
        if finished or now - last_progress >= 6 * progress_every:  # unchanged: a line a minute says it is alive
            progress(queue.progress_line(len(alive)))
            last_progress = now
    report.per_machine = {m: {"done": st.done, "busy_seconds": round(st.busy_seconds, 3),
                              "per_minute": st.per_minute(), "lost": st.lost} for m, st in queue.stats.items()}
    report.seconds = time.monotonic() - start
    return report


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__
