"""``llamaspec doctor``: what this machine has for building and running llama.cpp, with hints."""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base import cpu as cpus
from llamaspec.base import host, paths
from llamaspec.base.errors import LlamaspecError


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail | info
    value: str
    hint: str = ""


NOISE_SAMPLE_SECONDS = 2.0


def noise_check(sample: host.NoiseSample | None) -> Check:
    """What the machine did over a short idle sample: CPU stolen by the hypervisor, other processes' load."""
    if sample is None:
        return Check("machine noise", "info", "not measurable here (no /proc/stat or process times)")
    text = sample.text(f"over {sample.seconds:.0f} s")
    if not sample.noisy:
        return Check("machine noise", "ok", text)
    hints = []
    if (sample.steal or 0.0) >= host.NOISY_STEAL:
        hints.append("the hypervisor takes CPU time from this VM (shared host): absolute speeds will drift, "
                     "compare paired ratios and use more pairs (--repeats auto)")
    if (sample.other_load or 0.0) >= host.NOISY_OTHER_LOAD:
        hints.append("other processes are busy: stop them, or measure with fewer threads than cores so they do not "
                     "compete (llamaspec stores the steal and load of every measurement with the run)")
    return Check("machine noise", "warn", text, "; ".join(hints))


def files_checks() -> list[Check]:
    """Where this llamaspec reads its catalog and experiments, and keeps its models."""
    root = paths.project_root()
    try:
        catalog = paths.catalog_path()
    except LlamaspecError as exc:
        return [Check("llamaspec files", "fail", exc.message, exc.hint or "")]
    kind = f"project folder {root}" if root is not None else f"installed (shipped files in {paths.shipped_root()})"
    yours = paths.config_dir() / "experiments"
    own = len(list(yours.glob("*.yaml"))) if yours.is_dir() else 0
    shipped = len(list(paths.experiments_dir().glob("*.yaml")))
    return [Check("llamaspec files", "info", f"{kind}; catalog {catalog}; models in {paths.models_dir()}"),
            Check("experiments", "info", f"by name: the current folder, then {yours} ({own}), then {shipped} shipped")]


def examine(bin_dir: Path | None = None) -> list[Check]:
    import psutil

    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import source as sources

    checks = [Check("os", "info", f"{platform.system()} {platform.release()} ({platform.machine()})")]
    cpu = cpus.cpu_info()  # what every run records of the CPU (host.hardware), shown the same way
    checks.append(Check("cpu", "info", f"{cpu.short()}; {psutil.cpu_count(logical=False)} cores, {psutil.cpu_count()} threads"))
    checks.append(Check("cpu features", "info", " ".join(cpu.flags or ()) or "(none of the usual SIMD sets reported)"))
    cores = psutil.cpu_count(logical=False) or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    checks.append(Check(
        "timing noise", "warn" if cores <= 4 else "info",
        f"{cores} cores, load {load:.1f}: llama.cpp on every core of a small or shared machine runs at two speeds "
        "from run to run (measured on 2 cores: 69-108 t/s with -t 2, CV 13.5 %; 65-70 t/s with -t 1, CV 2.6 %)",
        f"measure with fewer threads than cores (e.g. -t {max(cores - 1, 1)}) and compare paired ratios; "
        "`python benchmarks/noise.py` measures this machine"))
    checks.append(noise_check(host.sample_noise(NOISE_SAMPLE_SECONDS)))
    if host.native_enables(host.FEATURE_PROBES["amx"].compiler_flag):
        faults = host.feature_faults("amx")
        checks.append(Check("amx", "warn" if faults else "ok", "faults (SIGILL) on this machine" if faults else "usable",
                            "llamaspec build switches it off (-mno-amx-*) automatically" if faults else ""))
    mem = psutil.virtual_memory()
    checks.append(Check("memory", "ok" if mem.total > 8 * 2**30 else "warn",
                        f"{mem.total / 2**30:.1f} GiB total, {mem.available / 2**30:.1f} GiB available",
                        "" if mem.total > 8 * 2**30 else "7B models at f16 need about 14 GiB"))
    for label, folder in (("disk (models)", paths.models_dir()), ("disk (cache)", paths.cache_dir())):
        probe = folder
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free / 2**30
        checks.append(Check(label, "ok" if free > 20 else "warn", f"{free:.1f} GiB free under {folder}",
                            "" if free > 20 else "CodeLlama-7B at f16 needs about 27 GiB while converting"))
    cc = host.tool_version(["cc", "--version"]) or host.tool_version(["clang", "--version"])
    checks.append(Check("compiler", "ok" if cc else "fail", cc or "not found",
                        "" if cc else "install a C/C++ compiler (apt-get install build-essential / xcode-select --install)"))
    cmake = host.tool_version(["cmake", "--version"])
    checks.append(Check("cmake", "ok" if cmake else "fail", cmake or "not found",
                        "" if cmake else "install CMake 3.14+ (apt-get install cmake / brew install cmake / pip install cmake)"))
    ccache = host.tool_version(["ccache", "--version"])
    checks.append(Check("ccache", "ok" if ccache else "info", ccache or "not found",
                        "" if ccache else "optional: makes rebuilds with other flags much faster"))
    cuda = host.find_cuda()
    if cuda.gpus:
        checks.append(Check("gpu", "ok", "; ".join(cuda.gpus)))
    elif platform.system() == "Darwin":
        metal = platform.machine() == "arm64"
        checks.append(Check("gpu", "ok" if metal else "info", "Apple Silicon (Metal)" if metal else "Intel Mac: no Metal"))
    else:
        checks.append(Check("gpu", "info", "no NVIDIA GPU visible (nvidia-smi)"))
    if cuda.nvcc:
        status = "ok" if cuda.cublas else "warn"
        checks.append(Check("cuda toolkit", status, f"nvcc {cuda.version} at {cuda.nvcc}; cuBLAS: {cuda.cublas or 'missing'}",
                            "" if cuda.cublas else "a CUDA build needs cuBLAS (nvidia-cublas / libcublas-dev); CPU builds work"))
    else:
        checks.append(Check("cuda toolkit", "info", "not found", "only needed for --accel cuda"))
    reason = builds.why_not_cuda(cuda)
    checks.append(Check("accel (auto)", "info", builds.select_accel("auto", cuda=cuda) + (f" ({reason})" if reason else "")))
    checks += files_checks()
    try:
        src = sources.current()
        checks.append(Check("llama.cpp source", "ok", f"{src.path} (commit {src.commit}, {src.origin})"))
    except LlamaspecError as exc:
        # Not fatal while the build cache holds the pinned commit's build: runs use that.
        checks.append(Check("llama.cpp source", "warn", exc.message, exc.hint or ""))
    checks += llamacpp_checks(bin_dir)
    return checks


