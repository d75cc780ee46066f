"""The workload study (llamaspec.studies.study, llamaspec.decision.workload, the workload estimator) on an in-process
engine whose speed depends on the prompt and the setup it is asked for: one decision over the
workload's prompts and every setup (draft lengths, draft-free modes, the target alone), the same
rule per category, the budget for the whole study, failures and resumes."""

from __future__ import annotations

import math
import statistics

import pytest
from fakes import WorkloadEngine
from test_core import fake_models  # noqa: F401  (fixture)

from llamaspec.base.errors import LlamaspecError
from llamaspec.decision import workload
from llamaspec.measure import estimators
from llamaspec.measure.settings import Settings
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Store
from llamaspec.studies import experiment, study
from llamaspec.studies.experiment import Case, ModelRef
from llamaspec.studies.sweep import Budget

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


def test_over_prompts_degrees_of_freedom_come_from_prompts_not_categories() -> None:
    """Four prompts in three categories (code 1.2x and 1.25x, chat 1.0x, math 1.1x), the categories
    equal: the estimate is the mean of the categories' mean logs, 1.1045x; the spread of all four
    log speedups, 0.0990, at three degrees of freedom (t 3.182, not 12.706 at the one degree the
    categories of two prompts would give); the standard error 0.0990 x sqrt((1/2 + 1 + 1) / 9):
    +-0.1661 on the log scale, [0.935-1.304]."""
    got = estimators.over_prompts({"code": [[1.2], [1.25]], "chat": [[1.0]], "math": [[1.1]]})
    assert got is not None and got.n == 4
    assert got.median == pytest.approx(1.10445, abs=1e-4)
    assert math.log(got.median / got.low) == pytest.approx(0.16609, abs=1e-4)
    assert math.log(got.high / got.median) == pytest.approx(0.16609, abs=1e-4)
    assert (round(got.low, 3), round(got.high, 3)) == (0.935, 1.304)


def test_prompts_that_happen_to_agree_do_not_make_their_interval_narrow() -> None:
    """Five prompts that agree to a few percent (a right-skewed mode's sample that missed its high
    prompts): alone they claim the speedup to a few percent; with the study's between-prompt noise
    of 0.3 the spread is taken as that (the interval 0.3/own-spread times wider on the log scale),
    and a noise below their own spread changes nothing."""
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

def cell(prompt: str, setup: str, ratios: tuple[float, ...], status: str = "ok") -> workload.Cell:
    return workload.Cell(prompt, setup, setup, ratios, (1.0, float(len(setup))), status)


def test_a_setup_needs_every_prompt_and_an_unchanged_output_everywhere() -> None:
    """As the whole workload a setup needs every prompt; over prompts two prompts of two categories
    speak for other prompts at one degree of freedom: an interval that spans 1.0 (Student's t of
    12.7), read as a chance of a loss of about 5 %."""
    cells = [cell("a", "draft 8", (1.5, 1.52, 1.48)), cell("b", "draft 8", (1.4, 1.41, 1.39)),
             cell("a", "draft 4", (1.9, 1.9, 1.9)),  # not measured on b: no workload estimate yet
             cell("a", "draft 2", (1.3, 1.3, 1.3)), cell("b", "draft 2", (1.3, 1.3, 1.3), status="differs")]
    d = workload.decide_workload(cells, {"a": "code", "b": "chat"}, over_prompts=False)  # the two are the workload
    by = {s.label: s for s in d.setups}
    assert by["draft 4"].speedup is None and by["draft 4"].excluded is None
    assert by["draft 2"].speedup is None and "output differs on b" in (by["draft 2"].excluded or "")
    assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == "draft 8"
    assert any("excluded: draft 2: output differs on b" in line for line in d.lines())
    over = workload.decide_workload(cells, {"a": "code", "b": "chat"})
    sp = over.setup("draft 8").speedup if over.setup("draft 8") else None
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
    assert all(c.timed is not None for c in cells) and counted.fact("loop").loop == looping  # type: ignore[union-attr]


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


