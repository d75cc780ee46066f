"""``llamaspec build``: llama.cpp, cached by commit, accelerator and flags."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from llamaspec.cli import main


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto", show_default=True,
              help="What the programs compute on. auto: Metal on Apple Silicon, CUDA with a toolkit, cuBLAS and a GPU, "
                   "else CPU.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: all cores).")
@click.option("--force", is_flag=True, help="Rebuild even if the cache already has this build.")
@click.option("--source", "source_spec", default=None, metavar="SPEC",
              help="Build another tree: pypi:llama-cpp-python==VER, git:URL@COMMIT or path:/your/llama.cpp, as "
                   "`source fetch --source` takes it (default: vendor/llama.cpp, fetched if missing).")
@click.option("--rpc/--no-rpc", default=None,
              help="With llama.cpp's RPC server and backend (-DGGML_RPC=ON), or without: a build of its own. "
                   "Default: with them where the tree has them (2024 on).")
@click.option("--server", "with_server", is_flag=True,
              help="Also build llama-server now (otherwise it is built the first time a run needs it).")
@click.option("--json", "as_json", is_flag=True, help="Print the build record as JSON.")
@click.argument("cmake_args", nargs=-1, type=click.UNPROCESSED)
def build(accel: str, jobs: int | None, force: bool, source_spec: str | None, rpc: bool | None, with_server: bool,
          as_json: bool, cmake_args: tuple[str, ...]) -> None:
    """Build llama.cpp's programs into the build cache (reused when nothing changed).

    Extra CMake flags go after --, e.g. `llamaspec build -- -DGGML_CUDA_FORCE_MMQ=ON`.

    Example: llamaspec build --accel cpu
    """
    from llamaspec.base import paths
    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import source as sources

    # Unknown options go to CMake; the old spelling of --accel would reach it and fail there, obscurely.
    if any(a == "--backend" or a.startswith("--backend=") for a in cmake_args):
        raise click.UsageError("--backend is now --accel (what llama.cpp computes on: auto, cpu, cuda or metal)")
    if source_spec:
        info = sources.fetch(source_spec)
    elif not (paths.vendor_dir() / sources.MARKER).is_file() and not paths.vendor_dir().is_dir():
        info = sources.fetch()
    else:
        info = sources.current()
    result = builds.build(accel, cmake_args, jobs, force, info, rpc=rpc)
    if with_server:
        result = builds.ensure_program(result, "server", jobs)
    if as_json:
        click.echo(json.dumps(asdict(result), indent=2))
    else:
        click.echo(f"{result.label}: {result.bin_dir}")
        for role, name in sorted(result.programs.items()):
            click.echo(f"  {role:<19} {name}")
        for role, name in sorted(result.pending.items()):
            click.echo(f"  {role:<19} {name} (built when first needed, or now with --server)")
