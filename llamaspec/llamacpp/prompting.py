"""A prompt as llama.cpp's command-line programs get it, and their echo of it cut off.

A raw prompt is sent as every engine sends it (``chat.raw_prompt``: escapes processed with ``-e``); a
chat prompt is rendered with the target's chat template (:mod:`llamaspec.llamacpp.chat`) and sent
as is. Both programs print the prompt back before the generation, each in its own form
(:func:`generated_part` cuts either off). The runner measures with these, and the deploy
command serves the same text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.flags import Invocation
from llamaspec.measure import chat
from llamaspec.measure.contract import ResolvedCase
from llamaspec.measure.settings import Settings

# The longest argument Linux takes (MAX_ARG_STRLEN: 32 pages), with its closing NUL.
LONGEST_ARGUMENT = 131072 - 1


@dataclass(frozen=True)
class ServedPrompt:
    """The prompt as the programs read it, and what finding its echo needs."""

    text: str  # what the program tokenizes: the rendered chat, or the raw prompt (escapes processed with -e)
    form: str  # how the prompt was served (chat.PROMPT_FORMS), kept in stats["prompt_form"]
    echoes: tuple[str, ...] = ()  # a chat prompt's echo as the programs print it (chat.echoes), tried in turn


def served_prompt(case: ResolvedCase) -> ServedPrompt:
    """The case's prompt as both programs get it. A raw prompt is the prompt (a prompt file's text
    less the one trailing newline ``-f`` drops), escapes processed when ``escape`` is on. A chat
    prompt is rendered with the target's template (its messages as written); a target without one
    gets the chat as raw text (``chat.plain_text``), with one warning per model."""
    if not case.chat:
        return ServedPrompt(chat.raw_prompt(case), chat.RAW)
    text = chat.written(case)
    from llamaspec.llamacpp.chat import echoes, render
    from llamaspec.models.reader import read_chat

    facts = read_chat(case.target.path)
    turns = chat.messages(case, text)
    if facts.template is None:
        chat.warn_no_template(case.target.label)
        served, form = chat.plain_text(turns), chat.RAW_NO_TEMPLATE
    else:
        served, form = render(facts, turns, case.target.label), chat.CHAT_TEMPLATE
    if len(served.encode()) > LONGEST_ARGUMENT:
        raise LlamaspecError(f"the chat prompt of {case.case} is {len(served.encode())} bytes once rendered: longer than one "
                             "command-line argument may be (128 KiB), and -f would drop its last newline",
                             hint="measure it on llama-server (engine: llama-server), which takes it over HTTP")
    return ServedPrompt(served, form, tuple(dict.fromkeys(echoes(facts, served))))


def invocation(case: ResolvedCase, settings: Settings, draft: str | None, accel: str) -> Invocation:
    """A command-line program's run of ``case`` with ``settings``: a chat rendered (``served_prompt``)
    and given as is with -p (-f would drop its last newline), no escapes processed; a raw prompt or
    prompt file as written."""
    if case.chat:
        return Invocation(target=case.target.path, settings=replace(settings, escape=False), draft=draft,
                          prompt=served_prompt(case).text, accel=accel)
    return Invocation(target=case.target.path, settings=settings, draft=draft, prompt=case.prompt, accel=accel,
                      prompt_file=str(Path(case.prompt_file).resolve()) if case.prompt_file else None)  # cwd may differ


def prompt_text(case: ResolvedCase) -> str:
    """The prompt as the programs tokenize it (``served_prompt``)."""
    return served_prompt(case).text


def generated_part(text: str | None, case: ResolvedCase) -> tuple[str | None, bool]:
    """The generation without the echoed prompt, and whether the echo was found.

    A chat prompt's echo differs between the programs (``chat.echoes``): each known form is cut
    off, and a chat output without either is left whole (it then differs from the other program's
    and the lossless check says so). A raw prompt is echoed the same way by both programs, so an
    echo not found leaves both texts whole (still comparable)."""
    if text is None:
        return None, False
    served = served_prompt(case)
    if case.chat:
        for echo in served.echoes:
            if echo and text.startswith(echo):
                return text[len(echo):], True
        return text, False
    prompt = served.text
    bodies = [text]
    special = _SPECIAL_PREFIX.match(text)
    if special:  # llama-speculative prints the prompt's tokens with their special pieces ("<s>" for a Llama BOS)
        bodies.append(text[special.end():])
    for body in bodies:
        for echo in (prompt, " " + prompt, prompt.lstrip()):
            if echo and body.startswith(echo):
                return body[len(echo):], True
    return text, False


# A special token's piece at the start of an echo: "<s>" (Llama's BOS), "<|begin_of_text|>", "<bos>".
_SPECIAL_PREFIX = re.compile(r"^(?:<\|?[A-Za-z_][\w|]*\|?>)+")
