"""Accelerator selection, CMake arguments per accelerator, the cache key, build progress, the build
cache (manifests, finding a build without a source tree) and build error paths."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from llamaspec.base import host
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.host import CudaToolkit
from llamaspec.llamacpp import build
from llamaspec.llamacpp.build import BuildPlan
from llamaspec.llamacpp.source import SourceInfo

NO_CUDA = CudaToolkit(None, None, None, ())
CUDA_NO_CUBLAS = CudaToolkit("/usr/local/cuda/bin/nvcc", "13.0", None, ())
CUDA_FULL = CudaToolkit("/usr/local/cuda/bin/nvcc", "12.8", "/usr/local/cuda/lib64/libcublas.so", ("GPU 0: NVIDIA H200",))


@pytest.mark.parametrize(
    ("system", "machine", "cuda", "expected"),
    [
        ("Darwin", "arm64", NO_CUDA, "metal"),
        ("Darwin", "x86_64", NO_CUDA, "cpu"),
        ("Linux", "x86_64", NO_CUDA, "cpu"),
        ("Linux", "x86_64", CUDA_NO_CUBLAS, "cpu"),  # this workplace: nvcc without cuBLAS
        ("Linux", "x86_64", CudaToolkit("/x/nvcc", "12.8", "/x/libcublas.so", ()), "cpu"),  # no GPU visible
        ("Linux", "x86_64", CUDA_FULL, "cuda"),
        ("Linux", "aarch64", CUDA_FULL, "cuda"),
    ],
)
def test_auto_accel(system: str, machine: str, cuda: CudaToolkit, expected: str) -> None:
    assert build.select_accel("auto", system, machine, cuda) == expected


def test_explicit_accels() -> None:
    assert build.select_accel("cpu", "Darwin", "arm64", NO_CUDA) == "cpu"
    assert build.select_accel("metal", "Darwin", "arm64", NO_CUDA) == "metal"
    assert build.select_accel("cuda", "Linux", "x86_64", CUDA_FULL) == "cuda"


def test_unknown_accel() -> None:
    with pytest.raises(LlamaspecError, match="unknown accelerator 'vulkan'") as err:
        build.select_accel("vulkan")
    assert "auto, cpu, cuda, metal" in (err.value.hint or "")


def test_cuda_without_toolkit() -> None:
    with pytest.raises(LlamaspecError, match="no CUDA toolkit") as err:
        build.select_accel("cuda", "Linux", "x86_64", NO_CUDA)
    assert "--accel cpu" in (err.value.hint or "")


def test_cuda_without_cublas() -> None:
    with pytest.raises(LlamaspecError, match="not cuBLAS") as err:
        build.select_accel("cuda", "Linux", "x86_64", CUDA_NO_CUBLAS)
    assert "cublas" in (err.value.hint or "").lower()


def test_metal_off_macos() -> None:
    with pytest.raises(LlamaspecError, match="needs macOS"):
        build.select_accel("metal", "Linux", "x86_64", NO_CUDA)


def _plan(accel: str, cuda: CudaToolkit | None = None, disable: tuple[str, ...] = (), commit: str = "0c1e570",
          extra: tuple[str, ...] = ()) -> BuildPlan:
    source = SourceInfo("/src", commit, "pypi", "pypi:llama-cpp-python==0.3.36")
    defs = build.accel_cmake(accel, cuda)
    defs["LLAMA_BUILD_COMMIT"] = commit
    targets = {"speculative": "llama-speculative", "completion": "llama-completion", "quantize": "llama-quantize"}
    return BuildPlan(source, accel, defs, extra, disable, targets, "isa0")


def test_cmake_args_cpu() -> None:
    args = _plan("cpu").cmake_args()
    assert "-DGGML_NATIVE=ON" in args
    assert "-DGGML_CUDA=OFF" in args and "-DGGML_METAL=OFF" in args
    assert "-DBUILD_SHARED_LIBS=OFF" in args  # relocatable binaries for the cache
    assert "-DCMAKE_BUILD_TYPE=Release" in args
    assert "-DLLAMA_BUILD_COMMIT=0c1e570" in args


def test_cmake_args_cuda_with_and_without_gpu() -> None:
    with_gpu = _plan("cuda", CUDA_FULL).cmake_args()
    assert "-DGGML_CUDA=ON" in with_gpu
    assert "-DCMAKE_CUDA_ARCHITECTURES=native" in with_gpu
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc" in with_gpu
    no_gpu = _plan("cuda", CUDA_NO_CUBLAS).cmake_args()
    assert "-DCMAKE_CUDA_ARCHITECTURES=90;89;86;80" in no_gpu


def test_cmake_args_metal() -> None:
    args = _plan("metal").cmake_args()
    assert "-DGGML_METAL=ON" in args and "-DGGML_METAL_EMBED_LIBRARY=ON" in args
    assert "-DGGML_CUDA=OFF" in args


def test_cpu_workaround_flags_reach_both_compilers() -> None:
    args = _plan("cpu", disable=("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")).cmake_args()
    assert "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in args
    assert "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in args


def test_cache_key_changes_with_commit_accel_and_flags() -> None:
    base = _plan("cpu")
    assert base.key == _plan("cpu").key  # stable
    assert base.key != _plan("cpu", commit="1234567").key
    assert base.key != _plan("metal").key
    assert base.key != _plan("cpu", extra=("-DGGML_AVX512=OFF",)).key
    assert base.key != _plan("cpu", disable=("-mno-amx-tile",)).key
    assert base.folder.name.startswith("0c1e570-cpu-")


def test_cache_key_ignores_flag_order() -> None:
    a = build.cache_key("c", "cpu", ["-DA=1", "-DB=2"], ["x", "y"], "isa")
    b = build.cache_key("c", "cpu", ["-DB=2", "-DA=1"], ["y", "x"], "isa")
    assert a == b


def test_tree_targets_finds_current_and_old_names(tmp_path: Path) -> None:
    for folder, target in [("examples/speculative", "llama-speculative"), ("tools/main", "llama-cli"),
                           ("examples/quantize", "llama-quantize")]:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "CMakeLists.txt").write_text(f"set(TARGET {target})\nadd_executable(${{TARGET}} x.cpp)\n")
    targets = build.tree_targets(tmp_path)
    assert targets == {"speculative": "llama-speculative", "completion": "llama-cli", "quantize": "llama-quantize"}


def test_tree_without_speculative_is_refused(tmp_path: Path) -> None:
    from llamaspec.llamacpp import source

    (tmp_path / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    (tmp_path / "tools/quantize").mkdir(parents=True)
    (tmp_path / "tools/quantize/quantize.cpp").write_text("")
    with pytest.raises(LlamaspecError, match="the speculative example is missing"):
        source.check_tree(tmp_path)


def test_missing_cmake_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: None if name == "cmake" else "/usr/bin/" + name)
    with pytest.raises(LlamaspecError, match="cmake not found") as err:
        build.check_tools()
    assert "apt-get install cmake" in (err.value.hint or "")


def test_missing_compiler_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/bin/cmake" if name == "cmake" else None)
    with pytest.raises(LlamaspecError, match="a C\\+\\+ compiler not found"):
        build.check_tools()


def test_no_disk_space_refuses_to_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from llamaspec.base import paths

    monkeypatch.setattr(paths.shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(100 * 2**30, 100 * 2**30 - 2**20, 2**20))
    with pytest.raises(LlamaspecError, match="not enough free disk for a llama.cpp build") as err:
        paths.ensure_free_space(tmp_path, 3 * 2**30, "a llama.cpp build")
    assert "LLAMASPEC_CACHE" in (err.value.hint or "")


def test_unfinished_build_folder_is_not_a_build(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    assert build.load_build(tmp_path) is None  # no manifest: interrupted or still smoke-testing
    (tmp_path / "manifest.json").write_text("{not json")
    assert build.load_build(tmp_path) is None


def _fake_program(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_sigill_in_smoke_test_triggers_a_rebuild_without_amx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A program killed by SIGILL is rebuilt with the AMX instruction sets switched off."""
    from llamaspec.llamacpp import smoke

    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    crashing = tmp_path / "crash"
    crashing.mkdir()
    _fake_program(crashing / "llama-speculative", "kill -ILL $$")
    first = build.Build(bin_dir=str(crashing), commit="0c1e570", accel="cpu", programs={"speculative": "llama-speculative"})
    plan = _plan("cpu")
    compiled: list[tuple[str, ...]] = []

    def fake_compile(the_plan: BuildPlan, jobs: int | None) -> build.Build:
        compiled.append(the_plan.cpu_disable)
        good = tmp_path / "good" / "bin"
        good.mkdir(parents=True)
        _fake_program(good / "llama-speculative", "exit 0")
        return build.Build(bin_dir=str(good), commit="0c1e570", accel="cpu", programs={"speculative": "llama-speculative"})

    def fake_check(b: build.Build) -> None:
        done = build.proc.run([str(Path(b.bin_dir) / "llama-speculative")], check=False)
        if done.signal_name == "SIGILL":
            raise smoke.IllegalInstruction("llama-speculative")

    monkeypatch.setattr(build, "_compile", fake_compile)
    monkeypatch.setattr(smoke, "check", fake_check)
    result = build._smoke_or_rebuild(first, plan, 2, plan.source)
    assert compiled == [("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")]
    manifest = json.loads((Path(result.bin_dir).parent / "manifest.json").read_text())
    assert manifest["smoke_host"] == host.fingerprint()


