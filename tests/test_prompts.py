"""Prompt-set loaders: JSONL (with a chat's earlier turns and the file's own "about" line),
Spec-Bench's question.jsonl, SPEED-Bench (parquet and JSONL), Alpaca (local copies, offline); the
built-in workload's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.studies import adhoc, prompts

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
    path = write(tmp_path / "alpaca.jsonl", [json.dumps(r) for r in ALPACA[:2]] + ["{cut short"])
    got = prompts.load(f"alpaca:{path}")
    assert len(got.prompts) == 2 and got.skipped[0].startswith("line 3: not JSON")
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


def test_jsonl_reads_a_chats_earlier_turns_and_skips_a_malformed_history_by_line(tmp_path: Path) -> None:
    user, assistant = {"role": "user", "content": "Plan a trip."}, {"role": "assistant", "content": "Where to?"}
    path = write(tmp_path / "set.jsonl", [
        json.dumps({"id": "trip", "prompt": "To Porto, for two days.", "history": [user, assistant]}),
        json.dumps({"id": "alone", "prompt": "Hello.", "history": []}),
        json.dumps({"id": "text", "prompt": "x", "history": "Plan a trip."}),
        json.dumps({"id": "role", "prompt": "x", "history": [{"role": "system", "content": "Be brief."}, assistant]}),
        json.dumps({"id": "order", "prompt": "x", "history": [assistant, user]}),
        json.dumps({"id": "open", "prompt": "x", "history": [user]}),
        json.dumps({"id": "empty", "prompt": "x", "history": [user, {"role": "assistant", "content": " "}]}),
        json.dumps({"id": "extra", "prompt": "x", "history": [{**user, "name": "ann"}, assistant]}),
        json.dumps({"id": "raw", "prompt": "x", "chat": False, "history": [user, assistant]}),
    ])
    got = prompts.load(str(path))
    assert [(p.id, p.history) for p in got.prompts] == [
        ("trip", (("user", "Plan a trip."), ("assistant", "Where to?"))), ("alone", ())]
    assert all(p.chat for p in got.prompts) and got.prompts[0].line == 1
    why = dict(s.split(": ", 1) for s in got.skipped)
    assert list(why) == [f"line {n}" for n in range(3, 10)]
    assert why["line 3"].startswith('"history" must be a list')
    assert why["line 4"] == "\"history\" turn 1: role 'system' is not user or assistant"
    assert why["line 5"].startswith("\"history\" turn 1 is 'assistant' where 'user' was due")
    assert why["line 6"].startswith('"history" must end with an assistant turn')
    assert why["line 7"] == '"history" turn 2: "content" must be a non-blank string'
    assert why["line 8"] == '"history" turn 1 must be an object with "role" and "content" only'
    assert why["line 9"].startswith('a "history" needs "chat": true')


def test_a_prompt_with_earlier_turns_comes_back_from_json_as_it_was() -> None:
    import dataclasses

    p = prompts.Prompt("t", "To Porto.", "multi-turn", True, 4, (("user", "Plan a trip."), ("assistant", "Where to?")))
    back = prompts.Prompt.from_dict(json.loads(json.dumps(dataclasses.asdict(p))))
    assert back == p and hash(back) == hash(p)


def test_the_about_line_is_read_into_the_set_not_skipped(tmp_path: Path) -> None:
    about = {"name": "mine", "source": "written for a test", "licence": "MIT", "categories": ["code"], "version": "3"}
    path = write(tmp_path / "set.jsonl", ["", json.dumps({"about": about}),
                                          json.dumps({"id": "a", "category": "code", "prompt": "Write a loop."}),
                                          json.dumps({"about": {"name": "again"}})])
    got = prompts.load(str(path))
    assert got.about == prompts.About(name="mine", source="written for a test", licence="MIT", version="3",
                                      categories=("code",))
    assert got.about.label == "mine, version 3 (written for a test; MIT)"
    assert [p.id for p in got.prompts] == ["a"] and got.total == 1
    assert got.skipped == ('line 4: an "about" object belongs on the first line',)
    # a line with a "prompt" is a prompt, whatever else it holds
    assert prompts.load(str(write(tmp_path / "meta.jsonl", [json.dumps({"prompt": "p", "about": "x"})]))).about is None
    for bad, said in [({"about": {"license": "MIT"}}, "\"about\" has an unknown key 'license'"),
                      ({"about": {"version": 2}}, '"about": "version" must be a string'),
                      ({"about": {"categories": "code"}}, '"about": "categories" must be a list of strings'),
                      ({"about": "mine"}, '"about" must be an object'),
                      ({"about": {}, "id": "x"}, 'the "about" line holds "about" only')]:
        got = prompts.load(str(write(tmp_path / "bad.jsonl", [json.dumps(bad), json.dumps({"prompt": "p"})])))
        assert got.about is None and len(got.skipped) == 1 and got.skipped[0].startswith(f"line 1: {said}"), got.skipped


def test_blank_and_repeated_prompts_and_repeated_ids_are_each_said_once_by_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    user, assistant = {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"}
    path = write(tmp_path / "set.jsonl", [
        json.dumps({"id": "a", "prompt": "Write a loop."}),
        json.dumps({"id": "blank", "prompt": " \t\n "}),
        json.dumps({"id": "again", "prompt": "  Write a loop.\n"}),
        json.dumps({"id": "a", "prompt": "Write a class."}),
        json.dumps({"id": "a", "prompt": "Write a test."}),
        json.dumps({"id": "turns", "prompt": "Write a loop.", "history": [user, assistant]}),  # another request
        json.dumps({"id": "rawly", "prompt": "Write a loop.", "chat": False}),  # another request too
    ])
    with caplog.at_level("WARNING"):
        got = prompts.load(str(path))
    assert [p.id for p in got.prompts] == ["a", "a#2", "a#3", "turns", "rawly"]
    assert [p.prompt for p in got.prompts][:3] == ["Write a loop.", "Write a class.", "Write a test."]
    assert got.skipped == ('line 2: the "prompt" is blank',
                           "line 3 (again): the same prompt as line 1 (a): measured once")
    assert got.notes == ("line 4: the id 'a' is taken (by line 1): named 'a#2'",
                         "line 5: the id 'a' is taken (by line 1): named 'a#3'")
    said = [r.getMessage() for r in caplog.records]
    for line in (*got.skipped, *got.notes):
        assert sum(line in m for m in said) == 1, (line, said)
    assert len(said) == 4
    # an id that a rename would take is left to its owner
    clash = prompts.load(str(write(tmp_path / "clash.jsonl", [json.dumps({"id": i, "prompt": t}) for i, t in
                                                              [("a", "x"), ("a", "y"), ("a#2", "z")]])))
    assert [p.id for p in clash.prompts] == ["a", "a#3", "a#2"]


def test_many_problems_are_said_one_line_each_up_to_a_count(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "set.jsonl", [json.dumps({"question_id": 1, "turns": ["same"]})] * (prompts.SAID_AT_MOST + 6))
    with caplog.at_level("WARNING"):
        got = prompts.load(f"spec-bench:{path}")
    assert len(got.prompts) == 1 and len(got.skipped) == prompts.SAID_AT_MOST + 5
    assert got.skipped[-1] == f"line {prompts.SAID_AT_MOST + 6} (1): the same prompt as line 1 (1): measured once"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == prompts.SAID_AT_MOST + 1 and said[-1].endswith(f"5 more like these (llamaspec prompts list "
                                                                       f"spec-bench:{path} shows each)")


def test_a_workload_too_long_for_the_context_counts_its_earlier_turns() -> None:
    long_talk = prompts.Prompt("q", "Go on.", "chat", True, 3, (("user", "word " * 800), ("assistant", "ok")))
    with pytest.raises(LlamaspecError) as err:
        prompts.check_workload([long_talk], ctx_size=1024, n_predict=64)
    assert err.value.message.startswith("line 3 (q): a prompt of 4,008 characters (about 1,002 tokens)")
    assert prompts.check_workload([prompts.Prompt("p", "Go on.")], ctx_size=1024, n_predict=64)[0].id == "p"


SPEED = [
    {"question_id": "c1", "category": "coding", "sub_category": "python", "turns": ["Write a parser.", "Add tests."],
     "source": "written for a test", "src_id": "1", "difficulty": "easy", "multiturn": True},
    {"question_id": "r1", "category": "rag", "sub_category": "qa", "turns": ["Context: ... Question: why?"],
     "source": "written for a test", "src_id": "2", "difficulty": "hard", "multiturn": False},
    {"question_id": "x1", "category": "rag", "turns": [" "], "multiturn": False},
    {"question_id": "x2", "category": "math", "turns": "What is 2+2?", "multiturn": False},
]


def test_speed_bench_jsonl_loads_as_spec_benchs_turns(tmp_path: Path) -> None:
    path = write(tmp_path / "speed.jsonl", [json.dumps(r) for r in SPEED])
    first = prompts.load(f"speed-bench:{path}")
    assert [(p.id, p.category, p.prompt, p.line) for p in first.prompts] == [
        ("c1", "coding", "Write a parser.", 1), ("r1", "rag", "Context: ... Question: why?", 2)]
    assert first.categories() == ["coding", "rag"] and all(p.chat for p in first.prompts)
    assert first.skipped == ('line 3: no "turns" list of non-blank strings', 'line 4: no "turns" list of non-blank strings')
    every = prompts.load(prompts.parse_source(f"speed-bench:{path}", turns="all", format="raw"))
    assert [p.id for p in every.prompts] == ["c1-t1", "c1-t2", "r1-t1"] and not any(p.chat for p in every.prompts)
    assert every.prompts[1].prompt == "Write a parser.\n\nAdd tests."
    assert every.source.label == f"speed-bench:{path}"


def test_speed_bench_parquet_as_the_data_set_ships(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pip install 'llamaspec[prompts]'")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(SPEED[:2] + SPEED[2:3]), tmp_path / "test-00000-of-00001.parquet")
    got = prompts.load(prompts.parse_source(f"speed-bench:{tmp_path / 'test-00000-of-00001.parquet'}", limit=1))
    assert [(p.id, p.category, p.line) for p in got.prompts] == [("c1", "coding", None)] and got.total == 2
    assert got.skipped == ('row 3: no "turns" list of non-blank strings',)
    (tmp_path / "cut.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(LlamaspecError, match="not a parquet file pyarrow can read") as err:
        prompts.load(f"speed-bench:{tmp_path / 'cut.parquet'}")
    assert err.value.hint


def test_speed_bench_needs_a_parquet_or_jsonl_path(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="speed-bench needs a path") as err:
        prompts.parse_source("speed-bench:")
    assert err.value.hint
    with pytest.raises(LlamaspecError, match="spec-bench needs a path: spec-bench:PATH/question.jsonl") as err:
        prompts.parse_source("spec-bench:")
    assert "question.jsonl" in (err.value.hint or "")
    csv = tmp_path / "speed.csv"
    csv.write_text("question_id,turns\n")
    with pytest.raises(LlamaspecError, match="speed.csv: SPEED-Bench is read from a .parquet or .jsonl file"):
        prompts.load(f"speed-bench:{csv}")
    with pytest.raises(LlamaspecError, match="prompt set not found"):
        prompts.load(f"speed-bench:{tmp_path / 'nope.parquet'}")
    bad = write(tmp_path / "bad.jsonl", [json.dumps(SPEED[3])])
    with pytest.raises(LlamaspecError, match="no usable prompts.*line 1") as err:
        prompts.load(f"speed-bench:{bad}")
    assert '"turns"' in (err.value.hint or "")
    with pytest.raises(LlamaspecError, match="unknown turns 'some'"):
        prompts.load(prompts.parse_source(f"speed-bench:{bad}", turns="some"))


BENCHMARK_KINDS = {"code", "multi-turn", "summarization", "rag", "math", "rewriting"}


def test_the_builtin_workload_stands_for_one() -> None:
    """Six kinds of task of the public speculative-decoding benchmarks, at least 8 chat prompts
    each, ids unique, nothing skipped, and the file says where it comes from."""
    got = adhoc.builtin_workload()
    assert not got.skipped and not got.notes
    assert set(got.categories()) >= BENCHMARK_KINDS
    assert all(sum(p.category == c for p in got.prompts) >= 8 for c in got.categories())
    assert all(p.chat for p in got.prompts) and len({p.id for p in got.prompts}) == len(got.prompts)
    assert len({(p.prompt, p.history) for p in got.prompts}) == len(got.prompts)
    about = got.about
    assert about is not None and about.source == "written for llamaspec" and about.licence == "MIT, as llamaspec"
    assert set(about.categories) == set(got.categories()) and about.name and about.version
    turns = [p for p in got.prompts if p.category == "multi-turn"]
    assert all(p.history and p.history[-1][0] == "assistant" for p in turns)
    assert not any(p.history for p in got.prompts if p.category != "multi-turn")
    # the categories take turns: the first prompts cover every one
    assert {p.category for p in got.prompts[:len(got.categories())]} == set(got.categories())
    # every prompt, its turns included, fits the smallest context llamaspec serves it with (-c 1024, -n 64)
    assert len(prompts.check_workload(got.prompts, ctx_size=1024, n_predict=64)) == len(got.prompts)


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


def test_cli_list_says_what_the_file_is_and_each_problem_once(tmp_path: Path) -> None:
    path = write(tmp_path / "set.jsonl", [
        json.dumps({"about": {"name": "mine", "licence": "MIT"}}),
        json.dumps({"id": "a", "prompt": "Write a loop.", "history": [{"role": "user", "content": "Hi."},
                                                                       {"role": "assistant", "content": "Hello!"}]}),
        json.dumps({"id": "a", "prompt": "Write a class."}),
        json.dumps({"id": "b", "prompt": "   "}),
        json.dumps({"id": "c", "prompt": "Write a class."}),
    ])
    result = CliRunner().invoke(main, ["prompts", "list", str(path), "--show"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 prompts of 2" in out and "about: mine (MIT)" in out and "(after 2 turns) Write a loop." in out
    for line in ('line 4: the "prompt" is blank', "line 5 (c): the same prompt as line 3 (a): measured once",
                 "line 3: the id 'a' is taken (by line 2): named 'a#2'"):
        assert out.count(line) == 1, (line, out)


def test_a_workloads_prompts_become_cases_by_one_function_at_the_settings_defaults() -> None:
    """Every route (sweep -m --prompts, an experiment over its prompt set) makes its cases with
    prompts.workload_cases: each prompt a case by its id, category and chat form, checked against
    the context at the settings over the settings' own defaults (ctx 4096, -n 256), no copy of them."""
    from llamaspec.measure.settings import Settings
    from llamaspec.studies.experiment import ModelRef

    target, draft = ModelRef("smollm2-135m", "f32"), ModelRef("smollm2-135m", "q4_1")
    talk = prompts.Prompt("q", "Go on.", "chat", True, 3, (("user", "hi"), ("assistant", "ok")))
    (case,) = prompts.workload_cases([talk], target, draft, Settings(threads=1))
    assert (case.name, case.category, case.chat, case.history, case.settings) == ("q", "chat", True, talk.history,
                                                                                    Settings(threads=1))
    near = prompts.Prompt("p", "word " * 3180)  # 3,975 tokens: fits with -n 64, not with the default 256
    assert prompts.workload_cases([near], target, draft, Settings(n_predict=64))
    with pytest.raises(LlamaspecError, match="256 to generate do not fit the context of 4096 tokens"):
        prompts.workload_cases([near], target, draft, Settings())
