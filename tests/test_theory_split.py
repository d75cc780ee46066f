"""The theory package's seams: engines register their round profiles, the model names no engine,
and the models room reaches llama.cpp's converter and quantizer through the engine registry."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from llamaspec import theory
from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import engines
from llamaspec.theory import profiles

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


def test_every_engine_registers_its_profiles_and_the_old_names_still_import() -> None:
    known = theory.registered()
    assert {"llama-speculative", "llama-speculative-simple", "llama-server", "transformers-assisted",
            "transformers-prompt-lookup"} <= set(known)
    from llamaspec.hf.profiles import TRANSFORMERS_ASSISTED
    from llamaspec.llamacpp.profiles import LLAMA_SERVER
    assert theory.LLAMA_SERVER is LLAMA_SERVER and theory.TRANSFORMERS_ASSISTED is TRANSFORMERS_ASSISTED
    assert theory.round_profile("speculative") is theory.LLAMA_SPECULATIVE
    assert theory.Observation(draft_max=2, n_drafted=4, n_accept=2, n_generated=6, spec_decode_tps=2.0,
                              baseline_decode_tps=1.0).profile is theory.LLAMA_SPECULATIVE


def test_a_second_profile_under_a_taken_name_is_refused_and_an_unknown_name_names_the_known() -> None:
    clash = theory.RoundProfile("llama-server", extra_draft_steps=3, first_token_from_prompt=False)
    with pytest.raises(LlamaspecError, match="two round profiles are named 'llama-server'"):
        profiles.register(clash)
    with pytest.raises(LlamaspecError, match="no round profile for program 'nope'") as err:
        theory.round_profile("nope")
    assert "transformers-assisted" in (err.value.hint or "")


def test_the_model_registry_loads_profiles_without_torch_and_models_reach_llamacpp_through_it() -> None:
    code = ("import sys; from llamaspec import theory; theory.registered(); "
            "sys.exit('torch' in sys.modules or 'transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    tools = engines.model_tools()
    assert tools.__name__ == "llamaspec.llamacpp.modeltools"
    assert callable(tools.converter) and callable(tools.quantizer)
