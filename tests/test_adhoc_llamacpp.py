"""The one-line form on the real thing: ``llamaspec sweep -m T.gguf -md D.gguf --draft 1,2,4,8`` on the
offline pair as plain files (the pinned llama.cpp build), and ``-m USER/REPO:Q4_0`` through the
loopback hub with the real huggingface_hub."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
import real_checks
from click.testing import CliRunner
from test_adhoc import hub  # noqa: F401 - the loopback hub fixture

from llamaspec.cli import main
from llamaspec.llamacpp import modeltools
from llamaspec.models import given
from llamaspec.store.results import Store
from llamaspec.store.rows import STUDY_KIND

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]


@pytest.fixture(scope="session")
def pair_files(llama_build, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The offline pair's F32 target, Q4_1 draft and Q4_0 file, copied out of the catalog's folder:
    files of the user's own, with no record beside them."""
    from llamaspec import models

    folder = tmp_path_factory.mktemp("own-models")
    made = [models.resolve("smollm2-135m", v, tools=modeltools.tools(llama_build)) for v in ("f32", "q4_1", "q4_0")]
    out = []
    for f, name in zip(made, ("SmolLM2-135M-F32.gguf", "SmolLM2-135M-Q4_1.gguf", "SmolLM2-135M-Q4_0.gguf"), strict=True):
        shutil.copyfile(f.path, folder / name)
        out.append(folder / name)
    return out[0], out[1], out[2]


