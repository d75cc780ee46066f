"""``llamaspec cluster machines``, and ``--cluster`` as run and sweep take it."""

from __future__ import annotations

import json
import logging
from typing import Any

import click

from llamaspec.cli import main, moved

log = logging.getLogger("llamaspec")

# ``--cluster`` as run and sweep take it: the measuring moves to the cluster's
# machines, this process only coordinates and stores.
cluster_option = click.option(
    "--cluster", "address", default=None, envvar="RAY_ADDRESS", metavar="HOST:PORT",
    help="Spread the work over the machines of the Ray cluster whose head is HOST:PORT (default $RAY_ADDRESS; "
         "local: this machine as the one worker, the same code path); each machine measures its own baselines, "
         "results are stored here. See `llamaspec cluster --help`.")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def echo_cluster_report(report: Any, per: dict[str, Any], lines: list[str], as_json: bool) -> None:
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


def run_experiment_on_cluster(exp: Any, address: str | None, *, split_repeats: bool = False,
                              machines: list[str] | None = None, accel: str = "auto", as_json: bool = False) -> None:
    """``run --cluster``: the experiment's cases over the machines, then their figures per machine."""
    from llamaspec.cluster import study, summary
    from llamaspec.store.results import Store

    report, per = study.run_experiment(exp, address, Store.open(), split_repeats=split_repeats, machines=machines,
                                       accel=accel)
    echo_cluster_report(report, per, summary.describe(per), as_json)
    if report.failed:
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"{len(report.failed)} of {report.total} items failed (stored as failed)",
                             hint="see the lines above; a rerun of the same command measures them again")


@main.group()
def cluster() -> None:
    """Studies spread over the machines of a Ray cluster (pip install 'llamaspec[cluster]').

    \b
    Set up (llamaspec starts no Ray head; keep it on a private network, dashboard off):
      ray start --head --port 6379 --num-cpus 0 --include-dashboard false
      ray start --address HEAD:6379 --resources '{"llamaspec:box1": 1}'   # each measuring machine

    `run` and `sweep` take --cluster HEAD:6379 (or $RAY_ADDRESS): `run` spreads an experiment's
    cases (--split-repeats: its repeats), `sweep` runs the workload study on every machine. Each
    machine measures its own baselines (speedups per machine); results are stored here; a machine
    lost mid-study hands its work back; a rerun resumes.

    Example: llamaspec run smollm2-quicksort --cluster 10.0.0.5:6379 -r 6 --split-repeats
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


cluster.add_command(moved("cluster run", "`llamaspec run NAME --cluster HEAD:PORT` (an experiment's cases; "
                                           "--split-repeats spreads one case) or `llamaspec sweep NAME --cluster "
                                           "HEAD:PORT` (a workload study on every machine)",
                            hint="`llamaspec run --help` and `llamaspec sweep --help` list their options"), "run")


def study_on_cluster(exp: Any, address: str | None, *, accel: str = "auto", as_json: bool = False,
                     **options: Any) -> None:
    """``sweep --cluster``: each machine runs the study for itself; machine by machine, its answer
    as decided here from its stored points (the table and the decision)."""
    from llamaspec.cluster import study, summary
    from llamaspec.store.results import Store

    report, per = study.run_studies(exp, address, Store.open(), accel=accel, **options)
    echo_cluster_report(report, per, summary.describe_points(per), as_json)
    if report.failed or report.not_run:
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"{len(report.failed) + len(report.not_run)} of {report.total} machines did not finish "
                             "their study", hint="see the lines above; a rerun of the same command runs them again")
