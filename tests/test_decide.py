"""The one decision rule (llamaspec.decision.decide) on its own: examples with known answers.

The study that decides with the rule is replayed on recorded real studies by ``benchmarks/decide.py``; the cases here pin
each clause: shown faster beats "interval includes 1.0", cheaper wins only within the tolerance,
"no draft" against "undecided", the model's band ranking and its disagreements, what to measure next.
"""

from __future__ import annotations

import json
import math

import pytest

from llamaspec.base import stats
from llamaspec.base.stats import Z975, Spread, spread
from llamaspec.decision import decide
from llamaspec.decision.decide import Band, Candidate, ModelView


def s(median: float, low: float, high: float, n: int = 3) -> Spread:
    return Spread(median, low, high, n, low, high, 0.05)


def c(k: int, median: float, low: float, high: float, n: int = 3) -> Candidate:
    return Candidate(k, f"draft {k}", s(median, low, high, n), (k,))


def view(preds: dict[int, tuple[float, float, float]], error: float = 0.02, best: int | None = None) -> ModelView:
    bands = tuple(Band(k, f"draft {k}", p, lo, hi, (k,)) for k, (p, lo, hi) in sorted(preds.items()))
    top = best if best is not None else max(preds, key=lambda k: preds[k][0])
    return ModelView(bands, top, (top,), error)


def test_the_issue_sweep_recommends_the_only_setting_shown_faster() -> None:
    # a make demo sweep (2 Dec 2026): the old rule took draft 2 (1.07x [0.84-1.18], the cheapest of
    # a tie set built around one noisy best point); draft 4 is the only one whose interval is above 1.
    got = decide.decide([c(1, 1.01, 0.93, 1.08), c(2, 1.07, 0.84, 1.18), c(4, 1.20, 1.14, 1.29),
                         c(8, 1.27, 0.95, 1.64), c(12, 1.15, 0.90, 1.30)])
    assert got.verdict == "recommend" and got.chosen is not None and got.chosen.key == 4
    assert not got.settled  # draft 8 might be faster, and draft 4's own interval is wider than +-5 %
    asked = {r.key for r in got.requests}
    assert asked >= {4, 8}
    assert all(1 <= r.pairs <= decide.STEP for r in got.requests)
    assert "draft 8 measured higher medians but a chance of a gain below 97.5%" in got.reason
    assert got.interval == got.chosen.measured


def test_cheaper_wins_only_within_the_tolerance() -> None:
    # 1.51 is 0.66 % below 1.52 and each is known to about 0.3 % (sd): shown within 2 %
    close = decide.decide([c(4, 1.51, 1.50, 1.52, n=20), c(8, 1.52, 1.51, 1.53, n=20)])
    assert close.chosen is not None and close.chosen.key == 4
    assert "cheapest setting shown within 2%" in close.reason
    # the same medians each uncertain by about 1 % (sd): a gap of 0.66 % plus 1.4 % is not shown within 2 %
    unsure = decide.decide([c(4, 1.51, 1.48, 1.54), c(8, 1.52, 1.49, 1.55)])
    assert unsure.chosen is not None and unsure.chosen.key == 8 and "the best estimate" in unsure.reason
    apart = decide.decide([c(4, 1.40, 1.30, 1.50), c(8, 1.55, 1.45, 1.65)])
    assert apart.chosen is not None and apart.chosen.key == 8  # overlapping intervals alone do not make 4 as good


def test_settled_when_narrow_and_no_rival_can_beat_it() -> None:
    got = decide.decide([c(2, 1.30, 1.28, 1.32), c(4, 1.60, 1.57, 1.62, n=5), c(8, 1.55, 1.52, 1.58)])
    assert got.verdict == "recommend" and got.chosen is not None and got.chosen.key == 4
    assert got.settled and not got.requests
    assert got.sureness.startswith("settled")
    # two or three close ratios make a narrow interval that proves little: settled needs 5 pairs
    few = decide.decide([c(2, 1.30, 1.28, 1.32), c(4, 1.60, 1.59, 1.61, n=2), c(8, 1.55, 1.52, 1.58)])
    assert few.chosen is not None and few.chosen.key == 4 and not few.settled
    assert [(r.key, r.pairs) for r in few.requests] == [(4, 3)] and "settled needs 5" in few.requests[0].why
    rival = decide.decide([c(4, 1.60, 1.57, 1.62, n=5), c(8, 1.58, 1.40, 1.80)])
    assert rival.chosen is not None and rival.chosen.key == 4 and not rival.settled
    assert [r.key for r in rival.requests] == [8]  # draft 4 is narrow; only its rival needs pairs


