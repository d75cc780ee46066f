"""What a GGUF file is, from its header alone: the key-value metadata and the tensor table are
parsed here (no tensor data is read), with the ``gguf`` library's tables for the type names and
sizes (imported lazily: it is slow to import). gguf's own ``GGUFReader`` builds a numpy view per
token and took 5 to 30 s per file on a loaded 2-core VM; this reads one in milliseconds, so
``models drafts`` can look at hundreds of files.

The vocabulary facts mirror how llama.cpp's ``src/llama-vocab.cpp`` loads them, because the pair
check must predict what llama.cpp will decide: the vocabulary type comes from
``tokenizer.ggml.model``, the BOS/EOS ids and the add-BOS/EOS flags from explicit keys when the
file has them, else from per-type defaults.

A chat prompt needs more of the header (:func:`read_chat`): the chat template, the texts of the
BOS and EOS tokens as the template sees them, and which token texts are control tokens, which
llama-completion leaves out when it echoes a prompt. Those mirror the same loader: the token
types of ``tokenizer.ggml.token_type`` with the overrides it applies by token text.

Its size: the header is one format (the cursor, the key-value table, the tensor table) and the
facts read from it (the metadata, the vocabulary, the chat facts) share that one parse; split, each
fact would need the parser's private types.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
import re
import struct
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError

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


# GGUF value types (gguf.GGUFValueType): struct formats of the fixed-size ones.
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_SUPPORTED_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
TOKENS_KEY = "tokenizer.ggml.tokens"
TOKEN_TYPES_KEY = "tokenizer.ggml.token_type"


@dataclass(frozen=True)
class _Tensor:
    name: str
    dims: tuple[int, ...]
    type: int
    offset: int  # from the start of the data section

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass(frozen=True)
class _Header:
    version: int
    fields: dict[str, Any]  # scalars and strings as Python values; arrays as a list only for the token texts
    n_tokens: int | None  # length of tokenizer.ggml.tokens, when the file has it
    tokens_sha256: str  # tokens_digest_bytes of the token texts (of no tokens when there are none)
    tokens: list[bytes] | None  # the token texts, when asked for
    tensors: list[_Tensor]
    data_start: int
    size: int


class _Cursor:
    """Reads little- (or big-) endian GGUF values from a buffer; running off its end is truncation."""

    def __init__(self, buf: Any, order: str) -> None:
        self.buf, self.order, self.pos = buf, order, 0
        self.size = len(buf)

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def raw_string(self) -> bytes:
        n = self.scalar("Q")
        if self.pos + n > self.size:
            raise struct.error("string past the end")
        text = self.buf[self.pos:self.pos + n]
        self.pos += n
        return text

    def strings(self, count: int, keep: bool) -> list[bytes] | _Skipped:
        """An array of ``count`` strings: their texts, or (not ``keep``) stepped over without a copy."""
        unpack, order, buf, pos = struct.unpack_from, self.order + "Q", self.buf, self.pos
        out: list[bytes] = []
        for _ in range(count):
            n = unpack(order, buf, pos)[0]
            if keep:
                out.append(buf[pos + 8:pos + 8 + n])
            pos += 8 + n
        if pos > self.size:
            raise struct.error("array past the end")
        self.pos = pos
        return out if keep else _Skipped(count)

    def value(self, vtype: int, keep_array: bool = False) -> Any:
        if vtype in _SCALAR:
            return self.scalar(_SCALAR[vtype])
        if vtype == _STRING:
            return self.raw_string().decode("utf-8", "replace")
        if vtype != _ARRAY:
            raise ValueError(f"unknown value type {vtype}")
        etype, count = self.scalar("I"), self.scalar("Q")
        if count > self.size:
            raise struct.error("array longer than the file")
        if etype == _STRING:
            return self.strings(count, keep_array)
        if etype in _SCALAR:
            fmt = f"{self.order}{count}{_SCALAR[etype]}"
            end = self.pos + struct.calcsize(fmt)
            if end > self.size:
                raise struct.error("array past the end")
            values = list(struct.unpack_from(fmt, self.buf, self.pos)) if keep_array else _Skipped(count)
            self.pos = end
            return values
        return [self.value(etype) for _ in range(count)]  # arrays of arrays: rare, and short


@dataclass(frozen=True)
class _Skipped:
    """An array that was stepped over (merges, scores, token types): only its length is kept."""

    count: int


def _header(path: Path, want_tokens: bool = False) -> _Header:
    """The GGUF header of ``path``: metadata and tensor table, no tensor data; LlamaspecError if it is
    not a complete GGUF file. ``want_tokens``: keep the token texts, and the token types as a list
    in ``fields``."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            magic = f.read(4)
            if magic != GGUF_MAGIC:
                raise _not_gguf(path, f"it starts with {magic!r}, not {GGUF_MAGIC!r}")
            try:
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError) as exc:
                raise _not_gguf(path, f"cannot map it: {exc}") from None
    except FileNotFoundError:
        raise LlamaspecError(f"model file not found: {path}", hint="check the path, or fetch it with `llamaspec models fetch NAME`") from None
    except IsADirectoryError:
        raise _not_gguf(path, "it is a folder") from None
    with buf:
        return _parse(path, buf, size, want_tokens)


