"""Facts about this machine that belong to no backend: CPU, memory, GPUs, the CUDA toolkit,
compilers and tools, and whether the CPU faults on instructions it advertises.

Every probe is cheap and bounded (``proc.run`` with a short timeout) and never raises for a
missing program: a missing tool is a fact to report, not an error. The build (``llamacpp.build``)
decides what to do with these facts; ``llamaspec doctor`` shows them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llamaspec.base import cpu, proc
from llamaspec.base.stats import percent_text

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 30.0  # seconds; a version query or a compiler's feature dump takes well under one


def _output(argv: list[str], timeout: float = PROBE_TIMEOUT) -> proc.Completed | None:
    """Run a quick query; None when the program is missing, cannot start or overruns."""
    done = proc.probe(argv, timeout=timeout)
    return None if done is None or done.timed_out else done


# --- CPU ---------------------------------------------------------------------------------------

def fingerprint() -> str:
    """This machine, for "was this build smoke-tested here?" (host name and CPU model)."""
    return f"{socket.gethostname()}|{cpu.cpu_info().name}"


# --- compilers and tools ---------------------------------------------------------------------------

def c_compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def cxx_compiler() -> str | None:
    return shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def gcc_like() -> str | None:
    """A compiler that answers ``-Q --help=target`` (GCC) first, else any C compiler."""
    return shutil.which("gcc") or shutil.which("cc")


def tool_version(argv: list[str]) -> str | None:
    """The first line a tool prints for ``argv`` (e.g. ``cmake --version``); None when it is missing."""
    if not shutil.which(argv[0]):
        return None
    done = _output(argv, timeout=20)
    if done is None:
        return None
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text else "present"


def native_isa() -> str:
    """What ``-march=native`` means to the compiler here (a build's CPU target), as a short hash."""
    cc = c_compiler()
    if not cc:
        return "unknown"
    # stdin is /dev/null: the preprocessor reads an empty file and dumps its predefined macros.
    done = _output([cc, "-march=native", "-dM", "-E", "-"])
    if done is None or done.returncode != 0:
        return "unknown"
    feats = sorted(line.split()[1] for line in done.stdout.splitlines() if line.startswith("#define __"))
    return hashlib.sha256("\n".join(feats).encode()).hexdigest()[:12]


def native_enables(flag: str) -> bool:
    """Whether ``-march=native`` turns on ``flag`` (e.g. ``-mamx-tile``) for GCC here."""
    cc = gcc_like()
    if not cc:
        return False
    done = _output([cc, "-march=native", "-Q", "--help=target"])
    if done is None:
        return False
    for line in done.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == flag:
            return parts[-1] == "[enabled]"
    return False


# --- instructions the CPU advertises but faults on --------------------------------------------------

@dataclass(frozen=True)
class FeatureProbe:
    compiler_flag: str  # how GCC names the feature (what -march=native turns on or not)
    source: str  # C source that executes one of its instructions


# VMs and containers can advertise AMX without enabling it: the first tile instruction dies with SIGILL.
FEATURE_PROBES: dict[str, FeatureProbe] = {
    "amx": FeatureProbe(
        compiler_flag="-mamx-tile",
        source=r"""
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    syscall(SYS_arch_prctl, 0x1023, 18); /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
    unsigned char cfg[64] = {0};
    cfg[0] = 1; cfg[16] = 64; cfg[48] = 16;
    _tile_loadconfig(cfg);
    _tile_zero(0);
    _tile_release();
    return 0;
}
""",
    ),
}


def feature_faults(feature: str) -> bool:
    """Compile and run a one-instruction probe of ``feature``; True when it dies with SIGILL.
    False when it runs, or when it cannot be compiled here (then no build would use it either)."""
    spec = FEATURE_PROBES[feature]
    cc = gcc_like()
    if not cc:
        return False
    with tempfile.TemporaryDirectory(prefix="llamaspec-probe-") as tmp:
        src = Path(tmp, "probe.c")
        src.write_text(spec.source)
        exe = Path(tmp, "probe")
        compiled = _output([cc, "-O1", spec.compiler_flag, str(src), "-o", str(exe)], timeout=60)
        if compiled is None or compiled.returncode != 0:
            return False
        ran = _output([str(exe)])
        return ran is not None and ran.signal_name == "SIGILL"


# --- GPUs and the CUDA toolkit -----------------------------------------------------------------------

def list_gpus() -> tuple[str, ...]:
    """NVIDIA GPUs as ``nvidia-smi -L`` lists them (none without the driver)."""
    if not shutil.which("nvidia-smi"):
        return ()
    done = _output(["nvidia-smi", "-L"])
    if done is None or done.returncode != 0:
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip())