def test_sweep_of_two_files_ends_with_the_decision_and_a_deploy_command_naming_them(llama_build, pair_files) -> None:
    target, draft, _ = pair_files
    args = ["sweep", "-m", str(target), "-md", str(draft), "--draft", "1,2,4,8", "-n", "24", "-t", "1", "-r", "1",
            "--budget", "12",
            "-p", "# Quick-sort implementation in Python and sample usage:", "--no-plot"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out = result.output
    name = next(line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("study "))
    assert name.startswith("smollm2-135m-f32-smollm2-135m-q4_1-")
    # The decision, of whichever kind this machine's timings lead to (F32 with its Q4_1 draft gains
    # on some CPUs and not on others, and a budget this small on a shared machine may end
    # undecided: issue 38), with that kind's parts: a command naming these files, or what to measure.
    real_checks.answer_text(out, str(target), str(draft))
    # the measured runs (not the kept decision, kind "study"); the n-gram modes run without the draft
    runs = [r for r in Store.open().runs(experiment=name) if r["kind"] != STUDY_KIND]
    assert {r["target"] for r in runs} == {str(target)} and str(draft) in {r["draft"] for r in runs}
    assert {r["draft"] for r in runs} <= {str(draft), None}
    prov = runs[0]["provenance"]["models"]
    assert prov["target"]["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    assert prov["draft"]["sha256"] == hashlib.sha256(draft.read_bytes()).hexdigest()
    # the name finds it again: the same command resumes (nothing measured again), report takes the name
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert len([r for r in Store.open().runs(experiment=name) if r["kind"] != STUDY_KIND]) == len(runs)
    report = CliRunner().invoke(main, ["report", name, "--no-plot"])
    assert report.exit_code == 0 and f"# {name}" in report.output


# An edit prompt whose answer repeats it: the n-gram modes draft from it (tests/fixtures/llamacpp/record.py).
EDIT_PROMPT = ("Rewrite the following list with each item in upper case.\\nList: apple, banana, cherry, apple, banana, "
               "cherry, apple, banana, cherry.\\nAnswer: APPLE, BANANA, CHERRY, APPLE, BANANA,")


def test_an_ngram_mode_runs_on_llama_speculative_simple_without_a_draft(llama_build, pair_files) -> None:
    """``llamaspec run -m F32 --spec-type ngram-simple``: llama-speculative-simple drafts from the text,
    with no draft model, against llama-completion; counters consistent, output unchanged (never a
    speed or a decision: those depend on the machine)."""
    import json

    target, _draft, _ = pair_files
    args = ["run", "-m", str(target), "--spec-type", "ngram-simple", "--program", "speculative-simple",
            "--ngram-size-n", "3", "--ngram-size-m", "8", "-p", EDIT_PROMPT, "-n", "32", "-t", "1", "--repeats", "1",
            "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    [report] = json.loads(result.stdout)
    s = report["summary"]
    assert report["status"] == "ok" and report["draft"] is None and report["settings"]["spec_type"] == "ngram-simple"
    assert s["lossless"]["verdict"] == "identical", s["lossless"]
    assert s["n_drafted"] is not None and 0 <= s["n_accept"] <= s["n_drafted"]
    assert s["program"] == "llama-speculative-simple" and s["draft"]["problem"] is None
    assert s["n_predict"] >= 32  # accepted drafts may overshoot -n
    measured = Store.open().measurements(report["run_id"])
    argv = next(m["argv"] for m in measured if m["mode"] == "speculative")
    assert Path(argv[0]).name == "llama-speculative-simple" and "-md" not in argv
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple"
    assert report["deploy"] and all("-md" not in c["argv"] for c in report["deploy"]["commands"])


@pytest.mark.hub
def test_run_with_a_hub_repo_quant_as_the_target(llama_build, pair_files, hub) -> None:  # noqa: F811
    target, draft, q4_0 = pair_files
    repo = "tester/SmolLM2-135M-GGUF"
    commit = hub.add(repo, {"README.md": b"# SmolLM2-135M as GGUF\n", q4_0.name: q4_0.read_bytes(),
                            draft.name: draft.read_bytes()})
    result = CliRunner().invoke(main, ["run", "-m", f"{repo}:Q4_0", "-md", str(draft), "-n", "16", "-t", "1", "-r", "1",
                                       "--draft", "4", "-p", "def fib(n):"])
    assert result.exit_code == 0, result.output
    assert "lossless: identical" in result.output
    (run,) = Store.open().runs()
    assert run["target"] == f"{repo}:Q4_0"
    models = run["provenance"]["models"]
    assert models["target"]["sha256"] == hashlib.sha256(q4_0.read_bytes()).hexdigest()
    assert f"/snapshots/{commit}/{q4_0.name}" in models["target"]["path"]  # in the HF cache, by its name
    assert given.lock_path().is_file() and commit in given.lock_path().read_text()


def test_a_prompt_answered_in_a_word_is_left_out_with_a_line_and_the_study_answers(llama_build, pair_files,
                                                                                    tmp_path: Path) -> None:
    """The real target answers one of two chat prompts in a word: that prompt is named as too short
    to time, once, and the study answers on the other (issue 46)."""
    target, draft, _ = pair_files
    prompts = tmp_path / "two.jsonl"
    prompts.write_text(
        '{"id": "word", "category": "qa", "chat": true, "prompt": "Answer with one word only, yes or no: is ice cold?"}\n'
        '{"id": "story", "category": "writing", "chat": true, "prompt": "Write a short story about a lighthouse keeper '
        'who finds a message in a bottle. Use at least five sentences."}\n')
    args = ["sweep", "-m", str(target), "-md", str(draft), "--draft", "8", "--modes", "none", "-n", "24", "-t", "1",
            "-r", "1", "--fixed-grid", "--prompts", str(prompts), "--no-plot"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out = result.output
    left = [line for line in out.splitlines() if line.strip().startswith("word ")]
    assert left and "left out: too short to time: the target alone answers in" in left[0], out
    assert "left out of the answer (1): word (too short to time" in out
    story = next(line for line in out.splitlines() if line.strip().startswith("story "))
    assert re.search(r" \d+ tokens  ", story) and "left out" not in story, out  # timed: it carries the answer
    real_checks.answer_text(out, str(target), str(draft))
