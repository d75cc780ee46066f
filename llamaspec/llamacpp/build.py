"""Plan and compile llama.cpp for an accelerator (CPU, CUDA or Metal), smoke-test the result and
put it in the build cache (``cache``), keyed by source commit, accelerator and flags.

Facts about the machine (compilers, the CUDA toolkit, GPUs, CPU features that fault) come from
``llamaspec.base.host``; what this module adds is what to do about them for a build.

Its size: one build's plan (accelerator, CPU workarounds, RPC target), its compile steps with
their progress display, and the smoke test that decides whether the result is kept; the plan's
fields are made and read only here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base import atomic, host, paths, proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import Progress
from llamaspec.llamacpp import cache
from llamaspec.llamacpp import source as sources
from llamaspec.llamacpp.cache import (  # noqa: F401 - re-exported: callers import them from here
    ACCELS,
    BINARIES,
    REQUIRED_PROGRAMS,
    RPC_ROLE,
    Build,
    check_accel,
    load_build,
    point_latest,
    point_latest_at,
    pointer_names,
    prebuilt,
    safe_name,
    stamp_smoke_host,
    write_manifest,
)

log = logging.getLogger(__name__)

# Per accelerator, the CMake cache entries that select it. Declarative on purpose: a new
# accelerator or a renamed option is one row.
ACCEL_CMAKE: dict[str, dict[str, str]] = {
    "cpu": {"GGML_NATIVE": "ON", "GGML_CUDA": "OFF", "GGML_METAL": "OFF"},
    "cuda": {"GGML_NATIVE": "ON", "GGML_CUDA": "ON", "GGML_METAL": "OFF"},
    "metal": {"GGML_NATIVE": "ON", "GGML_CUDA": "OFF", "GGML_METAL": "ON", "GGML_METAL_EMBED_LIBRARY": "ON"},
}
# The RPC server's CMake target, newest name first (its CMake file exists only under tools/rpc or
# examples/rpc and is read only with GGML_RPC=ON, so tree_targets does not list it).
RPC_TARGETS = ("ggml-rpc-server", "rpc-server")
COMMON_CMAKE = {
    "CMAKE_BUILD_TYPE": "Release",
    "BUILD_SHARED_LIBS": "OFF",  # static binaries can move into the cache and still run
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_CURL": "OFF",
    "LLAMA_OPENSSL": "OFF",
}

# CPU features that compilers enable under -march=native but that can fault at run time (see
# host.FEATURE_PROBES for how each is detected): the flags that switch each off in a build.
CPU_WORKAROUNDS: dict[str, tuple[str, ...]] = {
    "amx": ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"),
}


@dataclass(frozen=True)
class BuildPlan:
    source: sources.SourceInfo
    accel: str
    cmake_defs: dict[str, str]
    extra_args: tuple[str, ...]
    cpu_disable: tuple[str, ...]
    targets: dict[str, str]  # role -> target name
    native_isa: str

    @property
    def key(self) -> str:
        return cache_key(self.source.commit, self.accel, self.cmake_args(), tuple(sorted(self.targets.values())), self.native_isa)

    @property
    def folder(self) -> Path:
        return paths.builds_dir() / f"{safe_name(self.source.commit)}-{self.accel}-{self.key}"

    def cmake_args(self) -> list[str]:
        defs = dict(self.cmake_defs)
        if self.cpu_disable:
            flags = " ".join(self.cpu_disable)
            defs["CMAKE_C_FLAGS"] = flags
            defs["CMAKE_CXX_FLAGS"] = flags
        return [f"-D{k}={v}" for k, v in sorted(defs.items())] + list(self.extra_args)


def cache_key(commit: str, accel: str, cmake_args: Sequence[str], targets: Sequence[str], native_isa: str) -> str:
    """Same commit, accelerator, flags, programs and native CPU target: same build."""
    blob = json.dumps(
        # The hashed field keeps its old name "backend": renaming it would orphan every cached build.
        {"commit": commit, "backend": accel, "cmake": sorted(cmake_args), "targets": sorted(targets), "isa": native_isa,
         "os": platform.system(), "arch": platform.machine()},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# --- choosing the accelerator --------------------------------------------------------------------

def select_accel(requested: str = "auto", system: str | None = None, machine: str | None = None,
                 cuda: host.CudaToolkit | None = None) -> str:
    """``auto``: Metal on Apple Silicon, CUDA when a complete toolkit and a GPU are there, else CPU."""
    system = system or platform.system()
    machine = machine or platform.machine()
    check_accel(requested)
    if requested == "metal" and system != "Darwin":
        raise LlamaspecError("Metal needs macOS", hint="use --accel cpu (or cuda on an NVIDIA machine)")
    if requested in ("cuda", "auto"):
        cuda = cuda or (host.find_cuda() if system == "Linux" or requested == "cuda" else host.NO_CUDA)
    if requested == "cuda":
        assert cuda is not None
        if not cuda.nvcc:
            raise LlamaspecError("CUDA requested but no CUDA toolkit found (nvcc)",
                                 hint="install the CUDA toolkit and put nvcc on PATH (or set CUDA_HOME), or use --accel cpu")
        if not cuda.cublas:
            raise LlamaspecError(f"CUDA toolkit {cuda.version} found at {cuda.nvcc}, but not cuBLAS (libcublas.so)",
                                 hint="install cuBLAS (e.g. the nvidia-cublas or libcublas-dev package), or use --accel cpu")
        return "cuda"
    if requested != "auto":
        return requested
    if system == "Darwin" and machine == "arm64":
        return "metal"
    assert cuda is not None
    if cuda.nvcc and cuda.cublas and cuda.gpus:
        return "cuda"
    return "cpu"


def why_not_cuda(cuda: host.CudaToolkit) -> str | None:
    """When a CUDA toolkit is there but auto still picks the CPU: what is missing."""
    if not cuda.nvcc or (cuda.cublas and cuda.gpus):
        return None
    missing = "cuBLAS" if not cuda.cublas else "an NVIDIA GPU (nvidia-smi -L)"
    return f"CUDA toolkit {cuda.version} found but not {missing}"


def accel_cmake(accel: str, cuda: host.CudaToolkit | None = None) -> dict[str, str]:
    defs = {**COMMON_CMAKE, **ACCEL_CMAKE[accel]}
    if accel == "cuda":
        # Build for the GPUs present rather than llama.cpp's long default list: minutes, not an hour.
        defs["CMAKE_CUDA_ARCHITECTURES"] = "native" if cuda and cuda.gpus else "90;89;86;80"
        if cuda and cuda.nvcc:
            defs["CMAKE_CUDA_COMPILER"] = cuda.nvcc
    return defs


def cpu_workarounds(accel: str) -> tuple[str, ...]:
    """Flags that switch off CPU features the compiler would use but this CPU faults on."""
    if accel == "metal" or platform.machine() not in ("x86_64", "AMD64"):
        return ()
    flags: list[str] = []
    for name, disable in CPU_WORKAROUNDS.items():
        if host.native_enables(host.FEATURE_PROBES[name].compiler_flag) and host.feature_faults(name):
            log.warning("this CPU advertises %s but faults on it: building with %s", name.upper(), " ".join(disable))
            flags.extend(disable)
    return tuple(flags)


# --- planning and building ---------------------------------------------------------------------

def tree_targets(tree: Path) -> dict[str, str]:
    """Which of our programs this tree defines, by its CMake ``set(TARGET ...)`` lines."""
    defined: set[str] = set()
    for cmake in list(tree.glob("examples/*/CMakeLists.txt")) + list(tree.glob("tools/*/CMakeLists.txt")):
        defined.update(re.findall(r"set\s*\(\s*TARGET\s+([\w-]+)\s*\)", cmake.read_text(errors="replace")))
    targets = {}
    for role, names in BINARIES.items():
        for name in names:
            if name in defined:
                targets[role] = name
                break
    return targets


def plan(source: sources.SourceInfo, accel: str = "auto", extra_args: Sequence[str] = (),
         cpu_disable: Sequence[str] | None = None, rpc: bool = False) -> BuildPlan:
    chosen = select_accel(accel)
    cuda = host.find_cuda() if chosen == "cuda" or (accel == "auto" and platform.system() == "Linux") else None
    reason = why_not_cuda(cuda) if cuda and chosen == "cpu" else None
    if reason:
        log.info("%s: building for the CPU", reason)
    defs = accel_cmake(chosen, cuda)
    defs["LLAMA_BUILD_COMMIT"] = source.commit
    defs["LLAMA_BUILD_NUMBER"] = "0"
    targets = tree_targets(source.tree)
    missing = [r for r in REQUIRED_PROGRAMS if r not in targets]
    if missing:
        raise LlamaspecError(f"{source.tree} defines no {' / '.join(BINARIES[missing[0]])} program",
                             hint="use a llama.cpp tree that has examples/speculative and tools/quantize")
    if rpc:
        defs["GGML_RPC"] = "ON"
        targets[RPC_ROLE] = rpc_target(source.tree)
    disable = tuple(cpu_disable) if cpu_disable is not None else cpu_workarounds(chosen)
    return BuildPlan(source, chosen, defs, tuple(extra_args), disable, targets, host.native_isa())


def _rpc_target_in(tree: Path) -> str | None:
    defined: set[str] = set()
    for cmake in list(tree.glob("tools/rpc/CMakeLists.txt")) + list(tree.glob("examples/rpc/CMakeLists.txt")):
        defined.update(re.findall(r"set\s*\(\s*TARGET\s+([\w-]+)\s*\)", cmake.read_text(errors="replace")))
    return next((n for n in RPC_TARGETS if n in defined), None)


def with_rpc(tree: Path, rpc: bool | None) -> bool:
    """Whether a build of ``tree`` includes the RPC backend and server: as asked (True, False), or
    by default (None) wherever the tree has them. On the pinned tree they cost 12.4 s of CPU time
    to compile (ggml-rpc.cpp 5.9 s, transport.cpp 0.8 s, rpc-server.cpp 5.8 s, gcc 12 -O3 on an AMD
    EPYC VM) next to a build of several CPU-minutes, and let the RPC test run wherever the
    tests do."""
    return rpc if rpc is not None else _rpc_target_in(tree) is not None


def rpc_target(tree: Path) -> str:
    """The RPC server's CMake target in this tree (``ggml-rpc-server``, ``rpc-server`` before)."""
    name = _rpc_target_in(tree)
    if name is None:
        raise LlamaspecError(f"{tree} defines no RPC server ({' / '.join(RPC_TARGETS)})",
                             hint="use a llama.cpp tree with tools/rpc (2024 on)")
    return name


