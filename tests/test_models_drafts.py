"""`llamaspec models drafts TARGET [FOLDER ...]`: which GGUF files llama.cpp would accept as a draft.

Small GGUF files are written here with `gguf` (tests/models_factory.py); the real offline pair's
quantizations are made with the real llama-quantize (marked llamacpp), and the foreign vocabulary
there is SmolLM2's own with one token changed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import gguf
import pytest
from click.testing import CliRunner
from models_factory import hf_cache_entry, tiny_gguf

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.llamacpp import modeltools
from llamaspec.models import drafts, reader

TOKENS = ["<unk>", "<s>", "</s>", *[f"<0x{i:02X}>" for i in range(256)], *[f"▁w{i}" for i in range(200)]]


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with empty download caches of its own (never the user's)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "llamaspec-cache"))
    return home


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    """A target and a folder of would-be drafts: two that fit (one bigger), a changed token, a vocabulary
    160 tokens larger, another tokenizer type, a truncated file, a file that is not GGUF."""
    target = tiny_gguf(tmp_path / "target.gguf", tokens=TOKENS, n_embd=128)
    folder = tmp_path / "drafts"
    folder.mkdir()
    tiny_gguf(folder / "small.gguf", tokens=TOKENS, n_embd=32)
    tiny_gguf(folder / "bigger.gguf", tokens=TOKENS, n_embd=64)
    changed = list(TOKENS)
    changed[300] = "▁changed"
    tiny_gguf(folder / "changed-token.gguf", tokens=changed, n_embd=32)
    tiny_gguf(folder / "larger-vocab.gguf", tokens=TOKENS + [f"▁x{i}" for i in range(160)], n_embd=32)
    tiny_gguf(folder / "gpt2.gguf", tokens=TOKENS, tokenizer="gpt2", n_embd=32)
    whole = (folder / "small.gguf").read_bytes()
    (folder / "cut.gguf").write_bytes(whole[: len(whole) // 2])
    (folder / "readme.gguf").write_text("not a model\n")
    (folder / "notes.txt").write_text("not looked at\n")
    return target, folder


def test_the_verdicts_smallest_first_and_the_reasons(tmp_path: Path, machine: Path) -> None:
    target, folder = _folder(tmp_path)
    found = drafts.survey(target, [folder])
    accepted = [c.path.name for c in found.of("accepted")]
    assert accepted == ["small.gguf", "bigger.gguf"]
    small, bigger = found.of("accepted")
    assert small.size == (folder / "small.gguf").stat().st_size < bigger.size
    assert small.parameters == reader.read(folder / "small.gguf").parameters > 0 and small.quantization == "F32"
    refused = {c.path.name: c.reason for c in found.of("refused")}
    assert refused == {
        "changed-token.gguf": "token 300 differs: target '▁w41', draft '▁changed'",
        "larger-vocab.gguf": "vocabulary sizes differ by 160 (target 459, draft 619); llama.cpp allows at most 128",
        "gpt2.gguf": "vocabulary type differs: target SPM (llama), draft BPE (gpt2)",
    }
    unreadable = {c.path.name: c.reason for c in found.of("unreadable")}
    assert set(unreadable) == {"cut.gguf", "readme.gguf"}
    assert unreadable["cut.gguf"].startswith("not a usable GGUF file: tensor ") and "truncated" in unreadable["cut.gguf"]
    assert unreadable["readme.gguf"] == "not a usable GGUF file: it starts with b'not ', not b'GGUF'"
    assert [c.verdict for c in found.candidates] == ["accepted"] * 2 + ["refused"] * 3 + ["unreadable"] * 2
    assert target not in [c.path for c in found.candidates]  # the target itself is no candidate


def test_the_pair_check_agrees(tmp_path: Path, machine: Path) -> None:
    """Same rules as `models check-pair` (the one comparison): what drafts refuses, check-pair refuses."""
    target, folder = _folder(tmp_path)
    ok = CliRunner().invoke(main, ["models", "check-pair", str(target), str(folder / "small.gguf")])
    assert ok.exit_code == 0 and "ok: llama.cpp accepts small.gguf as a draft for target.gguf" in ok.output
    bad = CliRunner().invoke(main, ["models", "check-pair", str(target), str(folder / "changed-token.gguf")])
    assert bad.exit_code == 1 and "token 300 differs: target '▁w41', draft '▁changed'" in bad.output


def test_the_caches_where_gguf_files_gather(tmp_path: Path, machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tiny_gguf(tmp_path / "target.gguf", tokens=TOKENS, n_embd=64)
    hub = machine / ".cache" / "huggingface" / "hub"
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    tiny_gguf(checkpoint / "draft-Q8_0.gguf", tokens=TOKENS, n_embd=32)
    hf_cache_entry(hub, "someone/tiny-GGUF", checkpoint)
    studio = machine / ".lmstudio" / "models" / "someone" / "tiny"
    studio.mkdir(parents=True)
    tiny_gguf(studio / "studio.gguf", tokens=TOKENS, n_embd=16)
    _projector(studio / "mmproj.gguf")
    llama_cache = tmp_path / "llama-cache"
    llama_cache.mkdir()
    tiny_gguf(llama_cache / "someone_tiny_draft.gguf", tokens=TOKENS, n_embd=24)
    monkeypatch.setenv("LLAMA_CACHE", str(llama_cache))
    found = drafts.survey(target)
    by_name = {c.path.name: c for c in found.candidates}
    assert [c.path.name for c in found.of("accepted")] == ["studio.gguf", "someone_tiny_draft.gguf", "draft-Q8_0.gguf"]
    hub_file = by_name["draft-Q8_0.gguf"]
    assert hub_file.place == "hf-cache" and hub_file.repo == "someone/tiny-GGUF" and "snapshots" in str(hub_file.path)
    assert by_name["studio.gguf"].place == "lm-studio" and by_name["someone_tiny_draft.gguf"].place == "llama-cache"
    assert by_name["mmproj.gguf"].verdict == "refused" and "no vocabulary (architecture clip" in by_name["mmproj.gguf"].reason
    assert [(p.kind, n) for p, n in found.places] == [("hf-cache", 1), ("llama-cache", 1), ("lm-studio", 2), ("lm-studio", -1)]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert "draft-Q8_0.gguf" not in {c.path.name for c in drafts.survey(target).candidates}


def _projector(path: Path) -> Path:
    """A GGUF with no vocabulary, as a multimodal projector (mmproj) is."""
    import numpy as np

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_tensor("mm.0.weight", np.ones((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_split_model_is_one_file_with_all_its_parts(tmp_path: Path, machine: Path) -> None:
    target = tiny_gguf(tmp_path / "target.gguf", tokens=TOKENS, n_embd=64)
    folder = tmp_path / "split"
    folder.mkdir()
    first = tiny_gguf(folder / "draft-00001-of-00002.gguf", tokens=TOKENS, n_embd=32)
    second = tiny_gguf(folder / "draft-00002-of-00002.gguf", tokens=TOKENS, n_embd=32, seed=1)
    found = drafts.survey(target, [folder], caches=False)
    assert [c.path.name for c in found.candidates] == ["draft-00001-of-00002.gguf"]
    whole = found.candidates[0]
    assert whole.size == first.stat().st_size + second.stat().st_size
    assert whole.parameters == 2 * reader.read(first).parameters
    second.unlink()
    assert drafts.survey(target, [folder], caches=False).candidates[0].reason == \
        f"draft-00001-of-00002.gguf is part of a model split in 2 files, and draft-00002-of-00002.gguf is not in {folder}"


def test_the_command_lists_and_explains(tmp_path: Path, machine: Path) -> None:
    target, folder = _folder(tmp_path)
    done = CliRunner().invoke(main, ["models", "drafts", str(target), str(folder)])
    assert done.exit_code == 0, done.output
    out = done.stdout
    assert "llama.cpp accepts 2 as a draft (smallest first):" in out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split() == ["SIZE", "PARAMS", "QUANT", "ARCH", "FILE"])
    assert lines[head + 1].endswith(str(folder / "small.gguf")) and lines[head + 2].endswith(str(folder / "bigger.gguf"))
    assert f"  {folder / 'changed-token.gguf'} (" in out and "): token 300 differs: target '▁w41', draft '▁changed'" in out
    assert "unreadable (2):" in out and f"{folder / 'cut.gguf'}: not a usable GGUF file" in out
    assert "looked in:" not in out and f"looked in: {folder} (7 GGUF)" in done.stderr  # where it looked: stderr
    data = json.loads(CliRunner().invoke(main, ["models", "drafts", str(target), str(folder), "--json"]).stdout)
    assert [d["verdict"] for d in data["drafts"]].count("accepted") == 2
    assert {d["path"]: d["reason"] for d in data["drafts"]}[str(folder / "changed-token.gguf")] == \
        "token 300 differs: target '▁w41', draft '▁changed'"
    assert data["target"]["vocab_size"] == len(TOKENS)


@pytest.mark.parametrize("argv, message", [
    (["models", "drafts", "missing.gguf"], "model file not found: missing.gguf"),
    (["models", "drafts", "{notes}"], "is not a usable GGUF file: it starts with b'not '"),
    (["models", "drafts", "{target}", "{tmp}/no-such-folder"], "folder not found: "),
    (["models", "drafts", "{target}", "--no-caches"], "--no-caches with no FOLDER leaves nowhere to look"),
])
def test_bad_input_is_one_line(tmp_path: Path, machine: Path, argv: list[str], message: str) -> None:
    target, folder = _folder(tmp_path)
    argv = [a.format(target=target, tmp=tmp_path, notes=folder / "notes.txt") for a in argv]
    done = CliRunner().invoke(main, argv)
    assert done.exit_code == 1 and message in done.output, done.output
    assert "Traceback" not in done.output


def test_headers_are_remembered_and_read_again_when_a_file_changes(tmp_path: Path, machine: Path) -> None:
    target, folder = _folder(tmp_path)
    cache = tmp_path / "headers"
    first = drafts.survey(target, [folder], caches=False, cache_dir=cache)
    assert first.read == 7
    again = drafts.survey(target, [folder], caches=False, cache_dir=cache)
    assert again.read == 2 and again.candidates == first.candidates  # the unreadable two: not kept, read again
    tiny_gguf(folder / "small.gguf", tokens=TOKENS[:-1] + ["▁other"], n_embd=32)  # replaced in place
    third = drafts.survey(target, [folder], caches=False, cache_dir=cache)
    assert third.read == 3
    assert {c.path.name: c.reason for c in third.of("refused")}["small.gguf"] == \
        f"token {len(TOKENS) - 1} differs: target '▁w199', draft '▁other'"


def test_two_hundred_files_are_each_judged(tmp_path: Path, machine: Path) -> None:
    """Headers only: 200 small files read and judged, each by its own vocabulary (how long that takes
    is benchmarks/drafts.py's to print, not a test's to time)."""
    target = tiny_gguf(tmp_path / "target.gguf", tokens=TOKENS, n_embd=64)
    folder = tmp_path / "many"
    folder.mkdir()
    fits = tiny_gguf(folder / "fits-000.gguf", tokens=TOKENS, n_embd=32)
    changed = list(TOKENS)
    changed[400] = "▁other"
    differs = tiny_gguf(folder / "differs-000.gguf", tokens=changed, n_embd=32)
    for i in range(1, 100):
        shutil.copy(fits, folder / f"fits-{i:03d}.gguf")
        shutil.copy(differs, folder / f"differs-{i:03d}.gguf")
    found = drafts.survey(target, [folder], caches=False)
    assert len(found.of("accepted")) == 100 and len(found.of("refused")) == 100
    assert {Path(f.path).name.split("-")[0] for f in found.of("refused")} == {"differs"}


def test_the_header_reader_agrees_with_ggufs_own(tmp_path: Path) -> None:
    """reader parses the header itself (fast); gguf's GGUFReader is the reference it must agree with."""
    from collections import Counter

    path = tiny_gguf(tmp_path / "t.gguf", tokens=TOKENS, tokenizer="gpt2", pre="smollm", add_bos=False, n_embd=32)
    meta = reader.read(path)
    slow = gguf.GGUFReader(path)
    tokens = slow.fields["tokenizer.ggml.tokens"]
    texts = [bytes(tokens.parts[i]).decode("utf-8", "surrogateescape") for i in tokens.data]
    assert reader.read_tokens(path) == texts
    assert meta.vocab.tokens_sha256 == hashlib.sha256(
        "".join(t + "\0" for t in texts[reader.TOKEN_CHECK_START:]).encode()).hexdigest()
    assert meta.parameters == sum(int(t.n_elements) for t in slow.tensors)
    assert meta.tensor_types == dict(Counter(t.tensor_type.name for t in slow.tensors))
    assert (meta.vocab.model, meta.vocab.pre, meta.vocab.add_bos, meta.gguf_version) == ("gpt2", "smollm", False, 3)


