"""A GGUF model on disk as every caller reads it: which files make it, and its metadata.

- **Split models** (``NAME-00001-of-00003.gguf``): one pattern, matched in any case as llama.cpp's
  loader does not care (``split_of``); the other parts' names are made from the name given, keeping
  its case (``part_names``), for a path (``parts``) and for a repo's listing alike.
- **Metadata** (``read``): the header of every part (``reader.read``: no tensor data; each part checked
  to be a complete GGUF file), a split model's parameters and size summed over its parts, given any
  part. The one reader of a model's metadata: the catalog, a model named by path or repo, the draft
  finder and the pair check all call it.
- **Header cache** (``HeaderCache``): headers kept per file (real path, size, modification time) in one
  JSON file, for callers that look at many files again (``models drafts``).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path

from llamaspec.base import atomic
from llamaspec.base.errors import LlamaspecError
from llamaspec.models import reader
from llamaspec.models.reader import GGUFMetadata

log = logging.getLogger(__name__)

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})(?P<of>-of-)(?P<count>\d{5})(?P<ext>\.gguf)$", re.IGNORECASE)


@dataclass(frozen=True)
class Split:
    """One part of a split model, read from its file name."""

    stem: str  # the model's name without the part suffix: NAME
    part: int  # 1-based
    count: int
    of: str  # "-of-" as written (its case kept)
    ext: str  # ".gguf" as written

    def name(self, part: int) -> str:
        return f"{self.stem}-{part:05d}{self.of}{self.count:05d}{self.ext}"


def split_of(name: str) -> Split | None:
    """The part a file name names (``NAME-00002-of-00003.gguf``, any case), or None for a whole file."""
    m = _SPLIT.match(Path(name).name)
    if not m:
        return None
    return Split(m.group("stem"), int(m.group("part")), int(m.group("count")), m.group("of"), m.group("ext"))


def is_later_part(name: str) -> bool:
    """Whether ``name`` is a split model's second or later part (its first part stands for it)."""
    split = split_of(name)
    return split is not None and split.part != 1


def stem(name: str) -> str:
    """A model file's name without the part suffix and ``.gguf``: ``m-Q4_0-00001-of-00002.gguf`` -> ``m-Q4_0``."""
    base = Path(name).name
    split = split_of(base)
    if split is not None:
        return split.stem
    return base[: -len(".gguf")] if base.lower().endswith(".gguf") else base


def part_names(name: str) -> list[str]:
    """Every part's name of the split model ``name`` is a part of, first part first, in the folder
    ``name`` names (a path or a repo's ``folder/file``); ``[name]`` for a whole file."""
    split = split_of(name)
    if split is None:
        return [name]
    folder = name[: len(name) - len(Path(name).name)]
    return [folder + split.name(i) for i in range(1, split.count + 1)]


def parts(path: Path) -> list[Path]:
    """Every file of the model ``path`` is (a split model given by any of its parts, in order), or
    ``[path]``; one error line naming the parts that are missing."""
    split = split_of(path.name)
    if split is None:
        return [path]
    found = [path.with_name(n) for n in part_names(path.name)]
    missing = [p.name for p in found if not p.is_file()]
    if missing:
        raise LlamaspecError(f"{path.name} is part of a model split in {split.count} files, and {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} not in {path.parent}",
                             hint="put every part in one folder (llama.cpp loads them from the first)")
    return found


def read(path: Path, cache: HeaderCache | None = None) -> GGUFMetadata:
    """The metadata of the model at ``path`` (a GGUF file, or any part of a split model: its
    parameters and size are every part's). LlamaspecError for a part missing, or a file that is not a
    complete GGUF file. ``cache``: headers kept between runs (None: every part read now)."""
    path = Path(path)
    metas = [cache.metadata(p) if cache is not None else reader.read(p) for p in parts(path)]
    if len(metas) == 1:
        return metas[0]
    return replace(metas[0], parameters=sum(m.parameters for m in metas), file_size=sum(m.file_size for m in metas))


class HeaderCache:
    """GGUF metadata per file, keyed by its real path, size and modification time, in one JSON file
    (``folder/gguf-headers.json``; None: kept in memory only). ``read``: the headers read so far."""

    def __init__(self, folder: Path | None) -> None:
        self.path = folder / "gguf-headers.json" if folder is not None else None
        try:
            loaded = json.loads(self.path.read_text()) if self.path is not None else {}
        except (OSError, ValueError):
            loaded = {}
        self.entries: dict[str, dict[str, object]] = loaded if isinstance(loaded, dict) else {}
        self.read = 0  # headers read from their files (each one new to the cache)

    @staticmethod
    def _key(path: Path) -> str:
        real = path.resolve()
        st = real.stat()
        return f"{real}|{st.st_size}|{st.st_mtime_ns}"

    def metadata(self, path: Path) -> GGUFMetadata:
        """One file's header (one part of a split model: ``read`` sums the parts)."""
        key = self._key(path)
        hit = self.entries.get(key)
        if isinstance(hit, dict):
            try:
                return GGUFMetadata.from_dict(hit)
            except (TypeError, KeyError):
                pass
        self.read += 1
        meta = reader.read(path)
        self.entries[key] = meta.to_dict()
        return meta

    def save(self) -> None:
        if self.path is None or not self.read:
            return
        alive = {k: v for k, v in self.entries.items() if Path(k.split("|", 1)[0]).exists()}
        try:
            atomic.write_json(self.path, alive)
        except OSError as exc:  # a cache that cannot be written costs time next run, nothing else
            log.debug("could not keep GGUF headers in %s: %s", self.path, exc)
