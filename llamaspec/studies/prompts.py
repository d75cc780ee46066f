"""Prompt sets: many prompts, each with an id and a category, from a file or a hub data set.

Sources (``load(source)``):

- a JSONL file: one object per line with ``prompt``, optional ``category``, ``id``, ``chat``
  (send it through the model's chat template; default: the set's ``format``) and ``history``
  (a chat's earlier turns, ``{"role": "user" | "assistant", "content": ...}`` alternating from a
  user turn to an assistant turn, before the user's ``prompt``). An optional first line
  ``{"about": {...}}`` says what the file is (:class:`About`: its name, source, licence,
  categories, version). Malformed lines are reported with their line numbers and skipped; the
  others still run.
- ``spec-bench:PATH``: Spec-Bench's ``question.jsonl`` (``question_id``, ``category``, ``turns``);
  the first turn by default, or (``turns: all``) every turn as a prompt of its own, carrying
  the earlier turns of the conversation before it.
- ``speed-bench:PATH``: NVIDIA's SPEED-Bench (``question_id``, ``category``, ``sub_category``,
  ``turns``, ``source``, ``src_id``, ``difficulty``, ``multiturn``), as its ``.parquet`` files
  ship (read with pyarrow, the ``prompts`` extra) or as ``.jsonl``; its turns as Spec-Bench's.
- ``alpaca`` (``tatsu-lab/alpaca`` on the Hugging Face hub) or ``alpaca:PATH`` (a local copy:
  ``.json``, ``.jsonl`` or ``.parquet``): instruction plus input, either as a chat message
  (``format: chat``) or in Alpaca's own prompt template (``format: alpaca``).

The readers of the sets others publish (Spec-Bench, SPEED-Bench, Alpaca) are in
:mod:`llamaspec.studies.public_sets`, the prompt record they all make in
:mod:`llamaspec.studies.prompt_records`; the JSONL format, the set and its checks are here.

Whatever the source, a prompt whose text is blank is skipped, a prompt repeated (the same text,
history and format as an earlier one) is measured once, and an id given twice is made unique
(``a``, ``a#2``): each said once, by line. ``limit`` keeps N prompts: the first N, or with
``seed`` a seeded random sample of N (the same seed always picks the same prompts, in file order).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Message
from llamaspec.studies import public_sets
from llamaspec.studies.prompt_records import NEEDS, Prompt, json_lines, no_prompts
from llamaspec.studies.public_sets import ALPACA_REPO

log = logging.getLogger(__name__)

FORMATS = ("chat", "raw", "alpaca")


@dataclass(frozen=True)
class About:
    """What a prompt file says of itself on its first line, ``{"about": {...}}``: which set it is,
    where its prompts come from and under which licence, kept with the prompts wherever they go."""

    name: str | None = None
    description: str | None = None
    source: str | None = None  # where the prompts come from ("written for llamaspec", a data set)
    licence: str | None = None
    version: str | None = None
    categories: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``NAME, version V (SOURCE; LICENCE)``, with what the file gives."""
        head = ", ".join(x for x in (self.name, f"version {self.version}" if self.version else None) if x)
        tail = "; ".join(x for x in (self.source, self.licence) if x)
        return f"{head} ({tail})" if head and tail else head or tail


ABOUT_TEXT_KEYS = ("name", "description", "source", "licence", "version")
ABOUT_KEYS = (*ABOUT_TEXT_KEYS, "categories")
ROLES = ("user", "assistant")  # a history's turns, alternating from the user's (the prompt is the next user turn)


@dataclass(frozen=True)
class PromptSource:
    """Where a prompt set comes from and how to read it."""

    kind: str  # jsonl | spec-bench | speed-bench | alpaca
    path: str | None = None  # None: alpaca from the hub
    format: str = "chat"  # chat | raw (jsonl, spec-bench, speed-bench); chat | alpaca | raw (alpaca)
    turns: str = "first"  # spec-bench, speed-bench: first | all
    limit: int | None = None
    seed: int | None = None

    @property
    def label(self) -> str:
        where = self.path or ALPACA_REPO
        return f"{self.kind}:{where}" + (f" (limit {self.limit}" + (f", seed {self.seed})" if self.seed is not None
                                                                       else ")") if self.limit else "")


@dataclass(frozen=True)
class PromptSet:
    source: PromptSource
    prompts: tuple[Prompt, ...]
    skipped: tuple[str, ...] = field(default=())  # "line 7: ..." for malformed, blank and repeated entries
    total: int = 0  # entries before --limit
    about: About | None = None  # the file's own first line, where it has one
    notes: tuple[str, ...] = field(default=())  # said but loaded: an id given twice, made unique

    def categories(self) -> list[str]:
        return sorted({p.category for p in self.prompts})


