"""``llamaspec sweep``: an experiment over a grid of settings, resumable."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.cli.cluster import cluster_option
from llamaspec.cli.options import (
    PROMPT_SOURCES,
    check_deploy_option,
    check_prompt_file,
    common_options,
    model_options,
    overrides,
    prompt_set_options,
    sweep_options,
    workload_options,
)
from llamaspec.studies.budget import DEFAULT_MINUTES, MAX_DEFAULT_MINUTES, parse_budget

log = logging.getLogger("llamaspec")

@main.command()
@click.argument("experiment_name", metavar="[NAME|PATH]", required=False)
@model_options
@sweep_options
@click.option("--modes", default=None, metavar="LIST|none",
              help="Draft-free n-gram modes weighed beside the draft (default: every mode the program runs; "
                   "none: the draft alone).")
@click.option("--prompts", "-P", "source", default=None, metavar=PROMPT_SOURCES,
              help="The workload, a prompt set (JSONL: prompt, category, id, chat, history): with -m, one case per "
                   "prompt (default: the built-in workload); with NAME, instead of the experiment's prompts:.")
@prompt_set_options
@click.option("--plot/--no-plot", default=True, show_default=True, help="Write the plots when the study ends.")
@click.option("--budget", default=None, metavar="TIME|RUNS",
              help=f"The whole study's budget: 10m, 90s, 1h, or a number of speculative runs (default: {DEFAULT_MINUTES}m "
                   f"of measuring, grown up to {MAX_DEFAULT_MINUTES}m where this machine's pace times too few prompts; a "
                   "larger budget continues the same study).")
@click.option("--fixed-grid", is_flag=True,
              help="Measure every setup on every prompt in --repeats blocks each instead of the adaptive study.")
@check_deploy_option
@click.option("--warm", is_flag=True,
              help="A llama-server study as traffic: one long-lived server per setup, the prompts in turn, repeats "
                   "allowed (default: a mode that keeps state between requests is timed on a fresh server). Its "
                   "output and runs say warm; it is a study of its own, never pooled with the cold one.")
@workload_options
@common_options
@cluster_option
def sweep(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None, modes: str | None,
          source: str | None, limit: int | None, sample_seed: int | None, fmt: str | None, turns: str | None,
          plot: bool, budget: str | None, fixed_grid: bool, check_deploy: bool, warm: bool, whole_workload: bool, count_loops: bool,
          n_predict: int | None, prompt: str | None,
          prompt_file: Path | None, repeats: int | str | None, timeout: float | None, bin_dir: Path | None,
          accel: str, no_wait: bool, as_json: bool, address: str | None, **given: str | None) -> None:
    """One answer for a workload: which setup to run, measured against the target alone.

    The workload is the experiment's prompts (an experiment that names a prompt set, or NAME
    --prompts SOURCE: its cases are the setups weighed, each prompt of the set a case); with -m/-md
    and no -p/-f/--prompts, the built-in workload (54 chat prompts, 9 in each of code, multi-turn, summarization, rag, math and
    rewriting), served through the target's chat template as `llama-server --jinja` serves it.
    The setups are the draft at each draft length (default 1,2,3,4,6,8,12,16), each draft file
    given, and the draft-free n-gram modes the program runs (--modes); the target alone is the
    answer "no draft".

    What each run timed is shown and stored: the target alone's tokens after the first, and
    whether its output loops. A prompt whose target alone answers with fewer than 32 tokens after
    the first (or than half of -n, where that is fewer) is too short to time; one whose output
    repeats a span to the end loops (--count-loops counts it). Either is left out of the answer,
    named, and the study goes on with the rest.

    The prompts are a sample of your traffic: each setup's speedup is the geometric mean of its
    timed prompts' speedups per category (each the median of paired ratios), its 95 % interval
    over the spread between the timed prompts (Student's t at the prompts less one), so it speaks
    for other prompts of the same kinds (--whole-workload: the prompts are your whole workload,
    pairs resampled within them only). One decision rule (llamaspec.decision.decide) picks the
    setup: shown faster than the target alone (a chance of a gain of 92.5 % or more), the cheapest
    within 2 % of the best; under it, the same rule per category with 3 timed prompts or more.
    Undecided, it names the best bet, its chance of a loss, and the prompts that would settle it. It ends with the command that deploys the
    answer; a recommended llama-server command is first checked on llama-server (two servers
    started, the first prompt of each category sent in turn, progress on stderr; --no-check-deploy
    prints it marked unchecked) and taken out where the check's interval lies outside the answer's.

    Each prompt is measured in a block: the target alone, one run of each setup in a shuffled
    order, the target alone again; each run's speedup is over the two baselines around it. Adaptive,
    within one budget (--budget): the first 2 prompts get every
    draft-free mode and the longest draft lengths (their acceptance by draft position predicts
    the other lengths); a setup that trails the best on the prompts both were measured on stops,
    and of the n-gram modes the best two go on; the model's best length joins; then every remaining minute buys more prompts, category by category. After
    the first block it states its plan (how many prompts the budget times). The output says what
    ended it, the load beside it and the drift. --fixed-grid measures every setup on every prompt
    instead.

    Studies of -m/-md models generate 64 tokens a prompt with llama-speculative-simple unless
    -n/--program say otherwise (docs/method.md says why). Every run is stored as it is measured:
    rerun the same command to resume, or with a larger --budget to continue.

    With --cluster HOST:PORT (or $RAY_ADDRESS) every machine of the Ray cluster runs the study
    for itself, all at once (the best setup is the machine's; --budget is each machine's); the
    points are stored here, and each machine's answer is decided here from them.

    \b
    Example: llamaspec sweep -m target.gguf -md draft.gguf
    Example: llamaspec sweep -m target.gguf -md q4_0.gguf,q8_0.gguf --draft 2,4,8 -p "def fib(n):"
    Example: llamaspec sweep smollm2-quicksort --draft 1..16 --modes none --budget 10m
    Example: llamaspec sweep smollm2-quicksort --draft 1,2,4,8 --fixed-grid --repeats 5
    Example: llamaspec sweep smollm2-server-mini --limit 12 --sample-seed 1
    Example: llamaspec sweep smollm2-server-mini --limit 12 --warm
    """
    from llamaspec.cli.options import experiment_or_study, measuring, open_engine
    from llamaspec.store.results import Store
    from llamaspec.studies import adhoc, grid
    from llamaspec.studies import study as studies

    if given.get("spec_type") is not None:  # one option an axis: the draft-free modes are --modes
        raise click.UsageError(f"--spec-type {given['spec_type']}: sweep weighs the draft-free modes as --modes LIST "
                               "(and the draft at --draft lengths, with -md): use --modes")
    axes = {axis: grid.parse_values(axis, text) for axis, text in given.items() if text is not None}
    methods = None  # an experiment over a prompt set: its cases are the setups
    if model is not None:  # a study's one-valued settings are its settings (and its name's), not dimensions
        fixed = {axis: values[0] for axis, values in axes.items()
                 if len(values) == 1 and axis not in ("draft_max", "draft_variant")}
        axes = {axis: values for axis, values in axes.items() if axis not in fixed}
        settings = adhoc.workload_settings(overrides(fixed, n_predict, timeout))
        loaded = experiment_or_study(experiment_name, model, drafts, study, settings=settings,
                                     prompt=prompt, prompt_file=prompt_file, repeats=repeats, command="sweep",
                                     workload=load_workload(source, limit, sample_seed, fmt, turns))
    else:
        loaded = experiment_or_study(experiment_name, None, drafts, study, command="sweep")
        if source is not None or loaded.prompts is not None:
            loaded, methods = over_prompt_set(loaded, axes, modes, source, limit=limit, seed=sample_seed, format=fmt,
                                              turns=turns)
            axes = {}
        elif any(v is not None for v in (limit, sample_seed, fmt, turns)):
            raise click.UsageError("--limit, --sample-seed, --format and --turns are for a prompt set (--prompts)")
    exp = loaded.with_overrides(overrides({}, n_predict, timeout), repeats, prompt, check_prompt_file(prompt_file))
    compared = adhoc.draft_axis(exp)
    if compared and "draft_variant" not in axes:
        axes["draft_variant"] = compared
    if methods is None and any(c.draft is not None for c in exp.cases) and "draft_max" not in axes:
        axes = {**axes, "draft_max": studies.DEFAULT_LENGTHS}
    spend = parse_budget(budget) if budget is not None else None
    if spend is not None and fixed_grid:
        raise click.UsageError("--budget is for the adaptive study: drop --fixed-grid or --budget")
    asked = None if modes is None else () if modes.strip().lower() == "none" else grid.parse_values("spec_type", modes)
    if address:
        from llamaspec.cli.cluster import study_on_cluster

        if warm:
            raise click.UsageError("--warm is for a study on this machine: drop --cluster or --warm")
        if bin_dir is not None:
            raise click.UsageError("with --cluster every machine runs the study on its own build: drop --bin-dir")
        study_on_cluster(exp, address, axes=axes, modes=asked, setups=methods, budget=spend, fixed_grid=fixed_grid,
                         over_prompts=not whole_workload, count_loops=count_loops, accel=accel, as_json=as_json)
        return
    engine = open_engine(exp, accel, bin_dir, warm=warm)
    setups = methods or studies.sweep_setups(exp, engine, axes, asked)
    store = Store.open()
    try:
        with measuring(f"llamaspec sweep {exp.name}", no_wait):
            result = studies.run_study(exp, setups, engine, store, spend, fixed_grid=fixed_grid,
                                       over_prompts=not whole_workload, count_loops=count_loops)
    finally:
        engine.close()
    echo_study(result, engine, exp, store, plot, as_json, check_deploy=check_deploy, no_wait=no_wait)


def over_prompt_set(exp: Any, axes: dict[str, Any], modes: str | None, source: str | None,
                    **read: Any) -> tuple[Any, Any]:
    """An experiment over its prompt set (or ``--prompts``): (the study's experiment, its cases as
    the setups). A setting given once applies to every case, as -n does; a list, or --modes, is
    refused: the cases are what is weighed."""
    from llamaspec.studies import methods
    from llamaspec.studies import prompts as loader

    varied = [a for a, values in axes.items() if len(values) > 1 or a in ("draft_max", "draft_variant")]
    if varied or modes is not None:
        raise click.UsageError(f"{exp.name} weighs its cases over its prompt set: give one value of a setting "
                               f"(it applies to every case), drop {'--modes' if modes is not None else 'the lists'}, "
                               "or study the models with -m TARGET -md DRAFT --prompts ...")
    exp = exp.with_overrides(overrides({a: values[0] for a, values in axes.items()}))
    return methods.study_of_set(exp, loader.load(loader.source_of(exp, source, **read)))


def load_workload(source: str | None, limit: int | None, seed: int | None, fmt: str | None = None,
                  turns: str | None = None) -> Any:
    """``--prompts`` as a workload (None without it); its malformed lines are said, by line."""
    if source is None:
        if any(v is not None for v in (limit, seed, fmt, turns)):
            raise click.UsageError("--limit, --sample-seed, --format and --turns are for --prompts")
        return None
    from llamaspec.studies import prompts as loader

    return loader.load(loader.parse_source(source, None, limit=limit, seed=seed, format=fmt, turns=turns))


def echo_study(result: Any, engine: Any, exp: Any, store: Any, plot: bool, as_json: bool, *,
               check_deploy: bool = True, no_wait: bool = False, command: str = "sweep") -> None:
    """A study's table, its one decision and the command that deploys it (a recommended llama-server
    command checked on llama-server first, :func:`deploy_checked`; without ``check_deploy`` marked
    unchecked)."""
    from llamaspec.studies import study as studies
    from llamaspec.views import analysis

    plots = analysis.plot_study(store, result.as_dict()) if plot else []
    answer = studies.deployment(result, engine, exp, store)
    checked_text, checked_dict = None, None
    if answer is not None:
        answer, checked_text, checked_dict = deploy_checked(result, answer, engine, exp, store, no_wait, check_deploy, command)
    if as_json:
        click.echo(json.dumps({**result.as_dict(), "plots": [str(p) for p in plots],
                               "deploy": answer.to_dict() if answer else None, "deploy_check": checked_dict},
                              indent=2, default=str))
    else:
        click.echo(result.render() + plots_text(plots) + (f"\n{answer.render()}" if answer else "")
                   + (f"\n{checked_text}" if checked_text else ""))
    if result.decision.verdict == "nothing":
        raise LlamaspecError(*nothing_to_recommend(result.decision))


def deploy_checked(result: Any, answer: Any, engine: Any, exp: Any, store: Any, no_wait: bool,
                   check: bool = True, command: str = "sweep") -> tuple[Any, str | None, dict[str, Any] | None]:
    """The answer after its deploy check (llamacpp.deploy_check), the check's line and its JSON:
    the first prompt of each category, sent to the answer's llama-server and the target alone's.
    Not ``check``: a recommended llama-server command is marked unchecked, with how to check it."""
    from llamaspec.base import paths
    from llamaspec.cli.options import measuring
    from llamaspec.studies import deploy

    chosen = result.decision.chosen
    run_id = result.run_of(chosen.key) if result.decision.verdict == "recommend" and chosen is not None else None
    if run_id is None or answer.server_command() is None:
        return answer, None, None
    if not check:
        return replace(answer, notes=(*answer.notes, "the llama-server command is unchecked (--no-check-deploy): the "
                                      f"study's figure was measured with engine {answer.engine}; drop --no-check-deploy to check "
                                      "it on llama-server")), None, None
    from llamaspec.registry import engines

    run = store.run(run_id)
    case = deploy.case_of_run(exp, run)
    prompts = deploy.client_prompts(exp)
    s = case.settings.with_defaults()
    with measuring(f"llamaspec {command} {exp.name}: deploy check", no_wait):
        answer, checked = engines.check_deployment(
            answer.engine, answer, deploy.for_run(engine, exp, run, speculative=False), prompts, chosen.measured,
            s.n_predict or 64, paths.runs_dir() / "deploy-check", seed=s.seed)
    if checked is None:
        return answer, None, None
    return answer, checked.render(chosen.measured), checked.to_dict(chosen.measured)


def plots_text(plots: Sequence[Path]) -> str:
    """The figures a study wrote, short: the workload's each by its path, the measured prompts'
    draft-length figures by their folder (`llamaspec plot NAME` lists every one)."""
    if not plots:
        return ""
    folder = min((p.parent for p in plots), key=lambda d: len(d.parts))  # the study's; each prompt's below it
    per = [p for p in plots if p.parent != folder]
    out = "".join(f"\n  plot: {p}" for p in plots if p.parent == folder)
    if per:
        prompts = {p.parent.name for p in per}
        out += (f"\n  plots of each measured prompt's draft lengths ({', '.join(sorted({p.stem for p in per}))}; "
                f"{len(prompts)} prompt{'s' if len(prompts) != 1 else ''}): {folder}/PROMPT/")
    return out


def nothing_to_recommend(d: Any) -> tuple[str, str]:
    """The error a study that recommends nothing ends with, and a hint naming what was left out."""
    left = d.left_out
    excluded = [s for s in d.setups if s.excluded]
    if not d.timed:
        why = (f"nothing to recommend: none of the {len(left)} measured prompts could be timed"
               if left else "nothing to recommend: no prompt was measured")
    else:
        why = "nothing to recommend: no setup finished on the timed prompts with an output equal to the target alone's"
    named = ([f"left out {', '.join(f'{f.prompt} ({f.left_out})' for f in left[:3])}"
              + (f" and {len(left) - 3} more" if len(left) > 3 else "")] if left else [])
    named += [f"excluded {', '.join(f'{s.label} ({s.excluded})' for s in excluded[:3])}"] if excluded else []
    hint = "; ".join(named) if named else "no setup was measured on every category's prompts"
    return why, (hint + "; prompts that ask for a longer answer, a larger -n, or --count-loops where your traffic loops; "
                 "`llamaspec results show RUN` has each run's log")
