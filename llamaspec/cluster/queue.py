"""The coordinator's bookkeeping: which items wait, which machine holds which, what is done,
and how fast each machine goes. No Ray, no engine: pure and unit-tested.

Invariants: an item is in exactly one of pending, in flight (on one machine) or done; a lost
machine's items go back to the front of pending; a finished item is never handed out again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from llamaspec.base.progress import duration
from llamaspec.cluster.work import WorkItem


@dataclass
class MachineStats:
    done: int = 0
    busy_seconds: float = 0.0
    lost: int = 0  # items it was holding when it went away

    def per_minute(self) -> float | None:
        return 60.0 * self.done / self.busy_seconds if self.busy_seconds > 0 else None


@dataclass
class WorkQueue:
    items: Iterable[WorkItem]
    clock: Callable[[], float] = time.monotonic
    pending: deque[WorkItem] = field(init=False)
    in_flight: dict[str, tuple[str, WorkItem, float]] = field(init=False, default_factory=dict)  # key -> machine, item, start
    done: dict[str, str] = field(init=False, default_factory=dict)  # key -> machine that did it
    stats: dict[str, MachineStats] = field(init=False, default_factory=dict)
    started: float = field(init=False)

    def __post_init__(self) -> None:
        items = list(self.items)
        keys = [i.key for i in items]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"work item keys must be unique: {', '.join(dupes[:3])}")
        self.pending = deque(items)
        self.started = self.clock()

    @property
    def total(self) -> int:
        return len(self.pending) + len(self.in_flight) + len(self.done)

    def finished(self) -> bool:
        return not self.pending and not self.in_flight

    def take(self, machine: str) -> WorkItem | None:
        """The next item for ``machine``: the first pending one that is not pinned to another
        machine (None: nothing left for it)."""
        index = next((i for i, item in enumerate(self.pending) if item.machine in (None, machine)), None)
        if index is None:
            return None
        item = self.pending[index]
        del self.pending[index]
        self.in_flight[item.key] = (machine, item, self.clock())
        self.stats.setdefault(machine, MachineStats())
        return item

    def complete(self, key: str) -> str:
        """Mark ``key`` done; returns the machine that did it."""
        machine, _item, start = self.in_flight.pop(key)
        self.done[key] = machine
        st = self.stats.setdefault(machine, MachineStats())
        st.done += 1
        st.busy_seconds += self.clock() - start
        return machine

    def give_back(self, key: str) -> None:
        """Return one in-flight item to the front of the queue (its machine failed it or went away)."""
        machine, item, _start = self.in_flight.pop(key)
        self.stats.setdefault(machine, MachineStats()).lost += 1
        self.pending.appendleft(item)

    def orphans(self, machines: Iterable[str]) -> list[WorkItem]:
        """Take out of the queue the pending items pinned to a machine not among ``machines`` (it
        was refused or lost): nothing else may run them."""
        alive = set(machines)
        gone = [item for item in self.pending if item.machine is not None and item.machine not in alive]
        for item in gone:
            self.pending.remove(item)
        return gone

    def eta_seconds(self, machines: int) -> float | None:
        """Remaining items over the machines' combined throughput so far (None until one finished)."""
        rates = [st.done / st.busy_seconds for st in self.stats.values() if st.busy_seconds > 0 and st.done]
        if not rates:
            return None
        rate = sum(rates) / len(rates) * max(machines, 1)  # per-machine mean rate times the machines left
        return (len(self.pending) + len(self.in_flight)) / rate if rate > 0 else None

    def progress_line(self, machines: int) -> str:
        per = ", ".join(
            f"{m} {st.done} done" + (f" ({st.per_minute():.1f}/min)" if st.per_minute() else "")
            for m, st in sorted(self.stats.items()))
        eta = self.eta_seconds(machines)
        return (f"{len(self.done)}/{self.total} items" + (f"; {per}" if per else "")
                + (f"; ETA {duration(eta)}" if eta is not None and not self.finished() else ""))


