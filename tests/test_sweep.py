"""Sweeps, the widest study, plots and reports over faithful fake llama.cpp programs (recorded real output).
The real sweep, with a real interruption, is in test_run_llamacpp.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import FakeEngine, fake_bin_dir, study_everything, swept

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.decision import decide
from llamaspec.llamacpp import build
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.measure.settings import Settings
from llamaspec.store.results import Store
from llamaspec.studies import budget, experiment, grid
from llamaspec.views import analysis


@pytest.fixture()
def backend(tmp_path: Path) -> LlamaCppEngine:
    return LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin")))


def exp() -> experiment.Experiment:
    return experiment.load("smollm2-quicksort").with_overrides(Settings(n_predict=16))


@pytest.mark.parametrize(("text", "values"), [("1,2,4,8", (1, 2, 4, 8)), ("1..4", (1, 2, 3, 4)), ("1..8:3", (1, 4, 7)),
                                               ("1..3,8,2", (1, 2, 3, 8)), (" 4 ", (4,))])
def test_value_lists(text: str, values: tuple[int, ...]) -> None:
    assert grid.parse_values("draft_max", text) == values


@pytest.mark.parametrize(("text", "message"), [("", "empty value"), ("1,,2", "empty value"), ("a", "'a' is not a valid value"),
                                                ("8..1", "empty range"), ("-2", "must be at least 1, got -2"), ("1..4:0", "empty range"),
                                                ("0..2", "'0..2': 0: must be at least 1, got 0")])
def test_bad_value_lists(text: str, message: str) -> None:
    with pytest.raises(LlamaspecError, match=message):
        grid.parse_values("draft_max", text)


def test_unknown_axis() -> None:
    with pytest.raises(LlamaspecError, match="cannot sweep 'colour'"):
        grid.parse_values("colour", "1")


def test_grid_is_the_cartesian_product() -> None:
    points = grid.grid({"draft_max": (1, 2), "draft_variant": ("q4_0", "q8_0")})
    assert [p.label for p in points] == ["draft_max=1, draft_variant=q4_0", "draft_max=1, draft_variant=q8_0",
                                         "draft_max=2, draft_variant=q4_0", "draft_max=2, draft_variant=q8_0"]
    assert len({p.key for p in points}) == 4


def test_value_the_build_does_not_take_fails_before_measuring(fake_models, backend) -> None:
    store = Store.open()
    with pytest.raises(LlamaspecError, match="ignores p-min"):
        swept(exp(), {"draft_p_min": (0.0, 0.5)}, backend, store)
    assert store.runs() == []  # nothing was measured
    # a draft-free mode the build does not run is skipped, and said, and the rest measured
    result = swept(exp(), {"spec_type": ("draft", "ngram-bogus")}, backend, store)
    assert [w for w, _why in result.result.skipped] == ["ngram-bogus"]
    assert "skipped ngram-bogus" in result.result.render()


def test_a_replaying_fake_is_caught_by_the_drafted_length_check(fake_models, backend) -> None:
    """Recorded output replayed whatever was asked (draft 8 every time) cannot pass for a draft-1 point."""
    store = Store.open()
    result = swept(exp(), {"draft_max": (1, 8)}, backend, store)
    excluded = {s.label: s.excluded for s in result.result.decision.setups}
    assert "asked for draft length 1, the program reports n_draft = 8" in (excluded["draft 1"] or "")
    assert any(r["status"] == "failed" for r in store.runs(kind="sweep"))


@pytest.mark.slow  # a few seconds of fake measuring and plotting
def test_a_sweeps_views_plot_its_points_and_show_its_answer(fake_models) -> None:
    """A prompt's points are figures (the model fitted to them, their plots), never an answer of
    their own; `plot` and `report` print the study's answer, the same lines the study printed."""
    store = Store.open()
    engine = FakeEngine(drift=0.01)
    result = swept(exp(), {"draft_max": (1, 2, 3)}, engine, store)
    assert result.result.pairs == 3 * exp().repeats  # type: ignore[operator]
    rep = analysis.sweep_report(store, result.sweep_id)
    text = rep.render()
    assert "plot: " in text and "model error: median" in text and "recommended" not in text
    pngs = [p for ps in rep.plots.values() for p in ps if p.suffix == ".png"]
    assert {p.stem for p in pngs} == {"decode_tps", "acceptance", "speedup", "dashboard"}
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    assert "decision" not in rep.as_dict() and "recommended" not in rep.as_dict()
    answer = result.result.render()
    assert "recommended: draft" in answer
    # the CLI views of the same store: the study's answer, exactly, on top
    for target in ("smollm2-quicksort", result.result.study_id, result.sweep_id):
        plotted = CliRunner().invoke(main, ["plot", target])
        assert plotted.exit_code == 0 and plotted.output.startswith(answer + "\n"), target
        assert plotted.output.count("recommended:") == answer.count("recommended:") and "plot: " in plotted.output
    md = CliRunner().invoke(main, ["report", "smollm2-quicksort", "--no-plot"])
    assert md.exit_code == 0 and md.output.startswith("# smollm2-quicksort") and answer in md.output
    assert md.output.count("recommended:") == answer.count("recommended:")
    cmp = CliRunner().invoke(main, ["report", "smollm2-quicksort", "--compare", "build", "--no-plot"])
    assert "## Compared by build" in cmp.output


