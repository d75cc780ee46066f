"""Progress: a bar on a terminal, log lines elsewhere; a heartbeat for work whose output pauses."""

from __future__ import annotations

import io
import logging
import time

import pytest

from llamaspec.base import progress
from llamaspec.base.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llamaspec"]


def test_off_a_terminal_one_line_per_tenth(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llamaspec")
    bar = Progress("sweep", total=20, stream=io.StringIO())
    for i in range(1, 21):
        bar.update(i, f"point {i}")
    bar.close("done")
    lines = _lines(caplog)
    assert len(lines) == 12 and lines[-1] == "done"  # the first step, 10 %, 20 %, ... 100 %, the closing message
    assert lines[1].startswith("sweep:  10.0% (") and "ETA" in lines[1] and lines[1].endswith("point 2")


def test_without_eta_the_line_shows_percentage_and_elapsed_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llamaspec")
    bar = Progress("building", stream=io.StringIO(), eta=False)
    bar.update(70, "compiling ggml-cpu: ops.cpp")
    bar.close()
    (line,) = _lines(caplog)
    assert line == "building:  70.0% (0s) compiling ggml-cpu: ops.cpp"


def test_heartbeat_speaks_while_the_work_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    """A 70 % line, then a long compile with no output: heartbeat lines keep coming, each with
    the percentage, the elapsed time and the current step."""
    caplog.set_level(logging.INFO, logger="llamaspec")
    bar = Progress("building", stream=io.StringIO(), eta=False, heartbeat=0.2)
    start = time.monotonic()
    bar.update(70, "compiling ggml-cpu: ops.cpp")
    while len(_lines(caplog)) < 4 and time.monotonic() - start < 30:
        time.sleep(0.05)
    bar.close()
    lines = _lines(caplog)
    # The 70 % line plus a heartbeat every 0.2 s, never more often.
    assert 4 <= len(lines) <= 1 + (time.monotonic() - start) / 0.2, lines
    assert all(line.startswith("building:  70.0% (") and line.endswith("compiling ggml-cpu: ops.cpp") for line in lines)
    count = len(_lines(caplog))
    time.sleep(0.5)
    assert len(_lines(caplog)) == count  # closed: no more heartbeats


def test_on_a_terminal_the_clock_ticks_without_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "TICK_SECONDS", 0.05)
    screen = Terminal()
    bar = Progress("building", stream=screen, eta=False, heartbeat=30.0)
    bar.update(70, "compiling ggml-cpu: ops.cpp")
    deadline = time.monotonic() + 30  # however slow the machine: wait for the redraws, not a fixed time
    while screen.getvalue().count("70.0%") < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    bar.close()
    frames = [f for f in screen.getvalue().split("\r") if f.strip()]
    assert len(frames) >= 4  # redrawn on its own, not only on update()
    assert all("70.0%" in f and "ETA" not in f for f in frames)
    assert screen.getvalue().endswith("\r")  # the bar is wiped at the end


def test_durations_never_read_as_a_time_of_day() -> None:
    from llamaspec.base.progress import duration

    assert [duration(s) for s in (45, 797, 3720)] == ["45s", "13m17s", "1h02m"]
