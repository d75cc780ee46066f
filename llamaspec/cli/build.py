"""``llamaspec source``, ``llamaspec build`` and ``llamaspec doctor``."""

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
@click.option("--spec", "spec", default=None, metavar="SPEC",
              help="pypi:llama-cpp-python==VER (default 0.3.36), git:URL@COMMIT or path:/your/llama.cpp.")
@click.option("--dest", type=click.Path(path_type=Path), default=None, help="Where to put the tree (default vendor/llama.cpp).")
@click.option("--force", is_flag=True, help="Replace a tree that is already there.")
def source_fetch(spec: str | None, dest: Path | None, force: bool) -> None:
    """Fetch and verify the llama.cpp source.

    Example: llamaspec source fetch --spec pypi:llama-cpp-python==0.3.36
    """
    from llamaspec.llamacpp import source as sources

    info = sources.fetch(spec or sources.DEFAULT_SPEC, dest, force)
    click.echo(f"{info.path}  commit {info.commit}  ({info.origin})")


@source.command("show")
def source_show() -> None:
    """Print the source tree in use and its commit.

    Example: llamaspec source show
    """
    from llamaspec.llamacpp import source as sources

    click.echo(json.dumps(asdict(sources.current()), indent=2))


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto", show_default=True,
              help="What the programs compute on. auto: Metal on Apple Silicon, CUDA with a toolkit, cuBLAS and a GPU, "
                   "else CPU.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: all cores).")
@click.option("--force", is_flag=True, help="Rebuild even if the cache has this build.")
@click.option("--source", "source_spec", default=None, metavar="SPEC",
              help="Build another tree: path:/your/llama.cpp (default: vendor/llama.cpp, fetched if missing).")
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
