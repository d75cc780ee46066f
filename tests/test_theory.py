"""The speedup model: closed forms, the α inversion, and fits to a real recorded sweep.

The fit tests start from what the pinned llama.cpp (0c1e570) printed on a real draft-length sweep
(``tests/fixtures/llamacpp/0c1e570/sweep-t1``: SmolLM2-135M F32 target, Q4_1 draft, the
quick-sort prompt, -n 128, -t 1, paired ABBA repeats, llama-bench of both models at the run's
depth), parsed with ``llamaspec.llamacpp.parse``: the model must predict those measurements, and
it must stop predicting them when any of its measured ingredients is replaced by the old
assumptions.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from llamaspec.base import stats
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import bench, parse
from llamaspec.llamacpp.profiles import LLAMA_SPECULATIVE, SPECULATIVE_SIMPLE
from llamaspec.registry.engines import round_profile
from llamaspec.theory import (
    CostModel,
    Observation,
    RoundProfile,
    acceptance,
    alpha_from_acceptance,
    alpha_from_tokens_per_round,
    analyze,
    bench_depth,
    best_draft_length,
    ceiling_speedup,
    expected_accepted,
    expected_tokens_per_round,
    interpolate,
    paper_speedup,
)

FIXTURES = Path(__file__).parent / "fixtures" / "llamacpp"
SWEEP = FIXTURES / "0c1e570" / "sweep-t1"
ERROR_BOUND = 0.10  # median |predicted - measured| / measured over the sweep

# --- closed forms -------------------------------------------------------------------------------


def test_closed_forms_match_hand_computed_values() -> None:
    assert expected_accepted(0.5, 1) == pytest.approx(0.5)
    assert expected_accepted(0.5, 2) == pytest.approx(0.75)
    assert expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)  # (1 - 0.5^3) / 0.5
    assert expected_tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert acceptance(0.9, 8) == pytest.approx(0.9 * (1 - 0.9**8) / (0.1 * 8))  # 0.6407
    # The paper's expected walltime improvement, e.g. α=0.8, k=4, c=0.05: 0.67232 / (0.2 * 1.2)
    assert paper_speedup(0.8, 4, 0.05) == pytest.approx(2.8013333, rel=1e-6)
    assert ceiling_speedup(0.75) == pytest.approx(4.0)


def test_closed_forms_at_the_edges() -> None:
    assert expected_accepted(0.0, 8) == 0.0
    assert expected_tokens_per_round(0.0, 8) == 1.0
    assert expected_accepted(1.0, 8) == 8.0
    assert expected_tokens_per_round(1.0, 8) == 9.0
    assert ceiling_speedup(1.0) == math.inf
    assert ceiling_speedup(0.0) == 1.0
    # α just below 1 stays finite and continuous (no 0/0)
    assert expected_tokens_per_round(1 - 1e-12, 8) == pytest.approx(9.0, rel=1e-9)
    # With a free draft the paper's speedup is tokens per round; as k grows it tends to 1/(1-α)
    assert paper_speedup(0.9, 400, 0.0) == pytest.approx(ceiling_speedup(0.9), rel=1e-9)


def test_llama_cpp_accept_is_not_alpha() -> None:
    assert acceptance(0.9, 1) == pytest.approx(0.9)  # only at k = 1
    for k in (2, 4, 8, 16):
        assert acceptance(0.9, k) < 0.9
    assert acceptance(0.9, 8) == pytest.approx(0.6407, abs=1e-4)


@pytest.mark.parametrize("alpha", [0.01, 0.3, 0.6, 0.9, 0.99, 0.999])
@pytest.mark.parametrize("k", [1, 2, 5, 8, 16, 4.53])
def test_alpha_inversions_round_trip(alpha: float, k: float) -> None:
    assert alpha_from_acceptance(acceptance(alpha, k), k) == pytest.approx(alpha, abs=1e-9)
    assert alpha_from_tokens_per_round(expected_tokens_per_round(alpha, k), k) == pytest.approx(alpha, abs=1e-9)


def test_alpha_inversion_endpoints_and_bad_input() -> None:
    assert alpha_from_acceptance(0.0, 8) == 0.0
    assert alpha_from_acceptance(1.0, 8) == 1.0
    assert alpha_from_tokens_per_round(1.0, 8) == 0.0
    assert alpha_from_tokens_per_round(9.0, 8) == 1.0
    for call in (
        lambda: alpha_from_acceptance(0.5, 0),  # nothing drafted
        lambda: alpha_from_acceptance(1.5, 8),
        lambda: alpha_from_acceptance(-0.1, 8),
        lambda: alpha_from_tokens_per_round(10.0, 8),  # more than k + 1 per round
        lambda: alpha_from_tokens_per_round(0.5, 8),
        lambda: expected_accepted(1.2, 4),
        lambda: expected_accepted(0.5, -1),
        lambda: paper_speedup(0.5, 4, -0.1),
    ):
        with pytest.raises(LlamaspecError):
            call()


def test_writeup_alpha_from_printed_accept() -> None:
    # The 2023 write-up's Python run printed accept = 61.514% at --draft 8; read as a fixed-k
    # draft, α is much higher than the printed figure.
    alpha = alpha_from_acceptance(0.61514, 8)
    assert alpha == pytest.approx(0.8907, abs=1e-4)
    assert acceptance(alpha, 8) == pytest.approx(0.61514, abs=1e-9)


# --- programs and costs -------------------------------------------------------------------------


def test_program_profiles_follow_their_loops() -> None:
    # llama-speculative: the first token comes from the prompt's logits, outside any round;
    # recorded on 0c1e570: n_predict 72, n_accept 57, n_drafted 112 = 8 x 14 rounds.
    assert LLAMA_SPECULATIVE.rounds(72, 57) == 14 and 8 * LLAMA_SPECULATIVE.rounds(72, 57) == 112
    assert LLAMA_SPECULATIVE.draft_steps_per_round(8) == 9
    # llama-speculative-simple holds the last prompt token back: 72 predicted, 58 accepted, 14 rounds.
    assert SPECULATIVE_SIMPLE.rounds(72, 58) == 14
    assert SPECULATIVE_SIMPLE.draft_steps_per_round(8) == 8
    assert round_profile("speculative") is LLAMA_SPECULATIVE and round_profile("llama-speculative-simple") is SPECULATIVE_SIMPLE
    with pytest.raises(LlamaspecError, match="no round profile"):
        round_profile("llama-cli")
    assert bench_depth(11, 128) == 75


def test_recorded_counters_match_the_program_profiles() -> None:
    for name, prog in (("speculative", LLAMA_SPECULATIVE), ("speculative-simple", SPECULATIVE_SIMPLE)):
        folder = FIXTURES / "0c1e570"
        s = parse.parse_speculative((folder / f"{name}.stdout").read_text(), (folder / f"{name}.stderr").read_text())
        assert s.n_drafted == s.n_draft * prog.rounds(s.n_predict, s.n_accept), name


def test_interpolation_uses_the_measured_points() -> None:
    pts = ((1, 10.0), (2, 12.0), (4, 20.0))
    assert interpolate(pts, 1) == 10.0 and interpolate(pts, 4) == 20.0
    assert interpolate(pts, 3) == pytest.approx(16.0)
    assert interpolate(pts, 6) == pytest.approx(28.0)  # beyond: the last segment's line
    assert interpolate(((2, 8.0),), 3) == pytest.approx(12.0)
    cost = CostModel.from_bench({1: 10.0, 4: 20.0, 2: 12.0}, 2.0, LLAMA_SPECULATIVE)
    assert cost.verify_batches == pts and cost.verify_ms(2) == pytest.approx(16.0)  # k = 2 verifies 3 tokens
    assert cost.call_ms(2) == pytest.approx(3 * 2.0 + 16.0)  # k + 1 draft steps in llama-speculative
    assert cost.speedup(1.0, 2) == pytest.approx(3 * 10.0 / 22.0)
    with pytest.raises(LlamaspecError, match="batch size 1"):
        CostModel.from_bench({2: 12.0}, 2.0, LLAMA_SPECULATIVE)
    with pytest.raises(LlamaspecError):
        CostModel.from_bench({1: 10.0, 2: -1.0}, 2.0, LLAMA_SPECULATIVE)


def test_without_measured_batches_the_paper_is_recovered() -> None:
    cost = CostModel(target_ms_per_token=20.0, draft_ms_per_token=1.0, profile=RoundProfile("paper", 0, True))
    for a, k in ((0.8, 4), (0.6, 2), (0.95, 9)):
        assert cost.speedup(a, k) == pytest.approx(paper_speedup(a, k, 0.05))


# --- the recorded sweep -------------------------------------------------------------------------


def _read(name: str) -> str:
    return (SWEEP / name).read_text()


def _spec_tps(s: parse.SpeculativeStats) -> float:
    """SPEED_DEFINITION for llama-speculative: (N - 1) / T of "decoded N tokens in T seconds"."""
    return (s.n_decoded - 1) / s.decode_s


def _base_tps(c: parse.CompletionStats) -> float:
    """SPEED_DEFINITION for llama-completion: eval runs / (eval time + sampling time)."""
    t = c.timings
    assert t.eval_runs and t.eval_ms is not None and t.sampling_total_ms is not None
    return t.eval_runs / ((t.eval_ms + t.sampling_total_ms) / 1000.0)


@cache
def _manifest() -> dict:
    return json.loads(_read("fixtures.json"))


@cache
def _runs() -> dict[int, list[tuple[parse.SpeculativeStats, parse.CompletionStats]]]:
    """k -> the paired (speculative, completion) runs, parsed from the recorded output."""
    m = _manifest()
    out: dict[int, list[tuple[parse.SpeculativeStats, parse.CompletionStats]]] = {}
    for k in m["ks"]:
        for r in range(m["repeats"]):
            spec = parse.parse_speculative(_read(f"speculative-k{k}-r{r}.stdout"), _read(f"speculative-k{k}-r{r}.stderr"))
            base = parse.parse_completion(_read(f"completion-k{k}-r{r}.stdout"), _read(f"completion-k{k}-r{r}.stderr"))
            out.setdefault(k, []).append((spec, base))
    return out


def _spreads() -> dict[int, stats.Spread]:
    """k -> the paired speedups (speculative over the baseline run next to it), as a Spread."""
    out = {}
    for k, pairs in _runs().items():
        s = stats.spread([_spec_tps(sp) / _base_tps(b) for sp, b in pairs])
        assert s is not None
        out[k] = s
    return out


def _observations(prog: RoundProfile = LLAMA_SPECULATIVE) -> list[Observation]:
    spreads = _spreads()
    obs = []
    for k, pairs in _runs().items():
        obs.append(Observation(
            draft_max=k,
            n_drafted=sum(sp.n_drafted for sp, _ in pairs),
            n_accept=sum(sp.n_accept for sp, _ in pairs),
            n_generated=sum(sp.n_predict for sp, _ in pairs),
            spec_decode_tps=statistics.median(_spec_tps(sp) for sp, _ in pairs),
            baseline_decode_tps=statistics.median(_base_tps(b) for _, b in pairs),
            profile=prog,
            speedup=spreads[k].median,
            rounds=sum(prog.rounds(sp.n_predict, sp.n_accept) for sp, _ in pairs),  # each run's own loop
        ))
    return obs


def _bench(prefix: str) -> bench.BatchTimings:
    """The recording's two llama-bench runs (start, end) as one: samples pooled, means recomputed."""
    runs = [bench.parse_bench_json(_read(f"{prefix}-{when}.json")) for when in ("start", "end")]
    assert len({(t.depth, t.all_outputs) for t in runs}) == 1
    samples = {n: tuple(x for t in runs for x in t.samples_ms.get(n, ())) for n in runs[0].ms_by_tokens}
    return bench.BatchTimings({n: sum(s) / len(s) if s else sum(t.ms_by_tokens[n] for t in runs) / len(runs)
                               for n, s in samples.items()}, samples, depth=runs[0].depth, all_outputs=runs[0].all_outputs)


