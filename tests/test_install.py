"""llamaspec installed as a tool (a wheel in a venv, pipx), not run from its clone.

The quick tests fake the installed layout (no clone; the shipped files in the package's
``_shipped`` folder) in this process; the slow ones build the real wheel, install it into a fresh
venv and run it from an empty folder with no clone around it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import real_checks
from conftest import ROOT

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import modeltools
from llamaspec.models import catalog, pins
from llamaspec.studies import experiment, prompts

SHIPPED_NAMES = sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml"))


def _package_data(folder: Path) -> Path:
    """What the wheel's build step puts in llamaspec/_shipped, copied from this clone."""
    pytest.importorskip("setuptools")  # the build step's module subclasses its build_py
    from llamaspec._build_hooks import shipped_files

    for rel in shipped_files(ROOT):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, folder / rel)
    return folder


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as an installed llamaspec: no clone, package data in tmp/_shipped, started
    in a folder that looks like a project (experiments/, models/catalog.yaml) but is not its own."""
    shipped = _package_data(tmp_path / "site-packages" / "llamaspec" / "_shipped")
    monkeypatch.setattr(paths, "checkout", lambda: None)
    monkeypatch.setattr(paths, "package_data_dir", lambda: shipped)
    for var in ("LLAMASPEC_ROOT", "LLAMASPEC_MODELS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    decoy = tmp_path / "somewhere"
    (decoy / "experiments").mkdir(parents=True)
    (decoy / "models").mkdir()
    (decoy / "models" / "catalog.yaml").write_text("models: {}\n")
    (decoy / "experiments" / "smollm2-quicksort.yaml").write_text("name: decoy\n")
    monkeypatch.chdir(decoy)
    return shipped


def test_an_installed_llamaspec_reads_its_package_data_never_the_current_folder(installed: Path, tmp_path: Path) -> None:
    assert paths.project_root() is None
    assert paths.shipped_root() == installed
    assert paths.catalog_path() == installed / "models" / "catalog.yaml"
    assert catalog.load().path == installed / "models" / "catalog.yaml"
    assert "smollm2-135m" in catalog.load().models
    assert experiment.locate("smollm2-quicksort") == installed / "experiments" / "smollm2-quicksort.yaml"
    assert experiment.load("smollm2-quicksort").name == "smollm2-quicksort"  # not the decoy
    assert sorted(experiment.known_experiments()) == SHIPPED_NAMES
    assert prompts.locate("llamaspec-mini") == installed / "experiments" / "prompts" / "llamaspec-mini.jsonl"


def test_an_installed_llamaspec_writes_models_to_the_data_folder_and_the_source_to_the_cache(installed: Path,
                                                                                          tmp_path: Path) -> None:
    assert paths.models_dir() == paths.data_dir() / "models"
    assert paths.vendor_dir() == tmp_path / "cache" / "source" / "llama.cpp"
    # The shipped catalog's pins go where the models are, not into site-packages.
    assert pins.lock_path(paths.catalog_path()) == paths.data_dir() / "models" / "catalog.lock"
    pins.save(pins.lock_path(paths.catalog_path()), pins.Pin("smollm2-135m", "o/r", "main", "a" * 40))
    assert not (installed / "models" / "catalog.lock").exists()


def test_a_catalog_in_the_models_folder_replaces_the_shipped_one_and_keeps_its_pins_beside_it(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "my-models"
    own.mkdir()
    (own / "catalog.yaml").write_text("models:\n  mine:\n    source: {kind: path, path: mine.gguf, type: f16}\n    variants: [f16]\n")
    monkeypatch.setenv("LLAMASPEC_MODELS", str(own))
    assert catalog.load().path == own / "catalog.yaml"
    assert list(catalog.load().models) == ["mine"]
    assert pins.lock_path(catalog.load().path) == own / "catalog.lock"
    assert paths.relative_base() == own  # a relative path: in that catalog


def test_an_installed_llamaspec_without_its_package_data_says_so(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.rmtree(installed)
    with pytest.raises(LlamaspecError) as err:
        paths.shipped_root()
    assert err.value.message == f"llamaspec's shipped files (catalog, experiments) are missing: no {installed}"
    assert "reinstall llamaspec" in (err.value.hint or "")


def test_a_clone_reads_its_own_top_level_files() -> None:
    assert paths.checkout() == ROOT
    assert paths.shipped_root() == ROOT
    assert paths.experiments_dir() == ROOT / "experiments"
    assert paths.shipped_catalog() == ROOT / "models" / "catalog.yaml"
    assert pins.lock_path(ROOT / "models" / "catalog.yaml") == ROOT / "models" / "catalog.lock"


def _experiment(folder: Path, name: str, description: str) -> Path:
    text = (ROOT / "experiments" / "smollm2-quicksort.yaml").read_text()
    text = text.replace("description: ", f"description: {description} ", 1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return folder / f"{name}.yaml"


def test_experiments_by_name_current_folder_then_yours_then_shipped_nearest_said_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(experiment, "_said", set())
    yours = paths.config_dir() / "experiments"
    here = tmp_path / "work"
    monkeypatch.chdir(_experiment(here, "smollm2-quicksort", "HERE").parent)
    _experiment(yours, "smollm2-quicksort", "YOURS")
    _experiment(yours, "mine", "MINE")
    caplog.set_level(logging.INFO, logger="llamaspec.studies.experiment")

    assert experiment.load("smollm2-quicksort").description.startswith("HERE")
    assert experiment.load("smollm2-quicksort").description.startswith("HERE")  # said once, not twice
    said = [r for r in caplog.records if "smollm2-quicksort" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert said[0].getMessage() == (
        f"experiment smollm2-quicksort: {here / 'smollm2-quicksort.yaml'} (current folder), which comes before "
        f"{yours / 'smollm2-quicksort.yaml'} (your experiments) and {ROOT / 'experiments' / 'smollm2-quicksort.yaml'} "
        "(shipped)")

    caplog.clear()
    assert experiment.load("mine").description.startswith("MINE")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"experiment mine: {yours / 'mine.yaml'} (your experiments)")]

    (here / "smollm2-quicksort.yaml").unlink()
    assert experiment.find("smollm2-quicksort") == [("your experiments", yours / "smollm2-quicksort.yaml"),
                                                    ("shipped", ROOT / "experiments" / "smollm2-quicksort.yaml")]
    assert sorted(experiment.known_experiments()) == sorted([*SHIPPED_NAMES, "mine"])
    assert experiment.known_experiments()["smollm2-quicksort"][1] == yours / "smollm2-quicksort.yaml"


def test_an_unknown_experiment_names_the_places_looked_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _experiment(paths.config_dir() / "experiments", "mine", "MINE")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LlamaspecError) as err:
        experiment.locate("smollm2-quiksort")
    assert err.value.message == "unknown experiment 'smollm2-quiksort'"
    assert "mine, " in (err.value.hint or "") and "smollm2-quicksort" in (err.value.hint or "")
    assert f"NAME.yaml in the current folder or in {paths.config_dir() / 'experiments'}" in (err.value.hint or "")


def test_a_prompt_set_of_your_own_by_name(tmp_path: Path) -> None:
    folder = paths.config_dir() / "experiments" / "prompts"
    folder.mkdir(parents=True)
    shutil.copyfile(ROOT / "experiments" / "prompts" / "llamaspec-mini.jsonl", folder / "mine.jsonl")
    assert prompts.locate("mine") == folder / "mine.jsonl"
    assert prompts.locate("llamaspec-mini") == ROOT / "experiments" / "prompts" / "llamaspec-mini.jsonl"


def test_the_wheel_build_step_ships_the_catalog_every_experiment_and_prompt_set() -> None:
    pytest.importorskip("setuptools")
    from llamaspec._build_hooks import shipped_files

    files = {str(p) for p in shipped_files(ROOT)}
    assert "models/catalog.yaml" in files
    assert {f"experiments/{n}.yaml" for n in SHIPPED_NAMES} <= files
    assert {str(p.relative_to(ROOT)) for p in (ROOT / "experiments" / "prompts").iterdir()} <= files
    assert not [f for f in files if f.startswith("models/") and f != "models/catalog.yaml"]  # no model files


# --- the real wheel in a fresh venv --------------------------------------------------------------------


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this clone, installed with its dependencies (no extras: no torch) in
    a fresh venv; once per session. Prints how long each step took."""
    base = tmp_path_factory.mktemp("wheel")
    started = time.monotonic()
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                            "-w", str(base / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((base / "dist").glob("llamaspec-*.whl"))
    made = time.monotonic()
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                str(wheel)], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    print(f"wheel built in {made - started:.1f} s, venv made and installed in {time.monotonic() - made:.1f} s")
    return venv


