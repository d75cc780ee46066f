"""The draft-free n-gram modes on llama.cpp's command-line programs: llama-speculative-simple runs
them without a draft model (``--spec-type MODE``, no -md); llama-speculative requires one.

On the recorded output of the pinned build (``tests/fixtures/llamacpp/0c1e570/*ngram*``, made by
``record.py``: an edit prompt whose continuation repeats it) and fake programs replaying it; the
real binaries run in ``tests/test_adhoc_llamacpp.py``."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import FIXTURES, fake_bin_dir
from models_factory import tiny_gguf

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.decision import speedup_model
from llamaspec.llamacpp import build, deploy, flags, parse, programhelp
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.measure import spectypes
from llamaspec.measure.contract import Capabilities, ModelPath, ResolvedCase
from llamaspec.measure.settings import DEFAULTS, Settings, defaults_for
from llamaspec.measure.summary import DraftCheck, Lossless, Summary, check_draft, requested_draft
from llamaspec.store.results import Store
from llamaspec.studies.run import run_case

REC = FIXTURES / "0c1e570"
OLD = FIXTURES / "7841fc7"
HW = {"cpu": "test", "cores": 2}
MODES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")  # the pinned help's order


def caps(folder: Path, program: str) -> programhelp.HelpFlags:
    help_text = (folder / f"{program}.help.txt").read_text()
    options, removed, spec_types = programhelp.parse_help(help_text)
    version = programhelp.parse_version((folder / f"{program}.version.txt").read_text())
    return programhelp.HelpFlags(f"/bin/{program}", options, removed, spec_types, version, help_text)


def recorded(name: str) -> tuple[str, str]:
    return (REC / f"{name}.stdout").read_text(), (REC / f"{name}.stderr").read_text()


def recorded_argv(name: str) -> list[str]:
    import json

    return shlex.split(json.loads((REC / "fixtures.json").read_text())["cases"][name]["command"])


def ngram_case(tmp_path: Path, **settings: object) -> ResolvedCase:
    """The recorded n-gram runs' case: no draft model, the edit prompt (as record.py's NGRAM_PROMPT)."""
    argv = recorded_argv("speculative-simple-ngram-simple")
    s = Settings(**{"n_predict": 64, "threads": 1, "ctx_size": 512, "spec_type": "ngram-simple", "timeout": 60.0,
                    **settings}).with_defaults()  # type: ignore[arg-type]
    return ResolvedCase("exp", "edit", ModelPath("smollm2-135m:f32", str(tmp_path / "t.gguf"), "aa"), None,
                        argv[argv.index("-p") + 1], None, s)


def engine(tmp_path: Path, simple: str | None = "speculative-simple-ngram-simple", commit: str = "0c1e570") -> LlamaCppEngine:
    return LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin", commit=commit, simple=simple,
                                                      completion_recording="completion-ngram")))


# --- the table -------------------------------------------------------------------------------------

def test_the_table_says_which_program_runs_each_type() -> None:
    assert spectypes.of(None) is spectypes.SPEC_TYPES["draft"]
    assert spectypes.of("draft").needs_draft and spectypes.of("draft").programs == ("speculative", "speculative-simple")
    for mode in MODES:
        row = spectypes.of(mode)
        assert row.draft_free and row.programs == ("speculative-simple",) and not row.runs_on("speculative")
    assert spectypes.of("ngram-cache").length is None and spectypes.of("ngram-mod").length == "ngram_size_m"
    assert spectypes.of("prompt-lookup").draft_free and spectypes.of("prompt-lookup").programs == ()
    # a type a build lists without a row: llama.cpp's naming, llama-server only
    assert spectypes.of("draft-eagle3").needs_draft and spectypes.of("draft-eagle3").programs == ()
    assert spectypes.of("ngram-future").draft_free and spectypes.engine_for("ngram-future") == "llama-server"
    assert spectypes.engine_for("ngram-simple") == spectypes.engine_for("draft") == "llama.cpp"
    assert set(flags.SPEC_TYPE_FLAGS) <= set(spectypes.SPEC_TYPES)  # every spelling is of a type the table knows


def test_a_draft_free_case_that_names_no_program_runs_on_speculative_simple() -> None:
    assert Settings(spec_type="ngram-simple").with_defaults().program == "speculative-simple"
    assert Settings(spec_type="ngram-simple", program="speculative").with_defaults().program == "speculative"  # named: kept
    assert Settings().with_defaults().program == DEFAULTS.program == "speculative"
    assert Settings(spec_type="prompt-lookup").with_defaults().program == "speculative"  # no llama.cpp program runs it
    assert defaults_for("ngram-mod").program == "speculative-simple" and defaults_for(None) == DEFAULTS


def test_draft_free_modes_by_engine_and_program() -> None:
    llamacpp = Capabilities(frozenset({"baseline", "speculative"}), frozenset({"program", "spec_type"}),
                            spec_types=("draft", *MODES))
    assert spectypes.draft_free_modes(llamacpp) == MODES
    assert spectypes.draft_free_modes(llamacpp, "speculative-simple") == MODES
    assert spectypes.draft_free_modes(llamacpp, "speculative") == ()
    server = Capabilities(frozenset({"baseline", "speculative"}), frozenset({"spec_type"}),
                          spec_types=("draft", "draft-eagle3", "ngram-simple"))
    assert spectypes.draft_free_modes(server, "speculative") == ("ngram-simple",)  # the program is not its setting


# --- flags, on the recorded --help ---------------------------------------------------------------

def test_the_ngram_command_line_is_the_recorded_one() -> None:
    argv = recorded_argv("speculative-simple-ngram-simple")
    # settings as recorded (those unset get no flag), not llamaspec's defaults
    s = Settings(n_predict=64, seed=20, temperature=0.0, threads=1, ctx_size=512, escape=True, spec_type="ngram-simple",
                 ngram_size_n=3, ngram_size_m=8)
    inv = flags.Invocation(argv[argv.index("-m") + 1], s, prompt=argv[argv.index("-p") + 1])
    got = flags.speculative_argv(caps(REC, "llama-speculative-simple"), Path(argv[0]), inv, "speculative-simple")
    # the runner adds -lv 4 (acceptance by position); the rest is what ran with exit status 0
    lv = argv.index("-lv")
    assert sorted(got[1:]) == sorted(argv[1:lv] + argv[lv + 2:])
    assert "-md" not in got and "--spec-draft-n-max" not in got
    assert got[got.index("--spec-type") + 1] == "ngram-simple"


def test_draft_free_modes_a_program_runs_are_read_from_its_help() -> None:
    assert flags.draft_free_modes(caps(REC, "llama-speculative-simple"), "speculative-simple") == MODES
    assert flags.draft_free_modes(caps(REC, "llama-speculative"), "speculative") == ()
    assert flags.draft_free_modes(caps(OLD, "llama-speculative-simple"), "speculative-simple") == ()  # no --spec-type


@pytest.mark.parametrize(("folder", "program", "changes", "message", "hint"), [
    (REC, "llama-speculative", {}, "llama-speculative cannot run --spec-type ngram-simple", "--program speculative-simple"),
    (OLD, "llama-speculative-simple", {}, r"llama-speculative-simple \(7841fc7\) has no --spec-type", "2026"),
    # Nov 2023 (--version was not a flag yet: the commit is unknown from the help alone)
    (FIXTURES / "b38a16d", "speculative", {}, r"speculative \(unknown\) has no --spec-type", "2026"),
    (REC, "llama-speculative-simple", {"spec_type": "ngram-nope"}, "does not know --spec-type ngram-nope", "ngram-simple"),
    (REC, "llama-speculative-simple", {"spec_type": "ngram-cache", "ngram_size_m": 4},
     "ngram_size_m has no meaning for spec_type ngram-cache", "ngram-simple"),
    (REC, "llama-speculative-simple", {"spec_type": "draft"}, "needs a draft model for spec_type draft", "ngram-simple"),
])
def test_what_cannot_run_is_refused_in_one_line(folder: Path, program: str, changes: dict[str, object], message: str,
                                                  hint: str) -> None:
    inv = flags.Invocation.of("/m/t.gguf", prompt="x", **{"spec_type": "ngram-simple", **changes})
    role = program.removeprefix("llama-")
    with pytest.raises(LlamaspecError, match=message) as err:
        flags.speculative_argv(caps(folder, program), Path(f"/bin/{program}"), inv, role)
    assert "\n" not in err.value.message and hint in (err.value.hint or "")


def test_an_ngram_modes_longest_draft_is_its_size_else_the_helps_default() -> None:
    c = caps(REC, "llama-speculative-simple")
    assert c.default_of("--spec-ngram-simple-size-m") == "48" and c.default_of("--spec-ngram-mod-n-max") == "64"
    assert c.default_of("--spec-type") == "none" and c.default_of("--no-such-flag") is None
    assert flags.longest_ngram_draft(c, Settings(spec_type="ngram-simple")) == 48
    assert flags.longest_ngram_draft(c, Settings(spec_type="ngram-simple", ngram_size_m=8)) == 8
    assert flags.longest_ngram_draft(c, Settings(spec_type="ngram-mod")) == 64
    assert flags.longest_ngram_draft(c, Settings(spec_type="ngram-cache")) is None  # its own trace line says


# --- parsing the recorded runs -------------------------------------------------------------------------

def test_an_ngram_run_parses_with_its_statistics() -> None:
    s = parse.parse_speculative(*recorded("speculative-simple-ngram-simple"))
    assert (s.n_predict, s.n_drafted, s.n_accept, s.acceptance) == (71, 67, 59, 0.8806)  # 71 tokens for -n 64: overshoot
    assert s.n_draft == 3  # the unused draft model's length, not the mode's
    (stat,) = s.statistics
    assert (stat.implementation, stat.calls_accept, stat.gen_drafts, stat.gen_tokens) == ("ngram-simple", 12, 11, 67)
    assert stat.acc_rate_by_position == (0.833, 0.833, 0.833, 0.833, 0.833, 0.75)  # "dur(b,g,a) = ..." after it: ignored
    by = parse.positions(s, 64, draft_len=8)
    assert by.drafted is None and "no position known for certain" in (by.note or "")  # drafts of 1..8 tokens


def test_an_ngram_run_that_drafted_nothing_has_no_acceptance() -> None:
    s = parse.parse_speculative(*recorded("speculative-simple-ngram-nothing"))
    assert (s.n_drafted, s.n_accept, s.acceptance) == (0, 0, None)  # "accept = -nan%"
    assert s.n_predict == 33


def test_ngram_cache_prints_its_own_draft_size() -> None:
    s = parse.parse_speculative(*recorded("speculative-simple-ngram-cache"))
    assert s.longest_draft == 8 and s.p_min is None  # "- n_draft=8, cache_static=none, cache_dynamic=none"
    by = parse.positions(s, 64, draft_len=s.longest_draft)
    assert by.drafted == (10,) and by.accepted == (9,)  # 73 tokens in 10 rounds of up to 8: position 1 certain
    assert "positions 2..8 left out" in (by.note or "")
    draft_simple = parse.parse_speculative((REC / "positions" / "q4_0" / "draft-5.log").read_text())
    assert (draft_simple.longest_draft, draft_simple.p_min) == (5, 0.0)  # draft-simple's "- n_max=5, n_min=0, p_min=0.000000"


# --- the engine, on fake programs replaying the recordings ---------------------------------------------

def test_the_engine_declares_the_modes_its_build_runs(tmp_path: Path) -> None:
    assert engine(tmp_path).capabilities.spec_types == ("draft", *MODES)
    assert engine(tmp_path / "no-simple", simple=None).capabilities.spec_types == ("draft",)
    old = LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "old", commit="7841fc7", simple="speculative-simple")))
    assert old.capabilities.spec_types == ("draft",)


def test_an_ngram_run_is_measured_without_a_draft_and_is_lossless(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(ngram_case(tmp_path, ngram_size_n=3, ngram_size_m=8), engine(tmp_path), store, repeats=2,
                      hardware=HW)
    assert result.status == "ok", result.error
    spec = [m for m in result.measurements if m.mode == "speculative"]
    argv = spec[0].argv
    assert Path(argv[0]).name == "llama-speculative-simple" and "-md" not in argv
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple" and "--spec-ngram-simple-size-m" in argv
    assert "-lv" in argv
    m = spec[0]
    assert m.n_accept is not None and m.n_drafted is not None and m.n_accept <= m.n_drafted
    assert (m.draft_len, m.rounds, m.program) == (8, 71 - 59, "llama-speculative-simple")
    assert m.draft_steps is None  # no draft model: no draft step
    s = result.summary
    # 71 tokens against the baseline's 64: the accepted drafts overshoot -n, compared over the baseline's length
    assert s.lossless.verdict == "identical" and s.lossless.unit == "chars"
    assert s.draft.requested == 8 and s.draft.problem is None
    assert s.positions_note and "no position known" in s.positions_note


def test_an_ngram_run_without_sizes_checks_no_length(tmp_path: Path) -> None:
    case = ngram_case(tmp_path)
    m = engine(tmp_path).measure(case, "speculative", tmp_path / "s.log")
    assert m.ok and m.draft_len == 48  # the help's default m-gram size, not the printed n_draft = 3
    assert requested_draft(case) is None and check_draft(m, requested_draft(case)).problem is None


def test_an_ngram_run_that_drafted_nothing(tmp_path: Path) -> None:
    m = engine(tmp_path, simple="speculative-simple-ngram-nothing").measure(ngram_case(tmp_path, n_predict=32),
                                                                            "speculative", tmp_path / "s.log")
    assert m.ok and (m.n_drafted, m.n_accept, m.acceptance) == (0, 0, None)
    assert m.rounds == 33  # every token its own target call


@pytest.mark.parametrize(("changes", "message"), [
    ({"program": "speculative"}, "llama-speculative cannot run --spec-type ngram-simple"),
    ({"draft_p_min": 0.5}, "draft_p_min applies to a draft model, not to spec_type ngram-simple"),
])
def test_the_engine_refuses_before_running(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    with pytest.raises(LlamaspecError, match=message) as err:
        engine(tmp_path).check(ngram_case(tmp_path, **changes))
    assert err.value.hint


# --- the command line ------------------------------------------------------------------------------------

@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "models").mkdir()
    return tiny_gguf(tmp_path / "models" / "target.gguf", seed=0)


def test_a_study_of_an_ngram_mode_runs_on_the_command_line_programs(target: Path) -> None:
    from llamaspec.cli.options import experiment_or_study

    exp = experiment_or_study(None, str(target), (), None, settings=Settings(spec_type="ngram-simple"), prompt="x")
    assert exp.engine == "llama.cpp" and exp.cases[0].draft is None
    with_set = experiment_or_study(None, str(target), (), None, settings=Settings(spec_type="ngram-simple"),
                                   prompts="spec-bench:x.jsonl")
    assert with_set.engine == "llama-server"  # a prompt set is llama-server's
    unknown = experiment_or_study(None, str(target), (), None, settings=Settings(spec_type="ngram-future"), prompt="x")
    assert unknown.engine == "llama-server"  # a type without a row: llama.cpp's naming, llama-server only
    named = experiment_or_study(None, str(target), (), None, prompt="x",
                                settings=Settings(spec_type="ngram-future", program="speculative-simple"))
    assert named.engine == "llama.cpp"  # a program named: the command-line programs, which say what they lack


@pytest.mark.parametrize(("args", "commit", "first"), [
    (["--program", "speculative"], "0c1e570", "Error: llama-speculative cannot run --spec-type ngram-simple"),
    ([], "7841fc7", "Error: llama-speculative-simple (7841fc7) has no --spec-type"),
    (["--spec-type", "ngram-nope", "--program", "speculative-simple"], "0c1e570",
     "Error: llama-speculative-simple (0c1e570) does not know --spec-type ngram-nope"),
    # a type without a row in the table is llama-server's (spectypes.engine_for), which refuses it alike
    (["--spec-type", "ngram-nope"], "0c1e570", "Error: llama-server (0c1e570) has no spec_type 'ngram-nope'"),
])
def test_what_cannot_run_is_one_error_line_with_a_hint(target: Path, tmp_path: Path, args: list[str], commit: str,
                                                       first: str) -> None:
    bins = fake_bin_dir(tmp_path / "bin", commit=commit, simple="speculative-simple")
    spec = ["--spec-type", "ngram-simple"] if "--spec-type" not in args else []
    result = CliRunner().invoke(main, ["run", "-m", str(target), *spec, *args, "-p", "x", "-n", "8", "-r", "1",
                                       "--bin-dir", str(bins)])
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("study ")]
    assert result.exit_code != 0
    errors = [i for i, line in enumerate(lines) if line.startswith("Error: ")]
    assert errors and lines[errors[0]].startswith(first), lines
    assert lines[errors[0] + 1].startswith("Hint: ") and errors[0] + 2 == len(lines), lines


# --- the deploy command ------------------------------------------------------------------------------------

def test_an_ngram_setting_deploys_on_llama_speculative_simple_and_llama_server(tmp_path: Path) -> None:
    built = build.prebuilt(fake_bin_dir(tmp_path / "bin", simple="speculative-simple-ngram-simple"))
    d = deploy.deployment(built, ngram_case(tmp_path, ngram_size_n=3, ngram_size_m=8), "llama.cpp")
    assert d.speculative and [c.program for c in d.commands] == ["llama-server", "llama-speculative-simple"]
    for c in d.commands:
        argv = list(c.argv)
        assert "-md" not in argv and argv[argv.index("--spec-type") + 1] == "ngram-simple"
        assert argv[argv.index("--spec-ngram-simple-size-m") + 1] == "8"
    assert d.setting.startswith("ngram-simple n=3 m=8 on the target")
    alone = deploy.deployment(built, ngram_case(tmp_path), "llama.cpp", speculative=False)
    # the target alone: llama-server says --spec-type none (its --help offers it), llama-completion has none
    server_argv, completion_argv = (list(c.argv) for c in alone.commands)
    assert server_argv[server_argv.index("--spec-type") + 1] == "none" and server_argv.count("--spec-type") == 1
    assert "--spec-type" not in completion_argv and not any(a.startswith("--spec-ngram") for a in server_argv + completion_argv)


def test_a_mode_that_keeps_state_on_the_server_is_not_deployed_there_unmeasured(tmp_path: Path) -> None:
    """ngram-cache measured on llama-speculative-simple (fresh each run): its llama-server would draft
    from earlier requests (spectypes.KEEPS_STATE, measured on the pinned build), so the answer gives
    the command-line deploy and says why there is no server one; measured on llama-server, the server
    command stands with the same warning. A mode that keeps no state deploys on both."""
    from llamaspec.measure import spectypes

    assert {"ngram-cache", "ngram-mod"} <= spectypes.KEEPS_STATE and "ngram-simple" not in spectypes.KEEPS_STATE
    built = build.prebuilt(fake_bin_dir(tmp_path / "bin", simple="speculative-simple-ngram-cache"))
    case = ngram_case(tmp_path, spec_type="ngram-cache")
    d = deploy.deployment(built, case, "llama.cpp")
    assert d.speculative and [c.program for c in d.commands] == ["llama-speculative-simple"]
    argv = list(d.commands[0].argv)
    assert argv[argv.index("--spec-type") + 1] == "ngram-cache" and "-md" not in argv
    (note,) = [n for n in d.notes if "keeps n-gram state between requests on llama-server" in n]
    assert note.startswith("ngram-cache ") and "docs/engines.md" in note and "no llama-server command" in note
    served = deploy.deployment(built, case, "llama-server")  # measured as served, fresh server per request
    assert [c.program for c in served.commands] == ["llama-server", "llama-speculative-simple"]
    assert any(n.startswith("ngram-cache keeps n-gram state") and "fresh server" in n for n in served.notes)
    plain = deploy.deployment(built, ngram_case(tmp_path), "llama.cpp")  # ngram-simple: no state kept
    assert [c.program for c in plain.commands] == ["llama-server", "llama-speculative-simple"]
    assert not any("keeps n-gram state" in n for n in plain.notes)
    alone = deploy.deployment(built, case, "llama.cpp", speculative=False)  # "no draft": the server as ever
    assert [c.program for c in alone.commands][0] == "llama-server"


# --- the speedup model -----------------------------------------------------------------------------------

def test_an_ngram_point_is_not_fitted_and_says_so() -> None:
    from llamaspec.base.stats import spread

    summary = Summary("ok", 3, True, spread([1.3, 1.4, 1.5]), spread([40.0, 41.0, 42.0]), spread([30.0, 30.0, 30.0]),
                      None, spread([88.0] * 3), Lossless("identical", "chars", 300, 3), DraftCheck(8, 8, "capped", 5.6),
                      n_predict=71, n_drafted=67, n_accept=59, rounds=12, program="llama-speculative-simple")
    row = speedup_model.PointRow(1, "spec_type=ngram-simple", 8, summary, spec_type="ngram-simple")
    assert row.draft_free and speedup_model.observation(row) is None
    fit, note = speedup_model.analyze_rows([row])
    assert fit is None
    assert "ngram-simple" in (note or "") and "measured figures stand" in (note or "")
    groups = speedup_model.rows_to_groups([{"id": 1, "settings": {"spec_type": "ngram-mod", "draft_max": 8}, "draft": None,
                                       "summary": summary.to_dict()}], ["spec_type"])
    (rows,) = groups.values()
    assert rows[0].draft_free and rows[0].spec_type == "ngram-mod"
