"""Which draft fits a target: the GGUF files on this machine that llama.cpp would accept as a draft.

Looks in the folders given and where GGUF files gather: the Hugging Face hub cache (``HF_HUB_CACHE``,
``HF_HOME/hub``, ``~/.cache/huggingface/hub``), llama.cpp's own download cache (``LLAMA_CACHE``,
``~/.cache/llama.cpp``) and LM Studio's models folders (``~/.lmstudio/models``,
``~/.cache/lm-studio/models``). Each file's header is read (``reader``: no tensor data) and its
vocabulary compared with the target's by the pair check (``pair.first_mismatch``, llama.cpp's
``common_speculative_are_compatible``). Headers are kept per file (path, size, modification time)
in the cache (``headers.HeaderCache``), so a second look at the same files reads none of them again.

A split model (``NAME-00001-of-00003.gguf``) is one file here: its first part, with the size and
parameters of every part (``headers.read``).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base.errors import LlamaspecError
from llamaspec.models import headers, hf, pair, reader
from llamaspec.models.reader import GGUFMetadata

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Place:
    """A folder looked in, and what it is."""

    kind: str  # folder, hf-cache, llama-cache, lm-studio
    path: Path
    given: bool = False  # named by the user (a missing one is an error, a missing cache is not)


@dataclass(frozen=True)
class DraftFile:
    """One GGUF file and llama.cpp's verdict on it as a draft for the target."""

    path: Path
    place: str  # the kind of place it was found in
    verdict: str  # accepted, refused or unreadable
    reason: str = ""  # why refused or unreadable
    metadata: GGUFMetadata | None = None
    size: int = 0  # bytes, every part of a split model
    parameters: int = 0  # every part of a split model
    repo: str | None = None  # USER/REPO for a file in the Hugging Face cache

    @property
    def quantization(self) -> str:
        """general.file_type, else the most common type among the tensors with two or more dimensions."""
        if self.metadata is None:
            return "?"
        if self.metadata.file_type:
            return self.metadata.file_type
        types = self.metadata.tensor_types
        return max(types, key=lambda t: types[t]) if types else "?"


@dataclass(frozen=True)
class Survey:
    target: Path
    target_metadata: GGUFMetadata
    candidates: tuple[DraftFile, ...]
    places: tuple[tuple[Place, int], ...]  # each place looked in, with how many GGUF files it held
    seconds: float
    read: int  # headers read now (the others came from the cache)

    def of(self, verdict: str) -> list[DraftFile]:
        return [c for c in self.candidates if c.verdict == verdict]


def default_places() -> list[Place]:
    """Where GGUF files gather on this machine, whether or not each folder exists."""
    home = Path.home()
    places = [Place("hf-cache", hf.cache_dir())]
    llama_cache = os.environ.get("LLAMA_CACHE")
    places.append(Place("llama-cache", Path(llama_cache) if llama_cache else
                        Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "llama.cpp"))
    places.append(Place("lm-studio", home / ".lmstudio" / "models"))
    places.append(Place("lm-studio", home / ".cache" / "lm-studio" / "models"))
    return places


def gguf_files(place: Place) -> Iterator[Path]:
    """The GGUF files under a folder, each once (hidden folders and the hub cache's blobs skipped: the
    hub's snapshots link to them), later parts of split models left out."""
    for root, dirs, files in os.walk(place.path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "blobs")
        for name in sorted(files):
            if not name.lower().endswith(".gguf") or headers.is_later_part(name):
                continue
            yield Path(root) / name


def _hub_repo(path: Path) -> str | None:
    """USER/REPO of a file in the hub cache's ``models--USER--REPO/snapshots/COMMIT/...``."""
    for part in path.parts:
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/", 1)
    return None


