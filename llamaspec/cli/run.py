"""``llamaspec run``: speculative against the target alone, in pairs, stored."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import click

from llamaspec.base.progress import duration
from llamaspec.base.stats import percent_text
from llamaspec.cli import main
from llamaspec.cli.cluster import cluster_option
from llamaspec.cli.options import (
    check_deploy_option,
    check_prompt_file,
    common_options,
    model_options,
    overrides,
    setting_options,
)
from llamaspec.cli.pasted import TakesPastedCommand

log = logging.getLogger("llamaspec")


def progress_printer(total_steps: int, in_blocks: bool = False):
    """Log each llama.cpp process as it starts and ends (stderr), so long runs show progress
    (``in_blocks``: a study's blocks, each line with the time left at the pace so far)."""
    state = {"done": 0, "first": 0.0}

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == "start" and data["mode"] == "warm-up":
            log.info("      %s: warm-up run (not recorded) ...", data["case"])
        elif event == "start":
            state["first"] = state["first"] or time.monotonic()
            which = "" if in_blocks else f" run {data['repeat'] + 1}/{data['repeats']}"
            log.info("[%d/%d] %s: %s%s ...", state["done"] + 1, total_steps, data["case"], data["mode"], which)
        elif event == "done":
            state["done"] += 1
            m, left = data["measurement"], total_steps - state["done"]
            eta = (time.monotonic() - state["first"]) / state["done"] * left
            took = f"{m.wall_seconds:.1f} s" + (f"; about {duration(eta)} left" if in_blocks and left > 0 else "")
            if m.ok:
                extra = f", accept {percent_text(m.acceptance, 1)}" if m.acceptance is not None else ""
                log.info("      decode %.2f t/s%s (%s)", m.decode_tps or 0, extra, took)
            else:
                log.info("      failed: %s", m.error)

    return on_event


def measure_sample(exp: Any, accel: str, bin_dir: Path | None, no_wait: bool, as_json: bool, check_deploy: bool) -> None:
    """An experiment over a workload's prompts (the built-in workload's sample): its one setting
    measured on each prompt in blocks, as a study measures (``studies.study.run_study``), its plan
    said first, then the study's answer."""
    from llamaspec.cli.options import measuring, open_engine
    from llamaspec.cli.sweep import echo_study
    from llamaspec.store.results import Store
    from llamaspec.studies import study as studies

    engine = open_engine(exp, accel, bin_dir)
    setup = studies.own_setup(exp)
    log.info("%s", studies.sample_plan(exp, setup))
    store = Store.open()
    try:
        with measuring(f"llamaspec run {exp.name}", no_wait):
            result = studies.run_study(exp, [setup], engine, store, fixed_grid=True, time_costs=False,
                                       on_event=progress_printer(studies.sample_runs(exp), in_blocks=True))
    finally:
        engine.close()
    echo_study(dataclasses.replace(result, block_seconds=None), engine, exp, store, False, as_json,  # no --budget here
               check_deploy=check_deploy, no_wait=no_wait, command="run")


@main.command(cls=TakesPastedCommand)
@click.argument("experiment_name", metavar="[NAME|PATH | -- COMMAND]", required=False)
@model_options
@setting_options
@common_options
@click.option("--per-category", type=click.IntRange(min=1), default=None, metavar="N",
              help="With no prompt: N prompts of each category of the built-in workload (default 1).")
@check_deploy_option
@cluster_option
@click.option("--machine", "machines", multiple=True, metavar="NAME",
              help="With --cluster: use only this machine (repeatable; `llamaspec cluster machines` lists them).")
@click.option("--split-repeats", is_flag=True,
              help="With --cluster: each repeat is a work item of its own (spreads a one-case experiment).")
def run(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None, n_predict: int | None, prompt: str | None, prompt_file: Path | None,
        repeats: int | str | None, timeout: float | None, bin_dir: Path | None, accel: str, no_wait: bool,
        as_json: bool, address: str | None, machines: tuple[str, ...], split_repeats: bool, per_category: int | None,
        check_deploy: bool, **given: Any) -> None:
    """Run an experiment, or your own models: speculative vs the target alone, in pairs, stored.

    NAME|PATH is an experiment; or name the models as llama.cpp takes them, -m TARGET -md DRAFT
    (a GGUF file, USER/REPO[:QUANT] as -hf, or a catalog NAME[:VARIANT]). Such a study gets a
    name from the files' sha256 and the settings (printed; --name to choose one) that `results
    list`, `report`, `plot` and a rerun take. Its prompt is -p or -f; with none, a sample of the
    built-in workload: the first prompt of each category (code, multi-turn, summarization, rag,
    math, rewriting; --per-category N for more), each in one block (the target alone, the setting,
    the target alone again; --repeats N blocks), the study's measurement and decision as `sweep`
    makes them. It states its plan first and the time left as it goes; the same command resumes it.

    Prints decode speeds, the speedup (median of paired ratios with a 95 % interval), acceptance
    and whether the generated output is unchanged (lossless), next to the experiment's reference
    figures. Exits non-zero when a case fails or its output differs.

    An experiment over a prompt set (prompts:) is a workload study: `llamaspec sweep NAME`.

    With --cluster HOST:PORT (or $RAY_ADDRESS) the cases are measured on the Ray cluster's
    machines (--split-repeats: each repeat an item of its own), each against its own baselines,
    and the figures are per machine.

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
    Example: llamaspec run smollm2-quicksort -r 6 --split-repeats --cluster 10.0.0.5:6379
    """
    from llamaspec.base.errors import LlamaspecError
    from llamaspec.cli.options import experiment_or_study, measuring, open_engine
    from llamaspec.cli.pasted import as_json as pasted_json
    from llamaspec.cli.pasted import pasted
    from llamaspec.cli.pasted import study as pasted_study
    from llamaspec.studies import adhoc
    from llamaspec.studies import run as runs
    from llamaspec.views import report

    words = pasted(click.get_current_context())
    cmd = None
    own = (model is not None or words is not None) and prompt is None and prompt_file is None
    if per_category is not None and not own:
        raise click.UsageError("--per-category is for -m/-md or a pasted command without a prompt (the built-in workload)")
    sample = adhoc.builtin_sample(per_category or 1) if own else None  # a prompt in the pasted command: dropped there
    if words is not None:  # `llamaspec run [OPTIONS] -- llama-server -m T.gguf -md D.gguf ...`
        if model is not None or drafts:
            raise LlamaspecError("-m/-md and a pasted command after -- together: the command names its own models",
                                 hint="give the models once: in the pasted command, or with -m/-md and no --")
        loaded, cmd, bin_dir = pasted_study(words, experiment_name=experiment_name,
                                            overrides=overrides(given, n_predict, timeout), prompt=prompt,
                                            prompt_file=prompt_file, name=study, repeats=repeats,
                                            bin_dir=bin_dir, workload=sample)
    else:
        loaded = experiment_or_study(experiment_name, model, drafts, study, settings=overrides(given, n_predict, timeout),
                                     prompt=prompt, prompt_file=prompt_file, repeats=repeats,
                                     command="run", several_drafts=False, workload=sample)
    if loaded.prompts is not None:
        raise LlamaspecError(f"{loaded.name} is measured over a prompt set: that is a workload study, "
                             f"`llamaspec sweep {experiment_name or loaded.name}`",
                             hint="`llamaspec run` measures one prompt per case; throughput against slots: "
                                  "`llamaspec concurrency`")
    exp = loaded.with_overrides(overrides(given, n_predict, timeout), repeats, prompt, check_prompt_file(prompt_file))
    if address:
        from llamaspec.cli.cluster import run_experiment_on_cluster

        if bin_dir is not None:
            raise click.UsageError("--bin-dir names binaries on this machine; cluster machines use their own builds")
        run_experiment_on_cluster(exp, address, split_repeats=split_repeats, machines=list(machines) or None,
                                  accel=accel, as_json=as_json)
        return
    if machines or split_repeats:
        raise click.UsageError("--machine and --split-repeats are for --cluster HOST:PORT (or $RAY_ADDRESS)")
    if all(c.category is not None for c in exp.cases):  # a workload's prompts: one block each unless --repeats
        measure_sample(dataclasses.replace(exp, repeats=repeats or 1), accel, bin_dir, no_wait, as_json, check_deploy)
        return
    engine = open_engine(exp, accel, bin_dir)
    steps = 2 * (runs.AUTO_MAX if exp.repeats == "auto" else int(exp.repeats)) * len(exp.cases)
    try:
        with measuring(f"llamaspec run {exp.name}", no_wait):
            results = runs.run_experiment(exp, engine, on_event=progress_printer(steps),
                                          warmup=exp.repeats == "auto" or int(exp.repeats) > 1)
    finally:
        engine.close()
    # The measured setting's command; the target alone where the one decision rule says "no draft".
    from llamaspec.decision.decide import deploys_alone

    deploys = []
    for r in results:
        alone = deploys_alone(r.summary.speedup)
        d = engine.deployment(r.case, speculative=alone is None) if r.status == "ok" else None
        if d is not None and alone is not None:
            d = dataclasses.replace(d, notes=(f"no draft: {alone}", *d.notes))
        deploys.append(d)
    if as_json:
        command = {"command": pasted_json(cmd)} if cmd is not None else {}
        click.echo(json.dumps([{**data, **command, "deploy": d.to_dict() if d else None}
                               for data, d in zip(report.as_json(results), deploys, strict=True)], indent=2))
    else:
        click.echo(report.render(results) + "".join(f"\n\n{d.render()}" for d in deploys if d))
    runs.raise_if_failed(results)
