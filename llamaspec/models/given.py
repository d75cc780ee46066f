"""Models named on the command line, in llama.cpp's own words: a GGUF path, a catalog
``NAME[:VARIANT]``, or ``USER/REPO[:QUANT]`` as llama.cpp's ``-hf`` takes it.

    from llamaspec.models import given
    given.parse("bartowski/SmolLM2-135M-Instruct-GGUF:Q4_0")     # -> Spec(kind="hub", ...): what it names
    f = given.open_ref("bartowski/SmolLM2-135M-Instruct-GGUF:Q4_0")  # -> ModelFile (downloaded if needed)

- A path: the file as it is (never copied or written beside); split files
  (``-00001-of-0000N.gguf``) must all be there. Its sha256 is kept in the cache
  (``LLAMASPEC_CACHE/checksums.json``, keyed on path), so a rerun does not read a large file
  again; the kept one stands in only while the file's size, mtime, ctime and inode all match
  (``Stamp``): mtime can be set back after a write, ctime cannot. The same holds within a process
  (``resolve``), split parts included.
- ``USER/REPO[:QUANT]``: the repo's GGUF file(s) of that quant (case-insensitive; without one, llama.cpp's
  default Q4_K_M, else the first quant there), split files included, downloaded with huggingface_hub
  into the Hugging Face cache (the one llama.cpp's ``-hf`` reads too). The commit is pinned in
  ``LLAMASPEC_DATA/models.lock`` on first use: a rerun downloads the same bytes whatever ``main``
  points at by then.
- ``NAME[:VARIANT]``: the catalog's (``models.resolve``); without a variant, its first ``fetch`` one.

Every failure is one line with a hint: a path that does not exist, a file that is not GGUF or is
truncated, a repo without GGUF files, a quant the repo does not have (the ones it has are listed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base import atomic, paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.models import headers, pins
from llamaspec.models.catalog import Catalog
from llamaspec.models.store import ModelFile, ModelTools

log = logging.getLogger(__name__)

DEFAULT_QUANT = "Q4_K_M"  # llama.cpp's -hf default (common/arg.cpp), else the first quant there
LOCK_FILE = "models.lock"
_LOCK_HEADER = """\
# Commits that llamaspec resolved `-m USER/REPO[:QUANT]` (llama.cpp's -hf form) to, on first use.
# A rerun downloads the commit named here, whatever the repo's main points at by then; delete an
# entry to take the repo's newest files on the next run.
"""
_QUANT = re.compile(r"(?:^|[-._])(?P<quant>(?:I?Q\d(?:_[A-Z0-9]+)*)|F16|F32|BF16|MXFP4(?:_MOE)?|TQ\d_\d)$", re.I)
_HUB = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?::(?P<quant>[\w.-]+))?$")
_CATALOG = re.compile(r"^(?P<name>[\w.-]+)(?::(?P<variant>[\w.-]+))?$")


@dataclass(frozen=True)
class Spec:
    """A model as named on the command line, its kind decided by the text (``parse``)."""

    kind: str  # file | hub | catalog
    text: str  # normalized: an absolute path, USER/REPO[:QUANT], or NAME[:VARIANT]

    @property
    def repo(self) -> str:
        return self.text.partition(":")[0]

    @property
    def quant(self) -> str | None:
        return self.text.partition(":")[2] or None


def parse(text: str) -> Spec:
    """``-m``/``-md`` text -> Spec: a path (ends in .gguf, starts with ``/ . ~``, or exists), else
    ``USER/REPO[:QUANT]``, else a catalog ``NAME[:VARIANT]``. Pure apart from the existence check;
    a path that does not exist is refused here, with one line."""
    raw = text.strip()
    if not raw:
        raise LlamaspecError("empty model name", hint="give a GGUF path, USER/REPO[:QUANT] or a catalog NAME[:VARIANT]")
    path = Path(raw).expanduser()
    looks_like_path = raw.lower().endswith(".gguf") or raw.startswith(("/", ".", "~")) or os.sep + os.sep in raw
    if looks_like_path or path.is_file() or path.is_dir():
        if not path.exists():
            raise LlamaspecError(f"model file not found: {raw}",
                                 hint="check the path; a Hugging Face repo is written USER/REPO[:QUANT], as llama.cpp's -hf")
        if path.is_dir():
            raise LlamaspecError(f"{raw} is a folder, not a GGUF file",
                                 hint="name the .gguf file in it (`llamaspec models drafts` lists GGUF files)")
        return Spec("file", os.path.abspath(path))  # not resolved: a link's name is what llama.cpp reads (split parts)
    m = _HUB.match(raw)
    if m:
        quant = m.group("quant")
        return Spec("hub", m.group("repo") + (f":{quant}" if quant else ""))
    m = _CATALOG.match(raw)
    if m:
        return Spec("catalog", raw)
    raise LlamaspecError(f"cannot read {raw!r} as a model",
                         hint="give a GGUF path, USER/REPO[:QUANT] (as llama.cpp's -hf) or a catalog NAME[:VARIANT]")


# --- files on disk -------------------------------------------------------------------------------

_checksum_lock = threading.Lock()

# A file changed this soon before it was read may change again within the same tick of the
# filesystem's clock (coarse: a jiffy on ext4, up to 2 s elsewhere) and keep its ctime: such a
# reading is not kept as standing for the file's bytes (git's "racily clean" index entries).
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class Stamp:
    """What tells a file's bytes apart without reading them. A write changes ctime, set by the
    kernel's clock (``os.utime`` sets mtime back, never ctime); a file copied or moved over the
    path has another inode; a truncation changes the size."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> Stamp:
        st = path.stat()
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def settled(self, read_at_ns: int) -> bool:
        """Whether a reading of the file that began at ``read_at_ns`` may stand for its bytes while
        this stamp holds: its last change is older than the clock's coarsest tick before the reading."""
        return self.ctime_ns < read_at_ns - RACY_NS

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _checksums_path() -> Path:
    return paths.cache_dir() / "checksums.json"


