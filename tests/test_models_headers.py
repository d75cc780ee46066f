"""One reader of a model's GGUF metadata (`models.headers`), and one pattern for split-file names,
whoever asks: the draft finder, a model named by path or repo, the catalog's `models.metadata`, a
study's name."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from models_factory import tiny_gguf

from llamaspec import models
from llamaspec.base.errors import LlamaspecError
from llamaspec.models import drafts, given, headers, reader
from llamaspec.studies import adhoc


@pytest.mark.parametrize("first, second", [
    ("m-Q4_0-00001-of-00002.gguf", "m-Q4_0-00002-of-00002.gguf"),
    ("M-Q4_0-00001-OF-00002.GGUF", "M-Q4_0-00002-OF-00002.GGUF"),  # Windows and some uploads write it so
])
def test_a_split_name_is_recognised_the_same_everywhere_in_any_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, second: str) -> None:
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    split = headers.split_of(second)
    assert split is not None and (split.stem, split.part, split.count) == ("M-Q4_0" if first[0] == "M" else "m-Q4_0", 2, 2)
    assert headers.part_names(second) == [first, second]  # the case as written
    assert headers.part_names(f"folder/{second}") == [f"folder/{first}", f"folder/{second}"]
    assert headers.is_later_part(second) and not headers.is_later_part(first)
    # a repo listing: the quant and every part
    assert given.quant_of(second) == "Q4_0" and given.choose("o/r", "q4_0", [second, first]) == [first, second]
    # files on disk: the model named by either part is the two, read as one
    folder = tmp_path / "models"
    folder.mkdir()
    a = tiny_gguf(folder / first, seed=0)
    b = tiny_gguf(folder / second, seed=1)
    whole = headers.read(b)
    assert whole.parameters == reader.read(a).parameters + reader.read(b).parameters
    assert whole.file_size == a.stat().st_size + b.stat().st_size
    assert models.metadata(b) == whole == given.describe_file(b).metadata
    assert list(drafts.gguf_files(drafts.Place("folder", folder))) == [a]  # the later part stands in the first
    f = SimpleNamespace(provenance={"kind": "file"}, path=str(a))
    assert adhoc._short(f) == "m-q4_0"  # a study's name: the model, not the part
    b.unlink()
    with pytest.raises(LlamaspecError, match=f"split in 2 files, and {second} is not in"):
        headers.read(a)


def test_a_header_cache_reads_a_file_once_until_it_changes(tmp_path: Path) -> None:
    path = tiny_gguf(tmp_path / "m.gguf", seed=0)
    cache = headers.HeaderCache(tmp_path / "cache")
    assert headers.read(path, cache) == headers.read(path, cache) == reader.read(path) and cache.read == 1
    cache.save()
    again = headers.HeaderCache(tmp_path / "cache")
    assert headers.read(path, again) == reader.read(path) and again.read == 0  # kept on disk
    tiny_gguf(path, seed=1, n_embd=32)
    assert headers.read(path, again) == reader.read(path) and again.read == 1  # changed: read again
