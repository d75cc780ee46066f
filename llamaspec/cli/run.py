"""``llamaspec run``: speculative against the target alone, in pairs, stored."""

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


def _prompts_moved(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError("`llamaspec run --prompts` is now `llamaspec sweep --prompts` (the workload study)",
                             hint=f"llamaspec sweep NAME --prompts {value} (or -m TARGET -md DRAFT --prompts {value})")


@main.command(cls=TakesPastedCommand)
@click.argument("experiment_name", metavar="[NAME|PATH | -- COMMAND]", required=False)
@model_options
@setting_options
@common_options
@click.option("--prompts", "prompt_set", default=None, hidden=True, expose_value=False, callback=_prompts_moved)
@cluster_option
@click.option("--machine", "machines", multiple=True, metavar="NAME",
              help="With --cluster: use only this machine (repeatable; `llamaspec cluster machines` lists them).")
@click.option("--split-repeats", is_flag=True,
              help="With --cluster: each repeat is a work item of its own (spreads a one-case experiment).")
def run(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None, n_predict: int | None, prompt: str | None, prompt_file: Path | None,
        repeats: int | str | None, timeout: float | None, bin_dir: Path | None, accel: str, no_wait: bool,
        as_json: bool, address: str | None, machines: tuple[str, ...], split_repeats: bool, **given: Any) -> None:
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
    from llamaspec.studies import run as runs
    from llamaspec.views import report

    words = pasted(click.get_current_context())
    cmd = None
    if words is not None:  # `llamaspec run [OPTIONS] -- llama-server -m T.gguf -md D.gguf ...`
        if model is not None or drafts:
            raise LlamaspecError("-m/-md and a pasted command after -- together: the command names its own models",
                                 hint="give the models once: in the pasted command, or with -m/-md and no --")
        loaded, cmd, bin_dir = pasted_study(words, experiment_name=experiment_name,
                                            overrides=overrides(given, n_predict, timeout), prompt=prompt,
                                            prompt_file=prompt_file, name=study, repeats=repeats,
                                            bin_dir=bin_dir)
    else:
        loaded = experiment_or_study(experiment_name, model, drafts, study, settings=overrides(given, n_predict, timeout),
                                     prompt=prompt, prompt_file=prompt_file, repeats=repeats,
                                     command="run", several_drafts=False)
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