def test_no_gain_is_no_draft_and_a_wide_interval_is_undecided() -> None:
    below = decide.decide([c(1, 0.90, 0.88, 0.93), c(4, 0.97, 0.94, 0.99)])
    assert below.verdict == "no draft" and below.settled and "at or below 1.0" in below.reason
    assert below.lines()[0] == "recommended: no draft (measured no gain)"
    narrow = decide.decide([c(4, 1.00, 0.98, 1.04, n=10)])  # could be +4 %, but already within +-5 %
    assert narrow.verdict == "no draft"
    wide = decide.decide([c(1, 0.95, 0.90, 0.99), c(4, 1.10, 0.90, 1.35)])
    assert wide.verdict == "undecided" and not wide.settled
    assert [r.key for r in wide.requests] == [4] and wide.requests[0].pairs >= 1
    assert wide.lines()[0] == "undecided: the intervals are too wide"
    # every setting measured once (a study's first prompt), none bounded by the model: nothing is
    # settled, however low each reads (a whole study used to stop here, "no draft", in 18 of 100
    # replays of the built-in recording whose best setting is 1.13x)
    once = decide.decide([c(1, 0.99, 0.99, 0.99, n=1), c(4, 0.93, 0.93, 0.93, n=1)], unit="prompts")
    assert once.verdict == "undecided" and not once.settled and {r.key for r in once.requests} == {1, 4}
    assert decide.deploys_alone(s(0.9, 0.9, 0.9, 1)) is None  # one pair: no "no draft" either


def test_the_best_bet_is_the_setting_nearest_to_being_shown_faster() -> None:
    """The demo's study: ngram-mod, stopped after 7 prompts, reads 1.03x [0.87-1.23] (a chance of a
    loss of about 36 %); ngram-map-k, measured on 36, 1.02x [0.96-1.08] (about 25 %). Neither is shown
    faster; the best bet is the one nearer to it, not the higher estimate, and what the answer says
    to settle is about it. Where none has an interval, the best estimate."""
    mod = Candidate("ngram-mod", "ngram-mod", s(1.03, 0.87, 1.23, n=7), (0,))
    mapk = Candidate("ngram-map-k", "ngram-map-k", s(1.02, 0.96, 1.08, n=36), (0,))
    d = decide.decide([mod, mapk], unit="prompts")
    assert d.verdict == "undecided" and d.chosen is not None and d.chosen.label == "ngram-map-k"
    assert d.best_bet is d.chosen and (d.chance_of_loss or 0) < (chance_of_loss_of(mod) or 1)
    assert "best: ngram-map-k" in d.reason
    once = decide.decide([c(2, 1.05, 1.05, 1.05, n=1), c(4, 1.08, 1.08, 1.08, n=1)])
    assert once.chosen is not None and once.chosen.key == 4


def chance_of_loss_of(candidate: Candidate) -> float | None:
    return decide.chance_of_loss(candidate.speedup)


def test_the_chance_of_a_loss_reads_the_interval_as_a_normal_on_the_log_scale() -> None:
    """1.20x [1.00-1.44]: its lower half is 1.96 standard errors, so 1.0 lies 1.96 below the estimate:
    a loss with a chance of 2.5 %; [0.90-1.60] at 1.20x: se log(1.2/0.9)/1.96 = 0.1468, log 1.2 / se =
    1.242: 10.7 %; 0.95x [0.80-1.10]: se log(0.95/0.80)/1.96 = 0.0877, 0.0513 of it below 1.0: 72 %;
    no interval, no chance."""
    assert decide.chance_of_loss(s(1.20, 1.00, 1.44)) == pytest.approx(0.025, abs=1e-4)
    assert decide.chance_of_loss(s(1.20, 0.90, 1.60)) == pytest.approx(0.1071, abs=1e-3)
    assert decide.chance_of_loss(s(0.95, 0.80, 1.10)) == pytest.approx(0.7207, abs=1e-3)
    assert decide.chance_of_loss(s(1.2, 1.2, 1.2, n=1)) is None
    assert decide.chance_of_loss(s(1.2, 1.2 * (1 - 1e-17), 1.2)) == 0.0  # no width below the median: no doubt