def llamacpp_checks(bin_dir: Path | None = None) -> list[Check]:
    """Where a run's llama.cpp comes from: every place the lookup looks, in its order (``cache.candidates``),
    which one a run uses and why the others are not. ``llama.cpp build`` names the winner."""
    from llamaspec.llamacpp import cache

    checks: list[Check] = []
    chosen: cache.Candidate | None = None
    try:
        found = list(cache.candidates(bin_dir=bin_dir))
    except LlamaspecError as exc:
        return [Check("llama.cpp build", "warn", exc.message, exc.hint or "")]
    on_path_unfit = [c for c in found if c.origin == "PATH" and c.build is None]
    for candidate in found:
        label = f"llama.cpp: {candidate.origin}"
        if candidate.build is not None:
            b = candidate.build
            versions = "; ".join(sorted(set(candidate.versions.values()))) or f"commit {b.commit}"
            what = f"{b.bin_dir} ({', '.join(sorted(b.programs.values()))}; {versions})" if candidate.origin == "PATH" \
                else f"{b.bin_dir} ({b.accel}, commit {b.commit})"
            if chosen is None:
                chosen = candidate
                checks.append(Check(label, "ok", f"{what}: used"))
            else:
                checks.append(Check(label, "info", f"{what}: not used, {chosen.origin} comes first"))
        elif chosen is not None:
            checks.append(Check(label, "info", f"{candidate.where}: not looked at ({chosen.origin} comes first)"))
        elif candidate.origin == "build":
            if on_path_unfit:
                checks.append(Check(label, "info", f"{candidate.where}: not built by a run while llama.cpp on PATH "
                                                   "cannot serve it (see above)"))
            else:
                state = "built by the first run that needs it" if cache.auto_build() else \
                    f"not built by runs ({cache.AUTO_BUILD_ENV}=0)"
                checks.append(Check(label, "warn", f"{candidate.where}: {state}, "
                                                   f"{cache.expected_build_time('auto')}", candidate.hint))
        else:
            status = "fail" if candidate.fatal else "warn" if candidate.origin == "PATH" else "info"
            checks.append(Check(label, status, candidate.problem, candidate.hint))
    if chosen is not None and chosen.build is not None:
        b = chosen.build
        what = f"{b.bin_dir} ({b.accel}, commit {b.commit})" if not b.prebuilt else f"{b.bin_dir} (commit {b.commit})"
        tied = "; results are tied to that build" if chosen.origin == "PATH" else ""
        checks.insert(0, Check("llama.cpp build", "ok", f"{what} from {chosen.origin}{tied}"))
    else:
        problem = (on_path_unfit or [c for c in found if c.fatal] or found[-1:])[0]
        checks.insert(0, Check("llama.cpp build", "warn", problem.problem, problem.hint))
    return checks
