"""The speedup model on the measured acceptance-by-position curve: the
curve's tokens per round, its bad input, the fit that uses it where every point counted it, the
contradiction of its assumption, the adaptive sweep's first pass at the longest lengths, and the
model's error on the recordings at three acceptance levels against the one-alpha model's."""

from __future__ import annotations

import pytest
from fakes import FakeEngine, exp

from llamaspec.base.errors import LlamaspecError
from llamaspec.decision import speedup_model
from llamaspec.llamacpp.profiles import LLAMA_SPECULATIVE
from llamaspec.store.results import Store
from llamaspec.studies import study
from llamaspec.studies.budget import Budget
from llamaspec.theory import (
    CostModel,
    Observation,
    PositionCurve,
    analyze,
    expected_tokens_per_round,
)
from llamaspec.views import analysis

# --- the curve ----------------------------------------------------------------------------------


def test_a_geometric_curve_gives_the_closed_forms_tokens_per_round() -> None:
    # 1024 rounds accepted through position i in 1024 * 0.5^i: exactly alpha = 0.5's closed form
    curve = PositionCurve((1024,) * 6, tuple(1024 >> i for i in range(1, 7)))
    for k in range(0, 7):
        assert curve.tokens_per_round(k, tail_alpha=0.5) == pytest.approx(expected_tokens_per_round(0.5, k))
    # past the measured positions the tail goes on with the alpha it is given
    assert curve.tokens_per_round(8, tail_alpha=0.5) == pytest.approx(expected_tokens_per_round(0.5, 8))
    assert curve.tokens_per_round(8, tail_alpha=0.0) == pytest.approx(expected_tokens_per_round(0.5, 6))
    # a fractional mean length takes that share of the next position
    assert curve.tokens_per_round(2.5, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.5 * 0.125)


def test_a_curve_that_is_not_geometric_is_not_flattened_into_one_alpha() -> None:
    # every round accepted through 5, none through 6 (a prompt whose 6th token the draft misses)
    curve = PositionCurve((10,) * 8, (10, 10, 10, 10, 10, 0, 0, 0))
    assert [curve.tokens_per_round(k, 0.9) for k in (4, 5, 6, 8)] == [5.0, 6.0, 6.0, 6.0]
    assert curve.text() == "100%, 100%, 100%, 100%, 100%, 0%, 0%, 0%"


def test_pooled_counts_and_shares_that_cannot_grow_with_the_position() -> None:
    long = PositionCurve((6, 6, 6, 6), (6, 6, 6, 4))
    short = PositionCurve((10, 10), (9, 7))
    pooled = PositionCurve.pooled([long, short])
    assert pooled is not None and pooled.drafted == (16, 16, 6, 6) and pooled.accepted == (15, 13, 6, 4)
    # position 3 alone reads 6/6, above position 2's 13/16: a round cannot do that, so it is capped
    assert pooled.through == pytest.approx((15 / 16, 13 / 16, 13 / 16, 4 / 6))
    assert PositionCurve.pooled([]) is None


@pytest.mark.parametrize(("drafted", "accepted", "message"), [
    ((5, 5), (5,), "2 drafted counts but 1 accepted"),
    ((5, 5), (6, 5), "6 rounds accepted through position 1, but only 5 drafted it"),
    ((5, -1), (5, 0), "must be an integer >= 0"),
])
def test_counts_that_cannot_be_a_runs_are_refused_in_one_line(drafted: tuple[int, ...], accepted: tuple[int, ...],
                                                               message: str) -> None:
    with pytest.raises(LlamaspecError, match=message) as err:
        PositionCurve(drafted, accepted)
    assert err.value.hint and "\n" not in err.value.message


def test_positions_past_the_draft_length_are_refused() -> None:
    with pytest.raises(LlamaspecError, match="position 3, past its draft length 2"):
        Observation(draft_max=2, n_drafted=10, n_accept=8, n_generated=20, spec_decode_tps=12.0, baseline_decode_tps=10.0,
                    rounds=10, positions=PositionCurve((5, 5, 5), (5, 4, 3)), profile=LLAMA_SPECULATIVE)


