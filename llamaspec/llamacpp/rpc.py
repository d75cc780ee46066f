"""llama.cpp's RPC backend: a target model's layers held by other machines' RPC servers.

- ``llamaspec rpc serve`` starts ``ggml-rpc-server`` (``rpc-server`` before 2025) from a build
  made with ``llamaspec build --rpc`` (CMake ``-DGGML_RPC=ON``). It binds 127.0.0.1 unless a host
  is given explicitly, and warns then: the RPC protocol has no authentication, anyone who reaches
  the port can run computations and read what is loaded.
- An experiment setting ``rpc: [host:port, ...]`` passes ``--rpc`` to the target's programs and
  offloads the target's layers onto those servers (``-ngl`` all), while the draft stays local
  (``-ngld`` per the local build: 0 on a CPU build). Before anything runs, every server must
  answer a TCP connect (``check_endpoints``): a worker that is down is one clear error.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llamaspec.base import proc
from llamaspec.base.errors import LlamaspecError

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50052
ROLE = "rpc-server"  # the role name in Build.programs (llamaspec.llamacpp.cache.RPC_ROLE)
UNSAFE_WARNING = ("the llama.cpp RPC server has no authentication: anyone who can reach {host}:{port} can run "
                  "computations on this machine and read the model layers it holds; bind a private network only")


def parse_endpoint(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); LlamaspecError naming what is wrong."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LlamaspecError(f"RPC worker {text!r} is not host:port", hint="e.g. 127.0.0.1:50052 or 10.0.0.7:50052")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_argv(program: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, threads: int | None = None,
               cache: bool = False) -> list[str]:
    argv = [str(program), "--host", host, "--port", str(port)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    if cache:
        argv.append("--cache")
    return argv


def server_program(build: Any) -> Path:
    """The RPC server of a build; a build without one gets the command that makes one."""
    if ROLE not in build.programs:
        raise LlamaspecError(f"the llama.cpp build in {build.bin_dir} has no RPC server (built without GGML_RPC)",
                             hint="build one with `llamaspec build --rpc` (a second, cached build with -DGGML_RPC=ON)")
    return Path(build.bin_dir) / build.programs[ROLE]


def has_rpc(build: Any) -> bool:
    """Whether a build's programs can use RPC servers (prebuilt folders: assumed, llama.cpp says otherwise)."""
    return bool(getattr(build, "prebuilt", False)) or "-DGGML_RPC=ON" in (build.cmake_args or []) or ROLE in build.programs


def serve(build: Any, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, threads: int | None = None, cache: bool = False,
          log_path: Path | None = None) -> proc.Completed:
    """Run the RPC server in the foreground until it stops (Ctrl-C stops it)."""
    if not is_loopback(host):
        log.warning("warning: " + UNSAFE_WARNING.format(host=host, port=port))
    argv = serve_argv(server_program(build), host, port, threads, cache)
    log.info("RPC server on %s:%d (%s); stop with Ctrl-C", host, port, Path(argv[0]).name)
    return proc.run(argv, log_path=log_path, what="RPC server", check=True, timeout=None,
                    hint=f"is port {port} free? try another with --port")


def needed(exp: Any) -> bool:
    """Whether any case of an experiment puts its target on RPC workers: it then runs on the RPC
    build (``find(..., rpc=True)``), chosen without being asked."""
    return bool(exp.uses_rpc)


def check_endpoints(endpoints: Iterable[str], timeout: float = 2.0) -> None:
    """Every RPC worker must accept a connection, else one error naming the first that does not."""
    for text in endpoints:
        host, port = parse_endpoint(text)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as exc:
            why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
            raise LlamaspecError(f"RPC worker {host}:{port} does not answer ({why})",
                                 hint=f"start it on that machine with `llamaspec rpc serve --host {host} --port {port}`"
                                      if not is_loopback(host) else f"start it with `llamaspec rpc serve --port {port}`") from exc
