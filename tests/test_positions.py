"""Acceptance by draft position: parsed from recorded llama-speculative-simple logs and llama-server
/metrics (tests/fixtures/llamacpp/0c1e570/positions), checked against each round's own verdict
(the -lv 5 recordings), refused or labelled on bad input, stored, summed, shown and plotted."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from llamaspec.llamacpp import parse
from llamaspec.llamacpp.metrics import accepted_per_position, metric_value, metrics_change, positions_from_metrics
from llamaspec.llamacpp.parse import positions
from llamaspec.measure import contract, summary
from llamaspec.measure.contract import Measurement, Positions, positions_from_rounds, sum_positions
from llamaspec.store.results import Store
from llamaspec.store.rows import MeasurementRow, measurement_of
from llamaspec.theory.drafted import by_position

HERE = Path(__file__).parent / "fixtures" / "llamacpp" / "0c1e570"
POS = HERE / "positions"
LEVELS = ("q4_1", "q4_0", "q2_k")
N_PREDICT = {"q4_1": 64, "q4_0": 64, "q2_k": 96}  # experiments/smollm2-acceptance.yaml


def log(level: str, k: int, suffix: str = "") -> str:
    return (POS / level / f"draft-{k}{suffix}.log").read_text()


def rounds_of(text: str) -> list[tuple[int, int]]:
    """Each round's (drafted, accepted) from -lv 5's debug lines: the ground truth."""
    return [(int(d), int(a)) for a, d in re.findall(r"accepted (\d+)/(\d+) draft tokens", text)]


# --- llama-speculative-simple's statistics line ------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("k", range(1, 17))
def test_every_recorded_run_gives_counts_that_agree_with_its_counters(level: str, k: int) -> None:
    stats = parse.parse_speculative(log(level, k))
    (line,) = stats.statistics
    assert line.implementation == "draft-simple" and stats.n_draft == k and stats.p_min == 0.0
    by = positions(stats, N_PREDICT[level])
    assert by.drafted is not None and by.accepted is not None, by.note
    assert len(positions(stats).drafted or ()) <= len(by.drafted)  # the budget only ever adds positions
    n = len(by.drafted)
    assert 1 <= n <= k and (by.note is None) == (n == k)
    assert by.drafted[0] == line.gen_drafts and by.accepted[0] == line.acc_drafts
    assert line.gen_drafts == line.calls_accept == stats.n_predict - stats.n_accept  # every round drafted (p-min 0)
    assert line.gen_tokens == stats.n_drafted and line.acc_tokens == stats.n_accept
    assert contract.check_positions(by.drafted, by.accepted) is None
    if n == k:  # every position known: the drafted counts add up to the drafted tokens
        assert sum(by.drafted) == stats.n_drafted and sum(by.accepted) == stats.n_accept


def test_a_recorded_run_read_exactly() -> None:
    # q4_1 draft 4: 15 rounds drafted 58 tokens (one round of 2 at the end of -n), 54 accepted
    stats = parse.parse_speculative(log("q4_1", 4))
    assert stats.statistics[0].acc_rate_by_position == (0.933, 0.933, 0.867, 0.867)
    assert stats.statistics[0].mean_acc_len == 4.60
    by = positions(stats)
    assert by == Positions((15, 15, 14, 14), (14, 14, 13, 13))


@pytest.mark.parametrize(("level", "k"), [("q4_1", 8), ("q4_1", 16), ("q2_k", 8)])
def test_counts_match_each_rounds_own_verdict(level: str, k: int) -> None:
    """At -lv 5 the program logs every round's "accepted a/d draft tokens": the counts derived from
    the statistics line agree with them on every position they keep."""
    text = log(level, k, ".lv5")
    truth = positions_from_rounds(rounds_of(text))
    assert truth.drafted and len(rounds_of(text)) == parse.parse_speculative(text).statistics[0].gen_drafts
    budget = N_PREDICT[level]
    for n_predict in (None, budget):
        by = positions(parse.parse_speculative(text), n_predict)
        assert by.drafted and by.accepted
        n = len(by.drafted)
        assert by.drafted == truth.drafted[:n] and by.accepted == truth.accepted[:n]
        # and the same run at -lv 4 (the runner's level) reads the same
        assert positions(parse.parse_speculative(log(level, k)), n_predict) == by
    if (level, k) == ("q4_1", 16):  # one round of 6 at the end: with the budget known, every position
        assert positions(parse.parse_speculative(text), budget) == truth
        assert len(positions(parse.parse_speculative(text)).drafted or ()) == 6


def test_llama_speculative_prints_no_positions() -> None:
    stats = parse.parse_speculative((HERE / "speculative-verbose.stdout").read_text(),
                                    (HERE / "speculative-verbose.stderr").read_text())
    by = positions(stats)
    assert by.drafted is None and by.accepted is None
    assert "llama-speculative prints none" in (by.note or "")
    assert parse.to_json(stats) and stats.to_dict()["by_position"]["note"] == by.note


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_a_cut_statistics_line_is_a_labelled_gap_and_the_rest_still_reads() -> None:
    text = log("q4_1", 4)
    line = next(ln for ln in text.splitlines() if "statistics" in ln)
    stats = parse.parse_speculative(text.replace(line, line[: line.index("0.933, 0.867, 0.867)") + 4]))
    assert stats.n_accept == 54 and stats.n_drafted == 58 and stats.target is not None  # the other figures stay
    by = positions(stats)
    assert by.drafted is None and "cut off" in (by.note or "")
    # cut before the rates: the line names what is missing
    stats = parse.parse_speculative(text.replace(line, line[: line.index("#acc drafts")]))
    assert "no acc_drafts" in (positions(stats).note or "") and stats.n_accept == 54


@pytest.mark.parametrize(("old", "new", "why"), [
    ("#gen tokens =     58", "#gen tokens =     5x", "not a count"),
    ("#calls(b,g,a) =    1     15     15", "#calls(b,g,a) =    1     15", "not three counts"),
    ("(0.933, 0.933, 0.867, 0.867)", "(0.933, 0.933, 0.867, 0.867, 0.867)", "5 positions with a draft length of 4"),
    ("(0.933, 0.933, 0.867, 0.867)", "(0.933, 0.867, 0.933, 0.867)", "grow with the position"),
    ("(0.933, 0.933, 0.867, 0.867)", "(0.933, 0.933, 0.867, 0.800)", "disagrees with the counts"),
    ("(0.933, 0.933, 0.867, 0.867)", "(0.933, 0.933, 0.867, 1.5)", "outside 0..1"),
    ("(0.933, 0.933, 0.867, 0.867)", "(0.933, 0.933, 0.867, 0.862)", "not a count over the rounds"),
])
def test_bad_statistics_are_refused_with_a_reason(old: str, new: str, why: str) -> None:
    stats = parse.parse_speculative(_edit(log("q4_1", 4), old, new))
    by = positions(stats)
    assert by.drafted is None and by.accepted is None and why in (by.note or ""), by.note
    assert stats.n_accept == 54  # the run keeps its other figures


def test_rates_over_a_thousand_rounds_are_not_turned_into_counts() -> None:
    line = ("statistics draft-simple: #calls(b,g,a) = 1 1500 1500, #gen drafts = 1500, #acc drafts = 1200, "
            "#gen tokens = 6000, #acc tokens = 2400, #mean acc len = 2.60, #acc rate/pos = (0.800, 0.800)")
    text = _edit(log("q4_1", 4), next(ln for ln in log("q4_1", 4).splitlines() if "statistics" in ln), line)
    assert "no longer give exact counts" in (positions(parse.parse_speculative(text)).note or "")


# --- the rule for drafted counts ----------------------------------------------------------------------


def test_full_rounds_give_every_position() -> None:
    assert by_position((10, 8, 5), 10, 40, 4) == Positions((10, 10, 10, 10), (10, 8, 5, 0))


def test_short_rounds_keep_only_the_certain_positions() -> None:
    # 3 tokens short in 10 rounds: without knowing that the short rounds shrink, positions 1..1 only
    plain = by_position((10, 8, 5), 10, 37, 4)
    assert plain.drafted == (10,) and "positions 2..4 left out" in (plain.note or "")
    # shrinking rounds: one of length 1, or two of 3 and 2 (the first accepting 3 - 2 - 1 = 0)
    assert by_position((8, 6, 3), 10, 37, 4, shrinking=True).drafted == (10,)  # two rounds accepted 0: both fit
    none_zero = by_position((10, 9, 5), 10, 37, 4, shrinking=True)  # no round accepted 0: only the one of 1
    assert none_zero == Positions((10, 9, 9, 9), (10, 9, 5, 0))
    # a count the cut rounds make impossible (10 accepted through position 2, which only 9 drafted)
    assert "more accepted (10) than drafted (9) at position 2" in (by_position((10, 10, 5), 10, 37, 4, True).note or "")
    # 1 or 2 tokens short: a single round, whatever was accepted
    assert by_position((10, 8, 5), 10, 38, 4, shrinking=True).drafted == (10, 10, 9, 9)


@pytest.mark.parametrize(("accepted", "rounds", "tokens", "k", "why"), [
    ((5, 4, 3, 2, 1), 5, 20, 4, "5 positions with a draft length of 4"),
    ((3, 4), 5, 20, 4, "grow with the position"),
    ((6,), 5, 20, 4, "more accepted (6) than drafted (5)"),
    ((3,), 5, 21, 4, "21 tokens drafted in 5 rounds of at most 4"),
    ((3,), 5, 4, 4, "no position known for certain"),
])
def test_counts_that_cannot_be_are_refused(accepted, rounds, tokens, k, why) -> None:
    by = by_position(accepted, rounds, tokens, k, shrinking=True)
    assert by.drafted is None and why in (by.note or ""), by.note


# --- llama-server's /metrics -----------------------------------------------------------------------------


def metrics(i: int) -> str:
    return (POS / "server" / f"metrics-{i}.txt").read_text()


def test_recorded_metrics_give_each_requests_positions() -> None:
    assert accepted_per_position(metrics(0)) is None  # no draft verified yet: no series
    total_drafted = total_accepted = 0
    for i in (1, 2, 3):
        # 59 tokens drafted in 8 steps: 5 short. Knowing only that, positions 1..3; with p-min 0 and
        # the request stopped by its n_predict ("limit"), every position (one short step of 3)
        plain = positions_from_metrics(metrics(i - 1), metrics(i), 8)
        assert plain == Positions((8, 8, 8), (8, 8, 8), plain.note) and "4..8 left out" in (plain.note or "")
        by = positions_from_metrics(metrics(i - 1), metrics(i), 8, p_min_zero=True, ran_out=True)
        assert by == Positions((8, 8, 8, 7, 7, 7, 7, 7), (8, 8, 8, 7, 6, 6, 6, 6))
        change = metrics_change(metrics(i - 1), metrics(i))
        assert by.drafted and by.accepted, by.note
        assert by.drafted[0] == change["spec_decode_num_drafts_total"]
        assert contract.check_positions(by.drafted, by.accepted) is None
        if len(by.drafted) == 8:
            assert sum(by.drafted) == change["spec_decode_num_draft_tokens_total"]
            assert sum(by.accepted) == change["spec_decode_num_accepted_tokens_total"]
        total_drafted += by.drafted[0]
        total_accepted += by.accepted[0]
    assert accepted_per_position(metrics(3))[0] == total_accepted
    assert metric_value(metrics(3), "spec_decode_num_drafts_total") == total_drafted


def test_metrics_without_the_series_or_with_bad_counts_are_labelled() -> None:
    older = "\n".join(ln for ln in metrics(1).splitlines() if "per_pos" not in ln)
    assert "from before it" in (positions_from_metrics(metrics(0), older, 8).note or "")
    grown = re.sub(r'(position="7"\} )\d+', r"\g<1>999", metrics(1))
    assert positions_from_metrics(metrics(0), grown, 8).drafted is None
    ninth = metrics(1) + 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="8"} 1\n'
    assert positions_from_metrics(metrics(0), ninth, 8).drafted is None
    assert "went down" in (positions_from_metrics(metrics(2), _first_to_zero(metrics(3)), 8).note or "")
    cut = metrics(1).replace('position="3"', 'position="x"')
    assert "no readable" in (positions_from_metrics(metrics(0), cut, 8).note or "")


def _first_to_zero(text: str) -> str:
    """The same counters with position 1's count at 0 (a restarted server's)."""
    return re.sub(r'(position="0"\} )\d+', r"\g<1>0", text)


# --- transformers: each round's candidates and accepted count -------------------------------------------


def test_rounds_from_the_hook_give_positions() -> None:
    by = positions_from_rounds([(4, 4), (4, 1), (3, 0), (2, 2), (0, 0)])
    assert by == Positions((4, 4, 3, 2), (3, 2, 1, 1))
    assert "more than it drafted" in (positions_from_rounds([(2, 3)]).note or "")
    assert positions_from_rounds([(0, 0)]).drafted is None


# --- stored, summed, shown, plotted ---------------------------------------------------------------------


def measured(drafted: tuple[int, ...] | None, accepted: tuple[int, ...] | None, note: str | None = None) -> Measurement:
    return Measurement(mode="speculative", ok=True, error=None, argv=("x",), exit_code=0, wall_seconds=1.0,
                       peak_rss_bytes=None, decode_tps=10.0, n_drafted=8, n_accept=6, rounds=2,
                       drafted_by_position=drafted, accepted_by_position=accepted, text="t",
                       stats={"by_position": {"note": note}} if note else None)


def test_the_store_keeps_the_counts() -> None:
    store = Store.open()
    run_id = store.start_run(experiment="e", case_name="c", settings={}, provenance={})
    m = measured((9, 9, 8), (9, 7, 7))
    store.add_measurement(MeasurementRow.of(m, run_id=run_id, repeat=0))
    store.add_measurement(MeasurementRow.of(measured(None, None), run_id=run_id, repeat=1))
    back = [measurement_of(r) for r in store.measurements(run_id)]
    assert back[0].drafted_by_position == (9, 9, 8) and back[0].accepted_by_position == (9, 7, 7)
    assert back[0].acceptance_by_position == m.acceptance_by_position
    assert back[1].drafted_by_position is None and back[1].accepted_by_position is None


def test_the_point_sums_counts_and_says_what_it_left_out() -> None:
    a, b = measured((9, 9, 8), (9, 7, 7)), measured((10, 10), (8, 6))
    s = sum_positions([a, b])
    assert s == Positions((19, 19), (17, 13), "positions 3..3 counted in only some runs: left out")
    gap = sum_positions([measured(None, None, "no statistics line (llama-speculative prints none)")])
    assert gap.drafted is None and "llama-speculative prints none" in (gap.note or "")


def test_run_shows_accepted_at_each_position(monkeypatch: pytest.MonkeyPatch) -> None:
    base = replace(measured(None, None), mode="baseline", n_drafted=None, n_accept=None)
    s = summary.summarize([measured((10, 10, 10), (9, 7, 5)), base, measured((10, 10, 10), (10, 8, 6)), base])
    assert s.drafted_by_position == (20, 20, 20) and s.accepted_by_position == (19, 15, 11)
    assert s.positions_text() == "accepted at position 1..3: 95%, 75%, 55% (of 20 drafting rounds)"
    assert summary.Summary.from_dict(s.to_dict()) == s  # stored with the run and read back
    plain = summary.summarize([measured(None, None, "no statistics line (llama-speculative prints none)"), base])
    assert plain.positions_text() == ("acceptance by position: not known (no statistics line "
                                      "(llama-speculative prints none))")
    from llamaspec.measure.contract import ModelPath, ResolvedCase
    from llamaspec.measure.settings import Settings
    from llamaspec.measure.summary import CaseResult
    from llamaspec.views import report

    case = ResolvedCase("e", "c", ModelPath("t:f32", "/t"), ModelPath("d:q4", "/d"), "p", None, Settings().with_defaults())
    text = report.render([CaseResult(run_id=1, case=case, reference=None, measurements=(), summary=s)])
    assert "accepted at position 1..3: 95%, 75%, 55%" in text


def test_plot_draws_one_line_per_point(tmp_path: Path) -> None:
    from llamaspec.views import plot, plotdata

    meta = plotdata.PlotMeta("t", "d", "2 cores", "cpu", "llama.cpp 0c1e570", "e/c")
    lines = [plotdata.PositionLine("draft 4", (0.9, 0.8, None, 0.5), 10), plotdata.PositionLine("draft 8", (0.95,) * 8, 6)]
    paths = plot.plot_acceptance_by_position(lines, meta, tmp_path)
    assert [p.name for p in paths] == ["acceptance_by_position.png", "acceptance_by_position.svg"]
    svg = paths[1].read_text()
    assert "draft 4 (10 rounds)" in svg and "draft 8 (6 rounds)" in svg and "draft position" in svg
    from llamaspec.base.errors import LlamaspecError

    with pytest.raises(LlamaspecError, match="no acceptance by position"):
        plot.plot_acceptance_by_position([plotdata.PositionLine("x", (None,))], meta, tmp_path)
