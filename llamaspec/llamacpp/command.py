"""A llama.cpp command line as a user pastes it, read into what llamaspec measures.

``llamaspec run -- llama-server -m T.gguf -md D.gguf --spec-draft-n-max 8 -c 4096 -ngl 99``
measures that command against the same command without its draft and speculation flags. This
module reads the pasted argv (a pure function: no file, binary or network is touched):

- the program (``llama-server``, ``llama-speculative-simple``, ``llama-speculative``, or the 2023
  ``speculative``; as a name or a path) and so the engine and ``Settings.program``;
- the target (``-m``/``--model``, or ``-hf``) and the draft (``-md``/``--model-draft``, or ``-hfd``);
- every flag of the flag table (``flags.FLAG_TABLE``) under any generation's spelling (the draft
  length as ``--spec-draft-n-max``, ``--draft-max`` or ``--draft``), the speculative type and the
  n-gram sizes, into llamaspec's ``Settings``; the engine writes them back in the spelling of the
  build that runs them;
- the flags llamaspec does not know, passed through verbatim and in order to both sides
  (``Settings.extra_args``: part of the study's identity and of the baseline's key).

Flags only the speculative side can take but llamaspec does not know (``-cd``, ``-devd`` ...) are
refused rather than passed to the baseline, and so are flags that would stop a measurement from
being one (interactive modes, a token that would be stored with the results).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import flags
from llamaspec.measure import spectypes
from llamaspec.measure.settings import PROGRAM_BINARIES, SettingError, Settings

# Program name -> (engine, Settings.program). The 2023 generation's binary was ./speculative.
PROGRAMS: dict[str, tuple[str, str | None]] = {
    "llama-server": ("llama-server", None),
    **{binary: ("llama.cpp", program) for program, binary in reversed(PROGRAM_BINARIES.items())},
    "speculative": ("llama.cpp", "speculative"),
}
# What to say about programs that are llama.cpp's but not measurable as pasted.
_NOT_SPECULATIVE = ("llama-cli", "llama-completion", "main", "server", "llama-simple", "llama-run")

# Spellings the flag table does not write but llama.cpp reads (every generation's aliases), so
# a pasted command in any of them maps to its setting.
ALIASES: dict[str, tuple[str, ...]] = {
    "n_predict": ("--predict",),
    "temperature": ("--temperature",),
    "draft_max": ("--draft-n",),
    "draft_min": ("--draft-n-min",),
}
TARGET_FLAGS = flags.MODEL_FLAGS["target"]
DRAFT_FLAGS = flags.MODEL_FLAGS["draft"]
TARGET_HF_FLAGS = ("-hf", "-hfr", "--hf-repo")
DRAFT_HF_FLAGS = ("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf")
PROMPT_FLAGS = flags.MODEL_FLAGS["prompt"]
PROMPT_FILE_FLAGS = flags.MODEL_FLAGS["prompt_file"]
SPEC_TYPE_FLAGS = ("--spec-type",)
ESCAPE_ON, ESCAPE_OFF = ("-e", "--escape"), ("--no-escape",)

# Short spellings whose long names say "draft" (read from the recorded --help of every
# generation; a test keeps this complete): these flags act on the draft model only.
DRAFT_SHORT = frozenset({"-md", "-hfd", "-hfrd", "-hffd", "-td", "-tbd", "-Cd", "-Crd", "-Cbd", "-Crbd", "-cd",
                         "-ctkd", "-ctvd", "-otd", "-cmoed", "-ncmoed", "-devd", "-ngld"})

# Flags llamaspec sets itself to measure (the server on loopback at a free port, no key):
# dropped from the pasted command and shown as such.
SET_BY_LLAMASPEC = frozenset({"--host", "--port", "--api-key", "--api-key-file", "--ssl-key-file", "--ssl-cert-file",
                              "--api-prefix", "--metrics", "--no-webui", "--webui"})
# Flags that cannot be part of a measurement, with the reason and what to do instead.
REFUSED: dict[str, tuple[str, str]] = {
    **{f: ("waits for typed input: it is not a run that ends", "drop it; llamaspec measures one completion")
       for f in ("-i", "--interactive", "-if", "--interactive-first", "-cnv", "--conversation", "-mli", "--multiline-input")},
    **{f: ("is not a run", "paste the command that generates text")
       for f in ("-h", "--help", "--usage", "--version", "--completion-bash", "--list-devices")},
    **{f: ("would be stored with the results", "drop it and set HF_TOKEN in the environment instead")
       for f in ("-hft", "--hf-token")},
    **{f: ("names a model llamaspec does not download", "download the file and give its path with -m (or -hf USER/REPO:QUANT)")
       for f in ("-mu", "--model-url", "-hff", "--hf-file", "-dr", "--docker-repo", "-hffd", "--hf-file-draft")},
}


def _gpu(text: str) -> int | str:
    if text == "all":
        return "all"
    if text == "auto":
        raise ValueError("'auto' leaves the offload to llama.cpp's fit; llamaspec measures a stated one: give a layer count or all")
    return int(text)


# How each setting's value is read from the pasted command (int() on "4096", float() on "0.8" ...);
# a test keeps this in step with the flag table.
VALUE: dict[str, Callable[[str], Any]] = {
    "n_predict": int, "seed": int, "temperature": float, "threads": int, "gpu_layers": _gpu, "ctx_size": int,
    "batch_size": int, "flash_attn": str, "parallel": int, "rpc": str, "draft_max": int, "draft_min": int,
    "draft_p_min": float, "threads_draft": int, "draft_gpu_layers": _gpu,
}
_KIND = {int: "a whole number", float: "a number", _gpu: "a layer count or all"}


@dataclass(frozen=True)
class ModelArg:
    """A model as the pasted command names it: a file (``-m``/``-md``) or a Hugging Face repo
    with its quant (``-hf``/``-hfd``: ``USER/REPO[:QUANT]``)."""

    value: str
    source: str  # "path" | "hf"
    flag: str  # as given


@dataclass(frozen=True)
class PastedCommand:
    """What a pasted llama.cpp command asks for, in llamaspec's terms."""

    argv: tuple[str, ...]  # as given
    program: str  # the program's name as llama.cpp calls it (llama-server, llama-speculative-simple ...)
    engine: str  # llamaspec's engine: "llama-server" or "llama.cpp"
    target: ModelArg
    draft: ModelArg | None
    settings: Settings  # the known flags (unset: llamaspec's defaults); extra_args: the passed-through flags
    prompt: str | None = None
    prompt_file: str | None = None
    given: tuple[str, ...] = ()  # the settings the command set itself
    dropped: tuple[str, ...] = ()  # flags llamaspec sets itself (host, port ...), left out
    program_path: str | None = None  # when the program was given as a path

    @property
    def passed_through(self) -> tuple[str, ...]:
        return self.settings.extra_args or ()

    @property
    def sampled(self) -> bool:
        return (self.settings.temperature or 0.0) > 0.0

    @property
    def bin_dir(self) -> Path | None:
        """The folder of the program, when the command named it by path (its siblings are the build)."""
        return Path(self.program_path).parent if self.program_path else None

    def describe(self) -> list[str]:
        """What llamaspec read from the command, a line each (shown before measuring)."""
        from llamaspec.measure.settings import DEFAULTS

        lines = [f"program: {self.program} (engine {self.engine})",
                 f"target: {self.target.value}" + (" (Hugging Face)" if self.target.source == "hf" else "")]
        if self.draft is not None:
            lines.append(f"draft: {self.draft.value}" + (" (Hugging Face)" if self.draft.source == "hf" else ""))
        shown = {name: getattr(self.settings, name) for name in self.given if name not in ("extra_args", "program")}
        if shown:
            lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        if "temperature" not in self.given:
            lines.append(f"temperature: {DEFAULTS.temperature:g} (greedy; the command sets none: give --temp to sample)")
        elif self.sampled:
            lines.append(f"temperature: {self.settings.temperature:g}: sampled, so the lossless check does not apply")
        unset = {name: getattr(DEFAULTS, name) for name in flags.FLAG_TABLE
                 if name not in self.given and name != "temperature" and getattr(DEFAULTS, name) not in (None, ())}
        if unset:
            lines.append("unset in the command, llamaspec's defaults: " + ", ".join(f"{k}={v}" for k, v in unset.items()))
        lines.append("passed through to both sides: " + (" ".join(self.passed_through) or "(nothing)"))
        if self.dropped:
            lines.append(f"left out (llamaspec sets these to measure): {' '.join(self.dropped)}")
        return lines