def test_allocate_fills_the_missing_prompts_first_then_the_noisiest() -> None:
    assert study.allocate(3, {"a": (1.0, 1.1)}, ["a", "b", "c"], 0.05) == {"b": 1, "c": 1}
    have = {"a": (1.0, 1.01, 0.99), "b": (1.0, 1.3, 0.8)}
    got = study.allocate(4, have, ["a", "b"], 0.05)
    assert got.get("b", 0) > got.get("a", 0) and sum(got.values()) == 4


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
    return WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=0.3, positions=True, alphas=alphas,
                          modes={"ngram-simple": {p: 1.0 + 0.01 * int(p[-1]) for p in SAMPLED}}, **kw)


def test_one_decision_over_the_workload_and_the_categories_under_it(fake_models) -> None:  # noqa: F811
    engine = sampled_engine()
    store = Store.open()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=150))
    d = result.decision
    assert [p for p, _c in d.prompts] == list(SAMPLED)
    assert result.pairs <= 150 and result.stop in ("settled", "budget", "nothing to measure")
    assert d.verdict == "recommend" and d.chosen is not None
    best = max(true_workload(engine, k, SAMPLED) for k in LENGTHS["draft_max"])
    chosen = d.chosen.label
    assert chosen.startswith("draft ") and true_workload(engine, int(chosen.split()[1]), SAMPLED) >= 0.95 * best
    verdicts = {c.category: c.decision.verdict for c in d.categories if c.decision is not None}
    assert verdicts.get("code") == "recommend" and verdicts.get("chat") != "recommend" and d.categories_disagree
    # the first pass: the mode and the two longest lengths on every sampled prompt; nothing else everywhere
    measured = {s.label for s in d.setups if s.speedup is not None}
    assert {"ngram-simple", "draft 16", "draft 12"} <= measured and len(measured) < len(setups)
    # the plan was said before anything but the first pair was measured: N of the 16 prompts
    assert result.plan is not None and result.plan.startswith("plan: all 16 prompts, each with the first pass")
    text = result.render()
    assert "target alone" in text and "by category" in text and estimators.OVER_PROMPTS in text
    assert "tokens  " in text and "drift over the study" in text
    # a prompt's new cells share its first baseline (one to one): fewer baselines than speculative runs;
    # a cell begun on it and given pairs of its own later counts every ratio
    modes = [m for m, _s in engine.calls]
    assert modes.count("baseline") < modes.count("speculative")
    sums = [Summary.from_dict(r["summary"]) for r in store.runs(kind="sweep") if r["status"] == "ok"]
    shared = [x for x in sums if x.estimator == estimators.PARTLY_SHARED]
    assert shared and any(x.pairs > 1 for x in shared)
    assert all(x.speedup is not None and x.pairs == len(x.speedup.values) for x in shared)


@pytest.mark.slow  # a few seconds of fake measuring and plotting
def test_the_drift_over_the_study_compares_each_setups_halves(fake_models, tmp_path) -> None:  # noqa: F811
    """A machine that slows the two-model run a little more at every measurement: the same setups on
    the same prompts read lower in the study's second half than in its first, and the output says
    by how much; a steady one reads within its noise. An adaptive study within a time budget
    measures its first cell again at its end, so it always has one; a pairs budget spent to the
    last pair is never overrun for it."""
    setups = study.setups_for({"draft_max": (12, 16)})
    worn = study.run_study(workload_exp(prompts=SAMPLED), setups, sampled_engine(spec_drift=0.01),
                           Store.open(tmp_path / "worn.sqlite"), fixed_grid=True)
    assert worn.drift is not None and worn.drift.change is not None and worn.drift.change < -0.1
    assert worn.drift.cells == 2 * len(SAMPLED) and f"drift over the study: {worn.drift.change:+.1%}" in worn.render()
    steady = study.run_study(workload_exp(prompts=SAMPLED), setups, sampled_engine(), Store.open(tmp_path / "steady.sqlite"),
                             fixed_grid=True)
    assert steady.drift is not None and steady.drift.change is not None and abs(steady.drift.change) < 0.05
    adaptive = study.run_study(workload_exp(prompts=SAMPLED), setups, sampled_engine(), Store.open(tmp_path / "a.sqlite"),
                               Budget(seconds=5))
    assert adaptive.drift is not None and adaptive.drift.cells >= 1 and adaptive.drift.change is not None
    spent = study.run_study(workload_exp(prompts=SAMPLED), setups, sampled_engine(), Store.open(tmp_path / "p.sqlite"),
                            Budget(pairs=20))
    assert spent.pairs <= 20


