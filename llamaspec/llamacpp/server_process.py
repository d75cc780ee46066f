"""One ``llama-server`` process on 127.0.0.1: started on a free port, ready when ``/health`` says its
models are loaded, asked over HTTP (``/completion``, ``/metrics``), stopped as a process group; every
live one is stopped at exit (and on Ctrl-C)."""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import logging
import re
import signal
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from llamaspec.base import proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import flags

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # loopback only: the server is never reachable from elsewhere
READY_TIMEOUT = 600.0  # seconds for a server to load its models
LOG_TAIL = 6
# The endpoints that generate (llama-server's own and its OpenAI-style ones, tools/server at 0c1e570)
GENERATING = frozenset({"/completion", "/completions", "/v1/completions", "/chat/completions", "/v1/chat/completions",
                        "/infill", "/v1/messages"})

_LIVE: weakref.WeakSet[Server] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for server in live:
        server.stop()


atexit.register(stop_all)


def decode_tps(timings: dict[str, Any], n: Any = None) -> float | None:
    """SPEED_DEFINITION from a ``/completion`` answer's ``timings`` (``n``: the tokens where they
    lack ``predicted_n``): the tokens after the first over ``predicted_ms`` (llamacpp.server's docstring)."""
    n, ms = timings.get("predicted_n", n), timings.get("predicted_ms")
    return (n - 1) / (ms / 1000.0) if isinstance(n, int) and n >= 2 and ms else None


def free_port() -> int:
    """A port the kernel says is free now (the server may still lose a race for it: retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ServerDied(Exception):
    """The server process is gone (message: how it ended and its last log lines)."""


class RequestFailed(Exception):
    """The server answered a request with an error (message: its own)."""

    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class Server:
    """One ``llama-server`` process on 127.0.0.1, with its log file."""

    def __init__(self, program: Path, args: list[str], log_path: Path, label: str) -> None:
        self.program = Path(program)
        self.args = list(args)
        self.log_path = log_path
        self.label = label
        self.port: int | None = None
        self.process: proc.Background | None = None
        self.started_seconds: float | None = None
        self.launched_at: float | None = None  # time.monotonic() at launch: with started_seconds, when it was loading
        # generation requests sent to this process (GENERATING): a speculative mode that keeps state
        # between requests (spectypes.KEEPS_STATE) drafts differently once it is above 0
        self.completions = 0

    @property
    def argv(self) -> list[str]:
        return [str(self.program), *self.args, "--host", HOST, "--port", str(self.port)]

    def start(self, ready_timeout: float = READY_TIMEOUT) -> None:
        """Start and wait until ``/health`` says the models are loaded (3 ports tried if ours are taken)."""
        for attempt in range(3):
            self.port = free_port()
            try:
                self._launch(ready_timeout)
                return
            except ServerDied as exc:
                if attempt < 2 and "couldn't bind" in str(exc):
                    log.debug("port %s was taken before %s bound it; trying another", self.port, self.label)
                    continue
                raise LlamaspecError(f"llama-server ({self.label}) failed to start: {exc} (log: {self.log_path})",
                                     hint="check the model files and flags in the log; run the command at its top "
                                          "yourself to see more") from None

    def _launch(self, ready_timeout: float) -> None:
        t0 = self.launched_at = time.monotonic()
        log.info("starting llama-server (%s) on port %s ...", self.label, self.port)
        try:
            # its own process group, output in the log, no LLAMA_ARG_* of ours: it runs what its command line says
            self.process = proc.Background(self.argv, self.log_path, env=flags.measured_env())
        except LlamaspecError as exc:
            raise LlamaspecError(exc.message, hint="run `llamaspec build` first") from exc
        with _LIVE_LOCK:
            _LIVE.add(self)
        deadline = t0 + ready_timeout
        while True:
            if not self.alive():
                raise ServerDied(self.exit_description())
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, _ = self.get("/health", timeout=2.0)
                if status == 200:
                    self.started_seconds = time.monotonic() - t0
                    log.debug("llama-server (%s) ready in %.1f s", self.label, self.started_seconds)
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise ServerDied(f"not ready after {ready_timeout:.0f} s")
            time.sleep(0.02)  # a small model is ready in ~1 s: poll often, the wait is wall time of the run

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_description(self) -> str:
        code = self.process.poll() if self.process else None
        if code is None:
            how = "is still running"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        tail = self.log_tail()
        return how + (f": {tail}" if tail else "")

    def log_tail(self, lines: int = LOG_TAIL) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        keep = [s.strip() for s in text.splitlines() if s.strip() and not s.startswith("$ ")]
        return " | ".join(keep[-lines:])

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.port is None:
            raise ServerDied("not started")
        return http.client.HTTPConnection(HOST, self.port, timeout=timeout)

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        conn = self._connection(timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        finally:
            conn.close()

    def post(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """POST JSON; the answer's JSON, or RequestFailed (server error) / ServerDied (process gone)."""
        conn = self._connection(timeout)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            if path.partition("?")[0] in GENERATING:
                self.completions += 1
            resp = conn.getresponse()
            raw = resp.read().decode(errors="replace")
        except (ConnectionError, http.client.HTTPException) as exc:
            time.sleep(0.2)  # let a dying process be reaped so that we can say how it ended
            if not self.alive():
                raise ServerDied(self.exit_description()) from exc
            raise
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"error": {"message": raw[:300]}}
        if resp.status != 200:
            err = data.get("error") if isinstance(data, dict) else None
            message = err.get("message", raw[:300]) if isinstance(err, dict) else raw[:300]
            kind = err.get("type", "") if isinstance(err, dict) else ""
            raise RequestFailed(resp.status, str(message), str(kind))
        if not isinstance(data, dict):
            raise RequestFailed(resp.status, f"unexpected answer: {raw[:200]}", "format")
        return data

    def metrics_text(self) -> str | None:
        """``/metrics`` as text (needs --metrics), None when the server does not answer it."""
        with contextlib.suppress(OSError, http.client.HTTPException):
            status, text = self.get("/metrics")
            if status == 200:
                return text
        return None

    def peak_rss_bytes(self) -> int | None:
        """The server's peak resident memory so far (VmHWM), Linux only."""
        if self.process is None:
            return None
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return None
        m = re.search(r"^VmHWM:\s+(\d+)\s+kB", status, re.MULTILINE)
        return int(m.group(1)) * 1024 if m else None

    def stop(self, grace: float = 5.0) -> None:
        """Terminate the process group, then kill it if it does not go."""
        if self.process is not None:
            self.process.stop(grace)
        with _LIVE_LOCK:
            _LIVE.discard(self)