def _sample_ms() -> float:
    """The target's sampling per token, from the baselines' own common_perf_print lines."""
    per_token = [b.timings.sampling_total_ms / (b.timings.eval_runs + 1)  # type: ignore[operator]
                 for pairs in _runs().values() for _, b in pairs]
    return statistics.median(per_token)


def _cost(prog: RoundProfile = LLAMA_SPECULATIVE) -> CostModel:
    """Costs as the run measures them: llama-bench at the run's depth (target batches with every token
    an output, the draft's step; start and end pooled), sampling from the baselines' own lines."""
    target, draft = _bench("bench-target"), _bench("bench-draft")
    s = _sample_ms()
    return CostModel.from_bench(target.median_ms, draft.median_ms[1], prog, target_sample_ms=s, draft_sample_ms=s,
                                depth=target.depth)


def test_the_sweep_was_recorded_as_documented() -> None:
    m = _manifest()
    assert m["llama_cpp_commit"] == "0c1e570" and m["threads"] == 1 and m["n_predict"] == 128
    for k, pairs in _runs().items():
        for spec, base in pairs:
            # The pinned llama-speculative drafts exactly k per round, rounds = n_predict - n_accept - 1.
            assert spec.n_draft == k
            assert spec.n_drafted == k * LLAMA_SPECULATIVE.rounds(spec.n_predict, spec.n_accept)
            assert base.eval_runs == 127  # -n 128: the last token is sampled, never decoded
            # greedy and lossless: the same text as the target alone (both echo the prompt)
            assert spec.text is not None and base.text is not None
            n = min(len(spec.text), len(base.text))
            assert spec.text[:n] == base.text[:n]
    target, draft = _bench("bench-target"), _bench("bench-draft")
    assert target.depth == draft.depth == m["depth"] == bench_depth(11, 128)
    assert target.all_outputs and sorted(target.ms_by_tokens) == list(range(1, 18))


