"""What a GGUF file is, read with the ``gguf`` library (imported lazily: it is slow to import).

The vocabulary facts mirror how llama.cpp's ``src/llama-vocab.cpp`` loads them, because the pair
check must predict what llama.cpp will decide: the vocabulary type comes from
``tokenizer.ggml.model``, the BOS/EOS ids and the add-BOS/EOS flags from explicit keys when the
file has them, else from per-type defaults.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llamaspec.errors import LlamaspecError

GGUF_MAGIC = b"GGUF"

# llama.cpp compares token texts from this id on (SPEC_VOCAB_CHECK_START_TOKEN_ID).
TOKEN_CHECK_START = 5

# tokenizer.ggml.model -> llama_vocab_type, as llama-vocab.cpp maps them.
VOCAB_TYPES = {
    "no_vocab": "NONE", "none": "NONE",
    "llama": "SPM",
    "gpt2": "BPE", "hybriddna": "BPE", "whitespace": "BPE", "gemma4": "BPE",
    "bert": "WPM",
    "t5": "UGM",
    "rwkv": "RWKV",
    "plamo2": "PLAMO2",
    "test": "TEST",
}
# Per vocabulary type: default BOS id, EOS id, add-BOS, add-EOS (before the file's own keys).
VOCAB_DEFAULTS: dict[str, tuple[int | None, int | None, bool, bool]] = {
    "NONE": (None, None, False, False),
    "SPM": (1, 2, True, False),
    "BPE": (11, 11, False, False),
    "WPM": (101, None, True, False),
    "UGM": (None, 1, False, True),
    "RWKV": (None, None, False, False),
    "PLAMO2": (1, 2, False, False),
    "TEST": (None, None, False, False),
}
# BPE pre-tokenizers for which llama.cpp turns add-BOS on by default.
BPE_PRE_ADD_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                   "jina-v5-nano", "tekken", "chameleon"}
# BPE pre-tokenizers for which llama.cpp has no BOS token by default.
BPE_PRE_NO_BOS = {"chatglm-bpe", "glm4", "glm5"}


@dataclass(frozen=True)
class Vocab:
    """The vocabulary facts llama.cpp compares between a target and a draft."""

    model: str  # tokenizer.ggml.model
    pre: str | None  # tokenizer.ggml.pre
    type: str  # SPM, BPE, ... (llama_vocab_type)
    size: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    # sha256 of the token texts from TOKEN_CHECK_START on, NUL-separated: equal digests and sizes
    # mean llama.cpp's token-by-token comparison passes without reading both lists again.
    tokens_sha256: str


@dataclass(frozen=True)
class GGUFMetadata:
    architecture: str
    name: str | None
    parameters: int
    file_type: str | None  # general.file_type as llama-quantize names it (Q4_0, F16, ...)
    tensor_types: dict[str, int]  # tensor type -> how many tensors have it
    context_length: int | None
    vocab: Vocab
    file_size: int
    gguf_version: int
    size_label: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GGUFMetadata:
        return cls(**{**data, "vocab": Vocab(**data["vocab"])})

    @property
    def parameters_label(self) -> str:
        return human_count(self.parameters)


def human_count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}" if n < 100 * scale else f"{n / scale:.0f}{unit}"
    return str(n)


def _not_gguf(path: Path, why: str) -> LlamaspecError:
    return LlamaspecError(
        f"{path} is not a usable GGUF file: {why}",
        hint="it may be truncated or not a model at all; delete it and fetch it again (`llamaspec models fetch NAME`)",
    )


def _reader(path: Path):
    import gguf

    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise LlamaspecError(f"model file not found: {path}", hint="check the path, or fetch it with `llamaspec models fetch NAME`") from None
    except IsADirectoryError:
        raise _not_gguf(path, "it is a folder") from None
    if magic != GGUF_MAGIC:
        raise _not_gguf(path, f"it starts with {magic!r}, not {GGUF_MAGIC!r}")
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OSError, OverflowError) as exc:
        raise _not_gguf(path, f"{type(exc).__name__}: {exc}") from None
    size = path.stat().st_size
    for tensor in reader.tensors:
        if tensor.data_offset + tensor.n_bytes > size:
            raise _not_gguf(path, f"tensor {tensor.name} ends past the end of the file ({size} bytes): truncated")
    return reader


def _value(reader, key: str) -> Any:
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def _tokens(reader) -> list[str]:
    f = reader.fields.get("tokenizer.ggml.tokens")
    if f is None:
        return []
    # Token texts are bytes: in a raw-byte vocabulary (the sep2023 variants) some are halves of
    # UTF-8 characters, kept exactly (surrogateescape) rather than refused.
    return [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]


def tokens_digest(tokens: list[str]) -> str:
    digest = hashlib.sha256()
    for token in tokens[TOKEN_CHECK_START:]:
        digest.update(token.encode("utf-8", "surrogateescape"))  # the token's bytes as stored
        digest.update(b"\0")
    return digest.hexdigest()


def _vocab(reader) -> Vocab:
    model = _value(reader, "tokenizer.ggml.model") or "none"
    pre = _value(reader, "tokenizer.ggml.pre")
    vtype = VOCAB_TYPES.get(model, f"unknown:{model}")
    tokens = _tokens(reader)
    size = len(tokens) if tokens else int(_value(reader, f"{_value(reader, 'general.architecture')}.vocab_size") or 0)
    bos, eos, add_bos, add_eos = VOCAB_DEFAULTS.get(vtype, (None, None, False, False))
    if vtype == "BPE":
        add_bos = add_bos or pre in BPE_PRE_ADD_BOS or model == "gemma4"
        if pre in BPE_PRE_NO_BOS:
            bos = None
    # A default id outside the vocabulary is disabled; an explicit one outside it is ignored.
    bos = bos if bos is not None and bos < size else None
    eos = eos if eos is not None and eos < size else None
    explicit_bos = _value(reader, "tokenizer.ggml.bos_token_id")
    explicit_eos = _value(reader, "tokenizer.ggml.eos_token_id")
    if explicit_bos is not None and int(explicit_bos) < size:
        bos = int(explicit_bos)
    if explicit_eos is not None and int(explicit_eos) < size:
        eos = int(explicit_eos)
    flag = _value(reader, "tokenizer.ggml.add_bos_token")
    add_bos = bool(flag) if flag is not None else add_bos
    flag = _value(reader, "tokenizer.ggml.add_eos_token")
    add_eos = bool(flag) if flag is not None else add_eos
    if pre == "gemma4" or model == "gemma4":
        add_bos = True  # llama.cpp forces it for Gemma 4
    return Vocab(model, pre, vtype, size, bos, eos, add_bos, add_eos, tokens_digest(tokens))


def read(path: Path) -> GGUFMetadata:
    """The metadata of the GGUF file at ``path``; LlamaspecError if it is not a complete GGUF file."""
    import gguf

    path = Path(path)
    reader = _reader(path)
    arch = _value(reader, "general.architecture")
    if not arch:
        raise _not_gguf(path, "it has no general.architecture")
    ftype = _value(reader, "general.file_type")
    ftype_name = None
    if ftype is not None:
        try:
            ftype_name = gguf.LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            ftype_name = f"type {ftype}"
    counts = Counter(t.tensor_type.name for t in reader.tensors)
    ctx = _value(reader, f"{arch}.context_length")
    return GGUFMetadata(
        architecture=str(arch),
        name=_value(reader, "general.name"),
        parameters=int(sum(int(t.n_elements) for t in reader.tensors)),
        file_type=ftype_name,
        tensor_types=dict(counts),
        context_length=int(ctx) if ctx is not None else None,
        vocab=_vocab(reader),
        file_size=path.stat().st_size,
        gguf_version=int(_value(reader, "GGUF.version") or 0),
        size_label=_value(reader, "general.size_label"),
    )


def read_tokens(path: Path) -> list[str]:
    """The token texts of a GGUF file, by id (the pair check's slow path)."""
    return _tokens(_reader(Path(path)))
