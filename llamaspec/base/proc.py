"""The one subprocess wrapper: argv lists, logged commands, teed logs, timeouts, peak memory."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base.errors import LlamaspecError

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


def _pump(stream, sink: list[bytes], log_file, on_line: Callable[[str], None] | None, lock: threading.Lock) -> None:
    """Copy a pipe into ``sink`` and the log in large chunks: few wake-ups, so the pump does not
    compete with llama.cpp's threads for the cores (line-by-line reading measurably slowed it)."""
    fd = stream.fileno()
    partial = b""
    while chunk := os.read(fd, 1 << 16):
        sink.append(chunk)
        if log_file is not None:
            with lock:
                log_file.write(chunk)
                log_file.flush()
        if on_line is not None:
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                on_line(line.decode(errors="replace") + "\n")
    if on_line is not None and partial:
        on_line(partial.decode(errors="replace"))
    stream.close()


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log_path: Path | None = None,
    timeout: float | None = None,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    what: str | None = None,
    hint: str | None = None,
    on_line: Callable[[str], None] | None = None,
    grace_seconds: float = 5.0,
) -> Completed:
    """Run ``argv``; capture stdout and stderr (and tee them into ``log_path`` when given); stop it
    after ``timeout`` seconds. stdin is /dev/null. ``env``: changes to this process's environment
    for the child (a value of None removes that variable).

    With ``check`` a failure raises LlamaspecError naming the exit, the last lines of output
    and the log. A program that cannot be started raises LlamaspecError even without ``check``.
    ``on_line`` sees every output line as it arrives (for progress).
    """
    args = tuple(str(a) for a in argv)
    line = shell_line(args)
    log.debug("running: %s", line)
    full_env = child_env(env)
    log_file = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "wb")  # noqa: SIM115 - closed below, shared with pump threads
        log_file.write(f"$ {line}\n".encode())
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        if log_file:
            log_file.close()
        problem = ("program not found" if isinstance(exc, FileNotFoundError)
                   else "not executable" if isinstance(exc, PermissionError) else f"cannot start ({exc.strerror})")
        raise LlamaspecError(f"{what or args[0]}: {problem}: {args[0]}", hint=hint) from exc
    out: list[bytes] = []
    err: list[bytes] = []
    lock = threading.Lock()
    pumps: list[threading.Thread] = []
    # A timer stops the process at the deadline; a blocking wait4 wakes us the moment it exits
    # (Popen.wait(timeout) polls with sleeps of up to 50 ms) and reports its peak memory, with no
    # sampling thread competing with llama.cpp for the cores.
    expired = threading.Event()
    finished = threading.Event()

    def on_deadline() -> None:
        expired.set()
        _signal_group(proc.pid, signal.SIGTERM)
        if not finished.wait(grace_seconds):
            _signal_group(proc.pid, signal.SIGKILL)

    timer: threading.Timer | None = None
    peak = None
    # The program runs from here: a Ctrl-C or a SIGTERM (unwinding as SystemExit) that comes even
    # before the wait begins (a loaded machine widens that moment) stops it before we go.
    try:
        pumps += [threading.Thread(target=_pump, args=(proc.stdout, out, log_file, on_line, lock), daemon=True),
                  threading.Thread(target=_pump, args=(proc.stderr, err, log_file, on_line, lock), daemon=True)]
        for p in pumps:
            p.start()
        if timeout is not None:
            timer = threading.Timer(timeout, on_deadline)
            timer.daemon = True
            timer.start()
        peak = _wait(proc)
    except BaseException:
        _terminate(proc)  # never leave llama.cpp running behind us
        raise
    finally:
        finished.set()
        if timer is not None:
            timer.cancel()
        for p in pumps:
            if p.ident is not None:  # started
                p.join(timeout=5)
        if log_file:
            log_file.write(f"# exit status {proc.returncode} after {time.monotonic() - start:.2f} s\n".encode())
            log_file.close()
    done = Completed(args, proc.returncode, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace"),
                     time.monotonic() - start, peak, expired.is_set())
    if check and (done.timed_out or done.returncode != 0):
        raise_failure(done, what or Path(args[0]).name, log_path, hint)
    return done


def child_env(changes: Mapping[str, str | None] | None) -> dict[str, str] | None:
    """This process's environment with ``changes`` (None removes a variable); None: inherit it as is."""
    if changes is None:
        return None
    env = {**os.environ, **{k: v for k, v in changes.items() if v is not None}}
    for name in (k for k, v in changes.items() if v is None):
        env.pop(name, None)
    return env


def probe(argv: Sequence[str | os.PathLike[str]], *, timeout: float = 30.0, env: Mapping[str, str | None] | None = None,
          cwd: Path | None = None) -> Completed | None:
    """A quick query (a tool's version, a compiler's feature list, ``git rev-parse``): output
    captured, no log file, never raises. None when the program is missing or cannot start; a
    non-zero exit or a timeout is in the returned Completed for the caller to judge."""
    try:
        return run(argv, timeout=timeout, env=env, cwd=cwd, check=False)
    except LlamaspecError as exc:
        log.debug("%s", exc.message)
        return None


class Background:
    """A process that outlives the call that starts it (a server), in its own process group, its
    output teed into a log; ``stop()`` terminates the group, then kills it. ``env`` as for :func:`run`."""

    def __init__(self, argv: Sequence[str | os.PathLike[str]], log_path: Path | None = None,
                 env: Mapping[str, str | None] | None = None) -> None:
        self.argv = tuple(str(a) for a in argv)
        self._log = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
            self._log.write(f"$ {shell_line(self.argv)}\n".encode())
            self._log.flush()
        out = self._log if self._log is not None else subprocess.DEVNULL
        log.debug("starting in the background: %s", shell_line(self.argv))
        try:
            self._proc = subprocess.Popen(self.argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                          env=child_env(env), start_new_session=True)
        except OSError as exc:
            self._close_log()
            raise LlamaspecError(f"cannot start {self.argv[0]}: {exc.strerror or exc}") from exc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        return self._proc.poll()

    def stop(self, grace: float = 5.0) -> None:
        if self._proc.poll() is None:
            _terminate(self._proc, grace)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


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


def _wait(proc: subprocess.Popen[bytes]) -> int | None:
    """Wait for the process; return its peak resident memory in bytes (from wait4's rusage)."""
    try:
        _pid, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # already reaped elsewhere
        proc.wait()
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024) or None


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _terminate(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Terminate the process group, then kill it if it does not go."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
