"""The one subprocess wrapper: argv lists, logged commands, teed logs, timeouts, peak memory."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llamaspec.errors import LlamaspecError

log = logging.getLogger(__name__)

TAIL_LINES = 12


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_bytes: int | None
    timed_out: bool = False

    @property
    def signal_name(self) -> str | None:
        if self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    def describe_exit(self) -> str:
        if self.timed_out:
            return "timed out"
        sig = self.signal_name
        return f"was killed by {sig}" if sig else f"exited with code {self.returncode}"

    def tail(self, lines: int = TAIL_LINES) -> str:
        text = self.stderr.strip() or self.stdout.strip()
        return "\n".join(text.splitlines()[-lines:])


def shell_line(argv: Sequence[str]) -> str:
    """The command as a line one can paste into a shell."""
    return shlex.join(str(a) for a in argv)


class _PeakMemory(threading.Thread):
    """Samples the resident memory of a process and its children (psutil, imported lazily)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            proc = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._halt.is_set():
            try:
                total = proc.memory_info().rss
                for child in proc.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        total += child.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, total)
            self._halt.wait(self.interval)

    def stop(self) -> int | None:
        self._halt.set()
        self.join(timeout=1)
        return self.peak or None


def _pump(stream, sink: list[str], log_file, on_line: Callable[[str], None] | None, lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        if log_file is not None:
            with lock:
                log_file.write(line)
                log_file.flush()
        if on_line is not None:
            on_line(line)
    stream.close()


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log_path: Path | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    what: str | None = None,
    hint: str | None = None,
    on_line: Callable[[str], None] | None = None,
    measure_memory: bool = False,
) -> Completed:
    """Run ``argv``; tee stdout and stderr into ``log_path``; stop it after ``timeout`` seconds.

    With ``check`` a failure raises LlamaspecError naming the exit, the last lines of output
    and the log. ``on_line`` sees every output line as it arrives (for progress).
    """
    args = tuple(str(a) for a in argv)
    line = shell_line(args)
    log.debug("running: %s", line)
    full_env = None if env is None else {**os.environ, **env}
    log_file = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "w")  # noqa: SIM115 - closed below, shared with pump threads
        log_file.write(f"$ {line}\n")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        if log_file:
            log_file.close()
        raise LlamaspecError(f"{what or args[0]}: program not found: {args[0]}", hint=hint) from exc
    except PermissionError as exc:
        if log_file:
            log_file.close()
        raise LlamaspecError(f"{what or args[0]}: not executable: {args[0]}", hint=hint) from exc
    sampler = _PeakMemory(proc.pid) if measure_memory else None
    if sampler:
        sampler.start()
    out: list[str] = []
    err: list[str] = []
    lock = threading.Lock()
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, out, log_file, on_line, lock), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, err, log_file, on_line, lock), daemon=True),
    ]
    for p in pumps:
        p.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _terminate(proc)
    except BaseException:
        _terminate(proc)  # Ctrl-C: never leave llama.cpp running behind us
        raise
    finally:
        for p in pumps:
            p.join(timeout=5)
        peak = sampler.stop() if sampler else None
        if log_file:
            log_file.write(f"# exit status {proc.returncode} after {time.monotonic() - start:.2f} s\n")
            log_file.close()
    done = Completed(args, proc.returncode, "".join(out), "".join(err), time.monotonic() - start, peak, timed_out)
    if check and (timed_out or done.returncode != 0):
        raise_failure(done, what or Path(args[0]).name, log_path, hint)
    return done


def raise_failure(done: Completed, what: str, log_path: Path | None, hint: str | None = None) -> None:
    detail = f"{what} {done.describe_exit()}"
    if done.timed_out:
        detail += f" after {done.seconds:.0f} s"
    tail = done.tail(3)
    if tail:
        detail += ": " + " | ".join(s.strip() for s in tail.splitlines() if s.strip())
    if log_path is not None:
        detail += f" (log: {log_path})"
    if hint is None and done.signal_name == "SIGILL":
        hint = "the binary uses CPU instructions this machine cannot run; rebuild with `llamaspec build --force`"
    raise LlamaspecError(detail, hint=hint or f"run it yourself to see more: {shell_line(done.argv)}")


def _terminate(proc: subprocess.Popen[str], grace: float = 5.0) -> None:
    """Terminate the process group, then kill it if it does not go."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