# --- the fit ------------------------------------------------------------------------------------

COST = CostModel(target_ms_per_token=20.0, draft_ms_per_token=4.0,
                 verify_batches=tuple((b, 20.0 * (1 + 0.04 * (b - 1))) for b in range(1, 18)), profile=LLAMA_SPECULATIVE)


def _point(k: int, through: tuple[float, ...], rounds: int = 100, speedup: float = 1.2,
           positions: bool = True) -> Observation:
    accepted = tuple(round(rounds * p) for p in through[:k])
    n_accept = sum(accepted)
    return Observation(draft_max=k, n_drafted=k * rounds, n_accept=n_accept, n_generated=n_accept + rounds + 1,
                       spec_decode_tps=speedup * 50.0, baseline_decode_tps=50.0, rounds=rounds, speedup=speedup,
                       positions=PositionCurve((rounds,) * k, accepted) if positions else None, profile=LLAMA_SPECULATIVE)


# a draft that gets the first four tokens of every round right and then fails half the time
STEP = (1.0, 1.0, 1.0, 1.0, 0.5, 0.25, 0.125, 0.0625)


def test_the_fit_reads_tokens_per_round_from_the_curve_and_keeps_the_one_alpha_fit_beside_it() -> None:
    points = [_point(k, STEP, speedup=s) for k, s in ((2, 1.1), (4, 1.4), (8, 1.3))]
    a = analyze(points, COST, max_draft=8)
    assert a.positions is not None and a.acceptance_model == "acceptance by position"
    assert a.curve[3].tokens_per_round == pytest.approx(5.0)  # 1 + four certain tokens
    assert a.curve[4].tokens_per_round == pytest.approx(5.5)
    assert a.single_alpha is not None and a.single_alpha.positions is None
    # one alpha cannot bend where the draft stops being right; the curve can
    assert a.single_alpha.curve[3].tokens_per_round < 4.6
    assert a.median_abs_error is not None and a.single_alpha.median_abs_error is not None
    assert a.positions.length == 8 and a.positions.text().startswith("100%, 100%, 100%, 100%, 50%")
    assert a.speedup_at(4) == pytest.approx(a.curve[3].speedup)


def test_one_point_without_positions_keeps_the_one_alpha_model() -> None:
    points = [_point(2, STEP), _point(4, STEP), _point(8, STEP, positions=False)]
    a = analyze(points, COST, max_draft=8)
    assert a.positions is None and a.single_alpha is None and a.acceptance_model == "one alpha"


def test_a_short_length_that_reads_otherwise_than_the_long_ones_is_named() -> None:
    # draft 4's rounds accept far less at positions 1..4 than the rounds of draft 8 and 12 did
    poor = (0.6, 0.4, 0.3, 0.2)
    points = [_point(4, poor), _point(8, STEP), _point(12, (*STEP, 0.03, 0.01, 0.0, 0.0))]
    a = analyze(points, COST, max_draft=12)
    assert len(a.contradictions) == 1 and a.contradictions[0].startswith("draft 4: 2.50 tokens a round measured, 5.00 predicted")
    assert "one long run are not to be trusted" in a.contradictions[0]
    consistent = analyze([_point(4, STEP), _point(8, STEP)], COST, max_draft=8)
    assert consistent.contradictions == ()


# --- the adaptive sweep's first pass ------------------------------------------------------------

GRID = {"draft_max": tuple(range(1, 17))}
NOISE = (1.0, 0.96, 1.04, 0.98, 1.02)


def test_the_first_pass_is_the_longest_lengths_where_positions_are_counted() -> None:
    setups = study.setups_for({"draft_max": (4, 1, 16, 8, 12)}, ("ngram-simple",))
    assert [s.label for s in study.first_pass(setups, by_position=False)] == [
        "ngram-simple", "draft 16", "draft 12", "draft 8", "draft 4", "draft 1"]
    assert [s.label for s in study.first_pass(setups)] == ["ngram-simple", "draft 16", "draft 12"]


