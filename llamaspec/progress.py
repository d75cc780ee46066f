"""Progress for long work (builds, downloads, sweeps) on stderr; quiet when not a terminal."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("llamaspec")


def _fmt_seconds(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds}s"


class Progress:
    """A one-line bar on a terminal; an occasional log line (every 10 %) elsewhere."""

    def __init__(self, label: str, total: float = 100.0, stream=None) -> None:
        self.label = label
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()
        self.done = 0.0
        self._last_logged_decile = -1
        self.note = ""

    def update(self, done: float, note: str = "") -> None:
        self.done = min(done, self.total)
        self.note = note or self.note
        fraction = self.done / self.total if self.total else 1.0
        elapsed = time.monotonic() - self.start
        eta = ""
        if 0 < fraction < 1:
            eta = f", ETA {_fmt_seconds(elapsed / fraction - elapsed)}"
        text = f"{self.label}: {fraction * 100:5.1f}% ({_fmt_seconds(elapsed)}{eta}) {self.note}"
        if self.tty:
            width = 24
            filled = int(width * fraction)
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r[{bar}] {text[:100]:<100}")
            self.stream.flush()
        else:
            decile = int(fraction * 10)
            if decile > self._last_logged_decile:
                self._last_logged_decile = decile
                log.info("%s", text)

    def close(self, message: str = "") -> None:
        if self.tty:
            self.stream.write("\r" + " " * 130 + "\r")
            self.stream.flush()
        if message:
            log.info("%s", message)
