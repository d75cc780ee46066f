"""What llama.cpp lends the models room: its source's GGUF converter and its build's quantizer.

The models room names no engine: its callers hand it these (``tools(build)``; the engine registry's
``llamaspec.registry.engines.model_tools()`` for a caller that names no build), so llama.cpp may import the
models room without a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llamaspec.llamacpp import build as builds
from llamaspec.llamacpp import cache, source


@dataclass(frozen=True)
class Tools:
    """``llamaspec.models.store.ModelTools`` from llama.cpp: ``build`` quantizes (None: the one
    ``builds.find()`` picks when asked)."""

    build: cache.Build | None = None

    def converter(self) -> tuple[Path, str]:
        """The llama.cpp source tree whose ``convert_hf_to_gguf.py`` converts checkpoints, and its commit."""
        tree = source.current()
        return Path(tree.tree), tree.commit

    def quantizer(self) -> tuple[Path, str]:
        """llama-quantize of the build, and that build's label."""
        chosen = self.build or builds.find()
        return chosen.program("quantize"), chosen.label


def tools(build: cache.Build | None = None) -> Tools:
    return Tools(build)
