"""llamaspec watch: windows of a running llama-server's counters (on its recorded /metrics), the
prediction and its verdict (on counts and costs given here, never on this machine's speed), the
live loop against a fake llama-server whose counters advance as a scripted load proceeds, and
each bad input. The real server is in test_watch_llamacpp.py."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fakes import FakeLlamaServer, Served

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.decision import decide
from llamaspec.llamacpp import live
from llamaspec.measure import spectypes
from llamaspec.registry.engines import round_profile
from llamaspec.store.results import Store
from llamaspec.store.rows import Group
from llamaspec.theory import CostModel
from llamaspec.watch import Watcher, costs, forecast, report, serving, window

REC = Path(__file__).resolve().parent / "fixtures" / "llamacpp" / "0c1e570" / "watch"
SWEEP = Path(__file__).resolve().parent / "fixtures" / "llamacpp" / "0c1e570" / "sweep-server" / "q4_1" / "sweep.json"
SERVER = round_profile("llama-server")


def reading(case: str, i: int, at: float | None = None) -> live.Reading:
    props = live.read_props(json.loads((REC / case / "props.json").read_text()))
    slots = live.read_slots(json.loads((REC / case / f"slots-{min(i, 1)}.json").read_text()))
    m = live.read_metrics((REC / case / f"metrics-{i}.txt").read_text())
    assert props is not None and m is not None
    return live.Reading(float(i) if at is None else at, m, props, slots)


def recorded_window(case: str = "draft", n: int = 4) -> window.Window:
    tracker = window.Tracker(None)
    for i in range(n + 1):
        assert tracker.add(reading(case, i)) is None
    w = tracker.window()
    assert w is not None
    return w


def costs_ms(c: float = 0.35, per_token: float = 0.1, step: float = 20.0) -> CostModel:
    """Costs in milliseconds: a target step, a draft step c of it, a verification 1 + per_token·k steps."""
    return CostModel(target_ms_per_token=step, draft_ms_per_token=c * step,
                     verify_batches=((1, step), (17, step * (1 + 16 * per_token))), profile=SERVER)


def made_window(by_position: tuple[int, ...], steps: int, *, drafted: int | None = None, tokens: int | None = None,
                requests: int | None = 10, seconds: float = 10.0) -> window.Window:
    accepted = sum(by_position)
    drafted = steps * len(by_position) if drafted is None else drafted
    tokens = steps + accepted + (requests or 0) if tokens is None else tokens
    return window.Window(start=0.0, end=60.0, tokens=tokens, generation_seconds=seconds, prompt_tokens=100, steps=steps,
                         drafted=drafted, accepted=accepted, accepted_by_position=by_position, requests=requests)


# --- windows -----------------------------------------------------------------------------------------

def test_a_window_is_the_difference_of_the_counters() -> None:
    w = recorded_window()
    first, last = reading("draft", 0).metrics, reading("draft", 4).metrics
    assert w.tokens == last.get("tokens_predicted_total") - first.get("tokens_predicted_total") == 109
    assert (w.steps, w.drafted, w.accepted) == (14, 102, 91)
    assert w.accepted_by_position == last.accepted_by_position and w.requests == 4
    assert w.acceptance == pytest.approx(91 / 102) and w.mean_accepted == pytest.approx(91 / 14)
    assert w.tokens_per_step == pytest.approx(1 + 91 / 14)  # llama.cpp's "mean len"
    assert w.by_position == pytest.approx(tuple(a / 14 for a in w.accepted_by_position))
    assert w.rounds == 109 - 91 - 4 and w.plain_steps == w.rounds - 14
    assert w.decode_tps == pytest.approx((109 - 4) / w.generation_seconds)
    middle = window.difference(reading("draft", 1), reading("draft", 3), 2)
    assert middle.tokens == 32 + 13 and middle.requests == 2


def test_a_sliding_window_keeps_the_readings_within_its_span() -> None:
    tracker = window.Tracker(15.0)
    for i in range(5):
        tracker.add(reading("draft", i, at=10.0 * i))
    w = tracker.window()
    assert w is not None and w.start == 20.0 and w.end == 40.0  # the newest reading at or before 40 - 15
    assert w.tokens == window.difference(reading("draft", 2), reading("draft", 4), None).tokens and w.requests == 2


def test_a_counter_going_down_starts_a_new_window_from_the_servers_start() -> None:
    tracker = window.Tracker(None)
    for i in range(4):
        tracker.add(reading("draft", i))
    why = tracker.add(reading("draft", 1, at=9.0))
    assert why is not None and "went down" in why
    w = tracker.window()
    assert w is not None and w.start is None and w.tokens == 32 and w.requests == 1  # the new server's own
    assert window.restarted(reading("draft", 2), reading("draft", 3)) is None


def test_another_model_is_another_server() -> None:
    a, b = reading("draft", 2), reading("draft", 3)
    b = replace(b, props=replace(b.props, model_path="/m/other.gguf"))
    assert "other.gguf" in (window.restarted(a, b) or "")


# --- the prediction ---------------------------------------------------------------------------------

def test_the_prediction_is_the_models_arithmetic_on_the_windows_counts() -> None:
    w = recorded_window()
    cost = costs_ms()
    f = forecast.forecast(w, cost, 8, fit=False, refits=50)
    drafted = forecast.drafted_at(w, 8)
    plain = w.plain_steps / (w.tokens - w.requests)
    for k, p in enumerate(f.lengths, start=1):
        tokens = 1 + sum(w.accepted_by_position[:k]) / w.steps
        assert p.tokens_per_step == pytest.approx(tokens)
        assert p.speedup == pytest.approx(cost.speedup_at(drafted[k - 1], tokens, plain))
        assert p.low <= p.speedup <= p.high
    assert f.acceptance_model == forecast.BY_POSITION and f.verdict in forecast.VERDICTS
    assert f.best == max(range(1, 9), key=lambda k: (f.at(k).speedup, -k))


def test_drafted_tokens_per_step_meet_the_windows_total_at_the_running_length() -> None:
    w = recorded_window()
    d = forecast.drafted_at(w, 8)
    assert d[-1] == pytest.approx(w.drafted / w.steps)
    assert all(b > a for a, b in zip(d, d[1:], strict=False)) and all(d[k] <= k + 1 for k in range(8))
    full = made_window((10, 9, 8, 7), 10)
    assert forecast.drafted_at(full, 4) == [1.0, 2.0, 3.0, 4.0]  # every step drafted every position


def test_the_intervals_come_from_resampling_the_windows_steps() -> None:
    w = recorded_window()
    a = forecast.forecast(w, costs_ms(), 8, refits=80, seed=3)
    b = forecast.forecast(w, costs_ms(), 8, refits=80, seed=3)
    assert a == b  # seeded
    certain = made_window((50, 50, 50), 50)  # every step accepted everything: nothing to resample
    f = forecast.forecast(certain, costs_ms(), 3, refits=40)
    assert all(p.low == p.speedup == p.high for p in f.lengths)
    few = forecast.forecast(made_window((3, 2, 1), 4), costs_ms(), 3, refits=200, fit=False)
    many = forecast.forecast(made_window((300, 200, 100), 400), costs_ms(), 3, refits=200, fit=False)
    assert few.at(3).high - few.at(3).low > many.at(3).high - many.at(3).low  # more steps, a narrower interval


def test_each_verdict_on_counts_and_costs_given() -> None:
    flat = (95, 90, 86, 82, 78, 74, 70, 66)  # acceptance that holds up
    steep = (90, 60, 10, 2, 1, 0, 0, 0)  # acceptance that ends after two positions
    keep = forecast.forecast(made_window(flat, 100), costs_ms(c=0.05, per_token=0.02), 8, fit=False)
    assert (keep.verdict, keep.best) == ("keep", 8) and "the running setting is the one" in keep.reason
    change = forecast.forecast(made_window(steep, 100), costs_ms(c=0.3, per_token=0.1), 8, fit=False)
    assert change.verdict == "change" and change.best in (2, 3) and "faster than the running one" in change.reason
    assert (change.at(change.best).beats_running or 0) >= decide.SWITCH_SHOWN
    never = forecast.forecast(made_window(steep, 100), costs_ms(c=2.0, per_token=0.5), 8, fit=False)
    assert never.verdict == "no draft" and never.at(never.best).high < 1.0
    unsure = forecast.forecast(made_window((2, 1, 0, 0), 3), costs_ms(c=0.4, per_token=0.15), 4, fit=False)
    assert unsure.verdict == "undecided" and unsure.at(unsure.best).low <= 1.0 <= unsure.at(unsure.best).high


def test_the_verdict_is_the_decision_rule() -> None:
    """The rule on predictions made up here (decide.decide over the lengths, then decide.for_running):
    pays or not from the intervals widened by the model's own error, the running length kept where the
    rule picks it, a change only when the resamples show it."""
    from llamaspec.decision.speedup_model import PREDICTION_ERROR

    def verdict(best: float, running: float, shown: float, low: float = 1.1, high: float = 1.5) -> tuple[str, str]:
        lengths = [forecast.LengthForecast(1, 2.0, best, low, high, shown),
                   forecast.LengthForecast(2, 3.0, running, running - 0.05, running + 0.05, None)]
        d = decide.decide([forecast._candidate(p, 2, 100) for p in lengths])
        return decide.for_running(d, 2, {1: shown})

    assert verdict(1.30, 1.20, 0.99)[0] == "change"
    kind, why = verdict(1.30, 1.20, 0.80)
    assert kind == "keep" and "watch longer" in why
    kind, why = verdict(1.10, 1.20, 0.0, low=1.05, high=1.15)
    assert kind == "keep" and "the running setting is the one" in why
    assert verdict(0.90, 0.85, 1.0, low=0.85, high=0.97)[0] == "no draft"
    assert verdict(1.05, 0.95, 1.0, low=0.97, high=1.12)[0] == "undecided"  # spans 1.0
    # below 1.0, but within the model's own error of it: the widened interval reaches past 1.0
    assert 0.98 * (1 + PREDICTION_ERROR) > 1.02 and verdict(0.97, 0.95, 1.0, low=0.96, high=0.98)[0] == "undecided"
    # above 1.0, but within the model's own error of it: not shown faster
    assert verdict(1.03, 1.0, 1.0, low=1.01, high=1.05)[0] == "undecided"


def test_without_the_per_position_series_one_alpha_from_the_mean_length() -> None:
    w = replace(recorded_window(), accepted_by_position=None)
    f = forecast.forecast(w, costs_ms(), 8, refits=50)
    assert f.acceptance_model == forecast.ONE_ALPHA and len(f.lengths) == 8
    assert f.at(7).tokens_per_step < w.tokens_per_step < f.at(8).tokens_per_step  # it drafted 7.3 a step
    assert all(b.tokens_per_step > a.tokens_per_step for a, b in zip(f.lengths, f.lengths[1:], strict=False))


def test_the_windows_measured_speed_sets_one_cost() -> None:
    """Without a target-alone step, the server's loop; with one timed here, the draft's cost: either way
    the model then meets the window's measured decode speed at the running length."""
    w = recorded_window()  # 30.4 t/s a request at draft 8
    loop = forecast.forecast(w, costs_ms(step=10.0), 8, refits=20)
    assert loop.calibrated == "loop" and loop.cost.loop_overhead_ms > 0
    assert loop.predicted_tps(8) == pytest.approx(w.decode_tps, rel=1e-9)
    timed = replace(costs_ms(c=0.3, step=10.0), baseline_step_ms=25.0)
    draft = forecast.forecast(w, timed, 8, refits=20, fit_draft=True)
    assert draft.calibrated == "draft" and draft.cost.timed_cost_ratio == pytest.approx(0.3)
    assert draft.predicted_tps(8) == pytest.approx(w.decode_tps, rel=1e-9)
    assert draft.predicted_tps(None) == pytest.approx(1000 / 25.0)  # the target alone as timed
    assert forecast.forecast(w, timed, 8, refits=20).calibrated == "none"  # a study's fitted costs stand
    assert forecast.calibrate(costs_ms(step=10.0), replace(w, requests=None), 8, 0.0) == (costs_ms(step=10.0), "none")