@dataclass(frozen=True)
class CudaToolkit:
    nvcc: str | None
    version: str | None
    cublas: str | None
    gpus: tuple[str, ...]


NO_CUDA = CudaToolkit(None, None, None, ())


def find_nvcc() -> str | None:
    nvcc = shutil.which("nvcc")
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if not nvcc and home and Path(home, "bin", "nvcc").is_file():
            nvcc = str(Path(home, "bin", "nvcc"))
    return nvcc


def find_cublas(nvcc: str) -> str | None:
    """libcublas beside the toolkit, on LD_LIBRARY_PATH, or in the system library folders."""
    root = Path(nvcc).resolve().parent.parent
    candidates = [root / "lib64", root / "lib", root / "targets" / f"{platform.machine()}-linux" / "lib"]
    candidates += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    candidates += [Path(f"/usr/lib/{platform.machine()}-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib")]
    for d in candidates:
        hits = sorted(d.glob("libcublas.so*")) if d.is_dir() else []
        if hits:
            return str(hits[0])
    return None


def parse_nvcc_version(text: str) -> str | None:
    m = re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else None


def find_cuda() -> CudaToolkit:
    nvcc = find_nvcc()
    if not nvcc:
        return CudaToolkit(None, None, None, list_gpus())
    done = _output([nvcc, "--version"])
    version = parse_nvcc_version(done.stdout) if done is not None else None
    return CudaToolkit(nvcc, version, find_cublas(nvcc), list_gpus())


# --- everything a result records about the machine -------------------------------------------------

def hardware() -> dict[str, Any]:
    import psutil

    found = cpu.cpu_info()
    return {
        "cpu": found.name,
        "cpu_info": found.to_dict(),  # the CPU's kind and the flags that move llama.cpp's speed (CpuInfo)
        "cores": psutil.cpu_count(logical=False),
        "threads": psutil.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "gpus": list(list_gpus()),
        "host": platform.node(),
    }


# --- machine noise: CPU steal and other processes' load during a measurement ---------------------

NOISY_STEAL = 0.05  # a share of CPU time stolen by the hypervisor worth a warning
NOISY_OTHER_LOAD = 0.25  # a share of the machine's CPU used by other processes worth a warning


@dataclass(frozen=True)
class CpuTimes:
    """The whole machine's CPU time so far, in seconds summed over every CPU."""

    total: float  # every column: what all CPUs had in the time since boot
    busy: float  # user + nice + system + irq + softirq: running something (guests included)
    steal: float | None  # taken by the hypervisor for other guests (None: the platform does not say)


def times_of(fields: dict[str, float]) -> CpuTimes:
    """The machine's CPU time from psutil's ``cpu_times()`` fields, in seconds (Linux's are
    /proc/stat's columns: user nice system idle iowait irq softirq steal guest guest_nice, proc(5))."""
    total = sum(v for k, v in fields.items() if k not in ("guest", "guest_nice"))  # inside user and nice already
    idle = fields["idle"] + fields.get("iowait", 0.0) + fields.get("steal", 0.0)
    return CpuTimes(total=total, busy=total - idle, steal=fields.get("steal"))


def cpu_times() -> CpuTimes:
    """This machine's CPU time now (steal only where the platform counts it: Linux since 2.6.11)."""
    import psutil

    return times_of(psutil.cpu_times()._asdict())


