"""Engines from other packages: the ``llamaspec.engines`` entry point group, read beside the built-ins.

Each test installs a tiny distribution of its own (a ``.dist-info`` folder and a module, on
``sys.path`` in a temporary folder), so the registry finds it through ``importlib.metadata`` as
it would find an installed package.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import EngineOptions
from llamaspec.registry import engines

ENGINE = '''
from llamaspec.theory.profiles import RoundProfile

HONOURED = frozenset({"draft_max", "n_predict"})
ROUND_PROFILES = (RoundProfile("{profile}", extra_draft_steps=0, first_token_from_prompt=False),)


class Opened:
    name = "fake"

    def __init__(self, options):
        self.options = options


def open_engine(options):
    return Opened(options)


def deployment(case, options, speculative=True):
    return ("deployed", case, options.accel, speculative)
'''


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    """Each test reads the entry points anew (the registry reads them once per process)."""
    engines.installed.cache_clear()
    yield
    engines.installed.cache_clear()


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_points: dict[str, str], *,
            module: str = "fake_llamaspec_engine", source: str | None = None, profile: str = "fake-speculative") -> None:
    """A distribution ``fake-llamaspec-engine`` declaring ``entry_points`` (name -> value) in the
    group, with ``module`` beside it (``source``: its text; default a complete engine)."""
    site = tmp_path / "site"
    info = site / "fake_llamaspec_engine-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-llamaspec-engine\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{engines.GROUP}]\n{lines}")
    (site / f"{module}.py").write_text(ENGINE.replace("{profile}", profile) if source is None else source)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_an_installed_engine_is_named_opened_deployed_and_its_profiles_read(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LlamaspecError, match="unknown engine 'fake'"):
        engines.open_engine("fake")
    engines.installed.cache_clear()
    install(tmp_path, monkeypatch, {"fake": "fake_llamaspec_engine"})
    assert engines.names() == ("llama.cpp", "llama-server", "transformers", "fake")
    opened = engines.open_engine("fake", EngineOptions(accel="cpu"))
    assert type(opened).__module__ == "fake_llamaspec_engine" and opened.options.accel == "cpu"  # type: ignore[attr-defined]
    assert engines.deployment("fake", "a case", EngineOptions(accel="cuda"), speculative=False) == (  # type: ignore[arg-type,comparison-overlap]
        "deployed", "a case", "cuda", False)
    assert engines.honoured("fake") == {"draft_max", "n_predict"}
    assert engines.round_profile("fake-speculative").name == "fake-speculative"
    assert engines.knows("fake-speculative") and "llama-server" in engines.round_profiles()
    assert engines.honoured("llama-server")  # the built-ins beside it, as before


def test_an_entry_point_under_a_built_in_name_is_left_out_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A package that takes a built-in's name is left out of the installed engines, with a warning
    naming it; the built-in stays the built-in, and asking for it reads no installed package."""
    install(tmp_path, monkeypatch, {"llama.cpp": "fake_llamaspec_engine", "other": "fake_llamaspec_engine"})
    called: list[int] = []
    real = engines.metadata.entry_points
    monkeypatch.setattr(engines.metadata, "entry_points", lambda **kw: called.append(1) or real(**kw))
    assert engines.honoured("llama-server") and not called  # a built-in: no package scanned
    with caplog.at_level("WARNING"):
        assert engines.names().count("llama.cpp") == 1 and "other" in engines.names()
    assert called and "fake-llamaspec-engine declares an engine named 'llama.cpp'" in caplog.text
    assert "rename its entry point" in caplog.text
    assert engines._module("llama.cpp").__name__ == "llamaspec.llamacpp.runner"  # not the package's


def test_an_entry_point_that_fails_to_load_says_which_package_and_leaves_the_others(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, monkeypatch, {"broken": "no_such_engine_module", "halfway": "halfway_engine",
                                    "missing": "halfway_engine:not_there"},
            module="halfway_engine", source="def open_engine(options):\n    return options\n")
    assert "broken" in engines.names()  # listed; loaded only when asked for
    with pytest.raises(LlamaspecError, match=r"engine 'broken' of fake-llamaspec-engine failed to load") as err:
        engines.open_engine("broken")
    assert "no_such_engine_module" in err.value.message and "reinstall fake-llamaspec-engine" in (err.value.hint or "")
    with pytest.raises(LlamaspecError, match="failed to load"):
        engines.open_engine("missing")
    with pytest.raises(LlamaspecError, match=r"engine 'halfway' .* has no deployment") as err:
        engines.open_engine("halfway")
    assert "deployment(case, options, speculative)" in (err.value.hint or "")
    assert engines.honoured("llama-server")  # a built-in still opens
    assert engines.round_profile("llama-speculative").name == "llama-speculative"  # built-ins' profiles load none


def test_an_installed_profile_under_a_built_in_programs_name_is_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, monkeypatch, {"fake": "fake_llamaspec_engine"}, profile="llama-server")
    with pytest.raises(LlamaspecError, match="two round profiles are named 'llama-server'"):
        engines.round_profiles()
