"""Write-then-rename, so a half-written file or folder never passes for a finished one."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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