def test_the_model_predicts_the_recorded_sweep() -> None:
    an = analyze(_observations(), _cost())
    errors = [abs(p.rel_error) for p in an.points if p.rel_error is not None]
    assert an.median_abs_error is not None and an.median_abs_error <= ERROR_BOUND, an.points
    assert errors and max(errors) <= 2 * ERROR_BOUND, an.points
    # The predicted best draft length lies in the measured tie set: the lengths whose 95 % interval
    # overlaps the best one's. Among the measured lengths the model's favourite must be tied with the
    # best, and its best over 1..16 must lie within the tied range (lengths in between were not run).
    spreads = _spreads()
    best = max(spreads.values(), key=lambda s: s.median)
    tied = [k for k, s in spreads.items() if s.overlaps(best)]
    favourite = max(an.points, key=lambda p: p.predicted_speedup or 0.0).draft_max
    assert favourite in tied, (favourite, tied)
    assert an.best is not None
    assert min(tied) <= an.best.draft_max <= max(tied), (an.best.draft_max, tied)


def test_the_old_model_misses_the_recorded_sweep() -> None:
    # The model as it was: rounds = n_predict - n_accept, no extra draft step, verification timed by
    # llama-bench's default (logits for the last token only), each program's own speed (llama-speculative
    # N/T, llama-completion's compute-only eval rate), no sampling. On the same recorded runs it predicts
    # 10-30 % too much, as the outside review found.
    old = RoundProfile("the old model", extra_draft_steps=0, first_token_from_prompt=False)
    obs = []
    for k, pairs in _runs().items():
        spec = [sp.decode_tps or 0.0 for sp, _ in pairs]  # as printed: N / T
        base = [b.decode_tps or 0.0 for _, b in pairs]  # eval runs / eval time
        obs.append(Observation(
            draft_max=k, n_drafted=sum(sp.n_drafted for sp, _ in pairs), n_accept=sum(sp.n_accept for sp, _ in pairs),
            n_generated=sum(sp.n_predict for sp, _ in pairs), spec_decode_tps=statistics.median(spec),
            baseline_decode_tps=statistics.median(base), profile=old,
            speedup=statistics.median(s / b for s, b in zip(spec, base, strict=True)),
            rounds=sum(old.rounds(sp.n_predict, sp.n_accept) for sp, _ in pairs)))
    last_only = bench.parse_bench_json(_read("bench-target-last-output.json"))
    assert not last_only.all_outputs
    an = analyze(obs, CostModel.from_bench(last_only.median_ms, _bench("bench-draft").median_ms[1], old), fit_draft=False)
    assert an.median_abs_error is not None and an.median_abs_error > ERROR_BOUND
    assert all(p.rel_error > 0.05 for p in an.points if p.rel_error is not None)  # too high at every point


