"""``llamaspec sweep``: an experiment over a grid of settings, resumable."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from llamaspec.cli import main
from llamaspec.cli.options import check_prompt_file, common_options, overrides

log = logging.getLogger("llamaspec")

AXIS_OPTIONS = {
    "draft_max": "--draft",
    "draft_p_min": "--p-min",
    "threads": "--threads",
    "gpu_layers": "--gpu-layers",
    "draft_variant": "--draft-variant",
    "spec_type": "--spec-type",
}


@main.command()
@click.argument("experiment_name", metavar="NAME|PATH")
@click.option("--draft", "-d", "draft_max", default=None, metavar="LIST", help="Draft lengths: 1,2,4,8 or 1..16 (or 1..16:2).")
@click.option("--p-min", "draft_p_min", default=None, metavar="LIST", help="Draft p-min values, e.g. 0.5,0.75,0.9.")
@click.option("--threads", "-t", default=None, metavar="LIST", help="Thread counts, e.g. 1,2.")
@click.option("--gpu-layers", "-ngl", default=None, metavar="LIST", help="Offload values: all, none or layer counts.")
@click.option("--draft-variant", default=None, metavar="LIST", help="Draft model variants, e.g. q4_0,q4_1,q8_0.")
@click.option("--spec-type", default=None, metavar="LIST", help="Speculative modes, e.g. draft,ngram-simple.")
@click.option("--plot/--no-plot", default=True, show_default=True, help="Write the plots when the sweep ends.")
@common_options
def sweep(experiment_name: str, draft_max: str | None, draft_p_min: str | None, threads: str | None,
          gpu_layers: str | None, draft_variant: str | None, spec_type: str | None, plot: bool, n_predict: int | None,
          prompt: str | None, prompt_file: Path | None, repeats: int | None, timeout: float | None,
          bin_dir: Path | None, accel: str, as_json: bool) -> None:
    """Sweep settings (as a grid) and recommend the best draft length.

    Rerun the same command to resume: finished points are not measured again.
    Each distinct target setting gets one baseline, shared by its points.

    Example: llamaspec sweep smollm2-quicksort --draft 1..16
    """
    from llamaspec import experiment
    from llamaspec import sweep as sweeps
    from llamaspec.llamacpp.cache import find
    from llamaspec.llamacpp.runner import LlamaCppBackend
    from llamaspec.results import Store

    given = {"draft_max": draft_max, "draft_p_min": draft_p_min, "threads": threads, "gpu_layers": gpu_layers,
             "draft_variant": draft_variant, "spec_type": spec_type}
    axes = {axis: sweeps.parse_values(axis, text) for axis, text in given.items() if text is not None}
    exp = experiment.load(experiment_name)
    exp = exp.with_overrides(overrides(n_predict=n_predict, timeout=timeout), repeats, prompt, check_prompt_file(prompt_file))
    build = find(accel, bin_dir)
    log.info("using %s from %s", build.label, build.bin_dir)
    store = Store.open()
    results = sweeps.run_sweep(exp, axes, LlamaCppBackend(build), store, )
    from llamaspec import analysis

    reports = [analysis.sweep_report(store, r.sweep_id, plot=plot) for r in results]
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in reports], indent=2, default=str))
    else:
        click.echo("\n\n".join(r.render() for r in reports))


@main.command()
@click.argument("experiment_name", metavar="NAME|PATH")
@click.option("--variants", default=None, metavar="LIST", help="Draft variants to consider (default: the catalog's).")
@click.option("--modes", default=None, metavar="LIST", help="Draft-free n-gram modes to try (default: all the build has).")
@common_options
def tune(experiment_name: str, variants: str | None, modes: str | None, n_predict: int | None, prompt: str | None,
         prompt_file: Path | None, repeats: int | None, timeout: float | None, bin_dir: Path | None, accel: str,
         as_json: bool) -> None:
    """Search draft length, draft variant and draft-free n-gram modes; name the best configuration.

    The speedup model picks which draft lengths to measure and skips variants that cannot win.
    Resumable like a sweep.

    Example: llamaspec tune smollm2-quicksort
    """
    from llamaspec import experiment
    from llamaspec import tune as tuner
    from llamaspec.llamacpp.cache import find
    from llamaspec.llamacpp.runner import LlamaCppBackend
    from llamaspec.results import Store
    from llamaspec.sweep import parse_values

    exp = experiment.load(experiment_name)
    exp = exp.with_overrides(overrides(n_predict=n_predict, timeout=timeout), repeats, prompt, check_prompt_file(prompt_file))
    build = find(accel, bin_dir)
    log.info("using %s from %s", build.label, build.bin_dir)

    def on_point(config, row) -> None:
        s = row.get("summary") or {}
        log.info("  %-34s %s", config.label, f"{((s.get('speedup') or {}).get('median') or 0):.2f}x" if row.get("status") == "ok"
                 else f"failed: {row.get('error')}")

    results = tuner.tune(exp, LlamaCppBackend(build), Store.open(),
                         parse_values("draft_variant", variants) if variants else None,
                         parse_values("spec_type", modes) if modes else None, on_point)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        click.echo("\n\n".join(r.render() for r in results))
