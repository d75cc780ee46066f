"""Generation settings: the one ``Settings`` type, its defaults, its schema and its sweep parsing.

Every setting is one field of :class:`Settings`, described once in its field metadata:

- ``check``: how a YAML value is validated (``Check``), the schema of ``experiments/*.yaml``;
- ``default``: the built-in default (None: the engine decides);
- ``sweep``: how one value of a sweep axis is parsed from the command line (absent: not sweepable);
- ``engine``: the one backend that has it (None: all of them);
- ``side``: which run it affects: ``target`` (baseline and speculative alike: part of what makes
  two baselines comparable), ``draft`` (the speculative side only), or ``run`` (neither: timeouts).

Adding a setting is one field here plus its row in each engine's flag table
(``llamaspec/llamacpp/flags.py`` for llama.cpp: one row serves the command-line programs and
llama-server alike). Precedence, stated once:
command line > case settings > experiment settings > these defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamaspec.measure import spectypes

# --- value checks (the schema) ----------------------------------------------------------------


class SettingError(ValueError):
    """A value that does not fit a setting; the message says what was expected. Raised by a
    ``Settings`` with a bad value, ``setting`` names the field (the caller names the file and key,
    or the command-line flag)."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


def _kind(value: Any, kinds: tuple[type, ...], name: str) -> None:
    if isinstance(value, bool):
        raise SettingError(f"expected {name}, got a boolean")
    if not isinstance(value, kinds):
        raise SettingError(f"expected {name}, got {type(value).__name__} {value!r}")


def _int(value: Any) -> int:
    _kind(value, (int,), "int")
    if value < 0:
        raise SettingError(f"must not be negative, got {value}")
    return value


def _count(value: Any) -> int:
    """A count of something that must exist: threads, tokens, slots, a context (0 would mean "all
    cores" or "the model's" to llama.cpp, not what was asked)."""
    _kind(value, (int,), "int")
    if value < 1:
        raise SettingError(f"must be at least 1, got {value}")
    return value


def _signed_int(value: Any) -> int:
    _kind(value, (int,), "int")
    return value


def _float(value: Any) -> float:
    _kind(value, (int, float), "float")
    if value < 0:
        raise SettingError(f"must not be negative, got {value:g}")
    return float(value)


def _positive(value: Any) -> float:
    value = _float(value)
    if value <= 0:
        raise SettingError(f"must be more than 0, got {value:g}")
    return value