def test_over_prompts_a_chance_of_a_gain_of_92_5_percent_shows_a_setting_faster() -> None:
    """1.20x [0.95-1.52]: a chance of a loss of about 5.8 %: over prompts (bar 92.5 %) it is
    recommended; over one prompt's pairs (bar 97.5 %: the interval above 1.0) it is not, and the
    best bet is named with that chance; an explicit bar overrides the unit's."""
    one = [c(8, 1.20, 0.95, 1.52, n=20)]
    loss = decide.chance_of_loss(one[0].speedup)
    assert loss is not None and 0.05 < loss < 0.075
    over_prompts = decide.decide(one, unit="prompts")
    assert over_prompts.verdict == "recommend" and over_prompts.chance_of_loss == pytest.approx(loss)
    pairs = decide.decide(one)
    assert pairs.verdict == "undecided" and pairs.best_bet is not None
    assert f"  best bet: draft 8 1.20x [0.95-1.52], a loss on prompts like these with a chance of {loss:.1%}" in pairs.lines()
    assert decide.decide(one, unit="prompts", gain_chance=0.975).verdict == "undecided"
    assert pairs.to_dict()["chance_of_loss"] == pytest.approx(loss)


def test_an_undecided_answer_says_how_many_prompts_would_tell() -> None:
    """ngram-cache over the 46 prompts of the built-in workload's recording: 1.133x, its standard
    error 0.0485 on the log scale (a spread of 0.329 between prompts). At the interval above 1.0
    (97.5 %), the normal says (1.96 x 0.329 / log 1.133)^2 = 27 prompts for even odds; Student's t at
    the prompts less one makes it 30 (t(29) = 2.045); for 80 % odds (1.96 + 0.84)^2 scaled: 55. At
    the rule's own 92.5 % it is fewer. A best below 1.0, or a decided answer, says nothing."""
    se, median = 0.0485, 1.133
    low, high = median * math.exp(-Z975 * se), median * math.exp(Z975 * se)
    over46 = s(median, low, high, n=46)
    assert decide.units_to_show(over46, 0.5, 0.975) == 30
    assert decide.units_to_show(over46, 0.8, 0.975) == 55
    assert decide.units_to_show(over46, 0.5) == 17 and decide.units_to_show(over46, 0.8) == 37
    # the same figures over 12 prompts: the per-prompt spread is that of the 46 (se x sqrt(46/12))
    wide = decide.decide([c(8, median, *(median * math.exp(f * stats.t975(11) * se * math.sqrt(46 / 12)) for f in (-1, 1)),
                            n=12)], unit="prompts")
    assert wide.verdict == "undecided"
    assert (wide.prompts_to_show(0.5), wide.prompts_to_settle) == (17, 37)
    assert wide.to_tell == ("about 17 prompts in all (now 12) for even odds, 37 for 80% odds, of showing draft 8's 1.13x a "
                            "gain, if it and its spread held")
    assert f"  to tell: {wide.to_tell}" in wide.lines() and wide.to_dict()["to_tell"] == wide.to_tell
    assert wide.to_dict()["prompts_to_settle"] == 37
    assert decide.decide([c(8, 0.99, 0.90, 1.09, n=19)], unit="prompts").to_tell is None
    assert decide.decide([c(8, 1.20, 1.10, 1.30, n=19)], unit="prompts").prompts_to_settle is None


def test_nothing_to_decide() -> None:
    got = decide.decide([])
    assert got.verdict == "nothing" and got.chosen is None and not got.settled
    assert "no setting finished" in got.reason


