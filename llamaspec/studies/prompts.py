"""Prompt sets: many prompts, each with an id and a category, from a file or a hub data set.

Sources (``load(source)``):

- a JSONL file: one object per line with ``prompt``, optional ``category``, ``id`` and ``chat``
  (send it through the model's chat template; default: the set's ``format``). Malformed lines
  are reported with their line numbers and skipped; the others still run.
- ``spec-bench:PATH``: Spec-Bench's ``question.jsonl`` (``question_id``, ``category``, ``turns``);
  the first turn by default, or (``turns: all``) every turn as a prompt of its own, carrying
  the earlier turns of the conversation before it.
- ``alpaca`` (``tatsu-lab/alpaca`` on the Hugging Face hub) or ``alpaca:PATH`` (a local copy:
  ``.json``, ``.jsonl`` or ``.parquet``): instruction plus input, either as a chat message
  (``format: chat``) or in Alpaca's own prompt template (``format: alpaca``).

``limit`` keeps N prompts: the first N, or with ``seed`` a seeded random sample of N (the same
seed always picks the same prompts, in file order).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Message

log = logging.getLogger(__name__)

FORMATS = ("chat", "raw", "alpaca")
ALPACA_REPO = "tatsu-lab/alpaca"

# Alpaca's own prompt templates (stanford_alpaca's train.py, PROMPT_DICT).
ALPACA_WITH_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further context. "
                     "Write a response that appropriately completes the request.\n\n"
                     "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str
    category: str = "uncategorized"
    chat: bool = True  # send through the model's chat template
    line: int | None = None  # where a file holds it (JSONL's line number), for messages about it
    history: tuple[Message, ...] = ()  # a chat's earlier turns (role, content), before ``prompt``


@dataclass(frozen=True)
class PromptSource:
    """Where a prompt set comes from and how to read it."""

    kind: str  # jsonl | spec-bench | alpaca
    path: str | None = None  # None: alpaca from the hub
    format: str = "chat"  # chat | raw (jsonl, spec-bench); chat | alpaca | raw (alpaca)
    turns: str = "first"  # spec-bench: first | all
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
    skipped: tuple[str, ...] = field(default=())  # "line 7: ..." for malformed entries
    total: int = 0  # entries before --limit

    def categories(self) -> list[str]:
        return sorted({p.category for p in self.prompts})


def parse_source(text: str, base_dir: Path | None = None, **options: Any) -> PromptSource:
    """``FILE`` | ``spec-bench:PATH`` | ``alpaca`` | ``alpaca:PATH``, with options (format, turns, limit, seed)."""
    kind, _, rest = text.partition(":")
    opts = {k: v for k, v in options.items() if v is not None}
    if kind == "alpaca":
        opts.setdefault("format", "chat")
        return PromptSource("alpaca", str(locate(rest, base_dir)) if rest else None, **opts)
    if kind == "spec-bench":
        if not rest:
            raise LlamaspecError("spec-bench needs a path: spec-bench:PATH/question.jsonl",
                                 hint="Spec-Bench's data/spec_bench/question.jsonl")
        return PromptSource("spec-bench", str(locate(rest, base_dir)), **opts)
    return PromptSource("jsonl", str(locate(text, base_dir)), **opts)


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


def load(source: PromptSource | str, base_dir: Path | None = None) -> PromptSet:
    if isinstance(source, str):
        source = parse_source(source, base_dir)
    if source.format not in FORMATS:
        raise LlamaspecError(f"unknown prompt format {source.format!r}", hint=f"use one of: {', '.join(FORMATS)}")
    if source.kind == "jsonl":
        prompts, skipped = load_jsonl(Path(source.path or ""), chat=source.format != "raw")
    elif source.kind == "spec-bench":
        prompts, skipped = load_spec_bench(Path(source.path or ""), turns=source.turns, chat=source.format != "raw")
    elif source.kind == "alpaca":
        prompts, skipped = load_alpaca(Path(source.path) if source.path else None, fmt=source.format)
    else:
        raise LlamaspecError(f"unknown prompt set kind {source.kind!r}", hint="jsonl, spec-bench or alpaca")
    for line in skipped:
        log.warning("%s: skipped %s", source.path or ALPACA_REPO, line)
    chosen = select(prompts, source.limit, source.seed)
    return PromptSet(source, tuple(chosen), tuple(skipped), len(prompts))


# A prompt's tokens, guessed from its text before any model reads it (English and code run at about
# four characters a token with the usual BPE vocabularies): only to refuse, before anything runs,
# a prompt that cannot fit the context.
CHARS_PER_TOKEN = 4


def check_workload(prompts: Sequence[Prompt], ctx_size: int, n_predict: int) -> list[Prompt]:
    """The prompts a workload measures: a prompt repeated (the same text again) is measured once and
    said, by line; one whose text alone (at about :data:`CHARS_PER_TOKEN` characters a token) and
    the tokens to generate would not fit the context is refused, by line, before anything runs."""
    kept: list[Prompt] = []
    seen: dict[str, Prompt] = {}
    for p in prompts:
        where = f"line {p.line} ({p.id})" if p.line is not None else p.id
        first = seen.get(p.prompt.strip())
        if first is not None:
            log.warning("%s: the same prompt as %s: measured once", where,
                        f"line {first.line} ({first.id})" if first.line is not None else first.id)
            continue
        seen[p.prompt.strip()] = p
        tokens = len(p.prompt) // CHARS_PER_TOKEN
        if tokens + n_predict > ctx_size:
            raise LlamaspecError(f"{where}: a prompt of {len(p.prompt):,} characters (about {tokens:,} tokens) and "
                                 f"{n_predict} to generate do not fit the context of {ctx_size} tokens",
                                 hint="raise --ctx-size, or shorten or drop that prompt")
        if tokens > ctx_size // 2:
            log.warning("%s: a long prompt (about %d tokens of a %d context)", where, tokens, ctx_size)
        kept.append(p)
    return kept


def select(prompts: list[Prompt], limit: int | None, seed: int | None) -> list[Prompt]:
    """The first ``limit`` prompts, or a seeded sample of them (kept in file order)."""
    if limit is None or limit >= len(prompts):
        return list(prompts)
    if seed is None:
        return list(prompts[:limit])
    keep = sorted(random.Random(seed).sample(range(len(prompts)), limit))
    return [prompts[i] for i in keep]


def _unique_ids(prompts: list[Prompt]) -> list[Prompt]:
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        n = seen.get(p.id, 0)
        seen[p.id] = n + 1
        out.append(p if n == 0 else replace(p, id=f"{p.id}#{n + 1}"))
    return out


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LlamaspecError(f"prompt file not found: {path}", hint="check the path") from None
    except UnicodeDecodeError as exc:
        raise LlamaspecError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                             hint="save the prompt set as UTF-8 JSONL") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, line


def _empty(path: Path, skipped: list[str], what: str) -> LlamaspecError:
    if skipped:
        return LlamaspecError(f"{path}: no usable prompts ({len(skipped)} malformed: {skipped[0]})",
                              hint=f"each line must be a JSON object with {what}")
    return LlamaspecError(f"{path} holds no prompts", hint=f"write one JSON object per line with {what}, e.g. "
                          '{"id": "q1", "category": "code", "prompt": "Write a C function that ..."}')


def _json_lines(path: Path, skipped: list[str]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) per non-blank line; a line that is not JSON is noted in ``skipped``."""
    for number, line in _lines(path):
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            skipped.append(f"line {number}: not JSON ({exc.msg} at column {exc.colno})")


