"""``llamaspec report``: Markdown from the results store."""

from __future__ import annotations

from pathlib import Path

import click

from llamaspec.cli import main


@main.command()
@click.argument("experiment_names", metavar="NAME...", nargs=-1, required=True)
@click.option("--compare", "compare_by", type=click.Choice(["build", "machine", "pair", "engine", "backend"]), default=None,
              help="Group the runs by build, machine, model pair, or engine (llama.cpp, llama-server, transformers "
                   "runs of each pair side by side; 'backend' is its older name).")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="Write the Markdown to a file.")
@click.option("--no-plot", is_flag=True, help="Do not (re)draw the sweep plots.")
def report(experiment_names: tuple[str, ...], compare_by: str | None, output: Path | None, no_plot: bool) -> None:
    """A Markdown summary of one or more experiments from the results store.

    With several experiments (say the same model pair under two engines), --compare sets their
    runs side by side. Speedups of different engines compare (each is against its own engine's
    baseline); their absolute speeds do not.

    \b
    Example:
      llamaspec report smollm2-quicksort --compare build -o report.md
      llamaspec report smollm2-quicksort hf-smollm2-quicksort --compare engine
    """
    from llamaspec.base import atomic
    from llamaspec.store.results import Store
    from llamaspec.views import report as reports

    text = reports.markdown(Store.open(), experiment_names, compare_by, plot=not no_plot)
    if output:
        atomic.write_text(output, text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
