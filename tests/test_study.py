"""The workload study (llamaspec.studies.study, llamaspec.decision.workload, the workload estimator) on an in-process
engine whose speed depends on the prompt and the setup it is asked for: one decision over the
workload's prompts and every setup (draft lengths, draft-free modes, the target alone), the same
rule per category, the budget for the whole study, failures and resumes."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest
from fakes import WorkloadEngine

from llamaspec.base import stats
from llamaspec.base.errors import LlamaspecError
from llamaspec.decision import workload
from llamaspec.measure import estimators
from llamaspec.measure.settings import Settings
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Store
from llamaspec.studies import experiment, study
from llamaspec.studies.budget import Budget
from llamaspec.studies.experiment import Case, ModelRef

PROMPTS = {"code": "code", "chat": "chat", "reasoning": "reasoning", "summarization": "summarization"}
LENGTHS = {"draft_max": (1, 2, 3, 4, 6, 8, 12, 16)}
NOISE = (1.0, 0.97, 1.03, 0.98, 1.02)  # a machine whose speed wobbles by a few per cent


def workload_exp(repeats: int = 3, prompts: dict[str, str] = PROMPTS) -> experiment.Experiment:
    """A workload of one prompt per category (the shape the built-in set had at first), the offline pair's models."""
    settings = Settings(n_predict=64, threads=1)
    target, draft = ModelRef("smollm2-135m", "f32"), ModelRef("smollm2-135m", "q4_1")
    cases = tuple(Case(name, target, draft, f"prompt for {name}", None, settings, category=cat)
                  for name, cat in prompts.items())
    return experiment.Experiment("wl", "a workload", "llama.cpp", repeats, cases, settings=settings)


def true_workload(engine: WorkloadEngine, setup: str | int, prompts=PROMPTS) -> float:
    return math.exp(statistics.fmean(math.log(engine.speedup_for(p, setup)) for p in prompts))


def key_of(result: study.StudyResult, label: str) -> str:
    return next(s.setup for s in result.decision.setups if s.label == label)  # type: ignore[return-value]


# --- the estimator ----------------------------------------------------------------------------------

def test_the_workload_estimate_is_the_geometric_mean_of_the_prompts_medians() -> None:
    got = estimators.workload([[2.0, 2.2, 1.8], [0.5, 0.55, 0.45]], noise=None)
    assert got is not None and got.median == pytest.approx(1.0)  # 2x on one prompt and 0.5x on another: no gain
    assert got.low < 1.0 < got.high and got.n == 6
    assert got.values == (2.0, 0.5)
    again = estimators.workload([[2.0, 2.2, 1.8], [0.5, 0.55, 0.45]], noise=None)
    assert (again.low, again.high) == (got.low, got.high)  # seeded


def test_a_prompt_measured_once_has_no_interval_without_the_studys_noise() -> None:
    alone = estimators.workload([[1.3], [1.2]], noise=None)
    assert alone is not None and alone.n == 1 and alone.low == alone.high == alone.median  # never "shown faster"
    spread = estimators.workload([[1.3], [1.2]], noise=0.05)
    assert spread is not None and spread.n == 2 and spread.low < spread.median < spread.high
    wider = estimators.workload([[1.3], [1.2]], noise=0.10)
    assert wider is not None and wider.high - wider.low > spread.high - spread.low


def test_the_pooled_noise_weighs_each_sample_by_its_pairs() -> None:
    assert estimators.pooled_log_sd([[1.0], [2.0]]) is None
    one = [1.0, 1.1, 0.9]
    assert estimators.pooled_log_sd([one, [5.0]]) == pytest.approx(statistics.stdev(math.log(v) for v in one))


def test_the_interval_resamples_within_prompts_not_over_them() -> None:
    """Two prompts far apart but each measured steadily: the workload is those two prompts, so the
    interval is narrow; resampling over prompts would make it span 0.6x..1.7x."""
    got = estimators.workload([[1.70, 1.71, 1.69, 1.70], [0.60, 0.61, 0.59, 0.60]], noise=None)
    assert got is not None and got.high / got.low < 1.03


def test_over_prompts_the_interval_is_over_prompts_and_widens_for_few() -> None:
    """The same two far-apart prompts: as the whole workload the interval is narrow (their pairs are
    steady); as a sample of a category's prompts it spans their difference, and more prompts of the
    same spread narrow it. One prompt in all is unknown."""
    steady = [[1.70, 1.71, 1.69, 1.70], [0.60, 0.61, 0.59, 0.60]]
    whole = estimators.workload(steady, noise=None)
    sample = estimators.over_prompts({"code": steady})
    assert whole is not None and sample is not None and sample.median == pytest.approx(whole.median)
    assert whole.high / whole.low < 1.03 and sample.low < 0.7 and sample.high > 1.4 and sample.n == 2
    more = estimators.over_prompts({"code": steady * 4})
    assert more is not None and more.high / more.low < sample.high / sample.low
    alone = estimators.over_prompts({"code": [[1.3, 1.31]]}, prompt_noise=0.05)
    assert alone is not None and alone.n == 1 and alone.low == alone.high