def test_each_measured_ingredient_matters() -> None:
    good = analyze(_observations(), _cost())
    # Without the draft's extra step per round (it decodes the target's token too) the short
    # drafts, where that step is a large share of the round, are predicted far too fast.
    no_extra = RoundProfile("no extra draft step", extra_draft_steps=0, first_token_from_prompt=True)
    bad = analyze(_observations(no_extra), _cost(no_extra))
    for g, b in zip(good.points, bad.points, strict=True):
        if g.draft_max <= 2:
            assert abs(g.rel_error or 0) <= ERROR_BOUND < (b.rel_error or 0), (g.draft_max, g.rel_error, b.rel_error)
    assert (bad.median_abs_error or 0) > (good.median_abs_error or 0)
    # With the old round count the recorded counters do not even add up: n_drafted = k x rounds.
    for k, pairs in _runs().items():
        for sp, _ in pairs:
            assert sp.n_drafted == k * LLAMA_SPECULATIVE.rounds(sp.n_predict, sp.n_accept)
            assert sp.n_drafted != k * SPECULATIVE_SIMPLE.rounds(sp.n_predict, sp.n_accept)


def test_logits_for_every_verified_token_are_timed() -> None:
    # llama-bench's default batch computes logits for its last token only; a verification batch
    # computes them for all k + 1 (-embd 1 makes every token an output).
    target = _bench("bench-target")
    assert target.all_outputs and not bench.parse_bench_json(_read("bench-target-last-output.json")).all_outputs