def test_no_speculative_request_nothing_to_predict() -> None:
    with pytest.raises(LlamaspecError, match="no speculative request"):
        forecast.forecast(made_window((), 0, drafted=0, tokens=40), costs_ms(), 8)


# --- the change --------------------------------------------------------------------------------------

def served(argv: list[str] | None, speculation: str = "draft", k: int = 8) -> serving.Serving:
    return serving.Serving(url="http://127.0.0.1:8080", speculation=speculation, speculation_from="/slots", draft_max=k,
                           draft_max_from="the per-position series", target="/m/t.gguf", draft="/m/d.gguf",
                           target_sha256=None, draft_sha256=None, argv=tuple(argv) if argv else None, threads=1, slots=1,
                           commit="0c1e570")


def test_the_change_is_the_servers_own_command_changed() -> None:
    argv = shlex.split((REC / "draft" / "command.txt").read_text())
    steep = forecast.forecast(made_window((90, 60, 10, 2, 1, 0, 0, 0), 100), costs_ms(c=0.3, per_token=0.1), 8,
                              fit=False)
    c = report.change_for(steep, served(argv))
    assert c.verdict == "change" and c.words.startswith(f"--spec-draft-n-max {steep.best} (in place of 8)")
    assert c.command is not None and f"--spec-draft-n-max {steep.best}" in c.command and "-md" in c.command
    never = forecast.forecast(made_window((90, 60, 10, 2, 1, 0, 0, 0), 100), costs_ms(c=2.0, per_token=0.5), 8,
                              fit=False)
    alone = report.change_for(never, served(argv))
    assert alone.verdict == "no draft" and alone.command is not None and " -md " not in alone.command
    assert report.change_for(never, served(None)).command is None  # a server elsewhere: the words only
    ngram = shlex.split((REC / "ngram" / "command.txt").read_text())
    words = report.change_for(steep, served(ngram, "ngram-simple")).words
    assert words.startswith("--spec-ngram-simple-size-m")


