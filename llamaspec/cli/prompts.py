"""``llamaspec prompts``: prompt sets (list one; run an experiment over one, on llama-server)."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from llamaspec.base.progress import duration
from llamaspec.cli import main
from llamaspec.cli.cluster import cluster_option
from llamaspec.cli.options import PROMPT_SOURCES, EngineSettingsCommand, SettingValue, model_options

log = logging.getLogger("llamaspec")


def _levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        levels = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected a comma-separated list of slot counts, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter("slot counts must be at least 1")
    return levels


SET_OPTIONS = [
    click.option("--limit", type=click.IntRange(min=1), default=None, help="Keep N prompts (the first N, or a sample with --seed)."),
    click.option("--seed", "sample_seed", type=int, default=None, help="Sample the --limit prompts at random with this seed."),
    click.option("--format", "fmt", type=click.Choice(["chat", "raw", "alpaca"]), default=None,
                 help="chat: through the model's chat template (default); raw: as text; alpaca: Alpaca's prompt template."),
    click.option("--turns", type=click.Choice(["first", "all"]), default=None, help="Spec-Bench, SPEED-Bench: first turn only, or every turn."),
]


def _set_options(func: Any) -> Any:
    for option in reversed(SET_OPTIONS):
        func = option(func)
    return func


@main.group()
def prompts() -> None:
    """Prompt sets: run an experiment over many prompts on llama-server, per category.

    \b
    Sources: a JSONL file (prompt, category, id, chat, history), spec-bench:PATH (Spec-Bench's
    question.jsonl), speed-bench:PATH (a SPEED-Bench .parquet or .jsonl file), alpaca
    (tatsu-lab/alpaca from the Hugging Face hub) or alpaca:PATH (a local copy).
    Shipped: experiments/prompts/llamaspec-mini.jsonl (48 prompts, 4 categories).

    Example: llamaspec prompts run smollm2-server-mini --limit 12 --seed 1
    """


@prompts.command("list")
@click.argument("source", metavar=PROMPT_SOURCES)
@_set_options
@click.option("--show", is_flag=True, help="Print every prompt's id, category and first line.")
def prompts_list(source: str, limit: int | None, sample_seed: int | None, fmt: str | None, turns: str | None,
                 show: bool) -> None:
    """Load a prompt set and say what is in it: what the file says of itself, its categories, and
    each malformed, blank or repeated line skipped and each id given twice, with its line number.

    Example: llamaspec prompts list llamaspec-mini --limit 8 --seed 1
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


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the run like Ctrl-C: servers stopped, finished prompts kept."""
    def handler(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _concurrency_progress(event: str, data: dict[str, Any]) -> None:
    if event == "batch":
        b = data["batch"]
        eta = data.get("eta")
        eta_text = f", ETA {duration(eta)}" if eta is not None else ""
        failed = f", {b['failed']} FAILED" if b["failed"] else ""
        log.info("%s, %d slots, pair %d, %s: %s aggregate t/s over %.1f s%s%s", data["case"], data["parallel"],
                 b["repeat"] + 1, b["mode"], f"{b['aggregate_tps']:.1f}" if b["aggregate_tps"] else "-",
                 b["wall_seconds"], failed, eta_text)


def _server_settings() -> frozenset[str]:
    """The settings llama-server honours, from its flag table (imported when `prompts run` is used)."""
    from llamaspec.registry import engines

    return engines.honoured("llama-server")


# The setting options are run's, for every sweepable setting llama-server honours (its flag table
# says which): a new one is a field in llamaspec.measure.settings and a row in llamaspec/llamacpp/flags.py.
# --parallel is the one taken in another form here: a list of concurrency levels.
@prompts.command("run", cls=EngineSettingsCommand, honoured=_server_settings, skip=("parallel",), after="n_predict")
@click.argument("experiment_name", metavar="[NAME|PATH]", required=False)
@model_options
@click.option("--prompts", "-P", "source", default=None, metavar=PROMPT_SOURCES,
              help="The prompt set (default: the experiment's prompts:).")
@_set_options
@click.option("--n-predict", "-n", type=SettingValue("n_predict", int), default=None, help="Tokens to generate per prompt.")
@click.option("--repeats", "-r", type=click.IntRange(min=1), default=None,
              help="Measure each prompt N times (ABBA); with --parallel, N pairs of batches per level (default 3).")
@click.option("--timeout", type=SettingValue("timeout", float), default=None, help="Seconds per request.")
@click.option("--parallel", "parallel", default=None, metavar="N[,N...]",
              help="Concurrency instead: N slots and N clients per level, e.g. 1,2,4; paired baseline and "
                   "speculative batches, --repeats pairs per level.")
@click.option("--plot", "plot_dir", type=click.Path(path_type=Path), default=None, help="Write plots to this folder.")
@click.option("--bin-dir", type=click.Path(path_type=Path), default=None, envvar="LLAMASPEC_BIN_DIR",
              help="Use these llama.cpp binaries instead of llamaspec's build.")
@click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto",
              show_default=True, help="Which cached llama.cpp build to use.")
@click.option("--json", "as_json", is_flag=True, help="Print set-level and per-category figures as JSON.")
@click.option("--no-wait", is_flag=True, help="Fail at once if another measurement holds this machine.")
@cluster_option
def prompts_run(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None,
                source: str | None, limit: int | None, sample_seed: int | None, fmt: str | None,
                turns: str | None, n_predict: int | None, repeats: int | None, timeout: float | None,
                parallel: str | None, plot_dir: Path | None, bin_dir: Path | None, accel: str, as_json: bool,
                no_wait: bool = False, address: str | None = None, **given: Any) -> None:
    """Run every case of an experiment over a prompt set on llama-server (models loaded once).

    Per prompt, baseline and speculative are measured back to back; each prompt is stored as it
    finishes, so a rerun of the same command skips finished prompts. Prints total-token, mean and
    geometric-mean speedups with 95 % intervals, per category, and a recommended method per category:
    decode speed (prompt left out) and end to end (prompt processing included: the speculative
    server processes the prompt with its draft too), each with its own recommendation.

    With --cluster HOST:PORT (or $RAY_ADDRESS) the prompts are spread over the Ray cluster's
    machines (one item per case and prompt, each paired on its machine); figures per machine.

    Your own models instead of NAME: -m TARGET -md DRAFT (a GGUF file, USER/REPO[:QUANT] as
    llama.cpp's -hf, or a catalog NAME[:VARIANT]); without --prompts, the built-in workload (54 chat
    prompts: code, multi-turn, summarization, rag, math, rewriting). The study's name is printed
    (--name to choose one).

    \b
    Example: llamaspec prompts run smollm2-server-mini --limit 12 -n 64
    Example: llamaspec prompts run -m target.gguf -md draft.gguf --prompts my-prompts.jsonl -d 8
    Example: llamaspec prompts run smollm2-server-mini --limit 16 -t 1 --cluster 10.0.0.5:6379
    """
    from llamaspec.cli.options import experiment_or_study, overrides
    from llamaspec.studies import adhoc

    exp = experiment_or_study(experiment_name, model, drafts, study, settings=overrides(given, n_predict, timeout),
                              prompts=source if model is None or source is not None else str(adhoc.builtin_prompts()),
                              repeats=repeats, command="prompts run", several_drafts=False)
    run_prompt_set(exp, source, given=given, n_predict=n_predict, timeout=timeout, repeats=repeats,
                   limit=limit, sample_seed=sample_seed, fmt=fmt, turns=turns, levels=_levels(parallel),
                   plot_dir=plot_dir, bin_dir=bin_dir, accel=accel, as_json=as_json, address=address, no_wait=no_wait)


def run_prompt_set(experiment_name: Any, source: str | None, *, given: dict[str, Any], n_predict: int | None = None,
                   timeout: float | None = None, repeats: int | None = None, limit: int | None = None,
                   sample_seed: int | None = None, fmt: str | None = None, turns: str | None = None,
                   levels: list[int] | None = None, plot_dir: Path | None = None, bin_dir: Path | None = None,
                   accel: str = "auto", as_json: bool = False, address: str | None = None, no_wait: bool = False) -> None:
    """The whole of ``prompts run``, also behind ``llamaspec run NAME --prompts FILE``: one
    function, so that both commands take the same options to the same place.

    ``experiment_name``: an experiment's NAME|PATH, or an Experiment (a study of models given with
    -m); ``given``: settings from the command line (None: the experiment's); ``levels``:
    concurrency levels (``--parallel``), or None for the per-prompt run."""
    from llamaspec import promptset
    from llamaspec.base import host
    from llamaspec.cli.options import overrides
    from llamaspec.store.results import Store
    from llamaspec.studies import experiment
    from llamaspec.studies import prompts as loader

    exp = experiment.load(experiment_name) if isinstance(experiment_name, str) else experiment_name
    if exp.engine == "transformers":
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"experiment {exp.name} uses the transformers engine; prompt sets run on llama-server",
                             hint="run a llama.cpp or llama-server experiment over the prompt set, or run this one "
                                  "without --prompts")
    if exp.engine != "llama-server":  # the same build and GGUF models, kept loaded: said, not silent
        log.warning("prompt sets run on llama-server: experiment %s (engine %s) is measured there, with its models "
                    "and settings", exp.name, exp.engine)
    settings = overrides(given, n_predict, timeout)
    exp = exp.with_overrides(settings, repeats)
    if address:
        from llamaspec.cli.cluster import run_prompt_set_on_cluster

        if levels or plot_dir is not None or bin_dir is not None:
            raise click.UsageError("--parallel, --plot and --bin-dir are for one machine; drop them with --cluster")
        run_prompt_set_on_cluster(exp, source, address, limit=limit, sample_seed=sample_seed, fmt=fmt, turns=turns,
                                  repeats=exp.repeats if isinstance(exp.repeats, int) else 3, accel=accel, as_json=as_json)
        return
    src = promptset.source_of(exp, source, format=fmt, turns=turns, limit=limit, seed=sample_seed)
    got = loader.load(src)
    log.info("%s: %d prompts in %d categories", src.label, len(got.prompts), len(got.categories()))
    from llamaspec.cli.options import measuring, open_engine

    backend = open_engine(exp, accel, bin_dir, engine="llama-server")
    try:
        with measuring(f"llamaspec prompts run {exp.name}", no_wait), _terminate_as_interrupt():
            if levels:
                rows = promptset.run_concurrency(exp, got, backend, levels, on_event=_concurrency_progress,
                                                 repeats=repeats if repeats is not None else promptset.CONCURRENCY_REPEATS)
                click.echo(json.dumps(rows, indent=2, default=str) if as_json else promptset.render_concurrency(rows))
                if plot_dir is not None:
                    for path in promptset.plot_concurrency(rows, plot_dir, exp.name):
                        log.info("wrote %s", path)
                return
            result = promptset.run_set(exp, got, backend, Store.open(), repeats=exp.repeats if isinstance(exp.repeats, int) else 3,
                                       hardware=host.hardware(),
                                       on_event=promptset.progress_printer())
    finally:
        backend.close()
    summary = promptset.set_summary(result)
    click.echo(promptset.as_json(summary) if as_json else promptset.render(summary))
    if plot_dir is not None:
        for path in promptset.plot_set(summary, plot_dir):
            log.info("wrote %s", path)
    if not result.complete:
        from llamaspec.base.errors import LlamaspecError

        stopped = next(c for c in result.cases if c.not_run)
        raise LlamaspecError(f"{stopped.case.case}: stopped after {stopped.error}; {len(stopped.not_run)} prompts not run",
                             hint="rerun the same command: finished prompts are kept and skipped")