def own_cpu_seconds() -> float:
    """CPU time of this process and every process under it: the live ones, and (in each one's
    ``children_*``) the ones it has reaped. A child that ends inside a window moves its time into
    its parent's ``children_*``, so the difference over the window still counts it once."""
    import psutil

    def used(p: psutil.Process) -> float:
        t = p.cpu_times()
        return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)

    me = psutil.Process()
    total = used(me)
    for child in me.children(recursive=True):
        try:
            total += used(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


@dataclass(frozen=True)
class NoiseSample:
    """What else the machine did during one measurement window (or several, combined).

    Seconds are CPU seconds summed over every CPU; the shares are of the machine's CPU time in the
    window: ``steal`` taken by the hypervisor, ``other_load`` used by processes outside this
    measurement's process tree (this process and its children)."""

    seconds: float  # wall time of the window(s)
    cpu_seconds: float  # the machine's CPU time in it (wall time x CPUs, as the kernel counts)
    busy_seconds: float
    own_seconds: float
    steal_seconds: float | None
    windows: int = 1

    @property
    def steal(self) -> float | None:
        return self.steal_seconds / self.cpu_seconds if self.steal_seconds is not None and self.cpu_seconds > 0 else None

    @property
    def other_load(self) -> float | None:
        return max(self.busy_seconds - self.own_seconds, 0.0) / self.cpu_seconds if self.cpu_seconds > 0 else None

    @property
    def noisy(self) -> bool:
        return (self.steal or 0.0) >= NOISY_STEAL or (self.other_load or 0.0) >= NOISY_OTHER_LOAD

    def text(self, during: str = "during these runs") -> str:
        """"9 % of CPU time was stolen by the hypervisor during these runs; other processes used 35 % of the CPU"."""
        other = f"other processes used {_share(self.other_load)} of the CPU" if self.other_load is not None else ""
        if self.steal is None:
            return f"{other} {during}".strip()
        return f"{_share(self.steal)} of CPU time was stolen by the hypervisor {during}" + (f"; {other}" if other else "")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "steal": self.steal, "other_load": self.other_load}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> NoiseSample | None:
        if not data:
            return None
        return cls(float(data["seconds"]), float(data["cpu_seconds"]), float(data["busy_seconds"]),
                   float(data["own_seconds"]), None if data.get("steal_seconds") is None else float(data["steal_seconds"]),
                   int(data.get("windows", 1)))

    @classmethod
    def combine(cls, samples: Sequence[NoiseSample | None]) -> NoiseSample | None:
        """Several windows as one: seconds summed, so a long window weighs more than a short one."""
        got = [s for s in samples if s is not None]
        if not got:
            return None
        steals = [s.steal_seconds for s in got]
        return cls(sum(s.seconds for s in got), sum(s.cpu_seconds for s in got), sum(s.busy_seconds for s in got),
                   sum(s.own_seconds for s in got), None if any(v is None for v in steals) else sum(v or 0.0 for v in steals),
                   sum(s.windows for s in got))


def _share(value: float) -> str:
    """A share in whole percent; a small one that is not zero says so ("<1%", not "0%")."""
    return "<1%" if 0 < value < 0.005 else percent_text(value)


class NoiseMeter:
    """Start before a measurement, stop after it: ``NoiseMeter.start() ... meter.stop() -> NoiseSample``.

    Cheap (one read of /proc/stat and of this process tree's times at each end); never raises:
    where the machine does not say, ``stop()`` returns None."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._cpu0 = self._read(cpu_times)
        self._own0 = self._read(own_cpu_seconds)

    @classmethod
    def start(cls) -> NoiseMeter:
        return cls()

    @staticmethod
    def _read(probe: Callable[[], Any]) -> Any:
        try:
            return probe()
        except (OSError, ValueError, ImportError) as exc:
            log.debug("machine noise not measurable here: %s", exc)
            return None

    def stop(self) -> NoiseSample | None:
        seconds = time.monotonic() - self._t0
        cpu1, own1 = self._read(cpu_times), self._read(own_cpu_seconds)
        if None in (self._cpu0, self._own0, cpu1, own1):
            return None
        steal = (cpu1.steal - self._cpu0.steal) if cpu1.steal is not None and self._cpu0.steal is not None else None
        return NoiseSample(seconds, cpu1.total - self._cpu0.total, cpu1.busy - self._cpu0.busy, own1 - self._own0, steal)


def sample_noise(seconds: float = 2.0) -> NoiseSample | None:
    """What the machine does while this process waits ``seconds`` (``llamaspec doctor``)."""
    meter = NoiseMeter.start()
    time.sleep(seconds)
    return meter.stop()
