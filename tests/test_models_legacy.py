"""Variants for older llama.cpp: ``TYPE-untied`` (output.weight written out as a copy of
token_embd.weight) and ``TYPE-sep2023`` (untied, with tokenizer scores and a raw-byte vocabulary)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import gguf
import numpy as np
import pytest
from models_factory import tiny_gguf, write_catalog

from llamaspec import models
from llamaspec.base.errors import LlamaspecError
from llamaspec.models import legacy, store

ALIGNMENT = 64  # not gguf's default 32: the copy must keep the layout its general.alignment key describes


# A GPT-2 byte-level vocabulary in miniature: "Ġ" stands for a space, "Ċ" for a newline.
GPT2_TOKENS = ["<|endoftext|>", "<s>", "</s>", "Ġ", "Ċ", "t", "h", "e", "Ġt", "Ġthe", "ĊĊ", "é", "Ω", "<|im_start|>"]


def tied_gguf(path: Path, *, alignment: int | None = ALIGNMENT, tokenizer: str = "llama", scores: bool = True) -> Path:
    """A tiny Llama GGUF with tied embeddings (no output.weight) and Q8_0 embeddings, as SmolLM2 ships."""
    gpt2 = tokenizer == "gpt2"
    full = tiny_gguf(path.with_name(path.stem + "-full.gguf"), tokenizer=tokenizer, tokens=GPT2_TOKENS if gpt2 else None)
    reader = gguf.GGUFReader(full)
    writer = gguf.GGUFWriter(path, arch="llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == gguf.Keys.General.ARCHITECTURE:
            continue
        if (f.name == legacy.SCORES and not scores) or f.name == legacy.MERGES:
            continue
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
    writer.add_array("llamaspec.test.floats", [0.5, 1.5])  # a float array, to see non-string arrays survive
    if gpt2:
        writer.add_token_merges(["Ġ t", "Ġt h", "Ġth e", "Ċ Ċ"])
    for t in reader.tensors:
        if t.name == legacy.OUTPUT:
            continue
        if t.name == legacy.EMBEDDINGS:
            q = gguf.quants.quantize(np.asarray(t.data, dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(t.name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(t.name, np.asarray(t.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    full.unlink()
    return path


def test_untie_copies_every_key_and_tensor_and_adds_the_output(tmp_path: Path) -> None:
    src = tied_gguf(tmp_path / "tied.gguf")
    dest = tmp_path / "untied.gguf"
    done = legacy.untie(src, dest)
    assert done["tensor"] == "output.weight" and done["tensor_type"] == "Q8_0"
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dest)
    keys = [f.name for f in a.fields.values() if not f.name.startswith("GGUF.")]
    assert keys and sorted(keys) == sorted(f.name for f in b.fields.values() if not f.name.startswith("GGUF."))
    for key in keys:
        fa, fb = a.get_field(key), b.get_field(key)
        assert fb is not None and (fb.types, fb.contents()) == (fa.types, fa.contents()), key
    before = {t.name: t for t in a.tensors}
    after = {t.name: t for t in b.tensors}
    assert set(after) == set(before) | {"output.weight"}
    for name, t in before.items():
        assert after[name].tensor_type == t.tensor_type and bytes(after[name].data) == bytes(t.data), name
    out, embd = after["output.weight"], before["token_embd.weight"]
    assert out.tensor_type == gguf.GGMLQuantizationType.Q8_0  # copied as it is, not requantized
    assert list(out.shape) == list(embd.shape) and bytes(out.data) == bytes(embd.data)
    assert all(t.data_offset % ALIGNMENT == 0 for t in b.tensors)


def _strings(reader: gguf.GGUFReader, key: str) -> list[bytes]:
    field = reader.get_field(key)
    assert field is not None
    return [bytes(field.parts[i]) for i in field.data]


def test_sep2023_writes_the_vocabulary_as_raw_bytes_with_scores(tmp_path: Path) -> None:
    src = tied_gguf(tmp_path / "tied.gguf", tokenizer="gpt2", scores=False)
    dest = tmp_path / "sep2023.gguf"
    done = legacy.for_sep2023(src, dest)
    assert (done["vocabulary"], done["scores_added"]) == ("raw bytes", True)
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dest)
    assert _strings(b, legacy.TOKENS) == [
        b"<|endoftext|>", b"<s>", b"</s>", b" ", b"\n", b"t", b"h", b"e", b" t", b" the", b"\n\n",
        b"\xe9",  # byte-level "é" is the byte 0xE9 (half of a UTF-8 character), not the character
        "Ω".encode(),  # not byte-level text: kept as it is
        b"<|im_start|>"]
    assert _strings(b, legacy.MERGES) == [b"  t", b" t h", b" th e", b"\n \n"]
    scores = b.get_field(legacy.SCORES)
    assert scores is not None and scores.contents() == [0.0] * len(GPT2_TOKENS)
    assert {t.name for t in b.tensors} == {t.name for t in a.tensors} | {"output.weight"}


def test_sep2023_refuses_a_sentencepiece_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="for GPT-2-style BPE"):
        legacy.for_sep2023(tied_gguf(tmp_path / "tied.gguf"), tmp_path / "out.gguf")


def test_a_model_that_has_an_output_tensor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="nothing to untie"):
        legacy.untie(tiny_gguf(tmp_path / "untied.gguf"), tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def _tied_catalog(home: Path, tmp_path: Path) -> Path:
    src = tied_gguf(tmp_path / "tied.gguf")
    write_catalog(home, {"tiny": {"source": {"kind": "path", "path": str(src), "type": "f32"},
                                  "variants": ["f32", "f32-untied"]}})
    return src


def test_untied_variant_is_derived_recorded_and_reused(home: Path, tmp_path: Path) -> None:
    _tied_catalog(home, tmp_path)
    made = models.resolve("tiny", "f32-untied")
    base = models.resolve("tiny", "f32")
    assert made.made_now and made.path == home / "tiny" / "ggml-model-f32-untied.gguf"
    assert made.provenance["kind"] == "untied"
    assert (made.provenance["from"], made.provenance["from_sha256"]) == ("tiny:f32", base.sha256)
    assert made.metadata.vocab == base.metadata.vocab and made.metadata.architecture == "llama"
    record = json.loads(store.record_path(made.path).read_text())
    assert record["sha256"] == made.sha256 and record["variant"] == "f32-untied"
    again = models.resolve("tiny", "f32-untied")
    assert not again.made_now and again.sha256 == made.sha256
    assert [p.name for p in (home / "tiny").iterdir() if ".partial" in p.name] == []


def test_already_there_is_said_once_per_process(home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _tied_catalog(home, tmp_path)
    models.resolve("tiny", "f32")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="llamaspec.models.store"):
        for _ in range(3):
            models.resolve("tiny", "f32")
    said = [r.levelno for r in caplog.records if "already there" in r.getMessage()]
    assert said == [logging.DEBUG] * 3  # made in this process: its "ready" line was the one INFO line
    store._announced.clear()  # as in a new process
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="llamaspec.models.store"):
        for _ in range(2):
            models.resolve("tiny", "f32")
    assert [r.levelno for r in caplog.records if "already there" in r.getMessage()] == [logging.INFO, logging.DEBUG]