def test_over_prompts_degrees_of_freedom_come_from_prompts_not_categories(monkeypatch) -> None:
    """Four prompts in three categories (code 1.2x and 1.25x, chat 1.0x, math 1.1x), the categories
    equal: the estimate is the mean of the categories' mean logs, 1.1045x; the spread of all four
    log speedups, 0.0990, at three degrees of freedom (t 3.182, not 12.706 at the one degree the
    categories of two prompts would give); the standard error 0.0990 x sqrt((1/2 + 1 + 1) / 9):
    +-0.1661 on the log scale, [0.935-1.304] (the prior aside: its own test below)."""
    monkeypatch.setattr(estimators, "PRIOR_PROMPTS", 0)
    got = estimators.over_prompts({"code": [[1.2], [1.25]], "chat": [[1.0]], "math": [[1.1]]})
    assert got is not None and got.n == 4
    assert got.median == pytest.approx(1.10445, abs=1e-4)
    assert math.log(got.median / got.low) == pytest.approx(0.16609, abs=1e-4)
    assert math.log(got.high / got.median) == pytest.approx(0.16609, abs=1e-4)
    assert (round(got.low, 3), round(got.high, 3)) == (0.935, 1.304)


def test_prompts_that_happen_to_agree_do_not_make_their_interval_narrow(monkeypatch) -> None:
    """Five prompts that agree to a few percent (a right-skewed mode's sample that missed its high
    prompts): alone they claim the speedup to a few percent; with the study's between-prompt noise
    of 0.3 the spread is taken as that (the interval 0.3/own-spread times wider on the log scale),
    and a noise below their own spread changes nothing (the floor alone: the prior aside)."""
    monkeypatch.setattr(estimators, "PRIOR_PROMPTS", 0)
    ratios = {"summarization": [[1.02], [1.04]], "code": [[0.98], [1.0], [1.01]]}
    own = estimators.over_prompts(ratios)
    floored = estimators.over_prompts(ratios, prompt_noise=0.3)
    small = estimators.over_prompts(ratios, prompt_noise=0.001)
    assert own is not None and floored is not None and small is not None
    found = estimators.prompt_spread({c: [math.log(r[0]) for r in rs] for c, rs in ratios.items()})
    assert found is not None
    sd = found[0]
    assert floored.median == pytest.approx(own.median)
    assert math.log(floored.high / floored.median) == pytest.approx(math.log(own.high / own.median) * 0.3 / sd)
    assert (small.low, small.high) == (own.low, own.high)


def test_prompts_that_agree_are_drawn_towards_the_recorded_spread() -> None:
    """A dozen prompts that agree to a few percent (an n-gram mode's sample that missed the prompts
    where it gains 1.6-3x) get the pooled spread of theirs and the prior's, as PRIOR_PROMPTS more
    prompts; the prior's weight fades as the prompts grow, and prompts that spread more than the
    prior keep their own interval."""
    def half(values: list[float]) -> float:
        got = estimators.over_prompts({"chat": [[v] for v in values]})
        assert got is not None
        return math.log(got.high / got.median)

    tight = [1.08, 1.1, 1.12, 1.09, 1.11, 1.1, 1.07, 1.13, 1.1, 1.09, 1.11, 1.1]
    logs = [math.log(v) for v in tight]
    own = statistics.stdev(logs)
    dof, k = len(tight) - 1, estimators.PRIOR_PROMPTS
    pooled = math.sqrt((dof * own ** 2 + k * estimators.PRIOR_SPREAD ** 2) / (dof + k))
    assert half(tight) == pytest.approx(stats.t975(dof) * pooled / math.sqrt(len(tight)))
    assert half(tight) > 3 * stats.t975(dof) * own / math.sqrt(len(tight))
    # four times the prompts: the prior counts less, the interval narrows faster than 1/sqrt(n)
    assert half(tight * 4) < half(tight) / 2
    # prompts that spread more than the prior: their own spread, untouched
    wide = [0.8, 1.6, 0.9, 1.5, 1.0, 2.0, 0.85, 1.3, 0.95, 1.7, 1.1, 0.9]
    wlogs = [math.log(v) for v in wide]
    assert statistics.stdev(wlogs) > estimators.PRIOR_SPREAD
    assert half(wide) == pytest.approx(stats.t975(len(wide) - 1) * statistics.stdev(wlogs) / math.sqrt(len(wide)))


def test_the_spread_is_within_categories_only_where_they_are_shown_to_differ() -> None:
    """Code at 1.8x and chat at 0.7x, two prompts each a few percent apart: the categories differ
    (F far past 10), so the spread is within them (0.0273 at two degrees of freedom), not the 0.55
    about the mean of all four that would count their difference as noise; prompts that do not
    differ by category keep the spread over all of them at the prompts less one."""
    apart = {"code": [math.log(1.8), math.log(1.85)], "chat": [math.log(0.7), math.log(0.68)]}
    sd, dof = estimators.prompt_spread(apart) or (0.0, 0)
    assert dof == 2 and sd == pytest.approx(math.sqrt((0.5 * math.log(1.85 / 1.8) ** 2 + 0.5 * math.log(0.7 / 0.68) ** 2) / 2))
    mixed = {"code": [0.0, 0.2], "chat": [0.1, 0.05]}
    assert estimators.prompt_spread(mixed) == (pytest.approx(statistics.stdev([0.0, 0.2, 0.1, 0.05])), 3)


def test_between_prompts_is_the_largest_spread_of_a_setup_over_three_prompts_or_more() -> None:
    """Three setups' log speedups: spreads 0.1 (three prompts), 0.354 (two: left out while another
    has three) and 0.3 (three): the study's between-prompt noise is 0.3; with two prompts at most,
    the largest of those; with fewer, unknown."""
    assert estimators.between_prompts([{"a": [0.0, 0.1, 0.2]}, {"a": [0.0, 0.5]}, {"a": [0.0, 0.3, 0.6]}]) == pytest.approx(0.3)
    assert estimators.between_prompts([{"a": [0.0, 0.5]}, {"b": [0.1, 0.2]}]) == pytest.approx(0.5 / math.sqrt(2))
    assert estimators.between_prompts([{"a": [0.1]}, {}]) is None