# --- costs --------------------------------------------------------------------------------------------

def test_given_costs() -> None:
    c = costs.given("0.3,0.1")
    assert c.cost.cost_ratio == pytest.approx(0.3) and c.cost.verify_ms(4) / c.cost.target_ms_per_token == pytest.approx(1.4) and not c.absolute
    assert costs.given("0.3", draft_free=True).cost.cost_ratio == 0.0  # an n-gram mode runs no draft model
    for bad in ("x", "-1", "1,2,3", ""):
        with pytest.raises(LlamaspecError, match="--cost"):
            costs.given(bad)


def test_the_costs_of_a_stored_study_of_the_same_files(tmp_path: Path) -> None:
    """The recorded llama-server sweep stored as if measured here: found by the files' sha256 and the
    threads, the draft's cost as the study fitted it."""
    data = json.loads(SWEEP.read_text())
    store = Store.open()
    models = {"target": {"label": "t", "path": "/m/t.gguf", "sha256": "t" * 64},
              "draft": {"label": "d", "path": "/m/d.gguf", "sha256": "d" * 64}}
    for p in data["points"]:
        run = store.start_run(experiment="smollm2-server", case_name="q4_1", settings={**data["settings"], "draft_max": p["draft_max"]},
                              provenance={"models": models, "engine": {"name": "llama-server"}}, group=Group("sweep", "s1"))
        store.finish_run(run, p["status"], summary=p["summary"])
    s = replace(served(None), target_sha256="t" * 64, draft_sha256="d" * 64)
    found = costs.stored(store, s)
    assert found is not None and found.source == "stored" and found.absolute and "stored study s1" in found.label
    assert found.cost.profile is SERVER and found.cost.baseline_step_ms is not None  # its baselines: the same server
    assert costs.stored(store, replace(s, draft_sha256="e" * 64)) is None
    assert costs.stored(store, replace(s, threads=4)) is None
    ngram = costs.stored(store, replace(s, speculation="ngram-simple", draft_sha256=None))
    assert ngram is not None and ngram.cost.cost_ratio == 0.0


