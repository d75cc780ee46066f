"""``llamaspec run -- COMMAND`` on the command line: what it refuses, before anything is measured
or stored (the runs themselves: tests/test_pasted_llamacpp.py, on the real binaries)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from llamaspec.base import paths
from llamaspec.cli import main
from llamaspec.store.results import Store


@pytest.mark.parametrize(("args", "error", "hint"), [
    (["run", "smollm2-quicksort", "--", "llama-server", "-m", "T.gguf", "-md", "D.gguf"],
     "the experiment smollm2-quicksort and a pasted command after -- together", "drop smollm2-quicksort"),
    (["run", "-m", "T.gguf", "--", "llama-server", "-m", "T.gguf", "-md", "D.gguf"],
     "-m/-md and a pasted command after -- together", "give the models once"),
    (["run", "--", "llama-server", "-md", "D.gguf", "--spec-draft-n-max", "8"],
     "the pasted llama-server command has no target model", "-m target.gguf"),
    (["run", "--", "llama-cli", "-m", "T.gguf", "-md", "D.gguf"],
     "llamaspec cannot measure llama-cli: llama-cli runs the target alone",
     "it measures llama-server, llama-speculative-simple, llama-speculative"),
    (["run", "--", "llama-server", "-m", "T.gguf", "-md", "D.gguf", "-c", "4k"],
     "-c 4k: expected a whole number", "fix the value of -c"),
    (["run", "--", "llama-server", "-m", "T.gguf", "-ngl", "99"],
     "no draft model: nothing to compare llama-server against", "-md DRAFT.gguf"),
    (["run", "--draft", "4", "--", "llama-server", "-m", "T.gguf", "-md", "D.gguf", "--spec-draft-n-max", "8"],
     "draft max is set twice, to 4 by llamaspec's option and to 8 in the pasted command", "give it once"),
    (["run", "--"], "nothing after --: paste a llama.cpp command", "llamaspec run -- llama-server"),
])
def test_a_pasted_command_that_cannot_be_measured_is_one_line(args: list[str], error: str, hint: str) -> None:
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 1, done.output
    lines = done.output.strip().splitlines()
    assert lines[-2] == f"Error: {lines[-2][7:]}" and error in lines[-2], done.output
    assert lines[-1].startswith("Hint: ") and hint in lines[-1], done.output
    assert not Store.open().runs(None, limit=5)  # nothing measured, nothing stored
    assert not list((paths.data_dir() / "studies").glob("*.yaml"))


def test_a_pasted_program_given_by_a_path_that_does_not_exist(tmp_path) -> None:
    program = tmp_path / "bin" / "llama-server"
    done = CliRunner().invoke(main, ["run", "--", str(program), "-m", "T.gguf", "-md", "D.gguf"])
    assert done.exit_code == 1
    assert f"Error: the pasted program {program} does not exist" in done.output
    assert not list((paths.data_dir() / "studies").glob("*.yaml"))


def test_the_help_shows_the_pasted_form() -> None:
    done = CliRunner().invoke(main, ["run", "-h"])
    assert done.exit_code == 0
    assert "llamaspec run -- llama-server -m T.gguf -md D.gguf --spec-draft-n-max 8" in done.output
    assert "not applicable: sampled" in " ".join(done.output.split())