def _parse(path: Path, buf: mmap.mmap, size: int, want_tokens: bool) -> _Header:
    tokens: list[bytes] | None = None
    n_tokens = None
    try:
        little = struct.unpack_from("<I", buf, 4)[0]
        order = ">" if little & 0xFFFF == 0 and little else "<"  # a big-endian file reads as N << 16
        cur = _Cursor(buf, order)
        cur.pos = 4
        version = cur.scalar("I")
        if version not in _SUPPORTED_VERSIONS:
            raise _not_gguf(path, f"GGUF version {version}, which llamaspec cannot read (it reads {_SUPPORTED_VERSIONS})")
        n_tensors, n_kv = cur.scalar("Q"), cur.scalar("Q")
        if n_tensors > size or n_kv > size:
            raise _not_gguf(path, f"its header counts {n_kv} keys and {n_tensors} tensors: not a real GGUF header")
        fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.raw_string().decode("utf-8", "replace")
            vtype = cur.scalar("I")
            value = cur.value(vtype, keep_array=key == TOKENS_KEY or (want_tokens and key == TOKEN_TYPES_KEY))
            if key == TOKENS_KEY:
                tokens = value
                n_tokens = len(tokens)
            fields[key] = value
        tensors = []
        for _ in range(n_tensors):
            name = cur.raw_string().decode("utf-8", "replace")
            n_dims = cur.scalar("I")
            if n_dims > 8:
                raise ValueError(f"tensor {name} has {n_dims} dimensions")
            dims = tuple(cur.scalar("Q") for _ in range(n_dims))
            tensors.append(_Tensor(name, dims, cur.scalar("I"), cur.scalar("Q")))
    except struct.error:
        raise _not_gguf(path, f"its header ends past the end of the file ({size} bytes): truncated") from None
    except ValueError as exc:
        raise _not_gguf(path, str(exc)) from None
    alignment = fields.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise _not_gguf(path, f"general.alignment is {alignment!r}, not a power of two")
    data_start = -(-cur.pos // alignment) * alignment
    for tensor in tensors:
        n_bytes = _tensor_bytes(tensor)
        if n_bytes is not None and data_start + tensor.offset + n_bytes > size:
            raise _not_gguf(path, f"tensor {tensor.name} ends past the end of the file ({size} bytes): truncated")
    digest = tokens_digest_bytes(tokens or [])
    return _Header(version, fields, n_tokens, digest, tokens if want_tokens else None, tensors, data_start, size)


def _tensor_bytes(tensor: _Tensor) -> int | None:
    """Bytes of a tensor's data (None for a type this gguf does not know: then not checked)."""
    import gguf

    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(tensor.type)]
    except (ValueError, KeyError):
        return None
    return tensor.n_elements // block * type_size


def _type_name(code: int) -> str:
    import gguf

    try:
        return gguf.GGMLQuantizationType(code).name
    except ValueError:
        return f"type {code}"


def tokens_digest_bytes(tokens: list[bytes]) -> str:
    """sha256 of the token texts from TOKEN_CHECK_START on, each followed by a NUL."""
    checked = tokens[TOKEN_CHECK_START:]
    return hashlib.sha256(b"\0".join(checked) + b"\0" if checked else b"").hexdigest()


def _vocab(header: _Header) -> Vocab:
    fields = header.fields

    def value(key: str) -> Any:
        got = fields.get(key)
        return None if isinstance(got, _Skipped | list) else got

    model = value("tokenizer.ggml.model") or "none"
    pre = value("tokenizer.ggml.pre")
    vtype = VOCAB_TYPES.get(model, f"unknown:{model}")
    size = header.n_tokens if header.n_tokens else int(value(f"{value('general.architecture')}.vocab_size") or 0)
    bos, eos, add_bos, add_eos = VOCAB_DEFAULTS.get(vtype, (None, None, False, False))
    if vtype == "BPE":
        add_bos = add_bos or pre in BPE_PRE_ADD_BOS or model == "gemma4"
        if pre in BPE_PRE_NO_BOS:
            bos = None
    # A default id outside the vocabulary is disabled; an explicit one outside it is ignored.
    bos = bos if bos is not None and bos < size else None
    eos = eos if eos is not None and eos < size else None
    explicit_bos = value("tokenizer.ggml.bos_token_id")
    explicit_eos = value("tokenizer.ggml.eos_token_id")
    if explicit_bos is not None and int(explicit_bos) < size:
        bos = int(explicit_bos)
    if explicit_eos is not None and int(explicit_eos) < size:
        eos = int(explicit_eos)
    flag = value("tokenizer.ggml.add_bos_token")
    add_bos = bool(flag) if flag is not None else add_bos
    flag = value("tokenizer.ggml.add_eos_token")
    add_eos = bool(flag) if flag is not None else add_eos
    if pre == "gemma4" or model == "gemma4":
        add_bos = True  # llama.cpp forces it for Gemma 4
    return Vocab(model, pre, vtype, size, bos, eos, add_bos, add_eos, header.tokens_sha256)