def test_timing_the_costs_needs_the_servers_files_here() -> None:
    with pytest.raises(LlamaspecError, match="not readable on this machine"):
        costs.measured(served(None), recorded_window(), Path("/tmp"))


# --- the live loop against a fake server ------------------------------------------------------------

def watcher(url: str, **kwargs: Any) -> Watcher:
    kwargs.setdefault("cost", "0.3,0.05")
    return Watcher(url, refits=30, local_command=lambda _: None, **kwargs)


def run(w: Watcher, samples: int) -> list[report.Report]:
    out: list[report.Report] = []
    w.run(out.append, interval=0, samples=samples, sleep=lambda _: None)
    return out


def test_the_loop_follows_the_load_and_a_restart() -> None:
    a, b, c = Served(), Served(tokens=30, steps=5, accepted_by_position=(5, 5, 5, 4, 3, 1), drafted=38), Served(tokens=27, seconds=0.9)
    with FakeLlamaServer([None, a, b, "restart", c, None]) as fake:
        w = watcher(fake.url, span=None)
        reports = run(w, 6)
        assert fake.reads == 6  # one read of /metrics a reading: the rate gauge is ours
    first, one, two, restart, three, idle = reports
    assert first.window is None or first.window.tokens == 0
    assert (one.window.tokens, one.window.requests, one.window.accepted) == (a.tokens, 1, a.accepted)
    assert two.window.tokens == a.tokens + b.tokens and two.window.requests == 2
    assert two.window.accepted_by_position == tuple(x + y for x, y in zip(a.accepted_by_position, (5, 5, 5, 4, 3, 1, 0, 0),
                                                                          strict=True))
    assert any("restarted" in n for n in restart.notes) and restart.window.tokens == 0
    assert three.window.tokens == c.tokens and three.window.requests == 1 and three.window.start is None
    assert idle.window.tokens == c.tokens
    assert two.forecast is not None and two.forecast.running == 8 and two.change is not None
    assert len(w.stored) == 2  # the window the restart ended, and the last one
    rows = Store.open().windows()
    assert [r["counts"]["tokens"] for r in rows] == [c.tokens, a.tokens + b.tokens]
    assert rows[1]["provenance"]["server"]["url"] == fake.url and rows[1]["costs"]["source"] == "given"
    assert rows[1]["forecast"]["verdict"] in forecast.VERDICTS


