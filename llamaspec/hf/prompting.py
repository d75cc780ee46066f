"""A case's prompt as the transformers engine gives it to the model: token ids, through the model's
chat template where the case is a chat, and how the prompt was served (``chat.PROMPT_FORMS``)."""

from __future__ import annotations

from typing import Any

from llamaspec.measure import chat
from llamaspec.measure.contract import ResolvedCase


def _input_ids(case: ResolvedCase, tokenizer: Any) -> Any:
    """The prompt as token ids: a chat prompt's messages (earlier turns, then the prompt, as written)
    through the model's template, or as plain text where it has none (``measure.chat``)."""
    if not case.chat:
        return tokenizer(chat.raw_prompt(case), return_tensors="pt").input_ids
    turns = chat.messages(case, chat.written(case))
    if _prompt_form(case, tokenizer) == chat.CHAT_TEMPLATE:
        return tokenizer.apply_chat_template(chat.as_dicts(turns), add_generation_prompt=True, return_tensors="pt")
    chat.warn_no_template(str(getattr(tokenizer, "name_or_path", "") or case.target.label))
    return tokenizer(chat.plain_text(turns), return_tensors="pt").input_ids


def _prompt_form(case: ResolvedCase, tokenizer: Any) -> str:
    """How the prompt reaches the model (``chat.PROMPT_FORMS``)."""
    if not case.chat:
        return chat.RAW
    return chat.CHAT_TEMPLATE if getattr(tokenizer, "chat_template", None) else chat.RAW_NO_TEMPLATE
