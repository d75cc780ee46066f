"""Running a case: interleaving, summary, lossless check, storage of failures. Fake programs
replay real recorded llama.cpp output; the real binaries run in test_run_llamacpp.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import FIXTURES, fake_bin_dir

from llamaspec import report
from llamaspec.backend import ModelPath, ResolvedCase
from llamaspec.cli import main
from llamaspec.experiment import DEFAULT_SETTINGS, Settings
from llamaspec.llamacpp import build, parse
from llamaspec.llamacpp.runner import LlamaCppBackend
from llamaspec.results import Store
from llamaspec.run import compare_texts, derived_counters, run_case

HW = {"cpu": "test", "cores": 2}


def case(tmp_path: Path, **settings) -> ResolvedCase:
    s = Settings(n_predict=64, threads=2, draft_max=8, timeout=settings.pop("timeout", 60.0), **settings).over(DEFAULT_SETTINGS)
    return ResolvedCase("exp", "python", ModelPath("smollm2-135m:f16", str(tmp_path / "t.gguf"), "aa"),
                        ModelPath("smollm2-135m:q4_0", str(tmp_path / "d.gguf"), "bb"),
                        "# Quick-sort implementation in Python and sample usage:", None, s)


def backend(tmp_path: Path, **behaviour) -> LlamaCppBackend:
    return LlamaCppBackend(build.prebuilt(fake_bin_dir(tmp_path / "bin", **behaviour)))


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
    assert s["decode_tps"]["median"] == pytest.approx(spec.decode_tps)
    assert s["baseline_decode_tps"]["median"] == pytest.approx(base.decode_tps)
    assert s["speedup"]["median"] == pytest.approx(spec.decode_tps / base.decode_tps)
    assert (s["n_drafted"], s["n_accept"], s["accept"]["median"]) == (spec.n_drafted, spec.n_accept, spec.accept)
    assert s["target_calls"] == spec.n_predict - spec.n_accept
    stored = store.measurements(result.run_id)
    assert len(stored) == 4 and all(m["ok"] for m in stored)
    assert Path(stored[1]["log_path"]).read_text().startswith("$ ")
    run = store.run(result.run_id)
    assert run["status"] == "ok" and run["provenance"]["llamacpp"]["flag_generation"] == "2026"
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
    assert result.measurements[0].wall_seconds < 30


def test_output_without_stats_is_a_clear_failure(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path), backend(tmp_path, speculative="no-stats"), store, hardware=HW)
    assert result.status == "failed"
    assert "llama-speculative output:" in (result.error or "")


def test_program_error_names_its_message(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case(tmp_path), backend(tmp_path, completion="fail"), store, hardware=HW)
    assert "exited with code 1: error: failed to load model" in (result.error or "")


def test_draft_free_mode_unknown_to_the_build_is_refused_before_running(tmp_path: Path) -> None:
    from llamaspec.errors import LlamaspecError

    with pytest.raises(LlamaspecError, match="does not know --spec-type ngram-nope") as err:
        run_case(case(tmp_path, spec_type="ngram-nope"), backend(tmp_path), Store.open(tmp_path / "r.sqlite"), hardware=HW)
    assert "ngram-simple" in (err.value.hint or "")


def test_lossless_compares_the_shorter_text() -> None:
    assert compare_texts("abc def ghi", "abc def")["identical"] is True
    diff = compare_texts("abc dXf", "abc def")
    assert diff["identical"] is False and diff["first_difference"] == 5
    assert compare_texts(None, "x")["identical"] is None


def test_derived_counters() -> None:
    # the write-up: n_predict 265, n_accept 195 -> 70 target calls
    d = derived_counters(265, 317, 195)
    assert d["target_calls"] == 70
    assert d["tokens_per_call"] == pytest.approx(265 / 70)
    assert d["mean_accepted"] == pytest.approx(195 / 70)


def test_cli_run_failure_is_one_line_with_hint_and_nonzero_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crashing binary through the CLI: one Error line, a Hint, exit 1, the run stored as failed."""
    import llamaspec.run as runs

    bins = fake_bin_dir(tmp_path / "bin", speculative="killed")
    monkeypatch.setattr(runs, "resolve_model", lambda ref: ModelPath(ref.label, str(tmp_path / f"{ref.variant}.gguf"), "x"))
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
    result = CliRunner().invoke(main, ["results", "export", "--format", "json"])
    assert result.exit_code == 0
    assert json.loads(result.output)[0]["measurements"][1]["mode"] == "speculative"
