"""Files: write-then-rename, so a half-written file or folder never passes for a finished one,
and checksums."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llamaspec.base.progress import Progress


def _partial_name(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.partial-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def atomic_path(dest: Path) -> Iterator[Path]:
    """Yield a temporary sibling path; move it onto ``dest`` only if the block succeeds.

    Works for files and folders. Interrupted work leaves a hidden ``.NAME.partial-*`` that
    nothing reads as finished (``clean_partials`` removes them).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial_name(dest)
    try:
        yield tmp
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_text(dest: Path, text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text)


def write_json(dest: Path, data: Any) -> None:
    write_text(dest, json.dumps(data, indent=2, sort_keys=True) + "\n")


def clean_partials(folder: Path) -> list[Path]:
    """Remove leftovers of interrupted atomic writes directly inside ``folder``."""
    removed = []
    if folder.is_dir():
        for leftover in folder.glob(".*.partial-*"):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
            removed.append(leftover)
    return removed


def sha256_file(path: Path, label: str | None = None) -> str:
    """The sha256 of a file, with a progress bar for big ones."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    bar = Progress(f"checksum {label}", total=float(size)) if label and size > 2**30 else None
    done = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            digest.update(block)
            done += len(block)
            if bar:
                bar.update(done)
    if bar:
        bar.close()
    return digest.hexdigest()