def test_the_rule_ranks_on_what_was_measured_not_on_the_pooled_estimate() -> None:
    # Two noisy points both shown faster; the model (fitted to every point) says 8 beats 6 by 10 %.
    points = [c(6, 1.45, 1.10, 1.60), c(8, 1.40, 1.12, 1.70)]
    alone = decide.decide(points)
    assert alone.chosen is not None and alone.chosen.key == 6  # by the medians alone
    model = view({6: (1.40, 1.38, 1.42), 8: (1.54, 1.52, 1.56)}, error=0.02)
    # By default (the pooled interval's coverage is short of 95 % in the replays) the model's band
    # is shown but the medians rank.
    measured = decide.decide(points, [model])
    assert measured.chosen is not None and measured.chosen.key == 6 and measured.chosen.band is not None
    assert measured.chosen.estimate == 1.45 and "(as measured)" in measured.reason
    # pooled with the model (what the replays' "pooled covers" measures), 8 would rank first
    six, eight = (decide.estimate(p, [model], pooled=True) for p in points)
    assert eight.estimate > six.estimate and eight.band is not None and not eight.disagrees


def test_a_setting_measured_once_could_reach_the_models_band() -> None:
    # Measured once, draft 10 cannot be chosen, but the model's band (widened by its error) says it
    # could beat the chosen setting: a rival to measure, not a winner.
    points = [c(6, 1.45, 1.40, 1.50, n=5), c(10, 1.30, 1.30, 1.30, n=1)]
    model = view({6: (1.45, 1.43, 1.47), 10: (1.60, 1.55, 1.65)}, error=0.02)
    got = decide.decide(points, [model])
    assert got.chosen is not None and got.chosen.key == 6
    ten = next(e for e in got.estimates if e.key == 10)
    assert ten.estimate == 1.30 and ten.high > 1.65
    assert 10 in [r.key for r in got.requests]


def test_a_disagreement_is_named_and_the_measurement_trusted() -> None:
    model = view({4: (1.50, 1.48, 1.52), 8: (2.00, 1.98, 2.02)}, error=0.02)
    got = decide.decide([c(4, 1.50, 1.47, 1.53), c(8, 1.55, 1.52, 1.58)], [model])
    e8 = next(e for e in got.estimates if e.key == 8)
    assert e8.disagrees and e8.estimate == pytest.approx(1.55)
    assert any("draft 8 measured" in n and "measurement is trusted" in n for n in got.notes)
    assert got.chosen is not None and got.chosen.key == 8


def test_the_model_asks_for_an_unmeasured_length() -> None:
    model = view({4: (1.50, 1.48, 1.52), 6: (1.70, 1.66, 1.74), 8: (1.52, 1.50, 1.54)}, best=6)
    got = decide.decide([c(4, 1.50, 1.48, 1.52), c(8, 1.52, 1.50, 1.54)], [model])
    assert not got.settled
    assert any(r.key == 6 and "not measured" in r.why for r in got.requests)
    assert any("model: best draft 6 1.70x [1.66-1.74]" in line for line in got.lines())
    # a band the bootstrap over pairs could not widen (one pair a point) is no interval
    flat = decide.decide([c(4, 1.50, 1.48, 1.52)], [view({4: (1.50, 1.48, 1.52), 6: (1.70, 1.70, 1.70)}, best=6)])
    assert any(line.startswith("  model: best draft 6 1.70x, its median error") for line in flat.lines())


def test_pairs_needed_follows_the_square_root_law() -> None:
    wide = s(1.5, 1.2, 1.8, n=3)  # +-20 %: 3 x (0.20/0.05)^2 = 48 pairs, capped at one step
    assert decide.pairs_needed(wide) == decide.STEP
    assert decide.pairs_needed(s(1.5, 1.44, 1.56, n=4)) == 1  # +-4 %: already narrow, asked for at least 1
    assert decide.pairs_needed(s(1.5, 1.41, 1.59, n=4)) == 2  # +-6 %: ceil(4 x 1.44) - 4 = 2
    assert decide.pairs_needed(s(1.5, 1.5, 1.5, n=1)) == decide.STEP


def test_the_decision_serialises() -> None:
    model = view({4: (1.50, 1.48, 1.52), 8: (1.52, 1.50, 1.54)})
    got = decide.decide([c(4, 1.50, 1.47, 1.53), c(8, 1.52, 1.49, 1.55)], [model])
    data = json.loads(json.dumps(got.to_dict()))
    assert data["verdict"] == "recommend" and data["chosen"]["key"] == got.chosen.key == 8  # type: ignore[union-attr]
    assert data["models"][0]["bands"][0]["predicted"] == 1.50
    assert isinstance(data["measure_next"], list) and "how_sure" in data


