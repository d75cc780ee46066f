"""The run core (run, sweep, summary, report) on an in-process engine whose numbers depend on
what it is asked and on a machine that drifts: pairing, one estimator in every view, the lossless
check, the drafted-length check, ties and recommendations."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import HW, FakeEngine, case, exp, study_everything, swept

from llamaspec.measure.contract import Measurement
from llamaspec.measure.summary import Summary, compare_outputs
from llamaspec.store.results import Store
from llamaspec.studies import budget, grid, study
from llamaspec.studies.run import raise_if_failed, run_case
from llamaspec.views import analysis, report


def test_pairs_cancel_the_drift_of_the_machine() -> None:
    engine = FakeEngine(drift=0.03)
    result = run_case(case(), engine, Store.open(), repeats=4, hardware=HW)
    assert [m for m, _ in engine.calls] == ["baseline", "speculative", "speculative", "baseline"] * 2
    s = result.summary
    assert s.paired and s.status == "ok"
    assert s.speedup is not None and s.speedup.median == pytest.approx(engine.speedup_of(8), rel=0.002)
    assert s.speedup.low <= s.speedup.median <= s.speedup.high


def test_every_sweep_point_gets_its_own_baseline_next_to_it(fake_models) -> None:
    """A baseline measured once at the start of a sweep flatters it as the machine drifts; a point
    paired with its own baseline reads the engine's true speedup whatever came before."""
    engine = FakeEngine(drift=0.03)
    store = Store.open()
    result = swept(exp(), {"draft_max": (1, 4, 8)}, engine, store)
    setups = study.setups_for({"draft_max": (1, 4, 8)})
    assert sorted(store.run(r)["point_key"] for r in result.result.runs.values()) == sorted(s.key for s in setups)
    rep = analysis.sweep_report(store, result.sweep_id, plot=False)
    for row in rep.groups[0].rows:
        assert row.summary.paired
        assert row.summary.speedup.median == pytest.approx(engine.speedup_of(row.draft_max), rel=0.002)


def test_a_fixed_grid_spreads_the_machines_drift_over_every_point(fake_models) -> None:
    """On a machine that hurts the speculative side more as time goes on, a point measured later
    reads lower than it is. In passes (a block of every point per pass, the order shuffled), the
    drift falls on every point alike: each reads its true speedup times about the same factor."""
    engine = FakeEngine(drift=0.0, spec_drift=0.004)
    store = Store.open()
    lengths = (1, 4, 8)
    result = swept(exp(6), {"draft_max": lengths}, engine, store)
    spec = [c["draft_max"] for mode, c in engine.calls if mode == "speculative"]
    assert all(sorted(spec[i:i + 3]) == list(lengths) for i in range(0, 18, 3))  # a block of every point a pass
    assert len({tuple(spec[i:i + 3]) for i in range(0, 18, 3)}) > 1  # in an order shuffled block by block
    rows = analysis.sweep_report(store, result.sweep_id, plot=False).groups[0].rows
    assert [r.summary.pairs for r in rows] == [6, 6, 6]
    factors = [r.summary.speedup.median / engine.speedup_of(r.draft_max) for r in rows]
    assert max(factors) / min(factors) < 1.01, factors


def test_an_interrupted_pass_resumes_with_every_pair(fake_models) -> None:
    engine = FakeEngine(drift=0.0)
    store = Store.open()
    calls = []

    def stop_in_the_second_pass(event: str, data: dict) -> None:
        calls.append(event)
        if event == "done" and data["mode"] == "speculative" and len(engine.calls) > 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        swept(exp(3), {"draft_max": (2, 4)}, engine, store, on_event=stop_in_the_second_pass)
    result = swept(exp(3), {"draft_max": (2, 4)}, engine, store)
    rows = analysis.sweep_report(store, result.sweep_id, plot=False).groups[0].rows
    assert [r.summary.pairs for r in rows] == [3, 3]
    assert all(r.summary.status == "ok" for r in rows)
    before = len(engine.calls)
    again = swept(exp(3), {"draft_max": (2, 4)}, engine, store)
    assert len(engine.calls) == before and again.result.pairs == 6  # nothing measured again: every pair was kept


def test_a_point_never_borrows_a_baseline_of_other_target_settings(fake_models) -> None:
    """Threads change the target's own speed: each point must be divided by its own threads' baseline."""
    engine = FakeEngine(drift=0.0)
    store = Store.open()
    result = swept(exp(), {"threads": (1, 2)}, engine, store)
    rows = analysis.sweep_report(store, result.sweep_id, plot=False).groups
    speedups = [r.summary.speedup.median for g in rows for r in g.rows]
    assert speedups == pytest.approx([engine.speedup_of(8)] * 2, rel=1e-6)


