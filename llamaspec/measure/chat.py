"""A chat prompt as every engine sends it: its messages, the plain text a model without a chat
template gets instead, and the words a measurement's ``stats["prompt_form"]`` uses to say which.

A chat prompt (``ResolvedCase.chat``) is its earlier turns (``ResolvedCase.history``) and then the
user's ``prompt``. Its messages are sent as written: a chat client sends JSON, so no engine
processes ``\\n``-style escapes in them (the ``escape`` setting is for raw prompts, as llama.cpp's
``-e`` is for ``-p``). Each engine renders the messages with the model's own chat template; a model
that has none gets the prompt as raw text, and a chat with earlier turns the plain form of
:func:`plain_text`, with one warning per model. A raw prompt reaches every engine as
:func:`raw_prompt` makes it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from llamaspec.measure.contract import Message, ResolvedCase
from llamaspec.measure.settings import Settings


class Prompted(Protocol):
    """What a prompt is read from: a resolved case, or an experiment's case before it is resolved."""

    @property
    def prompt(self) -> str | None: ...
    @property
    def prompt_file(self) -> str | None: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def chat(self) -> bool: ...

log = logging.getLogger(__name__)

# What a measurement's stats["prompt_form"] holds: how the prompt reached the model.
CHAT_TEMPLATE = "chat template"
RAW = "raw"
RAW_NO_TEMPLATE = "raw: the model has no chat template"
# llama-server's own: /apply-template renders a chat for a model without a template with ChatML.
CHATML_DEFAULT = "chat template: llama.cpp's ChatML (the model has none)"
PROMPT_FORMS = (CHAT_TEMPLATE, RAW, RAW_NO_TEMPLATE, CHATML_DEFAULT)


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "'": "'", '"': '"', "\\": "\\", "?": "?", "a": "\a", "b": "\b",
            "f": "\f", "v": "\v"}
_ESCAPE = re.compile(r"\\(?:([nrt'\"\\?abfv])|x([0-9a-fA-F]{2}))")


def process_escapes(text: str) -> str:
    """``\\n``-style escapes as llama.cpp's ``-e`` processes them (common's string_process_escapes):
    the eleven one-letter escapes and ``\\xHH``; any other backslash stays."""
    return _ESCAPE.sub(lambda m: _ESCAPES[m.group(1)] if m.group(1) else chr(int(m.group(2), 16)), text)


def written(case: Prompted) -> str:
    """The case's prompt as written: its text, or its prompt file's whole text."""
    return case.prompt if case.prompt is not None else Path(case.prompt_file or "").read_text()


def prompt_of(case: Prompted) -> str:
    """What every engine builds the model's input from: a chat message as written (:func:`written`,
    rendered by a template later), or the raw prompt (:func:`raw_prompt`)."""
    return written(case) if case.chat else raw_prompt(case)


def raw_prompt(case: Prompted) -> str:
    """A raw prompt as every engine's model reads it: the prompt, or a prompt file's text less the
    one trailing newline (llama.cpp's ``-f`` drops it), escapes processed where ``escape`` is on."""
    text = written(case)
    if case.prompt is None and text.endswith("\n"):
        text = text[:-1]
    return process_escapes(text) if case.settings.escape else text


def messages(case: ResolvedCase, prompt: str) -> list[Message]:
    """The chat's messages, (role, content): its earlier turns, then the user's ``prompt``."""
    return [*case.history, ("user", prompt)]


def as_dicts(turns: Sequence[Message]) -> list[dict[str, str]]:
    """Messages as a chat template and an OpenAI-style request take them."""
    return [{"role": role, "content": content} for role, content in turns]


def plain_text(turns: Sequence[Message]) -> str:
    """A chat for a model without a chat template: one message alone is its text as is; several
    are one line each, ``Role: content`` (``User: ...\\nAssistant: ...\\nUser: ...``)."""
    if len(turns) == 1:
        return turns[0][1]
    return "\n".join(f"{role.capitalize()}: {content}" for role, content in turns)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_no_template(model: str) -> None:
    """Say once per model (its path or name) that its chat prompts run as raw text."""
    with _warned_lock:
        if model in _warned:
            return
        _warned.add(model)
    log.warning("%s has no chat template: its chat prompts run as raw text (earlier turns as 'Role: text' lines)", model)