def test_measured_ratios_make_the_interval() -> None:
    # Candidates carry the spread of their paired ratios as the rest of llamaspec computes it.
    ratios = (1.21, 1.18, 1.25, 1.19, 1.22)
    got = decide.decide([Candidate(4, "draft 4", spread(ratios) or s(1, 1, 1), (4,))])
    assert got.verdict == "recommend" and got.interval is not None and got.interval.values == ratios


# --- the recorded sweeps ------------------------------------------------------------------------
# tests/fixtures/llamacpp/0c1e570/sweep-accept/<level>/sweep.json: real draft-length sweeps of the
# offline pair at three acceptance levels (record.sh there; README.md says when and where).

# llama.cpp's accept at draft 8 (a fraction): about 90, 50 and 30 %
LEVELS = {"q4_1": (0.80, 1.00), "q4_0": (0.35, 0.65), "q2_k": (0.15, 0.45)}
PAIRS = {"q4_1": 30, "q4_0": 30, "q2_k": 10}  # per point, as the fixtures' README.md says
MODEL_ERROR_BOUND = 0.10


def _recorded(level: str):  # type: ignore[no-untyped-def]
    from benchmarks.recorded import ACCEPT, load

    if not (ACCEPT / level / "sweep.json").is_file():
        pytest.fail(f"recorded sweep {level} missing under {ACCEPT}")
    return load(level, ACCEPT)


@pytest.mark.parametrize("level", list(LEVELS))
def test_the_recorded_sweeps_are_what_their_readme_says(level: str) -> None:
    rec = _recorded(level)
    settings = rec.data["settings"]
    assert rec.data["llamacpp_commit"] == "0c1e570" and settings["threads"] == 1
    assert settings["n_predict"] == (96 if level == "q2_k" else 64)  # the Q2_K case's own setting
    low, high = LEVELS[level]
    for k, point in rec.points.items():
        s = point.summary
        assert s.status == "ok" and s.lossless.verdict == "identical" and s.paired
        assert len(point.pairs) == s.pairs == PAIRS[level]
        # the pairs read back from the measurements are the ones the stored speedup was computed from
        assert s.speedup is not None and tuple(p.ratio for p in point.pairs) == pytest.approx(s.speedup.values)
        assert s.n_drafted == k * (s.rounds or 0)  # llama-speculative drafts exactly k per round
    eight = rec.points[8].summary.acceptance
    assert eight is not None and low <= eight.median <= high, eight.median
    assert rec.grid == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
    costs = [m for p in rec.data["points"] for m in p["measurements"] if m["mode"] in ("batch", "draft")]
    assert {m["mode"] for m in costs} == {"batch", "draft"}  # llama-bench's timings, once per sweep


# Measured on the recordings (llama-bench's target costs, the draft's cost fitted to the speedups):
# Q4_1 2.7 %, Q4_0 4.2 %, Q2_K 3.1 %. With the draft's cost as llama-bench timed it alone, Q4_1 and
# Q2_K miss the bound (23.6 % and 19.9 %; Q4_0 3.3 %).
@pytest.mark.parametrize("level", list(LEVELS))
def test_the_speedup_model_predicts_each_acceptance_level(level: str) -> None:
    from benchmarks.recorded import group_for

    rec = _recorded(level)
    group = group_for(rec, rec.every_pair, refits=50)
    assert group.analysis is not None and group.analysis.cost is not None
    assert group.model_error is not None and group.model_error <= MODEL_ERROR_BOUND, group.analysis.points


@pytest.mark.parametrize("level", ["q4_1", "q4_0"])
def test_the_decision_on_a_whole_recording_is_right(level: str) -> None:
    from benchmarks.recorded import chosen_length, new_rule, wrong

    rec = _recorded(level)
    d = new_rule(rec, rec.every_pair, refits=50)
    assert not wrong(rec, chosen_length(d)), "\n".join(d.lines())