# --- the decision over cells ---------------------------------------------------------------------------

def cell(prompt: str, setup: str, ratios: tuple[float, ...], status: str = "ok", probed: bool = True) -> workload.Cell:
    return workload.Cell(prompt, setup, setup, ratios, (1.0, float(len(setup))), status, probed=probed)


def test_one_near_tie_rule_a_divergence_is_the_prompts_a_wrong_output_the_setups() -> None:
    """Over prompts, draft 4 at a greedy near-tie the probe found on b (kept as OK by the run)
    leaves b out, as an unprobed difference does, and draft 4 stays; draft 2's difference the
    probe read as no near-tie (on b and c, at one place) excludes draft 2 and leaves no prompt
    out. As the whole workload draft 4 is kept and said, draft 2 still excluded."""
    prompts = {"a": "code", "b": "code", "c": "chat", "d": "chat"}
    cells = [cell(p, k, (1.4, 1.41, 1.39)) for p in prompts for k in ("draft 8", "draft 4", "draft 2")]
    cells = [dataclasses.replace(c, near_tie="b at token 3 (top-two gap 3.0e-03)") if (c.prompt, c.setup) == ("b", "draft 4")
             else dataclasses.replace(c, status="differs", probed=True, differs_at=40) if c.prompt in "bc" and c.setup == "draft 2"
             else c for c in cells]
    over = workload.decide_workload(cells, prompts)
    assert [(f.prompt, f.why) for f in over.left_out] == [("b", "diverges")], over.lines()
    assert "at a greedy near-tie (b at token 3" in (over.left_out[0].left_out or "")
    by = {s.label: s for s in over.setups}
    assert by["draft 4"].excluded is None and not by["draft 4"].near_ties and by["draft 4"].prompts == 3
    assert by["draft 2"].excluded == "output differs on c", by["draft 2"]
    whole = workload.decide_workload(cells, prompts, over_prompts=False)
    assert not whole.left_out
    by = {s.label: s for s in whole.setups}
    assert by["draft 4"].excluded is None and by["draft 4"].near_ties == ("b at token 3 (top-two gap 3.0e-03)",)
    assert by["draft 2"].excluded == "output differs on b, c"


def test_a_setup_needs_every_prompt_and_an_unchanged_output_everywhere(monkeypatch) -> None:
    """As the whole workload a setup needs every prompt; over prompts two prompts of two categories
    speak for other prompts at one degree of freedom: an interval that spans 1.0 (Student's t of
    12.7), read as a chance of a loss of about 5 % (their own spread: the prior aside)."""
    monkeypatch.setattr(estimators, "PRIOR_PROMPTS", 0)
    cells = [cell("a", "draft 8", (1.5, 1.52, 1.48)), cell("b", "draft 8", (1.4, 1.41, 1.39)),
             cell("a", "draft 4", (1.9, 1.9, 1.9)),  # not measured on b: no workload estimate yet
             cell("a", "draft 2", (1.3, 1.3, 1.3)), cell("b", "draft 2", (1.3, 1.3, 1.3), status="differs")]
    d = workload.decide_workload(cells, {"a": "code", "b": "chat"}, over_prompts=False)  # the two are the workload
    by = {s.label: s for s in d.setups}
    assert by["draft 4"].speedup is None and by["draft 4"].excluded is None
    assert by["draft 2"].speedup is None and "output differs on b" in (by["draft 2"].excluded or "")
    assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == "draft 8"
    assert any("excluded: draft 2: output differs on b" in line for line in d.lines())
    # over prompts, a difference no probe could read (no token probabilities) is the prompt's: it is left out
    unread = [*cells[:-1], cell("b", "draft 2", (1.3, 1.3, 1.3), status="differs", probed=False)]
    left = workload.decide_workload(unread, {"a": "code", "b": "chat"})
    assert [f.prompt for f in left.left_out] == ["b"]
    assert "cannot tell a greedy near-tie from a wrong output" in (left.left_out[0].left_out or "")
    assert all(s.excluded is None for s in left.setups)
    over = workload.decide_workload(cells, {"a": "code", "b": "chat"})
    sp = next(s.speedup for s in over.setups if s.setup == "draft 8")
    assert sp is not None and sp.n == 2 and sp.low < 1.0 < sp.high
    assert over.chosen is not None and 0.04 < (over.decision.chance_of_loss or 0) < 0.06


def test_categories_that_disagree_are_each_said() -> None:
    """As the whole workload (--whole-workload), a category's verdict speaks for its own prompts,
    one prompt included (said)."""
    cells = [cell("code", "draft 8", (1.8, 1.82, 1.79, 1.81, 1.8)), cell("chat", "draft 8", (0.8, 0.81, 0.79, 0.8, 0.8)),
             cell("code", "ngram", (1.02, 1.0, 1.01, 1.0, 1.02)), cell("chat", "ngram", (1.0, 0.99, 1.0, 1.0, 0.99))]
    d = workload.decide_workload(cells, {"code": "code", "chat": "chat"}, over_prompts=False)
    assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == "draft 8"
    verdicts = {c.category: c.decision.verdict for c in d.categories if c.decision}
    assert verdicts == {"code": "recommend", "chat": "no draft"} and d.categories_disagree
    text = "\n".join(d.lines())
    assert "code: draft 8" in text and "chat: no draft" in text and "one prompt" in text
    assert "the whole workload" in text and d.estimator == estimators.WORKLOAD
    chat_gains = [cell("chat", "draft 8", (1.7, 1.71, 1.69, 1.7, 1.7)), cell("chat", "ngram", (1.0, 0.99, 1.0, 1.0, 0.99))]
    same = workload.decide_workload([c for c in cells if c.prompt == "code"] + chat_gains, {"code": "code", "chat": "chat"},
                                    over_prompts=False)
    assert not same.categories_disagree and "every category agrees" in "\n".join(same.lines())