def test_sigill_with_amx_already_off_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from llamaspec.llamacpp import smoke

    plan = _plan("cpu", disable=("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"))
    monkeypatch.setattr(smoke, "check", lambda b: (_ for _ in ()).throw(smoke.IllegalInstruction("llama-completion")))
    first = build.Build(bin_dir=str(tmp_path), commit="c", accel="cpu")
    with pytest.raises(LlamaspecError, match="llama-completion died with SIGILL") as err:
        build._smoke_or_rebuild(first, plan, 2, plan.source)
    assert "-DCMAKE_C_FLAGS" in (err.value.hint or "")


def test_prebuilt_folder_without_speculative(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="holds no llama-speculative"):
        build.prebuilt(tmp_path)


# --- the cache key must not move ---------------------------------------------------------------

def test_cache_key_is_the_one_existing_builds_were_stored_under() -> None:
    """Renaming "backend" to "accel" must not orphan cached builds: the hashed blob is unchanged."""
    import hashlib
    import platform

    blob = json.dumps({"commit": "0c1e570", "backend": "cpu", "cmake": ["-DA=1"], "targets": ["llama-speculative"],
                       "isa": "isa0", "os": platform.system(), "arch": platform.machine()}, sort_keys=True)
    before_rename = hashlib.sha256(blob.encode()).hexdigest()[:12]
    assert build.cache_key("0c1e570", "cpu", ["-DA=1"], ["llama-speculative"], "isa0") == before_rename


