"""The deploy check (llamacpp.deploy_check): the answer's llama-server command started as printed,
asked as a client asks, against the target alone's; on recorded server answers (a fake llama-server
replaying server-completion.json), on a server that cannot start, and on the real pinned server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fakes import fake_bin_dir

from llamaspec.base.stats import Spread
from llamaspec.llamacpp import build, deploy, deploy_check
from llamaspec.measure.contract import ClientPrompt, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings

# the study's answer the check is set beside: 1.20x [1.10-1.30]
STUDY = Spread(1.2, 1.1, 1.3, 12, 1.0, 1.4, 0.1)


def ngram_case(tmp_path: Path, spec_type: str = "ngram-mod", chat: bool = False) -> ResolvedCase:
    s = Settings(n_predict=16, threads=1, ctx_size=512, seed=20, spec_type=spec_type).with_defaults()
    return ResolvedCase("e", "c", ModelPath("t", str(tmp_path / "t.gguf")), None, "x", None, s, chat=chat)


def answers(built: build.Build, case: ResolvedCase) -> tuple[Any, Any]:
    return deploy.deployment(built, case, "llama-server"), deploy.deployment(built, case, "llama-server", speculative=False)


def test_a_server_without_draft_counters_is_compared_on_speed_and_says_it_cannot_tell_acceptance(tmp_path: Path) -> None:
    """The speculative server answers with the recorded answer of a request that drafted nothing (no
    draft_n in its timings): the check still compares the two servers' decode speeds (recorded:
    15 tokens in 2931.973 ms against 15 in 2575.432 ms), says it cannot tell acceptance, and the
    server command, below the study's interval, is taken out of the answer."""
    built = build.prebuilt(fake_bin_dir(tmp_path / "bin", server_default=(), server_drafting="ngram-nothing"))
    answer, alone = answers(built, ngram_case(tmp_path))
    assert [c.program for c in answer.commands] == ["llama-server"]
    prompts = [ClientPrompt("p1", "x", chat=False), ClientPrompt("p2", "y", chat=False)]
    checked_answer, checked = deploy_check.check_answer(answer, alone, prompts, STUDY, 16, tmp_path / "logs", seed=20)
    assert checked is not None and checked.error is None and len(checked.prompts) == 2
    assert checked.speedup == pytest.approx((15 / 2.931973) / (15 / 2.575432))
    assert checked.acceptance is None and not checked.counted
    line = checked.render(STUDY)
    assert "acceptance unknown" in line and "0.88x" in line and "below its interval" in line
    assert checked.verdict(STUDY) == "below" and checked_answer.commands == ()
    assert any("deploy check ran llama-server at 0.88x [0.88-0.88], below the study's interval" in n
               for n in checked_answer.notes)
    within = Spread(0.9, 0.8, 1.0, 12, 0.7, 1.1, 0.1)  # an answer the check agrees with keeps its command
    kept, again = deploy_check.check_answer(answer, alone, prompts[:1], within, 16, tmp_path / "logs")
    assert kept == answer and again is not None and again.verdict(within) == "within"
    slower = Spread(0.7, 0.6, 0.8, 12, 0.5, 0.9, 0.1)  # the server faster than the study: above, taken out as well
    above, third = deploy_check.check_answer(answer, alone, prompts, slower, 16, tmp_path / "logs")
    assert third is not None and third.verdict(slower) == "above" and above.commands == ()
    assert any("above the study's interval" in n for n in above.notes)
    one, fourth = deploy_check.check_answer(answer, alone, prompts[:1], slower, 16, tmp_path / "logs")
    assert fourth is not None and fourth.verdict(slower) == "unsure" and one == answer  # one request: no spread
    assert "one request tells no spread" in fourth.render(slower)


def check_of(*speedups: float) -> deploy_check.DeployCheck:
    return deploy_check.DeployCheck("s", tuple(deploy_check.PromptCheck(f"p{i}", 10.0, 10.0 * r, None, None)
                                               for i, r in enumerate(speedups)))


