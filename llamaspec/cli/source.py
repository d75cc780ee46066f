"""``llamaspec source``: the pinned llama.cpp source tree."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from llamaspec.cli import main


@main.group()
def source() -> None:
    """The pinned llama.cpp source tree in vendor/llama.cpp."""


@source.command("fetch")
@click.option("--source", "source_spec", default=None, metavar="SPEC",
              help="pypi:llama-cpp-python==VER (default 0.3.36), git:URL@COMMIT or path:/your/llama.cpp.")
@click.option("--dest", type=click.Path(path_type=Path), default=None, help="Where to put the tree (default vendor/llama.cpp).")
@click.option("--force", is_flag=True, help="Replace a tree that is already there.")
def source_fetch(source_spec: str | None, dest: Path | None, force: bool) -> None:
    """Fetch and verify the llama.cpp source.

    Example: llamaspec source fetch --source pypi:llama-cpp-python==0.3.36
    """
    from llamaspec.llamacpp import source as sources

    info = sources.fetch(source_spec or sources.DEFAULT_SPEC, dest, force)
    click.echo(f"{info.path}  commit {info.commit}  ({info.origin})")


@source.command("show")
def source_show() -> None:
    """Print the source tree in use and its commit.

    Example: llamaspec source show
    """
    from llamaspec.llamacpp import source as sources

    click.echo(json.dumps(asdict(sources.current()), indent=2))
