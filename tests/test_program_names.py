"""One spelling of each program and one meaning of each name.

``Settings.program`` holds the short name a user types; a measurement records the binary's name.
``settings.program_binary`` is the one mapping, and every table that names programs agrees with it:
the round profiles the speedup model reads, the counting profiles of llama.cpp's programs, the
transformers engine's program per spec type and the pasted-command reader.
"""

from __future__ import annotations

import importlib

import pytest

from llamaspec import theory
from llamaspec.hf import runner as hf_runner
from llamaspec.llamacpp import command
from llamaspec.llamacpp.counting import COUNTING_PROFILES
from llamaspec.llamacpp.profiles import SPECULATIVE_SIMPLE
from llamaspec.measure.contract import Measurement
from llamaspec.measure.settings import PROGRAM_BINARIES, PROGRAM_CHOICES, program_binary
from llamaspec.registry import engines
from llamaspec.store.rows import measurement_of


@pytest.mark.parametrize("program", PROGRAM_CHOICES)
def test_every_settings_program_maps_to_its_binary_and_its_round_profile(program: str) -> None:
    binary = program_binary(program)
    assert binary == f"llama-{program}" and binary != program
    assert program_binary(binary) == binary  # the binary's name stays as it is
    profile = engines.round_profile(binary)
    assert profile.name == binary and engines.round_profile(program) is profile
    assert engines.knows(program) and engines.knows(binary)


def test_names_that_are_no_program_are_unknown() -> None:
    assert not engines.knows(None) and not engines.knows("llama-cli") and program_binary("llama-cli") == "llama-cli"
    with pytest.raises(Exception, match="no round profile for program 'llama-cli'"):
        engines.round_profile("llama-cli")


@pytest.mark.parametrize("key", sorted(COUNTING_PROFILES))
def test_each_counting_profile_records_the_binary_whose_round_profile_it_counts_with(key: tuple[str, str]) -> None:
    counting = COUNTING_PROFILES[key]
    assert counting.role in PROGRAM_CHOICES
    # the runner records program_binary(role): the speedup model finds the same shape by that name
    assert engines.round_profile(program_binary(counting.role)) is counting.shape


@pytest.mark.parametrize("spec_type", hf_runner.SPEC_TYPES)
def test_each_transformers_spec_type_records_a_program_with_a_round_profile(spec_type: str) -> None:
    program = hf_runner.PROGRAM_OF_SPEC_TYPE[spec_type]
    assert engines.round_profile(program).name == program
    assert set(hf_runner.PROGRAM_OF_SPEC_TYPE) == set(hf_runner.SPEC_TYPES)


@pytest.mark.parametrize("module", engines.ROUND_PROFILE_MODULES)
def test_each_round_profile_module_gives_the_registry_every_profile_it_defines(module: str) -> None:
    defined = [v for v in vars(importlib.import_module(module)).values() if isinstance(v, theory.RoundProfile)]
    assert defined and set(defined) == set(importlib.import_module(module).ROUND_PROFILES)
    assert all(engines.round_profiles()[p.name] is p for p in defined)


def test_a_pasted_binary_reads_as_the_settings_program_it_maps_from() -> None:
    for program, binary in PROGRAM_BINARIES.items():
        assert command.program_of(f"/opt/llama.cpp/build/bin/{binary}") == (binary, "llama.cpp", program)
    assert command.program_of("./speculative") == ("speculative", "llama.cpp", "speculative")  # the 2023 binary


@pytest.mark.parametrize("stored", ["speculative-simple", "llama-speculative-simple"])
def test_a_stored_row_in_either_spelling_reads_the_same_round_profile(stored: str) -> None:
    row = {"mode": "speculative", "ok": 1, "wall_seconds": 1.0, "program": stored, "n_predict": 72, "n_accept": 57}
    m = measurement_of(row)
    assert isinstance(m, Measurement) and m.program == stored
    assert engines.round_profile(m.program or "") is SPECULATIVE_SIMPLE
    assert engines.round_profile(m.program or "").rounds(72, 57) == 15