def test_a_noisy_check_contradicts_the_study_only_where_its_own_interval_lies_outside() -> None:
    """The check's interval: Student's t (5 degrees of freedom: 2.571) over six prompts' log ratios.
    Ratios that scatter about 1.02 overlap the study's [1.10-1.30] (unsure: kept); ratios that
    hold together about 0.97 lie wholly below it; about 1.55, wholly above."""
    import math
    import statistics

    noisy = check_of(0.8, 1.3, 0.9, 1.2, 0.95, 1.05)
    logs = [math.log(r) for r in (0.8, 1.3, 0.9, 1.2, 0.95, 1.05)]
    half = 2.571 * statistics.stdev(logs) / math.sqrt(6)
    got = noisy.spread
    assert got is not None and got.n == 6
    assert got.median == pytest.approx(math.exp(statistics.fmean(logs)))
    assert (got.low, got.high) == pytest.approx((got.median * math.exp(-half), got.median * math.exp(half)))
    assert got.median < STUDY.low < got.high and noisy.verdict(STUDY) == "unsure"
    assert "overlaps it: not a contradiction" in noisy.render(STUDY)
    assert check_of(0.9, 1.05, 0.95, 1.0, 1.02, 0.93).verdict(STUDY) == "below"
    assert check_of(1.5, 1.6, 1.55).verdict(STUDY) == "above"
    assert check_of(1.15, 1.25).verdict(STUDY) == "within" and deploy_check.DeployCheck("s").verdict(STUDY) == "unchecked"


def test_a_server_that_fails_to_start_leaves_the_answer_unchecked(tmp_path: Path) -> None:
    built = build.prebuilt(fake_bin_dir(tmp_path / "bin"))  # its llama-server answers --help only, then exits
    answer, alone = answers(built, ngram_case(tmp_path))
    kept, checked = deploy_check.check_answer(answer, alone, [ClientPrompt("p", "x", chat=False)], STUDY,
                                              16, tmp_path / "logs")
    assert kept.commands == answer.commands and checked is not None and checked.speedup is None
    assert kept.notes[-1].startswith("the llama-server command is unchecked: ") and "failed to start" in kept.notes[-1]
    assert checked.error and "\n" not in checked.error and "failed to start" in checked.error
    assert checked.render(STUDY).startswith("deploy check: unchecked (") and "stands as measured" in checked.render(STUDY)


@pytest.mark.llamacpp
@pytest.mark.slow
def test_the_real_check_serves_its_prompts_on_one_server_as_deployed(request: pytest.FixtureRequest,
                                                                   tmp_path: Path) -> None:
    """ngram-mod on the pinned server, one prompt sent twice as a client (/v1/chat/completions) to
    one long-lived server, as a deployed one serves them: the first drafts as a fresh server does (40
    drafted, 4 accepted at 0c1e570, as the state probe's fresh request through /apply-template and
    /completion), the repeat from what the server kept of it (more accepted): the check sees the
    state a deployed server has."""
    from llamaspec import models
    from llamaspec.llamacpp import modeltools
    from llamaspec.studies import adhoc
    from llamaspec.studies import prompts as loader

    bin_dir = os.environ.get("LLAMASPEC_TEST_BIN_DIR")
    built = build.prebuilt(Path(bin_dir)) if bin_dir else request.getfixturevalue("llama_build")
    target = models.resolve("smollm2-135m", "f32", tools=modeltools.tools(built))
    text = next(p.prompt for p in loader.load(str(adhoc.builtin_prompts())).prompts if p.id == "rw-present-tense")
    s = Settings(n_predict=64, threads=1, ctx_size=4096, seed=20, spec_type="ngram-mod").with_defaults()
    case = ResolvedCase("e", "c", ModelPath("t", str(target.path)), None, text, None, s, chat=True)
    answer, alone = answers(built, case)
    prompts = [ClientPrompt("first", text), ClientPrompt("again", text)]
    _kept, checked = deploy_check.check_answer(answer, alone, prompts, STUDY, 64, tmp_path / "logs", seed=20)
    assert checked is not None and checked.error is None, checked
    first, again = checked.prompts
    assert (first.drafted, first.accepted) == (40, 4), checked
    assert again.drafted is not None and again.accepted is not None and again.accepted > 4, checked