def test_a_study_weighs_every_variant_and_says_what_it_skipped(fake_models) -> None:
    store = Store.open()
    engine = FakeEngine(drift=0.0)
    result = study_everything(exp(), engine, store, variants=("q4_1", "q8_0"), modes=("ngram-simple",))
    d = result.decision
    assert d.verdict == "recommend" and d.chosen is not None
    labels = {s.label for s in d.setups}
    assert {"draft 16 (q4_1)", "draft 16 (q8_0)"} <= labels  # each variant's longest length, measured first
    assert [w for w, _y in result.skipped] == ["ngram-simple"]  # the fake declares no draft-free mode
    assert result.fixed_grid_pairs == 2 * 16 * exp().repeats  # type: ignore[operator]
    assert result.stopped  # the setups that can no longer be the answer are measured no more
    text = result.render()
    assert "recommended:" in text and "skipped ngram-simple" in text
    calls = len(engine.calls)
    again = study_everything(exp(), engine, store, variants=("q4_1", "q8_0"), modes=("ngram-simple",))
    assert len(engine.calls) == calls  # a rerun measures nothing new: settled, every pair kept
    assert again.runs == result.runs and again.decision.chosen is not None and again.decision.chosen.key == d.chosen.key


def test_a_study_settles_its_decision_where_it_is_unsure(fake_models) -> None:
    """The first pass leaves each setup with one pair, short of the 5 a settled decision needs at
    the chosen one: the study adds pairs there (and at rivals that could beat it), stored with
    those runs, and says why it stopped. A rerun resumes with every pair and measures nothing."""
    store = Store.open()
    engine = FakeEngine(drift=0.0, noise=(1.0, 0.97, 1.02, 1.0, 1.03, 0.98))
    result = study_everything(exp(), engine, store, variants=())
    assert result.stop in ("settled", "budget"), result.last_progress
    chosen = result.decision.chosen
    assert chosen is not None and chosen.measured.n >= decide.SETTLE_PAIRS
    run_id = result.run_of(chosen.key)
    assert run_id is not None
    rows = store.measurements(run_id)
    assert sum(r["mode"] == "speculative" for r in rows) == chosen.measured.n
    assert f"study stopped: {decide.STOP_WORDS[result.stop]}, after {result.pairs} runs beside their baselines" in result.render()
    calls = len(engine.calls)
    again = study_everything(exp(), engine, store, variants=())
    assert len(engine.calls) == calls and again.pairs == result.pairs
    assert again.decision.chosen is not None and again.decision.chosen.key == chosen.key


def test_a_budget_stops_the_study(fake_models) -> None:
    engine = FakeEngine(drift=0.0, noise=(1.0, 0.97, 1.02))
    with pytest.raises(LlamaspecError, match="the first block alone measures 2"):
        study_everything(exp(), engine, Store.open(), variants=(), budget=budget.Budget(pairs=1))
    result = study_everything(exp(), engine, Store.open(), variants=(), budget=budget.Budget(pairs=18))
    assert result.stop in ("budget", "settled") and result.pairs <= 18 + decide.STEP
    bad = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--budget", "0"])
    assert bad.exit_code != 0 and "--budget: '0' allows nothing to be measured" in bad.output


def test_flash_attention_is_a_sweep_axis(fake_models) -> None:
    """A setting added to the schema (and llama.cpp's flag table) is sweepable without other edits."""
    assert grid.parse_values("flash_attn", "on,off") == ("on", "off")
    with pytest.raises(LlamaspecError, match="expected one of on, off, auto"):
        grid.parse_values("flash_attn", "maybe")
    store = Store.open()
    result = swept(exp(), {"flash_attn": ("on", "off")}, FakeEngine(), store)
    assert {r["settings"]["flash_attn"] for r in store.runs(group_id=result.sweep_id, kind="sweep")} == {"on", "off"}


def test_plot_of_an_unknown_experiment() -> None:
    result = CliRunner().invoke(main, ["plot", "nothing-here"])
    assert result.exit_code == 1 and "no finished runs of 'nothing-here'" in result.output