def _known_sums() -> dict:
    try:
        return dict(json.loads(_checksums_path().read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return {}


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``, from the cache while its ``Stamp`` (size, mtime, ctime, inode) is
    the one it had when the cached sum was read."""
    path = Path(os.path.abspath(path))
    stamp = Stamp.of(path)
    key = str(path)
    with _checksum_lock:
        hit = _known_sums().get(key)
        if isinstance(hit, dict) and {k: hit.get(k) for k in stamp.to_dict()} == stamp.to_dict():
            return str(hit["sha256"])
    read_at = time.time_ns()
    digest = atomic.sha256_file(path, path.name)
    if Stamp.of(path) != stamp or not stamp.settled(read_at):
        return digest  # written during the reading, or too recently to tell the next write by its stamp
    with _checksum_lock:
        known = _known_sums()
        known[key] = {**stamp.to_dict(), "sha256": digest}
        try:
            atomic.write_json(_checksums_path(), known)
        except OSError as exc:  # a read-only cache costs a re-read next time, nothing else
            log.debug("cannot keep the checksum of %s: %s", path, exc)
    return digest


def describe_file(path: Path, *, label: str | None = None, provenance: dict | None = None) -> ModelFile:
    """A GGUF file (or split model) as a ModelFile: its metadata read (``headers.read``: a file that is
    not GGUF or is truncated is refused), its sha256 (of the split's parts' sha256s, in order, for a
    split model)."""
    # absolute, links not followed: in the Hugging Face cache a file is a link to a blob without its
    # name, and llama.cpp finds a split model's other parts by the first part's name
    path = Path(os.path.abspath(Path(path).expanduser()))
    parts = headers.parts(path)
    first = parts[0]
    meta = headers.read(path)  # each part checked: magic, header, tensor data within the file
    if len(parts) > 1:
        sums = [file_sha256(p) for p in parts]
        sha = hashlib.sha256("".join(f"{p.name} {s}\n" for p, s in zip(parts, sums, strict=True)).encode()).hexdigest()
        origin = {"kind": "file", "path": str(first), "parts": [{"file": p.name, "sha256": s} for p, s in zip(parts, sums, strict=True)]}
    else:
        sha = file_sha256(first)
        origin = {"kind": "file", "path": str(first)}
    variant = (meta.file_type or "unknown").lower()
    return ModelFile(first, label or str(first), variant, sha, meta, provenance or origin)


# --- USER/REPO[:QUANT] ---------------------------------------------------------------------------

def lock_path() -> Path:
    return paths.data_dir() / LOCK_FILE


def quant_of(filename: str) -> str | None:
    """``SmolLM2-135M-Q4_K_M.gguf`` -> ``Q4_K_M`` (split suffix ignored); None when the name has none."""
    q = _QUANT.search(headers.stem(filename))
    return q.group("quant").upper() if q else None


def gguf_files(names: list[str]) -> list[str]:
    """The model GGUF files of a repo listing (projectors for images, ``mmproj``, left out)."""
    return sorted(n for n in names if n.lower().endswith(".gguf") and "mmproj" not in Path(n).name.lower())


def choose(repo: str, quant: str | None, names: list[str]) -> list[str]:
    """The files of ``quant`` in a repo's GGUF files: one, or every part of a split model, first
    part first. One error line for a repo without GGUF files or without that quant (listing those
    it has)."""
    ggufs = gguf_files(names)
    if not ggufs:
        shown = ", ".join(sorted(names)[:8]) + (" ..." if len(names) > 8 else "")
        raise LlamaspecError(f"{repo} has no GGUF files (files there: {shown or 'none'})",
                             hint="name a repo of GGUF files (often USER/NAME-GGUF), a local .gguf file, or convert "
                                  "the checkpoint first")
    by_quant: dict[str, list[str]] = {}
    for name in ggufs:
        by_quant.setdefault(quant_of(name) or Path(name).name, []).append(name)
    if quant is None:
        pick = DEFAULT_QUANT if DEFAULT_QUANT in by_quant else next(iter(sorted(by_quant)))
        log.info("%s: no quant given, taking %s (llama.cpp's -hf default is %s)", repo, pick, DEFAULT_QUANT)
    else:
        pick = next((q for q in by_quant if q.upper() == quant.upper()), "")
        if not pick:
            raise LlamaspecError(f"{repo} has no {quant} GGUF file (its quants: {', '.join(sorted(by_quant))})",
                                 hint=f"write {repo}:QUANT with one of those")
    files = by_quant[pick]
    firsts = [f for f in files if not headers.is_later_part(f)]
    if len(firsts) > 1:
        raise LlamaspecError(f"{repo} has {len(firsts)} {pick} models ({', '.join(firsts)})",
                             hint="download the one you mean and give its path")
    first = firsts[0] if firsts else files[0]
    parts = headers.part_names(first)
    if len(parts) == 1:
        return parts
    missing = [p for p in parts if p not in names]
    if missing:
        raise LlamaspecError(f"{repo}: the {pick} model is split in {len(parts)} files and {', '.join(missing)} "
                             "is not in the repo", hint="pick another quant")
    return parts


def _cached_names(repo: str, commit: str) -> list[str]:
    from llamaspec.models import hf

    folder = hf.repo_folder(repo) / "snapshots" / commit
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []


def _cached_commit(repo: str) -> str | None:
    from llamaspec.models import hf

    ref = hf.repo_folder(repo) / "refs" / "main"
    return ref.read_text().strip() if ref.is_file() else None


# spec text -> its file, once per process (a sweep resolves every point), and for a path the
# stamps of its files (every part of a split model) when they were read; None: read again next time
_resolved: dict[str, tuple[ModelFile, tuple[Stamp, ...] | None]] = {}


def hub_file(spec: Spec) -> ModelFile:
    """The GGUF file of ``USER/REPO[:QUANT]`` in the Hugging Face cache, downloaded at the pinned commit."""
    from llamaspec.models import hf

    repo, quant = spec.repo, spec.quant
    pin = pins.load(lock_path()).get(spec.text)
    commit = pin.commit if pin is not None and pin.repo == repo else None
    if commit is not None and not hf.offline():
        # pinned and in the cache already: no need to ask the hub (which may be out of reach)
        try:
            files = choose(repo, quant, _cached_names(repo, commit))
        except LlamaspecError:
            files = []
        folder = hf.repo_folder(repo) / "snapshots" / commit
        if files and all((folder / f).is_file() for f in files):
            return describe_file(folder / files[0], label=f"{repo}:{quant_of(files[0]) or Path(files[0]).name}",
                                 provenance={"kind": "hf_gguf", "repo": repo, "files": files, "commit": commit})
    if hf.offline():
        commit = commit or _cached_commit(repo)
        names = _cached_names(repo, commit) if commit else []
        if not names:
            raise LlamaspecError(f"{repo} is not in the Hugging Face cache ({hf.cache_dir()}) and HF_HUB_OFFLINE is set",
                                 hint="unset HF_HUB_OFFLINE to download it, or give the path of a local .gguf file")
    else:
        listing = hf.remote(repo, commit or "main", what="GGUF files")
        commit, names = listing.commit, sorted(listing.files)
    assert commit is not None
    files = choose(repo, quant, names)
    got = [hf.file(repo, name, commit) for name in files]
    if not hf.offline() and pin is None:
        pins.save(lock_path(), pins.Pin(spec.text, repo, "main", commit), header=_LOCK_HEADER)
        log.info("%s: pinned commit %s (%s)", spec.text, commit[:12], lock_path())
    label = f"{repo}:{quant_of(files[0]) or Path(files[0]).name}"
    return describe_file(got[0].path, label=label,
                         provenance={"kind": "hf_gguf", "repo": repo, "files": files, "commit": commit})


def open_ref(text: str, catalog: Catalog | None = None, tools: ModelTools | None = None) -> ModelFile:
    """The one resolver of a model's text, for local runs, the CLI and cluster workers alike: a GGUF
    path (split parts and links as llama.cpp reads them, the checksum cache), ``USER/REPO[:QUANT]``
    or a catalog ``NAME[:VARIANT]`` (without a variant, its first ``fetch`` one): ``parse`` decides
    what the text names, ``_resolve`` makes it a file. ``catalog``/``tools``: another catalog, what
    converts or quantizes a catalog variant not made yet (``store.ModelTools``)."""
    return _resolve(parse(text), catalog=catalog, tools=tools)


def path_of(text: str, tools: ModelTools | None = None) -> Path:
    """The GGUF file a model's text names, for the commands that read its header only (``models
    check-pair``, ``models drafts``): a path as given, its bytes not read (no checksum of a large
    file); a repo or catalog model as :func:`open_ref` resolves it."""
    spec = parse(text)
    return Path(spec.text) if spec.kind == "file" else _resolve(spec, tools=tools).path


def _resolve(spec: Spec, *, catalog: Catalog | None = None, tools: ModelTools | None = None) -> ModelFile:
    """The model file ``spec`` names (downloaded, fetched or derived if needed), once per process
    (with the default catalog; ``tools`` only say how a catalog variant not made yet is made)."""
    cached = catalog is None
    if cached and spec.text in _resolved:
        known, kept = _resolved[spec.text]
        if spec.kind != "file" or _unchanged(known, kept):
            return known
    stamps: tuple[Stamp, ...] | None = None
    if spec.kind == "file":
        read_at = time.time_ns()
        before = _stamps(Path(spec.text))
        got = describe_file(Path(spec.text))
        after = _stamps(got.path)
        # kept only when nothing wrote to the files while they were read, nor just before
        stamps = after if after == before and all(s.settled(read_at) for s in after) else None
    elif spec.kind == "hub":
        got = hub_file(spec)
    else:
        from llamaspec.models import catalog as catalogs
        from llamaspec.models.store import resolve as resolve_catalog

        name, _, variant = spec.text.partition(":")
        cat = catalog or catalogs.load()
        entry = cat.entry(name)
        if not variant:
            variant = (entry.fetch or entry.plain_variants)[0]
        got = resolve_catalog(name, variant, catalog=cat, tools=tools)
    if cached:
        _resolved[spec.text] = (got, stamps)
    return got


def _stamps(path: Path) -> tuple[Stamp, ...]:
    """The stamps of the files the model at ``path`` reads: its one file, or every part of a split model."""
    return tuple(Stamp.of(p) for p in headers.parts(path))


def _unchanged(f: ModelFile, stamps: tuple[Stamp, ...] | None) -> bool:
    """Whether ``f``'s files are still the bytes read for it: every file's stamp as then (None: the
    files had changed too recently to tell by their stamps, so they are read again)."""
    if stamps is None:
        return False
    try:
        return _stamps(f.path) == stamps
    except (OSError, LlamaspecError):  # a part gone: describe_file says which
        return False
