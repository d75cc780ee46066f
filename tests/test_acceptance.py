"""One unit for acceptance: a fraction in [0, 1], computed once by the contract from the counters,
read as a fraction at the parse boundary, and a percentage only where text is printed."""

from __future__ import annotations

import dataclasses

import pytest

from llamaspec.base import stats
from llamaspec.llamacpp import parse
from llamaspec.measure import contract
from llamaspec.measure.contract import Measurement
from llamaspec.measure.summary import Reference, summarize
from llamaspec.store.rows import MeasurementRow
from llamaspec.views import report


def measured(mode: str, pair: int, drafted: int | None = None, accepted: int | None = None) -> Measurement:
    return Measurement(mode=mode, ok=True, error=None, argv=(), exit_code=0, wall_seconds=1.0, peak_rss_bytes=None,
                       n_predict=64, decode_tps=20.0 if mode == "speculative" else 10.0, n_drafted=drafted,
                       n_accept=accepted, rounds=20 if drafted else None, tokens=tuple(range(64)), pair=pair)


def test_the_contract_owns_acceptance_and_no_engine_fills_a_field_of_it() -> None:
    names = {f.name for f in dataclasses.fields(Measurement)}
    assert "accept" not in names and "acceptance" not in names  # derived, never filled by an engine
    assert measured("speculative", 0, 80, 60).acceptance == contract.acceptance(60, 80) == 0.75
    assert measured("speculative", 0, 0, 0).acceptance is None  # nothing drafted: no acceptance
    assert measured("baseline", 0).acceptance is None
    # the store's column keeps the same figure, for queries of the store
    m = measured("speculative", 0, 80, 60)
    assert MeasurementRow.of(m, run_id=1).acceptance == m.acceptance == 0.75


def test_a_summary_spreads_the_fractions_of_its_speculative_runs() -> None:
    s = summarize([measured("baseline", 0), measured("speculative", 0, 80, 60),
                   measured("speculative", 1, 80, 40), measured("baseline", 1)])
    assert s.acceptance is not None and s.acceptance.values == (0.75, 0.5) and s.acceptance.median == 0.625
    assert s.to_dict()["acceptance"]["median"] == 0.625 and "accept" not in s.to_dict()


@pytest.mark.parametrize("printed, fraction", [("61.514", 0.61514), ("100.000", 1.0), ("0.000", 0.0),
                                               ("50.893", 0.50893), ("-nan", None), ("nan", None)])
def test_the_printed_percentage_is_read_as_a_fraction_at_the_parse_boundary(printed: str, fraction: float | None) -> None:
    text = (f"encoded   12 tokens in    0.247 seconds, speed:   48.638 t/s\n"
            f"decoded  265 tokens in    7.909 seconds, speed:   33.507 t/s\n\n"
            f"n_draft   = 16\nn_predict = 265\nn_drafted = 317\nn_accept  = 195\naccept    = {printed}%\n")
    s = parse.parse_speculative("", text)
    assert s.acceptance == fraction  # decimal division: "61.514" is 0.61514 exactly as written
    assert s.to_dict()["acceptance"] == fraction and "accept" not in s.to_dict()


def test_a_fraction_prints_as_the_percentage_it_came_from() -> None:
    assert f"{100 * 0.4085:.1f}" == "40.8" and f"{0.4085:.1%}" == "40.8%"  # what a bare product or :% would print
    assert f"{stats.percent(0.4085):.1f}" == "40.9" and stats.percent(0.61514) == 61.514
    # one way to show a percentage: a figure and a spread of figures round alike
    assert stats.percent_text(0.4085, 1) == "40.9%" and stats.percent_text(0.125) == "12%"
    assert stats.percent_text(-0.034, 1, sign=True) == "-3.4%" and stats.percent_text(0.05, sign=True) == "+5%"
    assert stats.percent_text(None) == "-"
    spread = stats.spread([0.4085, 0.41, 0.40514])
    assert spread is not None and spread.percent_text(1) == "40.9% [40.5-41.0]"
    one = stats.spread([0.4085])
    assert one is not None and one.percent_text(1) == stats.percent_text(0.4085, 1)


def test_every_percentage_shown_goes_through_stats_percent_text() -> None:
    """No module formats a percentage itself: a `{x:.1%}` rounds 40.85 down, a bare `100 *` too."""
    import re
    from pathlib import Path

    import llamaspec

    own = re.compile(r"\{[^{}]*:[+]?\.\d%\}|\{100 \*|\* 100[:}]|percent\([^{}]*\):[^{}]*\}%")
    found = [f"{p.name}:{i}" for p in Path(llamaspec.__file__).parent.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if own.search(line)]
    assert found == []


def test_the_report_compares_the_write_up_s_percentage_with_a_fraction_like_with_like() -> None:
    s = summarize([measured("baseline", 0), measured("speculative", 0, 317, 195)])
    ref = Reference(acceptance=0.61514)
    (row,) = [r for r in report.rows(s, ref) if r[0] == "acceptance"]
    assert row == ("acceptance", "61.514%", "61.514%", "1.00x")  # measured and reported, both in percent
    # a run stored before the reference kept a fraction says accept_pct (a percentage): read as one
    assert Reference.from_dict({"source": "w", "accept_pct": 61.514}) == Reference(source="w", acceptance=0.61514)
    assert report.rows(s, Reference())[4][3] == ""  # nothing reported: no ratio
