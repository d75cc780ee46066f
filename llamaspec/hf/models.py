"""Which files a transformers case loads, named the catalog's way (``NAME:VARIANT``).

- ``NAME:hf``: the Hugging Face checkpoint itself, downloaded into (or found in) the Hugging Face
  cache by ``llamaspec.models.hf`` (huggingface_hub, pinned commit recorded). A catalog entry with
  ``adapter_of: BASE`` is a PEFT adapter (guanaco over LLaMA): its ModelPath is the adapter folder,
  with the base checkpoint's folder in ``metadata["base_path"]``.
- ``NAME:<gguf type>`` (``q4_1``, ``f16``...): the models room's GGUF file, which transformers
  loads itself (``gguf_file=``) and dequantizes; so the offline models work here too.

``ModelPath.metadata["format"]`` says which: ``hf``, ``peft-adapter`` or ``gguf``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import ModelPath
from llamaspec.models.catalog import HF_VARIANT, Catalog, ModelEntry

# What a PEFT adapter repo holds (guanaco's carry no tokenizer: the base model's is used).
ADAPTER_PATTERNS = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def resolve_model(name: str, variant: str, *, catalog: Catalog | None = None) -> ModelPath:
    """The files of ``name:variant`` on disk, fetched first when missing."""
    from llamaspec.models import catalog as catalogs

    cat = catalog or catalogs.load()
    variant = variant.lower()
    entry = cat.variant(name, variant)
    label = f"{name}:{variant}"
    if variant != HF_VARIANT:
        from llamaspec.llamacpp import modeltools
        from llamaspec.models import store

        # transformers reads a GGUF variant (dequantized) that llama.cpp's converter or quantizer makes
        got = store.resolve(name, variant, catalog=cat, tools=modeltools.tools())
        return ModelPath(label, str(got.path), got.sha256, {"format": "gguf", **got.metadata.to_dict()})
    base = entry.source.options.get("adapter_of") if entry.source.kind == "hf" else None
    folder, origin = checkpoint(entry, adapter=base is not None)
    if base is None:
        return ModelPath(label, str(folder), None, {"format": "hf", **origin})
    under = resolve_model(base, HF_VARIANT, catalog=cat)
    return ModelPath(label, str(folder), None, {"format": "peft-adapter", **origin, "base": under.label,
                                                "base_path": under.path, "base_origin": under.metadata})


def checkpoint(entry: ModelEntry, adapter: bool = False) -> tuple[Path, dict[str, Any]]:
    """The checkpoint (or adapter) folder of a catalog entry and where it came from."""
    source = entry.source
    required = "adapter_config.json" if adapter else "config.json"
    if source.kind == "hf":
        from llamaspec.models import store

        patterns = source.get("allow_patterns") or (ADAPTER_PATTERNS if adapter else None)
        snap = store.hub_snapshot(entry, allow_patterns=patterns, what="adapter" if adapter else "checkpoint",
                                  required=required)  # at the commit pinned in models/catalog.lock
        return snap.path, {"kind": "hf", "repo": snap.repo, "revision": snap.revision, "commit": snap.commit}
    folder = Path(str(source.get("path"))).expanduser()
    folder = folder if folder.is_absolute() else paths.relative_base() / folder
    if not (folder / required).is_file():
        raise LlamaspecError(f"{entry.name}: {folder} is not a Hugging Face checkpoint folder (no {required})",
                             hint="point `path:` at a folder holding config.json, the tokenizer and the weights")
    return folder, {"kind": "path", "path": str(folder)}


def model_format(model: ModelPath) -> str:
    """``gguf``, ``peft-adapter`` or ``hf``, from the metadata or else from what is on disk (a path
    given directly)."""
    declared = model.metadata.get("format")
    if declared:
        return str(declared)
    path = Path(model.path)
    if path.suffix == ".gguf":
        return "gguf"
    if (path / "adapter_config.json").is_file():
        return "peft-adapter"
    return "hf"


def base_path(model: ModelPath) -> Path:
    """The base checkpoint folder of an adapter: recorded by resolve_model, else the adapter's own
    ``base_model_name_or_path`` when that is a local folder."""
    if model.metadata.get("base_path"):
        return Path(model.metadata["base_path"])
    import json

    config = json.loads((Path(model.path) / "adapter_config.json").read_text())
    named = config.get("base_model_name_or_path") or ""
    candidate = Path(named).expanduser()
    if not (candidate / "config.json").is_file():
        raise LlamaspecError(f"{model.label}: adapter over {named!r}, which is not a local checkpoint folder",
                             hint="name the adapter through the catalog (adapter_of: BASE) so its base is fetched too")
    return candidate