def test_a_sliding_window_forgets_old_traffic() -> None:
    clock = iter(range(0, 1000, 10))
    with FakeLlamaServer([None, Served(), Served(), Served(), None]) as fake:
        def read(where: live.Address) -> live.Reading | live.Trouble:  # readings 10 s apart
            got = live.read_server(where)
            return replace(got, at=float(next(clock))) if isinstance(got, live.Reading) else got

        reports = run(watcher(fake.url, span=15.0, read=read), 5)
    assert [r.window.requests for r in reports[1:]] == [1, 2, 2, 1]


def test_another_reader_of_metrics_leaves_the_requests_unknown() -> None:
    other = Served(tokens=30, seconds=0.7, steps=5, accepted_by_position=(5, 5, 5, 4, 3, 1), drafted=38)
    with FakeLlamaServer([None, (Served(), "scrape", other)]) as fake:
        (_, second) = run(watcher(fake.url, span=None), 2)
    assert second.window.tokens == Served().tokens + other.tokens and second.window.requests is None
    assert any("something else reads /metrics" in n for n in second.notes)


def test_a_window_with_no_speculative_request_yet_says_so() -> None:
    with FakeLlamaServer([None, None]) as fake:
        (_, second) = run(watcher(fake.url), 2)
    assert second.forecast is None and any("no speculative request has finished" in n for n in second.notes)


def test_a_server_without_speculation_has_nothing_to_tune() -> None:
    with FakeLlamaServer([None, Served()], speculative=False) as fake:
        (_, second) = run(watcher(fake.url), 2)
    assert second.serving is not None and second.serving.speculation is None and second.forecast is None
    assert second.window.tokens == Served().tokens and any("nothing to tune" in n for n in second.notes)


def test_an_older_server_gives_the_mean_length_only() -> None:
    with FakeLlamaServer([None, Served(), Served()], per_position=False) as fake:
        (*_, last) = run(watcher(fake.url), 3)
    assert last.window.accepted_by_position is None and any("no per-position series" in n for n in last.notes)
    assert last.forecast is None  # the draft length is not known without the series or the command line
    with FakeLlamaServer([None, Served(), Served()], per_position=False) as fake:
        argv = ("llama-server", "-m", "T.gguf", "-md", "D.gguf", "--spec-draft-n-max", "8")
        w = Watcher(fake.url, cost="0.3", refits=20, local_command=lambda _: argv)
        (*_, last) = run(w, 3)
    assert last.forecast is not None and last.forecast.acceptance_model == forecast.ONE_ALPHA
    assert last.serving.draft_max_from == "its command line"


def test_an_ngram_server_costs_no_draft_model() -> None:
    with FakeLlamaServer([None, Served()], spec_types="none,ngram-simple") as fake:
        (_, second) = run(watcher(fake.url, cost="0.4,0.05"), 2)
    assert second.serving.speculation == "ngram-simple" and second.forecast is not None
    assert second.forecast.cost.cost_ratio == 0.0 and "--spec-ngram-simple-size-m" in second.change.words
    assert not any("keeps n-gram state" in n for n in second.notes)  # ngram-simple drafts as a cold study's