# --- fits on constructed points (pure math) -----------------------------------------------------


def _points(alpha: float, ks: list[int], cost: CostModel, rounds: int = 10_000, overhead: float = 1.0) -> list[Observation]:
    """What a perfect i.i.d. drafter would produce under ``cost`` (overhead > 1 slows the runs)."""
    out = []
    for k in ks:
        n_accept = round(rounds * expected_accepted(alpha, k))
        tokens = 1 + n_accept / rounds
        base_tps = 1000.0 / cost.baseline_ms_per_token
        out.append(Observation(
            draft_max=k, n_drafted=k * rounds, n_accept=n_accept, n_generated=n_accept + rounds + 1,
            spec_decode_tps=1000.0 * tokens / (cost.call_ms(k, tokens) * overhead), baseline_decode_tps=base_tps,
            profile=cost.profile,
        ))
    return out


CPU_COST = CostModel.from_bench({1: 20.0, 2: 24.0, 5: 32.0, 9: 45.0, 17: 70.0}, 4.0, LLAMA_SPECULATIVE)


def test_fit_recovers_a_known_model() -> None:
    obs = _points(0.85, [1, 2, 4, 8, 16], CPU_COST)
    an = analyze(obs, CPU_COST, max_draft=12)
    assert an.alpha == pytest.approx(0.85, abs=1e-4)
    assert len(an.curve) == 16  # extended to the largest measured length
    for p in an.points:
        assert not p.calls_measured and p.calls == 10_000
        assert p.alpha == pytest.approx(0.85, abs=1e-4)
        assert p.rel_error == pytest.approx(0.0, abs=1e-3)
        assert p.implied_cost_ratio == pytest.approx(0.2, abs=1e-3)
    best_k, best_s = best_draft_length(an.alpha, CPU_COST)
    assert an.best is not None and (an.best.draft_max, an.best.speedup) == (best_k, pytest.approx(best_s))
    assert [k for k, _ in an.speedup_curve] == list(range(1, 17))
    assert an.accept_curve[0][1] == pytest.approx(an.alpha)  # at k = 1 accept is α
    assert an.median_abs_error == pytest.approx(0.0, abs=1e-3)


