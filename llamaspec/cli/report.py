"""``llamaspec report``: Markdown from the results store."""

from __future__ import annotations

import json
from pathlib import Path

import click

from llamaspec.cli import main


@main.command()
@click.argument("experiment_names", metavar="NAME...", nargs=-1, required=True)
@click.option("--compare", "compare_by", type=click.Choice(["build", "machine", "pair", "engine"]), default=None,
              help="Group the runs by build, machine, model pair, or engine (llama.cpp, llama-server, transformers "
                   "runs of each pair side by side).")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="Write the report to a file.")
@click.option("--plot/--no-plot", default=True, show_default=True, help="(Re)draw the sweep plots.")
@click.option("--json", "as_json", is_flag=True, help="The report's data as JSON instead of Markdown.")
def report(experiment_names: tuple[str, ...], compare_by: str | None, output: Path | None, plot: bool, as_json: bool) -> None:
    """A Markdown summary of one or more experiments from the results store.

    With several experiments (say the same model pair under two engines), --compare sets their
    runs side by side. Speedups of different engines compare (each is against its own engine's
    baseline); their absolute speeds do not.

    \b
    Example:
      llamaspec report smollm2-quicksort --compare build -o report.md
      llamaspec report smollm2-quicksort hf-smollm2-quicksort --compare engine
      llamaspec report smollm2-quicksort --json | jq '.experiments[0].plain_runs[0].summary'
    """
    from llamaspec.base import atomic
    from llamaspec.store.results import Store
    from llamaspec.views import report as reports

    if as_json:
        text = json.dumps(reports.data(Store.open(), experiment_names, compare_by, plot=plot), indent=2, default=str) + "\n"
    else:
        text = reports.markdown(Store.open(), experiment_names, compare_by, plot=plot)
    if output:
        atomic.write_text(output, text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
