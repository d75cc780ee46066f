"""The engine registry: an experiment's ``backend:`` name -> the module that opens it.

(``llamaspec.backend`` is the contract every engine fulfils; this module only finds them.)

A new engine is one subpackage with ``open_backend(options) -> Backend`` and one line here.
Modules are imported only when their backend is opened, so heavy engines (torch) cost nothing
to the others.
"""

from __future__ import annotations

import importlib

from llamaspec.backend import Backend, BackendOptions
from llamaspec.errors import LlamaspecError

REGISTRY: dict[str, str] = {
    "llama.cpp": "llamaspec.llamacpp.runner",
    "llama-server": "llamaspec.llamacpp.server",
    "transformers": "llamaspec.hf.backend",
}


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def open_backend(name: str, options: BackendOptions | None = None) -> Backend:
    if name not in REGISTRY:
        raise LlamaspecError(f"unknown backend {name!r}", hint=f"known backends: {', '.join(REGISTRY)}")
    try:
        module = importlib.import_module(REGISTRY[name])
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("llamaspec"):
            raise LlamaspecError(f"backend {name!r} is not available in this llamaspec ({exc.name} is missing)",
                                 hint="upgrade llamaspec") from exc
        raise
    backend: Backend = module.open_backend(options or BackendOptions())
    return backend
