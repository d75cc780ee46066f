"""Backend selection, CMake arguments per backend, the cache key, and build error paths."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from llamaspec.errors import LlamaspecError
from llamaspec.llamacpp import build
from llamaspec.llamacpp.build import BuildPlan, CudaToolkit
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
def test_auto_backend(system: str, machine: str, cuda: CudaToolkit, expected: str) -> None:
    assert build.select_backend("auto", system, machine, cuda) == expected


def test_explicit_backends() -> None:
    assert build.select_backend("cpu", "Darwin", "arm64", NO_CUDA) == "cpu"
    assert build.select_backend("metal", "Darwin", "arm64", NO_CUDA) == "metal"
    assert build.select_backend("cuda", "Linux", "x86_64", CUDA_FULL) == "cuda"


def test_unknown_backend() -> None:
    with pytest.raises(LlamaspecError, match="unknown backend 'vulkan'") as err:
        build.select_backend("vulkan")
    assert "auto, cpu, cuda, metal" in (err.value.hint or "")


def test_cuda_without_toolkit() -> None:
    with pytest.raises(LlamaspecError, match="no CUDA toolkit") as err:
        build.select_backend("cuda", "Linux", "x86_64", NO_CUDA)
    assert "--backend cpu" in (err.value.hint or "")


def test_cuda_without_cublas() -> None:
    with pytest.raises(LlamaspecError, match="not cuBLAS") as err:
        build.select_backend("cuda", "Linux", "x86_64", CUDA_NO_CUBLAS)
    assert "cublas" in (err.value.hint or "").lower()


def test_metal_off_macos() -> None:
    with pytest.raises(LlamaspecError, match="needs macOS"):
        build.select_backend("metal", "Linux", "x86_64", NO_CUDA)


def _plan(backend: str, cuda: CudaToolkit | None = None, disable: tuple[str, ...] = (), commit: str = "0c1e570",
          extra: tuple[str, ...] = ()) -> BuildPlan:
    source = SourceInfo("/src", commit, "pypi", "pypi:llama-cpp-python==0.3.36")
    defs = build.backend_cmake(backend, cuda)
    defs["LLAMA_BUILD_COMMIT"] = commit
    targets = {"speculative": "llama-speculative", "completion": "llama-completion", "quantize": "llama-quantize"}
    return BuildPlan(source, backend, defs, extra, disable, targets, "isa0")


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


def test_cache_key_changes_with_commit_backend_and_flags() -> None:
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
        build.check_tools("cpu")
    assert "apt-get install cmake" in (err.value.hint or "")


def test_missing_compiler_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/bin/cmake" if name == "cmake" else None)
    with pytest.raises(LlamaspecError, match="a C\\+\\+ compiler not found"):
        build.check_tools("cpu")


def test_no_disk_space_refuses_to_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from llamaspec import paths

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
    first = build.Build(bin_dir=str(crashing), commit="0c1e570", backend="cpu", programs={"speculative": "llama-speculative"})
    plan = _plan("cpu")
    compiled: list[tuple[str, ...]] = []

    def fake_compile(the_plan: BuildPlan, jobs: int | None) -> build.Build:
        compiled.append(the_plan.cpu_disable)
        good = tmp_path / "good" / "bin"
        good.mkdir(parents=True)
        _fake_program(good / "llama-speculative", "exit 0")
        return build.Build(bin_dir=str(good), commit="0c1e570", backend="cpu", programs={"speculative": "llama-speculative"})

    def fake_check(b: build.Build) -> None:
        done = build.proc.run([str(Path(b.bin_dir) / "llama-speculative")], check=False)
        if done.signal_name == "SIGILL":
            raise smoke.IllegalInstruction("llama-speculative")

    monkeypatch.setattr(build, "_compile", fake_compile)
    monkeypatch.setattr(smoke, "check", fake_check)
    result = build._smoke_or_rebuild(first, plan, 2, plan.source)
    assert compiled == [("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")]
    manifest = json.loads((Path(result.bin_dir).parent / "manifest.json").read_text())
    assert manifest["smoke_host"] == build.host_fingerprint()


def test_sigill_with_amx_already_off_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from llamaspec.llamacpp import smoke

    plan = _plan("cpu", disable=("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"))
    monkeypatch.setattr(smoke, "check", lambda b: (_ for _ in ()).throw(smoke.IllegalInstruction("llama-completion")))
    first = build.Build(bin_dir=str(tmp_path), commit="c", backend="cpu")
    with pytest.raises(LlamaspecError, match="llama-completion died with SIGILL") as err:
        build._smoke_or_rebuild(first, plan, 2, plan.source)
    assert "-DCMAKE_C_FLAGS" in (err.value.hint or "")


def test_prebuilt_folder_without_speculative(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="holds no llama-speculative"):
        build.prebuilt(tmp_path)