def test_over_prompts_a_category_needs_three_timed_prompts_for_a_verdict() -> None:
    """Over prompts (the default), the categories' prompts are samples: code's three give it a
    verdict, chat's two are labelled and give none; the interval speaks for other prompts."""
    cells = [cell(f"code-{i}", "draft 8", (r, r * 1.01, r * 0.99)) for i, r in enumerate((1.8, 1.7, 1.9))]
    cells += [cell(f"chat-{i}", "draft 8", (r, r * 1.01, r * 0.99)) for i, r in enumerate((1.3, 1.2))]
    prompts = {**{f"code-{i}": "code" for i in range(3)}, **{f"chat-{i}": "chat" for i in range(2)}}
    d = workload.decide_workload(cells, prompts)
    by = {c.category: c for c in d.categories}
    assert by["code"].decision is not None and by["code"].decision.verdict == "recommend"
    assert by["chat"].decision is None and "    chat: 2 timed prompts, no verdict (a category's verdict needs 3)" in d.lines()
    assert d.estimator == estimators.OVER_PROMPTS and "the interval speaks for other prompts of these kinds" in d.lines()[0]
    assert d.chosen is not None and d.chosen.measured.n == 5  # prompts, not pairs
    # the categories weigh alike (three code prompts, two chat): the geometric mean of the two categories' own
    code, chat = (statistics.fmean(math.log(r) for r in rs) for rs in ((1.8, 1.7, 1.9), (1.3, 1.2)))
    assert d.chosen.measured.median == pytest.approx(math.exp((3 * code + 2 * chat) / 5))


def test_prompts_too_short_to_time_or_looping_are_left_out_and_named() -> None:
    """A prompt the target answers in two tokens times one round: out of every decision, named; a
    looping one too, its n-gram gain shown apart; with count_loops it counts."""
    def timed_cell(prompt: str, setup: str, ratios: tuple[float, ...], timed: int = 63, loop: str | None = None):
        return workload.Cell(prompt, setup, setup, ratios, (0.0 if setup == "ngram" else 1.0, 8.0), timed=timed,
                             loop=loop, asked=64)

    prompts = {"a": "code", "b": "code", "c": "code", "short": "code", "loop": "code"}
    cells = [timed_cell(p, "draft 8", (1.3, 1.31, 1.29)) for p in ("a", "b", "c")]
    cells += [timed_cell(p, "ngram", (1.0, 1.01, 0.99)) for p in ("a", "b", "c")]
    cells += [timed_cell("short", "draft 8", (3.0, 3.1, 2.9), timed=1), timed_cell("short", "ngram", (3.0,), timed=1)]
    looping = "loops: 'Portugal e ' x12 to the end (from character 9 of 140)"
    cells += [timed_cell("loop", "draft 8", (1.2, 1.2), loop=looping), timed_cell("loop", "ngram", (2.5, 2.6), loop=looping)]
    d = workload.decide_workload(cells, prompts)
    assert set(d.timed) == {"a", "b", "c"} and d.chosen is not None and d.chosen.label == "draft 8"
    left = {f.prompt: f.left_out for f in d.left_out}
    assert left["short"] == "too short to time: the target alone answers in 2 tokens (1 after the first; fewer than 32)"
    assert left["loop"] == f"its output {looping}"
    text = "\n".join(d.lines())
    assert "left out of the answer (2): short (too short to time" in text
    assert "on the looping prompts (loop), apart from the answer: ngram 2.55x" in text and "--count-loops" in text
    assert [lf.label for lf in d.loops] == ["ngram", "draft 8"]  # the short prompt is not among them
    table = "\n".join(d.table())
    assert "short" in table and "    1 tokens  left out: too short to time" in table
    counted = workload.decide_workload(cells, prompts, count_loops=True)
    assert set(counted.timed) == {"a", "b", "c", "loop"} and not counted.loops
    assert all(c.timed is not None for c in cells) and next(f for f in counted.facts if f.prompt == "loop").loop == looping


def test_a_workload_with_no_timed_prompt_recommends_nothing_and_says_why() -> None:
    from llamaspec.cli.sweep import nothing_to_recommend

    cells = [workload.Cell("q", "draft 8", "draft 8", (1.5,), timed=1, asked=64)]
    d = workload.decide_workload(cells, {"q": "qa"})
    assert d.verdict == "nothing" and d.timed == ()
    why, hint = nothing_to_recommend(d)
    assert why == "nothing to recommend: none of the 1 measured prompts could be timed"
    assert hint.startswith("left out q (too short to time: the target alone answers in 2 tokens")


def test_a_studys_plots_are_named_short_the_workloads_by_path_each_prompts_by_folder(tmp_path) -> None:
    from llamaspec.cli.sweep import plots_text

    folder = tmp_path / "study"
    plots = [folder / "workload.png"] + [folder / p / f"{f}.png" for p in ("a", "b") for f in ("speedup", "acceptance")]
    text = plots_text(plots)
    assert text.splitlines() == ["", f"  plot: {folder / 'workload.png'}",
                                 f"  plots of each measured prompt's draft lengths (acceptance, speedup; 2 prompts): "
                                 f"{folder}/PROMPT/"]
    assert plots_text([]) == "" and plots_text(plots[:1]) == f"\n  plot: {folder / 'workload.png'}"


# --- the study, measured -----------------------------------------------------------------------------

