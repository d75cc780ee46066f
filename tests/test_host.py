"""Which CPU measured a run (llamaspec.base.cpu.CpuInfo): parsed from recorded /proc/cpuinfo and sysctl
samples (tests/fixtures/host/README.md says where each comes from), recorded with every run, and
shown in `report`, a sweep's header and `doctor`, so that two machines with one CPU name are told
apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import FakeEngine

from llamaspec.base import cpu, host
from llamaspec.base.cpu import CpuInfo
from llamaspec.cli import main
from llamaspec.measure.contract import ModelPath
from llamaspec.measure.settings import Settings
from llamaspec.store.results import Store
from llamaspec.studies.experiment import load
from llamaspec.views import analysis, doctor, report

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "host"


def sample(name: str) -> CpuInfo:
    """A recorded sample, parsed as the machine it came from would."""
    text = (FIXTURES / name).read_text()
    return cpu.parse_sysctl(text) if name.startswith("sysctl-") else cpu.parse_cpuinfo(text)


zen4 = sample("cpuinfo-amd-epyc-zen4.txt")
sapphire_rapids = sample("cpuinfo-intel-xeon-8457c.txt")
grace = sample("cpuinfo-nvidia-grace.txt")
m3 = sample("sysctl-apple-m3.txt")


def test_x86_cpuinfo_gives_vendor_family_model_stepping_and_the_speed_flags() -> None:
    assert zen4 == CpuInfo("AMD EPYC", "AuthenticAMD", "25", "17", "1",
                           ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"))
    assert sapphire_rapids == CpuInfo("Intel(R) Xeon(R) Platinum 8457C", "GenuineIntel", "6", "143", "8",
                                      ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni",
                                       "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"))
    assert zen4.text() == ("AMD EPYC (AuthenticAMD family 25 model 17 stepping 1; "
                           "avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16)")


def test_arm_cpuinfo_and_macos_sysctl() -> None:
    # Arm's /proc/cpuinfo names no model: implementer, part and revision say which core it is
    assert grace == CpuInfo("ARM part 0xd4f", "ARM", None, "0xd4f", "r0p0",
                            ("neon", "fp16", "dotprod", "i8mm", "bf16", "sve", "sve2"))
    assert m3 == CpuInfo("Apple M3", None, None, None, None, ("neon", "fp16", "dotprod", "i8mm", "bf16"))
    assert "FEAT_SME: 0" in (FIXTURES / "sysctl-apple-m3.txt").read_text()  # a 0 is a feature it lacks


def test_two_kinds_of_one_cpu_name_are_told_apart() -> None:
    """A Zen 3 guest names its CPU "AMD EPYC" as a Zen 4 one does (issue 38): the model and the
    flags differ, and so does everything shown."""
    zen3 = cpu.parse_cpuinfo((FIXTURES / "cpuinfo-amd-epyc-zen4.txt").read_text()
                              .replace("model\t\t: 17", "model\t\t: 1")
                              .replace(" avx512f", " ").replace(" avx512bw", " ").replace(" avx512_vnni", " ")
                              .replace(" avx512_bf16", " "))
    assert zen3.name == zen4.name and zen3.model == "1" and "avx512f" not in (zen3.flags or ())
    assert zen3.text() != zen4.text() and zen3.short() != zen4.short()


def test_a_stored_run_without_the_cpus_kind_shows_its_name_alone() -> None:
    assert CpuInfo.from_hardware({"cpu": "AMD EPYC"}) == CpuInfo("AMD EPYC")
    assert CpuInfo.from_hardware({"cpu": "AMD EPYC"}).text() == "AMD EPYC"
    assert CpuInfo.from_hardware({"cpu": "AMD EPYC", "cpu_info": zen4.to_dict()}) == zen4


def test_every_run_records_the_cpu_and_doctor_shows_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    here = host.hardware()
    assert CpuInfo.from_hardware(here) == cpu.cpu_info() and here["cpu"] == cpu.cpu_info().name
    monkeypatch.setattr(cpu, "cpu_info", lambda: sapphire_rapids)
    monkeypatch.setattr(host, "sample_noise", lambda seconds: None)  # 2 s of waiting that shows nothing here
    checks = {c.name: c.value for c in doctor.examine()}
    assert checks["cpu"].startswith("Intel(R) Xeon(R) Platinum 8457C (GenuineIntel family 6 model 143 stepping 8); ")
    assert checks["cpu features"] == " ".join(sapphire_rapids.flags or ())


def test_report_and_the_sweep_header_show_the_cpu_and_its_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fakes import swept

    monkeypatch.setattr("llamaspec.models.gguf_model",
                        lambda model, variant, tools=None: ModelPath(f"{model}:{variant}", str(tmp_path / f"{variant}.gguf"), variant))
    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)
    exp = load("smollm2-quicksort").with_overrides(Settings(n_predict=16))
    store = Store.open()
    monkeypatch.setattr(cpu, "cpu_info", lambda: sapphire_rapids)
    swept(exp, {"draft_max": (1, 2)}, FakeEngine(drift=0.0), store)
    monkeypatch.setattr(cpu, "cpu_info", lambda: zen4)  # the same study later, on another machine
    later = swept(exp, {"draft_max": (1, 3)}, FakeEngine(drift=0.0), store)

    header = analysis.sweep_report(store, later.sweep_id, plot=False).render().splitlines()[1]
    assert f"; {zen4.text()}, 1 threads" in header, header
    md = report.markdown(store, "smollm2-quicksort", plot=False)
    assert f"- hardware: {zen4.text()}; " in md
    assert f"- also measured on: {sapphire_rapids.text()} (runs " in md
    by_machine = CliRunner().invoke(main, ["report", "smollm2-quicksort", "--compare", "machine", "--no-plot"])
    assert by_machine.exit_code == 0 and sapphire_rapids.short() in by_machine.output and zen4.short() in by_machine.output
