"""``llamaspec watch URL``: a running llama-server's traffic, and what it says about its setting."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from llamaspec.cli import main


@main.command()
@click.argument("url")
@click.option("--interval", type=click.FloatRange(min=0.2), default=5.0, show_default=True,
              help="Seconds between two readings of the server.")
@click.option("--window", "span", type=click.FloatRange(min=0), default=None,
              help="The window: the last SECONDS of traffic (default 300; 0: everything since the watch began). "
                   "With --once: the traffic of the next SECONDS (default: everything since the server started).")
@click.option("--once", is_flag=True, help="One reading, then stop.")
@click.option("--samples", type=click.IntRange(min=1), default=None, help="Stop after this many readings.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per reading, a line each (for logging).")
@click.option("--cost", default=None, metavar="C[,V]",
              help="The pair's costs: the draft's step in target steps (C) and the target steps each drafted token "
                   "adds to a verification (V, default 0). Default: a stored study of the same files, else timed here.")
@click.option("--no-measure", is_flag=True,
              help="Never time the costs here with llama-bench (it shares the machine with the server for a minute).")
@click.option("--plot-dir", "plot_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Write the last window's plot (acceptance by position, predicted speedups) into this folder.")
@click.option("--no-store", is_flag=True, help="Keep no window in the results store.")
@click.option("--api-key", default=None, envvar="LLAMA_API_KEY", help="The server's API key, if it has one.")
def watch(url: str, interval: float, span: float | None, once: bool, samples: int | None, as_json: bool,
          cost: str | None, no_measure: bool, plot_dir: Path | None, no_store: bool, api_key: str | None) -> None:
    """Watch a running llama-server: its traffic, and whether its speculation pays off on it.

    Reads /metrics (the server needs --metrics), /props and /slots every few seconds and shows,
    over the window: requests and tokens, acceptance by draft position, the mean accepted length,
    the decode speed. From the window's acceptance and the pair's costs (--cost, a stored study of
    the same files, or timed here), the speedup model predicts every draft length up to the
    server's, with intervals from the window's counts, says whether the running length is the best
    and whether the draft pays at all, and ends with the command-line change. A restarted server
    starts a new window. Each window is stored with the server's settings and files (sha256).

    \b
    Example:
      llamaspec watch http://127.0.0.1:8080
      llamaspec watch http://127.0.0.1:8080 --once --json | jq .forecast.verdict
    """
    from llamaspec.watch import SPAN, Report, Watcher
    from llamaspec.watch.report import draw

    window = (None if once else SPAN) if span is None else (None if span == 0 else span)
    watcher = Watcher(url, span=window, cost=cost, measure=not no_measure, api_key=api_key, store=not no_store)
    refresh = sys.stdout.isatty() and not as_json and not once
    last: Report | None = None  # the reading to draw

    def emit(report: Report) -> None:
        """Print a reading, and keep it for the plot."""
        nonlocal last
        last = report
        if as_json:
            click.echo(json.dumps(report.to_dict(), default=str))
            return
        if refresh:
            click.clear()
        click.echo("\n".join(report.lines()) + ("" if refresh else "\n"))

    if once:
        try:
            emit(watcher.once())
        finally:
            watcher.finish()
    else:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the watch; run() stores the window
            watcher.run(emit, interval=interval, samples=samples)
    if watcher.stored:
        click.echo(f"stored window {watcher.stored[-1]} in the results store", err=True)
    if plot_dir is not None and last is not None:
        for path in draw(last, plot_dir):
            click.echo(f"plot: {path}", err=True)
