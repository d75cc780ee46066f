"""Hugging Face checkpoint -> GGUF with the llama.cpp tree's own ``convert_hf_to_gguf.py``.

The script is the pinned tree's, so it matches the binaries built from that tree. It runs under
this Python (``sys.executable``) and needs torch and transformers: the ``convert`` extra.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import struct
import sys
from pathlib import Path

from llamaspec.base import paths, proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import Progress
from llamaspec.models.quantize import CONVERT_OUTTYPES, file_type

log = logging.getLogger(__name__)

SCRIPT = "convert_hf_to_gguf.py"
NEEDS = ("torch", "transformers")
INSTALL_HINT = "install the conversion requirements: pip install -e '.[convert]'"
# "INFO:hf-to-gguf:blk.0.attn_q.weight, torch.float16 --> F16, shape = {64, 64}"
_TENSOR_LINE = re.compile(r"-->\s*\w+, shape = ")
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def script(tree: Path) -> Path:
    path = tree / SCRIPT
    if not path.is_file():
        raise LlamaspecError(f"{tree} has no {SCRIPT}", hint="use a complete llama.cpp tree (`llamaspec source fetch`)")
    return path


def check_requirements() -> None:
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise LlamaspecError(f"converting a Hugging Face checkpoint needs {' and '.join(missing)}, not installed "
                             f"in {sys.executable}", hint=INSTALL_HINT)


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin")) or sorted(folder.glob("*.pt"))


def count_tensors(folder: Path) -> int | None:
    """How many tensors a checkpoint holds, from safetensors headers (None when it cannot tell cheaply)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return len(json.loads(index.read_text()).get("weight_map", {}))
    total = 0
    files = sorted(folder.glob("*.safetensors"))
    for f in files:
        with open(f, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        total += len([k for k in header if k != "__metadata__"])
    return total or None


def estimated_bytes(folder: Path, outtype: str) -> int:
    """Output size for checkpoints stored at 16 bits per weight (generous for 32-bit ones)."""
    weights = sum(f.stat().st_size for f in weight_files(folder))
    return int(weights * file_type(outtype).bits_per_weight / 16 * 1.1) + 32 * 2**20


def convert(tree: Path, checkpoint: Path, dest: Path, outtype: str, *, log_path: Path, label: str) -> None:
    """Write ``checkpoint`` as GGUF at ``dest`` (a temporary path the caller renames) with ``--outtype``."""
    if outtype not in CONVERT_OUTTYPES:
        raise LlamaspecError(f"{SCRIPT} cannot write {outtype}", hint=f"it writes {', '.join(CONVERT_OUTTYPES)}; quantize from one of them")
    converter = script(tree)
    check_requirements()
    if not weight_files(checkpoint):
        raise LlamaspecError(f"{checkpoint} has no weights (*.safetensors or pytorch_model*.bin)",
                             hint="the download may be incomplete: run the command again")
    paths.ensure_free_space(dest.parent, estimated_bytes(checkpoint, outtype), f"converting {label}")
    total = count_tensors(checkpoint)
    bar = Progress(f"converting {label} to {outtype}", total=float(total or 1))
    seen = 0

    def on_line(line: str) -> None:
        nonlocal seen
        if _TENSOR_LINE.search(line):
            seen += 1
            bar.update(float(seen) if total else 0.0, f"{seen} tensors")

    argv: list[str | Path] = [sys.executable, converter, checkpoint, "--outfile", dest, "--outtype", outtype]
    done = proc.run(argv, log_path=log_path, timeout=6 * 3600, on_line=on_line, check=False, what=f"{SCRIPT} ({label})")
    if done.timed_out or done.returncode != 0:
        missing = _MISSING_MODULE.search(done.stderr)
        proc.raise_failure(done, f"{SCRIPT} ({label})", log_path,
                           hint=INSTALL_HINT if missing else f"read {log_path}; is this architecture supported by this llama.cpp?")
    if not dest.is_file():
        raise LlamaspecError(f"{SCRIPT} reported success but wrote no {dest.name}", hint=f"read {log_path}")
    bar.close()
