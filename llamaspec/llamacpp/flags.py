"""Which flags a llama.cpp build takes, and how an experiment's intent maps onto them.

llama.cpp renames flags between generations (``--draft`` in 2023, ``--draft-max`` 2024 to early
2026, ``--spec-draft-n-max`` now) and its defaults drift. So we read each program's ``--help``
once (``programhelp.py``), keep the set of flags it accepts (minus the ones it lists as removed),
and build command lines from one declarative table (``FLAG_TABLE``): for each setting, the programs that take it
(the speculative programs, the completion baseline, llama-server), its flag names in order of
preference, and how its value is written. llama-server's command line and request come from the
same rows, and what each llama.cpp backend honours is read from them (``takes``).

Its size: the flag table is data (one row per setting, every program that takes it, every
spelling across llama.cpp generations); the code around it is the table's readers. What a
program's ``--help`` offers is read in ``programhelp.py``, how each speculative program counts is
``counting.py``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.programhelp import HelpFlags
from llamaspec.measure import spectypes
from llamaspec.measure.settings import DEFAULTS, Settings, program_binary

log = logging.getLogger(__name__)

GPU_ALL = 999  # "offload every layer" on builds where -ngl counts layers (2024 on)


@dataclass(frozen=True)
class Invocation:
    """One program run as llamaspec asks for it: models, prompt and the experiment's settings
    (defaults applied, offload still as intent), independent of any llama.cpp generation."""

    target: str
    settings: Settings
    draft: str | None = None
    prompt: str | None = None
    prompt_file: str | None = None
    accel: str = "cpu"  # what the build computes on: maps offload intent to -ngl

    @classmethod
    def of(cls, target: str, draft: str | None = None, prompt: str | None = None, prompt_file: str | None = None,
           accel: str = "cpu", **settings: Any) -> Invocation:
        """An invocation from keyword settings (the rest from the defaults)."""
        return cls(target, Settings(**settings).with_defaults(), draft, prompt, prompt_file, accel)


Render = Callable[["HelpFlags", str, Any, "Invocation"], list[str]]


def _plain(caps: HelpFlags, flag: str, value: Any, inv: Invocation) -> list[str]:
    return [flag, format(value, "g") if isinstance(value, float) else str(value)]


def _offload(caps: HelpFlags, flag: str, value: Any, inv: Invocation) -> list[str]:
    layers = gpu_layers(value, inv.accel, caps.generation)
    return [] if layers is None else [flag, str(layers)]


def _target_offload(caps: HelpFlags, flag: str, value: Any, inv: Invocation) -> list[str]:
    """The target's -ngl: with RPC servers its layers go to them (devices even on a CPU build)."""
    layers = gpu_layers(value, "rpc" if inv.settings.rpc else inv.accel, caps.generation)
    return [] if layers is None else [flag, str(layers)]


def _joined(caps: HelpFlags, flag: str, value: Any, inv: Invocation) -> list[str]:
    return [flag, ",".join(value)] if value else []


def _switch_or_value(caps: HelpFlags, flag: str, value: Any, inv: Invocation) -> list[str]:
    """``-fa on|off|auto`` on builds whose help shows a value, a bare ``-fa`` switch on older ones."""
    if caps.takes_value(flag):
        return [flag, str(value)]
    if value == "on":
        return [flag]
    if value == "off":
        return []
    raise LlamaspecError(f"{Path(caps.program).name} ({caps.version.commit}) has {flag} only as an on switch, not {value!r}",
                         hint="use flash_attn: on or off with this build")


# The programs a row is for, by role: the two speculative command-line programs, the target-only
# baseline (llama-completion; llama-cli or main on older builds) and llama-server.
SPECULATIVE = frozenset({"speculative", "speculative-simple"})
COMMAND_LINE = SPECULATIVE | {"completion"}
SERVER = frozenset({"server"})
EVERY = COMMAND_LINE | SERVER


