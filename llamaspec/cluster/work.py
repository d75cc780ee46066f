"""What a study hands to the machines: work items, what every machine must agree on, and what
a machine says about itself.

Everything here is plain data (frozen dataclasses of str/int/dict), so it crosses process and
machine boundaries (Ray pickles it) without dragging engine objects along.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WorkItem:
    """One unit of work: measured start to finish on one machine, stored once.

    ``key`` identifies it within its study (a case name, a sweep point, a prompt id): a rerun
    skips the keys already stored. ``kind`` names the executor that runs it on the worker
    (``llamaspec.cluster.executors``); ``payload`` is that executor's input. ``machine`` pins it
    to one machine: what is measured is that machine itself (its own tune), so no other may stand in.
    """

    key: str
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    machine: str | None = None  # only this machine may run it (a per-machine tune); None: any


@dataclass(frozen=True)
class Requirements:
    """What every machine of a study must have, identical: the engine that provides for the machine
    (``llamaspec.registry.engines.MACHINES``) with its own options, the engine's version (a source
    commit), what it computes on, and each model file's sha256 (None: whatever the first machine
    has, but then the same on all)."""

    commit: str | None = None
    accel: str = "auto"  # what the engine computes on at the workers: auto | cpu | cuda | metal
    engine: str | None = "llama.cpp"  # None: items that need no engine (the overhead benchmark's no-op items)
    options: dict[str, Any] = field(default_factory=dict)  # the engine's own (llama.cpp: {"rpc": True})
    models: dict[str, str | None] = field(default_factory=dict)  # "name:variant" -> sha256


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker reports about its machine after preparing (building, fetching models)."""

    machine: str  # the cluster's name for it (its custom resource), or the host name
    host: str
    commit: str | None
    models: dict[str, str | None] = field(default_factory=dict)  # label -> sha256


def mismatch(wanted: Requirements, info: WorkerInfo) -> str | None:
    """Why ``info`` cannot take part in a study that wants ``wanted`` (None: it can). One line,
    naming the worker and the first difference."""
    if wanted.commit and info.commit in (None, "unknown"):
        return (f"worker {info.machine} ({info.host}) runs a llama.cpp whose commit is unknown (its binaries do not say), "
                f"the study runs {wanted.commit}")
    if wanted.commit and info.commit != wanted.commit:
        return f"worker {info.machine} ({info.host}) has llama.cpp {info.commit}, the study runs {wanted.commit}"
    for label, sha in wanted.models.items():
        theirs = info.models.get(label)
        if theirs is None:
            return f"worker {info.machine} ({info.host}) has no {label}"
        if sha and theirs != sha:
            return (f"worker {info.machine} ({info.host}) has {label} with sha256 {theirs[:12]}, "
                    f"the study names {sha[:12]}")
    return None


def pin(wanted: Requirements, info: WorkerInfo) -> Requirements:
    """The requirements with every open slot (commit, model hash) filled from ``info``: the first
    accepted machine fixes what the others must match."""
    models = {label: sha or info.models.get(label) for label, sha in wanted.models.items()}
    return Requirements(commit=wanted.commit or info.commit, accel=wanted.accel, engine=wanted.engine,
                        options=dict(wanted.options), models=models)