def test_a_mode_that_keeps_state_is_read_as_warm_traffic_beside_a_cold_study() -> None:
    """A server running ngram-mod (spectypes.KEEPS_STATE): each reading says its window is warm
    traffic, how a study's figure for the mode was measured (cold unless --warm), and still predicts."""
    with FakeLlamaServer([None, Served()], spec_types="none,ngram-mod") as fake:
        (_, second) = run(watcher(fake.url, cost="0.4,0.05"), 2)
    assert second.serving.speculation == "ngram-mod" and second.forecast is not None
    (said,) = [n for n in second.notes if "keeps n-gram state" in n]
    assert said.startswith("ngram-mod keeps n-gram state between requests: this window is warm traffic")
    assert "a study's figure for ngram-mod is cold (a fresh server per request) unless it was measured with `sweep --warm`" in said
    assert f"note: {said}" in second.lines()


def test_a_server_that_stops_answering_mid_watch_is_one_line_and_the_watch_goes_on() -> None:
    fake = FakeLlamaServer([None, Served()])
    w = watcher(fake.url)
    reports = [w.start(), w.step()]
    fake.close()
    reports.append(w.step())
    assert reports[-1].window is None and len(reports[-1].notes) == 1 and "nothing answers" in reports[-1].notes[0]
    w.finish()
    assert len(w.stored) == 1  # the last window with traffic


# --- the command line ------------------------------------------------------------------------------------

def test_watch_once_json_carries_every_part(tmp_path: Path) -> None:
    model = tmp_path / "t.gguf"
    model.write_bytes(b"GGUF not really")
    with FakeLlamaServer([Served()], model_path=str(model)) as fake:
        result = CliRunner().invoke(main, ["watch", fake.url, "--once", "--json", "--cost", "0.3,0.05",
                                           "--plot-dir", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout.splitlines()[0])
    assert set(data) >= {"url", "server", "window", "costs", "forecast", "change", "notes"}
    assert data["window"]["since_server_start"] and data["window"]["requests"] == 1
    assert data["window"]["accepted_by_position"] == list(Served().accepted_by_position)
    assert data["server"]["models"]["target"]["sha256"] and data["server"]["draft_max"] == 8
    assert [p["draft_max"] for p in data["forecast"]["lengths"]] == list(range(1, 9))
    assert data["forecast"]["verdict"] in forecast.VERDICTS and data["change"]["words"]
    assert (tmp_path / "plots" / "watch.png").is_file()
    (row,) = Store.open().windows()
    assert row["target_sha256"] == data["server"]["models"]["target"]["sha256"]


def test_watch_prints_a_reading_for_people() -> None:
    with FakeLlamaServer([None, Served(), Served()]) as fake:
        result = CliRunner().invoke(main, ["watch", fake.url, "--samples", "3", "--interval", "0.2", "--cost", "0.3",
                                           "--no-store"])
    assert result.exit_code == 0, result.output
    text = result.output
    for part in ("llama-server http://127.0.0.1:", "window (", "accepted through position 1..8", "prediction (",
                 "target alone: 1.00x", "verdict: ", "change: "):
        assert part in text, part
    assert "stored window" not in text


@pytest.mark.parametrize(("fake", "error", "hint"), [
    ({"metrics": False}, "serves no /metrics", "restart it with --metrics"),
    ({"llama": False}, "does not answer as llama-server", "give the address of a llama-server"),
])
def test_bad_servers_are_one_line_with_a_hint(fake: dict[str, Any], error: str, hint: str) -> None:
    with FakeLlamaServer([], **fake) as server:
        result = CliRunner().invoke(main, ["watch", server.url, "--once"])
    assert result.exit_code == 1
    assert "Error: " in result.output and error in result.output and f"Hint: {hint}" in result.output
    assert "Traceback" not in result.output


def test_an_unreachable_url_is_one_line_with_a_hint() -> None:
    from llamaspec.llamacpp.server_process import free_port

    result = CliRunner().invoke(main, ["watch", f"http://127.0.0.1:{free_port()}", "--once"])
    assert result.exit_code == 1 and "Error: nothing answers at" in result.output and "Hint: " in result.output


def test_a_slots_spec_type_is_named_by_the_spec_type_table() -> None:
    """/slots names the speculation by llama.cpp's type; whether it is a draft model's is
    spectypes' rule (one owner), not a prefix test of the watcher's own."""
    recorded = reading("draft", 1)
    for name in ("draft-simple", "draft", "ngram-simple", "ngram-mod", "ngram-cache"):
        slot = live.SlotState(0, True, False, None, (name,))
        assert serving.speculation_of(replace(recorded, slots=(slot,)), None) == (
            serving.DRAFT if spectypes.needs_draft(name) else name, "/slots")
