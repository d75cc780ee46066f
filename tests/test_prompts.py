"""Prompt-set loaders: JSONL, Spec-Bench's question.jsonl, Alpaca (local copies, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.studies import prompts

ROOT = Path(__file__).resolve().parent.parent


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_reads_prompts_categories_ids_and_reports_bad_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "set.jsonl", [
        json.dumps({"id": "a", "category": "code", "prompt": "Write a loop."}),
        "{not json",
        json.dumps({"category": "prose"}),
        "",
        json.dumps({"prompt": "Tell a story.", "category": "prose", "chat": False}),
        json.dumps(["a", "list"]),
        json.dumps({"id": "a", "prompt": "Same id again."}),
    ])
    got = prompts.load(str(path))
    assert [p.id for p in got.prompts] == ["a", "line5", "a#2"]
    assert [p.category for p in got.prompts] == ["code", "prose", "uncategorized"]
    assert [p.chat for p in got.prompts] == [True, False, True]
    assert [s.split(":")[0] for s in got.skipped] == ["line 2", "line 3", "line 6"]
    assert "not JSON" in got.skipped[0] and "prompt" in got.skipped[1]


def test_raw_format_sends_prompts_without_the_chat_template(tmp_path: Path) -> None:
    path = write(tmp_path / "set.jsonl", [json.dumps({"prompt": "x"})])
    got = prompts.load(prompts.parse_source(str(path), format="raw"))
    assert got.prompts[0].chat is False


def test_empty_file_is_an_error_with_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.jsonl", [""])
    with pytest.raises(LlamaspecError, match="holds no prompts") as info:
        prompts.load(str(path))
    assert info.value.hint and '"prompt"' in info.value.hint
    bad = write(tmp_path / "bad.jsonl", ["{", "[]"])
    with pytest.raises(LlamaspecError, match="no usable prompts.*line 1"):
        prompts.load(str(bad))


def test_missing_file_names_the_shipped_sets(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="not found") as info:
        prompts.load(str(tmp_path / "nope.jsonl"))
    assert "llamaspec-mini" in (info.value.hint or "")


def test_limit_and_seeded_sample() -> None:
    items = [prompts.Prompt(str(i), f"p{i}") for i in range(20)]
    assert [p.id for p in prompts.select(items, 3, None)] == ["0", "1", "2"]
    a = prompts.select(items, 5, seed=7)
    b = prompts.select(items, 5, seed=7)
    c = prompts.select(items, 5, seed=8)
    assert a == b and a != c and len(a) == 5
    assert [int(p.id) for p in a] == sorted(int(p.id) for p in a)  # file order kept
    assert prompts.select(items, 50, seed=1) == items


def test_spec_bench_first_turn_and_all_turns(tmp_path: Path) -> None:
    path = write(tmp_path / "question.jsonl", [
        json.dumps({"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it."]}),
        json.dumps({"question_id": 82, "category": "math", "turns": ["What is 2+2?"]}),
        json.dumps({"question_id": 83, "category": "math"}),
    ])
    first = prompts.load(f"spec-bench:{path}")
    assert [(p.id, p.category, p.prompt) for p in first.prompts] == [
        ("81", "writing", "Compose a blog post."), ("82", "math", "What is 2+2?")]
    assert first.skipped and first.skipped[0].startswith("line 3")
    every = prompts.load(prompts.parse_source(f"spec-bench:{path}", turns="all"))
    assert [p.id for p in every.prompts] == ["81-t1", "81-t2", "82-t1"]
    assert every.prompts[1].prompt == "Compose a blog post.\n\nRewrite it."


ALPACA = [
    {"instruction": "Give three tips for staying healthy.", "input": "", "output": "1. Eat..."},
    {"instruction": "Translate to French.", "input": "Good morning", "output": "Bonjour"},
    {"instruction": "", "input": "x", "output": "y"},
]


def test_alpaca_local_json_in_chat_and_alpaca_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "alpaca_data.json"
    path.write_text(json.dumps(ALPACA))
    chat = prompts.load(prompts.parse_source(f"alpaca:{path}"))
    assert [p.prompt for p in chat.prompts] == ["Give three tips for staying healthy.", "Translate to French.\n\nGood morning"]
    assert [p.category for p in chat.prompts] == ["no-input", "with-input"]
    assert all(p.chat for p in chat.prompts) and chat.skipped == ("record 3: no \"instruction\"",)
    own = prompts.load(prompts.parse_source(f"alpaca:{path}", format="alpaca"))
    assert not any(p.chat for p in own.prompts)
    assert own.prompts[1].prompt == (
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n### Instruction:\nTranslate to French.\n\n"
        "### Input:\nGood morning\n\n### Response:\n")
    assert own.prompts[0].prompt.endswith("### Instruction:\nGive three tips for staying healthy.\n\n### Response:\n")


def test_alpaca_local_jsonl_and_parquet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = write(tmp_path / "alpaca.jsonl", [json.dumps(r) for r in ALPACA[:2]])
    assert len(prompts.load(f"alpaca:{path}").prompts) == 2
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(ALPACA[:2]), tmp_path / "train.parquet")
    assert len(prompts.load(f"alpaca:{tmp_path / 'train.parquet'}").prompts) == 2


def test_alpaca_from_the_hub_offline_without_a_cache_says_what_to_do(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(LlamaspecError, match="dataset tatsu-lab/alpaca@main is not in the Hugging Face cache") as info:
        prompts.load("alpaca")
    assert "alpaca:PATH" in (info.value.hint or "")


def test_alpaca_from_a_populated_hub_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real hub code path (snapshot_download, local_files_only) on a cache laid out as the hub leaves it."""
    cache = tmp_path / "hub"
    repo = cache / "datasets--tatsu-lab--alpaca"
    commit = "a" * 40
    snap = repo / "snapshots" / commit / "data"
    snap.mkdir(parents=True)
    (snap / "train.json").write_text(json.dumps(ALPACA[:2]))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    got = prompts.load(prompts.parse_source("alpaca", limit=1))
    assert [p.id for p in got.prompts] == ["alpaca-1"] and got.total == 2


