"""The theory package's seams: the engines define their round profiles and the registry above them
finds one by program name, the model names no engine and is given the profile it models, and the
models room is handed llama.cpp's converter and quantizer by its callers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from llamaspec import theory
from llamaspec.base.errors import LlamaspecError
from llamaspec.registry import engines

PACKAGE = Path(__file__).resolve().parent.parent / "llamaspec"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


@pytest.mark.parametrize("room", ["theory", "models"])
def test_a_room_below_the_engines_imports_no_engine_package(room: str) -> None:
    for path in sorted((PACKAGE / room).glob("*.py")):
        engine_imports = {m for m in _imports(path) if m.startswith(("llamaspec.llamacpp", "llamaspec.hf."))}
        assert not engine_imports, f"{path.name} imports {engine_imports}"


def test_no_theory_module_is_over_450_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "theory").glob("*.py")}
    assert sizes and max(sizes.values()) <= 450, sizes


def test_a_module_over_450_lines_says_why_in_its_docstring() -> None:
    """The rule of the theory split for the whole package: a module past about 450 lines states
    its reason, in a paragraph of its docstring starting "Its size:"."""
    import ast

    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 450 and "\nIts size: " not in "\n" + (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(str(path.relative_to(PACKAGE)))
    assert not unexplained, unexplained


def test_every_engine_gives_its_profiles_to_the_registry_and_the_model_is_given_one() -> None:
    known = engines.round_profiles()
    assert {"llama-speculative", "llama-speculative-simple", "llama-server", "transformers-assisted",
            "transformers-prompt-lookup"} <= set(known)
    from llamaspec.hf.profiles import TRANSFORMERS_ASSISTED
    from llamaspec.llamacpp.profiles import LLAMA_SERVER, LLAMA_SPECULATIVE
    assert known["llama-server"] is LLAMA_SERVER and known["transformers-assisted"] is TRANSFORMERS_ASSISTED
    assert engines.round_profile("speculative") is LLAMA_SPECULATIVE
    counts = {"draft_max": 2, "n_drafted": 4, "n_accept": 2, "n_generated": 6, "spec_decode_tps": 2.0,
              "baseline_decode_tps": 1.0}
    assert theory.Observation(**counts, profile=LLAMA_SERVER).profile is LLAMA_SERVER
    with pytest.raises(TypeError, match="profile"):  # no program assumed: the model names none
        theory.Observation(**counts)  # type: ignore[call-arg]


def test_an_unknown_program_names_the_known() -> None:
    with pytest.raises(LlamaspecError, match="no round profile for program 'nope'") as err:
        engines.round_profile("nope")
    assert "transformers-assisted" in (err.value.hint or "")
    assert not engines.knows("nope") and engines.knows("llama-server")


def test_the_registry_reads_profiles_without_torch_and_lends_llamacpps_model_tools() -> None:
    code = ("import sys; from llamaspec.registry import engines; engines.round_profiles(); "
            "sys.exit('torch' in sys.modules or 'transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    tools = engines.model_tools()
    assert type(tools).__module__ == "llamaspec.llamacpp.modeltools" and tools.build is None
    assert engines.model_tools() is tools  # one per process, whoever asks
