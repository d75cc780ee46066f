"""The engine registry: an experiment's ``engine:`` name (``backend:`` before) -> the module that opens it.

(``llamaspec.measure.contract`` is the contract every engine fulfils; this module only finds them.)

An engine is a module with ``open_engine(options) -> Engine`` and ``deployment(case, options,
speculative) -> Deployment``, and optionally ``HONOURED`` (the settings it honours without being
opened). A new engine is one module and one row of :data:`BUILT_IN`; its round profiles (how its
speculative programs spend a round, ``llamaspec.theory.profiles.RoundProfile``) are a module's
``ROUND_PROFILES`` named in :data:`ROUND_PROFILE_MODULES`. Modules are imported only when their
engine is asked for, so heavy engines (torch) cost nothing to the others.

It sits above the engines and answers for what they lend the layers below, which name no engine:
the round profiles the speedup model reads by a measurement's program name, and the converter and
quantizer that make model files (handed to the models room by its callers).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Deployment, Engine, EngineOptions, ResolvedCase
from llamaspec.measure.settings import program_binary
from llamaspec.theory.profiles import RoundProfile

BUILT_IN: dict[str, str] = {
    "llama.cpp": "llamaspec.llamacpp.runner",
    "llama-server": "llamaspec.llamacpp.server",
    "transformers": "llamaspec.hf.runner",
}

# The built-in engines' round profiles, in modules of their own (light: no torch), so that reading a
# stored run's program needs no engine opened.
ROUND_PROFILE_MODULES: tuple[str, ...] = ("llamaspec.llamacpp.profiles", "llamaspec.hf.profiles")

# The engine whose programs make model files: a checkpoint converted to GGUF with its source's
# converter, a GGUF quantized with its quantizer (``tools(build=None)`` gives them).
MODEL_TOOLS = ("llama.cpp", "llamaspec.llamacpp.modeltools")


def model_tools() -> Any:
    """The tools that make model files (``llamaspec.models.store.ModelTools``), with the build
    ``find()`` picks: what the models room is given by a caller that names no build."""
    return _import(*MODEL_TOOLS).tools()


def names() -> tuple[str, ...]:
    return tuple(BUILT_IN)


def _module(name: str) -> Any:
    if name not in BUILT_IN:
        raise LlamaspecError(f"unknown engine {name!r}", hint=f"known engines: {', '.join(BUILT_IN)}")
    return _import(name, BUILT_IN[name])


def _import(name: str, module: str) -> Any:
    """An engine's module, imported only when asked for (heavy engines cost the others nothing)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("llamaspec"):
            raise LlamaspecError(f"engine {name!r} is not available in this llamaspec ({exc.name} is missing)",
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


def round_profiles() -> dict[str, RoundProfile]:
    """Every engine's round profiles by program name."""
    return _by_name([_built_in_profiles()])


@functools.cache
def _built_in_profiles() -> tuple[RoundProfile, ...]:
    return tuple(p for m in ROUND_PROFILE_MODULES for p in importlib.import_module(m).ROUND_PROFILES)


def _by_name(given: list[Any]) -> dict[str, RoundProfile]:
    found: dict[str, RoundProfile] = {}
    for profile in (p for profiles in given for p in profiles):
        known = found.setdefault(profile.name, profile)
        if known != profile:
            raise LlamaspecError(f"two round profiles are named {profile.name!r}", hint="give each program its own name")
    return found


def round_profile(name: str) -> RoundProfile:
    """The profile of a speculative program by the name a measurement records (its binary's); a
    ``Settings.program`` (``speculative``) is read as its binary (``settings.program_binary``)."""
    found = _find_profile(name)
    if found is None:
        raise LlamaspecError(f"no round profile for program {name!r}", hint=f"known programs: {', '.join(round_profiles())}")
    return found


def knows(name: str | None) -> bool:
    """Whether a program by this name (either spelling) has a round profile."""
    return name is not None and _find_profile(name) is not None


def _find_profile(name: str) -> RoundProfile | None:
    return round_profiles().get(program_binary(name))


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