def check_tools() -> None:
    missing = [] if shutil.which("cmake") else ["cmake"]
    if not host.cxx_compiler():
        missing.append("a C++ compiler")
    if missing:
        hint = "on Debian/Ubuntu: apt-get install cmake build-essential; on macOS: xcode-select --install && brew install cmake"
        raise LlamaspecError(f"cannot build llama.cpp: {' and '.join(missing)} not found", hint=hint)


# Programs that are part of a build's plan (and of its cache key) but compiled only when first
# needed: llama-server and its multimodal library took 8.5 of a bare clone's 15.5 minutes on 2 cores,
# and the demo never runs it. ``ensure_program`` builds it into the same cache folder, reusing the
# first step's CMake tree.
ON_DEMAND = ("server",)


def first_step(targets: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The roles a build compiles now, and those it leaves for when they are first needed (pure)."""
    now = {role: t for role, t in targets.items() if role not in ON_DEMAND}
    return now, {role: t for role, t in targets.items() if role in ON_DEMAND}


def work_dir(folder: Path) -> Path:
    """Where a build's CMake tree lives; kept while the build has programs pending."""
    return paths.builds_dir() / ".work" / folder.name


def ensure_program(built: Build, role: str, jobs: int | None = None) -> Build:
    """``built`` with ``role``'s program: compiled now, into the same cache folder, if it was left
    for when first needed (other builds, a --bin-dir or a prebuilt one, are returned as they are)."""
    if role in built.programs or role not in built.pending or built.prebuilt:
        return built
    folder = Path(built.bin_dir).parent
    with exclusive(folder):
        again = load_build(folder) or built
        if role in again.programs:  # another process built it meanwhile
            return again
        target = again.pending[role]
        log.info("llama-server is needed for the first time: building %s into %s", target, folder)
        check_tools()
        work = work_dir(folder)
        if not (work / "cmake" / "CMakeCache.txt").is_file():  # the first step's tree is gone: configure again
            source = sources.current_or_pinned()
            if source.commit != again.commit:
                raise LlamaspecError(f"cannot add {target} to the llama.cpp {again.commit} build: the source here is {source.commit}",
                                     hint=f"run `llamaspec build --force` to rebuild {folder.name} with it")
            _configure(source.path, work, again.cmake_args, folder)
        logs = folder / "logs"
        t0 = time.monotonic()
        _cmake_build(work, [target], jobs, logs / f"build-{target}.log", again.accel)
        made = work / "cmake" / "bin" / target
        if not made.is_file():
            raise LlamaspecError(f"the build reported success but produced no {target}", hint=f"read {logs / f'build-{target}.log'}")
        with atomic.atomic_path(folder / "bin" / target) as tmp:
            shutil.copy2(made, tmp)
        from llamaspec.llamacpp import smoke

        smoke.version_check(folder / "bin" / target, logs)
        pending = {r: t for r, t in again.pending.items() if r != role}
        record = dataclasses.replace(again, programs={**again.programs, role: target}, pending=pending,
                                     build_seconds=round(again.build_seconds + time.monotonic() - t0, 1))
        write_manifest(record)
        if not pending:
            shutil.rmtree(work, ignore_errors=True)
        log.info("built %s in %.0f s", target, time.monotonic() - t0)
        return record


LOCK_NOTICE_SECONDS = 60.0  # while waiting for another process's build, say so this often


@contextlib.contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Hold the build of ``folder`` for this process. Builds share the cache (other clones, test
    runs): a second build of the same folder would wipe the first one's work directory mid-compile,
    so it waits here instead, and then reuses what the first one made."""
    import fcntl

    lock_path = paths.builds_dir() / ".locks" / f"{folder.name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        start = time.monotonic()
        noticed = -LOCK_NOTICE_SECONDS
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited - noticed >= LOCK_NOTICE_SECONDS:
                    noticed = waited
                    fh.seek(0)
                    holder = fh.read().strip() or "another process"
                    log.info("waiting for the same llama.cpp build in another llamaspec (%s) to finish (%.0f s so far)",
                             holder, waited)
                time.sleep(0.5)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build(accel: str = "auto", extra_args: Sequence[str] = (), jobs: int | None = None, force: bool = False,
          source: sources.SourceInfo | None = None, rpc: bool | None = None) -> Build:
    """Build (or reuse) llama.cpp; smoke-test the result; return it. ``rpc``: with the RPC backend
    and server (True: a tree without them is refused; None: wherever the tree has them)."""
    start = time.monotonic()
    source = source or sources.current()
    sources.check_tree(source.tree)
    check_tools()
    the_plan = plan(source, accel, extra_args, rpc=with_rpc(source.tree, rpc))
    folder = the_plan.folder
    with exclusive(folder):
        cached = None if force else load_build(folder)
        if cached is not None:
            if cached.smoke_host != host.fingerprint():
                log.info("cached build was tested on another machine; smoke-testing it here")
                cached = _smoke_or_rebuild(cached, the_plan, jobs, source)
            point_latest_at(cached)
            log.info("reused cached build %s (%.1f s)", folder, time.monotonic() - start)
            return cached
        built = _compile(the_plan, jobs)
        return _smoke_or_rebuild(built, the_plan, jobs, source)


def _smoke_or_rebuild(built: Build, the_plan: BuildPlan, jobs: int | None, source: sources.SourceInfo) -> Build:
    from llamaspec.llamacpp import smoke

    try:
        smoke.check(built)
    except smoke.IllegalInstruction as exc:
        remaining = [f for flags in CPU_WORKAROUNDS.values() for f in flags if f not in the_plan.cpu_disable]
        if not remaining or the_plan.accel == "metal":
            raise LlamaspecError(
                f"{exc.program} died with SIGILL (illegal instruction) in the smoke test",
                hint="this CPU advertises instructions it cannot run; rebuild with extra flags, e.g. "
                     "`llamaspec build --force -- -DCMAKE_C_FLAGS=-mno-avx512f -DCMAKE_CXX_FLAGS=-mno-avx512f`",
            ) from exc
        log.warning("%s died with SIGILL: rebuilding with %s", exc.program, " ".join(remaining))
        shutil.rmtree(the_plan.folder, ignore_errors=True)
        retry = BuildPlan(the_plan.source, the_plan.accel, the_plan.cmake_defs, the_plan.extra_args,
                          the_plan.cpu_disable + tuple(remaining), the_plan.targets, the_plan.native_isa)
        rebuilt = _compile(retry, jobs)
        smoke.check(rebuilt)
        built = rebuilt
        the_plan = retry
    stamped = stamp_smoke_host(built)
    point_latest_at(stamped)
    return stamped


HEARTBEAT_SECONDS = 30.0  # off a terminal, a progress line at least this often while compiling

# CMake's Makefile output: "[ 42%] Building CXX object src/CMakeFiles/llama.dir/llama-model.cpp.o",
# "[ 97%] Linking CXX executable ../../bin/llama-speculative", "[ 98%] Built target llama-speculative".
_MAKE_STEP = re.compile(r"^\[\s*(\d+)%\]\s+(.*)$")
_OBJECT_TARGET = re.compile(r"CMakeFiles/([^/]+)\.dir/")


def build_step(line: str) -> tuple[float, str] | None:
    """Percentage and what the build is doing, from one line of its output; None for other lines."""
    m = _MAKE_STEP.match(line.strip())
    if not m:
        return None
    percent, text = float(m.group(1)), m.group(2).strip()
    if text.startswith("Building"):
        obj = _OBJECT_TARGET.search(text)
        source = Path(text.split()[-1]).name.removesuffix(".o")
        return percent, f"compiling {obj.group(1)}: {source}" if obj else f"compiling {source}"
    if text.startswith("Linking"):
        return percent, f"linking {Path(text.split()[-1]).name}"
    if text.startswith("Built target"):
        return percent, f"built {text.removeprefix('Built target').strip()}"
    return percent, text[:60]


class BuildProgress:
    """The whole build's percentage from CMake's per-target ones.

    ``cmake --build --target A B C`` with Makefiles builds each target in its own pass, and each
    pass counts its own 0-100 % (a 6-program build read 100 % and then 7 %, 69 %...). Here pass
    k of n covers k/n to (k+1)/n of the bar; a pass starts where the percentage falls after
    reaching 100 %. Only moves forward."""

    def __init__(self, targets: int) -> None:
        self.targets = max(targets, 1)
        self.passes_done = 0
        self.last = 0.0
        self.percent = 0.0

    def step(self, line: str) -> tuple[float, str] | None:
        got = build_step(line)
        if got is None:
            return None
        pct, note = got
        if pct < self.last and self.last >= 100.0 and self.passes_done < self.targets - 1:
            self.passes_done += 1
        self.last = pct
        overall = 100.0 * (self.passes_done + pct / 100.0) / self.targets
        self.percent = max(self.percent, min(overall, 100.0))
        return self.percent, note


def _configure(source_path: str, work: Path, cmake_args: Sequence[str], folder: Path) -> None:
    launcher = {}
    if shutil.which("ccache"):
        launcher = {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
                    "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache"}
    logs = folder / "logs" if (folder / "logs").is_dir() else folder.with_name(folder.name + ".logs")
    logs.mkdir(parents=True, exist_ok=True)
    configure = ["cmake", "-S", source_path, "-B", str(work / "cmake"), *cmake_args,
                 *[f"-D{k}={v}" for k, v in launcher.items()]]
    proc.run(configure, log_path=logs / "configure.log", what="CMake configure", timeout=1800,
             hint=f"read {logs / 'configure.log'}; for CUDA check the toolkit and cuBLAS, or try --accel cpu")


def _cmake_build(work: Path, targets: Sequence[str], jobs: int | None, log_path: Path, accel: str) -> None:
    jobs = jobs or os.cpu_count() or 2
    what = f"{len(targets)} programs" if len(targets) > 1 else targets[0]
    # No ETA: compile times per file differ by 100x (ggml-cpu's ops vs a small tool), so a linear
    # extrapolation from the percentage is fiction. Elapsed time and a heartbeat show it is alive.
    bar = Progress(f"building {what} ({accel}, {jobs} jobs)", eta=False, heartbeat=HEARTBEAT_SECONDS)
    overall = BuildProgress(len(targets))

    def on_line(line: str) -> None:
        step = overall.step(line)
        if step is not None:
            bar.update(*step)

    try:
        proc.run(["cmake", "--build", str(work / "cmake"), "--config", "Release", "-j", str(jobs), "--target", *targets],
                 log_path=log_path, what="llama.cpp build", timeout=4 * 3600, on_line=on_line, hint=f"read {log_path}")
    finally:
        bar.close()


def _compile(the_plan: BuildPlan, jobs: int | None) -> Build:
    folder = the_plan.folder
    paths.ensure_free_space(paths.builds_dir(), 3 * 2**30, "a llama.cpp build")
    jobs = jobs or os.cpu_count() or 2
    work = work_dir(folder)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    logs = folder.with_name(folder.name + ".logs")
    logs.mkdir(parents=True, exist_ok=True)
    log.info("configuring llama.cpp %s for %s", the_plan.source.commit, the_plan.accel)
    _configure(the_plan.source.path, work, the_plan.cmake_args(), folder)
    now, later = first_step(the_plan.targets)
    targets = sorted(set(now.values()))
    t0 = time.monotonic()
    _cmake_build(work, targets, jobs, logs / "build.log", the_plan.accel)
    log.info("built llama.cpp in %.0f s", time.monotonic() - t0)
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
            bin_dir=str(folder / "bin"), commit=the_plan.source.commit, accel=the_plan.accel,
            cmake_args=the_plan.cmake_args(), programs=now, pending=later, source=the_plan.source.origin,
            key=the_plan.key, built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            build_seconds=round(time.monotonic() - t0, 1),
        )
        # The manifest is written by the caller after the smoke test: until then this is no build.
    if not later:  # kept otherwise: a pending program builds on this tree (minutes, not the whole build again)
        shutil.rmtree(work, ignore_errors=True)
    return record


def find(accel: str = "auto", bin_dir: Path | None = None, rpc: bool = False, roles: tuple[str, ...] = cache.RUN_ROLES,
         build: bool = False, on_path: bool = True) -> Build:
    """The build a run uses, looked up in ``candidates``' order: ``--bin-dir``/``LLAMASPEC_BIN_DIR``,
    else the cached build of the current source (of the pinned commit when there is no source tree;
    GPU accelerators first with ``auto``), else llama.cpp on PATH that has what the run needs
    (``roles``), else, with ``build``, the wanted commit built now. Without ``build``: cheap, no
    compiler or toolkit probes. Here, above the cache it looks in and the smoke test it runs on a
    build made elsewhere, so that neither of them imports the build."""
    unusable: list[cache.Candidate] = []
    for candidate in cache.candidates(accel, bin_dir, rpc, roles, on_path):
        if candidate.build is not None:
            found = candidate.build
            if candidate.origin == "cache" and found.smoke_host != host.fingerprint():
                from llamaspec.llamacpp import smoke

                log.info("build %s was smoke-tested on another machine; testing it here", found.bin_dir)
                smoke.check(found)
                found = cache.stamp_smoke_host(found)
            cache._say_found(candidate, cache.wanted_commit()[0] if candidate.origin == "PATH" else "")
            return found
        if candidate.fatal:
            raise candidate.error()
        unusable.append(candidate)
    unfit = [c for c in unusable if c.origin == "PATH"]
    if unfit:  # the user's own llama.cpp, unfit for this run: say why rather than build another unasked
        raise unfit[0].error()
    last = unusable[-1]
    if not build:
        raise last.error()
    log.warning("no llama.cpp to run (no --bin-dir, %s, none on PATH): building %s now, %s; "
                "`llamaspec build` does the same, --bin-dir uses your own", unusable[0].problem, last.where,
                cache.expected_build_time(accel))
    return _build_now(accel, sources.current_or_pinned(), rpc)  # as `llamaspec build` makes it: RPC where it can


def _build_now(accel: str, source: sources.SourceInfo, rpc: bool) -> Build:
    """``find``'s build when nothing is found, as `llamaspec build` makes it: RPC where it can
    (``build`` looked up at call time: ``find``'s own ``build`` argument hides the name)."""
    return build(accel, source=source, rpc=True if rpc else None)
