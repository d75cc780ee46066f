"""Copies of a GGUF file that older llama.cpp generations can load (made with the gguf package).

- ``untie`` (variant ``TYPE-untied``): ``output.weight`` written out as a copy of
  ``token_embd.weight``. Models with tied embeddings (SmolLM2, for one) ship no output tensor;
  llama.cpp of 2023 stops with "tensor 'output.weight' not found" (then segfaults). The copy keeps
  the embeddings' type and raw bytes (no requantization), so every llama.cpp computes the same
  logits from it. Enough for llama.cpp of Nov 2023 (b38a16d).
- ``for_sep2023`` (variant ``TYPE-sep2023``): the untied copy, plus what llama.cpp of Sep 2023
  (a98b163, the generation of TinyLlama's write-up) needs from a GPT-2-style BPE vocabulary: a
  ``tokenizer.ggml.scores`` array (it refuses files without one; BPE never reads the values, so
  zeros) and tokens and merges as raw bytes. That generation looked words up as raw text, without
  GPT-2's byte-to-unicode mapping ("Ġ" for a space, "Ċ" for a newline): given SmolLM2's vocabulary
  as shipped it finds no newline token ("ERROR: byte not found in vocab") and segfaults. The
  raw-byte vocabulary is read wrongly by every later llama.cpp, so this variant is for that
  generation only.

Every other metadata key and every tensor is copied as it is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.models.reader import byte_decoder

log = logging.getLogger(__name__)

EMBEDDINGS = "token_embd.weight"
OUTPUT = "output.weight"
TOKENS = "tokenizer.ggml.tokens"
MERGES = "tokenizer.ggml.merges"
SCORES = "tokenizer.ggml.scores"
TOKEN_TYPES = "tokenizer.ggml.token_type"
NORMAL_TOKEN = 1  # gguf.TokenType.NORMAL: text from the BPE vocabulary (control tokens are literal)


def untie(src: Path, dest: Path) -> dict[str, Any]:
    """Write ``dest``: ``src`` plus ``output.weight`` = ``token_embd.weight``. Returns what was done.

    ``dest`` should be a temporary path: the caller moves it into place once it reads back.
    """
    return _rewrite(src, dest, sep2023=False)


def for_sep2023(src: Path, dest: Path) -> dict[str, Any]:
    """Write ``dest``: the untied copy of ``src`` with tokenizer scores and a raw-byte BPE vocabulary."""
    return _rewrite(src, dest, sep2023=True)


def _rewrite(src: Path, dest: Path, *, sep2023: bool) -> dict[str, Any]:
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
    values = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}
    done: dict[str, Any] = {}
    if sep2023:
        model = values.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise LlamaspecError(f"{src.name} has a {model!r} tokenizer; the sep2023 variant is for GPT-2-style BPE ones",
                                 hint="use the -untied variant: llama.cpp of Sep 2023 reads SentencePiece files as they are")
        done.update(_raw_vocab(values))
    chatter = logging.getLogger("gguf.gguf_writer")  # it announces endianness and shards at INFO
    level = chatter.level
    chatter.setLevel(logging.WARNING)
    try:
        _write(gguf, reader, dest, str(arch_field.contents()), values)
    finally:
        chatter.setLevel(level)
    embd = reader.tensors[names.index(EMBEDDINGS)]
    log.info("wrote %s: %s is a copy of %s (%s, %.1f MB)%s", dest.name, OUTPUT, EMBEDDINGS, embd.tensor_type.name,
             embd.n_bytes / 1e6, ", tokenizer as raw bytes with scores" if sep2023 else "")
    return {"tensor": OUTPUT, "copy_of": EMBEDDINGS, "tensor_type": embd.tensor_type.name, **done,
            "gguf": _gguf_version()}


def _raw_vocab(values: dict[str, Any]) -> dict[str, Any]:
    """Tokens and merges as the raw bytes they stand for, and zero scores (in place in ``values``)."""
    decoder = byte_decoder()

    def raw(piece: str) -> bytes:
        if all(c in decoder for c in piece):
            return bytes(decoder[c] for c in piece)
        return piece.encode()  # not byte-level text (e.g. an added token): as it is

    tokens, types = values[TOKENS], values.get(TOKEN_TYPES) or [NORMAL_TOKEN] * len(values[TOKENS])
    values[TOKENS] = [raw(t) if ty == NORMAL_TOKEN else t.encode() for t, ty in zip(tokens, types, strict=True)]
    if MERGES in values:
        # "left right" with the halves decoded; that generation splits at the first space after the
        # first byte, so a merge whose left half holds a space past its start is registered under
        # another split of the same text (it still yields the same token, by another path).
        values[MERGES] = [b" ".join(raw(half) for half in m.split(" ", 1)) for m in values[MERGES]]
    added_scores = SCORES not in values
    if added_scores:
        values[SCORES] = [0.0] * len(tokens)
    return {"vocabulary": "raw bytes", "scores_added": added_scores}


def _write(gguf: Any, reader: Any, dest: Path, arch: str, values: dict[str, Any]) -> None:
    import numpy as np

    writer = gguf.GGUFWriter(dest, arch=arch, endianess=reader.endianess)
    types = {f.name: f.types for f in reader.fields.values()}
    for key, value in values.items():
        if key == gguf.Keys.General.ARCHITECTURE:
            continue  # the writer writes it itself
        if key in types:
            value_type = types[key][0]
            sub_type = types[key][-1] if value_type == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, value, value_type, sub_type=sub_type)
        else:  # added: the scores
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT32)
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
