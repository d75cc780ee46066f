"""``llamaspec concurrency``: throughput against server slots over a prompt set, on llama-server."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from llamaspec.cli import main
from llamaspec.cli.options import (
    PROMPT_SOURCES,
    TIMEOUT_HELP,
    EngineSettingsCommand,
    SettingValue,
    model_options,
    prompt_set_options,
)

log = logging.getLogger("llamaspec")


def _levels(text: str) -> list[int]:
    try:
        levels = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected a comma-separated list of slot counts, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter("slot counts must be at least 1")
    return levels


def _server_settings() -> frozenset[str]:
    """The settings llama-server honours, from its flag table (imported when the command is used)."""
    from llamaspec.registry import engines

    return engines.honoured("llama-server")


# The setting options are run's, for every sweepable setting llama-server honours (its flag table
# says which); --parallel is what the levels set.
@main.command(cls=EngineSettingsCommand, honoured=_server_settings, skip=("parallel",), after="n_predict")
@click.argument("experiment_name", metavar="[NAME|PATH]", required=False)
@model_options
@click.option("--levels", "-L", "levels_text", default="1,2,4", show_default=True, metavar="N[,N...]",
              help="Concurrency levels: N server slots and N clients at each.")
@click.option("--prompts", "-P", "source", default=None, metavar=PROMPT_SOURCES,
              help="The prompt set (default: the experiment's prompts:, or with -m the built-in workload).")
@prompt_set_options
@click.option("--n-predict", "-n", type=SettingValue("n_predict", int), default=None, help="Tokens to generate per prompt.")
@click.option("--batch-pairs", "batch_pairs", type=click.IntRange(min=1), default=None,
              help="Pairs of batches per level (default 3), baseline and speculative in ABBA order.")
@click.option("--timeout", type=SettingValue("timeout", float), default=None, help=TIMEOUT_HELP)
@click.option("--plot/--no-plot", default=True, show_default=True,
              help="Draw throughput against N (into the data folder's plots/concurrency/).")
@click.option("--bin-dir", type=click.Path(path_type=Path), default=None, envvar="LLAMASPEC_BIN_DIR",
              help="Use these llama.cpp binaries instead of llamaspec's build.")
@click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto",
              show_default=True, help="Which cached llama.cpp build to use (what it computes on).")
@click.option("--json", "as_json", is_flag=True, help="Print each level's figures as JSON.")
@click.option("--no-wait", is_flag=True, help="Fail at once if another measurement holds this machine.")
def concurrency(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None,
                levels_text: str, source: str | None, limit: int | None, sample_seed: int | None, fmt: str | None,
                turns: str | None, n_predict: int | None, batch_pairs: int | None, timeout: float | None, plot: bool,
                bin_dir: Path | None, accel: str, as_json: bool, no_wait: bool, **given: Any) -> None:
    """Throughput against concurrency: each case's speculative server against the target alone's,
    both with N slots, a batch sending every prompt of the set through N clients at once.

    Per level, pairs of batches (baseline and speculative back to back, ABBA order): aggregate
    throughput (tokens a batch generated over its wall time) and per-request decode speed, each
    with its 95 % interval over the batches, and their speedups as medians of paired batch ratios.
    Which setup to run is `llamaspec sweep`'s answer; this says how it holds as requests share
    the server.

    \b
    Example: llamaspec concurrency smollm2-server-mini --levels 1,2,4 --limit 8
    Example: llamaspec concurrency -m target.gguf -md draft.gguf -d 8 --prompts my-prompts.jsonl
    """
    from llamaspec.base import paths
    from llamaspec.cli.options import experiment_or_study, measuring, open_engine, overrides
    from llamaspec.studies import adhoc
    from llamaspec.studies import concurrency as levels
    from llamaspec.studies import prompts as loader

    settings = overrides(given, n_predict, timeout)
    exp = experiment_or_study(experiment_name, model, drafts, study, settings=settings,
                              prompts=source if model is None or source is not None else str(adhoc.builtin_prompts()),
                              repeats=batch_pairs, command="concurrency", several_drafts=False)
    if exp.engine == "transformers":
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"experiment {exp.name} uses the transformers engine; concurrency is measured on llama-server",
                             hint="measure a llama.cpp or llama-server experiment's concurrency")
    if exp.engine != "llama-server":  # the same build and GGUF models, served: said, not silent
        log.warning("concurrency is measured on llama-server: experiment %s (engine %s) is measured there, with its "
                    "models and settings", exp.name, exp.engine)
    exp = exp.with_overrides(settings, batch_pairs)
    got = loader.load(loader.source_of(exp, source if model is None else None, limit=limit, seed=sample_seed,
                                       format=fmt, turns=turns))
    log.info("%s: %d prompts in %d categories", got.source.label, len(got.prompts), len(got.categories()))
    engine = open_engine(exp, accel, bin_dir, engine="llama-server")
    try:
        with measuring(f"llamaspec concurrency {exp.name}", no_wait):
            rows = levels.run_concurrency(exp, got, engine, _levels(levels_text),
                                          repeats=batch_pairs or levels.CONCURRENCY_REPEATS)
    finally:
        engine.close()
    click.echo(json.dumps(rows, indent=2, default=str) if as_json else levels.render_concurrency(rows))
    if plot:
        from llamaspec.views.concurrency import plot_concurrency

        for path in plot_concurrency(rows, paths.plots_dir() / "concurrency", exp.name):
            log.info("plot: %s", path)
