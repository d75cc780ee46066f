"""Facts about this machine that belong to no backend: CPU, memory, GPUs, the CUDA toolkit,
compilers and tools, and whether the CPU faults on instructions it advertises.

Every probe is cheap and bounded (``proc.run`` with a short timeout) and never raises for a
missing program: a missing tool is a fact to report, not an error. The build (``llamacpp.build``)
decides what to do with these facts; ``llamaspec doctor`` shows them.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec import proc

PROBE_TIMEOUT = 30.0  # seconds; a version query or a compiler's feature dump takes well under one


def _output(argv: list[str], timeout: float = PROBE_TIMEOUT) -> proc.Completed | None:
    """Run a quick query; None when the program is missing, cannot start or overruns."""
    done = proc.probe(argv, timeout=timeout)
    return None if done is None or done.timed_out else done


# --- CPU -----------------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        done = _output(["sysctl", "-n", "machdep.cpu.brand_string"])
        if done is not None and done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The instruction-set flags the CPU reports (``/proc/cpuinfo``; ``sysctl`` on macOS)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):  # x86 / ARM
                return line.split(":", 1)[1].split()
    except OSError:
        pass
    if platform.system() == "Darwin":
        done = _output(["sysctl", "-n", "machdep.cpu.features", "hw.optional"])
        return done.stdout.lower().split() if done is not None else []
    return []


def fingerprint() -> str:
    """This machine, for "was this build smoke-tested here?" (host name and CPU model)."""
    return f"{socket.gethostname()}|{cpu_model()}"


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


def native_isa(compiler: str | None = None) -> str:
    """What ``-march=native`` means to the compiler here (a build's CPU target), as a short hash."""
    cc = compiler or c_compiler()
    if not cc:
        return "unknown"
    # stdin is /dev/null: the preprocessor reads an empty file and dumps its predefined macros.
    done = _output([cc, "-march=native", "-dM", "-E", "-"])
    if done is None or done.returncode != 0:
        return "unknown"
    feats = sorted(line.split()[1] for line in done.stdout.splitlines() if line.startswith("#define __"))
    return hashlib.sha256("\n".join(feats).encode()).hexdigest()[:12]


def native_enables(flag: str, compiler: str | None = None) -> bool:
    """Whether ``-march=native`` turns on ``flag`` (e.g. ``-mamx-tile``) for GCC here."""
    cc = compiler or gcc_like()
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


def feature_faults(feature: str, compiler: str | None = None) -> bool:
    """Compile and run a one-instruction probe of ``feature``; True when it dies with SIGILL.
    False when it runs, or when it cannot be compiled here (then no build would use it either)."""
    spec = FEATURE_PROBES[feature]
    cc = compiler or gcc_like()
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

    return {
        "cpu": cpu_model(),
        "cores": psutil.cpu_count(logical=False),
        "threads": psutil.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "gpus": list(list_gpus()),
        "host": platform.node(),
    }
