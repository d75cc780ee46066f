"""One measurement at a time per machine.

Two measurements running at once measure each other: a ``llamaspec run`` started beside a
``llamaspec sweep`` stored a 0.12x "speedup". Everything that times a generation does it inside
``with measuring("what"):``, which holds an exclusive ``flock`` on one lock file
(``paths.lock_path()``: ``LLAMASPEC_LOCK``, default ``measure.lock`` in the cache folder, so one
per user and machine). A second measurement queues behind the first (``wait=True``) or stops at
once with who holds it (``wait=False``).

The kernel's lock is the truth: it is released when its holder exits, however it dies, so a
killed measurement never blocks the next one. Beside it, ``measure.lock.json`` describes the
holder (pid, host, command, what, since) for the waiting side's message; it is written after the
lock is taken and removed before it is released, and it is never trusted on its own.

Nesting within one process is a no-op (a sweep holds the lock while each of its cases takes it
again); another thread of the same process waits for the first to finish.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from llamaspec.base import atomic, paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import duration

log = logging.getLogger(__name__)

Holder = dict[str, Any]

# Two readings of one process's start time differ by clock rounding only; a reused pid started
# later than this. (Linux counts start times in clock ticks from a boot time rounded to seconds.)
START_TOLERANCE_S = 1.0

# How long a waiting process looks for the holder's description: the holder writes it right
# after taking the lock, so a missing one is usually a few milliseconds from appearing.
_DESCRIPTION_WAIT_S = 1.0

_thread_lock = threading.RLock()  # serialises threads; re-entrant for nesting in one thread
_depth = 0
_holder: Holder | None = None


def this_process() -> tuple[int, str, float | None]:
    """(pid, host, start time) of this process; the start time tells a reused pid apart."""
    import psutil

    try:
        started: float | None = psutil.Process().create_time()
    except psutil.Error:
        started = None
    return os.getpid(), socket.gethostname(), started


def process_gone(pid: int, started: float | None) -> bool:
    """Whether a process of this host has ended: no such pid, a zombie, or the pid now belongs to
    a process started at another time than ``started`` (None: not checked)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return started is not None and abs(proc.create_time() - started) > START_TOLERANCE_S
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False  # it exists; whose it is cannot be told


def command(argv: list[str]) -> str:
    """A holder's command line as the user typed it (``llamaspec sweep ...``), shortened."""
    if argv and Path(argv[0]).name in ("llamaspec", "__main__.py"):
        argv = ["llamaspec", *argv[1:]]
    text = shlex.join(argv) if argv else "?"
    return text if len(text) <= 100 else text[:97] + "..."


def describe(holder: Holder) -> str:
    """``pid N (llamaspec sweep x.yaml) since T`` for messages; what is unknown is left out."""
    if holder.get("pid") is None:
        return "a process that left no description (an older llamaspec, or one just starting)"
    where = f" on {holder['host']}" if holder.get("host") and holder["host"] != socket.gethostname() else ""
    text = f"pid {holder['pid']}{where} (`{command(holder.get('argv') or [])}`"
    text += f", {holder['what']})" if holder.get("what") else ")"
    if holder.get("since"):
        text += f" since {holder['since']}"
        if isinstance(holder.get("since_ts"), (int, float)):
            text += f" ({duration(time.time() - holder['since_ts'])} ago)"
    return text