def _tool_env(tmp_path: Path, path_dirs: list[str] | None = None) -> dict[str, str]:
    """The environment of a user who installed llamaspec: nothing points at this clone; a build
    cache, data, config and models folder of the test's own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LLAMASPEC_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(HOME=str(tmp_path / "home"), LLAMASPEC_DATA=str(tmp_path / "data"), LLAMASPEC_CACHE=str(tmp_path / "cache"),
               LLAMASPEC_LOCK=str(tmp_path / "measure.lock"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               HF_HUB_OFFLINE="1", LLAMASPEC_AUTO_BUILD="0")  # a test never compiles llama.cpp unasked
    if path_dirs:
        env["PATH"] = os.pathsep.join([*path_dirs, env.get("PATH", "")])
    return env


def _empty_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


@pytest.mark.slow
def test_the_installed_wheel_carries_the_clones_files_and_no_clone_is_used(wheel_venv: Path, tmp_path: Path) -> None:
    here = _empty_folder(tmp_path)
    python = wheel_venv / "bin" / "python"
    probe = ("import importlib.util, json; from llamaspec.base import paths; "
             "print(json.dumps([str(paths.project_root()), str(paths.shipped_root()), str(paths.models_dir()), "
             "str(paths.vendor_dir()), importlib.util.find_spec('torch') is None]))")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=_tool_env(tmp_path), cwd=here,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    import json

    root, shipped, models, vendor, no_torch = json.loads(done.stdout)
    assert root == "None" and no_torch
    assert Path(shipped).name == "_shipped" and "site-packages" in shipped
    assert models == str(tmp_path / "data" / "models") and vendor == str(tmp_path / "cache" / "source" / "llama.cpp")
    clone = {p.relative_to(ROOT / "experiments"): p.read_bytes() for p in (ROOT / "experiments").rglob("*") if p.is_file()}
    wheel = {p.relative_to(Path(shipped) / "experiments"): p.read_bytes()
             for p in (Path(shipped) / "experiments").rglob("*") if p.is_file()}
    assert wheel == clone
    assert (Path(shipped) / "models" / "catalog.yaml").read_bytes() == (ROOT / "models" / "catalog.yaml").read_bytes()
    listed = subprocess.run([str(wheel_venv / "bin" / "llamaspec"), "doctor", "--json"], capture_output=True, text=True,
                            env=_tool_env(tmp_path), cwd=here, timeout=120)
    assert f"installed (shipped files in {shipped})" in listed.stdout, listed.stdout + listed.stderr
    assert list(here.iterdir()) == []  # nothing written where it was started


def _offline_pair_folder(tmp_path: Path, offline_pair) -> Path:
    """A models folder of the test's own holding the offline pair (linked) and no catalog: the
    installed tool reads its shipped catalog."""
    target, draft = offline_pair
    assert Path(target.path).parent == Path(draft.path).parent
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / Path(target.path).parent.name).symlink_to(Path(target.path).parent)
    return folder


@pytest.fixture(scope="session")
def offline_pair(llama_build):
    from llamaspec import models

    return models.resolve("smollm2-135m", "f32", tools=modeltools.tools(llama_build)), models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(llama_build))


@pytest.mark.llamacpp
@pytest.mark.slow
def test_the_installed_wheel_runs_a_shipped_experiment_from_an_empty_folder(wheel_venv: Path, llama_build, offline_pair,
                                                                            tmp_path: Path) -> None:
    """The pinned build's programs on PATH (an empty build cache, no source tree: none fetched, none built)."""
    here = _empty_folder(tmp_path)
    env = {**_tool_env(tmp_path, path_dirs=[llama_build.bin_dir]),
           "LLAMASPEC_MODELS": str(_offline_pair_folder(tmp_path, offline_pair))}
    started = time.monotonic()
    done = subprocess.run([str(wheel_venv / "bin" / "llamaspec"), "run", "smollm2-quicksort", "-n", "16", "--repeats", "1",
                           "-t", "1"], capture_output=True, text=True, env=env, cwd=here, timeout=900)
    print(f"run took {time.monotonic() - started:.1f} s\n", done.stdout, done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "experiment smollm2-quicksort: " in done.stderr and "_shipped/experiments/smollm2-quicksort.yaml (shipped)" in done.stderr
    assert f"using llama.cpp from PATH: llama-speculative, llama-completion in {llama_build.bin_dir}" in done.stderr
    assert not (tmp_path / "cache" / "builds").exists() and not (tmp_path / "cache" / "source").exists()
    assert "speedup" in done.stdout.lower() and "lossless" in done.stdout.lower()
    assert (tmp_path / "data" / "results.sqlite").is_file()
    assert list(here.iterdir()) == []


@pytest.mark.llamacpp
@pytest.mark.slow
def test_the_installed_wheel_sweeps_two_gguf_files_with_llamacpp_on_path(wheel_venv: Path, llama_build, offline_pair,
                                                                        tmp_path: Path) -> None:
    """From an empty folder, in a fresh venv made from the wheel, with llama.cpp
    on PATH and no clone: `llamaspec sweep -m T.gguf -md D.gguf --draft 1,2,4,8` ends with a decision
    of one of its kinds with that kind's parts: a recommendation or "no draft" with the deploy
    command that names those files (the draft only when recommended), "undecided" with what to
    measure next. Which kind, this machine's CPU and load decide (issue 38): not asserted."""
    target, draft = offline_pair
    here = _empty_folder(tmp_path)
    env = _tool_env(tmp_path, path_dirs=[llama_build.bin_dir])  # an empty build cache: the programs on PATH
    started = time.monotonic()
    # The one-line command, kept short: one prompt (the built-in workload is a decision over 54 prompts, 54 times
    # the time), 16 tokens, one thread, 8 pairs.
    done = subprocess.run([str(wheel_venv / "bin" / "llamaspec"), "sweep", "-m", target.path, "-md", draft.path,
                           "--draft", "1,2,4,8", "-p", "def quicksort(xs):", "-n", "16", "-t", "1", "--budget", "8"], capture_output=True, text=True,
                          env=env, cwd=here, timeout=1800)
    print(f"sweep took {time.monotonic() - started:.1f} s\n", done.stdout, done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    assert str(Path(llama_build.bin_dir)) in done.stderr  # said which programs it found on PATH
    kind = real_checks.answer_text(done.stdout, str(target.path), str(draft.path))
    print(f"the sweep's answer here: {kind}")
    assert not (tmp_path / "cache" / "builds").exists()  # nothing built
    assert list(here.iterdir()) == []