def test_a_header_cut_short_is_truncated_not_a_crash(tmp_path: Path) -> None:
    whole = tiny_gguf(tmp_path / "t.gguf", tokens=TOKENS, n_embd=16).read_bytes()
    for keep in (8, 30, 2000):
        (tmp_path / "cut.gguf").write_bytes(whole[:keep])
        with pytest.raises(LlamaspecError, match="truncated"):
            reader.read(tmp_path / "cut.gguf")


# --- the real offline pair ---------------------------------------------------------------------


@pytest.mark.llamacpp
@pytest.mark.slow
def test_the_offline_pairs_drafts_and_a_foreign_vocabulary(llama_build, tmp_path: Path, machine: Path) -> None:
    """SmolLM2-135M's quantizations made by the real llama-quantize are accepted, smallest first; the same
    vocabulary with one token changed (written with gguf) is refused, naming the token and its id."""
    from llamaspec import models

    files = {f.variant: f for f in models.ensure("smollm2-135m", ["f32", "q4_1", "q4_0"], tools=modeltools.tools(llama_build))}
    folder = tmp_path / "mine"
    folder.mkdir()
    for variant in ("q4_1", "q4_0"):
        (folder / files[variant].path.name).symlink_to(files[variant].path)
    tokens = reader.read_tokens(files["q4_1"].path)
    foreign = list(tokens)
    foreign[1234] = "Ġreduce"
    tiny_gguf(folder / "foreign.gguf", tokens=foreign, tokenizer="gpt2", pre="smollm", add_bos=False, bos=1, eos=2,
              write_tensors=False)
    done = CliRunner().invoke(main, ["models", "drafts", "smollm2-135m:f32", str(folder), "--no-caches"])
    assert done.exit_code == 0, done.output
    out = done.stdout
    assert "llama.cpp accepts 2 as a draft (smallest first):" in out
    rows = [line for line in out.splitlines() if line.endswith(".gguf") and "MB" in line]
    assert [r.split()[3] for r in rows] == ["Q4_0", "Q4_1"] and rows[0].split()[2] == "135M"
    assert f"{folder / 'foreign.gguf'} (" in out and "token 1234 differs: target 'Ġredu', draft 'Ġreduce'" in out