def _prompt_report(store: Store, result: study.StudyResult) -> analysis.SweepReport:
    (prompt, _category), = result.decision.prompts
    return analysis.sweep_report(store, study.prompt_group(result.study_id, prompt), plot=False)


def _speculative_lengths(engine: FakeEngine) -> list[int]:
    return [c["draft_max"] for mode, c in engine.calls if mode == "speculative"]


def test_a_program_that_counts_positions_starts_at_the_longest_lengths_and_predicts_the_rest(fake_models) -> None:
    engine = FakeEngine(drift=0.0, noise=NOISE, alpha=0.8, draft_cost=0.08, positions=True)
    store = Store.open()
    result = study.run_study(exp(3), study.setups_for(GRID), engine, store, Budget(pairs=20))
    assert sorted(_speculative_lengths(engine)[:2]) == [15, 16]  # the first block: the two longest, nothing else
    report = _prompt_report(store, result)
    group = report.groups[0]
    assert group.analysis is not None and group.analysis.acceptance_model == "acceptance by position"
    assert group.view is not None and {b.key[1] for b in group.view.bands} == set(GRID["draft_max"])  # type: ignore[index]
    assert len(group.rows) < len(GRID["draft_max"])  # lengths left unmeasured, predicted
    assert result.pairs <= 20
    decision = result.decision.decision
    true_best = max(engine.speedup_of(k) for k in GRID["draft_max"])
    assert decision.verdict == "recommend" and decision.chosen is not None
    k = int(decision.chosen.label.split()[1])
    assert engine.speedup_of(k) >= true_best * 0.95, (k, engine.speedup_of(k), true_best)
    assert "tokens per round from the acceptance by position" in report.render()


def test_a_program_without_positions_keeps_todays_first_pass(fake_models) -> None:
    engine = FakeEngine(drift=0.0, noise=NOISE, alpha=0.8, draft_cost=0.08)
    store = Store.open()
    study.run_study(exp(3), study.setups_for(GRID), engine, store, Budget(pairs=20))
    spec = _speculative_lengths(engine)
    assert sorted(spec[:2]) == [15, 16]  # the first block: the two longest; they count no positions, so
    assert sorted(spec[2:18]) == list(range(1, 17))  # the next block holds every length, once


def test_a_measured_point_that_contradicts_the_long_runs_is_said_in_the_output(fake_models) -> None:
    # rounds shorter than 16 accept less at every position than the draft-16 rounds did
    engine = FakeEngine(drift=0.0, noise=NOISE, alpha=0.9, draft_cost=0.05, positions=True, position_bias=0.6)
    store = Store.open()
    result = study.run_study(exp(3), study.setups_for({"draft_max": (2, 16)}), engine, store, Budget(pairs=6))
    text = _prompt_report(store, result).render()
    assert "assumption contradicted: draft 2:" in text


# --- the recordings at three acceptance levels --------------------------------------------------


@pytest.mark.parametrize("level", ["q4_1", "q4_0", "q2_k"])
def test_on_the_recordings_the_longest_lengths_curve_predicts_the_others(level: str) -> None:
    """Fitted to the two longest lengths (every recorded pair there), the model predicts the ten
    others within 5 % (median) on their acceptance by position; with one alpha it cannot (its
    draft cost needs three lengths to be fitted, and one alpha misses the curve's shape)."""
    from benchmarks.recorded import ACCEPT, load, prediction_errors

    rec = load(level, ACCEPT)
    assert {14, 16} <= set(rec.positions)  # llama-speculative-simple's counts at the longest lengths
    curve, one_alpha = prediction_errors(rec)
    assert curve <= 0.05 and curve < one_alpha, (curve, one_alpha)