def test_shown_wrong_allows_for_the_recordings_own_noise() -> None:
    # Q4_1's best is draft 12 (1.26x over 30 pairs). Draft 14's 1.19x is more than 3 % below it, but
    # its own interval (1.13-1.24) reaches past that line: wrong by the medians, not shown wrong.
    # Draft 10 (1.22x) is within 3 %; draft 1 (0.71x) is wrong either way.
    from benchmarks.recorded import shown_wrong, wrong

    rec = _recorded("q4_1")
    assert max(rec.points, key=lambda k: rec.points[k].true_speedup) == 12
    fourteen = rec.points[14]
    assert wrong(rec, 14) and not shown_wrong(rec, 14), fourteen.true_interval
    assert fourteen.true_interval.high >= rec.true_best * 0.97 > fourteen.true_speedup
    assert wrong(rec, 1) and shown_wrong(rec, 1)
    assert not wrong(rec, 10) and not shown_wrong(rec, 10)


@pytest.mark.parametrize("level", [*LEVELS, "q4_1-later"])
def test_the_recorded_sweeps_were_measured_in_passes(level: str) -> None:
    # One pair at every length, then the next: every point's pairs span the whole recording, so the
    # machine's drift over it falls on every length alike (measured point after point, the old
    # Q4_1 recording's baselines drifted from 34.8 to 40.5 t/s between its first and last point).
    rec = _recorded(level)
    spans = [sorted(m["created_at"] for m in p.run["measurements"] if m["mode"] == "speculative")
             for p in rec.points.values()]
    assert max(s[0] for s in spans) < min(s[-1] for s in spans)
    assert max(s[1] for s in spans) < min(s[-2] for s in spans)


def test_a_later_session_of_the_same_sweep_reads_differently() -> None:
    # q4_1-later/: the Q4_1 sweep again, three hours later on the same idle machine, in passes (30
    # pairs a point, then 30 more at the lengths within 5 % of its best). The counters are the same
    # run for run; the speedups are not: its baselines ran faster (37-39 t/s against 33-34) and its
    # best reads 1.14x at draft 10 against 1.26x at draft 12. Pairs from two sessions do not pool.
    rec, later = _recorded("q4_1"), _recorded("q4_1-later")
    for k, point in rec.points.items():
        s, t = point.summary, later.points[k].summary
        assert s.acceptance is not None and t.acceptance is not None and s.acceptance.median == t.acceptance.median
        assert s.tokens_per_round == t.tokens_per_round
        assert len(later.points[k].pairs) == t.pairs == (60 if k in (5, 8, 10, 12, 14, 16) else 30)
    assert later.true_best < rec.true_best * 0.95
    assert max(later.points, key=lambda k: later.points[k].true_speedup) == 10


# --- the interval and the rule on the built-in workload's recording (benchmarks/decide.py --holdout) ---

def _builtin():  # type: ignore[no-untyped-def]
    from benchmarks import replay

    path = replay.Path(__file__).resolve().parent / "fixtures/llamacpp/0c1e570/sweep-workload/builtin/study.json.gz"
    return replay, replay.load(path)


def test_over_the_whole_builtin_recording_ngram_cache_is_shown_faster_and_shifted_nothing_is() -> None:
    """The 46 timed prompts of the recording, every setup on each: ngram-cache 1.133x [1.03-1.25]
    (the spread of its 46 prompts, t at 45) is recommended, a loss with a chance under 1 %; with
    every setup divided so that it reads 0.97x, nothing is recommended, and its chance of a loss
    is more than even."""
    replay, rec = _builtin()
    d = replay.decide_direct(rec, rec.timed())
    assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == "ngram-cache"
    assert d.chosen.measured.n == 46 and d.chosen.measured.text() == "1.13 [1.03-1.25]"
    assert (d.decision.chance_of_loss or 1.0) < 0.01
    low = replay.shifted(rec, 0.97)
    shifted = replay.decide_direct(low, low.timed())
    assert shifted.verdict != "recommend" and shifted.chosen is not None
    assert shifted.chosen.measured.median == pytest.approx(0.97, abs=1e-9) and (shifted.decision.chance_of_loss or 0) > 0.5
    assert shifted.decision.best_bet is None and shifted.decision.prompts_to_settle is None