def test_one_estimator_in_every_view(fake_models, tmp_path: Path) -> None:
    """The run's table, the stored row, results list, the JSON and the report read the same figure."""
    from llamaspec.cli import main

    engine = FakeEngine(drift=0.02, noise=(1.0, 0.97, 1.04, 0.99))
    store = Store.open()
    res = swept(exp(3), {"draft_max": (8,)}, engine, store)
    run_id = res.result.run_of(grid.grid({"draft_max": (8,)})[0].key)
    assert run_id is not None
    row = store.run(run_id)
    stored = Summary.from_dict(row["summary"])
    text = stored.speedup.text(suffix="x")
    assert text in analysis.sweep_report(store, res.sweep_id, plot=False).render()
    listed = CliRunner().invoke(main, ["results", "list"])
    assert text in listed.output
    md = report.markdown(store, "smollm2-quicksort", plot=False)
    assert text in md
    dumped = analysis.sweep_report(store, res.sweep_id, plot=False).as_dict()
    assert dumped["groups"][0]["points"][0]["summary"]["speedup"]["median"] == stored.speedup.median


def test_truncated_speculative_output_differs_and_fails_the_run() -> None:
    engine = FakeEngine(truncate=5)
    result = run_case(case(), engine, Store.open(), repeats=1, hardware=HW)
    assert result.status == "differs"
    assert "shorter" in (result.summary.lossless.reason or "")
    with pytest.raises(Exception, match="differs"):
        raise_if_failed([result])
    assert Store.open().run(result.run_id)["status"] == "differs"


def test_a_program_that_drafts_another_length_fails_the_run() -> None:
    result = run_case(case(draft_max=3), FakeEngine(drafts=8), Store.open(), repeats=1, hardware=HW)
    assert result.status == "failed"
    assert "asked for draft length 3" in (result.error or "")


def test_compare_outputs_on_tokens_and_text() -> None:
    def m(mode: str, tokens=None, text=None, eot=False) -> Measurement:
        return Measurement(mode, True, None, (), 0, 0.0, None, tokens=tokens, text=text, end_of_text=eot)

    assert compare_outputs(m("speculative", (1, 2, 3, 4)), m("baseline", (1, 2, 3))).verdict == "identical"  # overshoot
    short = compare_outputs(m("speculative", (1, 2)), m("baseline", (1, 2, 3)))
    assert short.verdict == "differs" and "shorter" in (short.reason or "")
    diverge = compare_outputs(m("speculative", text="abc dXf"), m("baseline", text="abc def"))
    assert diverge.verdict == "differs" and diverge.first_difference == 5 and diverge.unit == "chars"
    assert diverge.speculative_excerpt == "Xf" and diverge.baseline_excerpt == "ef"
    assert compare_outputs(m("speculative", text=""), m("baseline", text="x")).verdict == "differs"  # cut after the prompt
    on = compare_outputs(m("speculative", (1, 2, 3, 4)), m("baseline", (1, 2, 3), eot=True))  # past end of text
    assert on.verdict == "differs" and on.first_difference == 3 and "end of text" in (on.reason or "")
    both = compare_outputs(m("speculative", (1, 2, 3), eot=True), m("baseline", (1, 2, 3), eot=True))
    assert both.verdict == "identical"


def test_the_decision_takes_the_cheapest_as_good_and_never_a_differing_point(fake_models) -> None:
    engine = FakeEngine(drift=0.0, alpha=0.95, draft_cost=0.02, noise=(1.0, 1.12, 0.88, 1.0, 1.1), differ_at_k=(12,))
    store = Store.open()
    res = swept(exp(3), {"draft_max": (2, 8, 10, 12)}, engine, store)
    rep = analysis.sweep_report(store, res.sweep_id, plot=False)
    decision = res.result.decision.decision
    assert "draft 12" not in [e.label for e in decision.estimates]  # it differs: never a candidate
    assert decision.verdict == "recommend" and decision.chosen is not None and decision.chosen.shown_faster
    # the cheapest of the settings shown faster whose estimate is within the tolerance of the best one
    faster = [e for e in decision.estimates if e.shown_faster]
    top = max(e.estimate for e in faster)
    assert decision.chosen.estimate >= top * (1 - decision.tolerance)
    assert decision.chosen.cost == min(e.cost for e in faster if e.estimate >= top * (1 - decision.tolerance))
    assert "DIFFERS" in rep.render() and "recommended: draft" not in rep.render()  # a prompt's points: no answer
    text = res.result.render()
    assert "recommended: draft" in text and "output differs" in text and "how sure:" in text


