"""``llamaspec doctor`` reports this machine and a hint for each problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaspec.base import host
from llamaspec.cli import main
from llamaspec.views import doctor


def test_doctor_reports_the_essentials() -> None:
    names = {c.name for c in doctor.examine()}
    assert {"os", "cpu", "memory", "compiler", "cmake", "cuda toolkit", "accel (auto)", "llama.cpp source"} <= names


def test_doctor_json_and_hints(monkeypatch) -> None:
    monkeypatch.setattr(doctor.host, "tool_version", lambda argv: None)  # no compiler, no cmake
    result = CliRunner().invoke(main, ["doctor", "--json"])
    checks = {c["name"]: c for c in json.loads(result.output)}
    assert checks["cmake"]["status"] == "fail" and "install CMake" in checks["cmake"]["hint"]
    assert checks["compiler"]["status"] == "fail" and checks["compiler"]["hint"]
    assert CliRunner().invoke(main, ["doctor"]).exit_code == 1


def test_doctor_without_a_source_tree_still_finds_the_pinned_build(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A second checkout sharing the build cache: the missing tree is a warning, the build is there."""
    root = tmp_path / "checkout"
    (root / "experiments").mkdir(parents=True)
    monkeypatch.setenv("LLAMASPEC_ROOT", str(root))
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LLAMASPEC_LLAMACPP", raising=False)
    folder = tmp_path / "cache" / "builds" / "0c1e570-cpu-0123456789ab"
    (folder / "bin").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"bin_dir": str(folder / "bin"), "commit": "0c1e570",
                                                      "accel": "cpu", "smoke_host": host.fingerprint()}))
    (folder.parent / "latest-0c1e570-cpu").write_text(str(folder))
    checks = {c.name: c for c in doctor.examine()}
    assert checks["llama.cpp source"].status == "warn" and "no llama.cpp source" in checks["llama.cpp source"].value
    assert checks["llama.cpp build"].status == "ok" and checks["llama.cpp build"].value.startswith(str(folder / "bin"))
    assert "(cpu, commit 0c1e570)" in checks["llama.cpp build"].value
    assert checks["accel (auto)"].value.split()[0] in ("cpu", "cuda", "metal")


def test_doctor_names_a_faulting_amx_and_the_workaround(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "native_enables", lambda flag: flag == "-mamx-tile")
    monkeypatch.setattr(host, "feature_faults", lambda feature: feature == "amx")
    amx = {c.name: c for c in doctor.examine()}["amx"]
    assert amx.status == "warn" and "SIGILL" in amx.value and "-mno-amx" in amx.hint
    monkeypatch.setattr(host, "feature_faults", lambda feature: False)
    assert {c.name: c for c in doctor.examine()}["amx"].status == "ok"