def categories_engine(**kw) -> WorkloadEngine:
    return WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=0.3, positions=True,
                          alphas={"code": 0.95, "summarization": 0.9, "chat": 0.2, "reasoning": 0.3},
                          modes={"ngram-simple": {"code": 1.0, "chat": 0.99, "reasoning": 1.0, "summarization": 1.04}}, **kw)


SAMPLED = {f"{cat}-{i}": cat for cat in ("code", "chat", "reasoning", "summarization") for i in range(1, 5)}
CATEGORY_ALPHA = {"code": 0.95, "summarization": 0.9, "chat": 0.2, "reasoning": 0.3}


def sampled_engine(**kw) -> WorkloadEngine:
    """Four categories of four prompts, each prompt accepting a little differently from its category's own."""
    alphas = {p: CATEGORY_ALPHA[cat] - 0.01 * int(p[-1]) for p, cat in SAMPLED.items()}
    kw = {"drift": 0.0, "noise": NOISE, **kw}
    return WorkloadEngine(draft_cost=0.3, positions=True, alphas=alphas,
                          modes={"ngram-simple": {p: 1.0 + 0.01 * int(p[-1]) for p in SAMPLED}}, **kw)


def test_one_decision_over_the_workload_and_the_categories_under_it(fake_models) -> None:
    engine = sampled_engine()
    store = Store.open()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=150))
    d = result.decision
    assert [p for p, _c in d.prompts] == list(SAMPLED)
    assert result.pairs <= 150 + len(setups) and result.stop in ("settled", "budget", "nothing to measure")
    assert d.chosen is not None  # decided or not, the best measured is named
    chosen = d.chosen.label
    truth = true_workload(engine, chosen if chosen == "ngram-simple" else int(chosen.split()[1]), SAMPLED)
    assert d.verdict != "recommend" or d.chosen.measured.low <= truth <= d.chosen.measured.high
    # the first blocks: the mode and the two longest lengths; nothing else on every prompt
    measured = {s.label for s in d.setups if s.per_prompt}
    assert {"ngram-simple", "draft 16", "draft 12"} <= measured and len(measured) < len(setups)
    assert result.plan is not None and result.plan.startswith("plan: about ")
    text = result.render()
    assert "target alone" in text and estimators.OVER_PROMPTS in text
    assert "tokens  " in text and "drift over the study" in text
    # every cell's ratios are over the baselines of its own blocks: two baselines a block
    blocks = {m["block"] for r in store.runs() for m in store.measurements(r["id"]) if m.get("block")}
    modes = [m for m, _s in engine.calls]
    assert modes.count("baseline") == 2 * len(blocks) + 1  # and one warm-up
    sums = [Summary.from_dict(r["summary"]) for r in store.runs(kind="sweep") if r["status"] == "ok"]
    assert sums and all(x.estimator == estimators.BLOCK and x.speedup is not None and x.pairs == len(x.speedup.values)
                        for x in sums)


def test_each_run_is_over_the_baselines_measured_around_it_whatever_the_schedule(fake_models) -> None:
    """A machine that slows 2 % at every measurement: a ratio over a baseline measured minutes
    earlier would read 10-50 % low. Each run's ratio is over its own block's two baselines, the run
    measured between them, so every ratio is the true speedup within the drift of half a block."""
    engine = sampled_engine(drift=0.02, noise=(1.0,))
    store = Store.open()
    setups = study.setups_for({"draft_max": (8, 16)}, ("ngram-simple",))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=40))
    k = len(setups)
    for s in result.decision.setups:
        for prompt, spread in s.per_prompt:
            if spread is None:
                continue
            truth = engine.speedup_for(prompt, s.label if s.label == "ngram-simple" else int(s.label.split()[1]))
            for ratio in spread.values:
                assert abs(math.log(ratio / truth)) <= (k / 2 + 0.5) * -math.log(1 - 0.02) + 1e-9
    # in the store: each speculative run lies between the two baselines of its block
    rows = [m for r in store.runs() for m in store.measurements(r["id"]) if m.get("block")]
    for block in {m["block"] for m in rows}:
        ids = {m["mode"]: [] for m in rows}
        for m in sorted((m for m in rows if m["block"] == block), key=lambda m: m["id"]):
            ids.setdefault(m["mode"], []).append(m["id"])
        assert len(ids["baseline"]) == 2 and all(ids["baseline"][0] < i < ids["baseline"][1] for i in ids["speculative"])


def test_a_setup_that_trails_on_its_first_prompts_is_measured_no_more(fake_models) -> None:
    """An n-gram mode 20 % slower than the draft on every prompt stops after its first prompts and
    is said; the time goes to more prompts of the others."""
    alphas = {p: 0.6 + 0.1 * (int(p[-1]) - 1) for p in SAMPLED}  # the draft gains 0.96-3.2x: wide over prompts
    engine = WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=0.1, positions=True, alphas=alphas,
                            modes={"ngram-simple": dict.fromkeys(SAMPLED, 0.8)})
    result = study.run_study(workload_exp(prompts=SAMPLED), study.setups_for({"draft_max": (12, 16)}, ("ngram-simple",)),
                             engine, Store.open(), Budget(pairs=30))
    mode = next(s for s in result.decision.setups if s.label == "ngram-simple")
    drafts = next(s for s in result.decision.setups if s.label == "draft 12")
    assert len([p for p, v in mode.per_prompt if v is not None]) == 3
    assert len([p for p, v in drafts.per_prompt if v is not None]) > 3
    assert result.stopped.get("ngram-simple", "").startswith("draft 12 ran ")
    assert "measured no more: ngram-simple: draft 12 ran" in result.render()


