"""The speedup model: closed forms, the α inversion, fits to measured runs, and explanations."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llamaspec.errors import LlamaspecError
from llamaspec.theory import (
    CostModel,
    Observation,
    accept_rate,
    alpha_from_accept_rate,
    alpha_from_tokens_per_call,
    analyze,
    best_draft_length,
    ceiling_speedup,
    expected_accepted,
    explain_shortfall,
    max_cost_ratio,
    paper_speedup,
    required_alpha,
    tokens_per_call,
)

# The 2023 write-up (shared/reference/000_057eec27d88f13c1.txt): llama.cpp `speculative`, CodeLlama-7B
# F16 target, TinyLlama-1.1B-python Q4_0 draft, --draft 8, Metal. No target-alone run was recorded, so
# the target's own single-token `eval` timing (42.68 ms per token) stands in for the baseline.
PY_TARGET_MS = 42.68
PY_VERIFY_MS = (4210.38 - 12 * 11.02 + 682.80) / 70  # target prompt eval minus the 12-token prompt, plus eval
PYTHON_RUN = Observation(
    draft_max=8,
    n_drafted=317,
    n_accept=195,
    n_generated=265,  # n_predict; "decoded 265 tokens in 7.909 seconds, speed: 33.507 t/s"
    spec_decode_tps=33.507,
    baseline_decode_tps=1000.0 / PY_TARGET_MS,
    target_ms_per_token=PY_TARGET_MS,
    draft_ms_per_token=5.95,  # draft: eval time = 2247.77 ms / 378 runs (5.95 ms per token)
    draft_runs=378,
)
C_RUN = Observation(
    draft_max=8,
    n_drafted=278,
    n_accept=200,
    n_generated=258,
    spec_decode_tps=40.112,
    baseline_decode_tps=1000.0 / 43.08,
    target_ms_per_token=43.08,
    draft_ms_per_token=5.58,
    draft_runs=329,
    verify_ms_per_call=(3164.84 - 25 * 9.25 + 775.43) / 58,
)


# --- closed forms -------------------------------------------------------------------------------


def test_closed_forms_match_hand_computed_values() -> None:
    assert expected_accepted(0.5, 1) == pytest.approx(0.5)
    assert expected_accepted(0.5, 2) == pytest.approx(0.75)
    assert tokens_per_call(0.5, 2) == pytest.approx(1.75)  # (1 - 0.5^3) / 0.5
    assert tokens_per_call(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert accept_rate(0.9, 8) == pytest.approx(0.9 * (1 - 0.9**8) / (0.1 * 8))  # 0.6407
    # The paper's expected walltime improvement, e.g. α=0.8, k=4, c=0.05: 0.67232 / (0.2 * 1.2)
    assert paper_speedup(0.8, 4, 0.05) == pytest.approx(2.8013333, rel=1e-6)
    assert ceiling_speedup(0.75) == pytest.approx(4.0)


def test_closed_forms_at_the_edges() -> None:
    assert expected_accepted(0.0, 8) == 0.0
    assert tokens_per_call(0.0, 8) == 1.0
    assert expected_accepted(1.0, 8) == 8.0
    assert tokens_per_call(1.0, 8) == 9.0
    assert ceiling_speedup(1.0) == math.inf
    assert ceiling_speedup(0.0) == 1.0
    # α just below 1 stays finite and continuous (no 0/0)
    assert tokens_per_call(1 - 1e-12, 8) == pytest.approx(9.0, rel=1e-9)
    # With a free draft the paper's speedup is tokens per call; as k grows it tends to 1/(1-α)
    assert paper_speedup(0.9, 400, 0.0) == pytest.approx(ceiling_speedup(0.9), rel=1e-9)


def test_llama_cpp_accept_is_not_alpha() -> None:
    assert accept_rate(0.9, 1) == pytest.approx(0.9)  # only at k = 1
    for k in (2, 4, 8, 16):
        assert accept_rate(0.9, k) < 0.9
    assert accept_rate(0.9, 8) == pytest.approx(0.6407, abs=1e-4)


@pytest.mark.parametrize("alpha", [0.01, 0.3, 0.6, 0.9, 0.99, 0.999])
@pytest.mark.parametrize("k", [1, 2, 5, 8, 16, 4.53])
def test_alpha_inversions_round_trip(alpha: float, k: float) -> None:
    assert alpha_from_accept_rate(accept_rate(alpha, k), k) == pytest.approx(alpha, abs=1e-9)
    assert alpha_from_tokens_per_call(tokens_per_call(alpha, k), k) == pytest.approx(alpha, abs=1e-9)


def test_alpha_inversion_endpoints_and_bad_input() -> None:
    assert alpha_from_accept_rate(0.0, 8) == 0.0
    assert alpha_from_accept_rate(1.0, 8) == 1.0
    assert alpha_from_tokens_per_call(1.0, 8) == 0.0
    assert alpha_from_tokens_per_call(9.0, 8) == 1.0
    for call in (
        lambda: alpha_from_accept_rate(0.5, 0),  # nothing drafted
        lambda: alpha_from_accept_rate(1.5, 8),
        lambda: alpha_from_accept_rate(-0.1, 8),
        lambda: alpha_from_tokens_per_call(10.0, 8),  # more than k + 1 per call
        lambda: alpha_from_tokens_per_call(0.5, 8),
        lambda: expected_accepted(1.2, 4),
        lambda: expected_accepted(0.5, -1),
        lambda: paper_speedup(0.5, 4, -0.1),
    ):
        with pytest.raises(LlamaspecError):
            call()


# --- the write-up's runs ------------------------------------------------------------------------


def test_writeup_python_run_alpha_from_printed_accept() -> None:
    # llama.cpp printed accept = 61.514% at --draft 8; read as a fixed-k draft, α is much higher.
    alpha = alpha_from_accept_rate(0.61514, 8)
    assert alpha == pytest.approx(0.8907, abs=1e-4)
    assert accept_rate(alpha, 8) == pytest.approx(0.61514, abs=1e-9)
    assert PYTHON_RUN.accept_rate == pytest.approx(0.61514, abs=5e-6)


def test_writeup_python_run_fit() -> None:
    an = analyze([PYTHON_RUN])
    (p,) = an.points
    # Every call emits its accepted drafts plus one target token: 265 - 195 = 70 calls.
    assert p.calls == 70 and not p.calls_measured
    assert p.tokens_per_call == pytest.approx(265 / 70)
    assert p.mean_accepted == pytest.approx(195 / 70)
    # That build drafted 4.5 per call on average, not 8, so α comes from the tokens per call at 4.53.
    assert p.drafted_per_call == pytest.approx(317 / 70)
    assert an.alpha == pytest.approx(0.830, abs=1e-3)
    assert p.alpha == pytest.approx(an.alpha)
    assert tokens_per_call(an.alpha, p.drafted_per_call) == pytest.approx(p.tokens_per_call, rel=1e-9)
    assert an.ceiling_speedup == pytest.approx(1 / (1 - an.alpha))
    assert an.cost is not None
    assert an.cost.cost_ratio == pytest.approx(5.95 / 42.68)  # c = 0.139
    assert an.cost.extra_draft_steps == pytest.approx(378 / 70 - 317 / 70)  # the draft also eats the target token
    assert not an.cost.verify_measured
    assert p.measured_speedup == pytest.approx(1.430, abs=1e-3)
    # The paper's one-step verification misses badly here: 2.16x predicted, 1.43x measured.
    assert p.rel_error is not None and p.rel_error > 0.4
    assert p.implied_cost_ratio is not None and p.implied_cost_ratio > an.cost.cost_ratio
    assert len(an.curve) == 16
    assert an.best is not None and an.best.speedup == max(q.speedup for q in an.curve)


def test_writeup_python_run_with_measured_verification_predicts_close() -> None:
    an = analyze([replace(PYTHON_RUN, verify_ms_per_call=PY_VERIFY_MS)])
    (p,) = an.points
    assert an.cost is not None and an.cost.verify_measured
    # One point: a line through (0 drafted, one target step) and the measured verify cost.
    assert an.cost.verify_ms(0) == pytest.approx(PY_TARGET_MS)
    assert an.cost.verify_ms(p.drafted_per_call) == pytest.approx(PY_VERIFY_MS)
    assert p.predicted_call_ms == pytest.approx(5.95 * 378 / 70 + PY_VERIFY_MS)
    # What is left (~13 %) is the sampling time the model does not see (652 ms draft, 208 ms target).
    assert p.rel_error is not None and 0 < p.rel_error < 0.15
    assert p.abs_error == pytest.approx(p.predicted_speedup - p.measured_speedup)  # type: ignore[operator]


def test_pooled_alpha_lies_between_the_points() -> None:
    an = analyze([replace(PYTHON_RUN, verify_ms_per_call=PY_VERIFY_MS), C_RUN])
    alphas = sorted(p.alpha for p in an.points if p.alpha is not None)
    assert alphas[0] < an.alpha < alphas[1]
    # The pooled α reproduces the total accepted count.
    total = sum(p.calls * expected_accepted(an.alpha, p.drafted_per_call) for p in an.points)
    assert total == pytest.approx(195 + 200, rel=1e-9)


# --- fits to synthetic sweeps -------------------------------------------------------------------


def _sweep(
    alpha: float,
    ks: list[int],
    target_ms: float,
    draft_ms: float,
    verify: tuple[float, float] | None,
    extra_steps: int = 1,
    calls: int = 10_000,
    overhead: float = 1.0,
) -> list[Observation]:
    """Observations a perfect i.i.d. drafter would produce (overhead > 1 slows the measured runs)."""
    out = []
    for k in ks:
        n_accept = round(calls * expected_accepted(alpha, k))
        call_ms = (k + extra_steps) * draft_ms + (target_ms if verify is None else verify[0] + verify[1] * k)
        out.append(
            Observation(
                draft_max=k,
                n_drafted=k * calls,
                n_accept=n_accept,
                n_generated=n_accept + calls,
                spec_decode_tps=1000.0 * (n_accept + calls) / (calls * call_ms * overhead),
                baseline_decode_tps=1000.0 / target_ms,
                target_ms_per_token=target_ms,
                draft_ms_per_token=draft_ms,
                draft_runs=(k + extra_steps) * calls,
                n_target_calls=calls,
                verify_ms_per_call=None if verify is None else verify[0] + verify[1] * k,
            )
        )
    return out


def test_fit_recovers_a_known_model_and_predicts_its_measurements() -> None:
    obs = _sweep(0.85, [1, 2, 4, 8, 16], target_ms=20.0, draft_ms=4.0, verify=(22.0, 3.0))
    an = analyze(obs, max_draft=12)
    assert an.alpha == pytest.approx(0.85, abs=1e-4)
    assert an.cost is not None
    assert (an.cost.target_ms_per_token, an.cost.draft_ms_per_token, an.cost.extra_draft_steps) == (20.0, 4.0, 1.0)
    assert (an.cost.verify_intercept_ms, an.cost.verify_slope_ms) == (pytest.approx(22.0), pytest.approx(3.0))
    assert len(an.curve) == 16  # extended to the largest measured length
    for p in an.points:
        assert p.calls_measured
        assert p.alpha == pytest.approx(0.85, abs=1e-4)
        assert p.rel_error == pytest.approx(0.0, abs=1e-3)
        assert p.implied_cost_ratio == pytest.approx(0.2, abs=1e-3)
    best_k, best_s = best_draft_length(an.alpha, an.cost)
    assert an.best is not None and (an.best.draft_max, an.best.speedup) == (best_k, pytest.approx(best_s))
    assert [k for k, _ in an.speedup_curve] == list(range(1, 17))
    assert an.accept_curve[0][1] == pytest.approx(an.alpha)  # at k = 1 accept is α


def test_fit_without_draft_timings_still_fits_alpha() -> None:
    obs = [replace(o, draft_ms_per_token=None, draft_runs=None) for o in _sweep(0.7, [2, 4], 10.0, 2.0, None)]
    an = analyze(obs)
    assert an.alpha == pytest.approx(0.7, abs=1e-4)
    assert an.cost is None and an.curve == () and an.best is None
    assert all(p.predicted_speedup is None and p.rel_error is None for p in an.points)


def test_verify_fit_falls_back_when_noise_gives_a_negative_slope() -> None:
    obs = _sweep(0.8, [2, 8], 10.0, 1.0, verify=(12.0, 0.0))
    noisy = [replace(obs[0], verify_ms_per_call=14.0), replace(obs[1], verify_ms_per_call=12.0)]
    cost = analyze(noisy).cost
    assert cost is not None
    assert cost.verify_slope_ms == 0.0 and cost.verify_ms(5) == pytest.approx(13.0)


def test_point_without_drafts_has_no_alpha_but_the_fit_goes_on() -> None:
    empty = Observation(
        draft_max=4, n_drafted=0, n_accept=0, n_generated=100, spec_decode_tps=9.0, baseline_decode_tps=10.0
    )
    an = analyze([empty, *_sweep(0.8, [4], 100.0, 10.0, None)])
    assert an.points[0].alpha is None and an.points[0].accept_rate is None
    assert an.points[0].tokens_per_call == 1.0
    assert an.alpha == pytest.approx(0.8, abs=1e-4)


def test_nothing_drafted_anywhere_is_an_error() -> None:
    empty = Observation(
        draft_max=4, n_drafted=0, n_accept=0, n_generated=100, spec_decode_tps=9.0, baseline_decode_tps=10.0
    )
    with pytest.raises(LlamaspecError, match="nothing was drafted") as info:
        analyze([empty])
    assert info.value.hint and "draft" in info.value.hint
    with pytest.raises(LlamaspecError, match="no measured points"):
        analyze([])


def test_perfect_and_zero_acceptance() -> None:
    perfect = analyze(_sweep(1.0, [4, 8], 10.0, 1.0, None))
    assert perfect.alpha == 1.0 and perfect.ceiling_speedup == math.inf
    assert perfect.best is not None and perfect.best.draft_max == 16  # longer drafts always pay
    useless = analyze(_sweep(0.0, [4, 8], 10.0, 1.0, None))
    assert useless.alpha == 0.0 and useless.ceiling_speedup == 1.0
    assert useless.best is not None and useless.best.draft_max == 1 and useless.best.speedup < 1


# --- input validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"n_accept": 318},  # more accepted than drafted
        {"n_drafted": -1},
        {"n_accept": -1},
        {"n_generated": 195},  # no target token of its own
        {"n_generated": 0},
        {"draft_max": 0},
        {"draft_max": True},
        {"n_drafted": 317.0},
        {"spec_decode_tps": 0.0},
        {"baseline_decode_tps": float("nan")},
        {"target_ms_per_token": -1.0},
        {"draft_ms_per_token": float("inf")},
        {"n_target_calls": 0},
        {"n_target_calls": 266},
        {"draft_runs": -3},
        {"verify_ms_per_call": 0.0},
    ],
)
def test_bad_observations_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(LlamaspecError):
        replace(PYTHON_RUN, **changes)  # type: ignore[arg-type]


def test_baseline_ms_falls_back_to_baseline_tps() -> None:
    assert replace(PYTHON_RUN, target_ms_per_token=None).target_ms == pytest.approx(PY_TARGET_MS)


# --- explanations -------------------------------------------------------------------------------


def _issue_like_sweep(overhead: float = 1.0) -> list[Observation]:
    # Issue 5's CPU pair: draft costs two thirds of a target step, ~91 % accepted at draft 8,
    # the draft also runs on the target's token, and verifying k+1 tokens costs more than a step.
    return _sweep(0.98, [1, 2, 4, 8], target_ms=30.0, draft_ms=20.0, verify=(30.0, 6.0), overhead=overhead)


def test_explanation_when_the_model_says_the_target_is_out_of_reach() -> None:
    an = analyze(_issue_like_sweep())
    assert an.cost is not None and an.cost.cost_ratio == pytest.approx(0.667, abs=1e-3)
    assert accept_rate(an.alpha, 8) == pytest.approx(0.91, abs=0.01)
    assert an.best is not None and an.best.speedup < 1.2
    text = explain_shortfall(an, 1.2)
    assert text is not None
    assert "0.67 of a target step" in text
    assert f"best k={an.best.draft_max} predicts {an.best.speedup:.2f}×" in text
    assert "1.20×" in text and "verifying" in text
    # What it would take, solved from the same model
    c_needed = max_cost_ratio(an.alpha, an.cost, 1.2, an.max_draft)
    assert c_needed is not None and c_needed < an.cost.cost_ratio
    assert f"at most {c_needed:.2f} of a target step" in text
    assert best_draft_length(an.alpha, an.cost.with_cost_ratio(c_needed), an.max_draft)[1] == pytest.approx(1.2)


def test_required_alpha_and_cost_ratio_solve_the_model() -> None:
    cost = CostModel(target_ms_per_token=10.0, draft_ms_per_token=1.0)
    a = required_alpha(cost, 2.0)
    assert a is not None and best_draft_length(a, cost)[1] == pytest.approx(2.0)
    assert required_alpha(CostModel(10.0, 9.0, verify_intercept_ms=20.0), 1.2) is None  # even α = 1 cannot
    assert max_cost_ratio(0.5, cost, 2.5) is None  # 1/(1-α) = 2 caps it even with a free draft
    with pytest.raises(LlamaspecError):
        required_alpha(cost, 0.0)


def test_no_explanation_needed_when_a_point_reached_the_target() -> None:
    an = analyze(_sweep(0.9, [2, 4, 8], target_ms=30.0, draft_ms=1.5, verify=None))
    assert an.best_measured.measured_speedup > 1.2
    assert explain_shortfall(an, 1.2) is None


def test_explanation_when_the_model_predicts_more_than_was_measured() -> None:
    an = analyze(_sweep(0.9, [2, 8], target_ms=30.0, draft_ms=1.5, verify=None, overhead=4.0))
    assert an.best is not None and an.best.speedup > 1.2 > an.best_measured.measured_speedup
    text = explain_shortfall(an, 1.2)
    assert text is not None
    assert "not measured" in text  # the model's best k is neither 2 nor 8
    assert "behave as if the draft cost" in text


def test_explanation_without_draft_timings_uses_the_ceiling() -> None:
    obs = [replace(o, draft_ms_per_token=None) for o in _sweep(0.1, [2, 4], 10.0, 1.0, None)]
    text = explain_shortfall(analyze(obs), 1.2)
    assert text is not None and "1/(1-α)" in text and "free draft" in text