def test_a_budget_too_small_for_every_prompt_samples_them_by_category(fake_models) -> None:  # noqa: F811
    """A pairs budget that pays for the first pass on one prompt a category and a little more: the
    study samples a few prompts of each category (said in its plan), never fails for it."""
    engine = sampled_engine()
    store = Store.open()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    result = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=30))
    plan = result.plan or ""
    n = int(plan.split("plan: ")[1].split(" of ")[0])
    assert 4 <= n < 16 and "of 16 prompts (about " in plan
    measured = {f.prompt for f in result.decision.facts if f.measured}
    assert {SAMPLED[p] for p in measured} == set(CATEGORY_ALPHA)  # every category sampled
    assert len(measured) < 16 and result.pairs <= 30 + len(setups)


def test_a_sampled_study_resumes_its_own_prompts_and_measures_nothing_again(fake_models) -> None:  # noqa: F811
    """A rerun of a sampled study takes the prompts it measured first (the same order), plans from
    the pace its stored pairs took, and with its budget spent (every pair it stored) measures nothing
    more."""
    engine = sampled_engine()
    store = Store.open()
    setups = study.setups_for({"draft_max": (8, 12, 16)}, ("ngram-simple",))
    first = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=30))
    calls = len(engine.calls)
    again = study.run_study(workload_exp(prompts=SAMPLED), setups, engine, store, Budget(pairs=first.pairs))
    assert len(engine.calls) == calls and again.pairs == first.pairs
    assert again.decision.timed == first.decision.timed and again.study_id == first.study_id


def test_a_prompt_answered_in_a_token_or_two_is_left_out_and_the_study_goes_on(fake_models) -> None:  # noqa: F811
    """The issue's case: one prompt the model answers in a token or two, one whose output loops;
    each is left out with a line, the next prompt of its category is measured in its place, and
    the study still answers."""
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
    # what a left-out prompt measured is stored, and nothing more than its first pair went to it
    for f in d.left_out:
        assert sum(len(s.per_prompt) and (dict(s.per_prompt).get(f.prompt) is not None) for s in d.setups) <= 1


def test_a_draft_free_mode_is_the_answer_where_the_draft_does_not_pay(fake_models) -> None:  # noqa: F811
    engine = WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=1.0, positions=True, alpha=0.7,
                            modes={"ngram-simple": {"code": 1.35, "chat": 1.25, "reasoning": 1.3, "summarization": 1.6}})
    store = Store.open()
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, store, Budget(pairs=80))
    d = result.decision
    assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == "ngram-simple"
    answer = study.deployment(result, engine, workload_exp(), store)
    assert answer is not None and "--draft" not in answer.render()  # no draft model in its command


def test_no_draft_when_nothing_pays_and_its_command_is_the_target_alone(fake_models) -> None:  # noqa: F811
    engine = WorkloadEngine(drift=0.0, noise=NOISE, draft_cost=1.0, positions=True, alpha=0.5,
                            modes={"ngram-simple": {p: 0.9 for p in PROMPTS}})
    store = Store.open()
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, store, Budget(pairs=60))
    assert result.decision.verdict == "no draft" and result.stop == "settled"
    answer = study.deployment(result, engine, workload_exp(), store)
    assert answer is not None and not answer.speculative


def test_a_mode_the_program_cannot_run_is_skipped_and_said(fake_models) -> None:  # noqa: F811
    engine = categories_engine(refuse=("ngram-simple",))
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, Store.open(),
                             Budget(pairs=60))
    assert [w for w, _y in result.skipped] == ["ngram-simple"]
    assert "skipped ngram-simple: this build does not run --spec-type ngram-simple" in result.render()
    assert all(s.label != "ngram-simple" for s in result.decision.setups)


def test_a_setup_that_fails_everywhere_is_excluded_and_the_study_goes_on(fake_models) -> None:  # noqa: F811
    engine = categories_engine(fails=("ngram-simple",))
    result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, Store.open(),
                             Budget(pairs=60))
    failed = next(s for s in result.decision.setups if s.label == "ngram-simple")
    assert failed.speedup is None and "failed" in (failed.excluded or "") and "crashed" in (failed.excluded or "")
    assert result.decision.verdict in ("recommend", "undecided", "no draft")
    assert "excluded: ngram-simple" in result.render()


