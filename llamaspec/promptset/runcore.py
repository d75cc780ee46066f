"""The two calls a prompt set makes into the run core: resolve a case and its provenance.

``measure`` and ``concurrency`` look them up here when they call them (``runcore.resolver(...)``),
so a test can replace either (``monkeypatch.setattr(runcore, "provenance", ...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llamaspec.measure.contract import Engine, ResolvedCase


def resolver(backend: Engine) -> Callable[[Any, Any], ResolvedCase]:
    """The run core's case resolver with its settings check, for ``backend``."""
    from llamaspec.studies import run

    def resolve(exp: Any, case: Any) -> ResolvedCase:
        resolved = run.resolve_case(exp, case, backend)
        run.check_settings(resolved, backend)
        return resolved

    return resolve


def provenance(backend: Engine, case: ResolvedCase, hardware: dict[str, Any]) -> dict[str, Any]:
    """The run core's provenance of a case measured on ``backend``."""
    from llamaspec.studies import run

    return run.provenance(backend, case, hardware)