def test_report_compare_by_unknown_key() -> None:
    result = CliRunner().invoke(main, ["report", "x", "--compare", "colour"])
    assert result.exit_code == 2  # click refuses the choice




class LibraryEngine(FakeEngine):
    """An engine in a library, as transformers is: its identity is its library versions and device,
    and its provenance has no build key."""

    torch: str = "2.5.0"

    def identity(self) -> str:
        return f"transformers 4.46.0 torch {self.torch} cpu"

    def provenance(self) -> dict[str, object]:
        return {"version": "4.46.0", "torch": self.torch, "accel": "cpu"}


def test_a_study_under_another_engine_version_starts_afresh(fake_models) -> None:
    """The study's id names the engine's identity: the same versions resume every point; another
    torch measures afresh (its points are not the old torch's), and the old ones resume again."""
    store = Store.open()
    engine = LibraryEngine(drift=0.0)
    first = study_everything(exp(), engine, store, variants=())
    calls = len(engine.calls)
    again = study_everything(exp(), engine, store, variants=())
    assert again.study_id == first.study_id and len(engine.calls) == calls  # resumed: nothing measured
    engine.torch = "2.6.0"
    other = study_everything(exp(), engine, store, variants=())
    assert other.study_id != first.study_id and len(engine.calls) > calls
    assert not set(other.runs.values()) & set(first.runs.values())
    assert all(store.run(r)["provenance"]["identity"] == engine.identity() for r in other.runs.values())
    engine.torch = "2.5.0"
    calls = len(engine.calls)
    back = study_everything(exp(), engine, store, variants=())
    assert back.study_id == first.study_id and len(engine.calls) == calls


# --- each kind of answer with its parts, from a fake whose speed follows what it is asked -----------

@pytest.mark.parametrize(("engine", "args", "kind"), [
    (FakeEngine(drift=0.0, alpha=0.8, draft_cost=0.05), [], "recommend"),  # cheap drafts that are accepted
    (FakeEngine(drift=0.0, alpha=0.3, draft_cost=0.9), [], "no draft"),  # dear drafts, seldom accepted
    (FakeEngine(drift=0.0, alpha=0.5, draft_cost=0.3, noise=(1.0, 0.8, 1.25, 0.9, 1.15)),  # a small gain, a noisy machine,
     ["--budget", "4"], "undecided"),  # and pairs for the first pass only
])
def test_each_kind_of_answer_carries_its_parts(fake_models, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               engine: FakeEngine, args: list[str], kind: str) -> None:
    """The decided outcomes the tests on real binaries must not count on (they depend on the CPU,
    its load and the threads: issue 38), here from an engine whose speed follows the draft length
    it is asked for: a recommendation with the command that deploys it, "no draft" with why not
    and the target alone's command, "undecided" with what to measure next and no command."""
    import real_checks

    monkeypatch.setattr("llamaspec.cli.options.open_engine", lambda *a, **k: engine)
    common = ["sweep", "smollm2-quicksort", "-n", "16", "--draft", "1,2,4,8", "--no-plot", *args]
    done = CliRunner().invoke(main, [*common, "--json"])
    assert done.exit_code == 0, done.output
    (answer,) = real_checks.sweep_answers(done.stdout)
    target, draft = (engine.resolve_model("smollm2-135m", v).path for v in ("f32", "q4_1"))
    assert real_checks.answer(answer, target, draft) == kind
    printed = CliRunner().invoke(main, common)  # the same study again, printed: nothing measured anew
    assert printed.exit_code == 0, printed.output
    assert real_checks.answer_text(printed.output, target, draft) == kind


def test_the_answer_checks_refuse_an_answer_without_its_parts(fake_models, monkeypatch: pytest.MonkeyPatch) -> None:
    import real_checks

    monkeypatch.setattr("llamaspec.cli.options.open_engine", lambda *a, **k: FakeEngine(drift=0.0, draft_cost=0.05))
    done = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "-n", "16", "--draft", "1,2,4,8", "--no-plot", "--json"])
    (good,) = real_checks.sweep_answers(done.stdout)
    assert real_checks.answer(good) == "recommend"
    broken = [{**good, "deploy": None},  # a recommendation without its command
              {**good, "decision": {**good["decision"], "verdict": "no draft"}},  # "no draft" deploying the draft
              {**good, "decision": {**good["decision"], "verdict": "undecided", "measure_next": []}, "deploy": None,
               "recommended": None},  # undecided without what to measure
              {**good, "decision": {**good["decision"], "reason": " "}}]  # no why
    for bad in broken:
        with pytest.raises(AssertionError):
            real_checks.answer(bad)