def test_the_draft_cost_is_fitted_to_the_measured_speedups() -> None:
    # Points whose draft step costs 2.5 ms inside the rounds (c 0.125), fitted from costs that timed
    # the draft alone at 4 ms (c 0.2): the fit finds the draft's cost, the target's stays as timed.
    truth = CPU_COST.with_cost_ratio(0.125)
    obs = _points(0.85, [1, 2, 4, 8, 16], truth)
    an = analyze(obs, CPU_COST)
    assert an.cost is not None and an.cost.cost_ratio == pytest.approx(0.125, rel=1e-3)
    assert an.cost.timed_cost_ratio == pytest.approx(0.2) and an.cost.target_ms_per_token == CPU_COST.target_ms_per_token
    assert an.median_abs_error == pytest.approx(0.0, abs=1e-3)
    as_timed = analyze(obs, CPU_COST, fit_draft=False)
    assert as_timed.median_abs_error is not None and as_timed.median_abs_error > 0.05
    # Refitting a fitted model keeps what was timed.
    again = analyze(obs, an.cost)
    assert again.cost is not None and again.cost.timed_cost_ratio == pytest.approx(0.2)
    # Two lengths: one parameter would match them by construction; the draft stays as timed.
    two = analyze(_points(0.85, [2, 8], truth), CPU_COST)
    assert two.cost is not None and two.cost.timed_cost_ratio is None and two.cost.cost_ratio == pytest.approx(0.2)


def test_pooled_alpha_lies_between_the_points() -> None:
    an = analyze([*_points(0.7, [4], CPU_COST), *_points(0.9, [8], CPU_COST)], CPU_COST)
    alphas = sorted(p.alpha for p in an.points if p.alpha is not None)
    assert alphas[0] < an.alpha < alphas[1]
    total = sum(p.calls * expected_accepted(an.alpha, p.drafted_per_round) for p in an.points)
    assert total == pytest.approx(sum(round(10_000 * expected_accepted(a, k)) for a, k in ((0.7, 4), (0.9, 8))), rel=1e-9)


def test_fit_without_costs_still_fits_alpha() -> None:
    an = analyze(_points(0.7, [2, 4], CPU_COST))
    assert an.alpha == pytest.approx(0.7, abs=1e-4)
    assert an.cost is None and an.curve == () and an.best is None and an.median_abs_error is None
    assert all(p.predicted_speedup is None and p.rel_error is None for p in an.points)


def test_counted_rounds_win_over_derived_ones() -> None:
    (o,) = _points(0.8, [4], CPU_COST)
    assert o.calls == 10_000
    counted = replace(o, rounds=9_000)
    assert counted.calls == 9_000 and analyze([counted]).points[0].calls_measured
    assert replace(o, profile=SPECULATIVE_SIMPLE).calls == 10_001


def test_points_and_costs_must_come_from_one_program() -> None:
    (o,) = _points(0.8, [4], CPU_COST)
    with pytest.raises(LlamaspecError, match="different programs"):
        analyze([o, replace(o, profile=SPECULATIVE_SIMPLE)])
    with pytest.raises(LlamaspecError, match="costs are for"):
        analyze([o], replace(CPU_COST, profile=SPECULATIVE_SIMPLE))


def test_point_without_drafts_has_no_alpha_but_the_fit_goes_on() -> None:
    empty = Observation(draft_max=4, n_drafted=0, n_accept=0, n_generated=100, spec_decode_tps=9.0, baseline_decode_tps=10.0,
                        profile=LLAMA_SPECULATIVE)
    an = analyze([empty, *_points(0.8, [4], CPU_COST)], CPU_COST)
    assert an.points[0].alpha is None and an.points[0].acceptance is None
    assert an.points[0].tokens_per_round == 1.0
    assert an.alpha == pytest.approx(0.8, abs=1e-4)


def test_nothing_drafted_anywhere_is_an_error() -> None:
    empty = Observation(draft_max=4, n_drafted=0, n_accept=0, n_generated=100, spec_decode_tps=9.0, baseline_decode_tps=10.0,
                        profile=LLAMA_SPECULATIVE)
    with pytest.raises(LlamaspecError, match="nothing was drafted") as info:
        analyze([empty])
    assert info.value.hint and "draft" in info.value.hint
    with pytest.raises(LlamaspecError, match="no measured points"):
        analyze([])