# --- progress from the build's own output --------------------------------------------------------

BUILD_LOG = Path(__file__).parent / "fixtures" / "llamacpp" / "0c1e570" / "build-make.log"


def test_build_steps_from_a_recorded_build_log() -> None:
    """Recorded from `cmake --build` of the pinned tree (GNU make generator, -j 2)."""
    lines = BUILD_LOG.read_text().splitlines()
    steps = [s for s in map(build.build_step, lines) if s is not None]
    assert len(steps) == sum(1 for line in lines if line.startswith("["))  # every progress line, nothing else
    percents = [p for p, _ in steps]
    assert percents == sorted(percents) and 0 <= percents[0] <= percents[-1] <= 100
    notes = {note for _, note in steps}
    assert "compiling ggml-cpu: ops.cpp" in notes  # target and file, from ggml/src/CMakeFiles/ggml-cpu.dir/ggml-cpu/ops.cpp.o
    assert "linking libggml-base.a" in notes and "built ggml-base" in notes
    assert build.build_step("gmake[4]: Leaving directory '/x/cmake'") is None


# --- the build cache ---------------------------------------------------------------------------

def _cached_build(cache: Path, commit: str, accel: str = "cpu", *, old_manifest: bool = False) -> Path:
    """A build folder as `llamaspec build` leaves it: bin/ with a runnable program, manifest.json,
    and the latest pointer."""
    folder = cache / "builds" / f"{commit}-{accel}-0123456789ab"
    (folder / "bin").mkdir(parents=True)
    _fake_program(folder / "bin" / "llama-speculative", "exit 0")
    manifest = {"bin_dir": str(folder / "bin"), "commit": commit, "cmake_args": ["-DGGML_NATIVE=ON"],
                "programs": {"speculative": "llama-speculative"}, "key": "0123456789ab",
                "smoke_host": host.fingerprint()}
    manifest["backend" if old_manifest else "accel"] = accel  # manifests before the rename said "backend"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (cache / "builds" / f"latest-{commit}-{accel}").write_text(str(folder) + "\n")
    return folder


