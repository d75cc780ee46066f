"""Prompt sets that others publish, read into :class:`~llamaspec.studies.prompt_records.Prompt`
records (:func:`llamaspec.studies.prompts.load` picks the reader by the source's kind): benchmark
records with turns (Spec-Bench's ``question.jsonl``; NVIDIA's SPEED-Bench, as its parquet files
ship or as JSONL) and Alpaca's instructions (a local copy, or the hub's, downloaded once into the
Hugging Face cache). What changes when one of these data sets changes its layout is here; the
JSONL format that llamaspec's own sets use, the checks every source gets, and the set itself are
in ``prompts``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.studies.prompt_records import NEEDS, Prompt, json_lines, no_prompts

ALPACA_REPO = "tatsu-lab/alpaca"
TURNS = ("first", "all")

# Alpaca's own prompt templates (stanford_alpaca's train.py, PROMPT_DICT).
ALPACA_WITH_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further context. "
                     "Write a response that appropriately completes the request.\n\n"
                     "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


def _turn_prompts(records: Iterable[tuple[str, int | None, Any]], turns: str, chat: bool,
                  skipped: list[str]) -> list[Prompt]:
    """Prompts from benchmark records with ``question_id``, ``category`` and ``turns`` (Spec-Bench,
    SPEED-Bench). ``turns="all"``: one prompt per turn, the earlier turns of the conversation before
    it (the records hold no answers, so only the user turns are carried, as text)."""
    if turns not in TURNS:
        raise LlamaspecError(f"unknown turns {turns!r}", hint=" or ".join(TURNS))
    prompts: list[Prompt] = []
    for where, line, item in records:
        items = item.get("turns") if isinstance(item, dict) else None
        if (not isinstance(items, list) or not items
                or not all(isinstance(t, str) and t.strip() for t in items)):
            skipped.append(f"{where}: no \"turns\" list of non-blank strings")
            continue
        qid = str(item.get("question_id", where.replace(" ", "")))
        category = str(item.get("category") or "uncategorized")
        if turns == "first":
            prompts.append(Prompt(qid, items[0], category, chat, line))
        else:
            for i in range(len(items)):
                prompts.append(Prompt(f"{qid}-t{i + 1}", "\n\n".join(items[:i + 1]), category, chat, line))
    return prompts


def load_turns(kind: str, path: Path, turns: str = "first", chat: bool = True) -> tuple[list[Prompt], list[str]]:
    """Benchmark records with turns (see :func:`_turn_prompts` for ``turns``): ``kind`` "spec-bench",
    Spec-Bench's question.jsonl; "speed-bench", NVIDIA's SPEED-Bench, one of its ``.parquet`` files
    (each config, e.g. ``qualitative``, ships as parquet) or a ``.jsonl`` copy."""
    skipped: list[str] = []
    records: Iterable[tuple[str, int | None, Any]]
    if kind == "speed-bench" and path.suffix == ".parquet":
        records = ((f"row {i}", None, row) for i, row in enumerate(_parquet_rows(path), start=1))
    elif kind == "speed-bench" and path.suffix != ".jsonl":
        raise LlamaspecError(f"{path.name}: SPEED-Bench is read from a .parquet or .jsonl file",
                             hint="give one of nvidia/SPEED-Bench's parquet files, or a JSONL copy of it")
    else:
        records = ((f"line {number}", number, item) for number, item in json_lines(path, skipped))
    prompts = _turn_prompts(records, turns, chat, skipped)
    if not prompts:
        raise no_prompts(path, skipped, NEEDS[kind])
    return prompts, skipped


def _parquet_rows(path: Path) -> list[Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise LlamaspecError(f"reading {path.name} needs pyarrow", hint="pip install 'llamaspec[prompts]' (or "
                             "pyarrow; or give a .json/.jsonl copy of the data set)") from None
    try:
        return list(pq.read_table(path).to_pylist())
    except FileNotFoundError:
        raise LlamaspecError(f"prompt file not found: {path}", hint="check the path") from None
    except (OSError, pa.ArrowException) as exc:
        raise LlamaspecError(f"{path}: not a parquet file pyarrow can read ({exc})",
                             hint="check the file (a download cut short?), or give a JSONL copy") from None


def alpaca_prompt(instruction: str, input_text: str, fmt: str) -> tuple[str, bool]:
    """(prompt text, chat?) for one Alpaca record."""
    if fmt == "alpaca":
        template = ALPACA_WITH_INPUT if input_text.strip() else ALPACA_NO_INPUT
        return template.format(instruction=instruction, input=input_text), False
    text = instruction if not input_text.strip() else f"{instruction}\n\n{input_text}"
    return text, fmt == "chat"


def _alpaca_rows(path: Path, skipped: list[str]) -> list[Any]:
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    if path.suffix == ".jsonl":
        return [item for _, item in json_lines(path, skipped)]
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
    for i, row in enumerate(_alpaca_rows(source, skipped)):
        instruction = row.get("instruction") if isinstance(row, dict) else None
        if not isinstance(instruction, str) or not instruction.strip():
            skipped.append(f"record {i + 1}: no \"instruction\"")
            continue
        input_text = row.get("input") or ""
        text, chat = alpaca_prompt(instruction, str(input_text), fmt)
        prompts.append(Prompt(f"alpaca-{i + 1}", text, "with-input" if str(input_text).strip() else "no-input", chat))
    if not prompts:
        raise no_prompts(source, skipped, NEEDS["alpaca"])
    return prompts, skipped
