"""Where a run's llama.cpp comes from: --bin-dir / LLAMASPEC_BIN_DIR, then llamaspec's cached build,
then llama.cpp programs on PATH that have what the run needs, then the pinned tree built on the spot.

The programs on PATH are fakes that answer --help and --version with the texts real builds printed
(tests/fixtures/llamacpp/<commit>/); the too-old llama-server is the pinned one's help without its
draft options, as llama-server printed it before it could speculate (late 2024)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import FIXTURES, SCRIPT, fake_bin_dir

from llamaspec.base import host
from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.llamacpp import build as builds
from llamaspec.llamacpp import cache, modeltools, programhelp
from llamaspec.views import doctor

REC = FIXTURES / "0c1e570"


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout without a source tree, an empty build cache and a PATH with no llama.cpp on it."""
    root = tmp_path / "checkout"
    (root / "experiments").mkdir(parents=True)
    monkeypatch.setenv("LLAMASPEC_ROOT", str(root))
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LLAMASPEC_LLAMACPP", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    cache._announced.clear()
    return tmp_path


def _on_path(monkeypatch: pytest.MonkeyPatch, *folders: Path) -> None:
    monkeypatch.setenv("PATH", ":".join([*map(str, folders), "/usr/bin", "/bin"]))


def _cached_build(cache_dir: Path, commit: str = "0c1e570") -> Path:
    folder = cache_dir / "builds" / f"{commit}-cpu-0123456789ab"
    fake_bin_dir(folder / "bin")
    (folder / "manifest.json").write_text(json.dumps({
        "bin_dir": str(folder / "bin"), "commit": commit, "accel": "cpu", "key": "0123456789ab",
        "programs": {"speculative": "llama-speculative", "completion": "llama-completion"},
        "smoke_host": host.fingerprint(), "build_seconds": 660.0, "built_at": "2026-12-01T10:00:00+0000"}))
    (cache_dir / "builds" / f"latest-{commit}-cpu").write_text(str(folder) + "\n")
    return folder / "bin"


def _program(folder: Path, name: str, help_text: str, version_text: str) -> Path:
    """A llama.cpp program that answers --help and --version with these texts."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}.help").write_text(help_text)
    (folder / f".{name}.version").write_text(version_text)
    path = folder / name
    path.write_text(SCRIPT.format(python=sys.executable, recorded=str(REC / "completion"), help=str(folder / f".{name}.help"),
                                  version=str(folder / f".{name}.version"), behaviour="ok", hang=1))
    path.chmod(0o755)
    return path


def _server_before_speculation(folder: Path) -> Path:
    """llama-server as it was before it could draft: the pinned help without any draft or spec option."""
    lines = [line for line in (REC / "llama-server.help.txt").read_text().splitlines()
             if not any(word in line for word in ("draft", "spec-", "-md"))]
    return _program(folder, "llama-server", "\n".join(lines) + "\n", "version: 3990 (1a2b3c4)\nbuilt with cc for x86_64\n")


def test_programs_on_path_are_used_when_nothing_else_is_there(bare: Path, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    mine = fake_bin_dir(bare / "homebrew" / "bin")
    _on_path(monkeypatch, bare / "empty", mine)  # a folder that is not there is skipped
    with caplog.at_level(logging.WARNING, logger="llamaspec"):
        found = builds.find("cpu")
    assert found.bin_dir == str(mine) and found.source == f"PATH:{mine}" and found.prebuilt
    assert found.programs["speculative"] == "llama-speculative" and found.programs["completion"] == "llama-completion"
    assert found.commit == "0c1e570" and found.key.startswith("path-0c1e570-")
    said = caplog.text
    assert f"using llama.cpp from PATH: llama-speculative, llama-completion in {mine} (build 0, commit 0c1e570)" in said
    assert "the results are tied to that build" in said
    provenance = cache.provenance(found, programhelp.probe_version(mine / "llama-speculative"))
    assert provenance["origin"] == "PATH" and provenance["source"] == f"PATH:{mine}" and provenance["commit"] == "0c1e570"


def test_the_identity_of_programs_on_path_changes_with_the_files(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package upgraded in place is another build: its studies are not resumed with the old one's points."""
    mine = fake_bin_dir(bare / "bin")
    _on_path(monkeypatch, mine)
    before = builds.find("cpu").key
    (mine / "llama-speculative").write_text((mine / "llama-speculative").read_text() + "\n# upgraded\n")
    assert builds.find("cpu").key != before