@pytest.mark.slow  # a few seconds of fake measuring
def test_the_drift_over_the_study_compares_its_first_prompt_at_its_start_and_end(fake_models, tmp_path) -> None:
    """A machine that slows the two-model run a little more at every measurement: the first prompt's
    setups, measured again at the study's end, read lower than at its start, and the output says by
    how much; a steady one reads within its noise."""
    setups = study.setups_for({"draft_max": (12, 16)})
    worn = study.run_study(workload_exp(prompts=SAMPLED), setups, sampled_engine(spec_drift=0.01),
                           Store.open(tmp_path / "worn.sqlite"), Budget(pairs=20))
    assert worn.drift is not None and worn.drift.change is not None and worn.drift.change < -0.1
    assert worn.drift.cells >= 1 and f"drift over the study: {worn.drift.change:+.1%}" in worn.render()
    steady = study.run_study(workload_exp(prompts=SAMPLED), setups, sampled_engine(noise=(1.0,)),
                             Store.open(tmp_path / "steady.sqlite"), Budget(pairs=20))
    assert steady.drift is not None and steady.drift.change is not None and abs(steady.drift.change) < 0.05
    fixed = study.run_study(workload_exp(prompts=SAMPLED, repeats=2), setups, sampled_engine(spec_drift=0.01),
                            Store.open(tmp_path / "fixed.sqlite"), fixed_grid=True)
    assert fixed.drift is not None and fixed.drift.cells == 2 * len(SAMPLED) and fixed.drift.change is not None


def test_a_load_that_changes_while_it_measures_is_said_and_decides_nothing(fake_models, monkeypatch, tmp_path) -> None:
    """Other processes take 1 % of the CPU during the first half of the study's blocks and 15 % during
    the second: the study says so, and does not decide across the change; a steady 12 % load is
    said as the condition the figures hold for."""
    from llamaspec.base import host

    calls = {"n": 0}

    def load_of(share: float) -> host.NoiseSample:
        calls["n"] += 1
        return host.NoiseSample(seconds=1.0, cpu_seconds=2.0, busy_seconds=1.0 + 2.0 * share, own_seconds=1.0,
                                steal_seconds=0.0)

    engine = WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=0.1, positions=True, alpha=0.9,
                            modes={"ngram-simple": dict.fromkeys(SAMPLED, 1.3)})
    setups = study.setups_for({"draft_max": (12, 16)}, ("ngram-simple",))
    monkeypatch.setattr(host.NoiseMeter, "stop", lambda self: load_of(0.12))
    steady = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, Store.open(tmp_path / "b.sqlite"),
                             Budget(pairs=60))
    assert steady.load is not None and not steady.load.changed
    # the same study, the load changing when it has read the meter half as often as the steady one did
    half, calls["n"] = calls["n"] // 2, 0
    monkeypatch.setattr(host.NoiseMeter, "stop", lambda self: load_of(0.01 if calls["n"] < half else 0.15))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, Store.open(tmp_path / "a.sqlite"),
                             Budget(pairs=60))
    assert result.load is not None and result.load.changed
    assert result.decision.verdict == "undecided" and "the load changed" in result.render()
    assert "load: other processes took 12% of the CPU" in steady.render() and steady.decision.verdict == "recommend"


def test_a_budget_that_times_few_prompts_says_so_up_front(fake_models) -> None:
    """A given budget that times fewer than a handful of prompts is kept, and the plan names the
    minutes that would time enough."""
    engine = sampled_engine()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, Store.open(), Budget(pairs=12))
    plan = result.plan or ""
    assert "too few prompts for an interval over prompts to decide" in plan and "--budget " in plan
    assert result.pairs <= 12 + len(setups)


def test_a_sampled_study_resumes_its_own_prompts_and_measures_nothing_again(fake_models) -> None:
    """A rerun of a study takes the prompts it measured first (the same order), and with its budget
    spent (every run it stored) measures nothing more; a larger budget continues it."""
    engine = sampled_engine(noise=(1.0, 0.8, 1.25, 0.9, 1.15))  # too noisy to settle in 30 runs
    store = Store.open()
    setups = study.setups_for({"draft_max": (8, 12, 16)}, ("ngram-simple",))
    first = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=30))
    assert first.stop == "budget"
    calls = len(engine.calls)
    again = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=first.pairs))
    assert len(engine.calls) == calls and again.pairs == first.pairs
    assert again.decision.timed == first.decision.timed and again.study_id == first.study_id
    more = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=first.pairs + 12))
    assert more.study_id == first.study_id and more.pairs > first.pairs
    assert set(first.decision.timed) <= set(more.decision.timed)


def test_a_prompt_answered_in_a_token_or_two_is_left_out_and_the_study_goes_on(fake_models) -> None:
    """One prompt the model answers in a token or two, one whose output loops: each is left out with
    a line, the next prompt of its category is measured in its place, and the study still answers."""
    engine = sampled_engine(answers={"reasoning-1": 2, "reasoning-2": 2}, loops={"chat-1": "Portugal e "})
    store = Store.open()
    setups = study.setups_for({"draft_max": (8, 12, 16)}, ("ngram-simple",))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=60))
    d = result.decision
    left = {f.prompt: f.left_out or "" for f in d.left_out}
    assert {p for p in left if p.startswith("reasoning-")} <= {"reasoning-1", "reasoning-2"}
    assert all(w.startswith("too short to time") for p, w in left.items() if p.startswith("reasoning"))
    assert left.get("chat-1", "its output loops").startswith("its output loops")
    assert any(SAMPLED[p] == "reasoning" for p in d.timed)  # another reasoning prompt took their place
    assert d.verdict in ("recommend", "no draft", "undecided")
    # a left-out prompt got its one block, no more
    for f in d.left_out:
        assert all(len(v.values) == 1 for s in d.setups for p, v in s.per_prompt if p == f.prompt and v is not None)


