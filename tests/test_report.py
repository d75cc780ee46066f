"""Reports across engines and against references in seconds, on runs stored by fake engines whose
numbers depend on what they are asked (each engine its own speed and acceptance), so a report
that mixed one engine's figures with another's, or lost the wall times, would show it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fakes import FakeEngine

from llamaspec.cli import main
from llamaspec.measure.contract import Measurement, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.measure.summary import Reference
from llamaspec.store.results import Store
from llamaspec.store.rows import Group
from llamaspec.studies import experiment
from llamaspec.studies.run import run_case
from llamaspec.views import report

HW = {"cpu": "test", "cores": 2}


@dataclasses.dataclass
class TimedEngine(FakeEngine):
    """A FakeEngine whose wall times follow its speeds (tokens over decode speed), timing the
    generation call alone as the transformers backend does."""

    def measure(self, case: ResolvedCase, mode: str, log_path: Any) -> Measurement:
        m = super().measure(case, mode, log_path)
        wall = (m.n_predict or 0) / m.decode_tps if m.decode_tps else 0.0
        return dataclasses.replace(m, wall_seconds=wall, stats={**(m.stats or {}), "generate_seconds": wall})


def case(exp: str, name: str = "python", draft: str | None = "smollm2-135m:q4_1", **settings) -> ResolvedCase:
    s = Settings(**{"n_predict": 64, "threads": 1, "draft_max": 8, **settings}).with_defaults()
    return ResolvedCase(exp, name, ModelPath("smollm2-135m:f32", "/t.gguf", "aa"),
                        ModelPath(draft, "/d.gguf", "bb") if draft else None, "# Quick-sort", None, s)


def test_engines_side_by_side(tmp_path: Path) -> None:
    store = Store.open()
    cpp = FakeEngine(name="llama.cpp", base_tps=100.0, alpha=0.8, drift=0.0, built_from="llama.cpp")
    hf = FakeEngine(name="transformers", base_tps=30.0, alpha=0.5, drift=0.0)
    a = run_case(case("cpp-exp"), cpp, store, repeats=2, hardware=HW)
    b = run_case(case("hf-exp"), hf, store, repeats=2, hardware=HW)
    # a pair only one engine measured, and one whose settings differ between the engines
    run_case(case("hf-exp", "self", draft="smollm2-135m:q4_0"), hf, store, repeats=2, hardware=HW)
    run_case(case("cpp-exp", "long", draft="smollm2-135m:q8_0", n_predict=128), cpp, store, repeats=2, hardware=HW)
    run_case(case("hf-exp", "long", draft="smollm2-135m:q8_0"), hf, store, repeats=2, hardware=HW)
    # a luckier sweep point does not stand for the engine: its newest plain run does
    swept = run_case(case("cpp-exp", draft_max=6), cpp, store, repeats=2, hardware=HW, kind="sweep",
                     group=Group("sweep", "s1"))
    assert swept.summary.speedup and a.summary.speedup and b.summary.speedup
    assert swept.summary.speedup.median > a.summary.speedup.median
    assert a.summary.speedup.median == pytest.approx(cpp.speedup_of(8)) != pytest.approx(hf.speedup_of(8))

    md = report.markdown(store, ["cpp-exp", "hf-exp"], "engine", plot=False)
    assert md.startswith("# cpp-exp, hf-exp") and "## cpp-exp" in md and "## hf-exp" in md
    section = md.split("## Compared by engine", 1)[1].split("\n## ", 1)[0]
    assert "**not comparable**" in section and "its own engine's baseline" in section
    pair = "smollm2-135m:f32 + smollm2-135m:q4_1"
    rows = [line for line in section.splitlines() if line.startswith(f"| {pair} |")]
    assert len(rows) == 2  # one per engine, not one for the pair
    by_engine = {("transformers" if "fake-30.0" in row else "llama.cpp"): row for row in rows}
    for engine, result in (("llama.cpp", a), ("transformers", b)):
        s = result.summary
        assert s.speedup and s.decode_tps and s.baseline_decode_tps and s.acceptance
        cells = [c.strip() for c in by_engine[engine].split("|")]
        assert s.speedup.text(suffix="x") in cells and s.decode_tps.text() in cells
        assert s.baseline_decode_tps.text() in cells and s.acceptance.percent_text() in cells
        assert "identical over 64 generated tokens" in cells
        assert cells[4:6] == [str(2 if engine == "llama.cpp" else 1), "8"]  # runs counted, the plain run's draft
    assert by_engine["llama.cpp"].split("|")[2].strip().startswith("llama.cpp fake")
    assert "smollm2-135m:f32 + smollm2-135m:q4_0: measured by transformers only." in section
    assert ("smollm2-135m:f32 + smollm2-135m:q8_0: **n_predict differs between the engines** "
            "(llama.cpp 128, transformers 64)") in section
    assert "- llama.cpp: baseline: fake baseline; speculative: fake speculative" in section
    assert "- transformers: baseline: fake baseline; speculative: fake speculative" in section
    # each experiment's own runs follow, headed by its name
    assert "## cpp-exp: Runs" in md and "## hf-exp: Runs" in md

    cli = CliRunner().invoke(main, ["report", "cpp-exp", "hf-exp", "--compare", "engine", "--no-plot"])
    assert cli.exit_code == 0 and cli.output == md
    missing = CliRunner().invoke(main, ["report", "cpp-exp", "nothing", "--compare", "engine"])
    assert missing.exit_code == 1 and "Error: no runs of 'nothing'" in missing.output


def test_report_json_is_the_data_of_the_runs_the_markdown_shows() -> None:
    store = Store.open()
    cpp = FakeEngine(name="llama.cpp", base_tps=100.0, alpha=0.8, drift=0.0, built_from="llama.cpp")
    hf = FakeEngine(name="transformers", base_tps=30.0, alpha=0.5, drift=0.0)
    a = run_case(case("cpp-exp"), cpp, store, repeats=2, hardware=HW)
    b = run_case(case("hf-exp", spec_type="ngram-simple", draft=None), hf, store, repeats=2, hardware=HW)
    swept = run_case(case("cpp-exp", draft_max=6), cpp, store, repeats=2, hardware=HW, kind="sweep",
                     group=Group("sweep", "s1"))
    assert a.summary.speedup and swept.summary.speedup and swept.summary.speedup.median > a.summary.speedup.median
    done = CliRunner().invoke(main, ["report", "cpp-exp", "hf-exp", "--compare", "engine", "--json", "--no-plot"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)  # the data alone on stdout
    cpp_data, hf_data = data["experiments"]
    assert (cpp_data["name"], hf_data["name"], data["compare_by"]) == ("cpp-exp", "hf-exp", "engine")
    assert cpp_data["runs"] == {"stored": 2, "ok": 2, "differs": 0, "failed": 0, "interrupted": 0}
    assert [r["id"] for r in cpp_data["plain_runs"]] == [a.run_id] and cpp_data["answer"] is None
    assert cpp_data["plain_runs"][0]["summary"]["speedup"]["median"] == a.summary.speedup.median
    assert [r["settings"]["spec_type"] for r in hf_data["plain_runs"]] == ["ngram-simple"]
    assert [p["run_id"] for g in cpp_data["sweeps"][0]["groups"] for p in g["points"]] == [swept.run_id]
    # each engine's newest plain run stands for it, not the luckier sweep point (as in the Markdown)
    assert sorted(g["chosen"] for g in data["groups"].values()) == [a.run_id, b.run_id]
    assert sorted(i for g in data["groups"].values() for i in g["runs"]) == [a.run_id, b.run_id, swept.run_id]


def test_other_groupings_still_work_over_several_experiments() -> None:
    store = Store.open()
    run_case(case("one"), FakeEngine(name="llama.cpp", drift=0.0, built_from="llama.cpp"), store, repeats=2, hardware=HW)
    run_case(case("two", draft="smollm2-135m:q4_0"), FakeEngine(name="llama-server", drift=0.0, built_from="llama.cpp"),
             store, repeats=2, hardware=HW)
    md = report.markdown(store, ("one", "two"), "pair", plot=False)
    assert "## Compared by pair" in md
    assert "| smollm2-135m:f32 + smollm2-135m:q4_1 |" in md and "| smollm2-135m:f32 + smollm2-135m:q4_0 |" in md
    run_case(case("two"), FakeEngine(name="transformers", drift=0.0), store, repeats=2, hardware=HW)
    builds = report.markdown(store, ("one", "two"), "build", plot=False)
    # two engines built from one tree share a build; an engine in a library is known by its versions
    assert "| llama.cpp fake | 2 |" in builds and "| fake-100.0 | 1 |" in builds


GUANACO = Reference(source="write-up", hardware="A40", n_predict=64, baseline_seconds=69, seconds=38)


def test_seconds_against_the_reference() -> None:
    engine = TimedEngine(name="transformers", base_tps=4.0, alpha=0.8, drift=0.0)
    result = run_case(case("g"), engine, Store.open(), repeats=2, hardware=HW, reference=GUANACO)
    base_s = 64 / 4.0
    spec_s = 64 / (4.0 * engine.speedup_of(8))
    table = {row[0]: row[1:] for row in report.rows(result.summary, GUANACO, report.seconds_of(result.measurements))}
    assert table["seconds (speculative; generate() call)"] == (f"{spec_s:.2f} s [{spec_s:.2f}-{spec_s:.2f}]", "38.00",
                                                               f"{spec_s / 38:.2f}x")
    assert table["seconds (baseline)"] == (f"{base_s:.2f} s [{base_s:.2f}-{base_s:.2f}]", "69.00", f"{base_s / 69:.2f}x")
    wall = table["speedup in wall time (baseline s / spec s)"]
    assert wall[0].startswith(f"{base_s / spec_s:.2f}x") and wall[1] == f"{69 / 38:.2f}"
    assert wall[2] == f"{base_s / spec_s / (69 / 38):.2f}x"
    # the console table of `llamaspec run` shows them
    assert f"{spec_s:.2f} s" in report.render([result]) and "speedup in wall time" in report.render([result])


def test_seconds_of_another_length_are_not_compared() -> None:
    engine = TimedEngine(name="transformers", drift=0.0)
    result = run_case(case("g", n_predict=32), engine, Store.open(), repeats=1, hardware=HW, reference=GUANACO)
    table = {row[0]: row[1:] for row in report.rows(result.summary, GUANACO, report.seconds_of(result.measurements))}
    assert table["seconds (baseline)"][2] == "n/a (32 vs 64 tokens)"
    assert table["seconds (speculative; generate() call)"][2] == "n/a (32 vs 64 tokens)"


def test_llama_cpp_seconds_only_against_a_reference_in_seconds() -> None:
    """llama.cpp's wall time includes process start and model load: shown (and labelled so) only
    when the reference is in seconds."""
    result = run_case(case("c"), FakeEngine(drift=0.0), Store.open(), repeats=1, hardware=HW)
    seconds = report.seconds_of(result.measurements)
    assert seconds is not None and not seconds.generation_only
    assert not any(row[0].startswith("seconds") for row in report.rows(result.summary, None, seconds))
    shown = [row[0] for row in report.rows(result.summary, GUANACO, seconds)]
    assert "seconds (speculative; whole process, model load included)" in shown


def test_the_markdown_reference_table_has_the_seconds(tmp_path: Path) -> None:
    """The report reads the wall times back from the store, with the reference stored with the run."""
    exp = experiment.load("guanaco-7b")
    ref = exp.cases[0].reference
    assert ref is not None and ref.seconds == 38
    engine = TimedEngine(name="transformers", base_tps=8.0, alpha=0.8, drift=0.0)
    store = Store.open()
    result = run_case(case("guanaco-7b", "joe-biden", n_predict=512), engine, store, repeats=2, hardware=HW,
                      reference=ref, exp=exp)
    md = report.markdown(store, "guanaco-7b", plot=False)
    spec_s = 512 / (8.0 * engine.speedup_of(8))
    assert f"| seconds (speculative; generate() call) | {spec_s:.2f} s" in md
    assert f"| 38.00 | {spec_s / 38:.2f}x |" in md
    assert f"| seconds (baseline) | {512 / 8.0:.2f} s" in md and f"| 69.00 | {64 / 69:.2f}x |" in md
    assert result.summary.speedup is not None


def test_a_groups_shown_draft_is_the_decision_rules_not_the_highest_median() -> None:
    """Of a group's sweep points the report shows the one the decision rule picks (within 2 % of
    the best, the cheaper), not the highest median: the best of several noisy medians is biased up."""
    from test_workload_runs import summary

    rows = [{"id": i, "status": "ok", "draft_max": k, "summary": summary(ratios)}
            for i, (k, ratios) in enumerate([(4, [1.30, 1.31, 1.29, 1.30, 1.31, 1.30]),
                                             (8, [1.31, 1.32, 1.30, 1.31, 1.32, 1.31])])]
    assert report._best(rows)["draft_max"] == 4
    assert max(rows, key=lambda r: r["summary"]["speedup"]["median"])["draft_max"] == 8  # what it showed before