def test_the_order_bin_dir_then_cache_then_path(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = fake_bin_dir(bare / "usr-local" / "bin")
    named = fake_bin_dir(bare / "named")
    _on_path(monkeypatch, on_path)
    assert builds.find("cpu").source == f"PATH:{on_path}"
    cached = _cached_build(bare / "cache")
    assert builds.find("cpu").bin_dir == str(cached)  # llamaspec's own build comes before PATH
    monkeypatch.setenv("LLAMASPEC_BIN_DIR", str(named))
    assert builds.find("cpu").bin_dir == str(named)
    assert builds.find("cpu", bin_dir=on_path).bin_dir == str(on_path.resolve())  # --bin-dir wins over the variable
    origins = [c.origin for c in cache.candidates("cpu", bin_dir=on_path)]
    assert origins == ["--bin-dir"]  # a named folder is the only choice
    monkeypatch.delenv("LLAMASPEC_BIN_DIR")
    assert [c.origin for c in cache.candidates("cpu")] == ["cache", "PATH", "build"]


def test_a_llama_cpp_on_path_too_old_for_the_run_is_one_line(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = bare / "old" / "bin"
    _server_before_speculation(old)
    _on_path(monkeypatch, old)
    with pytest.raises(LlamaspecError) as err:
        builds.find("cpu", roles=cache.SERVER_ROLES, build=True)  # too old: said, not silently replaced by a build
    message = err.value.message
    assert message == (f"llama.cpp on PATH in {old} is too old for this run: llama-server (build 3990, commit 1a2b3c4) "
                       "has no flag for the draft model (tried -md, --model-draft, --spec-draft-model)")
    assert "llamaspec build" in (err.value.hint or "") and "--bin-dir" in (err.value.hint or "")
    # a llama.cpp for the command-line programs in the same folder is not one: it has no llama-speculative
    with pytest.raises(LlamaspecError, match="holds no llama-speculative program"):
        builds.find("cpu")


def test_a_fit_llama_cpp_later_on_path_is_used_after_an_old_one(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = bare / "old"
    _server_before_speculation(old)
    new = fake_bin_dir(bare / "new")
    _on_path(monkeypatch, old, new)
    assert builds.find("cpu", roles=cache.SERVER_ROLES).bin_dir == str(new)


def test_the_same_check_holds_for_a_named_folder(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = bare / "old"
    _server_before_speculation(old)
    with pytest.raises(LlamaspecError, match=r"is too old for this run: llama-server \(build 3990, commit 1a2b3c4\) has no flag"):
        builds.find("cpu", bin_dir=old, roles=cache.SERVER_ROLES)
    with pytest.raises(LlamaspecError, match="holds no llama-speculative"):
        builds.find("cpu", bin_dir=old)


def test_programs_named_like_others_tools_on_path_are_not_taken(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PATH only llama-* names count: a `main` or `server` there is someone else's program."""
    other = bare / "other"
    _program(other, "main", (FIXTURES / "a98b163" / "main.help.txt").read_text(), "version: 1 (a98b163)\n")
    _program(other, "speculative", (FIXTURES / "a98b163" / "speculative.help.txt").read_text(), "version: 1 (a98b163)\n")
    _on_path(monkeypatch, other)
    assert [c.origin for c in cache.candidates("cpu")] == ["cache", "build"]
    with pytest.raises(LlamaspecError, match="no build of the pinned llama.cpp 0c1e570"):
        builds.find("cpu")


def test_with_nothing_found_a_run_builds_the_pinned_tree_and_says_so_first(
        bare: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import source as sources

    events: list[str] = []
    tree = sources.SourceInfo(path=str(bare / "tree"), commit="0c1e570", kind="pypi", origin="pypi:llama-cpp-python==0.3.36")
    monkeypatch.setattr(sources, "fetch", lambda spec=None, dest=None, force=False: events.append(f"fetch {spec}") or tree)

    def fake_build(accel: str = "auto", extra_args=(), jobs=None, force=False, source=None, rpc=None):
        events.append(f"build {accel} {source.commit} rpc={rpc} after {len(caplog.records)} log lines")
        return cache.Build(bin_dir=str(bare / "built"), commit=source.commit, accel="cpu")

    monkeypatch.setattr(builds, "build", fake_build)
    monkeypatch.setattr(cache.os, "cpu_count", lambda: 4)
    with pytest.raises(LlamaspecError, match="no build of the pinned llama.cpp 0c1e570"):
        builds.find("cpu", build=cache.auto_build())  # the tests' LLAMASPEC_AUTO_BUILD=0: never built unasked
    assert events == []
    with caplog.at_level(logging.WARNING, logger="llamaspec"):
        got = builds.find("cpu", build=True)
    assert got.bin_dir == str(bare / "built")
    # rpc None: what `llamaspec build` makes (with the RPC backend where the tree has it)
    assert events == ["fetch pypi:llama-cpp-python==0.3.36", "build cpu 0c1e570 rpc=None after 1 log lines"]
    said = caplog.records[0].getMessage()
    assert said.startswith("no llama.cpp to run (no --bin-dir, no build of 0c1e570 (cpu), none on PATH): building "
                           "llama.cpp 0c1e570 (cpu) now, roughly 4 to 9 min on 4 cores"), said


def test_the_expected_build_time_is_the_last_build_here(bare: Path) -> None:
    _cached_build(bare / "cache")
    assert cache.expected_build_time("cpu") == "about 11 min (the last build on this machine took that long)"


def test_doctor_shows_every_place_looked_and_which_one_wins(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = fake_bin_dir(bare / "usr-local" / "bin")
    _on_path(monkeypatch, on_path)
    checks = doctor.llamacpp_checks()
    by_name = {c.name: c for c in checks}
    assert by_name["llama.cpp build"].value == f"{on_path} (commit 0c1e570) from PATH; results are tied to that build"
    assert by_name["llama.cpp: cache"].value == "no build of 0c1e570 (auto)"
    assert by_name["llama.cpp: PATH"].status == "ok" and by_name["llama.cpp: PATH"].value.endswith(
        "(llama-completion, llama-server, llama-speculative; build 0, commit 0c1e570): used")
    assert "not looked at (PATH comes first)" in by_name["llama.cpp: build"].value
    cached = _cached_build(bare / "cache")
    shown = CliRunner().invoke(main, ["doctor"])
    lines = [line for line in shown.output.splitlines() if line[7:].startswith(("llama.cpp build", "llama.cpp:"))]
    assert lines[0].startswith(f"[ ok ] llama.cpp build    {cached} (cpu, commit 0c1e570) from cache"), lines
    assert lines[1] == f"[ ok ] llama.cpp: cache   {cached} (cpu, commit 0c1e570): used"
    assert lines[2].startswith(f"[    ] llama.cpp: PATH    {on_path} (") and lines[2].endswith("not used, cache comes first")


def test_doctor_names_a_llama_cpp_on_path_too_old(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = bare / "old"
    _server_before_speculation(old)
    _program(old, "llama-speculative", (REC / "llama-speculative.help.txt").read_text(), "version: 3990 (1a2b3c4)\n")
    _program(old, "llama-completion", (REC / "llama-completion.help.txt").read_text(), "version: 3990 (1a2b3c4)\n")
    _on_path(monkeypatch, old)
    monkeypatch.setenv("LLAMASPEC_AUTO_BUILD", "1")
    by_name = {c.name: c for c in doctor.llamacpp_checks()}
    assert by_name["llama.cpp: PATH"].status == "ok"  # the command-line programs are fine: doctor asks for those
    (old / "llama-speculative").unlink()
    by_name = {c.name: c for c in doctor.llamacpp_checks()}
    assert by_name["llama.cpp: PATH"].status == "warn" and "holds no llama-speculative" in by_name["llama.cpp: PATH"].value
    assert by_name["llama.cpp build"].status == "warn" and "llama.cpp on PATH cannot serve" in by_name["llama.cpp build"].value
    assert "not built by a run while llama.cpp on PATH cannot serve it" in by_name["llama.cpp: build"].value


def test_a_clusters_machines_never_take_llama_cpp_from_path(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every machine of a study runs the commit the study binds: PATH's llama.cpp is not looked at there."""
    from llamaspec.llamacpp import build, machine

    _on_path(monkeypatch, fake_bin_dir(bare / "bin"))
    assert builds.find("cpu").source.startswith("PATH:")
    with pytest.raises(LlamaspecError, match="no build of the pinned llama.cpp 0c1e570"):
        machine._find(build, "cpu", rpc=False)


def test_a_run_with_a_llama_server_on_path_too_old_stops_with_one_line(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = bare / "old"
    _server_before_speculation(old)
    _on_path(monkeypatch, old)
    monkeypatch.setenv("LLAMASPEC_AUTO_BUILD", "1")  # even where a run may build, the user's own llama.cpp is not passed over
    monkeypatch.setenv("LLAMASPEC_MODELS", str(Path(__file__).resolve().parent.parent / "models"))  # the catalog; no model is read
    exp = bare / "e.yaml"
    exp.write_text("name: e\nbackend: llama-server\ncases:\n  - name: c\n    target: {model: smollm2-135m, variant: f32}\n"
                   "    draft: {model: smollm2-135m, variant: q4_1}\n    prompt: hi\n")
    done = CliRunner().invoke(main, ["run", str(exp)])
    assert done.exit_code == 1
    errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: llama.cpp on PATH in {old} is too old for this run: llama-server (build 3990, commit 1a2b3c4) "
                      "has no flag for the draft model (tried -md, --model-draft, --spec-draft-model)"], done.output
    assert "Hint: run `llamaspec build`" in done.output and "Traceback" not in done.output
    assert not (bare / "cache" / "builds").exists()  # nothing was built


@pytest.mark.llamacpp
@pytest.mark.slow
def test_a_real_run_with_the_llama_cpp_found_on_path(llama_build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned build's programs on PATH and no cached build: the run uses them, says so, and its
    stored provenance names them."""
    import sqlite3

    from llamaspec import models
    from llamaspec.base import paths
    models.ensure("smollm2-135m", ["f32", "q4_1"], tools=modeltools.tools(llama_build))
    monkeypatch.setenv("PATH", f"{llama_build.bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))  # no cached build
    cache._announced.clear()
    done = CliRunner().invoke(main, ["run", "smollm2-quicksort", "-n", "16", "-r", "1", "-t", "1"])
    assert done.exit_code == 0, done.output
    assert f"using llama.cpp from PATH: llama-speculative, llama-completion in {llama_build.bin_dir} " \
           "(build 0, commit 0c1e570); the results are tied to that build" in done.output
    with sqlite3.connect(paths.results_db()) as db:
        stored = [json.loads(p)["engine"] for (p,) in db.execute("SELECT provenance FROM runs")]
    assert stored and all(e["origin"] == "PATH" and e["source"] == f"PATH:{llama_build.bin_dir}" and e["commit"] == "0c1e570"
                          and e["build_key"].startswith("path-0c1e570-") for e in stored)