def read(path: Path) -> GGUFMetadata:
    """The metadata of the GGUF file at ``path``; LlamaspecError if it is not a complete GGUF file."""
    import gguf

    path = Path(path)
    header = _header(path)
    fields = header.fields
    arch = fields.get("general.architecture")
    if not arch or not isinstance(arch, str):
        raise _not_gguf(path, "it has no general.architecture")
    ftype = fields.get("general.file_type")
    ftype_name = None
    if isinstance(ftype, int):
        try:
            ftype_name = gguf.LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            ftype_name = f"type {ftype}"
    counts = Counter(_type_name(t.type) for t in header.tensors)
    ctx = fields.get(f"{arch}.context_length")
    name = fields.get("general.name")
    size_label = fields.get("general.size_label")
    return GGUFMetadata(
        architecture=str(arch),
        name=name if isinstance(name, str) else None,
        parameters=int(sum(t.n_elements for t in header.tensors)),
        file_type=ftype_name,
        tensor_types=dict(counts),
        context_length=int(ctx) if isinstance(ctx, int) else None,
        vocab=_vocab(header),
        file_size=header.size,
        gguf_version=header.version,
        size_label=size_label if isinstance(size_label, str) else None,
    )


def read_tokens(path: Path) -> list[str]:
    """The token texts of a GGUF file, by id (the pair check's slow path)."""
    # Token texts are bytes: in a raw-byte vocabulary (the sep2023 variants) some are halves of
    # UTF-8 characters, kept exactly (surrogateescape) rather than refused.
    return [t.decode("utf-8", "surrogateescape") for t in (_header(Path(path), want_tokens=True).tokens or [])]


# --- what a chat prompt needs ------------------------------------------------------------------

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"

# tokenizer.ggml.token_type values (llama_token_type); a file without the array has only normal tokens.
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _BYTE = 1, 2, 3, 4, 6