@contextmanager
def measuring(what: str, wait: bool = True, on_wait: Callable[[Holder], None] | None = None) -> Iterator[Holder]:
    """Hold the machine's measurement lock for the block; yields the holder's description
    (pid, host, proc_start, argv, what, since, since_ts, waited_s, lock) for provenance.

    Held by another process: with ``wait``, ``on_wait(holder)`` is called once (default: a log
    line) and the call blocks until it is free; without, LlamaspecError naming the holder.
    Nested in a block of the same process: a no-op that yields the outer holder.
    """
    global _depth, _holder
    with _thread_lock:
        if _depth:
            assert _holder is not None
            _depth += 1
            try:
                yield _holder
            finally:
                _depth -= 1
            return
        lock_file = paths.lock_path()
        fd = _open(lock_file)
        sidecar = _sidecar(lock_file)
        try:
            waited = _acquire(fd, lock_file, wait, on_wait)
            pid, host, started = this_process()
            now = time.time()
            holder: Holder = {"pid": pid, "host": host, "proc_start": started, "argv": list(sys.argv), "what": what,
                              "since": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)), "since_ts": now,
                              "waited_s": round(waited, 3), "lock": str(lock_file)}
            _write_description(sidecar, holder)
            _depth, _holder = 1, holder
            try:
                yield holder
            finally:
                _depth, _holder = 0, None
                with suppress(FileNotFoundError):  # removed while still held: never the next holder's
                    sidecar.unlink()
        finally:
            os.close(fd)  # releases the lock


def _open(lock_file: Path) -> int:
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            return os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:
            return os.open(lock_file, os.O_RDONLY)  # another user's lock file: flock needs no write access
    except OSError as exc:
        raise LlamaspecError(f"cannot open the measurement lock {lock_file}: {exc.strerror or exc}",
                             hint="set LLAMASPEC_LOCK to a file in a folder you can write to") from exc


def _acquire(fd: int, lock_file: Path, wait: bool, on_wait: Callable[[Holder], None] | None) -> float:
    """Take the lock; returns the seconds spent waiting for it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return 0.0
    except BlockingIOError:
        pass
    except OSError as exc:
        raise _cannot_lock(lock_file, exc) from exc
    holder = _description(lock_file)
    if not wait:
        raise LlamaspecError(f"another measurement is running: {describe(holder)}",
                             hint="wait for it, or run without --no-wait to queue behind it")
    if on_wait is not None:
        on_wait(holder)
    else:
        log.warning("waiting for %s to finish measuring", describe(holder))
    start = time.monotonic()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C interrupts it (PEP 475 retries only silent signals)
    except OSError as exc:
        raise _cannot_lock(lock_file, exc) from exc
    waited = time.monotonic() - start
    log.info("measurement lock %s taken after waiting %s", lock_file, duration(waited))
    return waited


def _cannot_lock(lock_file: Path, exc: OSError) -> LlamaspecError:
    return LlamaspecError(f"cannot lock {lock_file}: {exc.strerror or exc}",
                          hint="its file system may not support locks; set LLAMASPEC_LOCK to a file on a local disk")


def _sidecar(lock_file: Path) -> Path:
    return lock_file.with_name(lock_file.name + ".json")


def _write_description(sidecar: Path, holder: Holder) -> None:
    # Atomic (a reader sees the old description or the new one, never half) and best effort:
    # the lock works without it (a folder others cannot write to, a full disk).
    try:
        atomic.write_text(sidecar, json.dumps(holder, sort_keys=True))
    except OSError as exc:
        log.debug("could not describe the measurement lock's holder in %s: %s", sidecar, exc)


def _description(lock_file: Path) -> Holder:
    """The holder as its description says, if that description is believable: it exists, parses,
    and (on this host) names a live process. Else ``{"pid": None}``: held, but by whom is unknown."""
    sidecar = _sidecar(lock_file)
    deadline = time.monotonic() + _DESCRIPTION_WAIT_S
    while True:
        holder = _read(sidecar)
        if holder is not None:
            return holder
        if time.monotonic() >= deadline:
            return {"pid": None}
        time.sleep(0.05)


def _read(sidecar: Path) -> Holder | None:
    try:
        holder = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
        return None
    if holder.get("host") == socket.gethostname() and process_gone(holder["pid"], holder.get("proc_start")):
        return None  # left by a killed holder: whoever holds the lock now has not described itself yet
    return holder


def held() -> Holder | None:
    """This process's holder description while it holds the lock (for provenance), else None."""
    return dict(_holder) if _holder is not None else None
