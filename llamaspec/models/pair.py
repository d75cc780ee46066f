"""Would llama.cpp accept this draft for this target? Answered before a run, not by an abort in one.

The rules are llama.cpp's own (``common_speculative_are_compatible`` in common/speculative.cpp and
its copy in examples/speculative/speculative.cpp), in the same order, so the first mismatch named
here is the one llama.cpp would stop at:

1. the vocabulary type (SPM, BPE, ...);
2. add-BOS flags, and the BOS ids when BOS is added;
3. add-EOS flags, and the EOS ids when EOS is added;
4. vocabulary sizes differing by at most ``MAX_SIZE_DIFFERENCE``;
5. the token texts, id by id, from ``reader.TOKEN_CHECK_START`` up to the smaller size.

(The copy in speculative.cpp keeps the vocabulary type in a ``bool``, so it only tells "none" from
"some"; the common one, used by llama-server and llama-speculative-simple, compares the type
itself. We follow the stricter one.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from llamaspec.base.errors import LlamaspecError
from llamaspec.models.reader import TOKEN_CHECK_START, Vocab

MAX_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE


def first_mismatch(target: Vocab, draft: Vocab,
                   tokens: Callable[[], tuple[list[str], list[str]]] | None = None) -> str | None:
    """The first difference llama.cpp would refuse, in words; None when the pair is accepted.

    ``tokens`` gives both token lists when the token texts must be compared one by one (only
    needed when the digests of the two vocabularies differ).
    """
    if target.type != draft.type:
        return f"vocabulary type differs: target {target.type} ({target.model}), draft {draft.type} ({draft.model})"
    if target.add_bos != draft.add_bos:
        return f"add-BOS differs: target {target.add_bos}, draft {draft.add_bos}"
    if target.add_bos and target.bos_id != draft.bos_id:
        return f"BOS token id differs: target {target.bos_id}, draft {draft.bos_id}"
    if target.add_eos != draft.add_eos:
        return f"add-EOS differs: target {target.add_eos}, draft {draft.add_eos}"
    if target.add_eos and target.eos_id != draft.eos_id:
        return f"EOS token id differs: target {target.eos_id}, draft {draft.eos_id}"
    diff = abs(target.size - draft.size)
    if diff > MAX_SIZE_DIFFERENCE:
        return (f"vocabulary sizes differ by {diff} (target {target.size}, draft {draft.size}); "
                f"llama.cpp allows at most {MAX_SIZE_DIFFERENCE}")
    if target.size == draft.size and target.tokens_sha256 == draft.tokens_sha256:
        return None
    if tokens is None:
        return "token texts differ (the vocabularies' digests differ)"
    target_tokens, draft_tokens = tokens()
    for i in range(TOKEN_CHECK_START, min(len(target_tokens), len(draft_tokens))):
        if target_tokens[i] != draft_tokens[i]:
            return f"token {i} differs: target {target_tokens[i]!r}, draft {draft_tokens[i]!r}"
    return None


def check(target: Path, target_vocab: Vocab, draft: Path, draft_vocab: Vocab) -> None:
    """Raise one LlamaspecError naming the first mismatch, or return when llama.cpp would accept."""
    from llamaspec.models import reader

    def tokens() -> tuple[list[str], list[str]]:
        return reader.read_tokens(target), reader.read_tokens(draft)

    problem = first_mismatch(target_vocab, draft_vocab, tokens)
    if problem:
        raise LlamaspecError(
            f"llama.cpp would refuse draft {draft.name} for target {target.name}: {problem}",
            hint="the draft must use the target's tokenizer: pick a draft from the same model family "
                 "(`llamaspec models list` shows each model's vocabulary)",
        )