def test_a_draft_free_mode_is_the_answer_where_the_draft_does_not_pay(fake_models) -> None:
    engine = WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=1.0, positions=True, alpha=0.7,
                            modes={"ngram-simple": {"code": 1.35, "chat": 1.25, "reasoning": 1.3, "summarization": 1.6}})
    store = Store.open()
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, store, Budget(pairs=80))
    d = result.decision
    assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == "ngram-simple"
    answer = study.deployment(result, engine, workload_exp(), store)
    assert answer is not None and "--draft" not in answer.render()  # no draft model in its command


def test_no_draft_when_nothing_pays_and_its_command_is_the_target_alone(fake_models) -> None:
    engine = WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=1.0, positions=True, alpha=0.5,
                            modes={"ngram-simple": {p: 0.7 for p in PROMPTS}})
    store = Store.open()
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, store, Budget(pairs=60))
    # settled on more than the first prompt: one prompt's figure says nothing of how far the next may lie
    assert result.decision.verdict == "no draft" and len(result.decision.timed) > 1
    answer = study.deployment(result, engine, workload_exp(), store)
    assert answer is not None and not answer.speculative


def test_a_mode_the_program_cannot_run_is_skipped_and_said(fake_models) -> None:
    engine = categories_engine(refuse=("ngram-simple",))
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, Store.open(),
                             Budget(pairs=60))
    assert [w for w, _y in result.skipped] == ["ngram-simple"]
    assert "skipped ngram-simple: this build does not run --spec-type ngram-simple" in result.render()
    assert all(s.label != "ngram-simple" for s in result.decision.setups)


def test_a_setup_that_fails_everywhere_is_excluded_and_the_study_goes_on(fake_models) -> None:
    engine = categories_engine(fails=("ngram-simple",))
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, Store.open(),
                             Budget(pairs=60))
    failed = next(s for s in result.decision.setups if s.label == "ngram-simple")
    assert failed.speedup is None and "failed" in (failed.excluded or "") and "crashed" in (failed.excluded or "")
    assert result.decision.verdict in ("recommend", "undecided", "no draft")
    assert "excluded: ngram-simple" in result.render()


def test_a_budget_of_runs_below_the_first_block_is_refused_naming_the_least(fake_models) -> None:
    engine = categories_engine()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    with pytest.raises(LlamaspecError) as err:
        study.run_study(workload_exp(), setups, engine, Store.open(), Budget(pairs=2))
    assert "first block alone measures 3" in err.value.message and "--budget 3" in (err.value.hint or "")
    assert engine.calls == []  # refused before anything was measured