# Problems said one line each up to this many; past it, a count (a hub data set can repeat itself
# hundreds of times; `llamaspec prompts list` prints every one).
SAID_AT_MOST = 20


# The sources named by KIND:PATH that need their PATH: (what to write, where such a file is).
_NEEDS_PATH = {"spec-bench": ("spec-bench:PATH/question.jsonl", "Spec-Bench's data/spec_bench/question.jsonl"),
               "speed-bench": ("speed-bench:PATH.parquet (or .jsonl)",
                               "one of nvidia/SPEED-Bench's parquet files, e.g. its qualitative split")}


def parse_source(text: str, base_dir: Path | None = None, **options: Any) -> PromptSource:
    """``FILE`` | ``spec-bench:PATH`` | ``speed-bench:PATH`` | ``alpaca`` | ``alpaca:PATH``, with options
    (format, turns, limit, seed)."""
    kind, _, rest = text.partition(":")
    opts = {k: v for k, v in options.items() if v is not None}
    if kind == "alpaca":
        opts.setdefault("format", "chat")
        return PromptSource("alpaca", str(locate(rest, base_dir)) if rest else None, **opts)
    if kind in _NEEDS_PATH:
        if not rest:
            raise LlamaspecError(f"{kind} needs a path: {_NEEDS_PATH[kind][0]}", hint=_NEEDS_PATH[kind][1])
        return PromptSource(kind, str(locate(rest, base_dir)), **opts)
    return PromptSource("jsonl", str(locate(text, base_dir)), **opts)


def source_of(exp: Any, override: str | None = None, **options: Any) -> PromptSource:
    """The prompt set an experiment is studied over: the command line's (``override``), else the
    experiment's ``prompts:`` (a source, or a mapping: source, format, turns, limit, seed; the
    command line's options win), found next to the experiment file first."""
    base_dir = Path(exp.path).parent if getattr(exp, "path", "") else None
    spec = override if override is not None else getattr(exp, "prompts", None)
    if spec is None:
        raise LlamaspecError(f"experiment {exp.name} names no prompt set",
                             hint="pass --prompts FILE (or spec-bench:PATH, alpaca), or add prompts: to the experiment")
    if isinstance(spec, dict):
        spec = dict(spec)
        where = spec.pop("source", None)
        if not isinstance(where, str):
            raise LlamaspecError(f"{exp.path}: prompts.source: missing", hint="prompts: {source: FILE, format: chat}")
        unknown = set(spec) - {"format", "turns", "limit", "seed"}
        if unknown:
            raise LlamaspecError(f"{exp.path}: prompts: unknown key {sorted(unknown)[0]!r}",
                                 hint="keys: source, format, turns, limit, seed")
        return parse_source(where, base_dir, **{**spec, **{k: v for k, v in options.items() if v is not None}})
    return parse_source(spec, base_dir, **options)


def locate(path: str, base_dir: Path | None = None) -> Path:
    """A prompt file as given, next to the experiment, or by name in ``prompts/`` of your
    experiments (``~/.config/llamaspec/experiments/prompts``), then of the shipped ones."""
    candidates = [Path(path).expanduser()]
    if base_dir is not None:
        candidates.append(base_dir / path)
    for folder in (paths.config_dir() / "experiments" / "prompts", paths.experiments_dir() / "prompts"):
        candidates += [folder / path, folder / f"{path}.jsonl"]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    shipped = sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []
    raise LlamaspecError(f"prompt set not found: {path}",
                         hint=f"give a path to a JSONL file; shipped sets: {', '.join(shipped) or '(none)'}")