def _is_flag(token: str) -> bool:
    """llama.cpp takes no positional arguments: a token that starts with '-' and is not a number
    is a flag; anything else is the value of the flag before it."""
    return token.startswith("-") and len(token) > 1 and not re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?", token)


def _draft_side(flag: str) -> bool:
    name = flag.split("=", 1)[0]
    return "draft" in name or name.startswith("--spec-") or name in DRAFT_SHORT


def _setting_flags() -> dict[str, str]:
    """Every spelling of every flag-table setting -> the setting."""
    names: dict[str, str] = {}
    for setting, row in flags.FLAG_TABLE.items():
        for name in (*row.names, *ALIASES.get(setting, ())):
            names[name] = setting
    return names


def _ngram_flags() -> dict[str, tuple[str, str]]:
    """The n-gram modes' size flags -> (mode, setting)."""
    return {name: (mode, setting) for mode, row in flags.SPEC_TYPE_FLAGS.items()
            for setting, names in row.sizes.items() for name in names}


def program_of(argv0: str) -> tuple[str, str, str | None]:
    """(name, engine, Settings.program) of the pasted program, given as a name or a path."""
    name = Path(argv0).name.removesuffix(".exe")
    if name in PROGRAMS:
        engine, program = PROGRAMS[name]
        return name, engine, program
    measurable = ", ".join(p for p in PROGRAMS if p != "speculative")
    if _is_flag(argv0):
        raise LlamaspecError(f"the pasted command starts with the flag {argv0}, not with a program",
                             hint=f"paste the whole command after --, program first: one of {measurable}")
    why = (f"{name} runs the target alone" if name in _NOT_SPECULATIVE else f"{name} is not a program llamaspec knows")
    raise LlamaspecError(f"llamaspec cannot measure {argv0}: {why}",
                         hint=f"it measures {measurable}; e.g. `llamaspec run -- llama-server -m T.gguf -md D.gguf "
                              "--spec-draft-n-max 8`")


