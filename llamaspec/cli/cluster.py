"""``llamaspec rpc serve`` and ``llamaspec cluster machines|run``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from llamaspec.cli import main
from llamaspec.cli.options import PROMPT_SOURCES

log = logging.getLogger("llamaspec")

# ``--cluster`` as run, sweep, tune and prompts run take it: the measuring moves to the cluster's
# machines, this process only coordinates and stores.
cluster_option = click.option(
    "--cluster", "address", default=None, envvar="RAY_ADDRESS", metavar="HOST:PORT",
    help="Spread the work over the machines of the Ray cluster whose head is HOST:PORT (default $RAY_ADDRESS); "
         "each machine measures its own baselines, results are stored here. See `llamaspec cluster --help`.")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def echo_study(report: Any, per: dict[str, Any], lines: list[str], as_json: bool) -> None:
    """Print a study: its bookkeeping (refused, lost, not run) and its per-machine figures."""
    from llamaspec.cluster import summary

    if as_json:
        click.echo(json.dumps({"study": report.study, "done": report.done, "skipped": report.skipped,
                               "refused": report.refused, "lost": report.lost, "failed": report.failed,
                               "not_run": report.not_run, "per_machine_progress": report.per_machine,
                               "machines": _jsonable(per)}, indent=2, default=str))
        return
    head = summary.describe_report(report)
    click.echo(head[0])
    for line in lines:
        click.echo(("  " + line) if line else "")
    for line in head[1:]:
        click.echo(line)


def run_experiment_on_cluster(exp: Any, address: str | None, *, repeats: int | None = None, split_repeats: bool = False,
                              machines: list[str] | None = None, accel: str = "auto", axes: dict[str, Any] | None = None,
                              as_json: bool = False) -> None:
    """``run --cluster`` / ``sweep --cluster`` / ``cluster run``: the study, then its figures."""
    from llamaspec.cluster import study, summary
    from llamaspec.store.results import Store

    report, per = study.run_experiment(exp, address, Store.open(), repeats=repeats, split_repeats=split_repeats,
                                       machines=machines, accel=accel, axes=axes)
    echo_study(report, per, summary.describe_points(per) if axes else summary.describe(per), as_json)
    if report.failed:
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"{len(report.failed)} of {report.total} items failed (stored as failed)",
                             hint="see the lines above; a rerun of the same command measures them again")


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


@main.group()
def cluster() -> None:
    """Studies spread over the machines of a Ray cluster (pip install 'llamaspec[cluster]').

    \b
    Set up (llamaspec starts no Ray head; keep it on a private network, dashboard off):
      ray start --head --port 6379 --num-cpus 0 --include-dashboard false
      ray start --address HEAD:6379 --resources '{"llamaspec:box1": 1}'   # each measuring machine

    `run`, `sweep`, `tune` and `prompts run` take --cluster HEAD:6379 (or $RAY_ADDRESS) too. Each
    machine measures its own baselines (speedups per machine); results are stored here; a machine
    lost mid-study hands its work back; a rerun resumes.

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
@click.option("--prompts", "prompt_set", default=None, metavar=PROMPT_SOURCES,
              help="Run over a prompt set (default: the experiment's prompts:, if it names one): one item per prompt.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="With a prompt set: at most N prompts.")
@click.option("--seed", "sample_seed", type=int, default=None, help="With --limit: a seeded sample.")
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
def cluster_run(experiment_name: str, address: str | None, prompt_set: str | None, limit: int | None,
                sample_seed: int | None, machines: tuple[str, ...], repeats: int | None,
                split_repeats: bool, draft_values: str | None, n_predict: int | None, threads: int | None, accel: str, as_json: bool) -> None:
    """Run an experiment's cases (or its prompt set) over the cluster's machines; speedups per machine.

    Each machine builds llama.cpp and fetches the models with the same cached, checked steps, and
    must match this machine's llama.cpp commit and model hashes. Each work item measures its own
    baselines on its machine. Results are stored here only; a rerun resumes.

    Example: llamaspec cluster run smollm2-quicksort --cluster 10.0.0.5:6379 -r 6 --split-repeats
    """
    from llamaspec.measure.settings import Settings
    from llamaspec.studies import experiment, sweep

    exp = experiment.load(experiment_name)
    if n_predict or threads:
        exp = exp.with_overrides(Settings(n_predict=n_predict, threads=threads))
    if prompt_set is not None or exp.prompts is not None:
        if draft_values or split_repeats:
            raise click.UsageError("--draft and --split-repeats are for single-prompt experiments; a prompt set is "
                                   "already one item per prompt")
        run_prompt_set_on_cluster(exp, prompt_set, address, limit=limit, sample_seed=sample_seed, repeats=repeats or 1,
                                  machines=list(machines) or None, accel=accel, as_json=as_json)
        return
    run_experiment_on_cluster(exp, address, repeats=repeats, split_repeats=split_repeats, machines=list(machines) or None,
                              accel=accel, as_json=as_json,
                              axes={"draft_max": sweep.parse_values("draft_max", draft_values)} if draft_values else None)


def tune_on_cluster(exp: Any, address: str | None, *, accel: str = "auto", as_json: bool = False, **options: Any) -> None:
    """``tune --cluster``: each machine tunes for itself; machine by machine, its answer as decided
    here from its stored points (the table and the decision, as ``sweep --cluster`` prints them)."""
    from llamaspec.cluster import study, summary
    from llamaspec.store.results import Store

    report, per = study.run_tune(exp, address, Store.open(), accel=accel, **options)
    echo_study(report, per, summary.describe_points(per), as_json)
    if report.failed or report.not_run:
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"{len(report.failed) + len(report.not_run)} of {report.total} machines did not finish their tune",
                             hint="see the lines above; a rerun of the same command runs them again")


def run_prompt_set_on_cluster(exp: Any, source: str | None, address: str | None, *, limit: int | None = None,
                              sample_seed: int | None = None, fmt: str | None = None, turns: str | None = None,
                              repeats: int = 1, machines: list[str] | None = None, accel: str = "auto",
                              as_json: bool = False) -> None:
    """``prompts run --cluster`` / ``run --prompts --cluster``: one item per (case, prompt)."""
    from llamaspec import promptset
    from llamaspec.cluster import promptsets
    from llamaspec.store.results import Store
    from llamaspec.studies import prompts as loader

    got = loader.load(promptset.source_of(exp, source, format=fmt, turns=turns, limit=limit, seed=sample_seed))
    log.info("%s: %d prompts x %d cases over the cluster", got.source.label, len(got.prompts), len(exp.cases))
    report, per = promptsets.run_prompt_set(exp, got, address, Store.open(), repeats=repeats, machines=machines, accel=accel)
    echo_study(report, per, promptsets.describe(per), as_json)
    if report.failed:
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"{len(report.failed)} of {report.total} prompts failed (stored as failed)",
                             hint="see the lines above; a rerun of the same command measures them again")