def test_repeats_auto_stops_when_the_interval_is_narrow() -> None:
    steady = FakeEngine(drift=0.0)
    result = run_case(case(), steady, Store.open(), repeats="auto", hardware=HW)
    assert result.summary.pairs == 3
    noisy = FakeEngine(drift=0.0, noise=(1.0, 1.3, 0.8, 1.1, 0.9, 1.25, 0.85))
    result = run_case(case(), noisy, Store.open(), repeats="auto", hardware=HW)
    assert result.summary.pairs == 10  # the cap: the interval never got within +-3 %


def test_noisy_baseline_is_named(fake_models) -> None:
    engine = FakeEngine(drift=0.0, noise=(1.0, 1.0, 0.7, 0.7, 1.0, 1.0))
    result = run_case(case(), engine, Store.open(), repeats=3, hardware=HW)
    assert any("varies by" in w for w in result.summary.warnings)


def test_the_widest_study_recommends_by_the_decision_rule(fake_models) -> None:
    engine = FakeEngine(drift=0.0)
    store = Store.open()
    result = study_everything(exp(2), engine, store, variants=())
    decision = result.decision.decision
    assert decision.verdict == "recommend" and decision.chosen is not None and decision.chosen.shown_faster
    chosen = result.run_of(decision.chosen.key)
    assert chosen is not None and store.run(chosen)["group_kind"] == "sweep"  # a tune is a study: its points a sweep's
    text = result.render()
    assert "recommended:" in text and "how sure:" in text
    labels = {s.label for s in result.decision.setups}
    assert labels <= {f"draft {k}" for k in range(1, 16 + 1)}  # the fake declares no draft-free mode
    json.dumps(result.as_dict(), default=str)


def test_summary_round_trips_through_storage() -> None:
    result = run_case(case(), FakeEngine(), Store.open(), repeats=2, hardware=HW)
    again = Summary.from_dict(json.loads(json.dumps(result.summary.to_dict())))
    assert again == result.summary


def test_a_draft_that_never_pays_is_not_recommended(fake_models) -> None:
    # A poor draft (alpha 0.2) that costs as much as half a target step: every k is slower than the
    # target alone: the advice is to run without a draft.
    engine = FakeEngine(drift=0.0, alpha=0.2, draft_cost=0.5)
    store = Store.open()
    res = swept(exp(2), {"draft_max": (1, 4, 8)}, engine, store)
    rep = analysis.sweep_report(store, res.sweep_id, plot=False)
    assert all(r.speedup is not None and r.speedup.median < 1.0 for r in rep.groups[0].rows)
    assert res.result.decision.verdict == "no draft"
    assert "recommended: no draft (measured no gain)" in res.result.render()
    tuned = study_everything(exp(2), FakeEngine(drift=0.0, alpha=0.2, draft_cost=0.5), Store.open(), variants=())
    assert tuned.decision.verdict == "no draft"
    assert "recommended: no draft" in tuned.render()


def test_a_run_stores_its_engine_once_and_its_group_by_kind(fake_models) -> None:
    # provenance["engine"] holds the engine's name beside its own provenance (no second "backend" key);
    # the store's columns follow it, and a sweep's rows say they belong to a sweep.
    engine = FakeEngine(drift=0.0, name="llama-server", built_from="llama.cpp")
    store = Store.open()
    plain = run_case(case(), engine, store, repeats=1, hardware=HW)
    row = store.run(plain.run_id)
    assert row["provenance"]["engine"] == {"name": "llama-server", "built_from": "llama.cpp", "version": "fake",
                                           "build_key": "fake-100.0"}
    assert "backend" not in row["provenance"]
    assert (row["engine"], row["engine_version"], row["group_kind"], row["group_id"]) == ("llama-server", "fake", None, None)
    grid = swept(exp(repeats=1), {"draft_max": (2, 4)}, engine, store)
    assert {(r["group_kind"], r["group_id"]) for r in store.runs(kind="sweep")} == {("sweep", grid.sweep_id)}


