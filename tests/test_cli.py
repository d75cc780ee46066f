"""The command line as a whole: instant help, every command documented with an example."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaspec.cli import COMMAND_MODULES, main

HEAVY = ("matplotlib", "numpy", "gguf", "huggingface_hub", "torch", "transformers", "psutil", "yaml", "sqlite3",
         "jinja2")


def test_help_imports_nothing_heavy() -> None:
    code = ("import sys; from llamaspec.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"print('heavy:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "heavy:"


def test_every_command_has_help_ending_with_an_example() -> None:
    runner = CliRunner()
    for name in COMMAND_MODULES:
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, name
        if name not in ("source", "models", "results"):  # groups: their subcommands carry the examples
            assert "Example:" in result.output and "llamaspec " in result.output.split("Example:")[1], name


def test_short_help_flag_and_version() -> None:
    assert CliRunner().invoke(main, ["-h"]).exit_code == 0
    assert "0.1.0" in CliRunner().invoke(main, ["-V"]).output


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["frobnicate"])
    assert result.exit_code == 2 and "No such command" in result.output


def test_full_disk_is_one_error_line(tmp_path, monkeypatch) -> None:
    import errno

    from llamaspec.base import atomic

    def full(dest, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(dest))

    monkeypatch.setattr(atomic, "write_text", full)
    result = CliRunner().invoke(main, ["results", "export", "-o", str(tmp_path / "out.csv")])
    assert result.exit_code == 1
    assert f"Error: no space left on the device while writing {tmp_path / 'out.csv'}" in result.output
    assert "Hint: free some space" in result.output and "Traceback" not in result.output


def test_accel_picks_the_build_and_backend_is_gone(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """"backend" names an engine (llama.cpp, transformers); what a build computes on is its accel."""
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))  # should anything start a build
    runner = CliRunner()
    for command in ("build", "run", "sweep"):
        result = runner.invoke(main, [command, "--help"])
        assert "--accel [auto|cpu|cuda|metal]" in result.output and "--backend" not in result.output, command
    for old in (["--backend", "cpu"], ["--backend=cuda"]):
        # build passes unknown options on to CMake: the old spelling is caught before it gets there.
        result = runner.invoke(main, ["build", *old])
        assert result.exit_code == 2 and "--backend is now --accel" in result.output
    assert not (tmp_path / "cache").exists()
    result = runner.invoke(main, ["run", "x", "--backend", "cpu"])
    assert result.exit_code == 2 and "No such option '--backend'. Did you mean '--accel'?" in result.output


@pytest.mark.parametrize(("flags", "level", "tracebacks"),
                         [([], logging.INFO, False), (["-v"], logging.DEBUG, False), (["-vv"], logging.DEBUG, True),
                          (["-q"], logging.WARNING, False)])
def test_verbosity_does_what_its_help_says(flags: list[str], level: int, tracebacks: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLAMASPEC_DEBUG", raising=False)
    seen = {}

    @main.command("probe-verbosity", hidden=True)
    def probe_verbosity() -> None:
        seen["level"] = logging.getLogger().level
        seen["tracebacks"] = bool(os.environ.get("LLAMASPEC_DEBUG"))

    try:
        assert CliRunner().invoke(main, [*flags, "probe-verbosity"]).exit_code == 0
    finally:
        main.commands.pop("probe-verbosity")
    assert seen == {"level": level, "tracebacks": tracebacks}
    help_text = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    assert "-v debug logs (every command run), -vv also tracebacks on errors" in help_text


_SLEEPER = """
import sys
from llamaspec.base import proc
from llamaspec.cli import main

@main.command("sleepy")
def sleepy() -> None:
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    proc.run([sys.executable, "-c", code, PID_FILE], timeout=120)

main(["sleepy"])
"""


# The SIGTERM comes before proc.run has begun to wait: as its output pumps start (a loaded machine
# makes that moment long enough to hit), once the child runs.
_EARLY = """
import os, signal, threading, time
from pathlib import Path
start = threading.Thread.start
def start_after_a_sigterm(self):
    while not (Path(PID_FILE).is_file() and Path(PID_FILE).read_text()):
        time.sleep(0.01)
    threading.Thread.start = start
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler runs here
    start(self)
