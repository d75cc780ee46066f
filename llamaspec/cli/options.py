"""Options shared by run and sweep, defined once.

The setting options are made from the settings schema (``llamaspec.measure.settings``): every sweepable
setting is ``--NAME VALUE`` on ``run`` and ``--NAME LIST`` on ``sweep``, and those an engine honours
are ``--NAME VALUE`` on ``concurrency`` (``EngineSettingsCommand``), so a new setting reaches the
command line without an edit here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from llamaspec.measure.settings import FIELDS, SWEEPABLE, SettingError, Settings, check

log = logging.getLogger("llamaspec")

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

# What --prompts (and `prompts list`) takes: the sources of llamaspec.studies.prompts.parse_source.
PROMPT_SOURCES = "FILE|spec-bench:PATH|speed-bench:PATH|alpaca[:PATH]"

# Option names that differ from --the-setting-name (the write-up's --draft, llama.cpp's -t, -ngl).
OPTION_NAMES: dict[str, tuple[str, ...]] = {
    "draft_max": ("--draft", "-d"),
    "draft_p_min": ("--p-min",),
    "threads": ("--threads", "-t"),
    "gpu_layers": ("--gpu-layers", "-ngl"),
}


def option_names(setting: str) -> tuple[str, ...]:
    return OPTION_NAMES.get(setting, (f"--{setting.replace('_', '-')}",))


class SettingValue(click.ParamType):
    """One value of a setting, parsed here and checked by ``Settings`` (the one place the rules
    live); a bad one is one error line naming the flag, with a hint."""

    def __init__(self, setting: str, parse: Callable[[str], Any] | None = None) -> None:
        self.setting = setting
        self.name = setting
        self.parse = parse or SWEEPABLE[setting]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        from llamaspec.base.errors import LlamaspecError

        flag = max(param.opts, key=len) if param is not None and param.opts else option_names(self.setting)[0]
        try:
            return check(self.setting, self.parse(value))
        except ValueError as exc:  # SettingError is one
            kinds: dict[Any, str] = {int: "a whole number", float: "a number"}
            kind = kinds.get(self.parse, "a valid value")
            reason = str(exc) if isinstance(exc, SettingError) else f"expected {kind}"
            command = f"`{ctx.command_path} -h`" if ctx is not None else "-h"
            raise LlamaspecError(f"{flag} {value}: {reason}", hint=f"{flag}: {_help(self.setting)} (see {command})") from None


class Repeats(click.ParamType):
    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if value == "auto" or isinstance(value, int):
            return value
        try:
            number = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a count nor 'auto'", param, ctx)
        if number < 1:
            self.fail("must be at least 1", param, ctx)
        return number


def _help(setting: str) -> str:
    return FIELDS[setting].metadata["help"] or setting.replace("_", " ")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# What a --NAME LIST takes (``llamaspec.studies.grid.parse_values``): ranges are of whole numbers,
# so a number setting takes both, a fraction a list, a word a list of words.
RANGES = "a list or range, e.g. 1,2,4 or 1..16"
LIST_FORMS: dict[Any, str] = {float: "a list, e.g. 0.5,0.8", str: "one or more, comma-separated"}


def _setting_option(setting: str, listed: bool = False) -> tuple[list[str], dict[str, Any]]:
    """The names and attributes of ``--NAME VALUE`` for one setting, as ``run`` has it (the value
    checked by ``Settings``), or of ``--NAME LIST``, as ``sweep`` has it."""
    attrs = ({"metavar": "LIST", "help": f"{_cap(_help(setting))}: {LIST_FORMS.get(SWEEPABLE[setting], RANGES)}."}
             if listed else {"type": SettingValue(setting), "help": _cap(_help(setting)) + "."})
    return [*option_names(setting), setting], {"default": None, **attrs}


def value_option(setting: str) -> click.Option:
    names, attrs = _setting_option(setting)
    return click.Option(names, **attrs)


def setting_options(func: Callable[..., Any], listed: bool = False) -> Callable[..., Any]:
    """``--NAME VALUE`` (``listed``: ``--NAME LIST``) for every sweepable setting (given to the
    command by the setting's name)."""
    for setting in reversed(list(SWEEPABLE)):
        names, attrs = _setting_option(setting, listed)
        func = click.option(*names, **attrs)(func)
    return func


def sweep_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--NAME LIST`` for every sweepable setting and for the draft model's variant."""
    func = click.option("--draft-variant", "draft_variant", default=None, metavar="LIST",
                        help="Draft model variants, e.g. q4_0,q4_1,q8_0.")(func)
    return setting_options(func, listed=True)


def engine_setting_options(honoured: frozenset[str], skip: tuple[str, ...] = ()) -> list[click.Option]:
    """``run``'s ``--NAME VALUE`` options for the sweepable settings an engine honours (``skip``:
    those the command takes in another form), in the settings table's order."""
    return [value_option(setting) for setting in SWEEPABLE if setting in honoured and setting not in skip]


class EngineSettingsCommand(click.Command):
    """A command that measures on one engine: its setting options are ``run``'s for the settings
    that engine honours, read from the engine's flag table (``honoured``, called once) when the
    command is first used, so ``llamaspec --help`` does not import the engine. They go right after
    the option named ``after`` and reach the callback by the settings' names.

    A new setting the engine honours is one field in ``llamaspec.measure.settings`` and one row in the
    engine's flag table; the command gets its option with no edit here."""

    def __init__(self, *args: Any, honoured: Callable[[], frozenset[str]], skip: tuple[str, ...] = (),
                 after: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._honoured: Callable[[], frozenset[str]] | None = honoured
        self._skip = skip
        self._after = after

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self._honoured is not None:
            made = engine_setting_options(self._honoured(), self._skip)
            self._honoured = None
            names = [p.name for p in self.params]
            at = names.index(self._after) + 1 if self._after in names else len(names)
            self.params[at:at] = made
        return super().get_params(ctx)


TIMEOUT_HELP = _cap(_help("timeout")) + "."

# Options every measuring command (run, sweep) takes.
COMMON_OPTIONS: list[Decorator] = [
    click.option("--n-predict", "-n", type=SettingValue("n_predict", int), default=None, help="Tokens to generate."),
    click.option("--prompt", "-p", default=None, help="Replace the experiment's prompt."),
    click.option("--prompt-file", "-f", type=click.Path(path_type=Path), default=None, help="Read the prompt from a file."),
    click.option("--repeats", "-r", type=Repeats(), default=None,
                 help="Pairs (baseline + speculative) per setting, or 'auto': until the speedup's 95 % interval "
                      "is within +-3 % (3 to 10 pairs)."),
    click.option("--timeout", type=SettingValue("timeout", float), default=None, help=TIMEOUT_HELP),
    click.option("--bin-dir", type=click.Path(path_type=Path), default=None, envvar="LLAMASPEC_BIN_DIR",
                 help="Use these llama.cpp binaries (any generation) instead of llamaspec's build."),
    click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto", show_default=True,
                 help="Which cached llama.cpp build to use (what it computes on)."),
    click.option("--no-wait", is_flag=True, help="Fail at once if another measurement holds this machine."),
    click.option("--json", "as_json", is_flag=True, help="Print results as JSON on stdout."),
]


def prompt_set_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """How a prompt set is read (``sweep``, ``prompts list``, ``concurrency``): ``--limit``,
    ``--sample-seed``, ``--format``, ``--turns``."""
    for option in reversed([
        click.option("--limit", type=click.IntRange(min=1), default=None,
                     help="Keep N prompts of the set (the first N, or a sample with --sample-seed)."),
        click.option("--sample-seed", "sample_seed", type=int, default=None,
                     help="Sample the --limit prompts at random with this seed."),
        click.option("--format", "fmt", type=click.Choice(["chat", "raw", "alpaca"]), default=None,
                     help="chat: through the model's chat template (default); raw: as text; alpaca: Alpaca's template."),
        click.option("--turns", type=click.Choice(["first", "all"]), default=None,
                     help="Spec-Bench, SPEED-Bench: the first turn only, or every turn."),
    ]):
        func = option(func)
    return func


def workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """What a workload study's answer speaks for (sweep): ``--whole-workload``, ``--count-loops``."""
    from llamaspec.measure.timed import FLOOR_TEXT

    func = click.option("--count-loops", is_flag=True,
                        help="Your traffic loops as these outputs do: count the prompts whose target output repeats "
                             "itself to the end (by default they are left out of the answer, their figures shown apart).")(func)
    return click.option("--whole-workload", is_flag=True,
                        help="The prompts are your whole workload, not a sample of it: the interval resamples pairs "
                             "within them only and speaks for these prompts alone (the default resamples the prompts "
                             "within each category too, to speak for other prompts of the same kinds). Either way a "
                             f"prompt whose target alone answers with {FLOOR_TEXT} and is left out.")(func)


check_deploy_option = click.option(
    "--check-deploy/--no-check-deploy", default=True, show_default=True,
    help="Check a recommended llama-server command before printing it: start it and the target alone's, send the "
         "first prompt of each category in turn as a client would, and set the server's speedup beside the study's "
         "(docs/engines.md, \"The deploy check\").")


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(COMMON_OPTIONS):
        func = option(func)
    return func


def overrides(given: dict[str, Any], n_predict: int | None = None, timeout: float | None = None) -> Settings:
    """Command-line settings (they win over the experiment's)."""
    values = {k: v for k, v in given.items() if k in FIELDS and v is not None}
    if "gpu_layers" in values:
        values.setdefault("draft_gpu_layers", values["gpu_layers"])
    return Settings(n_predict=n_predict, timeout=timeout, **values)


def check_prompt_file(prompt_file: Path | None) -> str | None:
    if prompt_file is None:
        return None
    if not prompt_file.is_file():
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError(f"prompt file not found: {prompt_file}", hint="check the path given to --prompt-file")
    return str(prompt_file.resolve())


def open_engine(exp: Any, accel: str, bin_dir: Path | None, engine: str | None = None, warm: bool = False) -> Any:
    """The engine ``exp`` runs on (``engine``: another by its registry name), on an RPC build where
    the experiment puts its target on RPC workers; ``warm``: llama-server's warm traffic."""
    from llamaspec.measure.contract import EngineOptions
    from llamaspec.registry import engines

    return engines.open_engine(engine or exp.engine, EngineOptions(accel=accel, bin_dir=bin_dir, rpc=exp.uses_rpc,
                                                                     warm=warm))


@contextlib.contextmanager
def measuring(what: str, no_wait: bool) -> Iterator[None]:
    """Hold the machine-wide measurement lock: one measurement at a time per machine. The data
    folder is checked first: a store that cannot be written is one line now, not after waiting and
    measuring."""
    from llamaspec.base import lock, paths

    paths.writable_dir(paths.data_dir())

    def waiting(holder: dict[str, Any]) -> None:
        log.info("waiting for another measurement on this machine: pid %s (%s) since %s", holder.get("pid"),
                 holder.get("what") or " ".join(holder.get("argv") or []), holder.get("since"))

    with lock.measuring(what, wait=not no_wait, on_wait=waiting):
        yield


# --- models on the command line (llamaspec.studies.adhoc) -------------------------------------------------

MODEL_OPTIONS: list[Decorator] = [
    click.option("-m", "--model", "model", default=None, metavar="GGUF|USER/REPO[:QUANT]|NAME[:VARIANT]",
                 help="The target, as llama.cpp takes it: a GGUF file, a Hugging Face repo (as -hf: the file of that "
                      "quant, downloaded into the Hugging Face cache and pinned) or a catalog model. Instead of NAME."),
    click.option("-md", "--model-draft", "drafts", multiple=True, metavar="GGUF|USER/REPO[:QUANT]|NAME[:VARIANT]",
                 help="The draft, in the same words. sweep compares several: -md a.gguf,b.gguf or -md repeated."),
    click.option("--name", "study", default=None, metavar="NAME",
                 help="With -m: the study's name (default: made from the files' sha256 and the settings; printed). "
                      "report, plot and a rerun take it."),
]


def model_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(MODEL_OPTIONS):
        func = option(func)
    return func


def split_drafts(drafts: tuple[str, ...]) -> list[str]:
    """``-md a.gguf,b.gguf -md c.gguf`` -> [a.gguf, b.gguf, c.gguf] (empty items refused)."""
    from llamaspec.base.errors import LlamaspecError

    found = [part.strip() for text in drafts for part in text.split(",")]
    if any(not part for part in found):
        raise LlamaspecError(f"-md {','.join(drafts)}: an empty draft name", hint="e.g. -md a.gguf,b.gguf")
    return found


def experiment_or_study(experiment_name: str | None, model: str | None, drafts: tuple[str, ...], study: str | None, *,
                        settings: Settings | None = None, prompt: str | None = None, prompt_file: Path | None = None,
                        prompts: str | None = None, repeats: int | str | None = None, command: str = "run",
                        several_drafts: bool = True, workload: Any = None) -> Any:
    """The experiment a measuring command runs (``adhoc.open_study``, which picks the engine):
    NAME|PATH, or -m/-md (comma-separated drafts split here) as a study of the models given."""
    from llamaspec.studies import adhoc

    return adhoc.open_study(experiment_name, model, split_drafts(drafts), study, settings=settings, prompt=prompt,
                            prompt_file=prompt_file, prompts=prompts, repeats=repeats, command=command,
                            several_drafts=several_drafts, workload=workload)