# Token texts that llama-vocab.cpp (0c1e570, ``llama_vocab::impl::load``) makes control tokens
# whatever their type says: its end-of-turn, end-of-message, fill-in-the-middle and
# end-of-generation lists, matched by text.
FORCED_CONTROL = frozenset({
    "</s>", "<EOT>", "<MID>", "<PAD>", "<PRE>", "<REPO>", "<SUF>", "<end_of_turn>", "<end_of_utterance>", "<eos>",
    "<fim-middle>", "<fim-pad>", "<fim-prefix>", "<fim-repo>", "<fim-suffix>", "<fim_middle>", "<fim_pad>",
    "<fim_prefix>", "<fim_suffix>", "<reponame>", "<turn|>", "<|calls|>", "<|call|>", "<|code_middle|>",
    "<|code_prefix|>", "<|code_suffix|>", "<|end_of_text|>", "<|endoftext|>", "<|end|>", "<|eom_id|>", "<|eot_id|>",
    "<|file_sep|>", "<|fim_middle|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_repo|>", "<|fim_suffix|>", "<|flush|>",
    "<|im_end|>", "<|middle|>", "<|prefix|>", "<|repo_name|>", "<|return|>", "<|suffix|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<｜fim▁hole｜>", "[EOS]", "[EOT]", "[PAD]", "[e~[", "_<EOT>",
    "▁<MID>", "▁<PRE>", "▁<SUF>",
})
# gpt-oss's tokens that the same loader always renders (it makes them user-defined).
FORCED_USER_DEFINED = frozenset({"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})


@dataclass(frozen=True)
class ChatFacts:
    """What rendering a chat prompt, and finding its echo in a program's output, need from a GGUF
    file (:func:`read_chat`)."""

    template: str | None  # tokenizer.chat_template, else its tool_use variant (llama.cpp's fallback); None: none
    bos: str | None  # the BOS token as text, the template's ``bos_token`` (None: the vocabulary has no BOS)
    eos: str | None  # the EOS token as text, the template's ``eos_token``
    add_bos: bool  # the vocabulary puts BOS before a prompt it tokenizes
    add_eos: bool
    # texts of the control (and unknown) tokens, longest first: llama.cpp prints them only when asked
    # for special pieces, so llama-completion's echo of a prompt leaves them out
    control: tuple[str, ...]
    # every token text the tokenizer cuts out of a prompt before the rest (control, unknown and
    # user-defined tokens, with parse_special as the programs tokenize), longest first
    special: tuple[str, ...] = ()
    rstrip: tuple[str, ...] = ()  # special texts that swallow the whitespace after them (Phi-3's, by model name)
    # SentencePiece with add_space_prefix: a space goes before the start of the prompt and before
    # each stretch of text after a special token
    space_prefix: bool = False


def read_chat(path: Path | str) -> ChatFacts:
    """The chat facts of the GGUF file at ``path`` (its first part, for a split model), read once
    per file as it is (path, size and modification time)."""
    path = Path(path).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        raise LlamaspecError(f"model file not found: {path}", hint="check the path, or fetch it with `llamaspec models fetch NAME`") from None
    return _chat_facts(str(path), str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.cache
def _chat_facts(path: str, _real: str, _size: int, _mtime_ns: int) -> ChatFacts:
    """The chat facts of ``path``; the other arguments, the file it is now, key the cache."""
    header = _header(Path(path), want_tokens=True)
    fields = header.fields
    vocab = _vocab(header)
    texts = [t.decode("utf-8", "replace") for t in header.tokens or []]
    types = fields.get(TOKEN_TYPES_KEY)
    kinds = [int(t) for t in types] if isinstance(types, list) and len(types) == len(texts) else [_NORMAL] * len(texts)
    present = set(texts)
    for i, text in enumerate(texts):
        if text in FORCED_USER_DEFINED:
            kinds[i] = _USER_DEFINED
        elif text in FORCED_CONTROL:
            kinds[i] = _CONTROL
    # the loader's two exceptions to its lists: gpt-oss's "<|end|>" (with "<|return|>" and
    # "<|call|>", or solar-open's "<|calls|>" and "<|flush|>") and Gemma 4's normal "</s>"
    if "<|end|>" in present and ({"<|return|>", "<|call|>"} <= present or {"<|calls|>", "<|flush|>"} <= present):
        kinds[texts.index("<|end|>")] = _USER_DEFINED
    if "</s>" in present and "<|tool_response>" in present:
        kinds[texts.index("</s>")] = _NORMAL

    def piece(token: int | None) -> str | None:
        """The token as ``common_token_to_piece(..., special=true)`` gives it."""
        if token is None or not 0 <= token < len(texts):
            return None
        return _piece(texts[token], kinds[token], vocab.type)

    template = fields.get(CHAT_TEMPLATE_KEY)
    if not isinstance(template, str) or not template:
        tool_use = fields.get(f"{CHAT_TEMPLATE_KEY}.tool_use")
        template = tool_use if isinstance(tool_use, str) and tool_use else None
    control = {t for t, k in zip(texts, kinds, strict=True) if k in (_CONTROL, _UNKNOWN) and t}
    special = control | {t for t, k in zip(texts, kinds, strict=True) if k == _USER_DEFINED and t}
    name = fields.get("general.name")
    rstrip: set[str] = set()
    if isinstance(name, str) and ("phi-3" in name.lower() or "phi3" in name.lower()):
        rstrip = (special | ({"</s>"} & present)) - {"<unk>", "<s>", "<|endoftext|>"}
    prefix = fields.get("tokenizer.ggml.add_space_prefix")
    space_prefix = vocab.type == "SPM" and (bool(prefix) if isinstance(prefix, bool | int) else True)

    def longest_first(found: set[str]) -> tuple[str, ...]:
        return tuple(sorted(found, key=lambda t: (-len(t), t)))

    return ChatFacts(template=template, bos=piece(vocab.bos_id), eos=piece(vocab.eos_id), add_bos=vocab.add_bos,
                     add_eos=vocab.add_eos, control=longest_first(control), special=longest_first(special),
                     rstrip=longest_first(rstrip), space_prefix=space_prefix)


def _piece(text: str, kind: int, vocab_type: str) -> str:
    """A token's text as llama.cpp prints it with special pieces (``token_to_piece``): control,
    unknown and user-defined tokens as stored; a byte token as its byte; a normal one decoded
    (byte-level BPE's alphabet, or SentencePiece's ``▁`` for a space)."""
    if kind in (_CONTROL, _UNKNOWN, _USER_DEFINED):
        return text
    if kind == _BYTE and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text):
        return bytes([int(text[3:5], 16)]).decode("utf-8", "replace")
    if vocab_type == "BPE":
        table = byte_decoder()
        return b"".join(bytes([table[c]]) if c in table else c.encode() for c in text).decode("utf-8", "replace")
    return text.replace("\u2581", " ")


@functools.cache
def byte_decoder() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's ``bytes_to_unicode``), character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}