def _judge(path: Path, place: Place, target_meta: GGUFMetadata, cache: headers.HeaderCache,
           target_tokens: Callable[[], list[str]]) -> DraftFile:
    repo = _hub_repo(path)
    try:
        meta = headers.read(path, cache)
    except LlamaspecError as exc:
        return DraftFile(path, place.kind, "unreadable", exc.message.removeprefix(f"{path} ").removeprefix("is "),
                         size=path.stat().st_size, repo=repo)
    if meta.vocab.size == 0:
        problem: str | None = (f"it has no vocabulary (architecture {meta.architecture}: not a language model, "
                               "e.g. a multimodal projector)")
    else:
        problem = pair.first_mismatch(target_meta.vocab, meta.vocab, lambda: (target_tokens(), reader.read_tokens(path)))
    return DraftFile(path, place.kind, "refused" if problem else "accepted", problem or "", meta, meta.file_size,
                     meta.parameters, repo)


def survey(target: Path, folders: list[Path] | tuple[Path, ...] = (), *, caches: bool = True,
           cache_dir: Path | None = None, on_file: Callable[[int, int, Path], None] | None = None) -> Survey:
    """Every GGUF file in ``folders`` (and, with ``caches``, the usual download folders) judged as a
    draft for the GGUF file ``target``: accepted ones smallest first, then refused, then unreadable.

    ``cache_dir``: where headers are kept between runs (None: not kept); ``on_file(i, n, path)``
    before each file is judged."""
    start = time.monotonic()
    target = Path(target).expanduser()
    target_meta = headers.read(target)
    places = [Place("folder", Path(f).expanduser(), given=True) for f in folders]
    for place in places:
        if not place.path.exists():
            raise LlamaspecError(f"folder not found: {place.path}", hint="give folders that hold GGUF files")
    if caches:
        places += default_places()
    cache = headers.HeaderCache(cache_dir)
    target_real = target.resolve()
    target_tokens = functools.cache(lambda: reader.read_tokens(target))  # read once, and only if needed

    seen: set[Path] = {target_real}
    todo: list[tuple[Place, Path]] = []
    counted: list[tuple[Place, int]] = []
    for place in places:
        if not place.path.exists():
            counted.append((place, -1))
            continue
        n = 0
        for path in [place.path] if place.path.is_file() else gguf_files(place):
            real = path.resolve()
            if real not in seen:
                seen.add(real)
                todo.append((place, path))
                n += 1
        counted.append((place, n))
    found = []
    for i, (place, path) in enumerate(todo):
        if on_file is not None:
            on_file(i, len(todo), path)
        found.append(_judge(path, place, target_meta, cache, target_tokens))
    cache.save()
    order = {"accepted": 0, "refused": 1, "unreadable": 2}
    found.sort(key=lambda c: (order[c.verdict], c.size, str(c.path)))
    return Survey(target, target_meta, tuple(found), tuple(counted), time.monotonic() - start, cache.read)


def survey_dict(result: Survey) -> dict[str, object]:
    """The survey as JSON-ready data (``models drafts --json``)."""
    def one(c: DraftFile) -> dict[str, object]:
        m = c.metadata
        return {"path": str(c.path), "found_in": c.place, "repo": c.repo, "verdict": c.verdict, "reason": c.reason or None,
                "size": c.size or None, "parameters": c.parameters or None, "quantization": c.quantization if m else None,
                "architecture": m.architecture if m else None, "name": m.name if m else None,
                "vocab_type": m.vocab.type if m else None, "vocab_size": m.vocab.size if m else None}

    v = result.target_metadata.vocab
    return {"target": {"path": str(result.target), "architecture": result.target_metadata.architecture,
                       "vocab_type": v.type, "vocab_size": v.size, "parameters": result.target_metadata.parameters},
            "drafts": [one(c) for c in result.candidates],
            "searched": [{"kind": p.kind, "path": str(p.path), "gguf_files": n if n >= 0 else None}
                         for p, n in result.places],
            "seconds": round(result.seconds, 3), "headers_read": result.read}


__all__ = ["DraftFile", "Place", "Survey", "default_places", "survey", "survey_dict"]
