"""``llamaspec sweep``: an experiment over a grid of settings, resumable."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import click

from llamaspec.cli import main
from llamaspec.cli.cluster import cluster_option
from llamaspec.cli.options import (
    check_prompt_file,
    common_options,
    model_options,
    overrides,
    setting_options,
    sweep_options,
)
from llamaspec.errors import LlamaspecError

log = logging.getLogger("llamaspec")

@main.command()
@click.argument("experiment_name", metavar="[NAME|PATH]", required=False)
@model_options
@sweep_options
@click.option("--shared-baseline", is_flag=True,
              help="Cost saver: measure one baseline per target setting and share it across points (speedups are "
                   "then not paired, and the output says so).")
@click.option("--plot/--no-plot", default=True, show_default=True, help="Write the plots when the sweep ends.")
@click.option("--budget", default=None, metavar="TIME|PAIRS",
              help="Adaptive sweeps: stop after this much (10m, 90s, 1h, or a number of pairs; default: the pairs "
                   "of the fixed grid at --repeats).")
@click.option("--fixed-grid", is_flag=True,
              help="Measure every point with --repeats pairs (in passes: a pair at every point, the order rotating) "
                   "instead of spending pairs where the decision is uncertain.")
@common_options
@cluster_option
def sweep(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None, shared_baseline: bool, plot: bool, budget: str | None, fixed_grid: bool,
          n_predict: int | None, prompt: str | None,
          prompt_file: Path | None, repeats: int | str | None, timeout: float | None, bin_dir: Path | None,
          accel: str, no_wait: bool, as_json: bool, address: str | None, **given: str | None) -> None:
    """Sweep settings (as a grid); recommend a setting shown faster than the target alone.

    The decision (llamaspec.decide) ranks the points with the speedup model fitted to all of
    them, takes a cheaper point only within 2 % of the best, and says how sure it is; when no
    point is shown faster it says "no draft" or "undecided" and what to measure next.

    A sweep over draft lengths is adaptive: one pair at every length (--repeats N: N pairs), then
    more pairs where the decision is uncertain (its contenders, a length the model favours), until it is settled (the recommended setting's
    interval within +-5 % and its lead established) or the budget is spent; the output says which
    ended it. --fixed-grid measures every point with --repeats pairs instead (any grid of settings),
    in passes: one pair at every point per pass, so the machine's drift falls on every point alike.

    Each point is measured next to its own baseline (pairs inside the point). Rerun the same
    command to resume: every stored pair is kept and finished points are not measured again. Every sweepable setting is an
    option taking a list: --draft 1..16, --p-min 0.5,0.9 --program speculative-simple, ...

    Your own models instead of NAME: -m TARGET -md DRAFT (a GGUF file, USER/REPO[:QUANT] as
    llama.cpp's -hf, or a catalog NAME[:VARIANT]); several drafts (-md a.gguf,b.gguf) are one more
    dimension, the smaller file counting as the cheaper setting. A setting given one value is the
    study's setting, part of its name (printed; --name to choose one). Without -p/-f, the built-in
    mixed prompts (code, chat, reasoning, summarization) are each swept.

    With --cluster HOST:PORT (or $RAY_ADDRESS) the points are spread over the Ray cluster's
    machines; each point is paired on its machine, and the best point is named per machine.

    \b
    Example: llamaspec sweep smollm2-quicksort --draft 1..16
    Example: llamaspec sweep -m target.gguf -md draft.gguf --draft 1,2,4,8
    Example: llamaspec sweep -m target.gguf -md q4_0.gguf,q8_0.gguf --draft 2,4,8 -p "def fib(n):"
    Example: llamaspec sweep smollm2-quicksort --draft 1..16 --budget 10m
    Example: llamaspec sweep smollm2-quicksort --draft 1,2,4,8 --cluster 10.0.0.5:6379
    """
    from llamaspec import adhoc, analysis
    from llamaspec import sweep as sweeps
    from llamaspec.cli.options import experiment_or_study, measuring, open_engine
    from llamaspec.results import Store

    axes = {axis: sweeps.parse_values(axis, text) for axis, text in given.items() if text is not None}
    if model is not None:  # a study's one-valued settings are its settings (and its name's), not dimensions
        fixed = {axis: values[0] for axis, values in axes.items()
                 if len(values) == 1 and axis not in ("draft_max", "draft_variant")}
        axes = {axis: values for axis, values in axes.items() if axis not in fixed}
        loaded = experiment_or_study(experiment_name, model, drafts, study, settings=overrides(fixed, n_predict, timeout),
                                     prompt=prompt, prompt_file=prompt_file, repeats=repeats, command="sweep")
    else:
        loaded = experiment_or_study(experiment_name, None, drafts, study, command="sweep")
    compared = adhoc.draft_axis(loaded)
    if compared and "draft_variant" not in axes:
        axes["draft_variant"] = compared
    adaptive = not fixed_grid and not shared_baseline and sweeps.adaptive_applies(axes)
    limit = sweeps.parse_budget(budget) if budget is not None else None
    if limit is not None and not adaptive:
        raise click.UsageError("--budget is for adaptive sweeps (a grid of --draft lengths alone, without "
                               "--fixed-grid, --shared-baseline or several drafts)")
    exp = loaded.with_overrides(overrides({}, n_predict, timeout), repeats, prompt, check_prompt_file(prompt_file))
    if address:
        from llamaspec.cli.cluster import run_experiment_on_cluster

        if shared_baseline or bin_dir is not None:
            raise click.UsageError("with --cluster every point is paired on its own machine with that machine's build: "
                                   "drop --shared-baseline and --bin-dir")
        run_experiment_on_cluster(exp, address, accel=accel, axes=axes, as_json=as_json)
        return
    from llamaspec.llamacpp import rpc as rpcs

    engine = open_engine(exp.engine, accel, bin_dir, rpc=rpcs.needed(exp))
    store = Store.open()
    stops: list[Any] = []
    try:
        with measuring(f"llamaspec sweep {exp.name}", no_wait):
            if adaptive:
                first = repeats if isinstance(repeats, int) else sweeps.FIRST_PAIRS
                limit = limit or sweeps.default_budget(exp, list(next(iter(axes.values()))), first)
                _refuse_small_budget(limit, axes, first)
                done = sweeps.run_adaptive_sweep(exp, axes, engine, store, limit, first_pairs=first)
                results, stops = [r for r, _a in done], [a for _r, a in done]
            else:
                results = sweeps.run_sweep(exp, axes, engine, store, shared_baseline=shared_baseline)
    finally:
        engine.close()
    reports = [analysis.sweep_report(store, r.sweep_id, plot=plot) for r in results]
    deploys = [sweep_deployment(r, engine, exp, store) for r in reports]
    ends = stops or [None] * len(reports)
    if as_json:
        click.echo(json.dumps([{**r.as_dict(), "adaptive": dataclasses.asdict(a) if a else None,
                                "deploy": d.to_dict() if d else None} for r, d, a in zip(reports, deploys, ends, strict=True)],
                              indent=2, default=str))
    else:
        click.echo("\n\n".join((f"{a.text()}\n" if a else "") + r.render() + (f"\n{d.render()}" if d else "")
                                for r, d, a in zip(reports, deploys, ends, strict=True)))
    if all(r.decision().verdict == "nothing" for r in reports):
        raise LlamaspecError("nothing to recommend: no point finished with an output equal to the target alone's",
                             hint="see the status column above; `llamaspec results show RUN` has each point's log")


def _refuse_small_budget(limit: Any, axes: dict[str, Any], first: int) -> None:
    """A pairs budget that cannot pay for the first pass is refused before anything is measured."""
    from llamaspec import sweep as sweeps

    lengths = sweeps.first_lengths(next(iter(axes.values())))
    if limit.pairs is not None and limit.pairs < first * len(lengths):
        raise LlamaspecError(f"--budget {limit.pairs} pairs is too small: the first pass alone measures "
                             f"{first * len(lengths)} ({first} pair{'s' if first != 1 else ''} at draft "
                             f"{', '.join(map(str, lengths))})",
                             hint=f"give at least --budget {first * len(lengths)}, or a time such as --budget 10m")


def sweep_deployment(report: Any, engine: Any, exp: Any, store: Any) -> Any:
    """The deploy command for a sweep's answer: the recommended point's setting, or the target
    alone when the answer is "no draft"; None when it is undecided (measure first) or nothing finished."""
    from llamaspec import deploy

    decision = report.decision()
    found = report.row(decision.chosen.key) if decision.chosen is not None else None
    if found is None or decision.verdict not in ("recommend", "no draft"):
        return None
    return deploy.for_run(engine, exp, store.run(found[1].run_id), speculative=decision.verdict == "recommend")


@main.command()
@click.argument("experiment_name", metavar="[NAME|PATH]", required=False)
@model_options
@setting_options
@click.option("--variants", default=None, metavar="LIST", help="Draft variants to consider (default: the catalog's).")
@click.option("--modes", default=None, metavar="LIST", help="Draft-free n-gram modes to try (default: all the engine has).")
@click.option("--budget", default=None, metavar="TIME|PAIRS",
              help="Stop settling the decision after this much (10m, 90s, 1h, or a number of pairs in all; default: "
                   "twice the search's pairs at --repeats).")
@common_options
@cluster_option
def tune(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None, variants: str | None, modes: str | None, budget: str | None, n_predict: int | None,
         prompt: str | None,
         prompt_file: Path | None, repeats: int | str | None, timeout: float | None, bin_dir: Path | None, accel: str,
         no_wait: bool, as_json: bool, address: str | None, **given: Any) -> None:
    """Search draft length, draft variant and draft-free n-gram modes; recommend by the decision rule.

    The speedup model picks which draft lengths to measure and skips variants that cannot win.
    Then more pairs go where the decision is unsure (the chosen configuration, its rivals) until
    it is settled or the budget is spent; the output says which ended it. Each point is paired
    with its own baseline. Resumable like a sweep: every stored pair is kept.

    Your own models instead of NAME: -m TARGET -md DRAFT (a GGUF file, USER/REPO[:QUANT] as
    llama.cpp's -hf, or a catalog NAME[:VARIANT]); several drafts (-md a.gguf,b.gguf) are the
    variants searched, the smaller file counting as the cheaper. Setting flags set the study's
    settings (its name says them; printed, or --name).

    With --cluster HOST:PORT (or $RAY_ADDRESS) every machine of the Ray cluster tunes for itself
    (the best settings are the machine's), all at once; the results are stored here, per machine.

    \b
    Example: llamaspec tune smollm2-quicksort
    Example: llamaspec tune -m target.gguf -md q4_0.gguf,q8_0.gguf -p "def fib(n):"
    Example: llamaspec tune smollm2-quicksort --cluster 10.0.0.5:6379
    """
    from llamaspec import adhoc
    from llamaspec import tune as tuner
    from llamaspec.cli.options import experiment_or_study, measuring, open_engine
    from llamaspec.results import Store
    from llamaspec.summary import Summary
    from llamaspec.sweep import parse_budget, parse_values

    limit = parse_budget(budget) if budget is not None else None
    if model is None and any(v is not None for v in given.values()):
        raise click.UsageError("setting flags are for a study of -m/-md models; an experiment names its own settings "
                               "(or sweep them: `llamaspec sweep NAME --draft 1..16`)")
    exp = experiment_or_study(experiment_name, model, drafts, study, settings=overrides(given, n_predict, timeout),
                              prompt=prompt, prompt_file=prompt_file, repeats=repeats, command="tune")
    exp = exp.with_overrides(overrides({}, n_predict, timeout), repeats, prompt, check_prompt_file(prompt_file))
    # the drafts a study compares are the variants searched (--variants still wins)
    chosen = parse_values("draft_variant", variants) if variants else (adhoc.draft_axis(exp) or None)
    if address:
        from llamaspec.cli.cluster import tune_on_cluster

        if limit is not None:
            raise click.UsageError("--budget is for a tune on this machine; each cluster machine settles with the default")
        if bin_dir is not None:
            raise click.UsageError("--bin-dir names binaries on this machine; cluster machines use their own builds")
        tune_on_cluster(exp, address, overrides=overrides({}, n_predict, timeout).to_dict(), repeats=repeats,
                        prompt=prompt if prompt is not None else (Path(prompt_file).read_text() if prompt_file else None),
                        variants=chosen,
                        modes=parse_values("spec_type", modes) if modes else None, accel=accel, as_json=as_json)
        return
    from llamaspec.llamacpp import rpc as rpcs

    engine = open_engine(exp.engine, accel, bin_dir, rpc=rpcs.needed(exp))

    def on_point(config, row) -> None:
        s = Summary.from_dict(row.get("summary"))
        log.info("  %-34s %s", config.label, f"{s.speedup.text(suffix='x')} [{row.get('status')}]" if s.speedup
                 else f"{row.get('status')}: {row.get('error')}")

    from llamaspec import deploy

    try:
        with measuring(f"llamaspec tune {exp.name}", no_wait):
            results = tuner.tune(exp, engine, Store.open(),
                                 chosen,
                                 parse_values("spec_type", modes) if modes else None, on_point, budget=limit)
    finally:
        engine.close()
    # the recommended configuration's command, the target alone when the answer is "no draft",
    # nothing while it is undecided (the output says what to measure first)
    deploys = [deploy.for_run(engine, exp, r.recommended[1]) if r.recommended
               else deploy.for_run(engine, exp, r.best[1], speculative=False)
               if r.best and r.decision.verdict == "no draft" else None for r in results]
    if as_json:
        click.echo(json.dumps([{**r.as_dict(), "deploy": d.to_dict() if d else None} for r, d in zip(results, deploys, strict=True)],
                              indent=2))
    else:
        click.echo("\n\n".join(r.render() + (f"\n{d.render()}" if d else "") for r, d in zip(results, deploys, strict=True)))
