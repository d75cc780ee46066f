"""Machine noise as a measured fact: CPU steal from /proc/stat and other processes' load, per
measurement window (llamaspec.base.host.NoiseMeter), stored with the run and shown with the baseline CV."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from llamaspec.base import host
from llamaspec.measure.contract import Measurement
from llamaspec.measure.summary import summarize

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "host"
# Two real /proc/stat files of this 2-core VM, read 2 s apart while other work kept both cores busy.
STAT_A = (FIXTURES / "proc-stat-a.txt").read_text()
STAT_B = (FIXTURES / "proc-stat-b.txt").read_text()
# A child that burns this much CPU time (its own process_time, whatever the machine's load) and exits.
BURN_S = 0.5
BURN = f"import time\nwhile time.process_time() < {BURN_S}: pass\n"


def times_from(stat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> host.CpuTimes:
    """host.cpu_times() as psutil reads it from this recorded /proc/stat."""
    (tmp_path / "stat").write_text(stat)
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    return host.cpu_times()


linux = pytest.mark.skipif(not psutil.LINUX or os.sysconf("SC_CLK_TCK") != 100, reason="Linux /proc/stat, 100 ticks a second")


@linux
def test_cpu_times_read_the_aggregate_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # cpu  146744 64926 20781 760677 391 0 343 2745 0 0 (user nice system idle iowait irq softirq steal ...)
    t = times_from(STAT_A, tmp_path, monkeypatch)
    assert t.total == pytest.approx((146744 + 64926 + 20781 + 760677 + 391 + 0 + 343 + 2745) / 100)
    assert t.busy == pytest.approx((146744 + 64926 + 20781 + 0 + 343) / 100)
    assert t.steal == pytest.approx(27.45)


def test_guest_time_is_counted_once_and_a_platform_without_steal_says_none() -> None:
    t = host.times_of({"user": 10.0, "nice": 2.0, "system": 3.0, "idle": 80.0, "iowait": 1.0, "irq": 0.5, "softirq": 0.5,
                       "steal": 3.0, "guest": 4.0, "guest_nice": 1.0})  # guest time is inside user and nice
    assert t.total == pytest.approx(100.0) and t.busy == pytest.approx(16.0) and t.steal == pytest.approx(3.0)
    mac = host.times_of({"user": 10.0, "nice": 0.0, "system": 5.0, "idle": 85.0})
    assert mac.steal is None and mac.total == pytest.approx(100.0) and mac.busy == pytest.approx(15.0)
    sample = host.NoiseSample(1.0, 2.0, 1.0, 0.5, None)
    assert sample.steal is None and sample.text() == "other processes used 25% of the CPU during these runs"


@linux
def test_two_recorded_samples_give_the_window_shares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = times_from(STAT_A, tmp_path, monkeypatch), times_from(STAT_B, tmp_path, monkeypatch)
    # 403 ticks in 2 s on 2 CPUs: 3 stolen, 400 busy, none idle
    s = host.NoiseSample(2.0, b.total - a.total, b.busy - a.busy, 1.0, b.steal - a.steal)  # type: ignore[operator]
    assert s.cpu_seconds == pytest.approx(4.03)
    assert s.steal == pytest.approx(3 / 403)
    assert s.other_load == pytest.approx((4.00 - 1.0) / 4.03)
    assert s.text() == ("1% of CPU time was stolen by the hypervisor during these runs; other processes used 74% of the CPU")


def test_combine_weighs_windows_by_their_cpu_time():
    short = host.NoiseSample(1.0, 2.0, 2.0, 0.0, 1.0)  # half stolen, everything else other processes
    long = host.NoiseSample(9.0, 18.0, 9.0, 9.0, 0.0)  # nothing stolen, all the busy time ours
    both = host.NoiseSample.combine([short, None, long])
    assert both is not None and both.windows == 2
    assert both.steal == pytest.approx(1.0 / 20.0)
    assert both.other_load == pytest.approx(2.0 / 20.0)
    assert host.NoiseSample.combine([None]) is None
    assert host.NoiseSample.from_dict(both.to_dict()) == both


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="Linux /proc/stat")
def test_a_busy_process_outside_the_tree_is_other_load_and_a_busy_child_is_not():
    # Outside: the shell starts the burner in the background and exits, so the burner is orphaned
    # (re-parented away from us) and is no longer in this process's tree.
    meter = host.NoiseMeter.start()
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" >/dev/null 2>&1 & echo $!', BURN],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout.strip())
    try:
        deadline = time.monotonic() + 120
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the burner did not finish"
            time.sleep(0.05)
    finally:
        if psutil.pid_exists(pid):
            psutil.Process(pid).kill()
    outside = meter.stop()
    assert outside is not None
    # by construction: the burner used BURN_S of CPU the machine counted as busy and our tree did not
    # (less one clock tick at each end of the window)
    assert outside.busy_seconds - outside.own_seconds >= BURN_S - 0.05
    assert outside.other_load is not None and outside.other_load > 0

    # Inside: the same burner as our child counts as this measurement's own.
    meter = host.NoiseMeter.start()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    inside = meter.stop()
    assert inside is not None and inside.own_seconds >= BURN_S - 0.05


def _m(mode: str, tps: float, noise: host.NoiseSample, pair: int = 0) -> Measurement:
    return Measurement(mode=mode, ok=True, error=None, argv=(), exit_code=0, wall_seconds=1.0, peak_rss_bytes=None,
                       n_predict=32, decode_tps=tps, text="same", noise=noise, pair=pair)


def test_the_summary_says_what_the_machine_did_next_to_the_baseline_cv():
    from llamaspec.views import report

    noisy = host.NoiseSample(2.0, 4.0, 3.0, 1.56, 0.36)  # 9 % stolen, other processes 36 %
    measured = [_m("baseline", 10.0, noisy), _m("speculative", 15.0, noisy),
                _m("speculative", 15.0, noisy, 1), _m("baseline", 14.0, noisy, 1)]  # baseline CV ~ 24 %
    s = summarize(measured)
    assert s.paired and s.pairs == 2 and s.noise is not None and s.noise.windows == 4
    cv = next(w for w in s.warnings if "(CV)" in w)
    assert cv.endswith("meanwhile 9% of CPU time was stolen by the hypervisor during these runs; "
                       "other processes used 36% of the CPU")
    again = type(s).from_dict(s.to_dict())
    assert again.noise == s.noise
    text = report.table("t", s, None)
    assert "  machine: 9% of CPU time was stolen by the hypervisor during these runs; other processes used 36% " \
           "of the CPU (measured over 4 generations)" in text

    steady = [_m("baseline", 10.0, noisy), _m("speculative", 15.0, noisy)]
    assert any(w.startswith("the machine was busy: 9% of CPU time was stolen") for w in summarize(steady).warnings)
    quiet = host.NoiseSample(2.0, 4.0, 1.0, 1.0, 0.0)
    assert not any("machine" in w for w in summarize([_m("baseline", 10.0, quiet), _m("speculative", 15.0, quiet)]).warnings)


def test_doctor_hints_when_the_machine_is_noisy():
    from llamaspec.views import doctor

    stolen = doctor.noise_check(host.NoiseSample(2.0, 4.0, 0.5, 0.0, 0.4))
    assert stolen.status == "warn" and "hypervisor" in stolen.hint and "10% of CPU time was stolen" in stolen.value
    busy = doctor.noise_check(host.NoiseSample(2.0, 4.0, 3.0, 0.0, 0.0))
    assert busy.status == "warn" and "other processes" in busy.hint
    assert doctor.noise_check(host.NoiseSample(2.0, 4.0, 0.2, 0.0, 0.0)).status == "ok"
    assert doctor.noise_check(None).status == "info"


def test_run_case_stores_each_measurements_noise_and_the_summary_combines_them(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch):
    from fakes import fake_bin_dir

    from llamaspec.llamacpp import build
    from llamaspec.llamacpp.runner import LlamaCppEngine
    from llamaspec.measure.contract import ModelPath, ResolvedCase
    from llamaspec.measure.settings import Settings
    from llamaspec.store.results import Store
    from llamaspec.store.rows import measurements_of
    from llamaspec.studies.run import run_case

    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)
    s = Settings(n_predict=64, threads=1, draft_max=8, timeout=60.0).with_defaults()
    case = ResolvedCase("exp", "python", ModelPath("t:f16", str(tmp_path / "t.gguf")), ModelPath("d:q4_0", str(tmp_path / "d.gguf")),
                        "# Quick-sort implementation in Python and sample usage:", None, s)
    store = Store.open(tmp_path / "r.sqlite")
    result = run_case(case, LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin"))), store, repeats=2,
                      hardware={"cpu": "test"})
    rows = store.measurements(result.run_id)
    assert len(rows) == 4 and all(r["noise"]["windows"] == 1 and r["noise"]["seconds"] > 0 for r in rows)
    again = measurements_of(rows)
    assert [m.noise for m in again] == [m.noise for m in result.measurements]
    stored = type(result.summary).from_dict(store.run(result.run_id)["summary"])
    assert stored.noise == host.NoiseSample.combine([m.noise for m in result.measurements])
    assert "cpu_steal" in store.export().splitlines()[0]


def test_a_small_share_is_not_shown_as_zero():
    assert host.NoiseSample(1.0, 100.0, 10.0, 10.0, 0.3).text().startswith("<1% of CPU time was stolen")
    assert host.NoiseSample(1.0, 100.0, 10.0, 10.0, 0.0).text() == ("0% of CPU time was stolen by the hypervisor during "
                                                                    "these runs; other processes used 0% of the CPU")
