"""``llamaspec parse``: read a llama.cpp log you made yourself and print what it says, as JSON."""

from __future__ import annotations

from pathlib import Path

import click

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise LlamaspecError(f"cannot read {path}: {exc.strerror or exc}", hint="check the file name") from exc


@main.command("parse")
@click.argument("logfile", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--stderr", "stderr_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The program's stderr, when LOGFILE holds only its stdout.")
@click.option("--kind", type=click.Choice(["auto", "speculative", "completion"]), default="auto", show_default=True,
              help="What printed it: llama-speculative, or a target-only llama-completion / llama-cli / main.")
def parse_command(logfile: Path, stderr_file: Path | None, kind: str) -> None:
    """Parse the output of llama-speculative or llama-completion and print it as JSON.

    LOGFILE is the program's output: stdout and stderr together (2>&1), or only stdout with
    --stderr naming the rest. Every llama.cpp generation since 2023 is understood
    (llama_print_timings, llama_perf_*_print, common_perf_print, log prefixes).

    Acceptance by draft position (`jq .by_position`: drafted and accepted counts per position, and
    their ratio) comes from llama-speculative-simple's statistics line, which it prints at -lv 4;
    llama-speculative prints none ("note" says why a position is missing).

    \b
    Example:
      llama-speculative -m big.gguf -md small.gguf -p "def qsort" -n 64 > out.txt 2> err.txt
      llamaspec parse out.txt --stderr err.txt | jq '{n_predict, n_drafted, n_accept, accept}'
    """
    from llamaspec.llamacpp import parse

    stdout = _read(logfile)
    stderr = _read(stderr_file) if stderr_file is not None else ""
    click.echo(parse.to_json(parse.parse(stdout, stderr, kind)))
