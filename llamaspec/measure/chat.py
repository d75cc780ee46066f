"""A chat prompt as every engine sends it: its messages, the plain text a model without a chat
template gets instead, and the words a measurement's ``stats["prompt_form"]`` uses to say which.

A chat prompt (``ResolvedCase.chat``) is its earlier turns (``ResolvedCase.history``) and then the
user's ``prompt``. Its messages are sent as written: a chat client sends JSON, so no engine
processes ``\\n``-style escapes in them (the ``escape`` setting is for raw prompts, as llama.cpp's
``-e`` is for ``-p``). Each engine renders the messages with the model's own chat template; a model
that has none gets the prompt as raw text, and a chat with earlier turns the plain form of
:func:`plain_text`, with one warning per model.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from llamaspec.measure.contract import Message, ResolvedCase

log = logging.getLogger(__name__)

# What a measurement's stats["prompt_form"] holds: how the prompt reached the model.
CHAT_TEMPLATE = "chat template"
RAW = "raw"
RAW_NO_TEMPLATE = "raw: the model has no chat template"
# llama-server's own: /apply-template renders a chat for a model without a template with ChatML.
CHATML_DEFAULT = "chat template: llama.cpp's ChatML (the model has none)"
PROMPT_FORMS = (CHAT_TEMPLATE, RAW, RAW_NO_TEMPLATE, CHATML_DEFAULT)


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
