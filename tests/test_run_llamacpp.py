"""The real thing: the pinned llama.cpp build on the real offline SmolLM2 pair."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import real_checks
from click.testing import CliRunner
from fakes import swept

from llamaspec.cli import main
from llamaspec.llamacpp import modeltools
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.measure import estimators
from llamaspec.measure.settings import Settings
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Store
from llamaspec.store.rows import measurement_of
from llamaspec.studies import experiment, grid
from llamaspec.studies.run import run_experiment
from llamaspec.views import analysis

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]


@pytest.fixture(scope="session")
def offline_pair(llama_build):
    from llamaspec import models

    return models.resolve("smollm2-135m", "f32", tools=modeltools.tools(llama_build)), models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(llama_build))


def small(name: str = "smollm2-quicksort", n: int = 24, draft: int = 4, repeats: int = 1, **settings) -> experiment.Experiment:
    return experiment.load(name).with_overrides(Settings(n_predict=n, draft_max=draft, threads=1, **settings), repeats=repeats)


def drafting_only(backend: LlamaCppEngine) -> LlamaCppEngine:
    """The backend without the speedup model's costs (llama-bench: a third of a short sweep's
    time), for the tests about what the programs draft; test_sweep_stopped_midway_resumes_without_rerunning
    times and checks the costs."""
    backend.capabilities = replace(backend.capabilities, modes=backend.capabilities.modes - {"batch"})
    assert not backend.capabilities.times_costs
    return backend


def test_run_reports_speedup_acceptance_and_lossless(llama_build, offline_pair) -> None:
    store = Store.open()
    (result,) = run_experiment(small(repeats=3), LlamaCppEngine(llama_build), store)
    assert result.status == "ok", result.error
    s = result.summary
    assert s.paired and s.pairs == 3
    for m in result.measurements:  # each run's figures from what its program printed (tests/real_checks.py)
        if m.mode == "speculative":
            real_checks.speculative_counters(m, k=4)
            real_checks.speculative_speed(m, requested=24)
        else:
            real_checks.baseline_speed(m, requested=24)
    for spec_m, base_m in zip([m for m in result.measurements if m.mode == "speculative"],
                              [m for m in result.measurements if m.mode == "baseline"], strict=True):
        real_checks.same_output(spec_m, base_m)
    # the summary's counters are one speculative run's (the median's), not made up between them
    assert (s.n_drafted, s.n_accept, s.rounds) in {(m.n_drafted, m.n_accept, m.rounds) for m in result.measurements}
    spec = [m.decode_tps for m in result.measurements if m.mode == "speculative"]
    base = [m.decode_tps for m in result.measurements if m.mode == "baseline"]
    assert sorted(s.speedup.values) == pytest.approx(sorted(a / b for a, b in zip(spec, base, strict=True)))  # paired
    assert s.speedup.low <= s.speedup.median <= s.speedup.high
    assert 0 < s.n_accept <= s.n_drafted
    assert s.acceptance is not None and s.acceptance.median == pytest.approx(s.n_accept / s.n_drafted, abs=1e-5)
    assert s.n_drafted == 4 * s.rounds and s.draft.problem is None  # llama-speculative drafts exactly k per round
    # The key property of speculative decoding: greedy output with a draft equals greedy output without one,
    # compared on the generated part only (the echoed prompt is not part of it).
    assert s.lossless.verdict == "identical" and s.lossless.compared > 50
    assert not result.measurements[-1].text.startswith("# Quick-sort")
    run = store.run(result.run_id)
    prov = run["provenance"]
    assert prov["engine"]["commit"] == "0c1e570" and prov["engine"]["flag_generation"] == "2026"
    assert prov["experiment"]["sha256"] and prov["experiment"]["path"].endswith("smollm2-quicksort.yaml")
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
    backend = LlamaCppEngine(llama_build)
    exp = small(n=16)
    axes = {"draft_max": grid.parse_values("draft_max", "1..2")}  # two points: the stopped one and one after it
    seen: list[str] = []

    def stop_after_first_point(event: str, data: dict) -> None:
        seen.append(f"{event}:{data['mode']}")
        if event == "done" and data["mode"] == "speculative":
            raise KeyboardInterrupt  # Ctrl-C right after the first speculative run finished

    with pytest.raises(KeyboardInterrupt):
        swept(exp, axes, backend, store, on_event=stop_after_first_point)
    first = store.runs()
    assert first and all(r["status"] == "interrupted" for r in first)  # nothing stopped is passed off as finished
    kept = sorted(m["mode"] for r in first for m in store.measurements(r["id"]))
    assert kept == ["baseline", "speculative"]  # the block's first baseline and its first run; costs come after a block

    result = swept(exp, axes, backend, store)
    assert len([r for r in store.runs(group_id=result.sweep_id, kind="sweep") if r["status"] == "ok"]) == 2  # measured again
    done = len(store.runs(kind="sweep"))
    swept(exp, axes, backend, store)
    assert len(store.runs(kind="sweep")) == done  # nothing is rerun
    report = analysis.sweep_report(store, result.sweep_id, plot=False)
    rows = [r for g in report.groups for r in g.rows]
    texts = set()
    for row in rows:
        s = row.summary
        # each point over the two baselines of its own block, measured around it
        assert s.paired and s.estimator == estimators.BLOCK and s.pairs == 1 and s.baseline_decode_tps.n == 2
        # each point drafted what it was asked for: exactly k per round on llama-speculative
        assert s.draft.requested == row.draft_max and s.n_drafted == row.draft_max * s.rounds, row.draft_max
        assert s.lossless.verdict == "identical"
        spec = [m for m in store.measurements(row.run_id) if m["mode"] == "speculative"][0]
        base = store.in_blocks([spec["block"]])[0]
        spec_m, base_m = measurement_of(spec), measurement_of(base)  # as stored, read back
        real_checks.speculative_counters(spec_m, k=row.draft_max)
        real_checks.speculative_speed(spec_m, requested=16)
        real_checks.baseline_speed(base_m, requested=16)
        real_checks.same_output(spec_m, base_m, at_least=20)
        # the costs were timed at the run's own depth: the prompt as the programs counted it + n/2
        assert s.cost_depth == base["n_prompt"] + 16 // 2, (s.cost_depth, base["n_prompt"])
        texts.add(spec["text"][:60])
    assert len(texts) == 1  # greedy output agrees across draft lengths


def test_p_min_changes_drafting_on_speculative_simple_only(llama_build, offline_pair) -> None:
    from llamaspec.base.errors import LlamaspecError

    backend = drafting_only(LlamaCppEngine(llama_build))
    store = Store.open()
    with pytest.raises(LlamaspecError, match="ignores p-min"):
        swept(small(n=48, draft=8), {"draft_p_min": (0.0, 0.9)}, backend, store)
    result = swept(small(n=48, draft=8, program="speculative-simple"), {"draft_p_min": (0.0, 0.9)}, backend, store)
    drafted = {r["settings"]["draft_p_min"]: Summary.from_dict(r["summary"]).n_drafted
               for r in store.runs(group_id=result.sweep_id, kind="sweep")}
    assert drafted[0.9] < drafted[0.0]  # a confident-only draft stops early
    for r in store.runs(group_id=result.sweep_id, kind="sweep"):
        s = Summary.from_dict(r["summary"])
        assert s.draft.policy == "capped" and s.n_drafted <= 8 * s.rounds and s.lossless.verdict == "identical"


def test_draft_min_drops_short_drafts_on_speculative_simple(llama_build, offline_pair) -> None:
    """draft_min reaches llama-speculative-simple: with p-min cutting drafts short, a minimum of 6
    drops the rounds' short drafts, so fewer tokens are drafted (26 against 15 when measured); output
    stays identical."""
    backend = drafting_only(LlamaCppEngine(llama_build))
    store = Store.open()
    result = swept(small(n=48, draft=8, program="speculative-simple", draft_p_min=0.9),
                   {"draft_min": (0, 6)}, backend, store)
    rows = {r["settings"]["draft_min"]: r for r in store.runs(group_id=result.sweep_id, kind="sweep")}
    runs = {k: Summary.from_dict(r["summary"]) for k, r in rows.items()}
    assert runs[6].n_drafted < runs[0].n_drafted
    assert all(s.lossless.verdict == "identical" for s in runs.values())
    spec = [m for m in store.measurements(rows[6]["id"]) if m["mode"] == "speculative"]
    assert "--spec-draft-n-min" in spec[0]["argv"]


def test_old_generation_binaries(offline_pair) -> None:
    """The same experiment on an early-2025 llama.cpp (--draft-max, llama-cli) given as a binaries folder."""
    import llamacpp_builds

    from llamaspec.llamacpp import build

    old = llamacpp_builds.older(llamacpp_builds.EARLY_2025)  # cached after the first time
    backend = LlamaCppEngine(build.prebuilt(Path(old.bin_dir)))
    assert backend.caps("speculative").generation == "2024"
    (result,) = run_experiment(small(n=16), backend, Store.open())
    assert result.status == "ok", result.error
    argv = Store.open().measurements(result.run_id)[-1]["argv"]
    assert "--draft-max" in argv and "--spec-draft-n-max" not in argv
    assert result.summary.lossless.verdict == "identical"
    assert result.summary.n_drafted == 4 * result.summary.rounds
    base, spec = result.measurements  # llama-cli and llama-speculative of early 2025 print alike enough
    real_checks.speculative_counters(spec, k=4)
    real_checks.speculative_speed(spec, requested=16)
    real_checks.baseline_speed(base, requested=16)
    real_checks.same_output(spec, base, at_least=20)


def test_cli_run_on_speculative_simple_prints_acceptance_by_position(llama_build, offline_pair) -> None:
    """llama-speculative-simple at -lv 4 prints its statistics line: run shows acceptance by position,
    stores the counts with each measurement, and they add up to the program's own counters."""
    import re

    result = CliRunner().invoke(main, ["run", "smollm2-quicksort", "-n", "24", "--draft", "4", "--program",
                                       "speculative-simple", "--p-min", "0", "-t", "1", "-r", "1"])
    assert result.exit_code == 0, result.output
    line = re.search(r"accepted at position 1\.\.(\d+): ((?:\d+%, )*\d+%) \(of (\d+) drafting rounds\)", result.output)
    assert line, result.output
    store = Store.open()
    (run,) = store.runs(experiment="smollm2-quicksort")
    (spec,) = [m for m in store.measurements(run["id"]) if m["mode"] == "speculative"]
    assert "-lv" in spec["argv"]
    drafted, accepted = spec["drafted_by_position"], spec["accepted_by_position"]
    assert drafted[0] == int(line.group(3)) and len(drafted) == int(line.group(1)) == len(accepted)
    assert accepted[0] <= drafted[0] and all(a >= b for a, b in zip(accepted, accepted[1:], strict=False))
    if len(drafted) == 4:  # every position known: they add up to the program's counters
        assert sum(drafted) == spec["n_drafted"] and sum(accepted) == spec["n_accept"]
    shown = [int(x) for x in re.findall(r"(\d+)%", line.group(2))]
    assert shown == [round(100 * a / d) for a, d in zip(accepted, drafted, strict=True)]
    # llama-speculative (the default program) prints none, and says so
    result = CliRunner().invoke(main, ["run", "smollm2-quicksort", "-n", "16", "--draft", "2", "-t", "1", "-r", "1"])
    assert result.exit_code == 0, result.output
    assert "acceptance by position: not known (no statistics line (llama-speculative prints none" in result.output
