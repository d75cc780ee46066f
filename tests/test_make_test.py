"""`make test`'s order of work (tests/make_test.sh), with fake tools: the builds the slow tier
needs start first, in the background, and a failed build fails make test with one line, whatever
the tests did."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "{calls}"
if [ "$1" = tests/llamacpp_builds.py ]; then
    echo "ready: the pinned source"
    sleep 1
    echo "builds done" >> "{calls}"
    [ "{builds_fail}" = 1 ] && {{ echo "Error: the pinned build with llama-server: cmake exited with code 2"; exit 1; }}
    echo "ready: the pinned build with llama-server"; exit 0
fi
exit {pytest_rc}
"""
FAKE_MAKE = """#!/bin/sh
echo "make $*" >> "{calls}"
case "$*" in
    *test-hub*) echo "47 passed, 8 skipped"; exit {hub_rc};;
    *.venv-hub/.installed*) [ {hub_setup_rc} = 0 ] || echo "ERROR: No matching distribution found for torch==2.13.0"; exit {hub_setup_rc};;
esac
"""


def run(tmp_path: Path, builds_fail: bool = False, pytest_rc: int = 0,
        hub_rc: int = 0, hub_setup_rc: int = 0) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name, text in (("python", FAKE_PYTHON), ("make", FAKE_MAKE)):
        (bin_dir / name).write_text(text.format(calls=calls, builds_fail=int(builds_fail), pytest_rc=pytest_rc,
                                                hub_rc=hub_rc, hub_setup_rc=hub_setup_rc))
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BIN": str(bin_dir), "WORKERS": "4",
           "QUICK": "not slow", "HUB_STAMP": ".venv-hub/.installed", "BUILDS_LOG": str(tmp_path / "builds.log")}
    done = subprocess.run([str(ROOT / "tests" / "make_test.sh")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    return done, calls.read_text().splitlines()


def test_the_builds_start_first_and_every_tier_runs(tmp_path: Path) -> None:
    done, calls = run(tmp_path)
    assert done.returncode == 0, done.stderr
    # the builds in the background, the tiers meanwhile, and make test waits for the builds to end
    tiers = [c for c in calls if c != "python tests/llamacpp_builds.py"]
    # the main venv's extras before any test; the hub venv's beside the quick tier
    assert tiers[0] == "make --no-print-directory setup-convert"
    assert sorted(tiers[1:3]) == ["make --no-print-directory .venv-hub/.installed", "python -m pytest -q -n 4 -m not slow"]
    # the slow tier and the hub tests side by side, after the quick tier
    assert sorted(tiers[3:5]) == ["make --no-print-directory test-hub",
                                  "python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m not (not slow) --durations=10"]
    assert tiers[5:] == ["builds done"]
    assert calls.index("python tests/llamacpp_builds.py") < calls.index("builds done")
    assert f"log: {tmp_path / 'builds.log'}" in done.stdout and "FAILED" not in done.stderr
    # the last lines say how long each part took, and how the builds ended (llamacpp_builds.py's "done: ... in N s")
    parts, builds = done.stdout.splitlines()[-2:]
    assert re.fullmatch(r"make test: the extras installed in \d+ s, the quick tier in \d+ s, the slow tier in \d+ s "
                        r"\(the hub tests beside it\)", parts), parts
    assert builds == (f"make test: the background llama.cpp builds, ready: the pinned build "
                      f"with llama-server (log: {tmp_path / 'builds.log'})")


@pytest.mark.parametrize("pytest_rc", [0, 1])
def test_a_failed_background_build_fails_make_test_with_one_line(tmp_path: Path, pytest_rc: int) -> None:
    done, calls = run(tmp_path, builds_fail=True, pytest_rc=pytest_rc)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line == ("make test: FAILED: the background llama.cpp builds: Error: the pinned build with llama-server: "
                    f"cmake exited with code 2 (log: {tmp_path / 'builds.log'})")
    assert calls[-1] == "builds done"  # waited for, even after a failed tier
    assert len(calls) == (7 if pytest_rc == 0 else 5)  # a failed quick tier stops the tiers, not the report


def test_failed_hub_tests_fail_make_test(tmp_path: Path) -> None:
    done, calls = run(tmp_path, hub_rc=2)
    assert done.returncode == 2 and "47 passed, 8 skipped" in done.stdout and "FAILED" not in done.stderr
    assert calls[-1] == "builds done"


def test_a_hub_venv_that_cannot_be_made_fails_make_test_and_says_why(tmp_path: Path) -> None:
    done, calls = run(tmp_path, hub_setup_rc=2)
    assert done.returncode == 2 and "No matching distribution found for torch==2.13.0" in done.stdout
    assert "make --no-print-directory test-hub" not in calls  # nothing to run them in
    assert any("--dist loadfile" in c for c in calls)  # the slow tier runs all the same


FAKE_SUITE = """#!/bin/sh
echo "make $*" >> "{calls}"
echo "$LOAD_PID" > "{calls}.pid"
ps -o stat= -p "$LOAD_PID" >> "{calls}"  # the busy loop, running (R) while the suite runs
exit {rc}
"""


@pytest.mark.parametrize("rc", [0, 3])
def test_the_loaded_suite_runs_make_test_beside_a_busy_loop_that_ends_with_it(tmp_path: Path, rc: int) -> None:
    import time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "make").write_text(FAKE_SUITE.format(calls=calls, rc=rc))
    (bin_dir / "make").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MAKE": "make", "LOAD_LIMIT_S": "120"}
    done = subprocess.run([str(ROOT / "tests" / "stress.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == rc, done.stderr  # the suite's verdict is the target's
    made, state = calls.read_text().splitlines()
    assert made == "make --no-print-directory test" and state.strip()[0] in "RS", state  # alive beside the suite
    pid = int((tmp_path / "calls.pid").read_text())
    assert f"one core kept busy by pid {pid}" in done.stdout and f"exit {rc} in 0 min" in done.stdout
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "the busy loop outlived the suite"
