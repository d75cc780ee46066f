"""GGUF metadata through the gguf library: real files, llama.cpp's vocabulary defaults, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from models_factory import tiny_gguf

from llamaspec import models
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.smoke import write_tiny_llama
from llamaspec.models import reader
from llamaspec.models.reader import GGUFMetadata

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"


def test_reads_a_real_gguf_written_by_llamaspec_smoke(tmp_path: Path) -> None:
    meta = reader.read(write_tiny_llama(tmp_path / "tiny.gguf"))
    assert meta.architecture == "llama"
    assert meta.file_type == "F32"
    assert meta.tensor_types == {"F32": 21}
    assert meta.context_length == 256
    # 265 tokens x 64 twice (embeddings, output) + 2 layers of 4x64x64 + 3x128x64 + norms
    assert meta.parameters == 2 * 265 * 64 + 2 * (4 * 64 * 64 + 3 * 128 * 64 + 2 * 64) + 64
    v = meta.vocab
    assert (v.type, v.model, v.size, v.bos_id, v.eos_id, v.add_bos, v.add_eos) == ("SPM", "llama", 265, 1, 2, True, False)
    assert meta.file_size == (tmp_path / "tiny.gguf").stat().st_size


def test_recorded_smollm2_metadata_round_trips() -> None:
    recorded = json.loads((FIXTURES / "smollm2-135m-q4_1.metadata.json").read_text())["metadata"]
    meta = GGUFMetadata.from_dict(recorded)
    assert meta.to_dict() == recorded
    assert meta.parameters_label == "135M"
    assert (meta.vocab.type, meta.vocab.size, meta.vocab.add_bos) == ("BPE", 49152, False)


@pytest.mark.parametrize(("kwargs", "expected"), [
    # tokenizer model, pre-tokenizer, explicit keys -> (type, bos, eos, add_bos, add_eos)
    ({"tokenizer": "llama"}, ("SPM", 1, 2, True, False)),
    ({"tokenizer": "llama", "add_bos": False}, ("SPM", 1, 2, False, False)),
    ({"tokenizer": "gpt2", "pre": "smollm"}, ("BPE", 1, 2, False, False)),
    ({"tokenizer": "gpt2", "pre": "llama-bpe"}, ("BPE", 1, 2, True, False)),
    ({"tokenizer": "gpt2", "pre": "llama-bpe", "add_bos": False}, ("BPE", 1, 2, False, False)),
    ({"tokenizer": "gpt2", "pre": "default", "bos": None, "eos": None}, ("BPE", 11, 11, False, False)),
    ({"tokenizer": "llama", "bos": 100000}, ("SPM", 1, 2, True, False)),  # out-of-range id ignored
])
def test_vocabulary_facts_follow_llama_cpp_defaults(tmp_path: Path, kwargs: dict, expected: tuple) -> None:
    v = reader.read(tiny_gguf(tmp_path / "v.gguf", write_tensors=False, **kwargs)).vocab
    assert (v.type, v.bos_id, v.eos_id, v.add_bos, v.add_eos) == expected


@pytest.mark.parametrize("keep", ["half", "header"])
def test_truncated_gguf_is_refused(tmp_path: Path, keep: str) -> None:
    path = write_tiny_llama(tmp_path / "cut.gguf")
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2 if keep == "half" else 200)
    with pytest.raises(LlamaspecError) as err:
        reader.read(path)
    assert f"{path} is not a usable GGUF file" in err.value.message
    assert "truncated" in (err.value.hint or "")
    assert "\n" not in err.value.message


@pytest.mark.parametrize(("content", "expected"), [
    (b"<html>not a model</html>", "starts with b'<htm'"),
    (b"", "starts with b''"),
])
def test_non_gguf_file_is_refused(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(LlamaspecError) as err:
        reader.read(path)
    assert expected in err.value.message


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="model file not found"):
        reader.read(tmp_path / "nope.gguf")
    with pytest.raises(LlamaspecError, match="it is a folder"):
        reader.read(tmp_path)


def test_public_metadata_is_the_file_s_own_header_whatever_its_record_says(tmp_path: Path) -> None:
    """One reader (``models.headers``): a catalog file's record is not a second source of its metadata."""
    from llamaspec.models import store

    path = write_tiny_llama(tmp_path / "m.gguf")
    real = reader.read(path)
    st = path.stat()
    fake = {**real.to_dict(), "architecture": "from-the-record"}
    record = {"record_version": store.RECORD_VERSION, "name": "m", "variant": "f32", "sha256": "0" * 64,
              "size": st.st_size, "mtime_ns": st.st_mtime_ns, "metadata": fake}
    store.record_path(path).write_text(json.dumps(record))
    assert models.metadata(path) == real and models.metadata(path).architecture == "llama"
