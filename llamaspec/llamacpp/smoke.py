"""After every build: run each program, and push a tiny model through the quantizer and the
speculative program so that the first matrix product runs (where bad CPU flags fault)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from llamaspec.base import proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.cache import Build

log = logging.getLogger(__name__)


class IllegalInstruction(LlamaspecError):
    def __init__(self, program: str) -> None:
        super().__init__(f"{program} died with SIGILL")
        self.program = program


BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
DEFAULT_TOKENS = ["<unk>", "<s>", "</s>", *BYTE_TOKENS, "▁", "▁the", "▁a", "e", "t", "o"]


def write_tiny_llama(path: Path, *, n_embd: int = 64, n_layer: int = 2, seed: int = 0, tokens: list[str] | None = None,
                     tokenizer: str = "llama", pre: str | None = None, add_bos: bool | None = None, bos: int | None = 1,
                     eos: int | None = 2, write_tensors: bool = True, chat_template: str | None = None) -> Path:
    """A random-weight Llama GGUF that llama.cpp loads (a SentencePiece-style byte vocabulary by
    default, about 300 kB). The vocabulary facts are parameters, for pair-check tests; a chat
    template, for the chat prompt's tests."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = tokens if tokens is not None else DEFAULT_TOKENS
    types = [gguf.TokenType.CONTROL if t in ("<s>", "</s>") else gguf.TokenType.BYTE if t.startswith("<0x")
             else gguf.TokenType.UNKNOWN if t == "<unk>" else gguf.TokenType.NORMAL for t in tokens]
    n_vocab, n_ff = len(tokens), 2 * n_embd
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("llamaspec-tiny-llama")
    writer.add_context_length(256)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_rope_dimension_count(n_embd // 4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model(tokenizer)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(n_vocab)])
    writer.add_token_types(types)
    if tokenizer == "gpt2":
        writer.add_token_merges(["▁ t", "e t"])
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eos is not None:
        writer.add_eos_token_id(eos)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def t(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))

    if write_tensors:
        t("token_embd.weight", n_vocab, n_embd)
        for i in range(n_layer):
            writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
            writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                t(f"blk.{i}.{name}.weight", n_embd, n_embd)
            t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
            t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
            t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
        writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
        t("output.weight", n_vocab, n_embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _run(argv: list[str], what: str, log_path: Path, usage_ok: bool = False) -> proc.Completed:
    # cwd: beside the logs, where 2023 programs write their trace logs (speculative.log), not the user's folder
    done = proc.run(argv, log_path=log_path, timeout=120, check=False, what=what, cwd=log_path.parent)
    if done.signal_name == "SIGILL":
        raise IllegalInstruction(what)
    printed_usage = usage_ok and done.returncode > 0 and "usage" in (done.stdout + done.stderr).lower()
    if done.returncode != 0 and not printed_usage:
        proc.raise_failure(done, f"smoke test of {what}", log_path,
                           hint="the build looks broken; rebuild with `llamaspec build --force`")
    return done


def version_check(program: Path, logs: Path) -> None:
    """The one program runs here (``--version``): raise LlamaspecError (IllegalInstruction on SIGILL) if not."""
    logs.mkdir(parents=True, exist_ok=True)
    _run([str(program), "--version"], program.name, logs / f"smoke-{program.name}-version.log", usage_ok=True)


def check(build: Build) -> None:
    """Raise IllegalInstruction on SIGILL, LlamaspecError on any other failure."""
    from llamaspec.llamacpp import flags, programhelp

    logs = Path(build.bin_dir).parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for role in sorted(build.programs):
        program = build.program(role)
        # Older llama-bench and llama-quantize (early 2025) have no --version: they print their usage
        # and exit 1, which still shows that the binary loads and runs.
        _run([str(program), "--version"], program.name, logs / f"smoke-{program.name}-version.log", usage_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamaspec-smoke-") as tmp:
        f32 = write_tiny_llama(Path(tmp) / "tiny-f32.gguf")
        q4 = Path(tmp) / "tiny-q4_0.gguf"
        quantize = build.program("quantize")
        _run([str(quantize), str(f32), str(q4), "Q4_0"], quantize.name, logs / "smoke-quantize.log")
        spec = build.program("speculative")
        caps = programhelp.program_flags(spec)
        argv = flags.speculative_argv(caps, spec, flags.Invocation.of(
            target=str(f32), draft=str(q4), prompt="the", n_predict=8, draft_max=2, threads=2, seed=1, temperature=0.0,
            ctx_size=256,
        ), "speculative")
        _run(argv, spec.name, logs / "smoke-speculative.log")
    log.info("smoke test passed: %s", ", ".join(sorted(build.programs.values())))