def load(source: PromptSource | str, base_dir: Path | None = None, *, warn: bool = True) -> PromptSet:
    """The prompts of ``source``. Malformed, blank and repeated entries are skipped and an id given
    twice is made unique, each said once, by line: logged as a warning (``warn``; off for a caller
    that prints the set's ``skipped`` and ``notes`` itself) and kept in the set."""
    if isinstance(source, str):
        source = parse_source(source, base_dir)
    if source.format not in FORMATS:
        raise LlamaspecError(f"unknown prompt format {source.format!r}", hint=f"use one of: {', '.join(FORMATS)}")
    about = None
    chat = source.format != "raw"
    if source.kind == "jsonl":
        prompts, skipped, about = load_jsonl(Path(source.path or ""), chat=chat)
    elif source.kind in ("spec-bench", "speed-bench"):
        prompts, skipped = public_sets.load_turns(source.kind, Path(source.path or ""), turns=source.turns, chat=chat)
    elif source.kind == "alpaca":
        prompts, skipped = public_sets.load_alpaca(Path(source.path) if source.path else None, fmt=source.format)
    else:
        raise LlamaspecError(f"unknown prompt set kind {source.kind!r}", hint="jsonl, spec-bench, speed-bench or alpaca")
    prompts, repeated = _drop_repeats(prompts)
    prompts, notes = _unique_ids(prompts)
    skipped = skipped + repeated
    if warn:
        where = source.path or ALPACA_REPO
        said = [f"skipped {line}" for line in skipped] + notes
        for line in said[:SAID_AT_MOST]:
            log.warning("%s: %s", where, line)
        if len(said) > SAID_AT_MOST:
            again = (source.path if source.kind == "jsonl" else f"{source.kind}:{source.path}" if source.path
                     else source.kind)
            log.warning("%s: %d more like these (llamaspec prompts list %s shows each)", where,
                        len(said) - SAID_AT_MOST, again)
    chosen = select(prompts, source.limit, source.seed)
    return PromptSet(source, tuple(chosen), tuple(skipped), len(prompts), about, tuple(notes))


# A prompt's tokens, guessed from its text before any model reads it (English and code run at about
# four characters a token with the usual BPE vocabularies): only to refuse, before anything runs,
# a prompt that cannot fit the context.
CHARS_PER_TOKEN = 4


def check_workload(prompts: Sequence[Prompt], ctx_size: int, n_predict: int) -> list[Prompt]:
    """The prompts a workload measures, checked against the context before anything runs: one whose
    text (its earlier turns included, at about :data:`CHARS_PER_TOKEN` characters a token) and the
    tokens to generate would not fit is refused, by line; one that fills more than half of it is said.
    (Repeated and blank prompts were left out, and said, when the set was loaded: :func:`load`.)"""
    for p in prompts:
        chars = len(p.prompt) + sum(len(text) for _, text in p.history)
        tokens = chars // CHARS_PER_TOKEN
        if tokens + n_predict > ctx_size:
            raise LlamaspecError(f"{p.where}: a prompt of {chars:,} characters (about {tokens:,} tokens) and "
                                 f"{n_predict} to generate do not fit the context of {ctx_size} tokens",
                                 hint="raise --ctx-size, or shorten or drop that prompt")
        if tokens > ctx_size // 2:
            log.warning("%s: a long prompt (about %d tokens of a %d context)", p.where, tokens, ctx_size)
    return list(prompts)