@pytest.fixture
def no_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout without vendor/llama.cpp and a build cache of its own."""
    root = tmp_path / "checkout"
    (root / "experiments").mkdir(parents=True)
    monkeypatch.setenv("LLAMASPEC_ROOT", str(root))
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LLAMASPEC_LLAMACPP", raising=False)
    return tmp_path / "cache"


def test_manifest_written_before_the_rename_still_loads(tmp_path: Path) -> None:
    folder = _cached_build(tmp_path, "0c1e570", old_manifest=True)
    found = build.load_build(folder)
    assert found is not None and found.accel == "cpu" and found.label == "llama.cpp 0c1e570 (cpu)"


def test_without_a_source_tree_the_pinned_build_is_found(no_source: Path) -> None:
    from llamaspec.llamacpp import source

    pinned = source.pinned().commit
    assert pinned == "0c1e570"
    _cached_build(no_source, "7841fc7")  # another commit's build is not the one
    folder = _cached_build(no_source, pinned, old_manifest=True)
    found = build.find()
    assert found.commit == pinned and found.bin_dir == str(folder / "bin") and found.accel == "cpu"
    assert build.find("cpu") == found  # auto picks the one CPU build


def test_without_a_source_tree_or_a_build_the_error_asks_for_both(no_source: Path) -> None:

    _cached_build(no_source, "7841fc7")
    with pytest.raises(LlamaspecError) as err:
        build.find("cpu")
    assert "no llama.cpp source" in err.value.message and "pinned llama.cpp 0c1e570 (cpu)" in err.value.message
    assert "llamaspec build" in (err.value.hint or "")


def test_a_broken_source_tree_is_reported_not_skipped(no_source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.base import paths
    from llamaspec.llamacpp import source

    _cached_build(no_source, source.pinned().commit)
    tree = paths.vendor_dir()
    tree.mkdir(parents=True)
    (tree / "README.md").write_text("half a checkout\n")
    with pytest.raises(LlamaspecError, match="not a usable llama.cpp tree"):
        build.find()


def test_with_a_source_tree_its_commit_decides(no_source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.llamacpp import source

    tree = no_source.parent / "my-llama.cpp"
    for f in ("CMakeLists.txt", "examples/speculative/speculative.cpp", "tools/quantize/quantize.cpp"):
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        (tree / f).write_text("")
    (tree / source.MARKER).write_text(json.dumps({"path": str(tree), "commit": "abc1234", "kind": "path",
                                                  "origin": f"path:{tree}"}))
    monkeypatch.setenv("LLAMASPEC_LLAMACPP", str(tree))
    _cached_build(no_source, source.pinned().commit)
    with pytest.raises(LlamaspecError, match="no llama.cpp build of abc1234"):
        build.find()
    folder = _cached_build(no_source, "abc1234")
    assert build.find().bin_dir == str(folder / "bin")


def test_unknown_accel_when_finding() -> None:

    with pytest.raises(LlamaspecError, match="unknown accelerator 'rocm'"):
        build.find("rocm")


FAKE_CMAKE = r'''#!{python}
"""Stands in for cmake: configure does nothing; --build replays a recorded build log with pauses
and leaves the requested targets in bin/."""
import sys, time
from pathlib import Path

args = sys.argv[1:]
if args[0] != "--build":  # configure: a CMake cache in the -B folder
    tree = Path(args[args.index("-B") + 1])
    tree.mkdir(parents=True, exist_ok=True)
    (tree / "CMakeCache.txt").write_text("")
    sys.exit(0)
build_dir = Path(args[1])
targets = args[args.index("--target") + 1:]
with open(build_dir / "builds.txt", "a") as f:
    f.write(" ".join(targets) + "\n")
for line in Path({log!r}).read_text().splitlines():
    print(line, flush=True)
    if line.startswith("[") and "ggml-cpu.dir/ggml-cpu/ops.cpp" in line:
        # the long compile of one big file: no output until the test has seen its heartbeats
        release, deadline = Path({release!r}), time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
(build_dir / "bin").mkdir(parents=True, exist_ok=True)
for name in targets:
    (build_dir / "bin" / name).write_text("#!/bin/sh\n")
'''


def test_compile_reports_steps_and_a_heartbeat_while_a_file_compiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The progress of `_compile` comes from the build's own lines; during a long silent compile
    the heartbeat keeps saying where it is (percentage, elapsed, target), with no ETA."""
    import logging
    import sys

    fake = tmp_path / "fakebin" / "cmake"
    fake.parent.mkdir()
    release = tmp_path / "ops.cpp-compiled"
    fake.write_text(FAKE_CMAKE.replace("{python}", sys.executable).replace("{log!r}", repr(str(BUILD_LOG)))
                    .replace("{release!r}", repr(str(release))))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "HEARTBEAT_SECONDS", 0.2)

    class ReleaseAfterHeartbeats(logging.Handler):  # ops.cpp "compiles" until two heartbeats were said
        def emit(self, record: logging.LogRecord) -> None:
            line = record.getMessage()
            if line.endswith("compiling ggml-cpu: ops.cpp") and "7.0%" in line:
                self.seen = getattr(self, "seen", 0) + 1
                if self.seen >= 3:
                    release.touch()

    handler = ReleaseAfterHeartbeats()
    logging.getLogger("llamaspec").addHandler(handler)
    caplog.set_level(logging.INFO, logger="llamaspec")
    try:
        record = build._compile(_plan("cpu"), jobs=2)
    finally:
        logging.getLogger("llamaspec").removeHandler(handler)
    assert sorted(Path(record.bin_dir).iterdir()) == [Path(record.bin_dir) / n for n in
                                                       ("llama-completion", "llama-quantize", "llama-speculative")]
    assert not (Path(record.bin_dir).parent / "manifest.json").exists()  # written only after the smoke test
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("building 3 programs")]
    assert lines and not any("ETA" in line for line in lines)
    # CMake's 21 % of the first of 3 target passes: 7 % of the whole build
    stuck = [line for line in lines if line.endswith("compiling ggml-cpu: ops.cpp") and "  7.0%" in line]
    assert len(stuck) >= 3, lines  # the 7 % line, then heartbeats while ops.cpp compiles
    assert any(r.getMessage().startswith("built llama.cpp in") for r in caplog.records)


