"""Experiments: YAML files in ``experiments/`` describing what to run, validated strictly.

An experiment has defaults (``settings``) and one or more ``cases``; a case names a target
model, a draft model (or a draft-free ``spec_type``), a prompt, optional per-case settings and
optional reference figures (what a write-up reported). Precedence, stated once:
command line > case settings > experiment settings > built-in defaults.

Errors point at the key: ``cases[1].draft.model: unknown model 'x'``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import spectypes
from llamaspec.measure.contract import GIVEN, Message  # GIVEN: ModelRef.model of a model named by its location
from llamaspec.measure.settings import DEFAULTS as DEFAULT_SETTINGS
from llamaspec.measure.settings import FIELDS as SETTING_FIELDS
from llamaspec.measure.settings import SettingError, Settings
from llamaspec.measure.summary import Reference
from llamaspec.registry import engines

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class ModelRef:
    model: str  # a catalog name, or GIVEN
    variant: str  # the catalog variant, or (GIVEN) the model's location

    @property
    def given(self) -> bool:
        return self.model == GIVEN

    @property
    def label(self) -> str:
        return self.variant if self.given else f"{self.model}:{self.variant}"


@dataclass(frozen=True)
class Case:
    name: str
    target: ModelRef
    draft: ModelRef | None
    prompt: str | None
    prompt_file: str | None
    settings: Settings
    reference: Reference | None = None
    drafts: tuple[ModelRef, ...] = ()  # drafts to compare (the first is ``draft``): sweep measures each
    category: str | None = None  # the prompt's category within a workload (code, chat, ...)
    chat: bool = False  # the prompt is a chat message: sent through the target's chat template
    history: tuple[Message, ...] = ()  # a chat prompt's earlier turns (role, content), before ``prompt``


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    engine: str  # an engine name of llamaspec.registry.engines.names() (the file's ``engine:``, or ``backend:`` as before)
    repeats: int | str  # pairs per point, or "auto"
    cases: tuple[Case, ...]
    path: str = ""
    settings: Settings = field(default_factory=Settings)
    sha256: str | None = None  # of the experiment file as loaded (stored with every run)
    prompts: str | dict[str, Any] | None = None  # a prompt set (llamaspec.studies.prompts): FILE | spec-bench:PATH | alpaca

    def with_overrides(self, overrides: Settings, repeats: int | str | None = None, prompt: str | None = None,
                       prompt_file: str | None = None) -> Experiment:
        """Apply command-line overrides to every case (command line wins)."""
        cases = tuple(
            dataclasses.replace(
                c,
                settings=overrides.over(c.settings),
                prompt=prompt if prompt is not None else (None if prompt_file else c.prompt),
                prompt_file=prompt_file if prompt_file is not None else (None if prompt else c.prompt_file),
            )
            for c in self.cases
        )
        return dataclasses.replace(self, cases=cases, repeats=repeats or self.repeats)

    @property
    def uses_rpc(self) -> bool:
        """Whether any case puts its target on RPC workers (its ``rpc:`` setting): the engine is then
        opened on a build with llama.cpp's RPC backend, chosen without being asked."""
        return any(c.settings.rpc for c in self.cases)


# --- validation ------------------------------------------------------------------------------

class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> LlamaspecError:
        return LlamaspecError(f"{self.source}: {where}: {message}", hint="see experiments/README.md for the schema")

    def mapping(self, value: Any, where: str, allowed: Mapping[str, object], required: tuple[str, ...] = ()) -> dict:
        """``value``, a mapping of ``allowed`` keys, without those set to null (as if not given),
        each value of the type(s) ``allowed`` gives its key (:meth:`typed`; a key given another
        schema is not checked here)."""
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), [str(k) for k in allowed], n=1)
                raise self.fail(f"{where}.{key}" if where else str(key),
                                "unknown key" + (f" (did you mean {close[0]!r}?)" if close else ""))
        for key in required:
            if key not in value or value[key] is None:
                raise self.fail(f"{where}.{key}" if where else key, "missing")
        return {key: self.typed(v, f"{where}.{key}" if where else key, kind) if isinstance(kind := allowed[key], (type, tuple))
                else v for key, v in value.items() if v is not None}

    def typed(self, value: Any, where: str, kind: type | tuple[type, ...]) -> Any:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise self.fail(where, f"expected {'/'.join(k.__name__ for k in kinds)}, got a boolean")
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds):
            raise self.fail(where, f"expected {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__} {value!r}")
        return value


