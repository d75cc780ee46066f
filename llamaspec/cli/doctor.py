"""``llamaspec doctor``: what this machine has, and which llama.cpp a run would use."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from llamaspec.cli import main


@main.command()
@click.option("--bin-dir", type=click.Path(path_type=Path), default=None, envvar="LLAMASPEC_BIN_DIR",
              help="Check these llama.cpp binaries as a run given --bin-dir would.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(bin_dir: Path | None, as_json: bool) -> None:
    """Check this machine: OS, CPU, memory, disk, GPU, compilers, CUDA, llama.cpp source and build.

    Shows where a run's llama.cpp comes from, in the order looked at: --bin-dir / LLAMASPEC_BIN_DIR,
    llamaspec's cached build, llama.cpp programs on PATH (with their versions), and the build a run
    would make; which one is used, and why not the others.

    Example: llamaspec doctor
    """
    from llamaspec.views import doctor as doc

    report = doc.examine(bin_dir)
    if as_json:
        click.echo(json.dumps([asdict(c) for c in report], indent=2))
        return
    for check in report:
        mark = {"ok": " ok ", "warn": "warn", "fail": "FAIL", "info": "    "}[check.status]
        click.echo(f"[{mark}] {check.name:<18} {check.value}")
        if check.hint:
            click.echo(f"       {'':<18} hint: {check.hint}")
    if any(c.status == "fail" for c in report):
        raise SystemExit(1)
