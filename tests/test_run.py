"""Running a case: interleaving, summary, lossless check, storage of failures. Fake programs
replay real recorded llama.cpp output; the real binaries run in test_run_llamacpp.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import FIXTURES, HANG_SECONDS, fake_bin_dir

from llamaspec.cli import main
from llamaspec.llamacpp import build, parse
from llamaspec.llamacpp.prompting import generated_part, served_prompt
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.measure.chat import process_escapes
from llamaspec.measure.contract import ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.store.results import Store
from llamaspec.studies.run import run_case
from llamaspec.views import report

HW = {"cpu": "test", "cores": 2}


@pytest.fixture(autouse=True)
def _no_vocabulary_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model files here are names only: the pair check (its own tests) has nothing to read."""
    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)


def case(tmp_path: Path, **settings) -> ResolvedCase:
    s = Settings(**{"n_predict": 64, "threads": 2, "draft_max": 8, "timeout": 60.0, **settings}).with_defaults()
    return ResolvedCase("exp", "python", ModelPath("smollm2-135m:f16", str(tmp_path / "t.gguf"), "aa"),
                        ModelPath("smollm2-135m:q4_0", str(tmp_path / "d.gguf"), "bb"),
                        "# Quick-sort implementation in Python and sample usage:", None, s)


def backend(tmp_path: Path, **behaviour) -> LlamaCppEngine:
    return LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin", **behaviour)))


def recorded(name: str) -> tuple[str, str]:
    folder = FIXTURES / "0c1e570"
    return (folder / f"{name}.stdout").read_text(), (folder / f"{name}.stderr").read_text()


def test_run_case_interleaves_stores_and_summarises(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path), backend(tmp_path), store, repeats=2, hardware=HW)
    assert result.status == "ok"
    modes = [m.mode for m in result.measurements]
    assert modes == ["baseline", "speculative", "speculative", "baseline"]  # ABBA
    spec = parse.parse_speculative(*recorded("speculative"))
    base = parse.parse_completion(*recorded("completion"))
    s = result.summary
    # one speed definition: tokens after the first over the time from the first token to the last
    assert s.decode_tps.median == pytest.approx((spec.n_decoded - 1) / spec.decode_s)
    assert s.baseline_decode_tps.median == pytest.approx(base.timings.eval_runs / (base.timings.eval_ms + base.timings.sampling_total_ms) * 1e3)
    assert s.speedup.median == pytest.approx(s.decode_tps.median / s.baseline_decode_tps.median)
    assert (s.n_drafted, s.n_accept) == (spec.n_drafted, spec.n_accept)
    # a fraction, from the counters (57 of 112); the printed "accept = 50.893%" is read as the same fraction
    assert s.acceptance is not None and s.acceptance.median == 57 / 112 == spec.n_accept / spec.n_drafted
    assert spec.acceptance == 0.50893 == pytest.approx(57 / 112, abs=1e-5)
    assert s.rounds == spec.n_predict - spec.n_accept - 1 == 14  # the first token comes from the prompt
    assert s.n_drafted == 8 * s.rounds and s.draft.policy == "fixed" and s.draft.problem is None
    assert s.lossless.verdict == "identical" and s.lossless.unit == "chars"
    assert set(s.speed_basis) == {"speculative", "baseline"}
    stored = store.measurements(result.run_id)
    assert len(stored) == 4 and all(m["ok"] for m in stored)
    assert Path(stored[1]["log_path"]).read_text().startswith("$ ")
    run = store.run(result.run_id)
    assert run["status"] == "ok" and run["provenance"]["engine"]["flag_generation"] == "2026"
    assert "--spec-draft-n-max" in stored[1]["argv"] and "--spec-type" in stored[1]["argv"]
    assert "-no-cnv" in stored[0]["argv"] and "-md" not in stored[0]["argv"]
    text = report.render([result])
    assert "speedup" in text and "lossless:" in text


def test_crash_mid_run_is_stored_as_failed_and_keeps_the_baseline(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path), backend(tmp_path, speculative="killed"), store, repeats=2, hardware=HW)
    assert result.status == "failed"
    assert "llama-speculative was killed by SIGKILL" in (result.error or "")
    stored = store.measurements(result.run_id)
    assert [(m["mode"], m["ok"]) for m in stored] == [("baseline", True), ("speculative", False)]
    assert Path(stored[1]["log_path"]).is_file()  # the partial output is kept
    assert store.run(result.run_id)["status"] == "failed"


