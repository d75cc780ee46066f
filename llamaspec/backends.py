"""Old name of :mod:`llamaspec.engines` (the engine registry), kept while branches that import it
are merged; import ``llamaspec.engines``."""

from llamaspec.engines import REGISTRY, deployment, names, open_backend

__all__ = ["REGISTRY", "deployment", "names", "open_backend"]