def parse_settings(c: _Checker, raw: Any, where: str) -> Settings:
    if raw is None:
        return Settings()
    raw = c.mapping(raw, where, SETTING_FIELDS)
    try:
        return Settings(**{key: value for key, value in raw.items() if value is not None})  # checked there, once
    except SettingError as exc:
        raise c.fail(f"{where}.{exc.setting}", str(exc)) from None


REFERENCE_KEYS = {f.name: str if f.name in ("source", "hardware") else int if f.name.startswith("n_") else float
                  for f in dataclasses.fields(Reference)}


def parse_reference(c: _Checker, raw: Any, where: str) -> Reference | None:
    if raw is None:
        return None
    if isinstance(raw, dict) and "accept_pct" in raw:  # the key before acceptance was a fraction everywhere
        pct = raw["accept_pct"]
        raise c.fail(f"{where}.accept_pct", "renamed: write acceptance as a fraction"
                     + (f" (acceptance: {pct / 100:g})" if isinstance(pct, (int, float)) else ""))
    values = c.mapping(raw, where, REFERENCE_KEYS)
    if values.get("acceptance") is not None and not 0 <= values["acceptance"] <= 1:
        raise c.fail(f"{where}.acceptance", f"{values['acceptance']} is not a fraction (61.514% is 0.61514)")
    return Reference(**values)


def parse_model(c: _Checker, raw: Any, where: str, known: Callable[[str, str], str | None] | None,
                base_dir: Path | None = None) -> ModelRef:
    """``{model: NAME, variant: VARIANT}`` from the catalog, or a model by its location:
    ``{file: PATH}`` (relative to the experiment file) or ``{hf: USER/REPO[:QUANT]}``."""
    if isinstance(raw, dict) and ("file" in raw or "hf" in raw):
        raw = c.mapping(raw, where, {"file": str, "hf": str})
        if len(raw) != 1:
            raise c.fail(where, "give one of file and hf")
        key, text = next(iter(raw.items()))
        if key == "file":
            path = Path(text).expanduser()
            text = str(path if path.is_absolute() else (base_dir or Path.cwd()) / path)
        from llamaspec.models import given

        try:
            spec = given.parse(text)
        except LlamaspecError as exc:
            raise c.fail(f"{where}.{key}", exc.message) from None
        if spec.kind != ("file" if key == "file" else "hub"):
            raise c.fail(f"{where}.{key}", f"{text!r} is not a {'GGUF path' if key == 'file' else 'USER/REPO[:QUANT]'}")
        return ModelRef(GIVEN, spec.text)
    raw = c.mapping(raw, where, {"model": str, "variant": str}, required=("model", "variant"))
    ref = ModelRef(raw["model"], raw["variant"])
    if known is not None:
        problem = known(ref.model, ref.variant)
        if problem:
            key = "variant" if "variant" in problem else "model"
            raise c.fail(f"{where}.{key}", problem)
    return ref


TOP_KEYS = {"name": str, "description": str, "engine": str, "backend": str, "repeats": (int, str), "settings": dict, "cases": list,
            "prompts": (str, dict), "study": str, "files": dict}  # study, files: kept by llamaspec.studies.adhoc
CASE_KEYS = {"name": str, "target": dict, "draft": dict, "drafts": list, "prompt": str, "prompt_file": str, "settings": dict,
             "reference": dict, "category": str, "chat": bool, "history": list}


def parse_history(c: _Checker, raw: Any, where: str) -> tuple[Message, ...]:
    """A chat prompt's earlier turns: a list of ``{role: ..., content: ...}``."""
    turns = []
    for i, turn in enumerate(raw or []):  # a list: checked as the case's key
        turn = c.mapping(turn, f"{where}[{i}]", {"role": str, "content": str}, required=("role", "content"))
        turns.append((turn["role"], turn["content"]))
    return tuple(turns)


