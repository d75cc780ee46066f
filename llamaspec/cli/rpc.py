"""``llamaspec rpc serve``: this machine's CPU or GPU lent to other machines' llama.cpp."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from llamaspec.cli import main

log = logging.getLogger("llamaspec")


@main.group()
def rpc() -> None:
    """llama.cpp RPC workers: a target's layers held by other machines.

    The default build has llama.cpp's RPC backend and server (`llamaspec build`; `--rpc` refuses a
    tree without them): serve on each lending machine, then set `rpc: [HOST:PORT, ...]` in the
    experiment's settings: the target's layers go to those servers, the draft stays local.

    Security: the server binds 127.0.0.1 unless --host is given; the RPC protocol has no
    authentication, so bind a private network only.

    Example: llamaspec rpc serve --port 50052 -t 1
    """


@rpc.command("serve")
@click.option("--host", "-H", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback is reachable by others, and the RPC protocol has no authentication.")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True, help="Port to bind.")
@click.option("--threads", "-t", type=click.IntRange(min=1), default=None, help="CPU threads (default: llama.cpp's, half the cores).")
@click.option("--cache", is_flag=True, help="Keep received tensors in a local file cache (faster reloads).")
@click.option("--bin-dir", type=click.Path(path_type=Path), default=None, envvar="LLAMASPEC_BIN_DIR",
              help="A llama.cpp binaries folder with ggml-rpc-server (default: llamaspec's RPC build).")
@click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto", show_default=True,
              help="Which cached RPC build to use (what it computes on).")
def rpc_serve(host: str, port: int, threads: int | None, cache: bool, bin_dir: Path | None, accel: str) -> None:
    """Serve this machine's CPU or GPU to other machines' llama.cpp over RPC, until Ctrl-C.

    Then on the measuring machine, set `rpc: [THIS-HOST:PORT]` in the experiment: the target's
    layers go here, the draft stays there.

    Example: llamaspec rpc serve --port 50052 -t 1
    """
    from llamaspec.base import paths
    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import rpc as rpcs

    build = builds.prebuilt(bin_dir) if bin_dir else builds.find(accel, rpc=True)
    if bin_dir and rpcs.ROLE not in build.programs:
        for name in ("ggml-rpc-server", "rpc-server"):
            if (Path(build.bin_dir) / name).is_file():
                build = builds.Build(**{**build.__dict__, "programs": {**build.programs, rpcs.ROLE: name}})
                break
    import signal

    def stop(_signum: int, _frame: Any) -> None:  # SIGTERM (kill, systemd, a cluster node going down) = Ctrl-C:
        raise KeyboardInterrupt  # proc.run then stops the server; it never outlives this command

    signal.signal(signal.SIGTERM, stop)
    try:
        rpcs.serve(build, host, port, threads, cache, log_path=paths.data_dir() / "rpc" / f"rpc-server-{port}.log")
    except KeyboardInterrupt:
        log.info("RPC server on %s:%d stopped", host, port)
