"""The one pairs loop (llamaspec.measure.pairs) and the runs built on it: ABBA order owned by the pair's
index, stopping at a failure, auto repeats, more pairs for a stored run, and the one mapping
between a measurement and its stored row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fakes import HW, FakeEngine, case

from llamaspec.base.host import NoiseSample
from llamaspec.measure import contract, pairs
from llamaspec.measure.contract import Measurement
from llamaspec.store.results import Store
from llamaspec.store.rows import MeasurementRow, measurement_of
from llamaspec.studies.run import run_case


def measurement(mode: str, ok: bool = True) -> Measurement:
    return Measurement(mode=mode, ok=ok, error=None if ok else f"{mode} crashed", argv=(mode,), exit_code=0 if ok else 1,
                       wall_seconds=0.1, peak_rss_bytes=None, decode_tps=10.0)


def recorder(fail: tuple[str, int] | None = None) -> tuple[list[tuple[str, int]], pairs.Measure]:
    seen: list[tuple[str, int]] = []

    def measure(mode: str, r: int) -> Measurement:
        seen.append((mode, r))
        return measurement(mode, ok=(mode, r) != fail)
    return seen, measure


def test_order_belongs_to_the_pair_index_not_to_the_call() -> None:
    seen, measure = recorder()
    pairs.measure_pairs(measure, at_least=2)
    pairs.measure_pairs(measure, at_least=2, start=2)  # pairs added later keep their place in the ABBA order
    assert [m[0][0] for m in seen] == list("bssbbssb")
    assert [r for _m, r in seen] == [0, 0, 1, 1, 2, 2, 3, 3]
    seen, measure = recorder()
    pairs.measure_pairs(measure, at_least=1, start=3)  # a cluster item split off at repeat 3
    assert seen == [("speculative", 3), ("baseline", 3)]


def test_a_failure_ends_the_loop_and_keeps_what_came_before() -> None:
    seen, measure = recorder(fail=("speculative", 1))
    got = pairs.measure_pairs(measure, at_least=5)
    assert seen == [("baseline", 0), ("speculative", 0), ("speculative", 1)]
    assert got.failed == "speculative crashed" and got.complete == 1 and len(got.taken) == 3


def test_auto_repeats_stop_when_settled_but_not_before_at_least() -> None:
    seen, measure = recorder()
    got = pairs.measure_pairs(measure, at_least=3, at_most=10, settled=lambda: True)
    assert got.complete == 3
    seen, measure = recorder()
    got = pairs.measure_pairs(measure, at_least=3, at_most=10, settled=lambda: False)
    assert got.complete == 10


def test_cost_timings_join_the_loop_after_their_pair() -> None:
    seen, measure = recorder()
    extra: list[int] = []

    def after(r: int) -> list[Measurement]:
        extra.append(r)
        return [measurement("draft")] if r == 0 else []
    got = pairs.measure_pairs(measure, at_least=2, after_pair=after)
    assert seen == [("baseline", 0), ("speculative", 0), ("speculative", 1), ("baseline", 1)]
    assert extra == [0, 1] and [t.measurement.mode for t in got.taken].count("draft") == 1


def test_a_blocks_order_is_shuffled_by_its_key_the_same_on_a_rerun() -> None:
    orders = {tuple(pairs.block_order(5, f"study/p/{b}")) for b in range(12)}
    assert len(orders) > 3  # block to block, the setups' order changes
    assert all(sorted(o) == [0, 1, 2, 3, 4] for o in orders)
    assert pairs.block_order(5, "study/p/3") == pairs.block_order(5, "study/p/3")


def test_an_interrupted_run_that_never_finished_is_interrupted() -> None:
    class Interrupting(FakeEngine):
        def measure(self, c, mode, log_path):  # type: ignore[no-untyped-def]
            if len(self.calls) >= 3:
                raise KeyboardInterrupt
            return super().measure(c, mode, log_path)

    engine = Interrupting(drift=0.0)
    store = Store.open()
    with pytest.raises(KeyboardInterrupt):
        run_case(case(), engine, store, repeats=3, hardware=HW)
    (row,) = store.runs()
    assert row["status"] == "interrupted" and len(store.measurements(row["id"])) == 3


def test_every_field_of_a_measurement_has_its_column_and_comes_back() -> None:
    store = Store.open()
    run_id = store.start_run(experiment="e", case_name="c", settings={}, provenance={})
    values = {"mode": "speculative", "ok": True, "error": None, "argv": ("a", "b"), "exit_code": 0, "wall_seconds": 1.5,
              "peak_rss_bytes": 7, "n_prompt": 3, "n_predict": 9, "encode_tps": 1.25, "decode_tps": 2.5,
              "speed_basis": "basis", "n_drafted": 8, "n_accept": 6, "rounds": 2, "drafted_rounds": 1, "draft_len": 4,
              "draft_policy": "capped", "draft_steps": 8, "program": "llama-speculative-simple",
              "sample_ms_per_token": 0.5, "text": "xy", "tokens": (1, 2), "end_of_text": True, "error_kind": "timeout",
              "prompt_ms": 12.5, "generation_ms": 99.0, "stats": {"k": 1}, "log_path": "/l",
              "noise": NoiseSample(2.0, 4.0, 3.0, 1.0, 0.25), "pair": 3, "drafted_by_position": (2, 2, 1),
              "accepted_by_position": (2, 1, 0), "block": "s/p/0"}
    assert set(values) == {f.name for f in dataclasses.fields(Measurement)}  # a new field must be added here
    m = Measurement(**values)  # type: ignore[arg-type]
    store.add_measurement(MeasurementRow.of(m, run_id=run_id))  # the pair index is the row's repeat
    (row,) = store.measurements(run_id)
    assert row["repeat"] == 3 and measurement_of(row) == m
    with pytest.raises(ValueError, match="pair 3 stored as repeat 0"):
        MeasurementRow.of(m, run_id=run_id, repeat=0)
    draft = dataclasses.replace(m, mode="draft", pair=None)  # a cost timing is in no pair
    store.add_measurement(MeasurementRow.of(draft, run_id=run_id))
    assert measurement_of(store.measurements(run_id)[1]).pair is None


def paired(mode: str, pair: int, tps: float, ok: bool = True) -> Measurement:
    return dataclasses.replace(measurement(mode, ok), decode_tps=tps, pair=pair)


def test_pairs_are_made_by_index_not_by_the_order_taken() -> None:
    """Pair 1's speculative run failed (its baseline at 10 t/s stands alone); pairs 0 and 2 are whole.
    By index: ratios 2.0 (20/10) and 3.0 (60/20). Paired by order taken (the n-th speculative run
    with the n-th baseline), pair 2's speculative run would meet pair 1's baseline: 6.0."""
    from llamaspec.measure.summary import summarize

    taken = [paired("baseline", 0, 10.0), paired("speculative", 0, 20.0), paired("speculative", 1, 0.0, ok=False),
             paired("baseline", 1, 10.0), paired("baseline", 2, 20.0), paired("speculative", 2, 60.0)]
    whole = pairs.whole_pairs(taken)
    assert [(p.index, p.ratio) for p in whole] == [(0, 2.0), (2, 3.0)]
    assert pairs.whole_pairs(reversed(taken)) == whole  # the order they come in plays no part
    s = summarize(taken)
    assert s.paired and s.pairs == 2 and s.speedup is not None and sorted(s.speedup.values) == [2.0, 3.0]
    assert s.baseline_decode_tps is not None and s.baseline_decode_tps.values == (10.0, 20.0)  # the lone baseline left out
    # A side taken twice under one index (two runs mixed by mistake) makes that index no pair.
    assert [p.index for p in pairs.whole_pairs([*taken, paired("baseline", 0, 99.0)])] == [2]
    # Without an index, a measurement is in no pair: no ratio of runs measured apart is reported.
    loose = summarize([measurement("baseline"), measurement("speculative")])
    assert not loose.paired and loose.speedup is None and loose.status == "failed"


def test_the_loop_stamps_each_measurement_with_its_pair() -> None:
    seen, measure = recorder()
    got = pairs.measure_pairs(measure, at_least=2, start=3)
    assert [(t.pair, t.measurement.pair) for t in got.taken] == [(3, 3), (3, 3), (4, 4), (4, 4)]
    assert got.complete == 2 and [p.index for p in pairs.whole_pairs(got.measurements)] == [3, 4]


# --- a baseline is the target alone -----------------------------------------------------------------


def test_a_baseline_that_drafted_is_refused_and_never_enters_a_ratio() -> None:
    """A target-only run that speculates (a build whose default turns an n-gram mode on, a variable
    in the environment) runs about as fast as the speculative side: counted, the ratio would say
    speculation does not pay. The run core refuses it whatever the engine: the run stops at it,
    stores it as failed, and its pair has no ratio."""
    engine = FakeEngine(drift=0.0, baseline_speculates=True)
    store = Store.open()
    result = run_case(case(), engine, store, repeats=2, hardware=HW)
    assert [m for m, _ in engine.calls] == ["baseline"]  # pair 0 runs its baseline first; the loop stops there
    (base,) = result.measurements
    assert not base.ok and base.error_kind == "drafted" and base.n_drafted
    assert base.error == (f"the baseline drafted {base.n_drafted} tokens: speculation was on in the target-only run "
                          f"(baseline); it is not counted ({contract.DRAFTED_BASELINE_HINT})")
    s = result.summary
    assert s.status == "failed" and s.error == base.error and s.speedup is None and s.pairs == 0
    (row,) = store.measurements(result.run_id)
    assert not row["ok"] and row["error_kind"] == "drafted" and store.run(result.run_id)["status"] == "failed"
    # the pair that comes back from the store with its speculative side is still no pair
    spec = pairs.measure_one(FakeEngine(drift=0.0), case(), "speculative", 0, Path("/dev/null"))
    assert spec.ok and pairs.whole_pairs([measurement_of(row), spec]) == []


def test_pair_one_runs_speculative_first_and_its_drafting_baseline_leaves_a_half_pair() -> None:
    """ABBA: pair 1 takes its speculative run first; its baseline drafts (the speculation turned on
    between the pairs) and is refused, so pair 1 is a half pair and only pair 0 has a ratio."""

    class TurnsOn(FakeEngine):
        def measure(self, c, mode, log_path):  # type: ignore[no-untyped-def]
            self.baseline_speculates = len(self.calls) >= 2
            return super().measure(c, mode, log_path)

    taken: list[Measurement] = []
    engine = TurnsOn(drift=0.0)
    got = pairs.measure_pairs(lambda mode, r: pairs.measure_one(engine, case(), mode, r, Path("/dev/null"), taken.append),
                              at_least=3)
    assert [(m.mode, m.pair, m.ok) for m in taken] == [("baseline", 0, True), ("speculative", 0, True),
                                                       ("speculative", 1, True), ("baseline", 1, False)]
    assert got.failed is not None and got.failed.startswith("the baseline drafted")
    assert [p.index for p in pairs.whole_pairs(taken)] == [0]
    assert pairs.whole_pairs(taken)[0].ratio == pytest.approx(engine.speedup_of(8))


def test_only_a_successful_baseline_that_drafted_is_refused() -> None:
    base = dataclasses.replace(measurement("baseline"), n_drafted=0)
    assert contract.refuse_drafting_baseline(base) is base  # drafted nothing
    assert contract.refuse_drafting_baseline(measurement("baseline")) == measurement("baseline")  # counted nothing
    spec = dataclasses.replace(measurement("speculative"), n_drafted=40)
    assert contract.refuse_drafting_baseline(spec) is spec
    crashed = dataclasses.replace(measurement("baseline", ok=False), n_drafted=40)
    assert contract.refuse_drafting_baseline(crashed) is crashed  # its own error stands
    refused = contract.refuse_drafting_baseline(dataclasses.replace(measurement("baseline"), n_drafted=3))
    assert not refused.ok and refused.error_kind in contract.ERROR_KINDS
