"""GGUF tensor types a variant may name, and deriving one variant from another with llama-quantize."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base import proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileType:
    """One variant name: what llama-quantize calls it, and roughly how many bits a weight takes."""

    name: str  # lower case, as in ggml-model-<name>.gguf
    bits_per_weight: float
    quantized: bool


# The variants a catalog may list: llama-quantize's type names (tools/quantize/quantize.cpp), lower-cased.
# Bits per weight are for the free-disk estimate only.
FILE_TYPES: dict[str, FileType] = {
    t.name: t
    for t in (
        FileType("f32", 32.0, False),
        FileType("f16", 16.0, False),
        FileType("bf16", 16.0, False),
        FileType("q8_0", 8.5, True),
        FileType("q6_k", 6.6, True),
        FileType("q5_1", 6.0, True),
        FileType("q5_0", 5.5, True),
        FileType("q5_k_m", 5.7, True),
        FileType("q5_k_s", 5.5, True),
        FileType("q4_1", 5.0, True),
        FileType("q4_0", 4.5, True),
        FileType("q4_k_m", 4.9, True),
        FileType("q4_k_s", 4.6, True),
        FileType("iq4_nl", 4.5, True),
        FileType("iq4_xs", 4.3, True),
        FileType("q3_k_l", 4.3, True),
        FileType("q3_k_m", 3.9, True),
        FileType("q3_k_s", 3.5, True),
        FileType("q2_k", 3.0, True),
    )
}

# What convert_hf_to_gguf.py's --outtype can write directly; the rest go through llama-quantize.
CONVERT_OUTTYPES = ("f32", "f16", "bf16", "q8_0")


def file_type(name: str) -> FileType:
    try:
        return FILE_TYPES[name.lower()]
    except KeyError:
        raise LlamaspecError(
            f"unknown model variant {name!r}",
            hint=f"choose one of: {', '.join(FILE_TYPES)}",
        ) from None


def estimated_bytes(parameters: int, variant: str) -> int:
    """A generous size for a GGUF of ``parameters`` weights at ``variant`` (for the free-disk check)."""
    return int(parameters * file_type(variant).bits_per_weight / 8 * 1.1) + 32 * 2**20


_TENSOR_LINE = re.compile(r"^\[\s*(\d+)\s*/\s*(\d+)\]")


def quantize(program: Path, src: Path, dest: Path, variant: str, *, allow_requantize: bool, log_path: Path,
             label: str) -> None:
    """Run ``llama-quantize [--allow-requantize] SRC DEST TYPE`` with a progress bar.

    ``dest`` should be a temporary path: the caller moves it into place once it reads back.
    """
    argv: list[str | Path] = [program]
    if allow_requantize:
        argv.append("--allow-requantize")
    argv += [src, dest, file_type(variant).name.upper()]  # llama-quantize's type name
    bar = Progress(f"quantizing {label}")

    def on_line(line: str) -> None:
        m = _TENSOR_LINE.match(line)
        if m:
            bar.total = float(m.group(2))
            bar.update(float(m.group(1)), "tensors")

    proc.run(argv, log_path=log_path, timeout=6 * 3600, on_line=on_line, what=f"llama-quantize ({label})",
             hint=f"read {log_path}; check that the llama.cpp build has a working llama-quantize")
    bar.close()
