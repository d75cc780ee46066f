"""Host facts (placeholder until the host module lands)."""

from __future__ import annotations

from typing import Any


def hardware() -> dict[str, Any]:
    from llamaspec.llamacpp.runner import hardware as hw

    return hw()
