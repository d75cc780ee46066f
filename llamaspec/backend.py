"""The small interface every backend implements: run this case, give timings, counters, text.

llama.cpp's command-line programs are the first backend (``llamaspec.llamacpp.runner``).
Planned beside it, behind the same interface: llama-server with models kept loaded (prompt
sets), and Hugging Face transformers' assisted generation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from llamaspec.experiment import Settings

# draft: the draft model alone, to time one draft step; batch: the target on batches of 1..17
# tokens, to time one verification call. Both feed the speedup model.
MODES = ("baseline", "speculative", "draft", "batch")


@dataclass(frozen=True)
class ModelFile:
    """A concrete model file a case runs on."""

    label: str  # "name:variant"
    path: str
    sha256: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedCase:
    """A case with its models on disk and every setting decided (defaults applied)."""

    experiment: str
    case: str
    target: ModelFile
    draft: ModelFile | None
    prompt: str | None
    prompt_file: str | None
    settings: Settings


@dataclass(frozen=True)
class Measurement:
    """One generation by one process (or one request): what it cost and what it produced."""

    mode: str  # one of MODES
    ok: bool
    error: str | None
    argv: tuple[str, ...]
    exit_code: int | None
    wall_seconds: float
    peak_rss_bytes: int | None
    n_prompt: int | None = None
    n_predict: int | None = None  # tokens generated
    encode_tps: float | None = None
    decode_tps: float | None = None
    n_drafted: int | None = None
    n_accept: int | None = None
    accept: float | None = None  # percent, n_accept / n_drafted, as llama.cpp prints it
    text: str | None = None
    stats: dict[str, Any] | None = None
    log_path: str | None = None


class Backend(Protocol):
    name: str

    def provenance(self) -> dict[str, Any]:
        """What produced the numbers (program versions, build flags, devices)."""
        ...

    def check(self, case: ResolvedCase) -> None:
        """Refuse settings this backend cannot honour, before anything runs (raise LlamaspecError)."""
        ...

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        """Generate once in ``mode``; a failure is returned as ``ok=False``, not raised."""
        ...