def test_a_held_out_set_is_a_sample_too() -> None:
    """A sound 95 % interval over n prompts holds the figure of m others when |T| < t / sqrt(1 + n/m):
    at equal halves of 23, about 84 % (the normal's 83.4 %: T's heavier tails and t's 2.074 all but
    cancel); fewer held out, less often; many held out, near 95 %."""
    from benchmarks.decide import expected_cover

    assert expected_cover(23, 23) == pytest.approx(0.844, abs=0.004)
    assert expected_cover(30, 16) < expected_cover(20, 26) < expected_cover(13, 33) < expected_cover(8, 38) < 0.95
    assert expected_cover(8, 10_000) == pytest.approx(0.95, abs=0.005)


def test_a_replay_draws_each_category_in_proportion_and_holds_the_rest_out() -> None:
    """13 of the 46 timed prompts (rag 9, multi-turn, math and rewriting 8, summarization 7, code 6):
    each category's share by largest remainders, one prompt of each held out at least; drawn with
    replacement, the same shares and nothing held out."""
    import random

    from benchmarks.decide import draw

    _replay, rec = _builtin()
    study, held = draw(rec, 13, random.Random(0))
    assert len(study) == 13 and not set(study) & set(held) and sorted(study + held) == sorted(rec.timed())
    counts = {c: sum(rec.prompts[q] == c for q in study) for c in set(rec.prompts.values())}
    assert counts == {"rag": 3, "multi-turn": 2, "math": 2, "rewriting": 2, "summarization": 2, "code": 2}
    again, none = draw(rec, 30, random.Random(0), again=True)
    apart, _held = draw(rec, 30, random.Random(0))
    assert none == [] and len(again) == 30 and len(set(again)) < 30  # some prompt drawn twice
    assert sorted(rec.prompts[q] for q in again) == sorted(rec.prompts[q] for q in apart)


def test_the_replay_serves_runs_asked_next_to_each_other_from_runs_recorded_next_to_each_other() -> None:
    """Pairs in either order (B S, S B) are recorded pairs; in a block B S1 S2 B the last baseline
    is S2's recorded neighbour and the first one a recorded baseline of the prompt."""
    from types import SimpleNamespace

    replay, rec = _builtin()
    engine = replay.ReplayEngine(rec, seed=3)
    q = rec.timed()[0]

    def run(mode: str, spec_type: str, draft_max: int = 8) -> dict:
        case = SimpleNamespace(case=q, settings=SimpleNamespace(spec_type=spec_type, draft_max=draft_max))
        return {"decode_tps": engine.measure(case, mode, "run.json").decode_tps}

    def recorded(label: str) -> set[tuple[float, float]]:
        return {(p.baseline["decode_tps"], p.speculative["decode_tps"]) for p in rec.cells[q][label]}

    b, sp = run("baseline", "draft"), run("speculative", "draft")
    assert (b["decode_tps"], sp["decode_tps"]) in recorded("draft 8")
    sp, b = run("speculative", "ngram-cache"), run("baseline", "ngram-cache")
    assert (b["decode_tps"], sp["decode_tps"]) in recorded("ngram-cache")
    first, s1, s2, last = (run("baseline", "none"), run("speculative", "draft", 4), run("speculative", "ngram-mod"),
                           run("baseline", "none"))
    assert (last["decode_tps"], s2["decode_tps"]) in recorded("ngram-mod")
    assert s1["decode_tps"] in {pair[1] for pair in recorded("draft 4")}
    assert first["decode_tps"] in {p.baseline["decode_tps"] for pairs in rec.cells[q].values() for p in pairs}
    assert engine.pairs == 4


def test_one_measured_setting_deploys_alone_by_the_one_rule() -> None:
    """`run` deploys the target alone where the decision rule says "no draft" on its one setting
    (not a rule of its own: "below 1.0"): shown slower, and shown no gain worth having (within the
    tolerance, settled), both; a gain, or an open question, deploys with the draft."""
    assert "every interval lies at or below 1.0" in (decide.deploys_alone(s(0.9, 0.85, 0.95, 6)) or "")
    assert decide.deploys_alone(s(0.995, 0.99, 1.0, 12)) is not None  # no gain: "below 1.0" kept the draft
    assert decide.deploys_alone(s(1.5, 1.4, 1.6, 6)) is None
    assert decide.deploys_alone(s(1.1, 0.8, 1.4, 3)) is None  # undecided: could be a gain
    assert decide.deploys_alone(None) is None