@dataclass(frozen=True)
class Flag:
    """How one setting reaches the programs that take it: flag names (most recent first; the first
    the build's ``--help`` offers wins), which programs take it, and how its value is written."""

    names: tuple[str, ...]
    programs: frozenset[str] = EVERY  # roles that take it; the others never see it (and refuse it when set)
    draft: bool = False  # only where a draft model is loaded (the speculative side)
    required: bool = True  # a build without any of the names is refused when the setting is set
    render: Render = _plain
    request: str | None = None  # llama-server takes it per request, under this /completion key, not as a flag
    unset: Any = None  # written when the setting is unset (None: no flag, the program's own default)


# The one place a setting meets llama.cpp's programs. A setting of llamaspec.measure.settings.Settings is
# either a row here or in HANDLED_ELSEWHERE (a test keeps the two complete); the command lines of
# every program, llama-server's included, and the settings each backend honours come from here.
FLAG_TABLE: dict[str, Flag] = {
    "n_predict": Flag(("-n", "--n-predict"), request="n_predict"),
    "seed": Flag(("-s", "--seed"), request="seed"),
    "temperature": Flag(("--temp",), request="temperature"),
    "threads": Flag(("-t", "--threads")),
    # Optional: 2023 CPU builds have no -ngl (nothing to offload); the intent still defaults to "all".
    "gpu_layers": Flag(("-ngl", "--n-gpu-layers", "--gpu-layers"), required=False, render=_target_offload),
    "ctx_size": Flag(("-c", "--ctx-size")),
    "batch_size": Flag(("-b", "--batch-size")),
    "flash_attn": Flag(("-fa", "--flash-attn"), render=_switch_or_value),
    "parallel": Flag(("-np", "--parallel"), SERVER, unset=1),  # the pinned server's default is "auto" (several slots)
    "rpc": Flag(("--rpc",), COMMAND_LINE, render=_joined),  # the target's layers on these RPC servers
    "draft_max": Flag(("--spec-draft-n-max", "--draft-max", "--draft"), SPECULATIVE | SERVER, draft=True),
    # llama-speculative lists --spec-draft-n-min and --spec-draft-p-min (shared options), never reads them.
    "draft_min": Flag(("--spec-draft-n-min", "--draft-min"), frozenset({"speculative-simple"}) | SERVER, draft=True),
    "draft_p_min": Flag(("--spec-draft-p-min", "--draft-p-min"), frozenset({"speculative-simple"}) | SERVER, draft=True),
    "threads_draft": Flag(("-td", "--threads-draft", "--spec-draft-threads"), SPECULATIVE | SERVER, draft=True),
    # Optional: 2023 builds have no -ngld.
    "draft_gpu_layers": Flag(("-ngld", "--n-gpu-layers-draft", "--gpu-layers-draft", "--spec-draft-ngl"),
                             SPECULATIVE | SERVER, draft=True, required=False, render=_offload),
}
# Models and prompt: not settings, but flags all the same.
MODEL_FLAGS = {
    "target": ("-m", "--model"),
    "draft": ("-md", "--model-draft", "--spec-draft-model"),
    "prompt": ("-p", "--prompt"),
    "prompt_file": ("-f", "--file"),
}
# Settings that are not one flag, and the programs that take them: the speculative mode
# (--spec-type and the n-gram sizes, one flag family per mode: SPEC_TYPE_FLAGS), the program
# (which binary runs), escape (a switch pair; the server gets the prompt in JSON, as is),
# extra_args (last, verbatim) and timeout (llamaspec's own).
HANDLED_ELSEWHERE: dict[str, frozenset[str]] = {
    "spec_type": EVERY,
    "program": COMMAND_LINE,
    "escape": EVERY,
    "extra_args": EVERY,
    "timeout": EVERY,
    "ngram_size_n": frozenset({"speculative-simple"}) | SERVER,
    "ngram_size_m": frozenset({"speculative-simple"}) | SERVER,
}


@dataclass(frozen=True)
class SpecTypeFlags:
    """How llama.cpp spells one speculative type (what the type is: ``llamaspec.measure.spectypes``): its
    ``--spec-type`` value and, for an n-gram mode, the flags of its sizes by setting."""

    value: str
    sizes: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _sizes(n: str, m: str) -> dict[str, tuple[str, ...]]:
    return {"ngram_size_n": (n,), "ngram_size_m": (m,)}


