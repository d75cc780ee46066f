"""The real thing: the pinned llama.cpp build on the real offline SmolLM2 pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaspec import analysis, experiment, sweep
from llamaspec.cli import main
from llamaspec.experiment import Settings
from llamaspec.llamacpp.runner import LlamaCppBackend
from llamaspec.results import Store
from llamaspec.run import run_experiment

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]


@pytest.fixture(scope="session")
def offline_pair(llama_build):
    from llamaspec import models

    return models.resolve("smollm2-135m", "f32", build=llama_build), models.resolve("smollm2-135m", "q4_1", build=llama_build)


def small(name: str = "smollm2-quicksort", n: int = 24, draft: int = 4) -> experiment.Experiment:
    return experiment.load(name).with_overrides(Settings(n_predict=n, draft_max=draft))


def test_run_reports_speedup_acceptance_and_lossless(llama_build, offline_pair) -> None:
    store = Store.open()
    (result,) = run_experiment(small(), LlamaCppBackend(llama_build), store)
    assert result.status == "ok", result.error
    s = result.summary
    assert s["decode_tps"]["median"] > 0 and s["baseline_decode_tps"]["median"] > 0
    assert s["speedup"]["median"] == pytest.approx(s["decode_tps"]["median"] / s["baseline_decode_tps"]["median"])
    assert 0 < s["n_accept"] <= s["n_drafted"]
    assert s["accept"]["median"] == pytest.approx(100 * s["n_accept"] / s["n_drafted"], abs=1e-3)
    # The key property of speculative decoding: greedy output with a draft equals greedy output without one.
    assert s["lossless"]["identical"] is True and s["lossless"]["compared_chars"] > 50
    run = store.run(result.run_id)
    prov = run["provenance"]
    assert prov["llamacpp"]["commit"] == "0c1e570" and prov["llamacpp"]["flag_generation"] == "2026"
    assert prov["models"]["target"]["sha256"] == offline_pair[0].sha256
    assert prov["hardware"]["cores"] >= 1
    for m in store.measurements(result.run_id):
        assert Path(m["log_path"]).is_file() and m["peak_rss_bytes"] > 50 * 2**20


def test_cli_run_prints_the_table(llama_build, offline_pair) -> None:
    result = CliRunner().invoke(main, ["run", "smollm2-quicksort", "-n", "16", "--draft", "2"])
    assert result.exit_code == 0, result.output
    assert "speedup" in result.output and "lossless: identical" in result.output


def test_sweep_stopped_midway_resumes_without_rerunning(llama_build, offline_pair) -> None:
    store = Store.open()
    backend = LlamaCppBackend(llama_build)
    exp = small(n=16)
    axes = {"draft_max": sweep.parse_values("draft_max", "1..3")}
    seen: list[str] = []

    def stop_after_first_point(event: str, data: dict) -> None:
        seen.append(f"{event}:{data['mode']}")
        if event == "done" and data["mode"] == "speculative":
            raise KeyboardInterrupt  # Ctrl-C right after the first point finished

    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(exp, axes, backend, store, on_event=stop_after_first_point)
    finished = store.runs(status="ok")
    assert len(finished) == 0 or all(r["kind"] == "sweep" for r in finished)
    first = store.runs()
    assert first[0]["status"] == "interrupted"  # the point being stopped is not passed off as finished
    kept = store.measurements(first[0]["id"])
    assert [m["mode"] for m in kept] == ["draft", "batch", "baseline", "speculative"]

    (result,) = sweep.run_sweep(exp, axes, backend, store)
    assert result.measured == 3 and result.reused == 0  # the interrupted point is measured again
    (again,) = sweep.run_sweep(exp, axes, backend, store)
    assert again.measured == 0 and again.reused == 3  # nothing is rerun
    # One draft timing and one batch timing for the whole sweep, and one baseline at its start
    # (draft length does not change the target's work), measured before the interruption and
    # reused after it; the baseline is measured once more when the sweep ends.
    modes = [m["mode"] for r in store.runs(sweep_id=result.sweep_id) for m in store.measurements(r["id"])]
    assert [modes.count(m) for m in ("baseline", "draft", "batch", "speculative")] == [2, 1, 1, 4]
    report = analysis.sweep_report(store, result.sweep_id, plot=False)
    assert all(r.summary["baseline_decode_tps"]["n"] == 2 for g in report.groups for r in g.rows)


def test_old_generation_binaries(offline_pair) -> None:
    """The same experiment on an early-2025 llama.cpp (--draft-max, llama-cli) given as a binaries folder."""
    from llamaspec.llamacpp import build, source

    pin = source.PINNED_SDISTS.get("0.3.8")
    if pin is None:
        pytest.skip("no older generation pinned")
    info = source.fetch("pypi:llama-cpp-python==0.3.8", source.paths.cache_dir() / "trees" / "llama-cpp-python-0.3.8")
    old = build.build("cpu", source=info)  # cached after the first time
    backend = LlamaCppBackend(build.prebuilt(Path(old.bin_dir)))
    assert backend.caps("speculative").generation == "2024"
    (result,) = run_experiment(small(n=16), backend, Store.open())
    assert result.status == "ok", result.error
    argv = Store.open().measurements(result.run_id)[-1]["argv"]
    assert "--draft-max" in argv and "--spec-draft-n-max" not in argv
    assert result.summary["lossless"]["identical"] is True
