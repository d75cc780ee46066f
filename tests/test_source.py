"""The pinned llama.cpp source: checksum, extraction, markers, and refusals."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from llamaspec.base import atomic
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import source


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_sdist(path: Path, version: str, files: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_python-{version}/vendor/llama.cpp/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


TREE = {"CMakeLists.txt": "project(llama)\n", "examples/speculative/speculative.cpp": "",
        "tools/quantize/quantize.cpp": "", "convert_hf_to_gguf.py": ""}


def test_wrong_checksum_is_refused_and_the_download_deleted(cache: Path, tmp_path: Path) -> None:
    archive = fake_sdist(cache / "downloads" / "sdists" / "llama_cpp_python-0.3.36.tar.gz", "0.3.36", TREE)
    dest = tmp_path / "vendor" / "llama.cpp"
    with pytest.raises(LlamaspecError, match="checksum mismatch for llama_cpp_python-0.3.36.tar.gz") as err:
        source.fetch("pypi:llama-cpp-python==0.3.36", dest)
    assert "deleted" in (err.value.hint or "")
    assert not archive.exists() and not dest.exists()


def test_verified_sdist_is_extracted_with_its_commit(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = fake_sdist(cache / "downloads" / "sdists" / "llama_cpp_python-9.9.9.tar.gz", "9.9.9", TREE)
    pin = source.PinnedSdist("9.9.9", atomic.sha256_file(archive), "abc1234", "2026-01-01")
    monkeypatch.setitem(source.PINNED_SDISTS, "9.9.9", pin)
    dest = tmp_path / "vendor" / "llama.cpp"
    info = source.fetch("pypi:llama-cpp-python==9.9.9", dest)
    assert info.commit == "abc1234" and (dest / "examples/speculative/speculative.cpp").is_file()
    assert json.loads((dest / source.MARKER).read_text())["commit"] == "abc1234"
    assert source.fetch("pypi:llama-cpp-python==9.9.9", dest).commit == "abc1234"  # reused
    assert source.describe_local_tree(dest).commit == "abc1234"  # path: sources keep the pinned commit


def test_sdist_without_the_speculative_example_leaves_nothing(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partial = {k: v for k, v in TREE.items() if "speculative" not in k}
    archive = fake_sdist(cache / "downloads" / "sdists" / "llama_cpp_python-9.9.8.tar.gz", "9.9.8", partial)
    monkeypatch.setitem(source.PINNED_SDISTS, "9.9.8", source.PinnedSdist("9.9.8", atomic.sha256_file(archive), "x", ""))
    dest = tmp_path / "vendor" / "llama.cpp"
    with pytest.raises(LlamaspecError, match="the speculative example is missing"):
        source.fetch("pypi:llama-cpp-python==9.9.8", dest)
    assert not dest.exists() and list(dest.parent.iterdir()) == []  # no half-extracted tree


def test_truncated_sdist_is_a_clear_error(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = fake_sdist(cache / "downloads" / "sdists" / "llama_cpp_python-9.9.7.tar.gz", "9.9.7", TREE)
    archive.write_bytes(archive.read_bytes()[:60])
    monkeypatch.setitem(source.PINNED_SDISTS, "9.9.7", source.PinnedSdist("9.9.7", atomic.sha256_file(archive), "x", ""))
    with pytest.raises(LlamaspecError, match="cannot extract"):
        source.fetch("pypi:llama-cpp-python==9.9.7", tmp_path / "t")


def test_unpinned_version_and_bad_specs() -> None:
    with pytest.raises(LlamaspecError, match="is not pinned"):
        source.fetch("pypi:llama-cpp-python==0.0.1", Path("/nonexistent"))
    with pytest.raises(LlamaspecError, match="unknown llama.cpp source"):
        source.parse_spec("svn:whatever")
    with pytest.raises(LlamaspecError, match="URL@COMMIT"):
        source.fetch("git:https://example.invalid/llama.cpp", Path("/nonexistent/x"))


def test_foreign_tree_is_not_overwritten(tmp_path: Path) -> None:
    dest = tmp_path / "llama.cpp"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep")
    with pytest.raises(LlamaspecError, match="was not filled by llamaspec"):
        source.fetch("pypi:llama-cpp-python==0.3.36", dest)
    assert (dest / "mine.txt").read_text() == "keep"
