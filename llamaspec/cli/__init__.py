"""The command line: parses and renders; the work lives in the modules below it.

Each verb's commands live in a module of this package and register themselves on ``main``.
Errors: a LlamaspecError becomes ``Error: ...`` / ``Hint: ...`` on stderr and a non-zero exit;
``LLAMASPEC_DEBUG=1`` (or ``-v -v``) shows the traceback instead.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import signal
import sys
import threading

import click

from llamaspec import __version__
from llamaspec.base.errors import LlamaspecError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# Which module defines each command. Modules are imported only when their command runs (or
# --help lists them), so `llamaspec run` does not pay for every other command's imports.
COMMAND_MODULES = {
    "source": "source", "build": "build", "doctor": "doctor",
    "models": "models",
    "run": "run", "results": "results",
    "sweep": "sweep",
    "plot": "plot", "report": "report",
    "parse": "parse",
    "prompts": "prompts", "concurrency": "concurrency",
    "rpc": "rpc", "cluster": "cluster",
    "watch": "watch",
}


# Commands that became another command's form: each is one line saying which, and a non-zero exit.
MOVED = {
    "tune": "`llamaspec sweep`, which weighs draft lengths, draft files and the n-gram modes in one study: "
            "`llamaspec sweep NAME --draft 1..16 --draft-variant q4_0,q8_0` (or -m TARGET -md A.gguf,B.gguf)",
}


def moved(name: str, now: str, hint: str = "`llamaspec sweep --help` lists its options") -> click.Command:
    """A hidden command ``name`` that takes any arguments and ends with one error line: it is now
    ``now`` (a user's script fails at once, saying what to type instead)."""
    @click.command(name, hidden=True, add_help_option=False,
                   context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def gone(args: tuple[str, ...]) -> None:
        raise LlamaspecError(f"`llamaspec {name}` is now {now}", hint=hint)
    return gone


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in MOVED:
            return moved(cmd_name, MOVED[cmd_name])
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(f"llamaspec.cli.{COMMAND_MODULES[cmd_name]}")
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except LlamaspecError as exc:
            if os.environ.get("LLAMASPEC_DEBUG"):
                raise
            click.secho(f"Error: {exc.message}", fg="red", err=True)
            if exc.hint:
                click.echo(f"Hint: {exc.hint}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted: everything finished so far is stored; rerun the same command to resume a sweep.",
                       err=True)
            sys.exit(130)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and exc.filename and not os.environ.get("LLAMASPEC_DEBUG"):
                from pathlib import Path

                from llamaspec.base import paths

                click.secho(f"Error: cannot write {exc.filename}: {exc.strerror}", fg="red", err=True)
                click.echo(f"Hint: {paths.moved_by(Path(exc.filename).resolve())}", err=True)
                sys.exit(1)
            if exc.errno != errno.ENOSPC:
                raise
            click.secho(f"Error: no space left on the device while writing {exc.filename or 'a file'}", fg="red", err=True)
            click.echo("Hint: free some space (or move LLAMASPEC_DATA / LLAMASPEC_CACHE); what was stored before is intact",
                       err=True)
            sys.exit(1)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version")
@click.option("-v", "--verbose", count=True,
              help="More detail on stderr: -v debug logs (every command run), -vv also tracebacks on errors.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
def main(verbose: int, quiet: bool) -> None:
    """llamaspec: does speculative decoding pay off for your model pair, on your hardware?

    \b
    Typical session:
      llamaspec build                      # build llama.cpp (cached)
      llamaspec models fetch smollm2-135m  # fetch + derive the offline pair
      llamaspec run smollm2-quicksort      # speculative vs baseline, stored
      llamaspec sweep smollm2-quicksort --draft 1..16
      llamaspec watch http://127.0.0.1:8080  # a running llama-server's traffic
    """
    # Info is the default level; -v is debug; -vv adds tracebacks (the help says the same).
    level = logging.WARNING if quiet else logging.DEBUG if verbose >= 1 else logging.INFO
    if verbose >= 2:
        os.environ["LLAMASPEC_DEBUG"] = "1"
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stderr, force=True)
    logging.getLogger("gguf").setLevel(max(level, logging.WARNING))  # its writer chats at INFO
    for chatty in ("httpx", "httpx2"):  # huggingface_hub's HTTP client (1.x, 2.x): a line per request at INFO
        logging.getLogger(chatty).setLevel(max(level, logging.WARNING))
    _unwind_on_sigterm()


def _unwind_on_sigterm() -> None:
    """SIGTERM (`timeout`, a cancelled CI job, kill) unwinds like Ctrl-C, so that proc.run stops the
    llama.cpp or cmake process it waits on instead of leaving it running without us."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous != signal.SIG_DFL:
        return  # someone (a test runner, an embedding program) has its own plan for SIGTERM

    def unwind(signum: int, frame: object) -> None:
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
    click.get_current_context().call_on_close(lambda: signal.signal(signal.SIGTERM, previous))
