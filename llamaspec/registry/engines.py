"""The engine registry: an experiment's ``engine:`` name (``backend:`` before) -> the module that opens it.

(``llamaspec.measure.contract`` is the contract every engine fulfils; this module only finds them.)

An engine is a module with ``open_engine(options) -> Engine`` and ``deployment(case, options,
speculative) -> Deployment``, and optionally ``HONOURED`` (the settings it honours without being
opened) and ``ROUND_PROFILES`` (how its speculative programs spend a round,
``llamaspec.theory.profiles.RoundProfile``). llamaspec's own engines are declared here
(:data:`BUILT_IN`), so an install whose package metadata is stale still has them; any other package
adds one through the entry point group :data:`GROUP` (name -> module), as simonw/llm loads its
plugins. Modules are imported only when their engine is asked for, so heavy engines (torch) cost
nothing to the others.

It sits above the engines and answers for what they lend the layers below, which name no engine:
the round profiles the speedup model reads by a measurement's program name, and the converter and
quantizer that make model files (handed to the models room by its callers).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import Spread
from llamaspec.measure.contract import ClientPrompt, Deployment, Engine, EngineOptions, ResolvedCase
from llamaspec.measure.settings import program_binary
from llamaspec.theory.profiles import RoundProfile

BUILT_IN: dict[str, str] = {
    "llama.cpp": "llamaspec.llamacpp.runner",
    "llama-server": "llamaspec.llamacpp.server",
    "transformers": "llamaspec.hf.runner",
}

# The entry point group another package declares its engines in, e.g. in its pyproject.toml:
#   [project.entry-points."llamaspec.engines"]
#   my-engine = "my_package.engine"
log = logging.getLogger(__name__)

GROUP = "llamaspec.engines"

# The built-in engines' round profiles, in modules of their own (light: no torch), so that reading a
# stored run's program needs no engine opened. An installed engine gives its own as ROUND_PROFILES.
ROUND_PROFILE_MODULES: tuple[str, ...] = ("llamaspec.llamacpp.profiles", "llamaspec.hf.profiles")

# The engine whose programs make model files: a checkpoint converted to GGUF with its source's
# converter, a GGUF quantized with its quantizer (``tools(build=None)`` gives them).
MODEL_TOOLS = ("llama.cpp", "llamaspec.llamacpp.modeltools")


@functools.cache
def model_tools() -> Any:
    """The tools that make model files (``llamaspec.models.store.ModelTools``), with the build
    ``find()`` picks when they are first used: what the models room is given by a caller that names
    no build (one per process)."""
    return _import(*MODEL_TOOLS).tools()


@functools.cache
def installed() -> dict[str, metadata.EntryPoint]:
    """The engines other packages declare in :data:`GROUP`, by name (read once per process, and only
    when a name is not a built-in's). One that takes a built-in's name is left out, and said."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=GROUP):
        if ep.name in BUILT_IN:
            source = ep.dist.name if ep.dist is not None else ep.value
            log.warning("the package %s declares an engine named %r, a built-in engine's name: left out (rename its "
                        "entry point in the %r group, or uninstall it)", source, ep.name, GROUP)
            continue
        found[ep.name] = ep
    return found


def names() -> tuple[str, ...]:
    return (*BUILT_IN, *installed())


def _module(name: str) -> Any:
    if name in BUILT_IN:  # no installed package is read for a built-in engine
        return _import(name, BUILT_IN[name])
    ep = installed().get(name)
    if ep is None:
        raise LlamaspecError(f"unknown engine {name!r}", hint=f"known engines: {', '.join(names())}")
    return _load(ep)


def _load(ep: metadata.EntryPoint) -> Any:
    """An installed engine's module, checked for what every engine has."""
    source = ep.dist.name if ep.dist is not None else ep.value
    try:
        module = ep.load()
    except (ImportError, AttributeError) as exc:
        raise LlamaspecError(f"engine {ep.name!r} of {source} failed to load ({ep.value}): {exc}",
                             hint=f"reinstall {source}, or uninstall it to measure without that engine") from exc
    lacking = [f for f in ("open_engine", "deployment") if not callable(getattr(module, f, None))]
    if lacking:
        raise LlamaspecError(f"engine {ep.name!r} of {source} ({ep.value}) has no {' and no '.join(lacking)}",
                             hint="an engine module defines open_engine(options) and deployment(case, options, speculative)")
    return module


def _import(name: str, module: str) -> Any:
    """A built-in engine's module, imported only when asked for (heavy engines cost the others nothing)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("llamaspec"):
            raise LlamaspecError(f"engine {name!r} is not available in this llamaspec ({exc.name} is missing)",
                                 hint="upgrade llamaspec") from exc
        raise


def open_engine(name: str, options: EngineOptions | None = None) -> Engine:
    if options is not None and options.warm and name != "llama-server":
        raise LlamaspecError(f"warm traffic is served traffic: the {name} engine starts each run fresh",
                             hint="measure warm traffic on llama-server: an experiment with engine: llama-server "
                                  "(e.g. smollm2-server-mini)")
    backend: Engine = _module(name).open_engine(options or EngineOptions())
    return backend


def deployment(name: str, case: ResolvedCase, options: EngineOptions | None = None, *,
               speculative: bool = True) -> Deployment:
    """The command that deploys ``case`` as engine ``name`` measured it, without opening the engine
    (no models loaded, no torch imported): each engine module has ``deployment(case, options,
    speculative)``. With an engine already open, ``backend.deployment(case)`` is the same."""
    made: Deployment = _module(name).deployment(case, options or EngineOptions(), speculative)
    return made


def check_deployment(name: str, answer: Deployment, alone: Deployment, prompts: Sequence[ClientPrompt],
                     interval: Spread, n_predict: int, logs: Path, *, seed: int | None = None) -> tuple[Deployment, Any]:
    """The answer after engine ``name``'s deploy check (its module's optional ``check_deployment``,
    same arguments; llama.cpp's: ``llamacpp.deploy_check.check_answer``): the answer, possibly with
    a command taken out and said why, and the check (``render(interval)``, ``to_dict(interval)``),
    None where the engine has no check or nothing to check."""
    module = _module(name)
    if not hasattr(module, "check_deployment"):
        return answer, None
    checked: tuple[Deployment, Any] = module.check_deployment(answer, alone, prompts, interval, n_predict, logs, seed=seed)
    return checked


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
    """Every engine's round profiles by program name: the built-ins' profile modules, then each
    installed engine's ``ROUND_PROFILES``."""
    given = [getattr(_load(ep), "ROUND_PROFILES", ()) for ep in installed().values()]
    return _by_name([_built_in_profiles(), *given])


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
    """The built-ins' profiles are looked in first: an installed engine is loaded only for a name they lack."""
    key = program_binary(name)
    return next((p for p in _built_in_profiles() if p.name == key), None) or round_profiles().get(key)


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
    with ``open(engine)``, ``model(label)``, ``commit`` and ``close()``."""
    return _machine_module(name).provide(accel, options, labels, machine)
