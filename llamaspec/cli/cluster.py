"""``llamaspec rpc serve`` and ``llamaspec cluster machines|run``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from llamaspec.cli import main

log = logging.getLogger("llamaspec")


@main.group()
def rpc() -> None:
    """llama.cpp RPC workers: a target's layers held by other machines.

    Example: llamaspec rpc serve --port 50052 -t 1
    """


@rpc.command("serve")
@click.option("--host", "-H", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback is reachable by others, and the RPC protocol has no authentication.")
@click.option("--port", "-p", type=click.IntRange(1, 65535), default=50052, show_default=True, help="Port to bind.")
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
    from llamaspec import paths
    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import rpc as rpcs

    build = builds.prebuilt(bin_dir) if bin_dir else builds.find(accel, rpc=True)
    if bin_dir and rpcs.ROLE not in build.programs:
        for name in ("ggml-rpc-server", "rpc-server"):
            if (Path(build.bin_dir) / name).is_file():
                build = builds.Build(**{**build.__dict__, "programs": {**build.programs, rpcs.ROLE: name}})
                break
    rpcs.serve(build, host, port, threads, cache, log_path=paths.data_dir() / "rpc" / f"rpc-server-{port}.log")


@main.group()
def cluster() -> None:
    """Studies spread over the machines of a Ray cluster (pip install 'llamaspec[cluster]').

    Example: llamaspec cluster run smollm2-quicksort --cluster 10.0.0.5:6379 -r 6 --split-repeats
    """


@cluster.command("machines")
@click.option("--cluster", "address", default=None, envvar="RAY_ADDRESS", metavar="HOST:PORT",
              help="The Ray head (default $RAY_ADDRESS).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cluster_machines(address: str | None, as_json: bool) -> None:
    """List the machines a study would use (one worker each).

    A machine takes part when its Ray node advertises `llamaspec:NAME`, e.g.
    `ray start --address HEAD:6379 --resources '{"llamaspec:box1": 1}'`.

    Example: llamaspec cluster machines --cluster 10.0.0.5:6379
    """
    from llamaspec.cluster import raypool

    raypool.connect(address)
    found = raypool.machines()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for m in found:
        click.echo(f"{m['machine']:<20} {m['host']} ({m['address']})" + ("" if m["resource"] else "  [no llamaspec: resource]"))


@cluster.command("run")
@click.argument("experiment_name", metavar="NAME|PATH")
@click.option("--cluster", "address", default=None, envvar="RAY_ADDRESS", metavar="HOST:PORT",
              help="The Ray head (default $RAY_ADDRESS; neither: this machine alone, same code path).")
@click.option("--machine", "machines", multiple=True, help="Use only these machines (repeatable).")
@click.option("--repeats", "-r", type=click.IntRange(min=1), default=None, help="Repeats per case.")
@click.option("--split-repeats", is_flag=True, help="Each repeat is its own work item (spreads a one-case experiment).")
@click.option("--draft", "-d", "draft_values", default=None, metavar="LIST",
              help="Sweep draft lengths (1,2,4 or 1..16): one work item per case and length.")
@click.option("--n-predict", "-n", type=click.IntRange(min=1), default=None, help="Tokens to generate.")
@click.option("--threads", "-t", type=click.IntRange(min=1), default=None, help="CPU threads on each machine.")
@click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto", show_default=True,
              help="What llama.cpp computes on at the machines (built there if missing).")
@click.option("--json", "as_json", is_flag=True, help="Print the per-machine results as JSON.")
def cluster_run(experiment_name: str, address: str | None, machines: tuple[str, ...], repeats: int | None,
                split_repeats: bool, draft_values: str | None, n_predict: int | None, threads: int | None, accel: str, as_json: bool) -> None:
    """Run an experiment's cases over the cluster's machines; speedups per machine.

    Each machine builds llama.cpp and fetches the models with the same cached, checked steps, and
    must match this machine's llama.cpp commit and model hashes. Each work item measures its own
    baselines on its machine. Results are stored here only; a rerun resumes.

    Example: llamaspec cluster run smollm2-quicksort --cluster 10.0.0.5:6379 -r 6 --split-repeats
    """
    from llamaspec import experiment, sweep
    from llamaspec.cluster import study, summary
    from llamaspec.results import Store
    from llamaspec.settings import Settings

    exp = experiment.load(experiment_name)
    if n_predict or threads:
        exp = exp.with_overrides(Settings(n_predict=n_predict, threads=threads))
    report, per = study.run_experiment(exp, address, Store.open(), repeats=repeats, split_repeats=split_repeats,
                                       machines=list(machines) or None, accel=accel,
                                       axes={"draft_max": sweep.parse_values("draft_max", draft_values)} if draft_values else None)
    sid = report.study
    if as_json:
        click.echo(json.dumps({"study": sid, "refused": report.refused, "lost": report.lost, "failed": report.failed,
                               "machines": {m: {k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in s.items()}
                                            for m, s in per.items()}}, indent=2, default=str))
        return
    click.echo(f"study {sid}: {len(report.done)} items run, {report.skipped} already stored"
               + (f", {len(report.failed)} failed" if report.failed else ""))
    for line in summary.describe(per):
        click.echo("  " + line)
    for line in report.refused.values():
        click.echo(f"  refused: {line}")
