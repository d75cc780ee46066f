"""What a machine needs to measure with llama.cpp's engines (``llama.cpp``, ``llama-server``), and
the engines opened on it: the cluster's workers reach this through the engine registry
(``llamaspec.registry.engines.provide_machine``) and never name a llama.cpp module themselves.

- :func:`requirements`: what every machine of a study must share, from the coordinator's point of
  view (its llama.cpp commit, whether the RPC build is needed);
- :func:`provide`: on a worker, the pinned source fetched and built (or the cached build found),
  the models fetched or derived, all through llamaspec's cached, sha256-checked steps;
- :class:`Machine`: that build and those models, and the engines opened on them (kept between
  work items: a llama-server's models stay loaded).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Engine, ModelPath

log = logging.getLogger(__name__)

ENGINES = ("llama.cpp", "llama-server")


def requirements(exp: Any) -> dict[str, Any]:
    """The coordinator's llama.cpp commit and whether the experiment needs the RPC build. Without a
    source tree the commit is the pinned sdist's (the cached build such a checkout uses), so a
    study's id never hashes a None commit that another build would share."""
    from llamaspec.llamacpp import rpc, source

    try:
        commit = source.current().commit
    except LlamaspecError:
        commit = source.pinned().commit
    return {"commit": commit, "rpc": rpc.needed(exp)}


@dataclass
class Machine:
    """This machine's llama.cpp build and model files, and the engines opened on them."""

    build: Any  # llamaspec.llamacpp.build.Build
    models: dict[str, Any] = field(default_factory=dict)  # "name:variant" -> models.ModelFile
    engines: dict[str, Engine] = field(default_factory=dict)

    @property
    def commit(self) -> str | None:
        return self.build.commit

    def model(self, label: str) -> ModelPath:
        """``name:variant`` (or a GGUF path) as this machine has it, fetched or derived on first use."""
        f = self.models.get(label)
        if f is None:
            from llamaspec import models
            from llamaspec.llamacpp import modeltools

            f = self.models[label] = models.open_ref(label, tools=modeltools.tools(self.build))
        return ModelPath(label=label, path=str(f.path), sha256=f.sha256)

    def open(self, name: str) -> Engine:
        """The engine ``name`` on this machine's build, kept between items."""
        if name not in ENGINES:
            raise LlamaspecError(f"llama.cpp's machines run {' and '.join(ENGINES)}, not {name}")
        if name not in self.engines:
            if name == "llama-server":
                from llamaspec.llamacpp.build import ensure_program
                from llamaspec.llamacpp.server import ServerEngine

                self.build = ensure_program(self.build, "server")  # built when first needed
                if "server" not in self.build.programs:
                    raise LlamaspecError(f"the llama.cpp build {self.build.bin_dir} has no llama-server",
                                         hint="rebuild there with `llamaspec build --server --force`")
                self.engines[name] = ServerEngine(self.build)
            else:
                from llamaspec.llamacpp.runner import LlamaCppEngine

                self.engines[name] = LlamaCppEngine(self.build)
        return self.engines[name]

    def close(self) -> None:
        """Stop what the engines keep running (llama-servers)."""
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()


def provide(accel: str, options: dict[str, Any], labels: list[str], machine: str) -> Machine:
    """The cached build of the pinned source (building it first where there is none) and the models
    ``labels``; ``options``: ``{"rpc": bool}``, the build with the RPC backend."""
    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import source as sources

    rpc = bool(options.get("rpc"))
    try:
        build = _find(builds, accel, rpc)
    except LlamaspecError:
        src = sources.current_or_pinned()
        log.info("%s: building llama.cpp %s", machine, src.commit)
        build = builds.build(accel, source=src, rpc=True if rpc else None)  # the default build has RPC where it can
    found = Machine(build)
    for label in labels:  # NAME:VARIANT (fetched or derived here), or a path to a GGUF file
        found.model(label)
    return found


def _find(builds: Any, accel: str, rpc: bool) -> Any:
    """The machine's cached build; an RPC build stands in for a plain one of the same commit (the
    same programs, with the RPC backend compiled in and unused), rather than building again."""
    try:
        return builds.find(accel, rpc=rpc, on_path=False)  # every machine runs the study's one commit
    except LlamaspecError:
        if rpc:
            raise
        found = builds.find(accel, rpc=True, on_path=False)
        log.info("using the RPC build %s (no plain build of this commit here)", found.bin_dir)
        return found