def load_jsonl(path: Path, chat: bool = True) -> tuple[list[Prompt], list[str]]:
    prompts: list[Prompt] = []
    skipped: list[str] = []
    for number, item in _json_lines(path, skipped):
        if not isinstance(item, dict):
            skipped.append(f"line {number}: expected a JSON object, got {type(item).__name__}")
            continue
        text = item.get("prompt")
        if not isinstance(text, str) or not text.strip():
            skipped.append(f"line {number}: no \"prompt\" string")
            continue
        category = item.get("category", "uncategorized")
        item_chat = item.get("chat", chat)
        if not isinstance(category, str) or not isinstance(item_chat, bool):
            skipped.append(f"line {number}: \"category\" must be a string and \"chat\" true or false")
            continue
        prompts.append(Prompt(str(item.get("id", f"line{number}")), text, category, item_chat, number))
    if not prompts:
        raise _empty(path, skipped, 'a "prompt" string (optional "category", "id")')
    return _unique_ids(prompts), skipped


def load_spec_bench(path: Path, turns: str = "first", chat: bool = True) -> tuple[list[Prompt], list[str]]:
    """Spec-Bench's question.jsonl. ``turns="all"``: one prompt per turn, the earlier turns of the
    conversation before it (its answers are not in the file, so only the user turns are carried)."""
    if turns not in ("first", "all"):
        raise LlamaspecError(f"unknown turns {turns!r}", hint="first or all")
    prompts: list[Prompt] = []
    skipped: list[str] = []
    for number, item in _json_lines(path, skipped):
        items = item.get("turns") if isinstance(item, dict) else None
        if not isinstance(items, list) or not items or not all(isinstance(t, str) for t in items):
            skipped.append(f"line {number}: no \"turns\" list of strings")
            continue
        qid = str(item.get("question_id", f"line{number}"))
        category = str(item.get("category", "uncategorized"))
        if turns == "first":
            prompts.append(Prompt(qid, items[0], category, chat))
        else:
            for i in range(len(items)):
                prompts.append(Prompt(f"{qid}-t{i + 1}", "\n\n".join(items[:i + 1]), category, chat))
    if not prompts:
        raise _empty(path, skipped, '"question_id", "category" and "turns"')
    return _unique_ids(prompts), skipped


