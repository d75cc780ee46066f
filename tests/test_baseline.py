"""A baseline is the target alone, on every engine: each target-only program says ``--spec-type none``
where its ``--help`` offers it, the measured programs run without the environment's ``LLAMA_ARG_*``,
and a baseline that drafted anything is refused and in no pair. The programs are fake executables
that answer ``--help`` with the pinned build's recorded text and replay its recorded output, and
whose speculation follows what they are asked (the default list of types, ``LLAMA_ARG_SPEC_TYPE``,
``--spec-type``), as llama.cpp's does."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fakes import fake_bin_dir

from llamaspec.llamacpp import build, deploy, flags
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.llamacpp.server import ServerEngine
from llamaspec.measure import contract, pairs
from llamaspec.measure.contract import ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.store.results import Store
from llamaspec.store.rows import measurements_of
from llamaspec.studies.run import run_case

PROMPT = "# Quick-sort implementation in Python and sample usage:"


def ngram_case(tmp_path: Path) -> ResolvedCase:
    s = Settings(n_predict=16, threads=1, spec_type="ngram-mod", timeout=60.0).with_defaults()
    return ResolvedCase("exp", "python", ModelPath("t:f32", str(tmp_path / "t.gguf")), None, PROMPT, None, s)


def server_run(tmp_path: Path, default: tuple[str, ...], replaces: bool = False):  # -> (CaseResult, Store)
    engine = ServerEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin", server_default=default, server_replaces=replaces),
                                         roles=("server",)), servers_dir=tmp_path / "servers")
    store = Store.open(tmp_path / "r.sqlite")
    try:
        return run_case(ngram_case(tmp_path), engine, store, repeats=2, hardware={}), store
    finally:
        engine.close()


def test_a_completion_baseline_that_prints_draft_statistics_is_refused(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-completion printing an n-gram mode's statistics (speculation on in the target-only run,
    as a build whose default turned it on would): its measurement is refused with one line, the run
    stops there, and no pair has a ratio."""
    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)
    s = Settings(n_predict=64, threads=1, draft_max=8, timeout=60.0).with_defaults()
    case = ResolvedCase("exp", "python", ModelPath("t:f16", str(tmp_path / "t.gguf")),
                        ModelPath("d:q4_0", str(tmp_path / "d.gguf")), PROMPT, None, s)
    store = Store.open(tmp_path / "r.sqlite")
    engine = LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin", completion="drafting")))
    result = run_case(case, engine, store, repeats=2, hardware={})
    (base,) = result.measurements
    assert base.mode == "baseline" and not base.ok and (base.n_drafted, base.n_accept) == (67, 59)
    assert base.error == ("the baseline drafted 67 tokens: speculation was on in the target-only run (llama-completion); "
                          f"it is not counted ({contract.DRAFTED_BASELINE_HINT})")
    assert result.summary.status == "failed" and result.summary.speedup is None and result.summary.pairs == 0
    (stored,) = measurements_of(store.measurements(result.run_id))  # stored as refused
    assert (stored.ok, stored.error, stored.error_kind, stored.n_drafted) == (False, base.error, "drafted", 67)
    # the same fake without the statistics line is a baseline like any other
    clean = LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "clean")))
    assert pairs.measure_one(clean, case, "baseline", 0, tmp_path / "b.log").ok


def test_the_server_baseline_says_spec_type_none_and_so_stays_the_target_alone(tmp_path: Path) -> None:
    """A server whose default turns ngram-mod on, and whose --spec-type none turns it off (upstream's
    proposal): the baseline server is started with --spec-type none, does not draft, and every pair
    has its ratio."""
    result, _store = server_run(tmp_path, ("ngram-mod",), replaces=True)
    base = [m for m in result.measurements if m.mode == "baseline"]
    assert len(base) == 2 and all(m.ok and m.n_drafted is None for m in base)
    argv = list(base[0].argv)
    assert argv[argv.index("--spec-type") + 1] == "none" and argv.count("--spec-type") == 1
    assert result.summary.status == "ok" and result.summary.pairs == 2 and result.summary.speedup is not None


def test_a_server_baseline_that_drafted_is_refused_and_leaves_no_ratio(tmp_path: Path) -> None:
    """The same default on a server that appends each --spec-type to its list, as the pinned one's
    parser does: none takes ngram-mod out of nothing, the baseline server drafts (its answer's
    draft_n), and its measurement is refused."""
    result, store = server_run(tmp_path, ("ngram-mod",))
    (base,) = result.measurements  # pair 0 takes its baseline first: the loop stops at it
    assert base.mode == "baseline" and not base.ok and base.error_kind == "drafted" and base.n_drafted == 16
    assert base.error is not None and base.error.startswith(
        "the baseline drafted 16 tokens: speculation was on in the target-only run (llama-server); it is not counted (")
    assert result.summary.status == "failed" and result.summary.speedup is None and result.summary.pairs == 0
    assert store.run(result.run_id)["status"] == "failed"


def test_the_environments_llama_arg_variables_do_not_reach_the_measured_programs(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    """LLAMA_ARG_SPEC_TYPE=ngram-mod in the user's environment would put ngram-mod in the baseline
    server's list before its command line (and --spec-type none cannot take it out there): the
    measured servers start without it, with a warning that says so."""
    monkeypatch.setenv("LLAMA_ARG_SPEC_TYPE", "ngram-mod")
    flags._warn_cleared.cache_clear()  # said once per process: this test wants to hear it
    with caplog.at_level(logging.WARNING):
        result, _store = server_run(tmp_path, ("none",))
    assert result.summary.status == "ok" and result.summary.pairs == 2
    assert all(m.ok and m.n_drafted is None for m in result.measurements if m.mode == "baseline")
    assert any("LLAMA_ARG_SPEC_TYPE" in r.getMessage() and "cleared for the measured llama.cpp programs" in r.getMessage()
               for r in caplog.records)
    # the command-line programs alike: this llama-completion drafts when the variable reaches it
    s = Settings(n_predict=64, threads=1, draft_max=8, timeout=60.0).with_defaults()
    case = ResolvedCase("exp", "python", ModelPath("t:f16", str(tmp_path / "t.gguf")), None, PROMPT, None, s)
    engine = LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "cli", completion="drafting-from-env")))
    base = pairs.measure_one(engine, case, "baseline", 0, tmp_path / "b.log")
    assert base.ok and base.n_drafted is None, base.error


def test_the_no_draft_deploy_command_says_spec_type_none(tmp_path: Path) -> None:
    """"No draft" prints the target alone's llama-server with --spec-type none (the pinned server's
    --help offers it) and its llama-completion without (the pinned one lists no --spec-type)."""
    built = build.prebuilt(fake_bin_dir(tmp_path / "bin"))
    s = Settings(n_predict=16, threads=1, draft_max=8).with_defaults()
    case = ResolvedCase("exp", "python", ModelPath("t:f16", "/m/t.gguf"), ModelPath("d:q4_0", "/m/d.gguf"), PROMPT, None, s)
    d = deploy.deployment(built, case, "llama.cpp", speculative=False)
    assert not d.speculative and [c.program for c in d.commands] == ["llama-server", "llama-completion"]
    server_argv, completion_argv = (list(c.argv) for c in d.commands)
    assert server_argv[server_argv.index("--spec-type") + 1] == "none" and "-md" not in server_argv
    assert "--spec-type" not in completion_argv
    spec = deploy.deployment(built, case, "llama.cpp")  # the speculative one names its own type
    assert spec.commands[0].argv[list(spec.commands[0].argv).index("--spec-type") + 1] == "draft-simple"
