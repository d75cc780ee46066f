"""The answer as a command: the deploy commands each engine prints for a setting, run for real
(llama-server and llama-speculative-simple from the pinned build on the offline SmolLM2 pair; the
transformers snippet on a tiny local pair), plus the sweep's --json carrying them."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import real_checks

from llamaspec.llamacpp import modeltools, parse, server, server_process
from llamaspec.llamacpp.build import Build
from llamaspec.measure.contract import Command, Deployment, EngineOptions, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.registry import engines

PROMPT = "# Quick-sort implementation in Python and sample usage:"


def test_a_command_is_quoted_for_a_shell_and_rendered() -> None:
    argv = ["/opt/llama cpp/bin/llama-server", "-m", "/m/it's.gguf", "-t", "1"]
    c = Command.shell("llama-server", argv, "a note")
    assert shlex.split(c.text) == argv and c.argv == tuple(argv)
    d = Deployment("llama.cpp", True, "draft 4", (c,), ("n1",))
    text = d.render()
    assert text.splitlines()[0] == "deploy: draft 4 [llama.cpp]"
    assert f"    {c.text}" in text.splitlines() and "  note: n1" in text.splitlines()
    assert d.to_dict()["commands"][0]["argv"] == argv


# --- llama.cpp: the real build on the offline pair ------------------------------------------------

@pytest.fixture(scope="module")
def real_build(request: pytest.FixtureRequest) -> Build:
    from llamaspec.llamacpp import build

    bin_dir = os.environ.get("LLAMASPEC_TEST_BIN_DIR")
    if bin_dir:
        return build.prebuilt(Path(bin_dir))
    return request.getfixturevalue("llama_build")  # with llama-server: these tests start the printed one


@pytest.fixture(scope="module")
def pair(real_build: Build) -> tuple[Any, Any]:
    from llamaspec import models

    return (models.resolve("smollm2-135m", "f32", tools=modeltools.tools(real_build)),
            models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(real_build)))


def real_case(pair: tuple[Any, Any], draft: bool = True, **settings: Any) -> ResolvedCase:
    target, d = pair
    s = Settings(**{"n_predict": 24, "threads": 1, "ctx_size": 1024, "draft_max": 4, **settings}).with_defaults()
    return ResolvedCase("deploy-test", "python", ModelPath("smollm2-135m:f32", str(target.path)),
                        ModelPath("smollm2-135m:q4_1", str(d.path)) if draft else None, PROMPT, None, s)


def _command(d: Deployment, program: str) -> Command:
    return next(c for c in d.commands if c.program == program)


def _ask(argv: list[str], log: Path, n_predict: int = 32) -> dict[str, Any]:
    """Start the printed llama-server command on a free loopback port, ask one completion, stop it."""
    srv = server_process.Server(Path(argv[0]), argv[1:], log, "deploy")  # adds --host 127.0.0.1 --port <free>
    try:
        srv.start(ready_timeout=300)
        return srv.post("/completion", {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0.0}, timeout=300)
    finally:
        srv.stop()


@pytest.mark.llamacpp
@pytest.mark.slow
def test_the_printed_llamacpp_commands_run_and_draft(real_build: Build, pair: tuple[Any, Any], tmp_path: Path) -> None:
    import dataclasses

    from llamaspec.llamacpp.runner import LlamaCppEngine

    case = real_case(pair, draft_p_min=0.0, program="speculative-simple")
    if not real_build.prebuilt:  # as a build made without it (make demo's) has it: pending
        waiting = dataclasses.replace(real_build, programs={r: p for r, p in real_build.programs.items() if r != "server"},
                                      pending={**real_build.pending, "server": "llama-server"})
        later = LlamaCppEngine(waiting).deployment(case)
        assert "llama-server" not in {c.program for c in later.commands}
        assert any("`llamaspec build --server`" in n for n in later.notes)
    d = LlamaCppEngine(real_build).deployment(case)
    assert d.speculative and d.engine == "llama.cpp" and d.setting.startswith("draft 4 (smollm2-135m:q4_1)")
    srv, simple = _command(d, "llama-server"), _command(d, "llama-speculative-simple")
    for c in (srv, simple):
        argv = shlex.split(c.text)
        assert argv == list(c.argv) and Path(argv[0]).is_absolute() and Path(argv[0]).parent == Path(real_build.bin_dir)
    joined = " ".join(srv.argv)
    for part in (f"-m {pair[0].path}", f"-md {pair[1].path}", "--spec-type draft-simple", "--spec-draft-n-max 4",
                 "--spec-draft-p-min 0", "-t 1", "-c 1024", "-ngl 0"):
        assert part in joined, part
    assert "--metrics" not in srv.argv and "--cache-ram" not in srv.argv  # measuring switches, not serving ones
    # the same command a shell would run: start it, ask, it answers and drafted
    answer = _ask(shlex.split(srv.text), tmp_path / "server.log")
    assert answer.get("content") and answer["timings"].get("draft_n", 0) > 0, answer.get("timings")

    argv = shlex.split(simple.text)
    assert "-md" in argv and argv[argv.index("--spec-draft-n-max") + 1] == "4"
    argv[argv.index("-n") + 1] = "8"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert parse.parse_speculative(done.stdout, done.stderr).n_drafted > 0


@pytest.mark.llamacpp
@pytest.mark.slow
def test_a_chat_prompt_deploys_as_it_was_measured(real_build: Build, pair: tuple[Any, Any]) -> None:
    """A chat case's command-line deploy command gets the prompt rendered with the target's
    template, as measured (it runs, and parses the template's special tokens), and the server's
    note says chat requests go through the same template."""
    import dataclasses

    from llamaspec.llamacpp.prompting import served_prompt
    from llamaspec.llamacpp.runner import LlamaCppEngine

    case = dataclasses.replace(real_case(pair, program="speculative-simple"), chat=True,
                               history=(("user", "Hi"), ("assistant", "Hello! How can I help?")))
    d = LlamaCppEngine(real_build).deployment(case)
    assert any("/v1/chat/completions" in n and "chat template" in n for n in d.notes), d.notes
    simple = _command(d, "llama-speculative-simple")
    argv = shlex.split(simple.text)
    assert argv[argv.index("-p") + 1] == served_prompt(case).text and "<|im_start|>assistant" in served_prompt(case).text
    argv[argv.index("-n") + 1] = "8"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert parse.parse_speculative(done.stdout, done.stderr).n_encoded == LlamaCppEngine(real_build).measure(
        case, "speculative", Path(tempfile.mkdtemp()) / "spec.log").n_prompt


@pytest.mark.llamacpp
@pytest.mark.slow
def test_no_draft_is_the_target_alone(real_build: Build, pair: tuple[Any, Any], tmp_path: Path) -> None:
    d = engines.deployment("llama.cpp", real_case(pair), EngineOptions(bin_dir=Path(real_build.bin_dir)),
                            speculative=False)
    assert not d.speculative and d.setting == "no draft: the target smollm2-135m:f32 alone"
    srv = _command(d, "llama-server")
    assert not {"-md", "--spec-draft-n-max"} & set(srv.argv)
    assert srv.argv[list(srv.argv).index("--spec-type") + 1] == "none"  # the target alone, said explicitly
    completion = next(c for c in d.commands if c.program.startswith("llama-completion"))
    argv = shlex.split(completion.text)
    argv[argv.index("-n") + 1] = "4"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert parse.parse_completion(done.stdout, done.stderr).n_decoded >= 1


@pytest.mark.llamacpp
def test_an_ngram_mode_deploys_without_a_draft(real_build: Build, pair: tuple[Any, Any]) -> None:
    case = real_case(pair, draft=False, spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=8)
    from llamaspec.llamacpp import build

    prebuilt = build.prebuilt(Path(real_build.bin_dir))  # what --bin-dir opens (its accel unknown: -ngl as measured there)
    d = server.ServerEngine(prebuilt).deployment(case)
    assert d.speculative and [c.program for c in d.commands] == ["llama-server", "llama-speculative-simple"]
    for c in d.commands:
        argv = list(c.argv)
        assert "-md" not in argv and argv[argv.index("--spec-type") + 1] == "ngram-simple"
        assert argv[argv.index("--spec-ngram-simple-size-n") + 1] == "3"
        assert argv[argv.index("--spec-ngram-simple-size-m") + 1] == "8"
    assert d == engines.deployment("llama-server", case, EngineOptions(bin_dir=Path(real_build.bin_dir)))
    # the printed llama-speculative-simple line runs as printed, drafting from the prompt alone
    argv = list(_command(d, "llama-speculative-simple").argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = parse.parse_speculative(done.stdout, done.stderr)
    assert stats.n_accept <= stats.n_drafted


@pytest.mark.llamacpp
def test_measured_with_llama_speculative_says_so(real_build: Build, pair: tuple[Any, Any]) -> None:
    from llamaspec.llamacpp.runner import LlamaCppEngine

    d = LlamaCppEngine(real_build).deployment(real_case(pair))  # program: speculative (the default)
    assert any("llama-speculative (exactly k" in n for n in d.notes)
    assert "--spec-draft-p-min" not in d.commands[0].argv  # nothing invented that was not measured


# --- transformers: the snippet, run on a tiny pair -------------------------------------------------

def hf_case(target: str, draft: str | None, **settings: Any) -> ResolvedCase:
    s = Settings(**{"n_predict": 16, "threads": 1, "draft_max": 4, "draft_p_min": 0.0, **settings}).with_defaults()
    return ResolvedCase("exp", "case", ModelPath("target:hf", target), ModelPath("assistant:hf", draft) if draft else None,
                        "def quick sort the list", None, s)


def test_the_transformers_snippet_sets_the_assistant_and_the_generate_arguments() -> None:
    from llamaspec.hf import deploy

    d = deploy.deployment(hf_case("/m/t", "/m/a"), "cpu")
    code = d.commands[0].text
    compile(code, "<deploy>", "exec")
    assert "assistant.generation_config.num_assistant_tokens = 4" in code
    assert "assistant.generation_config.assistant_confidence_threshold = 0.0" in code
    assert "assistant_model=assistant" in code and "max_new_tokens=16" in code and "torch.set_num_threads(1)" in code
    gguf = deploy.deployment(hf_case("/m/f32/ggml-model-f32.gguf", None, spec_type="prompt-lookup"), "cpu")
    code = gguf.commands[0].text
    assert "prompt_lookup_num_tokens=4" in code and "assistant" not in code and "gguf_file='ggml-model-f32.gguf'" in code
    alone = deploy.deployment(hf_case("/m/t", "/m/a"), "cpu", speculative=False)
    assert not alone.speculative and "assistant" not in alone.commands[0].text


@pytest.mark.hf
def test_the_transformers_snippet_generates_what_the_backend_measured(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    import hf_factory

    from llamaspec.hf.runner import open_engine

    target, assistant = hf_factory.pair(tmp_path / "pair")
    case = hf_case(str(target), str(assistant))
    engine = open_engine(EngineOptions(accel="cpu"))
    try:
        engine.check(case)
        measured = engine.measure(case, "speculative", tmp_path / "s.log")
        d = engine.deployment(case)
    finally:
        engine.close()
    assert measured.ok and (measured.n_drafted or 0) > 0
    done = subprocess.run([sys.executable, "-c", d.commands[0].text], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.rstrip("\n") == measured.text


# --- the sweep's --json carries the command ---------------------------------------------------------

@pytest.mark.llamacpp
@pytest.mark.slow
def test_sweep_json_ends_with_the_deploy_command(real_build: Build, pair: tuple[Any, Any], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from llamaspec.cli import main

    exp = tmp_path / "exp.yaml"
    exp.write_text(f"name: deploy-sweep\nrepeats: 1\nsettings: {{n_predict: 16, threads: 1, ctx_size: 512}}\n"
                   f"cases:\n  - name: python\n    target: {{model: smollm2-135m, variant: f32}}\n"
                   f"    draft: {{model: smollm2-135m, variant: q4_1}}\n"
                   f"    prompt: {json.dumps(PROMPT)}\n")
    # draft lengths only, the deploy check left to its own tests (its verdict reads real timings):
    # the server command always stands, at the recommended length
    result = CliRunner().invoke(main, ["sweep", str(exp), "--draft", "2,4", "--modes", "none", "--no-check-deploy",
                                       "--no-plot", "--json", "--bin-dir", str(real_build.bin_dir)])
    assert result.exit_code == 0, result.output
    (report,) = real_checks.sweep_answers(result.stdout)
    target, draft = pair
    # whichever kind this machine's timings decide (issue 38), with that kind's parts
    kind = real_checks.answer(report, str(target.path), str(draft.path))
    if kind not in ("recommend", "no draft"):
        return  # no command: what to measure next instead (checked)
    deploy = report["deploy"]
    assert deploy["engine"] == "llama.cpp" and report["deploy_check"] is None
    server_cmd = next(c for c in deploy["commands"] if c["program"] == "llama-server")
    if kind == "recommend":  # llama-server drafts at the recommended length
        assert "unchecked (--no-check-deploy)" in " ".join(deploy["notes"])
        chosen = re.match(r"draft (\d+)", report["decision"]["chosen"]["label"])
        assert chosen is not None, report["decision"]["chosen"]  # --modes none: a draft length
        assert server_cmd["argv"][server_cmd["argv"].index("--spec-draft-n-max") + 1] == chosen.group(1)
    else:
        assert "-md" not in server_cmd["argv"] and "--spec-draft-n-max" not in server_cmd["argv"]


def test_a_stored_run_deploys_with_its_settings_models_and_the_experiments_prompt(tmp_path: Path) -> None:
    from fakes import FakeEngine

    from llamaspec.base.errors import LlamaspecError
    from llamaspec.store.results import Store
    from llamaspec.studies import deploy
    from llamaspec.studies.experiment import Case, Experiment, ModelRef
    from llamaspec.studies.run import resolve_case, run_case

    exp = Experiment("e", "", "fake", 1, (Case("python", ModelRef("t", "f32"), ModelRef("d", "q4_1"), PROMPT, None,
                                               Settings(draft_max=6, n_predict=16)),))
    engine = FakeEngine()
    store = Store.open(tmp_path / "r.sqlite")
    done = run_case(resolve_case(exp, exp.cases[0], engine), engine, store, hardware={})
    case = deploy.case_of_run(exp, store.run(done.run_id))
    assert case == done.case  # settings, model files and prompt as measured
    d = deploy.for_run(engine, exp, store.run(done.run_id))
    assert d.commands[0].argv == ("fake-serve", "/models/t-f32.gguf", "--draft", "/models/d-q4_1.gguf", "-k", "6")
    assert "--draft" not in deploy.for_run(engine, exp, store.run(done.run_id), speculative=False).commands[0].argv
    with pytest.raises(LlamaspecError, match="no longer has"):
        deploy.case_of_run(exp, {**store.run(done.run_id), "case_name": "gone"})
