"""``llamaspec results``: list, show and export stored runs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from llamaspec.base.stats import percent_text
from llamaspec.cli import main


@main.group()
def results() -> None:
    """The results store: list, show and export stored runs."""


@results.command("list")
@click.option("--experiment", "-e", default=None, help="Only this experiment.")
@click.option("--last", type=click.IntRange(min=1), default=30, show_default=True, help="Show the N newest runs.")
def results_list(experiment: str | None, last: int) -> None:
    """List stored runs, newest first.

    A study of models given with -m is listed under its name (printed when it ran).

    Example: llamaspec results list -e smollm2-quicksort
    """
    from llamaspec.store.results import Store

    store = Store.open()
    rows = store.runs(experiment, limit=last)
    if not rows:
        click.echo(f"no runs stored in {store.path}", err=True)
        return
    from llamaspec.measure.summary import Summary

    # experiment names whole (a study's name is what report, plot and a rerun take), however long
    width = max([22, *(len(r["experiment"]) for r in rows)])
    click.echo(f"{'id':>5}  {'started':<24} {'experiment':<{width}} {'case':<12} {'kind':<6} {'draft':>5} {'status':<11} "
               f"{'speedup [95% CI]':>20} {'accept':>7}")
    for r in rows:
        s = Summary.from_dict(r.get("summary"))
        speedup = s.speedup.text(suffix="x") + ("" if s.paired else "*") if s.speedup else "-"
        click.echo(f"{r['id']:>5}  {r['started_at']:<24} {r['experiment']:<{width}} {r['case_name'][:12]:<12} "
                   f"{r['kind'][:6]:<6} {r['draft_max'] if r['draft_max'] is not None else '-':>5} {r['status']:<11} "
                   f"{speedup:>20} {percent_text(s.acceptance.median if s.acceptance else None, 1):>7}")
    if any(not Summary.from_dict(r.get("summary")).paired and Summary.from_dict(r.get("summary")).speedup for r in rows):
        click.echo("* against a shared baseline (not paired)", err=True)


@results.command("show")
@click.argument("run_id", type=int)
def results_show(run_id: int) -> None:
    """Print one run with its measurements and provenance as JSON.

    Example: llamaspec results show 12
    """
    from llamaspec.store.results import Store

    store = Store.open()
    row = store.run(run_id)
    row["measurements"] = store.measurements(run_id)
    click.echo(json.dumps(row, indent=2, sort_keys=True))


@results.command("export")
@click.option("--experiment", "-e", default=None, help="Only this experiment.")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="Write to a file (default stdout).")
@click.option("--json", "as_json", is_flag=True, help="JSON (each run with its measurements) instead of CSV.")
def results_export(experiment: str | None, output: Path | None, as_json: bool) -> None:
    """Export runs and measurements as CSV (one row per measurement) or JSON.

    Example: llamaspec results export -o runs.csv
    """
    from llamaspec.base import atomic
    from llamaspec.store.results import Store

    text = Store.open().export(as_json, experiment)
    if output:
        atomic.write_text(output, text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