def alpaca_prompt(instruction: str, input_text: str, fmt: str) -> tuple[str, bool]:
    """(prompt text, chat?) for one Alpaca record."""
    if fmt == "alpaca":
        template = ALPACA_WITH_INPUT if input_text.strip() else ALPACA_NO_INPUT
        return template.format(instruction=instruction, input=input_text), False
    text = instruction if not input_text.strip() else f"{instruction}\n\n{input_text}"
    return text, fmt == "chat"


def _alpaca_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise LlamaspecError(f"reading {path.name} needs pyarrow", hint="pip install 'llamaspec[prompts]' (or "
                                 "pyarrow; or give a .json/.jsonl copy of the data set)") from None
        return list(pq.read_table(path).to_pylist())
    if path.suffix == ".jsonl":
        return [json.loads(line) for _, line in _lines(path)]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise LlamaspecError(f"{path}: not JSON: {exc}", hint="alpaca_data.json is one JSON list of records") from None
    if not isinstance(data, list):
        raise LlamaspecError(f"{path}: expected a JSON list of records", hint="alpaca_data.json's layout")
    return data


def alpaca_file() -> Path:
    """The hub copy of tatsu-lab/alpaca (its parquet file), downloaded once into the HF cache
    (``llamaspec.models.hf``: checked against the hub's sha256, errors as one line).
    With HF_HUB_OFFLINE=1 only the cache is used."""
    from llamaspec.models import hf

    try:
        snap = hf.snapshot(ALPACA_REPO, "main", allow_patterns=["*.parquet", "*.json"], what="dataset", required="",
                           repo_type="dataset")
    except LlamaspecError as exc:
        raise LlamaspecError(exc.message, hint=f"{exc.hint}; or give a local copy: prompts: alpaca:PATH "
                                               "(.json, .jsonl or .parquet)") from None
    folder = snap.path
    files = sorted(folder.rglob("*.parquet")) or sorted(folder.rglob("*.json"))
    if not files:
        raise LlamaspecError(f"{ALPACA_REPO} snapshot in {folder} holds no data file", hint="remove it and fetch again")
    return files[0]


def load_alpaca(path: Path | None, fmt: str = "chat") -> tuple[list[Prompt], list[str]]:
    """Alpaca records (instruction, input); category: "with-input" or "no-input"."""
    source = path if path is not None else alpaca_file()
    prompts: list[Prompt] = []
    skipped: list[str] = []
    for i, row in enumerate(_alpaca_rows(source)):
        instruction = row.get("instruction") if isinstance(row, dict) else None
        if not isinstance(instruction, str) or not instruction.strip():
            skipped.append(f"record {i + 1}: no \"instruction\"")
            continue
        input_text = row.get("input") or ""
        text, chat = alpaca_prompt(instruction, str(input_text), fmt)
        prompts.append(Prompt(f"alpaca-{i + 1}", text, "with-input" if str(input_text).strip() else "no-input", chat))
    if not prompts:
        raise _empty(source, skipped, '"instruction" and "input"')
    return prompts, skipped