def test_a_pairs_budget_below_the_first_pass_is_refused_naming_the_least(fake_models) -> None:  # noqa: F811
    engine = categories_engine()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    with pytest.raises(LlamaspecError) as err:
        study.run_study(workload_exp(), setups, engine, Store.open(), Budget(pairs=5))
    assert "first pass alone measures 12" in err.value.message and "--budget 12" in (err.value.hint or "")
    assert engine.calls == []  # refused before anything was measured


@pytest.mark.parametrize("other_load", [None, 0.6])
def test_a_first_pair_too_slow_for_the_default_budget_is_refused_naming_it_and_the_load(
        fake_models, monkeypatch: pytest.MonkeyPatch, other_load: float | None) -> None:  # noqa: F811
    """Runs of 2.5 minutes each (a busy machine at two threads can make a 2 s run that long): the
    default budget's 4 minutes cannot pay for the first pass (a baseline and 3 setups' runs on a
    prompt of each of 4 categories: 40 minutes), nor the most it grows to (30). The
    error names the default budget (the user gave none) and, where other processes held the CPU
    meanwhile, the load."""
    from dataclasses import replace as replaced

    from llamaspec.base import host

    class Slow(WorkloadEngine):
        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            return replaced(super().measure(case, mode, log_path), wall_seconds=150.0)

    busy = None if other_load is None else host.NoiseSample(seconds=60.0, cpu_seconds=120.0, busy_seconds=120.0 * other_load + 50.0,
                                                            own_seconds=50.0, steal_seconds=0.0)
    monkeypatch.setattr(host.NoiseMeter, "stop", lambda self: busy)
    engine = Slow(drift=0.0, noise=NOISE, draft_cost=0.3, positions=True, alphas=dict.fromkeys(PROMPTS, 0.8),
                  modes={"ngram-simple": dict.fromkeys(PROMPTS, 1.0)})
    with pytest.raises(LlamaspecError) as err:
        study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, Store.open())
    assert err.value.message.startswith("the default budget (4m00s) is too small: the first pass alone takes about")
    assert ("other processes used 60% of the CPU" in err.value.message) == (other_load is not None)
    assert (err.value.hint or "").startswith("the machine was busy: rerun when it is idle, or with fewer threads (-t 1)") \
        == (other_load is not None)
    assert [m for m, _s in engine.calls].count("speculative") == 1  # one pair measured (and stored), then the refusal


