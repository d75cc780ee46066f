"""A chat prompt rendered with a GGUF's chat template the way ``llama-server --jinja`` renders it
for ``/v1/chat/completions`` and ``/apply-template`` (``common/chat.cpp`` at 0c1e570), so that the
command-line programs get the very text the deployed server would tokenize.

What the server does, and this does in Python with jinja2:

- the template is the file's ``tokenizer.chat_template`` (else its ``tool_use`` variant); the
  name ``chatml`` stands for llama.cpp's own ChatML template;
- the messages are ``{role, content}``; a ``developer`` turn becomes ``system`` (but for gpt-oss,
  whose template has ``<|channel|>``), and when the template ignores a system turn's content
  (llama.cpp probes it with one) a first system turn is merged into the next turn
  (``system + "\\n" + next``) or, alone, dropped;
- the context: ``messages``, ``bos_token`` and ``eos_token`` (the tokens' texts), ``add_generation_prompt``
  true, ``enable_thinking`` true (the server's default, ``--reasoning auto``, where a template
  reads it), ``datetime`` and ``date_string`` (today, as ``%b %d %Y`` and ``%d %b %Y``);
- the environment is Hugging Face's ``apply_chat_template``'s: sandboxed, ``trim_blocks`` and
  ``lstrip_blocks``, loop controls, ``raise_exception``, ``tojson``, ``strftime_now``, and
  ``{% generation %}`` blocks rendered as their content (llama.cpp ignores the tags);
- the rendered text loses a leading BOS text when the vocabulary adds BOS itself, and a trailing
  EOS text when it adds EOS (``common_chat_template_direct_apply_impl``), so the prompt is not
  given two BOS tokens.

Not done here: tools, typed content parts, and the per-family code paths llama.cpp keeps for some
templates (Mistral, DeepSeek V3.2, Gemma 4, ...), which compose their prompts themselves. The
real-binary test (``tests/test_chat.py``) holds this rendering to ``/apply-template``'s, string and
token ids, on SmolLM2.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Message
from llamaspec.models.reader import ChatFacts

# llama.cpp's CHATML_TEMPLATE_SRC (common/chat.cpp), for a template that is the name "chatml".
CHATML = ("{%- for message in messages -%}\n"
          "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
          "{%- endfor -%}\n"
          "{%- if add_generation_prompt -%}\n"
          "  {{- '<|im_start|>assistant\\n' -}}\n"
          "{%- endif -%}")

# llama.cpp's probe of a system turn (jinja/caps.cpp): the template supports one when it uses its content.
_PROBE = (("system", "System message"), ("user", "User message"))


def render(facts: ChatFacts, turns: Sequence[Message], model: str) -> str:
    """``turns`` (role, content) rendered with the model's template, as ``llama-server --jinja``
    would; ``model`` names the model in an error. LlamaspecError when the file has no template or
    it does not render. Rendered once per process for the same template and turns, so the two sides of
    a pair never see two dates."""
    if facts.template is None:
        raise LlamaspecError(f"{model} has no chat template (no tokenizer.chat_template in the file)",
                             hint="send its prompts as raw text, or use a model whose GGUF has a chat template")
    return _render(facts, tuple(turns), model)


@functools.lru_cache(maxsize=256)
def _render(facts: ChatFacts, turns: tuple[Message, ...], model: str) -> str:
    source = CHATML if facts.template == "chatml" else str(facts.template)
    messages = [{"role": role, "content": content} for role, content in turns]
    if "<|channel|>" not in source:
        messages = [{**m, "role": "system"} if m["role"] == "developer" else m for m in messages]
    if messages and messages[0]["role"] == "system" and not _uses_system_turn(facts, source):
        first, rest = messages[0], messages[1:]
        messages = [{**rest[0], "content": first["content"] + "\n" + rest[0]["content"]}, *rest[1:]] if rest else []
    try:
        text = _apply(facts, source, messages)
    except _TemplateFailure as exc:
        raise LlamaspecError(f"{model}'s chat template does not render: {exc.reason}",
                             hint="send the prompts as raw text (chat: false), or use a model whose template "
                                  "llama-server renders") from None
    if facts.add_bos and facts.bos and text.startswith(facts.bos):
        text = text[len(facts.bos):]
    if facts.add_eos and facts.eos and text.endswith(facts.eos):
        text = text[:-len(facts.eos)]
    return text


def _uses_system_turn(facts: ChatFacts, source: str) -> bool:
    """Whether the template puts a system turn's content into its output (a template that fails on
    one does not)."""
    try:
        return _PROBE[0][1] in _apply(facts, source, [{"role": r, "content": c} for r, c in _PROBE])
    except _TemplateFailure:
        return False


class _TemplateFailure(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _apply(facts: ChatFacts, source: str, messages: list[dict[str, str]]) -> str:
    import jinja2

    now = datetime.now()
    context: dict[str, Any] = {
        "messages": messages, "bos_token": facts.bos or "", "eos_token": facts.eos or "",
        "add_generation_prompt": True, "enable_thinking": True,
        "datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y"),
    }
    try:
        return _compiled(source).render(**context)
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise _TemplateFailure(_first_line(exc)) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@functools.lru_cache(maxsize=32)
def _compiled(source: str) -> Any:
    """The template compiled in Hugging Face's environment (``_TemplateFailure`` if it does not parse)."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers' assistant-mask tag): its content."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise _TemplateFailure(_first_line(exc)) from None


# --- the prompt as the programs print it back ----------------------------------------------------

_SPACE = " \t\n\v\f\r"  # C's isspace


def echoes(facts: ChatFacts, prompt: str) -> tuple[str, str]:
    """How the command-line programs print ``prompt`` back before what they generate: (with the
    special tokens' texts, as llama-speculative and llama-speculative-simple print each prompt
    token's piece; without them, as llama-completion does, whose pieces leave control tokens out).

    Both tokenize the prompt with special tokens parsed (``common_tokenize(ctx, prompt, true,
    true)``), so the echo is the prompt cut as ``llama_vocab::impl::tokenizer_st_partition`` cuts
    it: each special token's text, longest first, taken out of the text around it (a Phi-3 token
    swallowing the whitespace after it); the BOS token first when the vocabulary adds it; with
    SentencePiece's space prefix, a space before the text at the start and after each special token.
    """
    parts = _partition(prompt, facts)
    shown: list[tuple[str, bool]] = []  # (text, a control token's)
    if facts.add_bos and facts.bos is not None:
        shown.append((facts.bos, facts.bos in facts.control))
    after_special = True
    for text, special in parts:
        if special:
            shown.append((text, text in facts.control))
        else:
            shown.append(((" " if facts.space_prefix and after_special else "") + text, False))
        after_special = special
    return "".join(t for t, _ in shown), "".join(t for t, control in shown if not control)


def _partition(prompt: str, facts: ChatFacts) -> list[tuple[str, bool]]:
    """``prompt`` as (text, is a special token) fragments, as llama.cpp's tokenizer cuts it."""
    fragments: list[tuple[str, bool]] = [(prompt, False)] if prompt else []
    rstrip = set(facts.rstrip)
    for token in facts.special:
        if not any(not special and token in text for text, special in fragments):
            continue
        cut: list[tuple[str, bool]] = []
        for text, special in fragments:
            if special or token not in text:
                cut.append((text, special))
                continue
            pieces = text.split(token)
            for i, piece in enumerate(pieces):
                if i > 0:
                    cut.append((token, True))
                    if token in rstrip:
                        piece = piece.lstrip(_SPACE)
                if piece:
                    cut.append((piece, False))
        fragments = cut
    return fragments