@pytest.mark.parametrize("level", ["q4_1", "q4_0", "q2_k"])
def test_on_the_recordings_the_fit_to_every_length_is_as_good_on_the_curve(level: str) -> None:
    """Fitted to every length, where the draft's cost is fitted over twelve lengths, the curve's
    error is within a point of the one-alpha model's or better; the sweep prints both."""
    from benchmarks.recorded import ACCEPT, load, rows_for

    rec = load(level, ACCEPT)
    rows = rows_for(rec, rec.every_pair, positions=True)
    fit, _note = speedup_model.analyze_rows(rows)
    if len(rec.positions) < len(rec.points):  # a length without counts: the one-alpha model alone
        assert fit is not None and fit.positions is None
        return
    assert fit is not None and fit.single_alpha is not None
    curve, one_alpha = fit.median_abs_error, fit.single_alpha.median_abs_error
    assert curve is not None and one_alpha is not None and curve <= one_alpha + 0.01, (curve, one_alpha)


# --- the recordings with a program that counts positions (sweep-positions/) ----------------------
# tests/fixtures/llamacpp/0c1e570/sweep-positions/<level>/sweep.json: llama-speculative-simple
# sweeps, 20 pairs a point, every speculative run with its own acceptance by position (README.md
# there says when and how).

POSITION_LEVELS = {"q4_1": (0.80, 1.00), "q4_0": (0.35, 0.65), "q2_k": (0.15, 0.45)}  # accepted at draft 8


@pytest.mark.parametrize("level", list(POSITION_LEVELS))
def test_the_position_recordings_count_every_round_of_every_pair(level: str) -> None:
    from benchmarks.recorded import SWEEPS, load

    rec = load(level, SWEEPS)
    assert rec.grid == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16) and rec.pairs_count_positions and not rec.positions
    settings = rec.data["settings"]
    assert settings["program"] == "speculative-simple" and settings["draft_p_min"] == 0 and settings["threads"] == 1
    for k, point in rec.points.items():
        s = point.summary
        assert s.status == "ok" and s.lossless.verdict == "identical" and s.paired and len(point.pairs) == s.pairs >= 20
        for m in point.run["measurements"]:
            if m["mode"] != "speculative":
                continue
            drafted, accepted = m["drafted_by_position"], m["accepted_by_position"]
            assert 1 <= len(drafted) == len(accepted) <= k
            assert all(a <= d for a, d in zip(accepted, drafted, strict=True))
            assert list(drafted) == sorted(drafted, reverse=True) and list(accepted) == sorted(accepted, reverse=True)
            if len(drafted) == k:  # every position known: the counts add up to the program's own totals
                assert (sum(drafted), sum(accepted)) == (m["n_drafted"], m["n_accept"])
    low, high = POSITION_LEVELS[level]
    eight = rec.points[8].summary.acceptance
    assert eight is not None and low <= eight.median <= high, eight.median


@pytest.mark.parametrize("level", list(POSITION_LEVELS))
def test_on_the_position_recordings_the_longest_lengths_curve_predicts_the_others(level: str) -> None:
    """As on the llama-speculative recordings, but every pair's timings, speedup and counts from
    the same runs: fitted to the two longest lengths, the model predicts the ten others within 7 %
    (median) and at most half the one-alpha model's error. Measured: Q4_1 1.0 % (one alpha 30.0 %),
    Q4_0 5.9 % (16.5 %), Q2_K 5.4 % (42.9 %)."""
    from benchmarks.recorded import SWEEPS, load, prediction_errors

    curve, one_alpha = prediction_errors(load(level, SWEEPS))
    assert curve <= 0.07 and curve <= one_alpha / 2, (curve, one_alpha)


@pytest.mark.parametrize("level", list(POSITION_LEVELS))
def test_on_the_position_recordings_the_fit_to_every_length_is_as_good_on_the_curve(level: str) -> None:
    from benchmarks.recorded import SWEEPS, load, rows_for

    rec = load(level, SWEEPS)
    fit, _note = speedup_model.analyze_rows(rows_for(rec, rec.every_pair, positions=True))
    assert fit is not None and fit.positions is not None and fit.single_alpha is not None
    curve, one_alpha = fit.median_abs_error, fit.single_alpha.median_abs_error
    assert curve is not None and one_alpha is not None and curve <= one_alpha + 0.01, (curve, one_alpha)
