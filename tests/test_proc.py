"""The subprocess wrapper: logs, exit descriptions, timeouts, crashes, missing programs."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from llamaspec.base import atomic, proc
from llamaspec.base.errors import LlamaspecError


def test_output_is_captured_and_teed(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    done = proc.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], log_path=log)
    assert done.stdout == "out\n" and done.stderr == "err\n" and done.returncode == 0
    text = log.read_text()
    assert text.startswith("$ ") and "out" in text and "err" in text and "# exit status 0" in text


def test_failure_names_exit_tail_and_log(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with pytest.raises(LlamaspecError) as err:
        proc.run([sys.executable, "-c", "import sys; print('boom: no model', file=sys.stderr); sys.exit(3)"],
                 log_path=log, what="llama-speculative")
    assert "llama-speculative exited with code 3: boom: no model" in err.value.message
    assert str(log) in err.value.message


def test_killed_process_names_the_signal() -> None:
    done = proc.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], check=False)
    assert done.signal_name == "SIGKILL" and done.describe_exit() == "was killed by SIGKILL"


def test_timeout_terminates_the_process() -> None:
    done = proc.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5, check=False)
    assert done.timed_out and done.seconds < 30  # ended by the timeout, not by the child's own 30 s
    with pytest.raises(LlamaspecError, match="timed out after"):
        proc.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_env_changes_reach_the_child_and_none_removes_a_variable(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_SPEC_TYPE", "ngram-mod")
    monkeypatch.setenv("KEPT", "yes")
    show = [sys.executable, "-c", "import os; print(os.environ.get('LLAMA_ARG_SPEC_TYPE'), os.environ.get('KEPT'), "
                                  "os.environ.get('ADDED'))"]
    assert proc.run(show).stdout == "ngram-mod yes None\n"  # inherited as it is
    assert proc.run(show, env={"LLAMA_ARG_SPEC_TYPE": None, "ADDED": "1"}).stdout == "None yes 1\n"
    log = tmp_path / "bg.log"
    background = proc.Background(show, log, env={"LLAMA_ARG_SPEC_TYPE": None})
    for _ in range(200):
        if background.poll() is not None:
            break
        time.sleep(0.02)
    background.stop()
    assert "None yes None" in log.read_text()


def test_missing_program() -> None:
    with pytest.raises(LlamaspecError, match="program not found"):
        proc.run(["/nonexistent/llama-speculative"])


def test_peak_memory_is_measured() -> None:
    done = proc.run([sys.executable, "-c", "x = bytearray(200 * 2**20); import time; time.sleep(0.5)"])
    assert done.peak_rss_bytes is not None and done.peak_rss_bytes > 150 * 2**20


def test_atomic_path_leaves_nothing_on_failure(tmp_path: Path) -> None:
    dest = tmp_path / "model.gguf"
    with pytest.raises(RuntimeError), atomic.atomic_path(dest) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert not dest.exists() and list(tmp_path.iterdir()) == []
    with atomic.atomic_path(dest) as tmp:
        tmp.write_text("whole")
    assert dest.read_text() == "whole"


def test_probe_captures_without_a_log_and_never_raises(tmp_path: Path) -> None:
    done = proc.probe([sys.executable, "-c", "import sys; print('3.12'); sys.exit(2)"])
    assert done is not None and done.stdout == "3.12\n" and done.returncode == 2
    assert proc.probe(["/nonexistent/nvcc", "--version"]) is None
    not_executable = tmp_path / "tool"
    not_executable.write_text("#!/bin/sh\n")
    assert proc.probe([str(not_executable)]) is None
    slow = proc.probe([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert slow is not None and slow.timed_out


def test_no_subprocess_outside_proc() -> None:
    """Every process llamaspec starts goes through proc.run (argv, timeout, terminate-then-kill)."""
    package = Path(proc.__file__).parents[1]  # llamaspec/, proc.py is in base/
    offenders = [str(f.relative_to(package)) for f in package.rglob("*.py")
                 if f.name != "proc.py" and "subprocess" in f.read_text()]
    assert offenders == []
