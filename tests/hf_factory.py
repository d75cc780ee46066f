"""A tiny Llama pair for the transformers backend tests, made here (no hub): a byte-level BPE
tokenizer trained on a few KB of text (256 bytes, 2 special tokens, the rest merges), a two-layer target and a one-layer assistant that shares the
target's embeddings, first layer and head (so they agree often, not always), saved with
save_pretrained as a real checkpoint folder."""

from __future__ import annotations

import random
from pathlib import Path

TEXT_WORDS = ["def", "sort", "quick", "list", "return", "if", "else", "for", "in", "range", "len", "pivot", "left", "right", "python", "the", "a", "of", "to", "and", "while", "true", "false", "none", "print", "value", "index", "array", "merge", "heap", "insert", "swap", "count"]


def corpus(seed: int = 0, lines: int = 300) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(TEXT_WORDS) for _ in range(12)) for _ in range(lines)]


def tokenizer(folder: Path, vocab_size: int = 300, seed: int = 0):  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(folder))
    return fast


def pair(root: Path, *, seed: int = 0, layer_scale: float = 0.0, other_tokenizer: bool = False,
         assistant_vocab: int = 280) -> tuple[Path, Path]:
    """``root/target`` (2 layers) and ``root/assistant`` (1 layer, the target's first); with
    ``other_tokenizer`` the assistant gets a tokenizer trained on other text, of ``assistant_vocab``
    entries (300 is the target's size), and weights of its own."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    target_dir, assistant_dir = root / "target", root / "assistant"
    tok = tokenizer(target_dir)
    config = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
                  max_position_embeddings=512, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  tie_word_embeddings=False)
    torch.manual_seed(seed)
    target = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), num_hidden_layers=2, **config))
    with torch.no_grad():  # a stronger second layer: the one-layer assistant then disagrees at times
        for p in target.model.layers[1].parameters():
            if p.dim() > 1:
                p.mul_(1 + layer_scale * 40)
    target.save_pretrained(str(target_dir))
    if other_tokenizer:
        atok = tokenizer(assistant_dir, vocab_size=assistant_vocab, seed=1)
        assistant = LlamaForCausalLM(LlamaConfig(vocab_size=len(atok), num_hidden_layers=1, **{
            **config, "bos_token_id": atok.bos_token_id, "eos_token_id": atok.eos_token_id}))
    else:
        tok.save_pretrained(str(assistant_dir))
        assistant = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), num_hidden_layers=1, **config))
        own = assistant.state_dict()
        assistant.load_state_dict({k: v for k, v in target.state_dict().items() if k in own})
    assistant.save_pretrained(str(assistant_dir))
    return target_dir, assistant_dir