def test_alpaca_hub_parquet_from_a_populated_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's own layout: tatsu-lab/alpaca ships data/train-*.parquet (read with the prompts extra)."""
    pq = pytest.importorskip("pyarrow.parquet", reason="pip install 'llamaspec[prompts]'")
    import pyarrow as pa

    cache = tmp_path / "hub"
    repo = cache / "datasets--tatsu-lab--alpaca"
    commit = "b" * 40
    data = repo / "snapshots" / commit / "data"
    data.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ALPACA), data / "train-00000-of-00001-a09b74b3ef9c3b56.parquet")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    got = prompts.load(prompts.parse_source("alpaca", format="alpaca"))
    assert got.total == 2 and got.skipped == ("record 3: no \"instruction\"",)
    assert [p.category for p in got.prompts] == ["no-input", "with-input"] and not got.prompts[0].chat
    assert "### Input:\nGood morning" in got.prompts[1].prompt


def test_parquet_without_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(LlamaspecError, match="needs pyarrow") as info:
        prompts.load(f"alpaca:{tmp_path / 'train.parquet'}")
    assert "llamaspec[prompts]" in (info.value.hint or "")


def test_shipped_set_has_40_prompts_in_4_categories_with_code_to_edit() -> None:
    got = prompts.load(str(ROOT / "experiments" / "prompts" / "llamaspec-mini.jsonl"))
    assert len(got.prompts) >= 40 and not got.skipped
    assert {"code-writing", "code-editing", "instructions", "prose"} <= set(got.categories())
    assert len({p.id for p in got.prompts}) == len(got.prompts)
    edits = [p for p in got.prompts if p.category == "code-editing"]
    assert len(edits) >= 10 and all("```" in p.prompt for p in edits)


def test_cli_lists_a_set_with_categories_and_skipped_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "set.jsonl", [json.dumps({"prompt": "a", "category": "x"}), "oops"])
    result = CliRunner().invoke(main, ["prompts", "list", str(path), "--show"])
    assert result.exit_code == 0, result.output
    assert "1 prompts of 1" in result.output and "skipped line 2" in result.output and "line1" in result.output