def parse(argv: Sequence[str]) -> PastedCommand:
    """Read a pasted llama.cpp command line (program first) into a :class:`PastedCommand`.

    Raises LlamaspecError on what cannot be measured: no program or one llamaspec cannot run, no
    ``-m``, no draft (nothing to compare), a value that does not parse, a flag that cannot be part
    of a measurement, a draft-side flag llamaspec does not know."""
    if not argv:
        raise LlamaspecError("nothing after --: paste a llama.cpp command",
                             hint="e.g. `llamaspec run -- llama-server -m T.gguf -md D.gguf --spec-draft-n-max 8`")
    if len(argv) == 1 and any(c.isspace() for c in argv[0]):
        argv = _split(argv[0])  # the whole command pasted in quotes: split it as a shell would
    name, engine, program = program_of(argv[0])
    setting_flags, ngram_flags = _setting_flags(), _ngram_flags()
    values: dict[str, Any] = {}
    given: list[str] = []
    ngram_modes: dict[str, str] = {}  # setting -> the mode its flag belongs to
    target: ModelArg | None = None
    draft: ModelArg | None = None
    prompt: str | None = None
    prompt_file: str | None = None
    spec_type: str | None = None
    passed: list[str] = []
    dropped: list[str] = []
    at = _Cursor(argv)
    while at.next():
        token, flag = at.token, at.flag
        value, follows = at.value, at.follows
        if flag in REFUSED:
            why, hint = REFUSED[flag]
            raise LlamaspecError(f"{flag} in the pasted command {why}", hint=hint)
        if flag in TARGET_FLAGS:
            target = ModelArg(value("a model file"), "path", flag)
        elif flag in TARGET_HF_FLAGS:
            target = ModelArg(value("USER/REPO[:QUANT]"), "hf", flag)
        elif flag in DRAFT_FLAGS:
            draft = ModelArg(value("a model file"), "path", flag)
        elif flag in DRAFT_HF_FLAGS:
            draft = ModelArg(value("USER/REPO[:QUANT]"), "hf", flag)
        elif flag in PROMPT_FLAGS:
            prompt = value("a prompt")
        elif flag in PROMPT_FILE_FLAGS:
            prompt_file = value("a file")
        elif flag in SPEC_TYPE_FLAGS:
            spec_type = value("a speculative type")
        elif flag in ESCAPE_ON or flag in ESCAPE_OFF:
            values["escape"] = flag in ESCAPE_ON
            given.append("escape")
        elif flag in setting_flags:
            setting = setting_flags[flag]
            text = "on" if setting == "flash_attn" and at.bare() else value()  # -fa: a bare switch before on|off|auto
            values[setting] = _read(flag, setting, text)
            given.append(setting)
        elif flag in ngram_flags:
            mode, setting = ngram_flags[flag]
            values[setting] = _read(flag, setting, value(), int)
            ngram_modes[setting] = mode
            given.append(setting)
        elif flag in SET_BY_LLAMASPEC:
            dropped += [token, *follows()]
        elif _draft_side(flag):
            raise LlamaspecError(
                f"llamaspec does not know {flag}, a flag of the draft side: passed through, it would reach the "
                "target-only baseline too",
                hint="drop it from the pasted command; the draft side takes -md/-hfd, the draft length "
                     "(--spec-draft-n-max, --draft-max or --draft), --spec-draft-n-min, --spec-draft-p-min, "
                     "-td, -ngld and --spec-type")
        else:
            passed += [token, *follows()]

    if target is None:
        raise LlamaspecError(f"the pasted {name} command has no target model (-m FILE or -hf USER/REPO[:QUANT])",
                             hint=f"add it, e.g. `llamaspec run -- {name} -m target.gguf -md draft.gguf`")
    if spec_type is not None:
        spec_type = _spec_type(spec_type)
        values["spec_type"] = spec_type
        given.append("spec_type")
    draft_free = spec_type is not None and spectypes.of(spec_type).draft_free
    if draft is None and not draft_free:
        raise LlamaspecError(f"the pasted command has no draft model: nothing to compare {name} against",
                             hint="add the draft with -md DRAFT.gguf (or -hfd USER/REPO:QUANT); llamaspec measures "
                                  "the command with its draft against the same command without")
    if draft is not None and draft_free:
        raise LlamaspecError(f"--spec-type {spec_type} drafts without a model, and the command also loads -md {draft.value}",
                             hint="drop -md for an n-gram mode, or drop --spec-type to speculate with the draft model")
    for setting, mode in ngram_modes.items():
        if spec_type != mode:
            raise LlamaspecError(f"the pasted command sets {setting.replace('_', ' ')} of {mode} but speculates with "
                                 f"{spec_type or 'the draft model'}",
                                 hint=f"add --spec-type {mode}, or drop the {mode} flags")
    if program is not None:
        values["program"] = program
    values["extra_args"] = tuple(passed)
    try:
        settings = Settings(**values)
    except SettingError as exc:
        spelled = _flag_of(argv, exc.setting)
        raise LlamaspecError(f"{spelled}: {exc}" if spelled else str(exc),
                             hint="fix that value in the pasted command") from None
    path: str | None = argv[0] if ("/" in argv[0] or "\\" in argv[0]) else None
    return PastedCommand(tuple(argv), name, engine, target, draft, settings, prompt, prompt_file,
                         tuple(dict.fromkeys(given)), tuple(dropped), path)