def parse(data: Any, source: str, known_model: Callable[[str, str], str | None] | None = None,
          base_dir: Path | None = None) -> Experiment:
    """Validate a loaded YAML document into an Experiment."""
    c = _Checker(source)
    top = c.mapping(data, "", TOP_KEYS, required=("name", "cases"))
    name = top["name"]
    # ``engine:`` is the word; ``backend:``, the older one, is still read (not both: which would win?)
    if "engine" in top and "backend" in top:
        raise c.fail("backend", "give the engine once: `engine:` (backend: is its older name)")
    key = "backend" if "backend" in top else "engine"
    engine = top.get(key, "llama.cpp")
    if engine not in engines.names():
        raise c.fail(key, f"unknown engine {engine!r} (known: {', '.join(engines.names())})")
    repeats = top.get("repeats", 1)
    if repeats != "auto":
        repeats = c.typed(repeats, "repeats", int)
        if repeats < 1:
            raise c.fail("repeats", "must be at least 1 (or auto)")
    settings = parse_settings(c, top.get("settings"), "settings")
    raw_cases = top["cases"]
    if not raw_cases:
        raise c.fail("cases", "needs at least one case")
    cases = []
    for i, raw in enumerate(raw_cases):
        where = f"cases[{i}]"
        raw = c.mapping(raw, where, CASE_KEYS, required=("target",))
        case_settings = parse_settings(c, raw.get("settings"), f"{where}.settings").over(settings)
        prompt = raw.get("prompt")
        prompt_file = raw.get("prompt_file")
        if prompt_file is not None:
            resolved = (base_dir or Path.cwd()) / prompt_file
            if not resolved.is_file():
                raise c.fail(f"{where}.prompt_file", f"file not found: {resolved}")
            prompt_file = str(resolved)
        if (prompt is None) == (prompt_file is None) and not (top.get("prompts") and prompt is None and prompt_file is None):
            raise c.fail(where, "give exactly one of prompt and prompt_file (or a prompt set: top-level prompts)")
        drafts = tuple(parse_model(c, d, f"{where}.drafts[{j}]", known_model, base_dir)
                       for j, d in enumerate(raw.get("drafts") or []))
        draft = parse_model(c, raw["draft"], f"{where}.draft", known_model, base_dir) if raw.get("draft") is not None else None
        if drafts:  # compared as one dimension: each by its location (a catalog one by NAME:VARIANT)
            drafts = tuple(ModelRef(GIVEN, d.label) for d in drafts)
            if draft is not None and draft.label != drafts[0].label:
                raise c.fail(f"{where}.drafts", "the first of drafts is the case's draft: give it first, or drop draft")
            draft = drafts[0]
        if draft is None and spectypes.needs_draft(case_settings.over(DEFAULT_SETTINGS).spec_type):
            raise c.fail(f"{where}.draft", "missing (or set settings.spec_type to a draft-free n-gram mode)")
        cases.append(Case(
            name=raw.get("name", f"case{i}"),
            target=parse_model(c, raw["target"], f"{where}.target", known_model, base_dir),
            draft=draft,
            prompt=prompt,
            prompt_file=prompt_file,
            settings=case_settings,
            reference=parse_reference(c, raw.get("reference"), f"{where}.reference"),
            drafts=drafts,
            category=raw.get("category"),
            chat=raw.get("chat", False),
            history=parse_history(c, raw.get("history"), f"{where}.history"),
        ))
    names = [case.name for case in cases]
    if len(set(names)) != len(names):
        raise c.fail("cases", f"case names must be unique, got {names}")
    return Experiment(name, top.get("description", ""), engine, repeats, tuple(cases), source, settings,
                      prompts=top.get("prompts"))


