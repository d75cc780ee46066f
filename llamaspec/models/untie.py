"""Untying: a GGUF copy whose ``output.weight`` is written out as a copy of ``token_embd.weight``.

Models with tied embeddings (SmolLM2, for one) ship no ``output.weight``: llama.cpp from before
it learnt to fall back on the token embeddings (the Nov 2023 generation, for one) stops with
"tensor 'output.weight' not found". The untied copy holds the same numbers, so any llama.cpp
computes the same logits from it. The copied tensor keeps the embeddings' type and raw bytes
(no requantization); every metadata key and every other tensor is copied as it is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from llamaspec.errors import LlamaspecError

log = logging.getLogger(__name__)

EMBEDDINGS = "token_embd.weight"
OUTPUT = "output.weight"


def untie(src: Path, dest: Path) -> dict[str, Any]:
    """Write ``dest``: ``src`` plus ``output.weight`` = ``token_embd.weight``. Returns what was done.

    ``dest`` should be a temporary path: the caller moves it into place once it reads back.
    """
    import gguf

    try:
        reader = gguf.GGUFReader(src)
    except (ValueError, OSError) as exc:
        raise LlamaspecError(f"cannot read {src} as GGUF: {exc}", hint="delete it; it is made again") from exc
    names = [t.name for t in reader.tensors]
    if OUTPUT in names:
        raise LlamaspecError(f"{src.name} already has {OUTPUT}: there is nothing to untie",
                             hint="use the variant itself; `-untied` is for models with tied embeddings")
    if EMBEDDINGS not in names:
        raise LlamaspecError(f"{src.name} has no {EMBEDDINGS} to untie", hint="is it a language model GGUF?")
    arch_field = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise LlamaspecError(f"{src.name} has no general.architecture", hint="is it a complete GGUF file?")
    chatter = logging.getLogger("gguf.gguf_writer")  # it announces endianness and shards at INFO
    level = chatter.level
    chatter.setLevel(logging.WARNING)
    try:
        _write(gguf, reader, dest, str(arch_field.contents()))
    finally:
        chatter.setLevel(level)
    embd = reader.tensors[names.index(EMBEDDINGS)]
    log.info("untied %s: %s is a copy of %s (%s, %.1f MB)", src.name, OUTPUT, EMBEDDINGS, embd.tensor_type.name,
             embd.n_bytes / 1e6)
    return {"tensor": OUTPUT, "copy_of": EMBEDDINGS, "tensor_type": embd.tensor_type.name, "gguf": _gguf_version()}


def _write(gguf: Any, reader: Any, dest: Path, arch: str) -> None:
    import numpy as np

    writer = gguf.GGUFWriter(dest, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        # GGUF.* are the reader's view of the header; the writer writes the architecture itself.
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)
    alignment = reader.get_field(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())  # the copied key must describe the layout written

    # llama.cpp looks tensors up by name: next to the embeddings is just the easiest place to inspect.
    order = []
    for tensor in reader.tensors:
        order.append((tensor.name, tensor))
        if tensor.name == EMBEDDINGS:
            order.append((OUTPUT, tensor))
    for name, tensor in order:
        # Raw dtype and the reader's (byte) shape: quantized blocks are copied bit for bit.
        writer.add_tensor_info(name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _name, tensor in order:
        writer.write_tensor_data(np.asarray(tensor.data), tensor_endianess=reader.endianess)
    writer.close()


def _gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        return "unknown"