# One flag family per n-gram mode (ngram-mod calls the lookup length n-match and the draft length
# n-max); ngram-cache has none. The same flags on llama-server and llama-speculative-simple.
SPEC_TYPE_FLAGS: dict[str, SpecTypeFlags] = {
    "draft": SpecTypeFlags("draft-simple"),  # our "draft" is llama.cpp's plain draft-model speculation
    "ngram-simple": SpecTypeFlags("ngram-simple", _sizes("--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m")),
    "ngram-map-k": SpecTypeFlags("ngram-map-k", _sizes("--spec-ngram-map-k-size-n", "--spec-ngram-map-k-size-m")),
    "ngram-map-k4v": SpecTypeFlags("ngram-map-k4v", _sizes("--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m")),
    "ngram-mod": SpecTypeFlags("ngram-mod", _sizes("--spec-ngram-mod-n-match", "--spec-ngram-mod-n-max")),
    "ngram-cache": SpecTypeFlags("ngram-cache"),
}
NGRAM_SIZES = ("ngram_size_n", "ngram_size_m")
# llama.cpp's --spec-type value for no speculation (its default list at 0c1e570: common/common.h).
NO_SPECULATION = "none"


def takes(program: str) -> frozenset[str]:
    """The settings the program with this role honours (``speculative``, ``speculative-simple``,
    ``completion`` or ``server``), read from the table."""
    return (frozenset(name for name, row in FLAG_TABLE.items() if program in row.programs)
            | frozenset(name for name, programs in HANDLED_ELSEWHERE.items() if program in programs))


def run_needs(role: str) -> dict[str, tuple[str, ...]]:
    """The flags a program with this role must offer for any run, each as the table's names for it
    (any one will do): the models, and on the speculative side the draft length."""
    needs = {"model": MODEL_FLAGS["target"]}
    if role in SPECULATIVE | SERVER:
        needs["draft model"] = MODEL_FLAGS["draft"]
        needs["draft length"] = FLAG_TABLE["draft_max"].names
    return needs


def lacks(caps: HelpFlags, role: str) -> str | None:
    """What the program lacks for a run, in words (``no flag for the draft model (tried -md, ...)``); None
    when it has everything ``run_needs`` asks."""
    for what, names in run_needs(role).items():
        if caps.pick(names) is None:
            return f"no flag for the {what} (tried {', '.join(names)})"
    return None


def pick(caps: HelpFlags, setting: str, names: Sequence[str]) -> str:
    """The first of ``names`` the program offers, else one error naming the setting."""
    flag = caps.pick(names)
    if flag is None:
        raise LlamaspecError(
            f"{Path(caps.program).name} ({caps.version.commit}) has no flag for {setting.replace('_', ' ')}"
            f" (tried {', '.join(names)})",
            hint="drop that setting from the experiment, or use a llama.cpp build that has it",
        )
    return flag


def settings_argv(caps: HelpFlags, inv: Invocation, program: str, *, draft: bool) -> list[str]:
    """The flags of ``program`` for ``inv``'s settings, in table order: the rows it takes that are
    flags (not request fields), with a value or an ``unset`` one; ``draft``: the draft side's rows
    (only when a draft model is loaded) instead of the others."""
    argv: list[str] = []
    for setting, row in FLAG_TABLE.items():
        if program not in row.programs or row.draft != draft or (program == "server" and row.request):
            continue
        value = getattr(inv.settings, setting)
        if value is None:
            value = row.unset
        if value is None or value == () or (row.draft and not inv.draft):
            continue
        flag = pick(caps, setting, row.names) if row.required else caps.pick(row.names)
        if flag is not None:
            argv += row.render(caps, flag, value, inv)
    return argv


def request_fields(settings: Settings) -> dict[str, Any]:
    """llama-server's per-request fields for these settings (the rows with ``request``)."""
    return {row.request: getattr(settings, name) for name, row in FLAG_TABLE.items()
            if row.request and "server" in row.programs}


