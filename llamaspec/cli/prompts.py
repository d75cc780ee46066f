"""``llamaspec prompts``: prompt sets (say what is in one; `sweep` and `concurrency` measure them)."""

from __future__ import annotations

import click

from llamaspec.cli import main, moved
from llamaspec.cli.options import PROMPT_SOURCES, prompt_set_options


@main.group()
def prompts() -> None:
    """Prompt sets: what is in one. `llamaspec sweep NAME` (or -m/-md --prompts SOURCE) measures one
    as the workload study; `llamaspec concurrency` measures throughput against slots over one.

    \b
    Sources: a JSONL file (prompt, category, id, chat, history), spec-bench:PATH (Spec-Bench's
    question.jsonl), speed-bench:PATH (a SPEED-Bench .parquet or .jsonl file), alpaca
    (tatsu-lab/alpaca from the Hugging Face hub) or alpaca:PATH (a local copy).
    Shipped: experiments/prompts/llamaspec-mini.jsonl (48 prompts, 4 categories).

    Example: llamaspec prompts list llamaspec-mini --show
    """


@prompts.command("list")
@click.argument("source", metavar=PROMPT_SOURCES)
@prompt_set_options
@click.option("--show", is_flag=True, help="Print every prompt's id, category and first line.")
def prompts_list(source: str, limit: int | None, sample_seed: int | None, fmt: str | None, turns: str | None,
                 show: bool) -> None:
    """Load a prompt set and say what is in it: what the file says of itself, its categories, and
    each malformed, blank or repeated line skipped and each id given twice, with its line number.

    Example: llamaspec prompts list llamaspec-mini --limit 8 --sample-seed 1
    """
    from llamaspec.studies import prompts as loader

    got = loader.load(loader.parse_source(source, None, format=fmt, turns=turns, limit=limit, seed=sample_seed),
                      warn=False)  # said here, each once
    click.echo(f"{got.source.label}: {len(got.prompts)} prompts of {got.total}")
    if got.about is not None and got.about.label:
        click.echo(f"  about: {got.about.label}")
    for category in got.categories():
        click.echo(f"  {category:<20} {sum(p.category == category for p in got.prompts):>4}")
    for line in got.skipped:
        click.echo(f"  skipped {line}")
    for note in got.notes:
        click.echo(f"  {note}")
    if show:
        width = max([16, *(len(p.id) for p in got.prompts)])
        for p in got.prompts:
            first = p.prompt.strip().splitlines()[0][:70] if p.prompt.strip() else ""
            turns = f"(after {len(p.history)} turns) " if p.history else ""
            click.echo(f"{p.id:<{width}} {p.category:<14} {'chat' if p.chat else 'raw ':<5} {turns}{first}")


prompts.add_command(moved("prompts run", "`llamaspec sweep NAME` (the workload study: the experiment's cases weighed "
                                         "over its prompt set, or --prompts SOURCE; --fixed-grid measures every case "
                                         "on every prompt); throughput against slots: `llamaspec concurrency NAME "
                                         "--levels 1,2,4`"), "run")