def workload_cases(prompts: Sequence[Prompt], target: Any, draft: Any, settings: Any, drafts: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """A workload's prompts as cases, the one way every route makes them: each prompt a case named
    by its id, with its category and chat form, at ``settings``, checked first against the context
    (:func:`check_workload`) at those settings over the one set of defaults (``Settings.with_defaults``)."""
    from llamaspec.studies.experiment import Case

    full = settings.with_defaults()
    return tuple(Case(p.id, target, draft, p.prompt, None, settings, drafts=drafts, category=p.category, chat=p.chat,
                      history=p.history) for p in check_workload(prompts, int(full.ctx_size), int(full.n_predict)))


def select(prompts: list[Prompt], limit: int | None, seed: int | None) -> list[Prompt]:
    """The first ``limit`` prompts, or a seeded sample of them (kept in file order)."""
    if limit is None or limit >= len(prompts):
        return list(prompts)
    if seed is None:
        return list(prompts[:limit])
    keep = sorted(random.Random(seed).sample(range(len(prompts)), limit))
    return [prompts[i] for i in keep]


def first_of_each_category(prompts: Sequence[Prompt], per: int = 1) -> list[Prompt]:
    """The first ``per`` prompts of each category, in file order: a small load that still covers each kind."""
    return [p for i, p in enumerate(prompts) if sum(q.category == p.category for q in prompts[:i]) < per]


def _drop_repeats(prompts: list[Prompt]) -> tuple[list[Prompt], list[str]]:
    """A prompt asked again (the same text, earlier turns and format) is measured once: the first is
    kept, each repeat is said by line."""
    kept: list[Prompt] = []
    said: list[str] = []
    first: dict[tuple[str, tuple[Message, ...], bool], Prompt] = {}
    for p in prompts:
        key = (p.prompt.strip(), p.history, p.chat)
        if key in first:
            said.append(f"{p.where}: the same prompt as {first[key].where}: measured once")
            continue
        first[key] = p
        kept.append(p)
    return kept, said


def _unique_ids(prompts: list[Prompt]) -> tuple[list[Prompt], list[str]]:
    """Each id once: a repeat of an id is named ``id#2``, ``id#3`` ... and said."""
    taken = {p.id for p in prompts}
    first: dict[str, Prompt] = {}
    out = []
    notes = []
    for p in prompts:
        if p.id not in first:
            first[p.id] = p
            out.append(p)
            continue
        n = 2
        while f"{p.id}#{n}" in taken:
            n += 1
        new = f"{p.id}#{n}"
        taken.add(new)
        out.append(replace(p, id=new))
        at = f"line {p.line}: " if p.line is not None else ""
        by = f" (by line {first[p.id].line})" if first[p.id].line is not None else ""
        notes.append(f"{at}the id {p.id!r} is taken{by}: named {new!r}")
    return out, notes


def parse_about(raw: Any) -> About:
    """The ``about`` object of a prompt file's first line; ValueError says what is wrong with it."""
    if not isinstance(raw, dict):
        raise ValueError('"about" must be an object such as {"name": ..., "source": ..., "licence": ...}')
    unknown = sorted(set(raw) - set(ABOUT_KEYS))
    if unknown:
        raise ValueError(f'"about" has an unknown key {unknown[0]!r} (known: {", ".join(ABOUT_KEYS)})')
    bad = next((k for k in ABOUT_TEXT_KEYS if k in raw and not isinstance(raw[k], str)), None)
    if bad is not None:
        raise ValueError(f'"about": "{bad}" must be a string')
    categories = raw.get("categories", [])
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        raise ValueError('"about": "categories" must be a list of strings')
    return About(**{k: raw[k] for k in ABOUT_TEXT_KEYS if k in raw}, categories=tuple(categories))


def parse_history(raw: Any) -> tuple[Message, ...]:
    """A chat's earlier turns from a prompt line's ``history``: ``{"role", "content"}`` objects that
    alternate from a user turn to an assistant turn, so that the ``prompt`` is the next user turn (a
    chat template may refuse anything else). ValueError says what is wrong."""
    if not isinstance(raw, list):
        raise ValueError('"history" must be a list of {"role": ..., "content": ...} turns')
    turns: list[Message] = []
    for i, turn in enumerate(raw):
        which = f'"history" turn {i + 1}'
        if not isinstance(turn, dict) or set(turn) != {"role", "content"}:
            raise ValueError(f'{which} must be an object with "role" and "content" only')
        role, content = turn["role"], turn["content"]
        if role not in ROLES:
            raise ValueError(f'{which}: role {role!r} is not user or assistant')
        if role != ROLES[i % 2]:
            raise ValueError(f"{which} is {role!r} where {ROLES[i % 2]!r} was due: turns alternate, user first")
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f'{which}: "content" must be a non-blank string')
        turns.append((role, content))
    if len(turns) % 2:
        raise ValueError('"history" must end with an assistant turn (the "prompt" is the next user turn)')
    return tuple(turns)


def load_jsonl(path: Path, chat: bool = True) -> tuple[list[Prompt], list[str], About | None]:
    """A JSONL prompt file: (prompts, skipped lines, its ``about`` line if it has one)."""
    prompts: list[Prompt] = []
    skipped: list[str] = []
    about: About | None = None
    for number, item in json_lines(path, skipped):
        if not isinstance(item, dict):
            skipped.append(f"line {number}: expected a JSON object, got {type(item).__name__}")
            continue
        if "about" in item and "prompt" not in item:
            if prompts or skipped or about is not None:
                skipped.append(f'line {number}: an "about" object belongs on the first line')
            elif set(item) != {"about"}:
                skipped.append(f'line {number}: the "about" line holds "about" only')
            else:
                try:
                    about = parse_about(item["about"])
                except ValueError as exc:
                    skipped.append(f"line {number}: {exc}")
            continue
        text = item.get("prompt")
        if not isinstance(text, str):
            skipped.append(f"line {number}: no \"prompt\" string")
            continue
        if not text.strip():
            skipped.append(f"line {number}: the \"prompt\" is blank")
            continue
        category = item.get("category", "uncategorized")
        item_chat = item.get("chat", chat)
        if not isinstance(category, str) or not isinstance(item_chat, bool):
            skipped.append(f"line {number}: \"category\" must be a string and \"chat\" true or false")
            continue
        try:
            history = parse_history(item.get("history", []))
        except ValueError as exc:
            skipped.append(f"line {number}: {exc}")
            continue
        if history and not item_chat:
            skipped.append(f'line {number}: a "history" needs "chat": true (raw text has no turns)')
            continue
        prompts.append(Prompt(str(item.get("id", f"line{number}")), text, category, item_chat, number, history))
    if not prompts:
        raise no_prompts(path, skipped, NEEDS["jsonl"])
    return prompts, skipped, about
