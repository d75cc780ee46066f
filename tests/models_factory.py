"""Small real inputs for the models tests: GGUF files llama.cpp can load, a Hugging Face Llama
checkpoint with a SentencePiece tokenizer trained on the spot, a Hugging Face cache laid out as
huggingface_hub lays it out, a PyPI wheel, and a catalog file."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from llamaspec.llamacpp.smoke import write_tiny_llama


def tiny_gguf(path: Path, *, tokens: list[str] | None = None, tokenizer: str = "llama", pre: str | None = None,
              add_bos: bool | None = None, bos: int | None = 1, eos: int | None = 2, n_embd: int = 64, seed: int = 0,
              write_tensors: bool = True, chat_template: str | None = None) -> Path:
    """A random-weight one-layer Llama GGUF that llama.cpp loads; vocabulary facts are parameters."""
    return write_tiny_llama(path, n_embd=n_embd, n_layer=1, seed=seed, tokens=tokens, tokenizer=tokenizer, pre=pre,
                            add_bos=add_bos, bos=bos, eos=eos, write_tensors=write_tensors, chat_template=chat_template)


def hf_checkpoint(folder: Path, seed: int = 0, tokenizer_from: Path | None = None, layers: int = 2,
                  byte_fallback: bool = False) -> Path:
    """A Hugging Face-format Llama checkpoint: config.json, safetensors weights, a SentencePiece
    tokenizer.model trained here on a few hundred lines (64 pieces; with ``byte_fallback`` 320, the
    256 byte pieces among them, so any text tokenizes as with Llama's own), or the one of the
    checkpoint ``tokenizer_from`` (a pair that shares its vocabulary, as CodeLlama and TinyLlama do)."""
    import sentencepiece as spm
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    words = ["def", "sort", "quick", "list", "return", "if", "else", "for", "in", "range", "len", "pivot", "left", "right", "python", "the", "a", "of", "to", "and"]
    lines = [" ".join(rng.choice(words, 12)) for _ in range(400)]
    model = io.BytesIO()
    if tokenizer_from is not None:
        model.write((tokenizer_from / "tokenizer.model").read_bytes())
    else:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=320 if byte_fallback else 64,
                                       model_type="bpe", character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                       byte_fallback=byte_fallback, minloglevel=2)
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    n_vocab = spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()
    h, ff = 64, 128
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h, "intermediate_size": ff,
              "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": n_vocab,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1,
              "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "float16"}
    (folder / "config.json").write_text(json.dumps(config))

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    tensors = {"model.embed_tokens.weight": w(n_vocab, h), "model.norm.weight": np.ones(h, np.float16),
               "lm_head.weight": w(n_vocab, h)}
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    for i in range(n_vocab):  # never generate a byte or control piece: the output stays text, with no early end
        if sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i):
            tensors["lm_head.weight"][i] = 0
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in "qkvo":
            tensors[f"{p}self_attn.{n}_proj.weight"] = w(h, h)
        tensors[f"{p}mlp.gate_proj.weight"] = w(ff, h)
        tensors[f"{p}mlp.up_proj.weight"] = w(ff, h)
        tensors[f"{p}mlp.down_proj.weight"] = w(h, ff)
        tensors[f"{p}input_layernorm.weight"] = np.ones(h, np.float16)
        tensors[f"{p}post_attention_layernorm.weight"] = np.ones(h, np.float16)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def hf_cache_entry(cache: Path, repo: str, checkpoint: Path, revision: str = "main",
                   commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """Put ``checkpoint``'s files into a Hugging Face cache as huggingface_hub does (blobs, a
    snapshot of symlinks, a ref), so offline lookups find it."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in checkpoint.iterdir():
        data = f.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / f.name).symlink_to(Path("../..") / "blobs" / blob.name)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / revision).write_text(commit)
    return snapshot


def wheel(folder: Path, package: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD) holding ``members``."""
    dist = package.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    files = {
        **members,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: llamaspec-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_catalog(models_dir: Path, models: dict[str, Any], default_pair: dict[str, Any] | None = None) -> Path:
    models_dir.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {"models": models}
    if default_pair:
        body["default_pair"] = default_pair
    path = models_dir / "catalog.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path
