"""``llamaspec plot``: a stored study's or sweep's figures."""

from __future__ import annotations

import json

import click

from llamaspec.cli import main


@main.command()
@click.argument("target", metavar="NAME|STUDY_ID|SWEEP_ID|RUN_ID")
@click.option("--json", "as_json", is_flag=True, help="Print the answer and the figures as JSON.")
def plot(target: str, as_json: bool) -> None:
    """Plot a study, a sweep, an experiment's history, or one run, and print what it shows.

    A study (its name as `sweep` printed it, or its id) is shown as it ended: the study's own
    answer, the same lines the command printed, then its figures (each setup over the workload,
    each prompt's speed, acceptance and speedup against draft length) and each measured prompt's
    points under it. A view never decides again.

    Example: llamaspec plot smollm2-quicksort
    """
    from llamaspec.base import paths
    from llamaspec.store.results import Store
    from llamaspec.views import analysis
    from llamaspec.views import report as reports

    store = Store.open()
    answer = None if target.isdigit() else reports.stored_answer(store, target)
    if answer is not None:
        from llamaspec.studies import study as studies

        data = (answer.get("summary") or {}).get("study") or {}
        figures = analysis.plot_study(store, data)
        measured = [f["prompt"] for f in data.get("facts") or [] if f.get("timed_tokens") is not None]
        prompts = [analysis.sweep_report(store, studies.prompt_group(data["study_id"], p), plot=False) for p in measured
                   if store.runs(group_id=studies.prompt_group(data["study_id"], p), limit=1)]
        if as_json:
            click.echo(json.dumps({"answer": data, "text": reports.answer_text(answer), "plots": [str(p) for p in figures],
                                   "prompts": [r.as_dict() for r in prompts]}, indent=2, default=str))
            return
        click.echo(reports.answer_text(answer))
        click.echo("".join(f"\n  plot: {p}" for p in figures))
        for rep in prompts:
            click.echo(f"\n{rep.render()}")
        return
    if target.isdigit():
        run = store.run(int(target))
        rep = analysis.report_for_runs([run], f"run-{target}", [], True, paths.plots_dir() / f"run-{target}")
    elif store.runs(group_id=target, limit=1):
        rep = analysis.sweep_report(store, target)
    else:
        rep = analysis.experiment_report(store, target)
    click.echo(json.dumps(rep.as_dict(), indent=2, default=str) if as_json else rep.render())