threading.Thread.start = start_after_a_sigterm
"""


@pytest.mark.parametrize("when", ["waiting", "before the wait"])
def test_sigterm_stops_the_child_process_too(tmp_path, when: str) -> None:
    """`timeout 900 llamaspec build` must not leave cmake (or llama.cpp) running once it gives up,
    whenever the SIGTERM comes."""
    import signal
    import time

    pid_file = tmp_path / "child.pid"
    script = tmp_path / "sleeper.py"
    script.write_text(((_EARLY if when == "before the wait" else "") + _SLEEPER).replace("PID_FILE", repr(str(pid_file))))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    try:
        if when == "waiting":
            parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise AssertionError("the child outlived llamaspec")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_concurrency_refuses_a_transformers_experiment(tmp_path) -> None:
    # Concurrency is measured on llama-server: a transformers experiment is refused, not measured on another engine.
    prompts = tmp_path / "set.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    result = CliRunner().invoke(main, ["concurrency", "hf-smollm2-quicksort", "--prompts", str(prompts)])
    assert result.exit_code != 0 and "uses the transformers engine" in result.output, result.output


@pytest.mark.parametrize(("args", "error", "hint"), [
    (["run", "smollm2-quicksort", "--threads", "0"], "--threads 0: must be at least 1, got 0", "--threads: CPU threads"),
    (["run", "smollm2-quicksort", "-t", "two"], "--threads two: expected a whole number", "--threads: CPU threads"),
    (["sweep", "smollm2-quicksort", "--draft", "1,2", "--n-predict", "0"], "--n-predict 0: must be at least 1, got 0",
     "--n-predict: tokens to generate"),
    (["sweep", "smollm2-quicksort", "--timeout", "-5"], "--timeout -5: must not be negative, got -5", "--timeout: seconds"),
    (["sweep", "smollm2-quicksort", "--threads", "0..2"], "--threads: '0..2': 0: must be at least 1, got 0", "--threads: CPU"),
])
def test_a_bad_setting_on_the_command_line_is_one_line_naming_the_flag(args: list[str], error: str, hint: str) -> None:
    """Checked by Settings before anything runs (0 threads once reached llama.cpp, which read it as all cores)."""
    done = CliRunner().invoke(main, args)
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert done.exit_code == 1 and lines[0] == f"Error: {error}" and lines[1].startswith(f"Hint: {hint}"), done.output
    assert len(lines) == 2, done.output


def test_settings_refuse_a_bad_value_whoever_builds_them() -> None:
    """The one place the rules live: a library caller, the cluster's payloads and a sweep all build a Settings."""
    from llamaspec.measure.settings import SettingError, Settings

    for bad in ({"threads": 0}, {"threads_draft": 0}, {"parallel": 0}, {"ctx_size": 0}, {"draft_max": 0},
                {"n_predict": -1}, {"timeout": 0.0}, {"temperature": -0.5}, {"draft_p_min": 2.0}):
        with pytest.raises(SettingError) as err:
            Settings(**bad)
        assert err.value.setting == next(iter(bad)), bad
    with pytest.raises(SettingError, match="must be at least 1"):
        Settings.from_dict({"threads": 0})
    assert Settings(threads=1, draft_min=0, seed=-1, timeout=2).timeout == 2.0  # checked form: a float


def _unwritable(tmp_path) -> str:
    """A data folder this process cannot write in: read-only by its mode, or (as root, who writes
    anywhere) a place the kernel refuses."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    if not os.access(folder, os.W_OK):
        return str(folder / "data")
    probe = Path("/sys/llamaspec-test-data")
    try:
        probe.mkdir()
    except OSError:
        return str(probe / "data")
    probe.rmdir()
    pytest.skip("this process can write everywhere it could try")


def test_an_unwritable_data_folder_is_one_line_before_anything_runs(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fakes import fake_bin_dir

    monkeypatch.setenv("LLAMASPEC_DATA", _unwritable(tmp_path))
    bins = fake_bin_dir(tmp_path / "bin")
    for args in (["results", "list"], ["run", "smollm2-quicksort", "--bin-dir", str(bins), "-n", "4"]):
        done = CliRunner().invoke(main, args)
        lines = [line for line in done.output.splitlines() if line.startswith(("Error", "Hint", "Traceback"))]
        assert done.exit_code == 1 and len(lines) == 2, done.output
        assert lines[0].startswith(f"Error: cannot write in {os.environ['LLAMASPEC_DATA']}: "), done.output
        assert lines[1].startswith("Hint: set LLAMASPEC_DATA (now ") and "to a folder you can write in" in lines[1]
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("LLAMASPEC_DATA", str(tmp_path / "file" / "data"))
    done = CliRunner().invoke(main, ["results", "list"])
    assert done.exit_code == 1 and "Not a directory" in done.output and "Traceback" not in done.output, done.output


def test_a_permission_error_writing_anywhere_is_one_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    @click.command("denied")
    def denied() -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "plots" / "speedup.png"))

    monkeypatch.setitem(main.commands, "denied", denied)
    done = CliRunner().invoke(main, ["denied"])
    assert done.exit_code == 1, done.output
    assert done.output.splitlines() == [f"Error: cannot write {tmp_path / 'plots' / 'speedup.png'}: Permission denied",
                                        f"Hint: fix the permissions of {tmp_path / 'plots' / 'speedup.png'}, or point "
                                        "llamaspec elsewhere (LLAMASPEC_DATA, LLAMASPEC_CACHE)"]


@pytest.mark.parametrize(("args", "now"), [
    (["tune", "smollm2-quicksort", "--variants", "q4_0"], "Error: `llamaspec tune` is now `llamaspec sweep`"),
    (["cluster", "run", "smollm2-quicksort", "-r", "6"], "Error: `llamaspec cluster run` is now `llamaspec run NAME --cluster"),
])
def test_a_command_that_became_another_says_which_in_one_line(args: list[str], now: str) -> None:
    """A script that still calls a merged command fails at once, whatever options it gives, with the
    command to type instead; the old name is not in --help."""
    result = CliRunner().invoke(main, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and lines[0].startswith(now) and lines[1].startswith("Hint: "), result.output
    assert len(lines) == 2
    group = args[:1] if args[0] == "cluster" else []
    listed = CliRunner().invoke(main, [*group, "--help"]).output.split("Commands:")[1]
    assert not any(line.split()[:1] == [args[len(group)]] for line in listed.splitlines()), listed
