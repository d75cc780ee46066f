"""Progress for long work (builds, downloads, sweeps) on stderr.

On a terminal: a one-line bar. Elsewhere (CI logs, pipes): a log line at every 10 %. Work whose
output can pause for minutes (a compile) asks for a ``heartbeat``: then the bar's clock keeps
ticking on a terminal, and elsewhere a line also comes every ``heartbeat`` seconds, so silence
never looks like a hang. ``eta=False`` drops the estimate where progress is not linear in time.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from llamaspec.base.stats import percent_text

log = logging.getLogger("llamaspec")

TICK_SECONDS = 1.0  # how often a heartbeat bar redraws its clock on a terminal


def duration(seconds: float) -> str:
    """A time left or taken, never to be read as a time of day: 45s, 13m17s, 1h02m."""
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """A one-line bar on a terminal; an occasional log line (every 10 %, and every ``heartbeat``
    seconds when given) elsewhere."""

    def __init__(self, label: str, total: float = 100.0, stream=None, *, eta: bool = True,
                 heartbeat: float | None = None) -> None:
        self.label = label
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.eta = eta
        self.start = time.monotonic()
        self.done = 0.0
        self.note = ""
        self._last_logged_decile = -1
        self._last_line_at = self.start
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if heartbeat is not None:
            self._ticker = threading.Thread(target=self._tick, args=(heartbeat,), daemon=True,
                                            name="progress-heartbeat")
            self._ticker.start()

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def text(self) -> str:
        fraction = self.fraction
        elapsed = time.monotonic() - self.start
        eta = ""
        if self.eta and 0 < fraction < 1:
            eta = f", ETA {duration(elapsed / fraction - elapsed)}"
        return f"{self.label}: {percent_text(fraction, 1):>6} ({duration(elapsed)}{eta}) {self.note}".rstrip()

    def update(self, done: float, note: str = "") -> None:
        with self._lock:
            self.done = max(self.done, min(done, self.total))  # never backwards
            self.note = note or self.note
            if self.tty:
                self._draw()
                return
            decile = int(self.fraction * 10)
            if decile > self._last_logged_decile:
                self._last_logged_decile = decile
                self._log_line()

    def _draw(self) -> None:
        width = 24
        filled = int(width * self.fraction)
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r[{bar}] {self.text()[:100]:<100}")
        self.stream.flush()

    def _log_line(self) -> None:
        self._last_line_at = time.monotonic()
        log.info("%s", self.text())

    def _tick(self, heartbeat: float) -> None:
        while not self._stop.wait(min(TICK_SECONDS, heartbeat)):
            with self._lock:
                if self._stop.is_set():
                    return
                if self.tty:
                    self._draw()
                elif time.monotonic() - self._last_line_at >= heartbeat:
                    self._log_line()

    def close(self, message: str = "") -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        with self._lock:
            if self.tty:
                self.stream.write("\r" + " " * 130 + "\r")
                self.stream.flush()
        if message:
            log.info("%s", message)