def test_perfect_and_zero_acceptance() -> None:
    cheap = CostModel(target_ms_per_token=10.0, draft_ms_per_token=1.0, profile=LLAMA_SPECULATIVE)
    perfect = analyze(_points(1.0, [4, 8], cheap), cheap)
    assert perfect.alpha == 1.0 and perfect.ceiling_speedup == math.inf
    assert perfect.best is not None and perfect.best.draft_max == 16  # longer drafts always pay
    useless = analyze(_points(0.0, [4, 8], cheap), cheap)
    assert useless.alpha == 0.0 and useless.ceiling_speedup == 1.0
    assert useless.best is not None and useless.best.draft_max == 1 and useless.best.speedup < 1


VALID = Observation(draft_max=8, n_drafted=112, n_accept=57, n_generated=72, spec_decode_tps=40.0, baseline_decode_tps=30.0,
                    profile=LLAMA_SPECULATIVE)


@pytest.mark.parametrize(
    "changes",
    [
        {"n_accept": 113},  # more accepted than drafted
        {"n_drafted": -1},
        {"n_accept": -1},
        {"n_generated": 58},  # llama-speculative: no round left after the first token
        {"n_generated": 0},
        {"draft_max": 0},
        {"draft_max": True},
        {"n_drafted": 112.0},
        {"spec_decode_tps": 0.0},
        {"baseline_decode_tps": float("nan")},
        {"rounds": 0},
        {"rounds": 16},  # 16 rounds + 57 accepted > 72 generated
        {"speedup": -1.0},
    ],
)
def test_bad_observations_are_refused(changes: dict[str, object]) -> None:
    assert VALID.calls == 14
    with pytest.raises(LlamaspecError):
        replace(VALID, **changes)  # type: ignore[arg-type]


def test_the_llama_cpp_counters_use_the_model_s_round_shapes() -> None:
    # One formula: the counters llama.cpp runs store and the model that fits them read the same shape.
    from llamaspec.llamacpp import counting

    for prog in counting.COUNTING_PROFILES.values():
        assert prog.shape is (LLAMA_SPECULATIVE if prog.role == "speculative" else SPECULATIVE_SIMPLE)
        assert prog.rounds(72, 57) == prog.shape.rounds(72, 57)
    assert counting.profile("speculative", "2026").rounds(72, 57) == 14
    assert counting.profile("speculative-simple", "2026").draft_steps_per_round(8) == 8


def test_the_model_is_not_fitted_to_an_adaptive_program() -> None:
    # Sep 2023's llama-speculative changes k within a run: fitting it at the requested k would be wrong.
    from llamaspec.decision import speedup_model
    from llamaspec.measure.summary import DraftCheck, empty

    fixed = replace(empty("ok"), draft=DraftCheck(8, 8, "fixed", 8.0))
    adaptive = replace(fixed, draft=DraftCheck(8, 22, "adaptive", None))
    assert "adapts its draft length" in (speedup_model.analyze_rows([speedup_model.PointRow(1, "", 8, adaptive)])[1] or "")
    assert "adapts" not in (speedup_model.analyze_rows([speedup_model.PointRow(1, "", 8, fixed)])[1] or "")


def test_steps_that_draft_nothing_mix_into_the_speedup_by_their_share_of_tokens() -> None:
    """A share q of the tokens from steps of length 0 (one token, one target step each): time per
    token is (1 - q)·T(k)/tokens + q·T(0), against the baseline's step."""
    cost = CostModel(target_ms_per_token=20.0, draft_ms_per_token=5.0, verify_batches=((1, 20.0), (17, 60.0)),
                     profile=round_profile("llama-server"), baseline_step_ms=30.0)
    k, tokens = 4.0, 3.5
    assert cost.speedup_at(k, tokens, 0.0) == pytest.approx(tokens * 30.0 / cost.call_ms(k, tokens))
    mixed = 0.25 * cost.call_ms(0.0, 1.0) + 0.75 * cost.call_ms(k, tokens) / tokens
    assert cost.speedup_at(k, tokens, 0.25) == pytest.approx(30.0 / mixed)
    assert cost.speedup_at(k, tokens, 1.0) == pytest.approx(30.0 / cost.call_ms(0.0, 1.0))
    with pytest.raises(LlamaspecError, match="draft nothing"):
        cost.speedup_at(k, tokens, 1.5)