def test_an_experiment_over_a_prompt_set_is_the_workload_study_of_its_cases(fake_models, tmp_path: Path) -> None:
    """`sweep NAME` of an experiment that names prompts: its cases are the setups weighed (labelled
    by their names, their own settings, another draft file a variant), each prompt a case; the
    answer is the one study's. A case the study cannot weigh is refused by name."""
    from llamaspec.studies import methods, study
    from llamaspec.studies import prompts as loader

    mini = methods.case_setups(experiment.load("smollm2-server-mini"))
    assert [(s.label, s.values) for s in mini] == [
        ("draft-k8", {"draft_max": 8}),
        ("ngram-simple", {"spec_type": "ngram-simple", "ngram_size_n": 3, "ngram_size_m": 8})]
    (tmp_path / "set.jsonl").write_text("\n".join(json.dumps({"id": f"p{i}", "category": c, "prompt": f"{c} prompt {i}"})
                                                  for i, c in enumerate(["code", "code", "math", "math"])))
    body = ("name: lengths\nengine: llama.cpp\nrepeats: 1\nprompts: set.jsonl\n"
            "settings: {n_predict: 64, threads: 1, seed: 1, temperature: 0}\ncases:\n"
            "  - {name: k2, target: {model: smollm2-135m, variant: f32}, draft: {model: smollm2-135m, variant: q4_1}, "
            "settings: {draft_max: 2}}\n"
            "  - {name: k6-q8, target: {model: smollm2-135m, variant: f32}, draft: {model: smollm2-135m, variant: q8_0}, "
            "settings: {draft_max: 6}}\n")
    (tmp_path / "lengths.yaml").write_text(body)
    loaded = experiment.load(str(tmp_path / "lengths.yaml"))
    exp, setups = methods.study_of_set(loaded, loader.load(loader.source_of(loaded)))
    assert [(c.name, c.category, c.draft.variant if c.draft else None) for c in exp.cases] == [
        ("p0", "code", "q4_1"), ("p1", "code", "q4_1"), ("p2", "math", "q4_1"), ("p3", "math", "q4_1")]
    # each prompt measured with the experiment's settings (64 tokens, one thread), not the defaults
    assert {(c.settings.n_predict, c.settings.threads, c.settings.seed) for c in exp.cases} == {(64, 1, 1)}
    assert [(s.label, s.values) for s in setups] == [("k2", {"draft_max": 2}),
                                                     ("k6-q8", {"draft_max": 6, "draft_variant": "q8_0"})]
    engine = FakeEngine(drift=0.0)
    result = study.run_study(exp, setups, engine, Store.open(), fixed_grid=True)
    assert {s.label for s in result.decision.setups} == {"k2", "k6-q8"}
    assert {c[1]["draft_max"] for c in engine.calls if c[0] == "speculative"} == {2, 6}
    stored = Store.open()
    drafts = {(stored.run(r)["settings"]["draft_max"], stored.run(r)["draft"]) for r in result.runs.values()}
    assert drafts == {(2, "smollm2-135m:q4_1"), (6, "smollm2-135m:q8_0")}, drafts
    (tmp_path / "two.yaml").write_text(body.replace("name: lengths", "name: two").replace(
        "k6-q8, target: {model: smollm2-135m, variant: f32}", "k6-q8, target: {model: smollm2-135m, variant: q8_0}"))
    with pytest.raises(LlamaspecError, match="have 2 targets: a study weighs setups of one target"):
        methods.case_setups(experiment.load(str(tmp_path / "two.yaml")))


@pytest.mark.parametrize("args", [["--draft", "4,8"], ["--draft", "4"], ["--modes", "ngram-mod"], ["-t", "1,2"]])
def test_an_experiment_over_a_prompt_set_refuses_setups_of_its_own_before_measuring(args: list[str]) -> None:
    """Its cases are what is weighed: a list of a setting, a draft length or --modes is refused in
    one line before anything loads (a single value of another setting applies to every case)."""
    done = CliRunner().invoke(main, ["sweep", "smollm2-server-mini", *args])
    assert done.exit_code == 2 and "smollm2-server-mini weighs its cases over its prompt set" in done.output, done.output


@pytest.mark.parametrize("args", [["--spec-type", "draft,ngram-simple", "--draft", "4,8"], ["--spec-type", "ngram-mod"],
                                  ["--spec-type", "ngram-mod", "--modes", "ngram-simple"]])
def test_sweep_takes_its_modes_as_one_option(args: list[str]) -> None:
    """--spec-type and --modes would fill the same axis (a spec-type list beside --draft once made
    setups all labelled by the last mode): sweep refuses --spec-type before anything loads."""
    done = CliRunner().invoke(main, ["sweep", "-m", "t.gguf", "-md", "d.gguf", *args])
    assert done.exit_code == 2 and "use --modes" in done.output and "Traceback" not in done.output, done.output