def edited(argv: Sequence[str], *, draft_max: int | None = None, speculative: bool = True,
           spec_type: str | None = None, length_flag: str = "--spec-draft-n-max") -> tuple[str, ...]:
    """A running llama-server's command line changed as little as it takes (``llamaspec watch``'s
    answer): ``draft_max`` sets the draft length (the draft model's, or with an n-gram
    ``spec_type`` its size m) where the command sets it, or adds ``length_flag`` (the draft model's
    flag as this server's ``--help`` spells it) where it does not; ``speculative=False`` drops the
    draft model and every speculation flag (the target alone). Everything else stays as given, host
    and port included."""
    setting_flags, ngram_flags = _setting_flags(), _ngram_flags()
    draft_free = spec_type is not None and spectypes.of(spec_type).draft_free
    length_settings = ("ngram_size_m",) if draft_free else ("draft_max",)
    out = [argv[0]]
    found = False
    at = _Cursor(argv)
    while at.next():
        flag = at.flag
        setting = setting_flags.get(flag) or ngram_flags.get(flag, ("", ""))[1]
        speculation = (flag in (*DRAFT_FLAGS, *DRAFT_HF_FLAGS, *SPEC_TYPE_FLAGS) or flag in ngram_flags
                       or (setting in flags.FLAG_TABLE and flags.FLAG_TABLE[setting].draft) or _draft_side(flag))
        if not speculative and speculation:
            if setting or flag in (*DRAFT_FLAGS, *DRAFT_HF_FLAGS, *SPEC_TYPE_FLAGS):
                at.value()
            else:
                at.follows()
            continue
        if draft_max is not None and setting in length_settings:
            at.value()
            out += [f"{flag}={draft_max}"] if at.eq else [flag, str(draft_max)]
            found = True
            continue
        out += [at.token, *at.follows()]
    if draft_max is not None and speculative and not found:
        if draft_free:
            length_flag = flags.spec_type_flags(spec_type).sizes.get("ngram_size_m", (length_flag,))[0]
        out += [length_flag, str(draft_max)]
    return tuple(out)