def test_the_default_budget_grows_to_hold_the_first_pass_on_an_idle_machine(
        fake_models, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Runs of 15 s on an idle machine: the first pass (on one prompt of each of 4 categories, a
    baseline shared by its 3 setups' runs: 60 s a prompt) takes about 4 minutes, more than three
    quarters of the default 4: the default grows to 6 (the first pass within three quarters of it),
    says so, and the study answers."""
    from dataclasses import replace as replaced

    from llamaspec.base import host

    monkeypatch.setattr(host.NoiseMeter, "stop", lambda self: None)  # no other process measured

    class Slower(WorkloadEngine):
        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            return replaced(super().measure(case, mode, log_path), wall_seconds=15.0)

    engine = Slower(drift=0.0, noise=NOISE, draft_cost=0.3, positions=True, alphas=dict.fromkeys(PROMPTS, 0.8),
                    modes={"ngram-simple": dict.fromkeys(PROMPTS, 1.0)})
    with caplog.at_level("WARNING"):
        result = study.run_study(workload_exp(), study.setups_for(LENGTHS, ("ngram-simple",)), engine, Store.open())
    assert "the default budget grows from 4m00s to 6m00s: the first pass alone (12 pairs, about 60.0 s a prompt)" in caplog.text
    assert result.plan is not None and result.plan.endswith("or 360 s") and result.decision.verdict is not None


def test_a_pairs_budget_the_first_pass_spends_measures_no_contender_then_or_on_a_rerun(fake_models) -> None:  # noqa: F811
    """A pairs budget of exactly the first pass (3 setups on each of 4 prompts): the model's
    contenders get no pair, and the same study run again measures nothing (it refits on every
    stored pair and may name other contenders: the budget holds them off too)."""
    engine = categories_engine()
    store = Store.open()
    setups = study.setups_for(LENGTHS, ("ngram-simple",))
    result = study.run_study(workload_exp(), setups, engine, store, Budget(pairs=12))
    assert result.pairs == 12 and {s.label for s in result.decision.setups if s.speedup is not None} == {
        "ngram-simple", "draft 16", "draft 12"}
    calls = len(engine.calls)
    again = study.run_study(workload_exp(), setups, engine, store, Budget(pairs=12))
    assert again.pairs == 12 and len(engine.calls) == calls


def test_a_rerun_resumes_with_every_pair_it_had(fake_models) -> None:  # noqa: F811
    class Interrupting(WorkloadEngine):
        limit = 1_000_000

        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            if len(self.calls) >= self.limit:
                raise KeyboardInterrupt
            return super().measure(case, mode, log_path)

    engine = Interrupting(drift=0.0, noise=NOISE, draft_cost=0.3, positions=True,
                          alphas={"code": 0.95, "summarization": 0.9, "chat": 0.2, "reasoning": 0.3})
    engine.limit = 30
    store = Store.open()
    setups = study.setups_for(LENGTHS)
    with pytest.raises(KeyboardInterrupt):
        study.run_study(workload_exp(), setups, engine, store, Budget(pairs=60))
    kept = {r["id"]: r for r in store.runs(kind="sweep") if r["status"] == "ok"}
    before = sum(Summary.from_dict(r["summary"]).pairs for r in kept.values())
    assert before >= 4
    engine.limit = 1_000_000
    calls = len(engine.calls)
    result = study.run_study(workload_exp(), setups, engine, store, Budget(pairs=60))
    assert set(kept) <= set(result.runs.values())  # the finished points were resumed, not measured again
    # only new pairs were measured (two generations each, one where a new cell shares its prompt's
    # baseline), besides a warm-up and the cost timings of the prompts whose timings the interruption lost
    assert result.pairs - before <= len(engine.calls) - calls <= 2 * (result.pairs - before) + 9


def test_the_fixed_grid_measures_every_setup_on_every_prompt(fake_models) -> None:  # noqa: F811
    engine = categories_engine()
    setups = study.setups_for({"draft_max": (4, 8)}, ("ngram-simple",))
    result = study.run_study(workload_exp(repeats=2), setups, engine, Store.open(), fixed_grid=True)
    assert result.stop == "fixed grid" and result.pairs == 2 * 3 * 4 == result.fixed_grid_pairs
    assert all(s.speedup is not None and s.pairs == 8 for s in result.decision.setups)


# --- the plan ------------------------------------------------------------------------------------

def test_the_plan_fits_the_first_pass_into_its_share_of_the_budget() -> None:
    from llamaspec.studies import policy

    # 4 minutes at 55 s a prompt (a 5 s baseline shared by 7 first setups' and 3 contenders' 5 s runs):
    # 0.75 * 240 / 55 = 3.3 -> 3, but one a category
    made = policy.plan(54, 6, 7, 3, 55.0, Budget(seconds=240.0))
    assert made.prompts == 6 and made.of == 54 and made.seconds == pytest.approx(6 * 55.0)
    assert made.text(Budget(seconds=240.0)).startswith("plan: 6 of 54 prompts (about 1 a category), each with the first "
                                                         "pass's 7 setups and up to 3 of the model's lengths: about 5m30s")
    roomy = policy.plan(54, 6, 7, 3, 11.0, Budget(seconds=600.0, pairs=200))
    assert roomy.prompts == 15  # the pairs bind: 0.75 * 200 / 10
    assert policy.plan(12, 6, 7, 3, 0.1, Budget(seconds=600.0)).prompts == 12  # never more than the workload
    whole = policy.plan(54, 6, 7, 3, 5.0, Budget(seconds=240.0), over_prompts=False)
    assert whole.prompts == 54 and "every one of the 54 prompts (the whole workload)" in whole.text(Budget(seconds=240.0))
    assert policy.least_pairs(54, 6, 7) == 42 and policy.least_pairs(54, 6, 7, over_prompts=False) == 54 * 7
