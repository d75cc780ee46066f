"""The measurement lock: real processes queue behind each other, refuse at once without waiting,
and are not blocked by a holder that was killed."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llamaspec.base import lock, paths
from llamaspec.base.errors import LlamaspecError

ROOT = Path(__file__).resolve().parent.parent

# Holds the lock (LLAMASPEC_LOCK) until the file argv[1] exists; says what happens as JSON lines.
HOLDER = """
import json, sys, time
from pathlib import Path
from llamaspec.base import lock
from llamaspec.base.errors import LlamaspecError
release, wait = Path(sys.argv[1]), sys.argv[2] == "wait"
def say(event, **kw):
    print(json.dumps({"event": event, "t": time.time(), **kw}), flush=True)
try:
    with lock.measuring("sweep quick", wait=wait, on_wait=lambda h: say("waiting", holder=h)) as me:
        say("acquired", holder=me)
        while not release.exists():
            time.sleep(0.02)
        say("releasing")
except LlamaspecError as exc:
    say("refused", message=exc.message, hint=exc.hint)
"""


@pytest.fixture
def lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "locks" / "measure.lock"
    monkeypatch.setenv("LLAMASPEC_LOCK", str(path))
    return path


def start(release: Path, wait: bool = True) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(release), "wait" if wait else "no-wait"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def event(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the child ended without a word (exit {proc.wait(timeout=30)})"
    return json.loads(line)


def test_lock_path_is_moved_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLAMASPEC_LOCK", raising=False)
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    assert paths.lock_path() == (tmp_path / "cache" / "measure.lock").resolve()
    monkeypatch.setenv("LLAMASPEC_LOCK", str(tmp_path / "shared.lock"))
    assert paths.lock_path() == (tmp_path / "shared.lock").resolve()


def test_a_second_measurement_waits_for_the_first_then_runs(tmp_path: Path, lock_file: Path) -> None:
    first = start(tmp_path / "release-first")
    second = None
    try:
        held = event(first)
        assert held["event"] == "acquired" and held["holder"]["pid"] == first.pid and held["holder"]["waited_s"] == 0
        (tmp_path / "release-second").touch()  # the second lets go as soon as it has the lock
        second = start(tmp_path / "release-second")
        waiting = event(second)
        assert waiting["event"] == "waiting"
        assert waiting["holder"]["pid"] == first.pid and waiting["holder"]["what"] == "sweep quick"
        time.sleep(0.5)  # the second stays blocked meanwhile (checked by the times below)
        (tmp_path / "release-first").touch()
        releasing = event(first)
        acquired = event(second)
        assert releasing["event"] == "releasing" and acquired["event"] == "acquired"
        assert acquired["t"] > releasing["t"]
        assert acquired["holder"]["waited_s"] >= 0.5 and acquired["holder"]["pid"] == second.pid
        assert event(second)["event"] == "releasing"
    finally:
        (tmp_path / "release-first").touch()
        first.wait(timeout=30)
        if second is not None:
            second.wait(timeout=30)
    assert not (lock_file.parent / "measure.lock.json").exists()  # the last holder took its description away


def test_without_waiting_it_fails_at_once_naming_the_holder(tmp_path: Path, lock_file: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    holder = start(tmp_path / "release")
    try:
        assert event(holder)["event"] == "acquired"
        calls: list[int] = []
        real_flock = lock.fcntl.flock

        def flock(fd: int, op: int) -> None:
            calls.append(op)
            real_flock(fd, op)

        with monkeypatch.context() as m:
            m.setattr(lock.fcntl, "flock", flock)
            with pytest.raises(LlamaspecError, match=f"another measurement is running: pid {holder.pid} ") as err, \
                    lock.measuring("run quick", wait=False):
                pytest.fail("measured while another process held the lock")
        # at once by construction: it only ever asked without blocking
        assert calls and all(op & lock.fcntl.LOCK_NB for op in calls if op != lock.fcntl.LOCK_UN), calls
        assert "sweep quick" in err.value.message and "since " in err.value.message
        assert "--no-wait" in (err.value.hint or "")
        refused = start(tmp_path / "release", wait=False)  # and from another process
        said = event(refused)
        assert said["event"] == "refused" and f"pid {holder.pid} " in said["message"]
        refused.wait(timeout=30)
    finally:
        (tmp_path / "release").touch()
        holder.wait(timeout=30)


def test_a_killed_holder_does_not_block(tmp_path: Path, lock_file: Path) -> None:
    holder = start(tmp_path / "release")
    try:
        assert event(holder)["event"] == "acquired"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    description = lock_file.parent / "measure.lock.json"
    assert json.loads(description.read_text())["pid"] == holder.pid  # left behind by the killed holder
    with lock.measuring("run quick", wait=False) as me:
        assert me["pid"] == os.getpid()
        assert json.loads(description.read_text())["pid"] == os.getpid()


def test_nesting_in_one_process_is_a_no_op_and_holds_the_lock(tmp_path: Path, lock_file: Path) -> None:
    with lock.measuring("sweep", wait=False) as outer:
        with lock.measuring("case 1", wait=False) as inner:
            assert inner is outer and inner["what"] == "sweep"
            assert lock.held() is not None and lock.held()["pid"] == os.getpid()  # type: ignore[index]
            other = start(tmp_path / "release", wait=False)
            said = event(other)
            assert said["event"] == "refused" and f"pid {os.getpid()} " in said["message"]
            other.wait(timeout=30)
        assert lock.held() is not None  # the inner block did not let go of it
    assert lock.held() is None
    (tmp_path / "release").touch()
    free = start(tmp_path / "release", wait=False)
    assert event(free)["event"] == "acquired"
    free.wait(timeout=30)


def test_a_holder_without_a_believable_description_is_said_unknown(tmp_path: Path, lock_file: Path) -> None:
    # The lock held by something that wrote no description, beside a stale one of a dead process.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock_file.parent.mkdir(parents=True)
    (lock_file.parent / "measure.lock.json").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(LlamaspecError, match="left no description") as err, lock.measuring("run", wait=False):
            pass
        assert f"pid {int(dead.stdout)}" not in err.value.message
    finally:
        os.close(fd)
    with lock.measuring("run", wait=False) as me:
        assert me["pid"] == os.getpid()


def test_describe_reads_like_a_command() -> None:
    holder = {"pid": 42, "host": socket.gethostname(), "argv": ["/x/llamaspec/__main__.py", "sweep", "my exp.yaml"],
              "what": "sweeping draft_max", "since": "2026-11-30T09:00:00+0000", "since_ts": time.time() - 300}
    assert lock.describe(holder) == ("pid 42 (`llamaspec sweep 'my exp.yaml'`, sweeping draft_max) "
                                     "since 2026-11-30T09:00:00+0000 (5m00s ago)")


@pytest.mark.parametrize("command", [["sweep"], ["concurrency"]])
def test_a_prompt_set_takes_the_lock_too(tmp_path: Path, lock_file: Path, command: list[str]) -> None:
    # Both commands that measure over a prompt set: neither may run beside another measurement.
    from click.testing import CliRunner
    from fakes import fake_bin_dir

    from llamaspec.cli import main

    prompts = tmp_path / "set.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    holder = start(tmp_path / "release")
    try:
        assert event(holder)["event"] == "acquired"
        bins = fake_bin_dir(tmp_path / "bin")  # the lock is the point here, not a build: recorded programs
        result = CliRunner().invoke(main, [*command, "smollm2-server-mini", "--prompts", str(prompts), "--no-wait",
                                           "--bin-dir", str(bins)])
        assert result.exit_code != 0
        assert f"another measurement is running: pid {holder.pid} " in result.output, result.output
    finally:
        (tmp_path / "release").touch()
        holder.wait(timeout=30)