def test_the_default_budget_grows_to_time_a_handful_of_prompts(
        fake_models, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of 15 s: a first block of 3 setups takes 75 s, a later one about 75 s: the default 4
    minutes time 3 prompts, too few to decide on; the default grows to time 8, says so, and the
    study answers."""
    from dataclasses import replace as replaced

    from llamaspec.base import host

    monkeypatch.setattr(host.NoiseMeter, "stop", lambda self: None)  # no other process measured

    class Slower(WorkloadEngine):
        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            return replaced(super().measure(case, mode, log_path), wall_seconds=15.0)

    engine = Slower(drift=0.0, noise=NOISE, draft_cost=0.3, positions=True, alphas=dict.fromkeys(SAMPLED, 0.8),
                    modes={"ngram-simple": dict.fromkeys(SAMPLED, 1.0)})
    with caplog.at_level("WARNING"):
        result = study.run_study(workload_exp(prompts=SAMPLED), study.setups_for(LENGTHS, ("ngram-simple",)), engine,
                                 Store.open(), clock=lambda: 15.0 * len(engine.calls))
    assert "the default budget grows from 4m00s to 10m00s" in caplog.text
    assert result.plan is not None and "within 600 s" in result.plan and result.decision.verdict is not None
    assert len(result.decision.timed) >= 7


def test_a_rerun_resumes_with_every_block_it_had(fake_models) -> None:
    class Interrupting(WorkloadEngine):
        limit = 1_000_000

        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            if len(self.calls) >= self.limit:
                raise KeyboardInterrupt
            return super().measure(case, mode, log_path)

    engine = Interrupting(drift=0.0, noise=NOISE, draft_cost=0.3, positions=True,
                          alphas={"code": 0.95, "summarization": 0.9, "chat": 0.2, "reasoning": 0.3})
    engine.limit = 14
    store = Store.open()
    setups = study.setups_for(LENGTHS)
    with pytest.raises(KeyboardInterrupt):
        study.run_study(workload_exp(), setups, engine, store, Budget(pairs=60))
    kept = {r["id"]: r for r in store.runs(kind="sweep") if r["status"] == "ok"}
    before = sum(Summary.from_dict(r["summary"]).pairs for r in kept.values())
    assert before >= 2
    engine.limit = 1_000_000
    result = study.run_study(workload_exp(), setups, engine, store, Budget(pairs=60))
    assert set(kept) <= set(result.runs.values())  # the finished cells were resumed, not measured again
    assert all(store.run(r)["status"] in ("ok", "differs") for r in result.runs.values())


def test_the_fixed_grid_measures_every_setup_on_every_prompt(fake_models) -> None:
    engine = categories_engine()
    setups = study.setups_for({"draft_max": (4, 8)}, ("ngram-simple",))
    result = study.run_study(workload_exp(repeats=2), setups, engine, Store.open(), fixed_grid=True)
    assert result.stop == "fixed grid" and result.pairs == 2 * 3 * 4 == result.fixed_grid_pairs
    assert all(s.speedup is not None and s.pairs == 8 for s in result.decision.setups)
    assert [m for m, _s in engine.calls].count("baseline") == 2 * 2 * 4 + 1  # two blocks a prompt, and a warm-up


# --- the plan ------------------------------------------------------------------------------------

def test_trailing_needs_every_shared_prompt_and_the_gap() -> None:
    from llamaspec.studies import policy

    a, b = study.setups_for({"draft_max": (8,)}, ("ngram-simple",))
    def cells(ratios_a, ratios_b):  # type: ignore[no-untyped-def]
        return ([workload.Cell(f"p{i}", a.key, a.label, (r,)) for i, r in enumerate(ratios_a)]
                + [workload.Cell(f"p{i}", b.key, b.label, (r,)) for i, r in enumerate(ratios_b)])
    timed = ["p0", "p1", "p2"]
    assert [s.label for s, _w in policy.trailing(cells((1.2, 1.3, 1.25), (1.0, 1.1, 1.0)), [a, b], timed)] == [b.label]
    assert policy.trailing(cells((1.2, 0.9, 1.25), (1.0, 1.1, 1.0)), [a, b], timed) == []  # a gap that does not hold
    assert policy.trailing(cells((1.2, 1.3), (1.0, 1.1)), [a, b], timed) == []  # two prompts: too few
    assert policy.trailing(cells((1.02, 1.03, 1.02), (1.01, 1.02, 1.01)), [a, b], timed) == []  # within the gap


def test_an_undecided_study_says_the_minutes_that_would_settle_it(fake_models) -> None:
    """Undecided over prompts: the best bet, its chance of a loss, and the prompts its gain needs as
    minutes at this machine's pace (the blocks' own time), with the --budget that continues the study."""
    from dataclasses import replace as replaced

    class Timed(WorkloadEngine):
        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            return replaced(super().measure(case, mode, log_path), wall_seconds=2.0)

    alphas = {p: 0.35 + 0.1 * (int(p[-1]) - 1) for p in SAMPLED}  # a draft that gains on some prompts, not others
    engine = Timed(drift=0.0, noise=NOISE, draft_cost=0.1, positions=True, alphas=alphas)
    result = study.run_study(workload_exp(prompts=SAMPLED), study.setups_for({"draft_max": (8, 16)}), engine,
                             Store.open(), Budget(pairs=8))
    assert result.decision.verdict == "undecided", result.render()
    more, minutes = result.settle_minutes() or (0, 0)
    assert more > 0 and minutes == math.ceil(more * (result.block_seconds or 0) / 60) >= 1
    text = result.render()
    assert f"to settle: about {more} more prompts, about {minutes} min" in text and f"--budget {minutes}m" in text
    assert "best bet: draft " in text and "a loss on prompts like these with a chance of" in text
    assert result.as_dict()["to_settle"] == {"prompts": more, "minutes": minutes}


def test_a_failed_setup_is_failed_in_the_stored_decision_and_not_measured_again_on_a_resume(fake_models) -> None:
    """A setup's failure is read from its stored run, not held in memory: the decision made again from
    the stored points (a cluster coordinator's) says it failed, as the study did, and a rerun that
    continues the study does not measure it again."""
    engine = categories_engine(fails=("ngram-simple",))
    store = Store.open()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    first = study.run_study(workload_exp(), setups, engine, store, Budget(pairs=20))
    said = next(s for s in first.decision.setups if s.label == "ngram-simple").excluded or ""
    assert said.startswith("failed") and "crashed" in said
    from llamaspec.studies.state import Load

    again = study.stored_decision(workload_exp(), setups, store, first.study_id, Load(()))
    assert next(s for s in again.setups if s.label == "ngram-simple").excluded == said
    failures = len(store.runs(kind="sweep", status="failed"))
    more = study.run_study(workload_exp(), setups, engine, store, Budget(pairs=first.pairs + 12))
    assert more.pairs > first.pairs and len(store.runs(kind="sweep", status="failed")) == failures
    assert next(s for s in more.decision.setups if s.label == "ngram-simple").excluded == said


def test_the_answer_asks_for_no_more_of_a_setup_the_study_stopped(fake_models) -> None:
    """draft 16 trails draft 12 and is measured no more: the study's answer asks for no more of it
    (it says why it stopped instead), and the decision made again from the stored points with the
    setups the study stored as stopped (a cluster coordinator's) asks the same; without them it
    would ask for draft 16."""
    from llamaspec.studies.state import Load

    alphas = {p: 0.6 + 0.1 * (int(p[-1]) - 1) for p in SAMPLED}
    engine = WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=0.1, positions=True, alphas=alphas,
                            modes={"ngram-simple": dict.fromkeys(SAMPLED, 0.97)})
    store = Store.open()
    setups = study.setups_for({"draft_max": (12, 16)}, ("ngram-simple",))
    study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=30))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=60))  # continued
    stored = result.as_dict()["stopped"]
    assert "draft 16" in stored and stored == dict(result.stopped)
    asked = {r.label for r in result.decision.decision.requests}
    assert asked and "draft 16" not in asked
    assert "draft 16:" not in result.decision.decision.sureness
    again = study.stored_decision(workload_exp(prompts=SAMPLED), setups, store, result.study_id, Load(()), stopped=stored)
    assert again.decision.requests == result.decision.decision.requests
    raw = study.stored_decision(workload_exp(prompts=SAMPLED), setups, store, result.study_id, Load(()))
    assert "draft 16" in {r.label for r in raw.decision.requests}  # what the stored stopped setups take out
