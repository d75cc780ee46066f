"""``llamaspec run -- COMMAND``: a pasted llama.cpp command measured as given.

The command is read by ``llamaspec.llamacpp.command.parse`` and becomes a study through the one
builder of studies from models (``llamaspec.studies.adhoc.experiment_from_models``); ``run`` then measures it
like any experiment: the command as given against the same command without its draft and
speculation flags, in pairs.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.settings import Settings

if TYPE_CHECKING:
    from llamaspec.llamacpp.command import PastedCommand
    from llamaspec.studies.experiment import Experiment

log = logging.getLogger("llamaspec")

PASTED = "llamaspec.pasted"  # ctx.meta key: the words after --


class TakesPastedCommand(click.Command):
    """A command that takes a pasted command line after ``--``: the words after the first ``--``
    are kept apart (``pasted(ctx)``) before click parses the rest as options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta[PASTED] = list(args[at + 1:])
            args = args[:at]
        return super().parse_args(ctx, args)


def pasted(ctx: click.Context) -> list[str] | None:
    """The pasted command (None when there was no ``--``)."""
    found: list[str] | None = ctx.meta.get(PASTED)
    return found


def _disagreements(cmd: PastedCommand, overrides: Settings) -> list[str]:
    """Settings both the pasted command and llamaspec's own options set, to different values."""
    return [name for name in cmd.given
            if getattr(overrides, name) is not None and getattr(overrides, name) != getattr(cmd.settings, name)]


def study(argv: list[str], *, experiment_name: str | None, overrides: Settings, prompt: str | None,
          prompt_file: Path | None, name: str | None, repeats: int | str | None,
          bin_dir: Path | None, workload: Any = None) -> tuple[Experiment, PastedCommand, Path | None]:
    """(experiment, parsed command, llama.cpp folder) for a pasted command; refuses what cannot be
    measured before anything is measured or stored. ``workload``: the prompts measured when the
    command names none."""
    from llamaspec.llamacpp import command
    from llamaspec.studies import adhoc

    if experiment_name is not None:
        raise LlamaspecError(f"the experiment {experiment_name} and a pasted command after -- together: which one to run?",
                             hint=f"drop {experiment_name} to measure the pasted command, or drop everything after -- "
                                  "to run the experiment")
    cmd = command.parse(argv)
    clash = _disagreements(cmd, overrides)
    if clash:
        ours, theirs = getattr(overrides, clash[0]), getattr(cmd.settings, clash[0])
        raise LlamaspecError(f"{clash[0].replace('_', ' ')} is set twice, to {ours} by llamaspec's option and to {theirs} "
                             "in the pasted command",
                             hint="give it once: in the pasted command, or as llamaspec's option before --")
    if (prompt is not None or prompt_file is not None) and (cmd.prompt is not None or cmd.prompt_file is not None):
        raise LlamaspecError("the prompt is given twice: by -p/-f before -- and in the pasted command",
                             hint="give it once")
    bin_dir = bin_dir_of(cmd, bin_dir)
    settings = overrides.over(cmd.settings)
    target = cmd.target.value if cmd.target.source == "hf" else str(Path(cmd.target.value).expanduser().absolute())
    drafts = [] if cmd.draft is None else [
        cmd.draft.value if cmd.draft.source == "hf" else str(Path(cmd.draft.value).expanduser().absolute())]
    file = str(Path(cmd.prompt_file).expanduser()) if cmd.prompt_file is not None else prompt_file
    exp = adhoc.experiment_from_models(target, drafts, settings=settings, prompt=prompt if prompt is not None else cmd.prompt,
                                       prompt_file=file, name=name, engine=cmd.engine,
                                       workload=workload if cmd.prompt is None and file is None else None,
                                       repeats=repeats if repeats is not None else 3,
                                       description=f"{cmd.program} as pasted: {' '.join(cmd.argv[1:])}")
    path = adhoc.save_study(exp)
    for line in cmd.describe():
        log.info("%s", line)
    what = adhoc.builtin_label(exp) if len(exp.cases) > 1 else "one prompt"
    log.info("study %s: the pasted command against itself without its draft and speculation flags, on %s (kept in "
             "%s; `llamaspec report %s`, or rerun by name)", exp.name, what, path, exp.name)
    return exp, cmd, bin_dir


def bin_dir_of(cmd: PastedCommand, bin_dir: Path | None) -> Path | None:
    """--bin-dir (or $LLAMASPEC_BIN_DIR) when given, else the folder of a program pasted by path."""
    if bin_dir is not None or cmd.program_path is None:
        return bin_dir
    program = Path(cmd.program_path).expanduser()
    if not program.is_file():
        raise LlamaspecError(f"the pasted program {cmd.program_path} does not exist",
                             hint="check the path, or give the program by name to use llamaspec's llama.cpp")
    return program.parent


def as_json(cmd: PastedCommand) -> dict[str, Any]:
    """What was read from the pasted command, for --json."""
    return {"argv": list(cmd.argv), "program": cmd.program, "engine": cmd.engine,
            "target": dataclasses.asdict(cmd.target), "draft": dataclasses.asdict(cmd.draft) if cmd.draft else None,
            "passed_through": list(cmd.passed_through), "left_out": list(cmd.dropped), "sampled": cmd.sampled}
