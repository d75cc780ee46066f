"""What llama.cpp lends the models room: its source's GGUF converter and its build's quantizer.

The models room reaches these through ``llamaspec.measure.engines.model_tools()`` and never imports this
package, so llama.cpp may import the models room without a circle.
"""

from __future__ import annotations

from pathlib import Path

from llamaspec.llamacpp import build as builds
from llamaspec.llamacpp import cache, source


def converter() -> tuple[Path, str]:
    """The llama.cpp source tree whose ``convert_hf_to_gguf.py`` converts checkpoints, and its commit."""
    tree = source.current()
    return Path(tree.tree), tree.commit


def quantizer(build: cache.Build | None = None) -> tuple[Path, str]:
    """llama-quantize of ``build`` (default: the build ``builds.find()`` picks) and that build's label."""
    chosen = build or builds.find()
    return chosen.program("quantize"), chosen.label