def test_the_title_names_the_program_only_where_the_engine_takes_it() -> None:
    store = Store.open()
    takes = run_case(case(), FakeEngine(drift=0.0), store, repeats=1, hardware=HW)
    other = FakeEngine(drift=0.0, name="other")
    other.capabilities = dataclasses.replace(other.capabilities, settings=other.capabilities.settings - {"program"})
    without = run_case(case(), other, store, repeats=1, hardware=HW)
    assert "program speculative" in report.case_title(takes)
    assert "program" not in report.case_title(without).split("\n")[1]


def test_a_sampled_run_is_measured_and_never_called_lossless_nor_differing() -> None:
    """At temperature above 0 the two sides sample (the fake's outputs then differ, as sampling's do):
    speed and acceptance are measured, the lossless check is "not applicable: sampled", in the text,
    the JSON and the stored summary, and the run is not failed."""
    greedy = run_case(case(), FakeEngine(), Store.open(), repeats=2, hardware=HW)
    assert greedy.summary.lossless.verdict == "identical"
    sampled = run_case(case(temperature=0.8), FakeEngine(), Store.open(), repeats=2, hardware=HW)
    s = sampled.summary
    assert sampled.status == "ok" and s.speedup is not None and s.acceptance is not None
    assert s.lossless.verdict == "not applicable" and s.lossless.pairs == 2
    assert s.lossless.text() == "not applicable: sampled (temperature 0.8)"
    raise_if_failed([sampled])  # a sampled run's outputs differ by chance: not a failure
    text = report.render([sampled])
    assert "lossless: not applicable: sampled (temperature 0.8)" in text and "temperature 0.8 (sampled)" in text
    assert "identical" not in text and "DIFFERS" not in text
    (data,) = report.as_json([sampled])
    assert data["summary"]["lossless"]["verdict"] == "not applicable"
    stored = Summary.from_dict(Store.open().run(sampled.run_id)["summary"])
    assert stored.lossless == s.lossless and Store.open().run(sampled.run_id)["status"] == "ok"


@pytest.mark.parametrize(("gap", "kept"), [(0.003, True), (0.3, False)])
def test_an_output_that_differs_at_a_greedy_near_tie_is_kept_and_said(fake_models, gap: float, kept: bool) -> None:
    """Draft 4's output leaves the target alone's at token 3. Where the engine's probe says the
    target's top two there are the two outputs' tokens within 0.02 (batched verification's rounding
    flips such a choice), the setup is kept and said; anywhere else it is excluded as a wrong output."""
    engine = FakeEngine(drift=0.0, differ_at_k=(4,), top_gap=gap)
    store = Store.open()
    result = swept(exp(), {"draft_max": (2, 4)}, engine, store).result
    assert 3 in engine.probes  # asked where the outputs diverge, on the baseline's path
    four = next(s for s in result.decision.setups if s.label == "draft 4")
    run = store.run(result.runs[("python", four.setup)])
    assert run["status"] == "differs"  # the output did differ: stored as it was
    lines = "\n".join(result.decision.lines())
    if kept:
        assert four.excluded is None and four.near_ties == ("python at token 3 (top-two gap 3.0e-03)",), four
        assert run["summary"]["lossless"]["near_tie"] == pytest.approx(0.003)
        assert "kept: draft 4: output differs at a greedy near-tie only" in lines
    else:
        assert four.excluded == "output differs on python" and not four.near_ties
        assert run["summary"]["lossless"]["near_tie"] is None and "kept:" not in lines


@pytest.mark.parametrize("gap", [0.003, 0.3])
def test_setups_that_differ_at_one_near_tie_keep_the_prompt_in_the_study(fake_models, gap: float) -> None:
    """Drafts 2 and 4 both leave the target alone's output at token 3. One prompt is its own
    workload: at a greedy near-tie (the probe's gap 0.003) both are kept and said; where the probe
    reads no near-tie (0.3) each is a wrong output and excluded (the probe settles it: the prompt
    is not left out as the programs' own divergence), and draft 8 answers."""
    engine = FakeEngine(drift=0.0, differ_at_k=(2, 4), top_gap=gap)
    result = study.run_study(exp(), study.setups_for({"draft_max": (2, 4, 8)}), engine, Store.open(),
                             budget.Budget(pairs=12))
    d = result.decision
    assert not d.left_out, d.lines()
    by = {s.label: s for s in d.setups}
    if gap < 0.02:
        assert by["draft 2"].near_ties and by["draft 4"].near_ties and not by["draft 8"].near_ties, by
    else:
        assert by["draft 2"].excluded and by["draft 4"].excluded and not by["draft 8"].excluded, by
    assert d.decision.chosen is not None, d.lines()  # the one prompt decides
