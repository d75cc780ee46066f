"""Build llama.cpp (CPU, CUDA or Metal) into a cache keyed by source commit, backend and flags.

A build lives in ``$LLAMASPEC_CACHE/builds/<commit>-<backend>-<key>/`` with ``bin/`` (static
binaries, relocatable) and ``manifest.json``, written last: a folder without a manifest is not
a build. A prebuilt binaries folder can stand in for a build (``--bin-dir``/``LLAMASPEC_BIN_DIR``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llamaspec import atomic, paths, proc
from llamaspec.errors import LlamaspecError
from llamaspec.llamacpp import source as sources
from llamaspec.progress import Progress

log = logging.getLogger(__name__)

BACKENDS = ("cpu", "cuda", "metal")

# The programs llamaspec runs, with older names where llama.cpp renamed them. Each tree gets
# the first name of each row that its CMake files define.
PROGRAMS: dict[str, tuple[str, ...]] = {
    "speculative": ("llama-speculative", "speculative"),
    "speculative-simple": ("llama-speculative-simple",),
    "completion": ("llama-completion", "llama-cli", "main"),
    "quantize": ("llama-quantize", "quantize"),
    "server": ("llama-server", "server"),
    "bench": ("llama-bench", "llama-bench"),
}
REQUIRED_PROGRAMS = ("speculative", "completion", "quantize")
# llama.cpp's RPC server (a worker that holds model layers for another machine's programs).
# Its CMake target exists only with GGML_RPC=ON, so it is added by plan(rpc=True), never found
# by tree_targets alone.
RPC_PROGRAM = ("rpc-server", ("ggml-rpc-server", "rpc-server"))

# Per backend, the CMake cache entries that select it. Declarative on purpose: a new backend
# or a renamed option is one row.
BACKEND_CMAKE: dict[str, dict[str, str]] = {
    "cpu": {"GGML_NATIVE": "ON", "GGML_CUDA": "OFF", "GGML_METAL": "OFF"},
    "cuda": {"GGML_NATIVE": "ON", "GGML_CUDA": "ON", "GGML_METAL": "OFF"},
    "metal": {"GGML_NATIVE": "ON", "GGML_CUDA": "OFF", "GGML_METAL": "ON", "GGML_METAL_EMBED_LIBRARY": "ON"},
}
COMMON_CMAKE = {
    "CMAKE_BUILD_TYPE": "Release",
    "BUILD_SHARED_LIBS": "OFF",  # static binaries can move into the cache and still run
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_CURL": "OFF",
    "LLAMA_OPENSSL": "OFF",
}

# CPU features that compilers enable under -march=native but that can fault at run time (VMs
# and containers that advertise AMX without enabling it). Each maps to the flags that switch
# it off and a probe that executes one of its instructions.
@dataclass(frozen=True)
class Workaround:
    gcc_feature: str  # how the compiler names the feature (-march=native turns it on or not)
    disable: tuple[str, ...]  # the flags that switch it off
    probe: str  # C source that executes one of its instructions


CPU_WORKAROUNDS: dict[str, Workaround] = {
    "amx": Workaround(
        gcc_feature="-mamx-tile",
        disable=("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"),
        probe=r"""
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


@dataclass(frozen=True)
class BuildPlan:
    source: sources.SourceInfo
    backend: str
    cmake_defs: dict[str, str]
    extra_args: tuple[str, ...]
    cpu_disable: tuple[str, ...]
    targets: dict[str, str]  # role -> target name
    native_isa: str

    @property
    def key(self) -> str:
        return cache_key(self.source.commit, self.backend, self.cmake_args(), tuple(sorted(self.targets.values())), self.native_isa)

    @property
    def folder(self) -> Path:
        return paths.builds_dir() / f"{_safe(self.source.commit)}-{self.backend}-{self.key}"

    def cmake_args(self) -> list[str]:
        defs = dict(self.cmake_defs)
        if self.cpu_disable:
            flags = " ".join(self.cpu_disable)
            defs["CMAKE_C_FLAGS"] = flags
            defs["CMAKE_CXX_FLAGS"] = flags
        return [f"-D{k}={v}" for k, v in sorted(defs.items())] + list(self.extra_args)


