"""``llamaspec run`` and ``llamaspec results``."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import click

from llamaspec.base.stats import percent_text
from llamaspec.cli import main
from llamaspec.cli.cluster import cluster_option
from llamaspec.cli.options import (
    PROMPT_SOURCES,
    check_prompt_file,
    common_options,
    model_options,
    overrides,
    setting_options,
)
from llamaspec.cli.pasted import TakesPastedCommand

log = logging.getLogger("llamaspec")


def progress_printer(total_steps: int):
    """Log each llama.cpp process as it starts and ends (stderr), so long runs show progress."""
    state = {"done": 0}

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == "start" and data["mode"] == "warm-up":
            log.info("      %s: warm-up run (not recorded) ...", data["case"])
        elif event == "start":
            log.info("[%d/%d] %s: %s run %d/%d ...", state["done"] + 1, total_steps, data["case"], data["mode"],
                     data["repeat"] + 1, data["repeats"])
        elif event == "done":
            state["done"] += 1
            m = data["measurement"]
            if m.ok:
                extra = f", accept {percent_text(m.acceptance, 1)}" if m.acceptance is not None else ""
                log.info("      decode %.2f t/s%s (%.1f s)", m.decode_tps or 0, extra, m.wall_seconds)
            else:
                log.info("      failed: %s", m.error)

    return on_event


@main.command(cls=TakesPastedCommand)
@click.argument("experiment_name", metavar="[NAME|PATH | -- COMMAND]", required=False)
@model_options
@setting_options
@common_options
@click.option("--prompts", "prompt_set", default=None, metavar=PROMPT_SOURCES,
              help="Run over a prompt set instead (on llama-server; the same as `llamaspec prompts run`).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="With --prompts: at most N prompts.")
@click.option("--seed", "sample_seed", type=int, default=None, help="With --prompts and --limit: a seeded sample.")
@click.option("--plot", "plot_dir", type=click.Path(path_type=Path), default=None,
              help="With --prompts: write the prompt set's plots to this folder.")
@cluster_option
def run(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None, n_predict: int | None, prompt: str | None, prompt_file: Path | None,
        repeats: int | str | None, timeout: float | None, bin_dir: Path | None, accel: str, no_wait: bool,
        as_json: bool, prompt_set: str | None, limit: int | None, sample_seed: int | None, plot_dir: Path | None,
        address: str | None, **given: Any) -> None:
    """Run an experiment, or your own models: speculative vs the target alone, in pairs, stored.

    NAME|PATH is an experiment; or name the models as llama.cpp takes them, -m TARGET -md DRAFT
    (a GGUF file, USER/REPO[:QUANT] as -hf, or a catalog NAME[:VARIANT]). Such a study gets a
    name from the files' sha256 and the settings (printed; --name to choose one) that `results
    list`, `report`, `plot` and a rerun take. Its prompt is -p, -f or --prompts; with none, the
    built-in workload (54 chat prompts: code, multi-turn, summarization, rag, math, rewriting),
    each a case of its own.

    Prints decode speeds, the speedup (median of paired ratios with a 95 % interval), acceptance
    and whether the generated output is unchanged (lossless), next to the experiment's reference
    figures. Exits non-zero when a case fails or its output differs.

    With --prompts (or an experiment that names prompts:) this is `llamaspec prompts run`: the
    same options reach the same place, and --parallel N measures concurrency at N slots (several
    levels: `llamaspec prompts run NAME --parallel 1,2,4`).

    With --cluster HOST:PORT (or $RAY_ADDRESS) the cases (or the prompts of a set) are measured on
    the Ray cluster's machines, each against its own baselines, and the figures are per machine.

    After -- a llama.cpp command as you run it (llama-server, llama-speculative-simple or
    llama-speculative, by name or path): that command is measured as given against the same command
    without its draft and speculation flags. Flags llamaspec does not know are passed through to
    both sides (and shown); with --temp above 0 the runs sample: speed and acceptance at that
    temperature, the lossless check "not applicable: sampled".

    \b
    Example: llamaspec run smollm2-quicksort --draft 4 --repeats 5
    Example: llamaspec run -m target.gguf -md draft.gguf --draft 8 -p "Write a haiku about the sea."
    Example: llamaspec run -m USER/MODEL-GGUF:Q4_0 -md draft.gguf
    Example: llamaspec run -- llama-server -m T.gguf -md D.gguf --spec-draft-n-max 8 -c 4096 -ngl 99
    Example: llamaspec run --repeats 5 -- llama-speculative-simple -m T.gguf -md D.gguf --draft-max 4 -p "Hello"
    Example: llamaspec run smollm2-server-mini --prompts llamaspec-mini --limit 16 --cluster 10.0.0.5:6379
    """
    from llamaspec.base.errors import LlamaspecError
    from llamaspec.cli.options import experiment_or_study, measuring, open_engine
    from llamaspec.cli.pasted import as_json as pasted_json
    from llamaspec.cli.pasted import pasted
    from llamaspec.cli.pasted import study as pasted_study
    from llamaspec.studies import run as runs
    from llamaspec.views import report

    if prompt_set is not None and (prompt is not None or prompt_file is not None):
        raise click.UsageError("--prompt and --prompt-file replace one prompt; a prompt set runs its own "
                               "(drop them, or run an experiment without prompts:)")
    # over a prompt set, --parallel N is N slots served to N clients (as in prompts run), not a setting
    parallel = given.pop("parallel", None) if prompt_set is not None else None
    words = pasted(click.get_current_context())
    cmd = None
    if words is not None:  # `llamaspec run [OPTIONS] -- llama-server -m T.gguf -md D.gguf ...`
        if model is not None or drafts:
            raise LlamaspecError("-m/-md and a pasted command after -- together: the command names its own models",
                                 hint="give the models once: in the pasted command, or with -m/-md and no --")
        loaded, cmd, bin_dir = pasted_study(words, experiment_name=experiment_name,
                                            overrides=overrides(given, n_predict, timeout), prompt=prompt,
                                            prompt_file=prompt_file, prompts=prompt_set, name=study, repeats=repeats,
                                            bin_dir=bin_dir)
    else:
        loaded = experiment_or_study(experiment_name, model, drafts, study, settings=overrides(given, n_predict, timeout),
                                     prompt=prompt, prompt_file=prompt_file, prompts=prompt_set, repeats=repeats,
                                     command="run", several_drafts=False)
    if prompt_set is not None or loaded.prompts is not None:
        from llamaspec.cli.prompts import run_prompt_set

        if prompt is not None or prompt_file is not None:
            raise click.UsageError("--prompt and --prompt-file replace one prompt; a prompt set runs its own "
                                   "(drop them, or run an experiment without prompts:)")
        if repeats == "auto":
            raise click.UsageError("--repeats auto is for one prompt; over a prompt set give a count, e.g. --repeats 3")
        if prompt_set is None:
            parallel = given.pop("parallel", None)
        run_prompt_set(loaded, prompt_set, given=given, n_predict=n_predict, timeout=timeout,
                       repeats=repeats if isinstance(repeats, int) else None, limit=limit,
                       sample_seed=sample_seed, levels=[parallel] if parallel else None, plot_dir=plot_dir,
                       bin_dir=bin_dir, accel=accel, as_json=as_json, address=address, no_wait=no_wait)
        return
    if plot_dir is not None:
        raise click.UsageError("--plot is for prompt sets (--prompts); plots of stored runs: `llamaspec plot --help`")
    exp = loaded.with_overrides(overrides(given, n_predict, timeout), repeats, prompt, check_prompt_file(prompt_file))
    if address:
        from llamaspec.cli.cluster import run_experiment_on_cluster

        if bin_dir is not None:
            raise click.UsageError("--bin-dir names binaries on this machine; cluster machines use their own builds")
        run_experiment_on_cluster(exp, address, accel=accel, as_json=as_json)
        return
    engine = open_engine(exp, accel, bin_dir)
    steps = 2 * (runs.AUTO_MAX if exp.repeats == "auto" else int(exp.repeats)) * len(exp.cases)
    try:
        with measuring(f"llamaspec run {exp.name}", no_wait):
            results = runs.run_experiment(exp, engine, on_event=progress_printer(steps),
                                          warmup=exp.repeats == "auto" or int(exp.repeats) > 1)
    finally:
        engine.close()
    # The measured setting's command; the target alone when it measured slower than the target alone.
    deploys = []
    for r in results:
        speedup = r.summary.speedup
        slower = speedup is not None and speedup.high < 1.0
        d = engine.deployment(r.case, speculative=not slower) if r.status == "ok" else None
        if d is not None and speedup is not None and slower:
            d = dataclasses.replace(d, notes=(f"with the draft this case measured slower than the target alone "
                                              f"({speedup.text(suffix='x')})", *d.notes))
        deploys.append(d)
    if as_json:
        command = {"command": pasted_json(cmd)} if cmd is not None else {}
        click.echo(json.dumps([{**data, **command, "deploy": d.to_dict() if d else None}
                               for data, d in zip(report.as_json(results), deploys, strict=True)], indent=2))
    else:
        click.echo(report.render(results) + "".join(f"\n\n{d.render()}" for d in deploys if d))
    runs.raise_if_failed(results)


@main.group()
def results() -> None:
    """The results store: list, show and export stored runs."""


@results.command("list")
@click.option("--experiment", "-e", default=None, help="Only this experiment.")
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True)
def results_list(experiment: str | None, limit: int) -> None:
    """List stored runs, newest first.

    A study of models given with -m is listed under its name (printed when it ran).

    Example: llamaspec results list -e smollm2-quicksort
    """
    from llamaspec.store.results import Store

    store = Store.open()
    rows = store.runs(experiment, limit=limit)
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
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("--experiment", "-e", default=None, help="Only this experiment.")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="Write to a file (default stdout).")
def results_export(fmt: str, experiment: str | None, output: Path | None) -> None:
    """Export runs and measurements as CSV (one row per measurement) or JSON.

    Example: llamaspec results export --format csv -o runs.csv
    """
    from llamaspec.base import atomic
    from llamaspec.store.results import Store

    text = Store.open().export(fmt, experiment)
    if output:
        atomic.write_text(output, text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
