"""The pair check: llama.cpp's rules on recorded vocabularies, and agreement with the real llama.cpp."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from models_factory import tiny_gguf

from llamaspec import models
from llamaspec.base import proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.smoke import BYTE_TOKENS
from llamaspec.models import pair
from llamaspec.models.reader import GGUFMetadata, Vocab

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"


def _recorded(variant: str) -> Vocab:
    data = json.loads((FIXTURES / f"smollm2-135m-{variant}.metadata.json").read_text())
    return GGUFMetadata.from_dict(data["metadata"]).vocab


SMOL_F32 = _recorded("f32")
SMOL_Q4_1 = _recorded("q4_1")


def test_requantized_smollm2_matches_the_shipped_vocabulary() -> None:
    assert SMOL_F32 == SMOL_Q4_1
    assert pair.first_mismatch(SMOL_F32, SMOL_Q4_1) is None


@pytest.mark.parametrize(("changes", "expected"), [
    ({"type": "SPM", "model": "llama"}, "vocabulary type differs: target BPE (gpt2), draft SPM (llama)"),
    ({"add_bos": True}, "add-BOS differs: target False, draft True"),
    ({"add_eos": True}, "add-EOS differs: target False, draft True"),
    ({"size": 49152 + 129}, "vocabulary sizes differ by 129 (target 49152, draft 49281)"),
    ({"size": 49152 - 200, "type": "SPM"}, "vocabulary type differs"),  # the first rule wins
    ({"tokens_sha256": "0" * 64}, "token texts differ"),
])
def test_first_mismatch_names_the_rule(changes: dict, expected: str) -> None:
    draft = dataclasses.replace(SMOL_Q4_1, **changes)
    assert expected in (pair.first_mismatch(SMOL_F32, draft) or "")


def test_bos_and_eos_ids_only_count_when_they_are_added() -> None:
    # llama.cpp compares the ids only when the add flag is set (SmolLM2 adds neither).
    other_ids = dataclasses.replace(SMOL_Q4_1, bos_id=7, eos_id=8)
    assert pair.first_mismatch(SMOL_F32, other_ids) is None
    adding = dataclasses.replace(SMOL_F32, add_bos=True, add_eos=True)
    assert "BOS token id differs: target 1, draft 7" in (
        pair.first_mismatch(adding, dataclasses.replace(other_ids, add_bos=True, add_eos=True)) or "")
    assert "EOS token id differs: target 2, draft 8" in (
        pair.first_mismatch(adding, dataclasses.replace(other_ids, add_bos=True, add_eos=True, bos_id=1)) or "")


def test_token_texts_compared_from_id_5_up_to_the_smaller_size() -> None:
    base = ["<unk>", "<s>", "</s>", "a", "b", "c", "d", "e"]
    target = dataclasses.replace(SMOL_F32, size=len(base) + 100, tokens_sha256="t")
    draft = dataclasses.replace(SMOL_F32, size=len(base), tokens_sha256="d")
    longer = base + [f"x{i}" for i in range(100)]
    # ids below 5 are not compared, and the target's extra ids are beyond the draft's size
    assert pair.first_mismatch(target, draft, lambda: (longer, ["?", "?", "?", "?", "?", *base[5:]])) is None
    changed = [*base[:6], "D", *base[7:]]
    assert pair.first_mismatch(target, draft, lambda: (longer, changed)) == "token 6 differs: target 'd', draft 'D'"


def test_check_pair_raises_one_error_naming_files_and_mismatch(tmp_path: Path) -> None:
    spm = tiny_gguf(tmp_path / "spm.gguf")
    bpe = tiny_gguf(tmp_path / "bpe.gguf", tokenizer="gpt2", pre="smollm", add_bos=False)
    with pytest.raises(LlamaspecError) as err:
        models.check_pair(bpe, spm)
    message = err.value.message
    assert message.startswith("llama.cpp would refuse draft spm.gguf for target bpe.gguf: vocabulary type differs")
    assert "same model family" in (err.value.hint or "")
    models.check_pair(spm, tiny_gguf(tmp_path / "spm2.gguf", seed=3))


def _tokens(extra: int = 0, change: int | None = None) -> list[str]:
    tokens = ["<unk>", "<s>", "</s>", *BYTE_TOKENS, "▁", "▁the", "▁a", "e", "t", "o"]
    tokens += [f"▁w{i}" for i in range(extra)]
    if change is not None:
        tokens[change] = "▁changed"
    return tokens


# draft built from these changes -> (what our check says, what llama-speculative says on stderr)
AGREEMENT: dict[str, tuple[dict[str, Any], str | None, str | None]] = {
    "same-vocabulary": ({}, None, None),
    "token-text": ({"tokens": _tokens(change=10)}, "token 10 differs", "token 10 content differs"),
    "size": ({"tokens": _tokens(extra=200)}, "sizes differ by 200", "difference 200"),
    "add-bos": ({"add_bos": False}, "add-BOS differs", "bos tokens must match"),
    "eos-id": ({"add_bos": True, "eos": 3}, None, None),  # EOS is not added: its id does not matter
}


@pytest.mark.llamacpp
@pytest.mark.parametrize("case", sorted(AGREEMENT))
def test_llama_cpp_agrees_with_the_pair_check(llama_build, tmp_path: Path, case: str) -> None:
    from llamaspec.llamacpp import flags, programhelp

    changes, ours, theirs = AGREEMENT[case]
    target = tiny_gguf(tmp_path / "target.gguf")
    draft = tiny_gguf(tmp_path / "draft.gguf", seed=1, **changes)
    if ours is None:
        models.check_pair(target, draft)
    else:
        with pytest.raises(LlamaspecError, match=ours):
            models.check_pair(target, draft)
    program = llama_build.program("speculative")
    argv = flags.speculative_argv(programhelp.program_flags(program), program, flags.Invocation.of(
        target=str(target), draft=str(draft), prompt="the", n_predict=4, draft_max=2, threads=2, seed=1, ctx_size=256), "speculative")
    done = proc.run(argv, check=False, timeout=120, log_path=tmp_path / "speculative.log")
    if theirs is None:
        assert done.returncode == 0, done.tail()
    else:
        assert done.returncode != 0
        # llama.cpp logs from a thread and returns at once, so its reason is often lost: when it
        # made it to stderr, it must be the rule we named.
        errors = [line for line in done.stderr.splitlines() if " E " in line]
        if errors:
            assert theirs in done.stderr, errors