@dataclass(frozen=True)
class Build:
    """A usable set of llama.cpp programs and where they came from."""

    bin_dir: str
    commit: str
    backend: str
    cmake_args: list[str] = field(default_factory=list)
    programs: dict[str, str] = field(default_factory=dict)  # role -> file name
    source: str = ""
    key: str = ""
    built_at: str = ""
    build_seconds: float = 0.0
    smoke_host: str = ""
    prebuilt: bool = False

    def program(self, role: str) -> Path:
        name = self.programs.get(role)
        if not name:
            raise LlamaspecError(
                f"this llama.cpp build has no {role} program ({', '.join(PROGRAMS.get(role, (role,)))})",
                hint=f"build it with `llamaspec build`, or add it to {self.bin_dir}",
            )
        return Path(self.bin_dir) / name

    @property
    def label(self) -> str:
        return f"llama.cpp {self.commit} ({self.backend})"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def cache_key(commit: str, backend: str, cmake_args: Sequence[str], targets: Sequence[str], native_isa: str) -> str:
    """Same commit, backend, flags, programs and native CPU target: same build."""
    blob = json.dumps(
        {"commit": commit, "backend": backend, "cmake": sorted(cmake_args), "targets": sorted(targets), "isa": native_isa,
         "os": platform.system(), "arch": platform.machine()},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# --- backend selection ---------------------------------------------------------------------

@dataclass(frozen=True)
class CudaToolkit:
    nvcc: str | None
    version: str | None
    cublas: str | None
    gpus: tuple[str, ...]


def find_cuda() -> CudaToolkit:
    nvcc = shutil.which("nvcc")
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if not nvcc and home and Path(home, "bin", "nvcc").is_file():
            nvcc = str(Path(home, "bin", "nvcc"))
    version = None
    cublas = None
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release (\d+\.\d+)", out)
        version = m.group(1) if m else None
        root = Path(nvcc).resolve().parent.parent
        candidates = [root / "lib64", root / "lib", root / "targets" / f"{platform.machine()}-linux" / "lib"]
        candidates += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
        candidates += [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib")]
        for d in candidates:
            hits = sorted(d.glob("libcublas.so*")) if d.is_dir() else []
            if hits:
                cublas = str(hits[0])
                break
    return CudaToolkit(nvcc, version, cublas, list_gpus())


def list_gpus() -> tuple[str, ...]:
    """NVIDIA GPUs as ``nvidia-smi -L`` lists them (none without the driver)."""
    if not shutil.which("nvidia-smi"):
        return ()
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if done.returncode != 0:
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip())


def select_backend(requested: str = "auto", system: str | None = None, machine: str | None = None,
                   cuda: CudaToolkit | None = None) -> str:
    """``auto``: Metal on Apple Silicon, CUDA when a complete toolkit and a GPU are there, else CPU."""
    system = system or platform.system()
    machine = machine or platform.machine()
    if requested not in ("auto", *BACKENDS):
        raise LlamaspecError(f"unknown backend {requested!r}", hint=f"choose one of: auto, {', '.join(BACKENDS)}")
    if requested == "metal" and system != "Darwin":
        raise LlamaspecError("the Metal backend needs macOS", hint="use --backend cpu (or cuda on an NVIDIA machine)")
    if requested in ("cuda", "auto"):
        cuda = cuda or (find_cuda() if system == "Linux" or requested == "cuda" else CudaToolkit(None, None, None, ()))
    if requested == "cuda":
        assert cuda is not None
        if not cuda.nvcc:
            raise LlamaspecError("CUDA requested but no CUDA toolkit found (nvcc)",
                                 hint="install the CUDA toolkit and put nvcc on PATH (or set CUDA_HOME), or use --backend cpu")
        if not cuda.cublas:
            raise LlamaspecError(f"CUDA toolkit {cuda.version} found at {cuda.nvcc}, but not cuBLAS (libcublas.so)",
                                 hint="install cuBLAS (e.g. the nvidia-cublas or libcublas-dev package), or use --backend cpu")
        return "cuda"
    if requested != "auto":
        return requested
    if system == "Darwin" and machine == "arm64":
        return "metal"
    assert cuda is not None
    if cuda.nvcc and cuda.cublas and cuda.gpus:
        return "cuda"
    return "cpu"


def why_not_cuda(cuda: CudaToolkit) -> str | None:
    """When a CUDA toolkit is there but auto still picks the CPU: what is missing."""
    if not cuda.nvcc or (cuda.cublas and cuda.gpus):
        return None
    missing = "cuBLAS" if not cuda.cublas else "an NVIDIA GPU (nvidia-smi -L)"
    return f"CUDA toolkit {cuda.version} found but not {missing}"


def backend_cmake(backend: str, cuda: CudaToolkit | None = None) -> dict[str, str]:
    defs = {**COMMON_CMAKE, **BACKEND_CMAKE[backend]}
    if backend == "cuda":
        # Build for the GPUs present rather than llama.cpp's long default list: minutes, not an hour.
        defs["CMAKE_CUDA_ARCHITECTURES"] = "native" if cuda and cuda.gpus else "90;89;86;80"
        if cuda and cuda.nvcc:
            defs["CMAKE_CUDA_COMPILER"] = cuda.nvcc
    return defs


# --- CPU features ------------------------------------------------------------------------------

def native_isa(compiler: str | None = None) -> str:
    """What -march=native means to the compiler here (the build's CPU target)."""
    cc = compiler or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return "unknown"
    done = subprocess.run([cc, "-march=native", "-dM", "-E", "-"], input="", capture_output=True, text=True)
    if done.returncode != 0:
        return "unknown"
    feats = sorted(line.split()[1] for line in done.stdout.splitlines() if line.startswith("#define __") and "__" in line)
    return hashlib.sha256("\n".join(feats).encode()).hexdigest()[:12]


def native_enables(flag: str, compiler: str | None = None) -> bool:
    cc = compiler or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        return False
    done = subprocess.run([cc, "-march=native", "-Q", "--help=target"], capture_output=True, text=True)
    for line in done.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == flag:
            return parts[-1] == "[enabled]"
    return False


def probe_faults(workaround: str, compiler: str | None = None) -> bool:
    """Compile and run a one-instruction probe; True when it dies with SIGILL."""
    spec = CPU_WORKAROUNDS[workaround]
    cc = compiler or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.c")
        src.write_text(spec.probe)
        exe = Path(tmp, "probe")
        compiled = subprocess.run([cc, "-O1", spec.gcc_feature, str(src), "-o", str(exe)], capture_output=True)
        if compiled.returncode != 0:
            return False
        ran = subprocess.run([str(exe)], capture_output=True)
        return ran.returncode == -4  # SIGILL


def cpu_workarounds(backend: str) -> tuple[str, ...]:
    """Flags that switch off CPU features the compiler would use but this CPU faults on."""
    if backend == "metal" or platform.machine() not in ("x86_64", "AMD64"):
        return ()
    flags: list[str] = []
    for name, spec in CPU_WORKAROUNDS.items():
        if native_enables(spec.gcc_feature) and probe_faults(name):
            log.warning("this CPU advertises %s but faults on it: building with %s", name.upper(), " ".join(spec.disable))
            flags.extend(spec.disable)
    return tuple(flags)


# --- planning and building ---------------------------------------------------------------------

def tree_targets(tree: Path) -> dict[str, str]:
    """Which of our programs this tree defines, by its CMake ``set(TARGET ...)`` lines."""
    defined: set[str] = set()
    for cmake in list(tree.glob("examples/*/CMakeLists.txt")) + list(tree.glob("tools/*/CMakeLists.txt")):
        defined.update(re.findall(r"set\s*\(\s*TARGET\s+([\w-]+)\s*\)", cmake.read_text(errors="replace")))
    targets = {}
    for role, names in PROGRAMS.items():
        for name in names:
            if name in defined:
                targets[role] = name
                break
    return targets


def plan(source: sources.SourceInfo, backend: str = "auto", extra_args: Sequence[str] = (),
         cpu_disable: Sequence[str] | None = None, rpc: bool = False) -> BuildPlan:
    chosen = select_backend(backend)
    cuda = find_cuda() if chosen == "cuda" or (backend == "auto" and platform.system() == "Linux") else None
    reason = why_not_cuda(cuda) if cuda and chosen == "cpu" else None
    if reason:
        log.info("%s: building for the CPU", reason)
    defs = backend_cmake(chosen, cuda)
    defs["LLAMA_BUILD_COMMIT"] = source.commit
    defs["LLAMA_BUILD_NUMBER"] = "0"
    targets = tree_targets(source.tree)
    missing = [r for r in REQUIRED_PROGRAMS if r not in targets]
    if missing:
        raise LlamaspecError(f"{source.tree} defines no {' / '.join(PROGRAMS[missing[0]])} program",
                             hint="use a llama.cpp tree that has examples/speculative and tools/quantize")
    if rpc:
        defs["GGML_RPC"] = "ON"
        targets[RPC_PROGRAM[0]] = rpc_target(source.tree)
    disable = tuple(cpu_disable) if cpu_disable is not None else cpu_workarounds(chosen)
    return BuildPlan(source, chosen, defs, tuple(extra_args), disable, targets, native_isa())


def rpc_target(tree: Path) -> str:
    """The RPC server's CMake target in this tree (``ggml-rpc-server``, ``rpc-server`` before)."""
    defined: set[str] = set()
    for cmake in list(tree.glob("tools/rpc/CMakeLists.txt")) + list(tree.glob("examples/rpc/CMakeLists.txt")):
        defined.update(re.findall(r"set\s*\(\s*TARGET\s+([\w-]+)\s*\)", cmake.read_text(errors="replace")))
    name = next((n for n in RPC_PROGRAM[1] if n in defined), None)
    if name is None:
        raise LlamaspecError(f"{tree} defines no RPC server ({' / '.join(RPC_PROGRAM[1])})",
                             hint="use a llama.cpp tree with tools/rpc (2024 on)")
    return name


def load_build(folder: Path) -> Build | None:
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        return Build(**json.loads(manifest.read_text()))
    except (json.JSONDecodeError, TypeError):
        return None


def host_fingerprint() -> str:
    return f"{socket.gethostname()}|{cpu_model()}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def check_tools(backend: str) -> None:
    missing = [t for t in ("cmake",) if not shutil.which(t)]
    if not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        missing.append("a C++ compiler")
    if missing:
        hint = "on Debian/Ubuntu: apt-get install cmake build-essential; on macOS: xcode-select --install && brew install cmake"
        raise LlamaspecError(f"cannot build llama.cpp: {' and '.join(missing)} not found", hint=hint)


def build(backend: str = "auto", extra_args: Sequence[str] = (), jobs: int | None = None, force: bool = False,
          source: sources.SourceInfo | None = None, rpc: bool = False) -> Build:
    """Build (or reuse) llama.cpp; smoke-test the result; return it."""
    start = time.monotonic()
    source = source or sources.current()
    sources.check_tree(source.tree)
    check_tools(backend)
    the_plan = plan(source, backend, extra_args, rpc=rpc)
    folder = the_plan.folder
    cached = None if force else load_build(folder)
    if cached is not None:
        if cached.smoke_host != host_fingerprint():
            log.info("cached build was tested on another machine; smoke-testing it here")
            cached = _smoke_or_rebuild(cached, the_plan, jobs, source)
        _point_latest(_flavour(cached), cached.commit, folder)
        log.info("reused cached build %s (%.1f s)", folder, time.monotonic() - start)
        return cached
    built = _compile(the_plan, jobs)
    return _smoke_or_rebuild(built, the_plan, jobs, source)


def _smoke_or_rebuild(built: Build, the_plan: BuildPlan, jobs: int | None, source: sources.SourceInfo) -> Build:
    from llamaspec.llamacpp import smoke

    try:
        smoke.check(built)
    except smoke.IllegalInstruction as exc:
        remaining = [f for w in CPU_WORKAROUNDS.values() for f in w.disable if f not in the_plan.cpu_disable]
        if not remaining or the_plan.backend == "metal":
            raise LlamaspecError(
                f"{exc.program} died with SIGILL (illegal instruction) in the smoke test",
                hint="this CPU advertises instructions it cannot run; rebuild with extra flags, e.g. "
                     "`llamaspec build --force -- -DCMAKE_C_FLAGS=-mno-avx512f -DCMAKE_CXX_FLAGS=-mno-avx512f`",
            ) from exc
        log.warning("%s died with SIGILL: rebuilding with %s", exc.program, " ".join(remaining))
        shutil.rmtree(the_plan.folder, ignore_errors=True)
        retry = BuildPlan(the_plan.source, the_plan.backend, the_plan.cmake_defs, the_plan.extra_args,
                          the_plan.cpu_disable + tuple(remaining), the_plan.targets, the_plan.native_isa)
        rebuilt = _compile(retry, jobs)
        smoke.check(rebuilt)
        built = rebuilt
        the_plan = retry
    stamped = Build(**{**asdict(built), "smoke_host": host_fingerprint()})
    atomic.write_json(Path(stamped.bin_dir).parent / "manifest.json", asdict(stamped))
    _point_latest(_flavour(stamped), stamped.commit, Path(stamped.bin_dir).parent)
    return stamped


def _compile(the_plan: BuildPlan, jobs: int | None) -> Build:
    folder = the_plan.folder
    paths.ensure_free_space(paths.builds_dir(), 3 * 2**30, "a llama.cpp build")
    jobs = jobs or os.cpu_count() or 2
    launcher = {}
    if shutil.which("ccache"):
        launcher = {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
                    "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache"}
    work = paths.builds_dir() / ".work" / folder.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    logs = folder.with_name(folder.name + ".logs")
    logs.mkdir(parents=True, exist_ok=True)
    configure = ["cmake", "-S", the_plan.source.path, "-B", str(work / "cmake"),
                 *the_plan.cmake_args(), *[f"-D{k}={v}" for k, v in launcher.items()]]
    log.info("configuring llama.cpp %s for %s", the_plan.source.commit, the_plan.backend)
    proc.run(configure, log_path=logs / "configure.log", what="CMake configure", timeout=1800,
             hint=f"read {logs / 'configure.log'}; for CUDA check the toolkit and cuBLAS, or try --backend cpu")
    targets = sorted(set(the_plan.targets.values()))
    bar = Progress(f"building {len(targets)} programs ({the_plan.backend}, {jobs} jobs)")

    def on_line(line: str) -> None:
        m = re.match(r"\[\s*(\d+)%\]\s+(\w+)", line)
        if m:
            step = "linking" if m.group(2) == "Linking" else "compiling"
            bar.update(float(m.group(1)), step)

    t0 = time.monotonic()
    proc.run(["cmake", "--build", str(work / "cmake"), "--config", "Release", "-j", str(jobs), "--target", *targets],
             log_path=logs / "build.log", what="llama.cpp build", timeout=4 * 3600, on_line=on_line,
             hint=f"read {logs / 'build.log'}")
    bar.close(f"built llama.cpp in {time.monotonic() - t0:.0f} s")
    with atomic.atomic_path(folder) as tmp:
        bin_dir = tmp / "bin"
        bin_dir.mkdir(parents=True)
        for name in targets:
            built = work / "cmake" / "bin" / name
            if not built.is_file():
                raise LlamaspecError(f"the build reported success but produced no {name}", hint=f"read {logs / 'build.log'}")
            shutil.copy2(built, bin_dir / name)
        shutil.move(str(logs), tmp / "logs")
        record = Build(
            bin_dir=str(folder / "bin"), commit=the_plan.source.commit, backend=the_plan.backend,
            cmake_args=the_plan.cmake_args(), programs=dict(the_plan.targets), source=the_plan.source.origin,
            key=the_plan.key, built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            build_seconds=round(time.monotonic() - t0, 1),
        )
        # The manifest is written by the caller after the smoke test: until then this is no build.
    shutil.rmtree(work, ignore_errors=True)
    return record


def _flavour(build: Build) -> str:
    """The latest-build pointer's name part: an RPC build never stands in for the plain one."""
    return build.backend + ("-rpc" if RPC_PROGRAM[0] in build.programs else "")


def _latest_pointer(backend: str, commit: str) -> Path:
    return paths.builds_dir() / f"latest-{_safe(commit)}-{backend}"


def _point_latest(backend: str, commit: str, folder: Path) -> None:
    """Remember the last good build per source commit and backend, so runs find it without rebuilding."""
    atomic.write_text(_latest_pointer(backend, commit), str(folder) + "\n")


def prebuilt(bin_dir: Path) -> Build:
    """A folder of llama.cpp programs someone else built (any generation)."""
    bin_dir = bin_dir.expanduser().resolve()
    if not bin_dir.is_dir():
        raise LlamaspecError(f"binaries folder not found: {bin_dir}", hint="pass the folder that holds llama-speculative")
    programs = {}
    for role, names in PROGRAMS.items():
        for name in names:
            if (bin_dir / name).is_file() and os.access(bin_dir / name, os.X_OK):
                programs[role] = name
                break
    if "speculative" not in programs:
        raise LlamaspecError(f"{bin_dir} holds no llama-speculative (or speculative) program",
                             hint="pass the folder of a llama.cpp build, e.g. build/bin")
    from llamaspec.llamacpp import flags

    version = flags.probe_version(bin_dir / programs["speculative"])
    return Build(bin_dir=str(bin_dir), commit=version.commit, backend=version.backend or "unknown", programs=programs,
                 source=f"bin:{bin_dir}", prebuilt=True)


def find(backend: str = "auto", bin_dir: Path | None = None, rpc: bool = False) -> Build:
    """The build a run uses: ``--bin-dir``/``LLAMASPEC_BIN_DIR``, else the last good build of the
    current source (GPU backends first when ``auto``). Cheap: no compiler or toolkit probes."""
    chosen_dir = bin_dir or (Path(os.environ["LLAMASPEC_BIN_DIR"]) if os.environ.get("LLAMASPEC_BIN_DIR") else None)
    if chosen_dir is not None:
        return prebuilt(chosen_dir)
    source = sources.current()
    if backend not in ("auto", *BACKENDS):
        select_backend(backend)  # raises the unknown-backend error
    for candidate in (("metal", "cuda", "cpu") if backend == "auto" else (backend,)):
        pointer = _latest_pointer(candidate + ("-rpc" if rpc else ""), source.commit)
        found = load_build(Path(pointer.read_text().strip())) if pointer.is_file() else None
        if found is not None and found.commit == source.commit and Path(found.bin_dir).is_dir():
            if found.smoke_host != host_fingerprint():
                from llamaspec.llamacpp import smoke

                log.info("build %s was smoke-tested on another machine; testing it here", found.bin_dir)
                smoke.check(found)
                found = Build(**{**asdict(found), "smoke_host": host_fingerprint()})
                atomic.write_json(Path(found.bin_dir).parent / "manifest.json", asdict(found))
            return found
    raise LlamaspecError(
        f"no llama.cpp build of {source.commit} ({backend}{', with RPC' if rpc else ''}) in {paths.builds_dir()}",
        hint=f"run `llamaspec build{' --rpc' if rpc else ''}` first (or pass --bin-dir with your own llama.cpp binaries)",
    )
