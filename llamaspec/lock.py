"""Machine-wide measurement lock (placeholder until the lock module lands)."""

from __future__ import annotations

from typing import Any


def held() -> dict[str, Any] | None:
    return None


import contextlib  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402


@contextlib.contextmanager
def measuring(what: str, wait: bool = True, on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[dict[str, Any]]:
    yield {}
