"""Machines of a Ray cluster: one ``MachineWorker`` actor per machine, pinned there.

A machine joins a study by advertising a custom resource ``llamaspec:NAME`` (one unit), e.g.
``ray start --address HEAD:6379 --resources '{"llamaspec:gpu-box": 1}'``; its actor asks for that
whole unit, so a second study cannot put a second measuring actor on the same machine (it waits).
A cluster whose nodes advertise no such resource gets one actor per alive node instead, pinned
by node affinity and named after the node's host.

Ray is imported only here (``pip install 'llamaspec[cluster]'``). Connecting first probes the
address with a plain TCP connect, so a wrong address fails in seconds with one line, not after
Ray's own minute of retries.
"""

from __future__ import annotations

import logging
import os
import socket
from concurrent.futures import Future
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.cluster.work import Requirements, WorkItem

log = logging.getLogger(__name__)

RESOURCE_PREFIX = "llamaspec:"
DEFAULT_PORT = 6379


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise LlamaspecError("studies over a cluster need Ray, which is not installed",
                             hint="pip install 'llamaspec[cluster]' (Ray 2.60.0) on this machine and on every worker") from exc
    return ray


def split_address(address: str) -> tuple[str, int]:
    text = address.removeprefix("ray://").removeprefix("tcp://")
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, DEFAULT_PORT
    if not port.isdigit() or not host:
        raise LlamaspecError(f"cannot read cluster address {address!r}", hint="give HOST:PORT of the Ray head, e.g. 10.0.0.5:6379")
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float = 3.0) -> None:
    """Fail fast, with one line, when nothing listens at ``address``."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError) or why == "timed out":
            why = f"no answer within {timeout:.0f} s"
        raise LlamaspecError(f"no Ray cluster answers at {host}:{port} ({why})",
                             hint="start the head there with `ray start --head --port 6379`, or pass the head's HOST:PORT "
                                  "with --cluster (or RAY_ADDRESS)") from exc


def connect(address: str | None = None) -> str:
    """Join the cluster at ``address`` (default ``$RAY_ADDRESS``) as a driver; returns the address."""
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise LlamaspecError("no cluster address given", hint="pass --cluster HOST:PORT or set RAY_ADDRESS")
    probe(address)  # before importing Ray: a wrong address is one line in seconds
    ray = _ray()
    if ray.is_initialized():
        return address
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    return address


def machines() -> list[dict[str, Any]]:
    """The cluster's machines: name, node id, host and how to pin an actor there."""
    ray = _ray()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    named = []
    for n in nodes:
        for res in n.get("Resources", {}):
            if res.startswith(RESOURCE_PREFIX):
                named.append({"machine": res[len(RESOURCE_PREFIX):], "node_id": n["NodeID"], "host": n.get("NodeManagerHostname"),
                              "address": n.get("NodeManagerAddress"), "resource": res})
    if named:
        return sorted(named, key=lambda m: m["machine"])
    return sorted(({"machine": f"{n.get('NodeManagerHostname')}-{n['NodeID'][:6]}", "node_id": n["NodeID"],
                    "host": n.get("NodeManagerHostname"), "address": n.get("NodeManagerAddress"), "resource": None}
                   for n in nodes), key=lambda m: m["machine"])


class RayHandle:
    def __init__(self, machine: str, actor: Any) -> None:
        self.machine = machine
        self.actor = actor

    def prepare(self, wanted: Requirements) -> Future[dict[str, Any]]:
        return self.actor.prepare.remote(wanted).future()

    def submit(self, item: WorkItem) -> Future[dict[str, Any]]:
        return self.actor.execute.remote(item).future()


class RayPool:
    """One pinned actor per machine of the connected cluster (``connect`` first)."""

    def __init__(self, only: list[str] | None = None) -> None:
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from llamaspec.cluster.worker import MachineWorker

        remote = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(MachineWorker)
        self._handles: list[RayHandle] = []
        found = machines()
        if only:
            unknown = sorted(set(only) - {m["machine"] for m in found})
            if unknown:
                raise LlamaspecError(f"the cluster has no machine {unknown[0]}",
                                     hint=f"its machines: {', '.join(m['machine'] for m in found) or 'none'}")
            found = [m for m in found if m["machine"] in only]
        for m in found:
            if m["resource"]:
                options: dict[str, Any] = {"resources": {m["resource"]: 1}}
            else:
                options = {"scheduling_strategy": NodeAffinitySchedulingStrategy(m["node_id"], soft=False)}
            actor = remote.options(name=None, **options).remote(m["machine"], None, True)  # with its reaper
            self._handles.append(RayHandle(m["machine"], actor))

    def workers(self) -> list[RayHandle]:
        return list(self._handles)

    def is_lost(self, exc: BaseException) -> bool:
        ray = _ray()
        lost = (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError)
        return isinstance(exc, lost)

    def close(self, grace: float = 30.0) -> None:
        """Ask every worker to stop its servers, then end the actors (a worker that does not answer
        in ``grace`` seconds is killed; its reaper stops what it left)."""
        ray = _ray()
        closing = []
        for h in self._handles:
            try:
                closing.append(h.actor.close.remote())
            except ray.exceptions.RayError as exc:
                log.debug("actor of %s: %s", h.machine, exc)
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=grace)
        for h in self._handles:
            try:
                ray.kill(h.actor, no_restart=True)
            except ray.exceptions.RayError as exc:  # already gone with its machine
                log.debug("actor of %s: %s", h.machine, exc)
        self._handles = []