def _probability(value: Any) -> float:
    value = _float(value)
    if value > 1.0:
        raise SettingError(f"must be between 0 and 1, got {value}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SettingError(f"expected true or false, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise SettingError(f"expected str, got {type(value).__name__} {value!r}")
    return value


def _gpu(value: Any) -> int | str:
    if isinstance(value, str) and value in ("all", "none"):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise SettingError(f"expected 'all', 'none' or a layer count, got {value!r}")


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if isinstance(value, bool) and "on" in choices:  # YAML reads a bare on/off as a boolean
            value = "on" if value else "off"
        if value not in choices:
            raise SettingError(f"expected one of {', '.join(choices)}, got {value!r}")
        return str(value)
    return check


def _str_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise SettingError(f"expected a list, got {type(value).__name__}")
    return tuple(_str(v) for v in value)


def _endpoints(value: Any) -> tuple[str, ...]:
    items = tuple(value.split(",")) if isinstance(value, str) else _str_list(value)
    for item in items:
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingError(f"expected host:port, got {item!r}")
    return tuple(i.strip() for i in items)


def _gpu_arg(text: str) -> int | str:
    return text if text in ("all", "none") else int(text)


def _setting(check: Callable[[Any], Any], *, default: Any = None, sweep: Callable[[str], Any] | None = None,
             side: str = "target", engine: str | None = None, help: str = "") -> Any:
    """One setting's schema. ``engine``: the one backend that has it (None: every engine maps it)."""
    return field(default=None, metadata={"check": check, "default": default, "sweep": sweep, "side": side,
                                         "engine": engine, "help": help})


# Settings.program is the short name a user types (the build's role for the program); a measurement
# records the program by its binary's name as llama.cpp names it (Measurement.program, which is also
# the name of the program's round profile). This is the one mapping between the two.
PROGRAM_BINARIES = {"speculative": "llama-speculative", "speculative-simple": "llama-speculative-simple"}
PROGRAM_CHOICES = tuple(PROGRAM_BINARIES)


def program_binary(program: str) -> str:
    """The name a measurement records for ``program``: a ``Settings.program`` is mapped to its binary's
    name (``speculative-simple`` -> ``llama-speculative-simple``); a name that already is one
    (``llama-server``, ``transformers-assisted``) is returned as given, so either spelling reads the same."""
    return PROGRAM_BINARIES.get(program, program)

DRAFT_SCHEDULES = ("constant", "heuristic", "heuristic_transient")
DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Settings:
    """Generation settings; None means "not set here" (the next level down decides).

    Every value is checked here, once, by its field's ``check`` (whoever builds one: a YAML file,
    a command-line flag, a sweep axis, the cluster, a library caller): a bad value raises
    SettingError naming the field, and nothing invalid reaches an engine."""

    n_predict: int | None = _setting(_count, default=256, help="tokens to generate")
    seed: int | None = _setting(_signed_int, default=20)
    temperature: float | None = _setting(_float, default=0.0)
    draft_max: int | None = _setting(_count, default=8, sweep=int, side="draft", help="tokens drafted per round (k)")
    draft_min: int | None = _setting(_int, sweep=int, side="draft",
                                     help="drop a round's draft when it is shorter than this (not every program reads it)")
    draft_p_min: float | None = _setting(_probability, sweep=float, side="draft",
                                         help="stop drafting below this draft probability (not every program reads it)")
    threads: int | None = _setting(_count, sweep=int, help="CPU threads (default: physical cores)")
    threads_draft: int | None = _setting(_count, side="draft")
    gpu_layers: int | str | None = _setting(_gpu, default="all", sweep=_gpu_arg, help="offload intent: all, none or N")
    draft_gpu_layers: int | str | None = _setting(_gpu, default="all", side="draft")
    ctx_size: int | None = _setting(_count, default=4096)
    batch_size: int | None = _setting(_count)
    flash_attn: str | None = _setting(_choice("on", "off", "auto"), sweep=str, help="flash attention: on, off or auto")
    escape: bool | None = _setting(_bool, default=True)
    spec_type: str | None = _setting(_str, default="draft", sweep=str, side="draft",
                                     help="draft (a draft model) or a draft-free n-gram mode (ngram-simple, ngram-mod, ...)")
    ngram_size_n: int | None = _setting(_count, sweep=int, side="draft",
                                        help="n-gram modes: length of the lookup n-gram (llama.cpp)")
    ngram_size_m: int | None = _setting(_count, sweep=int, side="draft",
                                        help="n-gram modes: length of the drafted m-gram (llama.cpp)")
    parallel: int | None = _setting(_count, engine="llama-server", sweep=int, help="llama-server slots, served to as many concurrent clients")
    program: str | None = _setting(_choice(*PROGRAM_CHOICES), default="speculative", sweep=str, side="draft",
                                   help="llama.cpp's speculative program: speculative or speculative-simple "
                                        "(default: speculative; speculative-simple for a draft-free n-gram mode)")
    timeout: float | None = _setting(_positive, default=1800.0, side="run", help="seconds one generation may take (a llama.cpp process, a server request)")
    # Passed verbatim to both sides (the baseline too): part of what makes two baselines the same.
    extra_args: tuple[str, ...] | None = _setting(_str_list, default=(), side="target",
                                                  help="flags passed through verbatim to every program, baseline included")
    # transformers only (llama.cpp refuses them when set); draft_max is num_assistant_tokens there, draft_p_min assistant_confidence_threshold
    draft_schedule: str | None = _setting(_choice(*DRAFT_SCHEDULES), engine="transformers", sweep=str, side="draft",
                                          help="transformers' num_assistant_tokens_schedule: constant, heuristic or heuristic_transient")
    dtype: str | None = _setting(_choice(*DTYPES), engine="transformers", sweep=str, help="transformers: weight dtype of the target: auto (the checkpoint's), float32, float16 or bfloat16")
    draft_dtype: str | None = _setting(_choice(*DTYPES), engine="transformers", side="draft", help="transformers: weight dtype of the assistant (default: dtype)")
    load_in: str | None = _setting(_choice("8bit", "4bit", "none"), engine="transformers", help="transformers: bitsandbytes 8bit or 4bit target (CUDA GPU only)")
    device: str | None = _setting(_str, engine="transformers", help="transformers: cpu, cuda, cuda:N, mps or auto (default: the engine's accel)")
    universal_assisted: bool | None = _setting(_bool, engine="transformers", side="draft", help="transformers: allow an assistant with another tokenizer")
    rpc: tuple[str, ...] | None = _setting(_endpoints, default=(), engine="llama.cpp",
                                         help="llama.cpp RPC servers (host:port) holding the target's layers; the draft stays local")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            try:
                object.__setattr__(self, f.name, f.metadata["check"](value))  # the checked form: 2 -> 2.0, a list -> a tuple
            except SettingError as exc:
                raise SettingError(str(exc), setting=f.name) from None

    def over(self, base: Settings) -> Settings:
        """These settings, falling back to ``base`` where unset."""
        mine = dataclasses.asdict(self)
        theirs = dataclasses.asdict(base)
        return Settings(**{k: mine[k] if mine[k] is not None else theirs[k] for k in mine})

    def with_defaults(self) -> Settings:
        return self.over(defaults_for(self.spec_type))

    def target_side(self) -> dict[str, Any]:
        """The settings a target-only baseline depends on (what makes two baselines the same)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["side"] == "target"}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("extra_args", "rpc"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)


FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(Settings)}
DEFAULTS = Settings(**{name: f.metadata["default"] for name, f in FIELDS.items()})
SWEEPABLE: dict[str, Callable[[str], Any]] = {name: f.metadata["sweep"] for name, f in FIELDS.items() if f.metadata["sweep"]}


def defaults_for(spec_type: str | None) -> Settings:
    """The built-in defaults of a case of this spec type: ``DEFAULTS``, with the program that runs
    the type (``spectypes``: a draft-free n-gram mode runs on llama-speculative-simple, which needs
    no draft model). What a setting left at its default is compared with."""
    program = spectypes.default_program(spec_type or DEFAULTS.spec_type, str(DEFAULTS.program))
    return DEFAULTS if program == DEFAULTS.program else dataclasses.replace(DEFAULTS, program=program)


def check(name: str, value: Any) -> Any:
    """A validated value for setting ``name`` (raises SettingError)."""
    return FIELDS[name].metadata["check"](value)
