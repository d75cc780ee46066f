"""``llamaspec doctor`` reports this machine and a hint for each problem."""

from __future__ import annotations

import json

from click.testing import CliRunner

from llamaspec import doctor
from llamaspec.cli import main


def test_doctor_reports_the_essentials() -> None:
    names = {c.name for c in doctor.examine()}
    assert {"os", "cpu", "memory", "compiler", "cmake", "cuda toolkit", "backend (auto)", "llama.cpp source"} <= names


def test_doctor_json_and_hints(monkeypatch) -> None:
    monkeypatch.setattr(doctor, "_version", lambda argv: None)  # no compiler, no cmake
    result = CliRunner().invoke(main, ["doctor", "--json"])
    checks = {c["name"]: c for c in json.loads(result.output)}
    assert checks["cmake"]["status"] == "fail" and "install CMake" in checks["cmake"]["hint"]
    assert checks["compiler"]["status"] == "fail" and checks["compiler"]["hint"]
    assert CliRunner().invoke(main, ["doctor"]).exit_code == 1