def common_argv(caps: HelpFlags, inv: Invocation, program: str) -> list[str]:
    """Models, prompt and settings of the command-line program with role ``program``; a setting
    it does not take gets no flag (the runner refuses it when set)."""
    speculative = program in SPECULATIVE
    argv: list[str] = []
    for name in ("target", "draft", "prompt_file", "prompt"):
        value = getattr(inv, name)
        if value is None or (name == "draft" and not speculative) or (name == "prompt" and inv.prompt_file is not None):
            continue
        flag = pick(caps, name, MODEL_FLAGS[name]) if name == "draft" else caps.pick(MODEL_FLAGS[name])
        if flag is not None:
            argv += [flag, value]
    argv += settings_argv(caps, inv, program, draft=False)
    if speculative:
        argv += settings_argv(caps, inv, program, draft=True)
    if inv.settings.escape and caps.has("-e"):
        argv.append("-e")
    elif inv.settings.escape is False and caps.has("--no-escape"):
        argv.append("--no-escape")
    return argv


def spec_type_flags(spec_type: str | None) -> SpecTypeFlags:
    """llama.cpp's spelling of a speculative type (a type with no row: its own name, no sizes)."""
    name = spec_type or spectypes.DEFAULT
    return SPEC_TYPE_FLAGS.get(name) or SpecTypeFlags(name)


def spec_type_name(value: str) -> str:
    """llamaspec's name of a ``--spec-type`` value (``draft-simple`` is ``draft``)."""
    return next((name for name, row in SPEC_TYPE_FLAGS.items() if row.value == value), value)


def offered(caps: HelpFlags) -> tuple[str, ...]:
    """The speculative types the program's ``--spec-type`` lists, in llamaspec's names (not ``none``)."""
    return tuple(spec_type_name(v) for v in caps.spec_types if v != NO_SPECULATION)


def no_speculation_argv(caps: HelpFlags) -> list[str]:
    """``--spec-type none`` where the program's ``--help`` lists ``--spec-type`` with the value
    ``none`` (at 0c1e570: the speculative programs, llama-server and llama-cli; llama-completion
    lists no --spec-type), else nothing: a target-only run says so itself instead of trusting the
    build's default, which a newer llama.cpp may turn to an n-gram mode (upstream's proposal to
    turn ngram-mod on by default).

    It is a statement, not yet a guard: at 0c1e570 a ``--spec-type`` value is appended to the list
    the defaults, a llama.cpp config.ini and ``LLAMA_ARG_SPEC_TYPE`` made (common/arg.cpp), and
    ``none`` takes no type out of it. What holds whatever the build does: the measured programs
    run without ``LLAMA_ARG_*`` (:func:`measured_env`), and a baseline that drafted anything is
    refused (``contract.refuse_drafting_baseline``)."""
    if caps.has("--spec-type") and NO_SPECULATION in caps.spec_types:
        return ["--spec-type", NO_SPECULATION]
    return []


# llama.cpp reads every option of its common argument parser from the environment as well
# (common/arg.cpp: set_env, LLAMA_ARG_<NAME>, and LLAMA_ARG_NO_<NAME> for a negative switch), before
# the command line; LLAMA_API_KEY makes llama-server refuse requests without the key.
ENV_PREFIX = "LLAMA_ARG_"
ENV_NAMES = ("LLAMA_API_KEY",)