def test_timeout_stops_the_program(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path, timeout=2.0), backend(tmp_path, completion="hang"), store, hardware=HW)
    assert result.status == "failed" and "timed out after 2 s" in (result.error or "")
    assert result.measurements[0].wall_seconds < HANG_SECONDS  # stopped by the timeout, not by the fake's own end


def test_output_without_stats_is_a_clear_failure(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path), backend(tmp_path, speculative="no-stats"), store, hardware=HW)
    assert result.status == "failed"
    assert "llama-speculative output:" in (result.error or "")


def test_output_that_lost_its_end_once_is_run_again(tmp_path: Path) -> None:
    """llama.cpp never joins its log thread: a short run can exit 0 before its timings are written."""
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path), backend(tmp_path, completion="lost-tail-once"), store, hardware=HW)
    assert result.status == "ok" and result.measurements[0].decode_tps
    lost = sorted(p.name for p in Path(result.measurements[0].log_path).parent.iterdir() if ".lost-tail-" in p.name)
    assert lost == [Path(result.measurements[0].log_path).stem + ".lost-tail-1.log"]


def test_program_error_names_its_message(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path), backend(tmp_path, completion="fail"), store, hardware=HW)
    assert "exited with code 1: error: failed to load model" in (result.error or "")


def test_draft_free_mode_unknown_to_the_build_is_refused_before_running(tmp_path: Path) -> None:
    from llamaspec.base.errors import LlamaspecError

    with pytest.raises(LlamaspecError, match="does not know --spec-type ngram-nope") as err:
        run_case(case(tmp_path, spec_type="ngram-nope"), backend(tmp_path), Store.open(tmp_path / "r.sqlite"), hardware=HW)
    assert "ngram-simple" in (err.value.hint or "")


def test_a_raw_prompt_reaches_every_engine_as_the_same_text(tmp_path: Path) -> None:
    """One function owns a raw prompt's escapes and a prompt file's last newline: llama.cpp's
    programs, llama-server and transformers (measured and deployed) get the same text. Before, the
    transformers engine knew 6 escapes and llama-server none, so one setting timed three prompts."""
    import dataclasses

    from llamaspec.hf import deploy as hf_deploy
    from llamaspec.hf.prompting import _input_ids
    from llamaspec.llamacpp.server import ServerEngine
    from llamaspec.studies import deploy as study_deploy
    from llamaspec.studies.experiment import Case, Experiment, ModelRef

    class Tokenizer:  # records the text the model would be given
        def __call__(self, text: str, return_tensors: str) -> object:
            self.text = text
            return type("Encoded", (), {"input_ids": None})()

    server = ServerEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin")))
    (tmp_path / "p.txt").write_text("a\\x41\\bc\\?\n")
    raw = case(tmp_path)
    for c, expected in [(dataclasses.replace(raw, prompt="a\\x41\\bc\\?"), "aA\bc?"),
                        (dataclasses.replace(raw, prompt=None, prompt_file=str(tmp_path / "p.txt")), "aA\bc?"),
                        (dataclasses.replace(raw, prompt="a\\x41\\bc\\?", settings=dataclasses.replace(raw.settings, escape=False)),
                         "a\\x41\\bc\\?")]:
        tokenizer = Tokenizer()
        _input_ids(c, tokenizer)
        script = hf_deploy.deployment(c).commands[0].text
        assert served_prompt(c).text == server.prompt_text(c) == tokenizer.text == expected
        assert f"prompt = {expected!r}" in script.splitlines()
        # the deploy check sends the experiment's case (its settings not yet defaulted) as it was measured
        unresolved = Case(c.case, ModelRef("t", "f32"), None, c.prompt, c.prompt_file,
                          Settings(escape=c.settings.escape if c.settings.escape is False else None))
        (sent,) = study_deploy.client_prompts(Experiment("e", "", "llama.cpp", 1, (unresolved,)))
        assert sent.text == expected


def test_generated_part_drops_the_echoed_prompt(tmp_path: Path) -> None:
    c = case(tmp_path)
    spec = parse.parse_speculative(*recorded("speculative"))
    text, found = generated_part(spec.text, c)
    assert found and not text.startswith("# Quick-sort") and text and spec.text.endswith(text)
    assert generated_part("# Quick-sort implementation in Python and sample usage:", c) == ("", True)  # cut after the prompt
    assert process_escapes("a\\nb\\tc\\x41") == "a\nb\tcA"
    # llama-speculative echoes a Llama (SPM) prompt with its BOS piece, llama-completion without it
    prompt = "# Quick-sort implementation in Python and sample usage:"
    assert generated_part(f"<s> {prompt} def quick", c) == (" def quick", True)
    assert generated_part(f" {prompt} def quick", c) == (" def quick", True)
    assert generated_part("<s> def quick", c) == ("<s> def quick", False)  # no echo: left whole


