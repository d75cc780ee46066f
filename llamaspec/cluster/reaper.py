"""Nothing of llama.cpp outlives the worker that started it.

A cluster worker starts llama.cpp programs in process groups of their own (``proc.run`` and
``proc.Background``: Ctrl-C at a terminal must not reach them half-way), so when the worker is
killed outright (its node removed, ``ray.kill``, the OOM killer: SIGKILL, no ``atexit``, no
``finally``) they are not killed with it: a llama-server would keep its port and its gigabytes,
an RPC server its layers. The reaper is a small process of its own session that watches the
worker: every ``interval`` it notes the worker's descendants, and once the worker is gone it
terminates what it had noted (then kills what is left), checking each process's start time so a
reused pid is never hit.

``watch()`` starts one for the calling process; the Ray actors start theirs (``MachineWorker(...,
reap=True)``). It exits by itself after the worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def watch(pid: int | None = None, interval: float = 0.2, log_path: Path | None = None) -> Any:
    """Start a reaper for ``pid`` (default: this process); returns its ``proc.Background``."""
    from llamaspec.base import proc

    target = pid or os.getpid()
    return proc.Background([sys.executable, "-m", "llamaspec.cluster.reaper", str(target), str(interval)], log_path)


def _descendants(parent: Any, me: int) -> dict[int, Any]:
    import psutil

    found: dict[int, Any] = {}
    with contextlib.suppress(psutil.Error):
        for child in parent.children(recursive=True):
            if child.pid != me:
                found[child.pid] = child
    return found


def reap(pid: int, interval: float = 0.2, grace: float = 3.0,
         on_watching: Callable[[int], None] | None = None) -> list[int]:
    """Watch ``pid`` until it is gone, then stop every descendant it had; returns their pids.
    ``on_watching(n)`` is told once, after the first look, how many descendants it noted then."""
    import psutil

    me = os.getpid()
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return []
    seen: dict[int, Any] = {}
    while True:
        try:
            if not parent.is_running() or parent.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        seen.update(_descendants(parent, me))
        if on_watching is not None:
            on_watching(len(seen))
            on_watching = None
        time.sleep(interval)
    left = [p for p in seen.values() if _alive(p)]  # is_running compares start times: a reused pid is not ours
    for p in left:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(p.pid) == p.pid:  # a group leader: its group (a program's own children) too
                os.killpg(p.pid, signal.SIGTERM)
            else:
                p.terminate()
    _gone, alive = psutil.wait_procs(left, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            p.kill()
    return [p.pid for p in left]


def _alive(p: Any) -> bool:
    import psutil

    try:
        return bool(p.is_running()) and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def main(argv: list[str]) -> int:
    pid = int(argv[0])
    interval = float(argv[1]) if len(argv) > 1 else 0.2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the worker's terminal is not for us
    # one line in the worker's reaper.log once it watches: from then on, what the worker starts is covered
    stopped = reap(pid, interval, on_watching=lambda n: print(f"llamaspec reaper: watching worker {pid} "
                                                              f"({n} process(es) under it now)", flush=True))
    if stopped:
        print(f"llamaspec reaper: worker {pid} is gone; stopped {len(stopped)} process(es) it left: "
              f"{', '.join(map(str, stopped))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