def measured_env(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The environment changes for a measured llama.cpp program (``proc``: None removes a
    variable): every ``LLAMA_ARG_*`` and ``LLAMA_API_KEY`` of ``environ`` (the process's own by
    default) cleared, so that what runs is what its command line says, the line the measurement
    stores and the deploy command prints (``LLAMA_ARG_SPEC_TYPE=ngram-mod`` would turn speculation on
    in the baseline, ``LLAMA_ARG_THREADS`` change both sides unseen). The first time any is
    cleared, a warning names them."""
    environ = os.environ if environ is None else environ
    cleared = sorted(k for k in environ if k.startswith(ENV_PREFIX) or k in ENV_NAMES)
    if cleared:
        _warn_cleared(tuple(cleared))
    return dict.fromkeys(cleared)


@functools.lru_cache(maxsize=8)
def _warn_cleared(names: tuple[str, ...]) -> None:
    log.warning("the environment sets %s: cleared for the measured llama.cpp programs (what is measured is what "
                "their command line says)", ", ".join(names))


def draft_free_modes(caps: HelpFlags, role: str) -> tuple[str, ...]:
    """The draft-free modes the program with this role runs: those its ``--spec-type`` lists that
    it runs without a draft model (``spectypes``: llama-speculative-simple's n-gram modes)."""
    return tuple(t for t in offered(caps) if spectypes.of(t).draft_free and spectypes.of(t).runs_on(role))


def spec_type_argv(caps: HelpFlags, settings: Settings) -> list[str]:
    """``--spec-type`` with the build's name for the settings' type, and the mode's size flags; a
    type the program does not list, or a size the mode has no flag for, is refused."""
    name = Path(caps.program).name
    spec_type = settings.spec_type or spectypes.DEFAULT
    row = spec_type_flags(spec_type)
    flag = pick(caps, "spec type", ("--spec-type",))
    if caps.spec_types and row.value not in caps.spec_types:
        raise LlamaspecError(f"{name} ({caps.version.commit}) does not know --spec-type {row.value}",
                             hint=f"it offers: {', '.join(offered(caps))}")
    argv = [flag, row.value]
    for setting in NGRAM_SIZES:
        value = getattr(settings, setting)
        if value is None:
            continue
        names = row.sizes.get(setting)
        if not names:
            raise LlamaspecError(f"{setting} has no meaning for spec_type {spec_type}",
                                 hint=f"{setting} applies to: {', '.join(m for m, r in SPEC_TYPE_FLAGS.items() if r.sizes)}")
        argv += [pick(caps, f"{setting} of {spec_type}", names), str(value)]
    return argv


# The draft side's settings without a built-in default: refused in a draft-free mode when set
# (draft_max and draft_gpu_layers have defaults and stay unused there).
DRAFT_ONLY = tuple(name for name, row in FLAG_TABLE.items() if row.draft and getattr(DEFAULTS, name) is None)


def check_spec_type(settings: Settings, draft: str | None, draft_free: Sequence[str]) -> None:
    """Refuse a case whose speculative type and models or settings disagree, for every llama.cpp
    engine: a draft-free mode with a draft model or a draft-only setting, a type that needs a draft
    model without one, n-gram sizes with a draft model. ``draft``: the case's draft model's label;
    ``draft_free``: the draft-free modes the engine offers (for the hint)."""
    spec_type = settings.spec_type or spectypes.DEFAULT
    if spectypes.of(spec_type).draft_free:
        if draft is not None:
            raise LlamaspecError(f"spec_type {spec_type} is draft-free, but the case names draft model {draft}",
                                 hint="drop the draft model, or use spec_type draft")
        for name in DRAFT_ONLY:
            if getattr(settings, name) is not None:
                raise LlamaspecError(f"{name} applies to a draft model, not to spec_type {spec_type}",
                                     hint=f"drop {name}, or use spec_type draft")
        return
    if draft is None:
        raise LlamaspecError(f"spec_type {spec_type} needs a draft model",
                             hint="give the case a draft model (-md), or a draft-free mode: "
                                  + (", ".join(draft_free) or "none in this build"))
    for name in NGRAM_SIZES:
        if getattr(settings, name) is not None:
            raise LlamaspecError(f"{name} applies to n-gram modes, not to spec_type {spec_type}",
                                 hint=f"drop {name}, or set spec_type to one of: "
                                      f"{', '.join(m for m, r in SPEC_TYPE_FLAGS.items() if r.sizes)}")


def longest_ngram_draft(caps: HelpFlags, settings: Settings) -> int | None:
    """A draft-free mode's longest draft: its m-gram size as set, else the default the program's
    ``--help`` states for that flag; None for a mode that has no such flag (ngram-cache)."""
    if settings.ngram_size_m is not None:
        return settings.ngram_size_m
    names = spec_type_flags(settings.spec_type).sizes.get("ngram_size_m", ())
    flag = caps.pick(names)
    default = caps.default_of(flag) if flag else None
    return int(default) if default is not None and default.isdigit() else None


def speculative_argv(caps: HelpFlags, program: Path, inv: Invocation, role: str) -> list[str]:
    """The command line of the speculative program ``role`` (speculative or speculative-simple):
    with the draft model, or in a draft-free mode the program runs without one (``spectypes``:
    llama-speculative-simple's n-gram modes; llama-speculative lists them in ``--spec-type``, an
    option table shared by every program, but stops with "--model-draft is required" at 0c1e570)."""
    spec_type = inv.settings.spec_type or spectypes.DEFAULT
    kind = spectypes.of(spec_type)
    if kind.draft_free and not caps.has("--spec-type"):
        raise LlamaspecError(f"{program.name} ({caps.version.commit}) has no --spec-type: it cannot run the draft-free "
                             f"mode {spec_type}", hint="use a llama.cpp build from 2026 on (`llamaspec build`), or llama-server")
    spec = spec_type_argv(caps, inv.settings) if caps.has("--spec-type") else []
    if kind.draft_free and not kind.runs_on(role):
        runs = " or ".join(f"--program {p}" for p in kind.programs)
        raise LlamaspecError(f"{program_binary(role)} cannot run --spec-type {spec_type}: it requires a draft model whatever "
                             "--spec-type says", hint=f"use {runs + ', which runs it without a draft, ' if runs else ''}"
                                                      "or llama-server (`llamaspec run -- llama-server -m T.gguf "
                                                      f"--spec-type {spec_type}`, or engine: llama-server)")
    if kind.needs_draft and inv.draft is None:
        here = draft_free_modes(caps, role)
        elsewhere = [t for t in offered(caps) if spectypes.of(t).draft_free and spectypes.of(t).programs]
        raise LlamaspecError(f"{program.name} needs a draft model for spec_type {spec_type}",
                             hint="give the case a draft model (-md)" + (f", or a draft-free mode: {', '.join(here)}" if here
                                  else f", or a draft-free mode ({', '.join(elsewhere)}) with --program "
                                       f"{spectypes.of(elsewhere[0]).programs[0]}"
                                  if elsewhere else ""))
    if kind.draft_free and inv.draft is not None:
        raise LlamaspecError(f"spec_type {spec_type} is draft-free, but a draft model is given",
                             hint="drop the draft model, or use spec_type draft")
    argv = [str(program), *common_argv(caps, inv, role), *spec]
    argv.extend(inv.settings.extra_args or ())
    return argv


def completion_argv(caps: HelpFlags, program: Path, inv: Invocation) -> list[str]:
    """The target-only baseline's command line (llama-completion, or llama-cli/main on older builds),
    with ``--spec-type none`` where its ``--help`` offers it (:func:`no_speculation_argv`)."""
    argv = [str(program), *common_argv(caps, inv, "completion")]
    if caps.has("-no-cnv"):
        argv.append("-no-cnv")  # plain completion of the prompt, never chat mode
    argv += no_speculation_argv(caps)
    argv.extend(inv.settings.extra_args or ())
    return argv


def gpu_layers(intent: int | str | None, accel: str, generation: str) -> int | None:
    """Map the experiment's offload intent onto -ngl for this build.

    "all" means every layer on the GPU. On 2023 Metal builds any ``-ngl > 0`` offloaded the whole
    model (the write-up's ``-ngl 1``), so it stays 1 there; from 2024 on -ngl counts layers.
    A CPU build gets an explicit 0: there is nothing to offload, and defaults drift.
    """
    if intent is None:
        return None
    if accel == "cpu" or intent == "none":
        return 0
    if intent == "all":
        return 1 if (generation == "2023" and accel == "metal") else GPU_ALL
    return int(intent)
