"""A prompt as every source reads it (llamaspec's JSONL files, the sets others publish), and the
reading of line-numbered JSON files those readers share: below both :mod:`llamaspec.studies.prompts`
and :mod:`llamaspec.studies.public_sets`, so that neither imports the other back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Message


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str
    category: str = "uncategorized"
    chat: bool = True  # send through the model's chat template
    line: int | None = None  # where a file holds it (JSONL's line number), for messages about it
    history: tuple[Message, ...] = ()  # a chat's earlier turns (role, content), before ``prompt``

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prompt:
        """Back from ``dataclasses.asdict`` after a trip through JSON (a work item's payload), which
        turns its earlier turns into lists."""
        return cls(**{**data, "history": tuple((str(role), str(text)) for role, text in data.get("history", ()))})

    @property
    def where(self) -> str:
        """How a message names it: ``line 7 (id)`` where a file's line holds it, else its id."""
        return f"line {self.line} ({self.id})" if self.line is not None else self.id


# What each kind of source needs on a line (or in a record), for the message when none has it.
NEEDS = {
    "jsonl": 'a "prompt" string (optional "category", "id", "chat", "history")',
    "spec-bench": '"question_id", "category" and "turns"',
    "speed-bench": '"question_id", "category" and "turns"',
    "alpaca": '"instruction" and "input"',
}


def read_lines(path: Path) -> Iterable[tuple[int, str]]:
    """(line number, text) per non-blank line of a UTF-8 file; a missing or undecodable file is one error."""
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


def no_prompts(path: Path, skipped: list[str], what: str) -> LlamaspecError:
    """The error for a file with no usable prompt: its first malformed entry, or what a line needs."""
    if skipped:
        return LlamaspecError(f"{path}: no usable prompts ({len(skipped)} malformed: {skipped[0]})",
                              hint=f"each line must be a JSON object with {what}")
    return LlamaspecError(f"{path} holds no prompts", hint=f"write one JSON object per line with {what}, e.g. "
                          '{"id": "q1", "category": "code", "prompt": "Write a C function that ..."}')


def json_lines(path: Path, skipped: list[str]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) per non-blank line; a line that is not JSON is noted in ``skipped``."""
    for number, line in read_lines(path):
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            skipped.append(f"line {number}: not JSON ({exc.msg} at column {exc.colno})")