def _split(text: str) -> list[str]:
    import shlex

    try:
        return shlex.split(text)
    except ValueError as exc:
        raise LlamaspecError(f"the pasted command does not split into words: {exc}",
                             hint="check its quotes, or paste it after -- without quoting the whole line") from None


class _Cursor:
    """Walks a pasted argv a flag at a time; ``--flag=value`` and ``--flag value`` alike."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv, self.i = argv, 0
        self.token = self.flag = self.inline = ""
        self.eq = False

    def next(self) -> bool:
        self.i += 1
        if self.i >= len(self.argv):
            return False
        self.token = self.argv[self.i]
        if not _is_flag(self.token):
            # A value with no flag before it (llama.cpp has no positional arguments).
            raise LlamaspecError(f"{self.token!r} in the pasted command follows no flag",
                                 hint="check the quoting: a prompt with spaces needs quotes, e.g. -p \"Once upon a time\"")
        flag, eq, inline = self.token.partition("=") if self.token.startswith("--") else (self.token, "", "")
        self.flag, self.eq, self.inline = flag, bool(eq), inline
        return True

    def value(self, what: str = "a value") -> str:
        """The flag's value: after its '=', or the next token."""
        if self.eq:
            return self.inline
        if self.i + 1 >= len(self.argv):
            raise LlamaspecError(f"{self.flag} needs {what} in the pasted command",
                                 hint=f"give it, e.g. {self.flag} {_example(self.flag)}")
        self.i += 1
        return self.argv[self.i]

    def follows(self) -> list[str]:
        """An unknown flag's value, when one follows (the next token is not a flag)."""
        if not self.eq and self.i + 1 < len(self.argv) and not _is_flag(self.argv[self.i + 1]):
            self.i += 1
            return [self.argv[self.i]]
        return []

    def bare(self) -> bool:
        """A switch with no value here (-fa on builds before on|off|auto)."""
        return not self.eq and (self.i + 1 >= len(self.argv) or _is_flag(self.argv[self.i + 1]))


def _read(flag: str, setting: str, text: str, parse: Callable[[str], Any] | None = None) -> Any:
    read = parse or VALUE[setting]
    try:
        return read(text)
    except ValueError as exc:
        reason = str(exc) if read is _gpu and "auto" in str(exc) else f"expected {_KIND.get(read, 'a valid value')}"
        raise LlamaspecError(f"{flag} {text}: {reason}", hint=f"fix the value of {flag} in the pasted command") from None


def _spec_type(text: str) -> str:
    if "," in text:
        raise LlamaspecError(f"--spec-type {text}: llamaspec measures one speculative type at a time",
                             hint="paste the command with one type, e.g. --spec-type draft-simple")
    if text == "none":
        raise LlamaspecError("--spec-type none: the pasted command does not speculate, so there is nothing to compare",
                             hint="drop --spec-type none (with -md the draft model speculates)")
    return flags.spec_type_name(text)


def _flag_of(argv: Sequence[str], setting: str | None) -> str | None:
    """The flag of ``setting`` as the pasted command spells it (for an error)."""
    if setting is None:
        return None
    spellings = {name for name, s in _setting_flags().items() if s == setting}
    spellings |= {name for name, (_, s) in _ngram_flags().items() if s == setting}
    for token in reversed(argv):
        if token.split("=", 1)[0] in spellings:
            return token.split("=", 1)[0]
    return None


def _example(flag: str) -> str:
    if flag in (*TARGET_FLAGS, *DRAFT_FLAGS):
        return "model.gguf"
    if flag in (*TARGET_HF_FLAGS, *DRAFT_HF_FLAGS):
        return "USER/REPO:Q4_0"
    return "VALUE"

