"""The engine registry: an experiment's ``engine:`` name (``backend:`` before) -> the module that opens it.

(``llamaspec.measure.contract`` is the contract every engine fulfils; this module only finds them.)

A new engine is one subpackage with ``open_engine(options) -> Engine`` and one line here.
Modules are imported only when their backend is opened, so heavy engines (torch) cost nothing
to the others.
"""

from __future__ import annotations

import importlib
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Deployment, Engine, EngineOptions, ResolvedCase

REGISTRY: dict[str, str] = {
    "llama.cpp": "llamaspec.llamacpp.runner",
    "llama-server": "llamaspec.llamacpp.server",
    "transformers": "llamaspec.hf.runner",
}


# Each engine's round profiles (``llamaspec.theory.profiles.RoundProfile``), registered with the speedup
# model when their module is imported: the model asks for them by the program name a measurement
# records, and names no engine itself.
ROUND_PROFILE_MODULES: tuple[str, ...] = ("llamaspec.llamacpp.profiles", "llamaspec.hf.profiles")

# The engine whose programs make model files: a checkpoint converted to GGUF with its source's
# converter, a GGUF quantized with its quantizer. The models room asks here instead of naming llama.cpp.
MODEL_TOOLS = ("llama.cpp", "llamaspec.llamacpp.modeltools")


def model_tools() -> Any:
    """The module with ``converter() -> (source tree, commit)`` and ``quantizer(build) -> (program, label)``."""
    return _import(*MODEL_TOOLS)


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def _module(name: str) -> Any:
    if name not in REGISTRY:
        raise LlamaspecError(f"unknown engine {name!r}", hint=f"known engines: {', '.join(REGISTRY)}")
    return _import(name, REGISTRY[name])


def _import(name: str, module: str) -> Any:
    """An engine's module, imported only when asked for (heavy engines cost the others nothing)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("llamaspec"):
            raise LlamaspecError(f"backend {name!r} is not available in this llamaspec ({exc.name} is missing)",
                                 hint="upgrade llamaspec") from exc
        raise


def open_engine(name: str, options: EngineOptions | None = None) -> Engine:
    backend: Engine = _module(name).open_engine(options or EngineOptions())
    return backend


def deployment(name: str, case: ResolvedCase, options: EngineOptions | None = None, *,
               speculative: bool = True) -> Deployment:
    """The command that deploys ``case`` as engine ``name`` measured it, without opening the engine
    (no models loaded, no torch imported): each engine module has ``deployment(case, options,
    speculative)``. With an engine already open, ``backend.deployment(case)`` is the same."""
    made: Deployment = _module(name).deployment(case, options or EngineOptions(), speculative)
    return made


def honoured(name: str) -> frozenset[str]:
    """The settings engine ``name`` honours without opening it (its flag table's ``HONOURED``): the
    command line offers these as options."""
    module = _module(name)
    if not hasattr(module, "HONOURED"):
        raise LlamaspecError(f"engine {name!r} does not say which settings it honours without being opened",
                             hint="open the engine and read its capabilities' settings")
    found: frozenset[str] = module.HONOURED
    return found


# Engines a cluster machine can provide for itself (a build, models): the module with
# ``requirements(exp)``, ``provide(accel, options, labels, machine)`` and a ``Machine`` whose
# ``open(name)`` gives the engine. An engine without one is measured on one machine only.
MACHINES: dict[str, str] = {
    "llama.cpp": "llamaspec.llamacpp.machine",
    "llama-server": "llamaspec.llamacpp.machine",
}


def cluster_engines() -> tuple[str, ...]:
    return tuple(MACHINES)


def _machine_module(name: str) -> Any:
    if name not in MACHINES:
        raise LlamaspecError(f"cluster workers cannot provide the {name} backend",
                             hint=f"they run {' and '.join(MACHINES)}; measure {name} on one machine")
    return _import(name, MACHINES[name])


def machine_requirements(name: str, exp: Any) -> dict[str, Any]:
    """What every machine measuring ``exp`` with engine ``name`` must share (the coordinator's view):
    ``commit`` (None: the first machine's binds the others) and the engine's own ``options``."""
    found: dict[str, Any] = _machine_module(name).requirements(exp)
    return found


def provide_machine(name: str, accel: str, options: dict[str, Any], labels: list[str], machine: str) -> Any:
    """On a worker: what engine ``name`` needs there (built, fetched, derived), as a machine object
    with ``open(engine)``, ``model(label)``, ``commit``, ``build_key``, ``bin_dir`` and ``close()``."""
    return _machine_module(name).provide(accel, options, labels, machine)
__all__ = ["REGISTRY", "ROUND_PROFILE_MODULES", "deployment", "honoured", "model_tools", "names", "open_engine"]