@pytest.mark.llamacpp
@pytest.mark.slow
def test_sweep_check_deploy_sets_the_servers_figure_beside_the_answer(request: pytest.FixtureRequest,
                                                                      tmp_path: Path) -> None:
    """``sweep --json`` (the check is the default): a recommendation carries its deploy check (the
    server's speedup and acceptance, its verdict against the answer's interval) and keeps its
    llama-server command only where the check's interval is not wholly outside that interval; other
    kinds of answer have none."""

    import real_checks
    from click.testing import CliRunner

    from llamaspec.cli import main

    bin_dir = os.environ.get("LLAMASPEC_TEST_BIN_DIR")
    built = build.prebuilt(Path(bin_dir)) if bin_dir else request.getfixturevalue("llama_build")
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: deploy-check\nrepeats: 2\nsettings: {n_predict: 32, threads: 1, ctx_size: 1024, seed: 20}\n"
                   "cases:\n  - name: python\n    target: {model: smollm2-135m, variant: f32}\n"
                   "    draft: {model: smollm2-135m, variant: q4_1}\n"
                   "    prompt: \"# Quick-sort implementation in Python and sample usage:\"\n")
    result = CliRunner().invoke(main, ["sweep", str(exp), "--draft", "4", "--modes", "none", "--fixed-grid", "--no-plot",
                                       "--json", "--bin-dir", str(built.bin_dir)])
    (report,) = real_checks.sweep_answers(result.stdout)
    kind = report["decision"]["verdict"]
    checked = report["deploy_check"]
    if kind != "recommend":
        assert checked is None, checked
        return
    assert checked["error"] is None and checked["speedup"] > 0 and [p["prompt"] for p in checked["prompts"]] == ["python"]
    assert checked["acceptance"] is not None and 0 <= checked["acceptance"] <= 1  # the draft drafts on this prompt
    interval = report["decision"]["interval"]
    assert checked["study"]["low"] == interval["low"] and checked["study"]["high"] == interval["high"]
    programs = [c["program"] for c in report["deploy"]["commands"]]
    assert ("llama-server" in programs) == (checked["verdict"] not in ("below", "above")), (checked, programs)


def test_no_check_deploy_prints_a_recommended_server_command_marked_unchecked_with_how_to_check(tmp_path: Path) -> None:
    """``--no-check-deploy``: the recommended llama-server command stays, with a note that it is
    unchecked, what measured the figure and how to check it; no server is started."""
    from types import SimpleNamespace

    from llamaspec.cli.sweep import deploy_checked

    built = build.prebuilt(fake_bin_dir(tmp_path / "bin"))  # its llama-server could not serve: nothing may start it
    answer = deploy.deployment(built, ngram_case(tmp_path, "ngram-simple"), "llama.cpp")
    assert "llama-server" in [c.program for c in answer.commands]
    chosen = SimpleNamespace(key="ngram-simple", measured=STUDY)
    result = SimpleNamespace(decision=SimpleNamespace(verdict="recommend", chosen=chosen), run_of=lambda key: 1)
    kept, line, data = deploy_checked(result, answer, None, None, None, no_wait=True, check=False)
    assert kept.commands == answer.commands and line is None and data is None
    assert kept.notes[-1] == ("the llama-server command is unchecked (--no-check-deploy): the study's figure was "
                              "measured with engine llama.cpp; drop --no-check-deploy to check it on llama-server")
    assert not (tmp_path / "logs").exists()


def test_warm_traffic_is_refused_for_a_study_that_does_not_run_on_llama_server() -> None:
    from click.testing import CliRunner

    from llamaspec.cli import main
    from llamaspec.measure.contract import EngineOptions
    from llamaspec.registry import engines

    result = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--warm", "--no-plot"])
    # one owner (registry.engines.open_engine) refuses it, before anything is measured
    assert result.exit_code == 1 and "warm traffic is served traffic: the llama.cpp engine starts each run fresh" in result.output
    assert "engine: llama-server" in result.output and "[1/" not in result.output
    with pytest.raises(Exception, match="warm traffic is served traffic: the llama.cpp engine starts each run fresh"):
        engines.open_engine("llama.cpp", EngineOptions(warm=True))
