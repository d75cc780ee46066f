"""Shared test set-up.

- Every test gets its own results store and data folder (never the user's real one).
- Builds and downloads stay in the real cache (``LLAMASPEC_CACHE``), so the llama.cpp build
  and the offline models are made once per machine and reused by CI and later sessions.
- ``llama_build`` gives the real CPU build of the pinned llama.cpp (building it if needed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Markers whose tests need an extra that a clone with only the `dev` extra lacks: skipped, saying
# so, where it is missing (`make test` installs every extra, so nothing is skipped there).
NEEDS = {
    "convert": (("torch", "transformers"), "the convert extra (pip install -e '.[convert]', or make setup-convert)"),
    "hf": (("torch", "transformers"), "the hf extra (pip install -e '.[hf]', or make setup-convert)"),
    "cluster": (("ray",), "the cluster extra (pip install -e '.[cluster]', or make setup-convert)"),
}


def _missing(modules: tuple[str, ...]) -> list[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]


# `make test` runs the slow tier in two processes, each taking whole files (pytest-xdist's
# `--dist loadfile --no-loadscope-reorder`, tests/make_test.sh), in the order its workers collect
# them: these files, the longest, go first (in every run: a worker is told `dist = "no"`), so that
# no process is left with a long one when the other has finished (by each file's time with the
# builds cached, --durations=0, 2026-12-07; test_cluster_ray first all the same: its build is the
# first the background makes). The order is all this decides.
LONGEST_FIRST = ("test_cluster_ray.py", "test_server.py", "test_hf_experiments.py", "test_adhoc_llamacpp.py",
                 "test_watch_llamacpp.py", "test_run_llamacpp.py", "test_install.py", "test_deploy.py",
                 "test_pasted_llamacpp.py", "test_hub.py", "test_deploy_check.py", "test_hf_runner.py")


def _longest_first(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: within a file, its own order


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _longest_first(items)
    absent = {marker: (missing, how) for marker, (modules, how) in NEEDS.items() if (missing := _missing(modules))}
    for item in items:
        for marker, (missing, how) in absent.items():
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)}: {how}"))
                break


@pytest.fixture(autouse=True)
def _fake_engines_measure_no_load(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test whose engine is a fake (no llamacpp marker) measures nothing of this machine: what
    else the machine does meanwhile (other tests, builds) is not its runs' load. A study decides
    nothing across a change of load, so the real meter would make its verdict the machine's. The
    tests of the meter itself, and those about the load, set their own."""
    if request.node.get_closest_marker("llamacpp") is None and request.node.path.name != "test_noise.py":
        from llamaspec.base import host

        monkeypatch.setattr(host.NoiseMeter, "stop", lambda self: None)


@pytest.fixture(autouse=True)
def _isolated_data(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path_factory.mktemp("llamaspec-data")
    monkeypatch.setenv("LLAMASPEC_DATA", str(data))
    monkeypatch.setenv("LLAMASPEC_LOCK", str(data / "measure.lock"))  # tests never queue behind a user's measurement
    monkeypatch.delenv("LLAMASPEC_BIN_DIR", raising=False)
    monkeypatch.setenv("LLAMASPEC_AUTO_BUILD", "0")  # a test that finds no llama.cpp fails; it never compiles one unasked
    monkeypatch.setenv("LLAMASPEC_CONFIG", str(data / "config"))  # never the user's own experiments
    monkeypatch.delenv("LLAMASPEC_DEBUG", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # --cluster reads it: a user's own must not send tests to a cluster
    return data


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models folder and a download cache of the test's own (for tests that fetch or derive)."""
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("LLAMASPEC_MODELS", str(folder))
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    return folder


@pytest.fixture(scope="session")
def llama_build():
    """The pinned llama.cpp, CPU build with llama-server, from the build cache (built on first use)."""
    import llamacpp_builds

    # with llama-server: the build leaves it for when first needed, and many tests start it
    return llamacpp_builds.pinned()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The loopback hub, with huggingface_hub (already imported or not) pointed at it and a cache,
    home and token of the test's own."""
    import huggingface_hub.constants as constants
    from hub_server import Hub
    from huggingface_hub import file_download

    with Hub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        template = server.url + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        monkeypatch.setattr(file_download, "HUGGINGFACE_CO_URL_TEMPLATE", template, raising=False)  # imported by name there (below 1.0)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
        yield server


@pytest.fixture()
def fake_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every catalog model resolves to a path under tmp_path, and every pair fits (for the fake engines)."""
    from llamaspec.measure.contract import ModelPath

    monkeypatch.setattr("llamaspec.models.gguf_model", lambda model, variant, tools=None: ModelPath(
        f"{model}:{variant}", str(tmp_path / f"{variant}.gguf"), variant))
    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)