def locate(name_or_path: str) -> Path:
    """An experiment by path, or by name: ``NAME.yaml`` in the current folder, then in
    ``~/.config/llamaspec/experiments``, then among the shipped ones; the nearest wins. Where it
    was found is said once per name (a warning when a farther one of the same name is passed over)."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        if not candidate.is_file():
            raise LlamaspecError(f"experiment file not found: {candidate}", hint="check the path")
        return candidate
    found = find(name_or_path)
    if not found:
        study = study_path(name_or_path)  # a study made from the command line (llamaspec.studies.adhoc), by its name
        if study.is_file():
            return study
        known = sorted(known_experiments())
        raise LlamaspecError(
            f"unknown experiment {name_or_path!r}",
            hint=f"known experiments: {', '.join(known) or '(none)'}; or NAME.yaml in the current folder or in "
                 f"{paths.config_dir() / 'experiments'}, or a path to a YAML file; or your own models: "
                 "-m TARGET.gguf -md DRAFT.gguf")
    (where, path), others = found[0], found[1:]
    if name_or_path not in _said:
        _said.add(name_or_path)
        if others:
            log.warning("experiment %s: %s (%s), which comes before %s", name_or_path, path, where,
                        " and ".join(f"{p} ({w})" for w, p in others))
        else:
            log.info("experiment %s: %s (%s)", name_or_path, path, where)
    return path


_said: set[str] = set()  # names whose place was already said in this process


def find(name: str) -> list[tuple[str, Path]]:
    """Every experiment file of this name, nearest first, each with where it is (``current
    folder``, ``your experiments``, ``shipped``); one file reached two ways counts once."""
    found: list[tuple[str, Path]] = []
    seen: set[Path] = set()
    for where, folder in paths.experiment_dirs():
        for suffix in (".yaml", ".yml"):
            path = folder / f"{name}{suffix}"
            if path.is_file() and path.resolve() not in seen:
                seen.add(path.resolve())
                found.append((where, path))
                break
    return found


def known_experiments() -> dict[str, tuple[str, Path]]:
    """The experiments reachable by name outside the current folder (yours, then the shipped ones),
    the nearest of each name: name -> (where, path)."""
    known: dict[str, tuple[str, Path]] = {}
    for where, folder in paths.experiment_dirs():
        if where == "current folder":
            continue  # any YAML file can lie there; it is an experiment once named
        for path in sorted(folder.glob("*.y*ml")) if folder.is_dir() else ():
            if path.suffix in (".yaml", ".yml"):
                known.setdefault(path.stem, (where, path))
    return known


def studies_dir() -> Path:
    """Where studies made from the command line (``llamaspec.studies.adhoc``) are kept, one file each."""
    return paths.data_dir() / "studies"


def study_path(name: str) -> Path:
    return studies_dir() / f"{name}.yaml"


def catalog_checker() -> Callable[[str, str], str | None]:
    """Checks model names against the model catalog (models/catalog.yaml)."""
    from llamaspec import models

    catalog = models.load_catalog()

    def known(model: str, variant: str) -> str | None:
        if model not in catalog.models:
            return f"unknown model {model!r} (known: {', '.join(sorted(catalog.models))})"
        variants = catalog.models[model].variants
        if variant not in variants:
            return f"unknown variant {variant!r} of {model} (its variants: {', '.join(variants)})"
        return None

    return known


def load(name_or_path: str, known_model: Callable[[str, str], str | None] | None = None) -> Experiment:
    """Load and validate an experiment; model names are checked against the catalog unless
    ``known_model`` says otherwise."""
    import yaml

    path = locate(name_or_path)
    raw = path.read_bytes()
    try:
        data = yaml.load(raw.decode(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when present
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise LlamaspecError(f"{path}: malformed YAML{where}: {problem}", hint="fix the YAML syntax (indentation, quotes, colons)") from exc
    exp = parse(data, str(path), known_model or catalog_checker(), base_dir=path.parent)
    # a study kept by llamaspec.studies.adhoc keeps its identity (the models' sha256 and settings), not the file's
    study = data.get("study") if isinstance(data, dict) else None
    return dataclasses.replace(exp, sha256=study if isinstance(study, str) else hashlib.sha256(raw).hexdigest())