def test_p_min_is_refused_on_the_program_that_ignores_it(tmp_path: Path) -> None:
    from llamaspec.base.errors import LlamaspecError

    with pytest.raises(LlamaspecError, match="ignores p-min") as err:
        run_case(case(tmp_path, draft_p_min=0.9), backend(tmp_path), Store.open(tmp_path / "r.sqlite"), hardware=HW)
    assert "speculative-simple" in (err.value.hint or "")


def test_draft_min_is_refused_on_the_program_that_never_reads_it(tmp_path: Path) -> None:
    """llama-speculative lists --spec-draft-n-min (shared options) but never reads it: the flag table
    says which programs take it, and the runner refuses it on the others, pointing at the one that does."""
    from llamaspec.base.errors import LlamaspecError

    with pytest.raises(LlamaspecError, match="llama-speculative does not read draft_min") as err:
        run_case(case(tmp_path, draft_min=3), backend(tmp_path), Store.open(tmp_path / "r.sqlite"), hardware=HW)
    assert "program: speculative-simple" in (err.value.hint or "")


def test_cli_run_failure_is_one_line_with_hint_and_nonzero_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crashing binary through the CLI: one Error line, a Hint, exit 1, the run stored as failed."""

    bins = fake_bin_dir(tmp_path / "bin", speculative="killed")
    monkeypatch.setattr("llamaspec.models.gguf_model", lambda model, variant, tools=None: ModelPath(f"{model}:{variant}", str(tmp_path / f"{variant}.gguf"), "x"))
    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)
    result = CliRunner().invoke(main, ["run", "smollm2-quicksort", "--bin-dir", str(bins), "-n", "16"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith(("Error:", "Hint:"))]
    assert lines[0].startswith("Error: case python failed: llama-speculative was killed by SIGKILL")
    assert lines[1].startswith("Hint: the failed run is stored as run")
    assert "Traceback" not in result.output
    rows = Store.open().runs()
    assert rows[0]["status"] == "failed"


def test_cli_bad_experiment_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncases:\n  - target: {model: smollm2-135m, variant: f16}\n    prompt: p\n    draft: {model: nope, variant: q4_0}\n")
    result = CliRunner().invoke(main, ["run", str(bad)])
    assert result.exit_code == 1
    assert "cases[0].draft.model: unknown model 'nope'" in result.output


def test_cli_missing_prompt_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", "smollm2-quicksort", "--prompt-file", str(tmp_path / "nope.txt")])
    assert result.exit_code == 1 and "prompt file not found" in result.output


def test_results_export_json(tmp_path: Path) -> None:
    store = Store.open()
    run_case(case(tmp_path), backend(tmp_path), store, hardware=HW)
    result = CliRunner().invoke(main, ["results", "export", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)[0]["measurements"][1]["mode"] == "speculative"


def test_a_setting_the_engine_does_not_have_is_refused_before_running(tmp_path: Path) -> None:
    from llamaspec.base.errors import LlamaspecError

    store = Store.open(tmp_path / "r.sqlite")
    with pytest.raises(LlamaspecError, match="llama.cpp engine has no equivalent of dtype") as err:
        run_case(case(tmp_path, dtype="bfloat16"), backend(tmp_path), store, hardware=HW)
    assert "transformers" in (err.value.hint or "")
    assert store.runs() == []


def test_run_has_no_prompt_set_option_and_per_category_is_for_a_run_without_a_prompt() -> None:
    done = CliRunner().invoke(main, ["run", "smollm2-server-mini", "--prompts", "llamaspec-mini"])
    assert done.exit_code == 2 and "No such option '--prompts'" in done.output, done.output
    for args in (["smollm2-quicksort"], ["-m", "t.gguf", "-md", "d.gguf", "-p", "Hi"]):
        done = CliRunner().invoke(main, ["run", *args, "--per-category", "2"])
        assert done.exit_code == 2 and "--per-category is for -m/-md or a pasted command without a prompt" in done.output