def test_a_second_build_of_the_same_folder_waits_and_reuses_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Two processes building the same key (a test run beside `llamaspec build`) once wiped each
    other's work directory mid-compile. Now the second waits for the first and takes its build."""
    import logging
    import threading

    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "LOCK_NOTICE_SECONDS", 0.1)
    the_plan = _plan("cpu")
    monkeypatch.setattr(build.sources, "check_tree", lambda tree: None)
    monkeypatch.setattr(build, "check_tools", lambda: None)
    monkeypatch.setattr(build, "plan", lambda source, accel, extra, rpc=False: the_plan)

    def must_not_compile(p: BuildPlan, jobs: int | None) -> build.Build:
        raise AssertionError("compiled again although the other process had just built it")

    monkeypatch.setattr(build, "_compile", must_not_compile)
    holding, released, noticed = threading.Event(), threading.Event(), threading.Event()

    class Notice(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for the same llama.cpp build" in record.getMessage():
                noticed.set()

    def first_process() -> None:
        with build.exclusive(the_plan.folder):
            holding.set()
            noticed.wait(60)  # held until the second has said it waits, however slow the machine
            (the_plan.folder / "bin").mkdir(parents=True)
            build.stamp_smoke_host(build.Build(bin_dir=str(the_plan.folder / "bin"), commit="0c1e570", accel="cpu"))
        released.set()

    other = threading.Thread(target=first_process)
    other.start()
    assert holding.wait(60)
    caplog.set_level(logging.INFO, logger="llamaspec")
    notice = Notice()
    logging.getLogger("llamaspec").addHandler(notice)
    try:
        result = build.build("cpu", source=the_plan.source)
    finally:
        logging.getLogger("llamaspec").removeHandler(notice)
    other.join()
    assert released.is_set() and result.bin_dir == str(the_plan.folder / "bin")
    assert any("waiting for the same llama.cpp build in another llamaspec (pid" in r.getMessage() for r in caplog.records)


def test_build_progress_only_moves_forward_over_every_target_pass() -> None:
    """A real 6-program build (its progress lines, recorded at 0c1e570): CMake counts 0-100 % per
    target pass, so the raw figure read 100 % then 7 %, 69 %...; the whole build's never falls."""
    recorded = (BUILD_LOG.parent / "build-6-targets-steps.log").read_text().splitlines()
    targets = recorded[0].split("--target ")[1].split()
    assert len(targets) == 6
    raw = [s[0] for s in map(build.build_step, recorded) if s is not None]
    assert any(b < a for a, b in zip(raw, raw[1:], strict=False))  # the recording does fall back
    overall = build.BuildProgress(len(targets))
    shown = [(pct, note) for pct, note in (overall.step(line) or (None, "") for line in recorded) if pct is not None]
    percents = [pct for pct, _ in shown]
    assert len(shown) == len(raw) and percents == sorted(percents) and percents[-1] == 100.0
    assert overall.passes_done == 5 and 100.0 not in percents[:-3]  # 100 % only in the last pass's final lines
    built = {note.removeprefix("built "): pct for pct, note in shown if note.removeprefix("built ") in targets}
    for k, name in enumerate(targets):  # pass k ends at (k + 1) / 6 of the bar
        assert built[name] == pytest.approx(100.0 * (k + 1) / 6), (name, built)


def test_progress_never_goes_backwards(caplog: pytest.LogCaptureFixture) -> None:
    import io

    from llamaspec.base.progress import Progress

    bar = Progress("x", stream=io.StringIO(), eta=False)
    bar.update(50, "half")
    bar.update(30, "less")
    assert bar.done == 50 and bar.note == "less"
    bar.close()


def test_the_first_step_leaves_the_server_for_when_it_is_first_needed() -> None:
    targets = {"speculative": "llama-speculative", "speculative-simple": "llama-speculative-simple",
               "completion": "llama-completion", "quantize": "llama-quantize", "bench": "llama-bench",
               "server": "llama-server", "rpc-server": "ggml-rpc-server"}
    now, later = build.first_step(targets)
    assert later == {"server": "llama-server"}  # what the demo never runs
    assert now == {r: t for r, t in targets.items() if r != "server"}  # everything make demo calls, and RPC when asked


def test_a_pending_server_is_built_into_the_same_folder_on_first_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first step builds what the demo runs and keeps its CMake tree; llama-server, looked up
    for the first time, is one more `cmake --build --target llama-server` there, recorded in the
    same manifest; a later lookup builds nothing."""
    import sys

    from llamaspec.llamacpp import server, smoke

    fake = tmp_path / "fakebin" / "cmake"
    fake.parent.mkdir()
    release = tmp_path / "released"
    release.touch()
    fake.write_text(FAKE_CMAKE.replace("{python}", sys.executable).replace("{log!r}", repr(str(BUILD_LOG)))
                    .replace("{release!r}", repr(str(release))))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "check_tools", lambda: None)
    monkeypatch.setattr(server, "ServerEngine", lambda b, warm=False: b)  # what open_engine hands over is the build itself
    plan = _plan("cpu")
    plan = BuildPlan(plan.source, plan.accel, plan.cmake_defs, plan.extra_args, plan.cpu_disable,
                     {**plan.targets, "server": "llama-server"}, plan.native_isa)
    first = build._compile(plan, jobs=2)
    assert "server" not in first.programs and first.pending == {"server": "llama-server"}
    work = build.work_dir(plan.folder) / "cmake"
    assert (work / "builds.txt").read_text() == "llama-completion llama-quantize llama-speculative\n"
    first = build.stamp_smoke_host(first)  # what build() does after the smoke test
    build.point_latest_at(first)
    monkeypatch.setattr(smoke, "_run", lambda argv, name, log_path, usage_ok=False: None)

    from llamaspec.measure.contract import EngineOptions

    got = server.open_engine(EngineOptions(accel="cpu"))  # the first lookup of llama-server
    assert got.programs["server"] == "llama-server" and got.pending == {} and got.bin_dir == first.bin_dir
    assert (Path(got.bin_dir) / "llama-server").is_file()
    assert build.load_build(plan.folder) == got  # in the same manifest
    assert not work.exists()  # nothing pending: the CMake tree is let go
    assert build.ensure_program(got, "server") is got  # built: nothing more to do
    assert build.ensure_program(build.find("cpu"), "server") == got


@pytest.mark.llamacpp
def test_the_real_build_is_reused_for_the_server(llama_build) -> None:
    """The cached pinned build: its llama-server built (now, or by the first step of an older llamaspec)
    or pending; looking it up builds it at most once, into the same folder, and then reuses it."""
    with_server = build.ensure_program(llama_build, "server")
    assert "server" in with_server.programs and with_server.pending == {}
    assert Path(with_server.bin_dir) == Path(llama_build.bin_dir) and (Path(with_server.bin_dir) / "llama-server").is_file()
    assert build.ensure_program(with_server, "server") is with_server
    assert build.load_build(Path(with_server.bin_dir).parent) == with_server
