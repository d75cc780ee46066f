"""Models on the command line (llamaspec.studies.adhoc, llamaspec.models.given): spec parsing, the study's
name, bad input as one line, and ``USER/REPO[:QUANT]`` through the loopback hub with the real
huggingface_hub. The real binaries on the offline pair: tests/test_adhoc_llamacpp.py."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hub_server import Hub
from models_factory import tiny_gguf

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.measure import spectypes
from llamaspec.measure.settings import Settings
from llamaspec.models import given, pins
from llamaspec.studies import adhoc, experiment
from llamaspec.studies.experiment import GIVEN, ModelRef


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Two tiny GGUF files sharing a vocabulary (a target and a draft), and a cache of the test's own."""
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "models"
    folder.mkdir()
    return tiny_gguf(folder / "target.gguf", seed=0), tiny_gguf(folder / "draft.gguf", seed=1)


# --- parsing ---------------------------------------------------------------------------------------

def test_parse_tells_paths_repos_and_catalog_names_apart(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    target, _draft = pair
    assert given.parse(str(target)) == given.Spec("file", str(target))
    monkeypatch.chdir(target.parent)
    assert given.parse("target.gguf") == given.Spec("file", str(target))  # relative: made absolute
    assert given.parse("bartowski/SmolLM2-135M-GGUF:Q4_0") == given.Spec("hub", "bartowski/SmolLM2-135M-GGUF:Q4_0")
    spec = given.parse("bartowski/SmolLM2-135M-GGUF")
    assert (spec.kind, spec.repo, spec.quant) == ("hub", "bartowski/SmolLM2-135M-GGUF", None)
    assert given.parse("smollm2-135m:q4_1") == given.Spec("catalog", "smollm2-135m:q4_1")
    assert given.parse("smollm2-135m").kind == "catalog"


@pytest.mark.parametrize(("text", "message"), [
    ("missing.gguf", "model file not found: missing.gguf"),
    ("./nowhere/x", "model file not found: ./nowhere/x"),
    ("a b c", "cannot read 'a b c' as a model"),
    ("", "empty model name"),
])
def test_parse_refuses_in_one_line(text: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LlamaspecError) as err:
        given.parse(text)
    assert err.value.message == message and err.value.hint


def test_a_folder_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="is a folder, not a GGUF file"):
        given.parse(str(tmp_path))


def test_quant_names_as_llama_cpp_repos_write_them() -> None:
    assert given.quant_of("SmolLM2-135M-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert given.quant_of("smollm2-135m.q4_0.gguf") == "Q4_0"
    assert given.quant_of("Big-IQ2_XS-00002-of-00003.gguf") == "IQ2_XS"
    assert given.quant_of("model-f16.gguf") == "F16"
    assert given.quant_of("model.gguf") is None


def test_choose_picks_the_quant_and_every_split_part() -> None:
    names = ["README.md", "m-Q4_0.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf",
             "m-Q4_K_M-00002-of-00002.gguf", "m-Q4_K_M-00001-of-00002.gguf"]
    assert given.choose("o/r", "q8_0", names) == ["m-Q8_0.gguf"]  # case-insensitive, as -hf
    assert given.choose("o/r", None, names) == ["m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf"]
    assert given.choose("o/r", None, ["m-Q8_0.gguf", "m-Q4_0.gguf"]) == ["m-Q4_0.gguf"]  # no Q4_K_M: the first
    with pytest.raises(LlamaspecError) as err:
        given.choose("o/r", "Q5_K_M", names)
    assert err.value.message == "o/r has no Q5_K_M GGUF file (its quants: Q4_0, Q4_K_M, Q8_0)"  # the projector is no quant
    with pytest.raises(LlamaspecError) as err:
        given.choose("o/r", None, ["config.json", "model.safetensors"])
    assert err.value.message == "o/r has no GGUF files (files there: config.json, model.safetensors)"
    with pytest.raises(LlamaspecError, match="split in 3 files and m-Q4_0-00003-of-00003.gguf is not in the repo"):
        given.choose("o/r", "Q4_0", ["m-Q4_0-00001-of-00003.gguf", "m-Q4_0-00002-of-00003.gguf"])


# --- files ---------------------------------------------------------------------------------------

def test_a_file_that_is_not_gguf_or_is_truncated_is_refused(pair, tmp_path: Path) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("these are notes, not weights\n")
    with pytest.raises(LlamaspecError, match=r"is not a usable GGUF file: it starts with b'thes'"):
        given.open_ref(str(text))
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(pair[0].read_bytes()[:-5000])
    with pytest.raises(LlamaspecError, match="truncated"):
        given.open_ref(str(cut))


def test_a_split_model_needs_every_part_and_hashes_them_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    first = tiny_gguf(tmp_path / "m-00001-of-00002.gguf", seed=0)
    with pytest.raises(LlamaspecError, match=r"split in 2 files, and m-00002-of-00002.gguf is not in"):
        given.describe_file(first)
    second = tiny_gguf(tmp_path / "m-00002-of-00002.gguf", seed=1)
    got = given.describe_file(second)  # any part names the model; the first is what llama.cpp loads
    assert got.path == first
    assert [p["file"] for p in got.provenance["parts"]] == [first.name, second.name]
    assert got.metadata.file_size == first.stat().st_size + second.stat().st_size
    assert got.sha256 != given.file_sha256(first)


def test_checksums_are_kept_until_the_file_changes(pair, settled) -> None:
    target, _ = pair
    first = given.file_sha256(target)
    kept = json.loads(given._checksums_path().read_text())
    assert kept[str(target)]["sha256"] == first
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    assert given.file_sha256(target) != first  # a changed file is read again, not taken from the cache


def _flip_a_byte_keeping_size_and_mtime(path: Path) -> None:
    """One byte of ``path`` changed in place, its size and mtime set back (a copy that keeps
    mtimes, a file rewritten in place): only its ctime, which cannot be set back, tells."""
    st = path.stat()
    time.sleep(0.05)  # a later tick of the filesystem's clock than the file's last change
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = path.stat()
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written a moment ago count as settled (as any older file does), so that their checksums
    are kept and a stamp that misses a change would be believed; and nothing resolved before."""
    monkeypatch.setattr(given, "RACY_NS", 0)
    given._resolved.clear()
    yield
    given._resolved.clear()


def test_a_kept_checksum_stands_in_for_the_file_only_while_its_stamp_holds(pair, settled) -> None:
    target, _ = pair
    first = given.file_sha256(target)
    kept = json.loads(given._checksums_path().read_text())
    kept[str(target)]["sha256"] = "0" * 64  # what the cache says is what an unchanged file gets
    given._checksums_path().write_text(json.dumps(kept))
    assert given.file_sha256(target) == "0" * 64
    _flip_a_byte_keeping_size_and_mtime(target)
    assert given.file_sha256(target) not in ("0" * 64, first)  # read again: its ctime moved


def test_a_file_resolved_earlier_in_the_process_is_read_again_when_its_bytes_change(pair, settled, tmp_path: Path) -> None:
    target, _ = pair
    before = given.open_ref(str(target))
    assert given.open_ref(str(target)) is before  # unchanged: remembered
    _flip_a_byte_keeping_size_and_mtime(target)
    assert given.open_ref(str(target)).sha256 != before.sha256
    first = tiny_gguf(tmp_path / "s-00001-of-00002.gguf", seed=0)
    second = tiny_gguf(tmp_path / "s-00002-of-00002.gguf", seed=1)
    split = given.open_ref(str(first))
    _flip_a_byte_keeping_size_and_mtime(second)  # a split model: any part, not only the first
    assert given.open_ref(str(first)).sha256 != split.sha256


def test_a_study_named_for_a_file_refuses_it_after_one_byte_changed_in_place(pair, settled, tmp_path: Path) -> None:
    """The issue's steps: `run -m T -md D --name s`, one byte of D flipped with its size and mtime
    kept, then the same command: refused in one line with a hint, nothing measured."""
    from fakes import fake_bin_dir

    target, draft = pair
    args = ["run", "-m", str(target), "-md", str(draft), "-p", "def f(x):", "-n", "8", "--repeats", "1",
            "--name", "s", "--bin-dir", str(fake_bin_dir(tmp_path / "bin"))]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert str(draft) in json.loads(given._checksums_path().read_text())  # its checksum now stands in for it
    _flip_a_byte_keeping_size_and_mtime(draft)
    given._resolved.clear()  # the same command again: a new process
    code, lines = _error(args)
    assert code != 0 and lines[0].startswith(f"Error: {draft} has changed since study s was named for it"), lines
    assert len(lines) == 2 and lines[1].startswith("Hint: "), lines


# --- the study -----------------------------------------------------------------------------------

def test_experiment_from_models_names_the_study_by_files_and_settings(pair) -> None:
    target, draft = pair
    exp = adhoc.experiment_from_models(str(target), [str(draft)], settings=Settings(n_predict=16), prompt="def f(x):")
    again = adhoc.experiment_from_models(str(target), [str(draft)], settings=Settings(n_predict=16), prompt="def f(x):")
    assert exp.name == again.name and exp.name.startswith("target-draft-")
    (case,) = exp.cases
    assert case.target == ModelRef(GIVEN, str(target)) and case.draft == ModelRef(GIVEN, str(draft))
    assert case.prompt == "def f(x):" and case.settings.n_predict == 16 and exp.engine == "llama.cpp"
    others = {adhoc.experiment_from_models(str(target), [str(draft)], settings=Settings(n_predict=32), prompt="def f(x):").name,
              adhoc.experiment_from_models(str(target), [str(draft)], settings=Settings(n_predict=16), prompt="def g(x):").name,
              adhoc.experiment_from_models(str(draft), [str(target)], settings=Settings(n_predict=16), prompt="def f(x):").name}
    assert exp.name not in others and len(others) == 3
    # the name follows the bytes, not the path: the same file elsewhere is the same study
    copy = target.parent / "elsewhere" / "target.gguf"
    copy.parent.mkdir()
    copy.write_bytes(target.read_bytes())
    moved = adhoc.experiment_from_models(str(copy), [str(draft)], settings=Settings(n_predict=16), prompt="def f(x):")
    assert moved.name == exp.name
    named = adhoc.experiment_from_models(str(target), [str(draft)], prompt="x", name="my-pair")
    assert named.name == "my-pair"


def test_without_a_prompt_the_builtin_workload_is_one_case_per_prompt(pair) -> None:
    exp = adhoc.experiment_from_models(str(pair[0]), [str(pair[1])])
    workload = adhoc.builtin_workload().prompts
    assert [(c.name, c.category, c.prompt, c.chat, c.history) for c in exp.cases] == [
        (p.id, p.category, p.prompt, True, p.history) for p in workload]
    categories = {c.category for c in exp.cases}
    assert len(categories) >= 6 and all(sum(c.category == k for c in exp.cases) >= 8 for k in categories)
    assert len({c.name for c in exp.cases}) == len(exp.cases) and all(c.prompt and c.chat for c in exp.cases)
    assert len({(c.prompt, c.history) for c in exp.cases}) == len(exp.cases)
    assert any(c.history for c in exp.cases if c.category == "multi-turn")
    assert adhoc.builtin_label(exp) == (f"{len(exp.cases)} prompts of the built-in workload "
                                        "(code, multi-turn, summarization, rag, math, rewriting)")


def test_run_without_a_prompt_plans_the_first_prompts_of_each_category_in_one_block_each(pair) -> None:
    """`run`'s sample of the built-in workload and the plan it states before it measures."""
    from llamaspec.studies import study

    full = adhoc.builtin_workload().prompts
    for per in (1, 2):
        kept = adhoc.builtin_sample(per).prompts
        cats = sorted({p.category for p in full})
        assert len(kept) == per * len(cats) and sorted({p.category for p in kept}) == cats
        assert all([p for p in kept if p.category == c] == [p for p in full if p.category == c][:per] for c in cats)
    exp = adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], settings=Settings(n_predict=32, draft_max=4),
                                       workload=adhoc.builtin_sample(), repeats=1)
    assert exp.name != adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], settings=Settings(n_predict=32,
                                                    draft_max=4)).name  # the sample is a study of its own
    setup = study.own_setup(exp)
    assert setup.label == "draft 4" and setup.values == {"draft_max": 4}
    assert study.sample_plan(exp, setup) == (
        "plan: 6 prompts in 6 categories (code, multi-turn, summarization, rag, math, rewriting), 1 block each "
        "(the target alone, draft 4, the target alone again): 18 runs of 32 tokens after a warm-up; the time left is "
        "said after each run; more prompts: --per-category N, more blocks: --repeats N, every prompt and other "
        "settings: `llamaspec sweep`")
    two = adhoc.experiment_from_models(str(pair[0]), [], settings=Settings(spec_type="ngram-simple"),
                                       workload=adhoc.builtin_sample(2), repeats=3)
    setup = study.own_setup(two)
    assert setup.label == "ngram-simple" and setup.draft_free
    assert study.sample_plan(two, setup).startswith(
        "plan: 12 prompts in 6 categories (code, multi-turn, summarization, rag, math, rewriting), 3 blocks each "
        "(the target alone, ngram-simple, the target alone again): 108 runs of 256 tokens after a warm-up;")


def test_a_prompt_file_is_a_workload_of_its_prompts_each_problem_named_by_line(pair, tmp_path: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    from llamaspec.studies import prompts as loader

    text = "\n".join([
        json.dumps({"id": "fib", "category": "code", "prompt": "def fib(n):"}),
        "",
        json.dumps({"id": "empty", "category": "code", "prompt": "  "}),
        json.dumps({"id": "again", "category": "code", "prompt": "def fib(n):"}),
        json.dumps({"id": "trip", "category": "chat", "prompt": "Plan a day in Porto."}),
    ])
    (tmp_path / "set.jsonl").write_text(text + "\n")
    with caplog.at_level("WARNING"):
        found = loader.load(str(tmp_path / "set.jsonl"))
        exp = adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], workload=found)
    assert [(c.name, c.category) for c in exp.cases] == [("fib", "code"), ("trip", "chat")]
    said = caplog.text
    # a blank prompt and a repeated one, each said once, by line (a blank line is not a prompt)
    assert said.count("line 3: the \"prompt\" is blank") == 1
    assert said.count("line 4 (again): the same prompt as line 1 (fib): measured once") == 1
    (tmp_path / "long.jsonl").write_text(json.dumps({"id": "book", "prompt": "word " * 20_000}) + "\n")
    with pytest.raises(LlamaspecError) as err:
        adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], workload=loader.load(str(tmp_path / "long.jsonl")),
                                     settings=Settings(ctx_size=4096, n_predict=64))
    assert err.value.message.startswith("line 1 (book): a prompt of 100,000 characters (about 25,000 tokens)")
    assert "--ctx-size" in (err.value.hint or "")


def test_several_drafts_are_the_cases_drafts(pair, tmp_path: Path) -> None:
    third = tiny_gguf(tmp_path / "models" / "draft2.gguf", seed=2)
    exp = adhoc.experiment_from_models(str(pair[0]), [str(pair[1]), str(third)], prompt="x")
    assert exp.name.startswith("target-draft+1-")
    assert adhoc.draft_axis(exp) == (str(pair[1]), str(third))
    assert adhoc.draft_axis(adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], prompt="x")) == ()


@pytest.mark.parametrize(("drafts", "settings", "prompts", "message"), [
    (["D"], Settings(spec_type="ngram-simple"), {}, "--spec-type ngram-simple drafts without a draft model, and -md was given"),
    ([], Settings(), {}, "no draft model: -md DRAFT is missing"),
    (["D"], Settings(), {"prompt": "a", "prompt_file": "b"}, "give one of -p, -f and --prompts"),
    (["D", "D"], Settings(), {}, "the same draft is given twice"),
])
def test_bad_studies_are_refused(pair, drafts, settings, prompts, message) -> None:
    real = [str(pair[1]) if d == "D" else d for d in drafts]
    with pytest.raises(LlamaspecError) as err:
        adhoc.experiment_from_models(str(pair[0]), real, settings=settings, **prompts)
    assert err.value.message == message and err.value.hint


def test_a_kept_study_is_found_by_name_and_keeps_its_identity(pair) -> None:
    exp = adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], settings=Settings(n_predict=16, threads=1), prompt="x")
    path = adhoc.save_study(exp)
    assert yaml.safe_load(path.read_text())["study"] == exp.sha256
    loaded = experiment.load(exp.name)
    assert loaded.name == exp.name and loaded.sha256 == exp.sha256
    assert loaded.cases[0].target == exp.cases[0].target and loaded.cases[0].draft == exp.cases[0].draft
    assert loaded.cases[0].settings == exp.cases[0].settings and loaded.repeats == exp.repeats
    assert adhoc.save_study(exp) == path  # the same study again: kept as it is
    other = adhoc.experiment_from_models(str(pair[1]), [str(pair[0])], prompt="x", name=exp.name)
    with pytest.raises(LlamaspecError, match=f"study {exp.name} already names other models"):
        adhoc.save_study(other)
    assert yaml.safe_load(path.read_text())["study"] == exp.sha256  # not overwritten


# --- the command line: bad input is one line and a non-zero exit ---------------------------------

def _error(args: list[str]) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    return result.exit_code, lines


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_cli_bad_input(command: str, pair, tmp_path: Path) -> None:
    target, draft = str(pair[0]), str(pair[1])
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    cases = [
        ([command, "smollm2-quicksort", "-m", target, "-md", draft], "Error: -m " + target + " and the experiment smollm2-quicksort"),
        ([command, "-m", str(tmp_path / "nope.gguf"), "-md", draft], f"Error: model file not found: {tmp_path / 'nope.gguf'}"),
        ([command, "-m", str(text), "-md", draft], f"Error: {text} is not a usable GGUF file"),
        ([command, "-m", target, "-md", draft, "--spec-type", "ngram-simple"], "Error: --spec-type ngram-simple drafts without"),
        ([command, "-md", draft], "Error: -md needs -m TARGET"),
        ([command], "Error: which experiment?"),
    ]
    for args, first in cases:
        if command == "sweep" and "--spec-type" in args:
            continue  # on sweep a spec type is a dimension; the study refuses it below
        code, lines = _error(args)
        assert code != 0, args
        assert lines[0].startswith(first), (args, lines)
        assert len(lines) == 2 and lines[1].startswith("Hint: "), (args, lines)
    nothing_stored = not (Path(experiment.studies_dir())).exists() or not any(experiment.studies_dir().iterdir())
    assert nothing_stored


def test_run_takes_one_draft(pair) -> None:
    code, lines = _error(["run", "-m", str(pair[0]), "-md", f"{pair[1]},{pair[0]}"])
    assert code != 0 and lines[0] == "Error: llamaspec run measures one draft, 2 were given"


# --- USER/REPO[:QUANT] through the loopback hub ---------------------------------------------------

@pytest.fixture
def hub(hub):
    """conftest's loopback hub, with what this process remembers of resolved hub models forgotten
    before and after."""
    given._resolved.clear()
    yield hub
    given._resolved.clear()


REPO = "tester/Tiny-GGUF"


@pytest.mark.hub
def test_a_repo_quant_is_downloaded_into_the_hf_cache_and_pinned(hub: Hub, pair, tmp_path: Path) -> None:
    q4, q8 = pair[1].read_bytes(), pair[0].read_bytes()
    first = hub.add(REPO, {"README.md": b"# tiny\n", "Tiny-Q4_0.gguf": q4, "Tiny-Q8_0.gguf": q8})
    got = given.open_ref(f"{REPO}:q4_0")
    assert got.path.read_bytes() == q4 and got.name == f"{REPO}:Q4_0"
    assert str(got.path).startswith(str(tmp_path / "hf-cache" / "models--tester--Tiny-GGUF" / "snapshots" / first))
    assert got.provenance == {"kind": "hf_gguf", "repo": REPO, "files": ["Tiny-Q4_0.gguf"], "commit": first}
    assert pins.load(given.lock_path())[f"{REPO}:q4_0"].commit == first
    assert hub.gets("Tiny-Q4_0.gguf") and not hub.gets("Tiny-Q8_0.gguf")  # only the quant asked for
    # main moves on: the pin holds (the same bytes on a rerun), as llama.cpp's own cache would not
    hub.add(REPO, {"Tiny-Q4_0.gguf": q8, "Tiny-Q8_0.gguf": q8})
    given._resolved.clear()
    hub.requests.clear()
    again = given.open_ref(f"{REPO}:q4_0")
    assert again.sha256 == got.sha256 and again.provenance["commit"] == first and again.path == got.path
    assert hub.requests == []  # pinned and in the cache: the hub is not asked (it may be out of reach)
    # a fresh cache with the same lock file (another machine): the pinned commit is downloaded
    shutil.rmtree(tmp_path / "hf-cache")
    given._resolved.clear()
    elsewhere = given.open_ref(f"{REPO}:q4_0")
    assert elsewhere.sha256 == got.sha256 and elsewhere.provenance["commit"] == first


@pytest.mark.hub
def test_a_repo_without_gguf_or_without_the_quant_says_what_it_has(hub: Hub, pair) -> None:
    hub.add("tester/checkpoint", {"config.json": b"{}", "model.safetensors": b"\0" * 64})
    hub.add(REPO, {"Tiny-Q4_0.gguf": pair[1].read_bytes(), "Tiny-Q8_0.gguf": pair[0].read_bytes()})
    code, lines = _error(["run", "-m", "tester/checkpoint:Q4_0", "-md", str(pair[1])])
    assert code != 0 and lines[0] == "Error: tester/checkpoint has no GGUF files (files there: config.json, model.safetensors)"
    code, lines = _error(["run", "-m", f"{REPO}:Q5_K_M", "-md", str(pair[1])])
    assert code != 0 and lines == [f"Error: {REPO} has no Q5_K_M GGUF file (its quants: Q4_0, Q8_0)",
                                   f"Hint: write {REPO}:QUANT with one of those"]
    assert not given.lock_path().exists()  # nothing pinned for what was not downloaded


@pytest.mark.hub
def test_a_split_repo_model_is_downloaded_whole(hub: Hub, tmp_path: Path, pair) -> None:
    (tmp_path / "split").mkdir()
    parts = [tiny_gguf(tmp_path / "split" / f"Big-Q4_0-{i:05d}-of-00002.gguf", seed=i) for i in (1, 2)]
    hub.add("tester/Big-GGUF", {p.name: p.read_bytes() for p in parts})
    got = given.open_ref("tester/Big-GGUF:Q4_0")
    assert got.path.name == parts[0].name and (got.path.parent / parts[1].name).is_file()
    assert [p["file"] for p in got.provenance.get("parts", [])] in ([], [p.name for p in parts])
    assert got.metadata.file_size == sum(p.stat().st_size for p in parts)



@pytest.mark.hub
def test_one_file_the_repo_lacks_or_the_cache_lacks_offline_is_one_line(hub: Hub, pair, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.models import hf

    commit = hub.add(REPO, {"Tiny-Q4_0.gguf": pair[1].read_bytes(), "Tiny-Q8_0.gguf": pair[0].read_bytes()})
    with pytest.raises(LlamaspecError) as err:
        hf.file(REPO, "Tiny-Q5_0.gguf")
    assert (err.value.message, err.value.hint) == (f"Tiny-Q5_0.gguf not found in {REPO}@main",
                                                   "files there: Tiny-Q4_0.gguf, Tiny-Q8_0.gguf")
    assert not hub.gets("Tiny-Q4_0.gguf") and not hub.gets("Tiny-Q8_0.gguf")  # refused before any download
    got = hf.file(REPO, "Tiny-Q4_0.gguf")
    assert got.path.read_bytes() == pair[1].read_bytes() and got.commit == commit and got.path.name == "Tiny-Q4_0.gguf"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hf.file(REPO, "Tiny-Q4_0.gguf", commit).path == got.path  # from the cache, the hub not asked
    with pytest.raises(LlamaspecError) as err:
        hf.file(REPO, "Tiny-Q8_0.gguf", commit)  # its snapshot is cached, this file is not
    assert err.value.message.startswith(f"Tiny-Q8_0.gguf {REPO}@{commit} is not in the Hugging Face cache"), err.value.message

# --- several drafts: one more dimension, the smaller file the cheaper --------------------------------

@pytest.mark.parametrize("small_first", [False, True])
def test_several_drafts_are_swept_and_the_smaller_file_wins_a_tie(small_first: bool, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Both drafts draft alike (the fake's speed does not depend on the draft file), so the decision
    must take the smaller file, in whichever order they were given: a sweep that measured one draft
    only, weighed the files the other way round or not at all (then the order decides), fails."""
    from fakes import FakeEngine, swept

    from llamaspec import models
    from llamaspec.store.results import Store
    from llamaspec.views import analysis

    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "m").mkdir()
    target = tiny_gguf(tmp_path / "m" / "target.gguf", seed=0, n_embd=128)
    large = tiny_gguf(tmp_path / "m" / "large.gguf", seed=1, n_embd=128)
    small = tiny_gguf(tmp_path / "m" / "small.gguf", seed=2, n_embd=64)
    assert small.stat().st_size < large.stat().st_size

    class FilesEngine(FakeEngine):
        def resolve_model(self, model: str, variant: str):  # the files as the real engines see them
            return models.gguf_model(model, variant)

    drafts = [str(small), str(large)] if small_first else [str(large), str(small)]
    exp = adhoc.experiment_from_models(str(target), drafts, settings=Settings(n_predict=16),
                                       prompt="x", repeats=2)
    axes = {"draft_max": (4, 8), "draft_variant": adhoc.draft_axis(exp)}
    store = Store.open()
    result = swept(exp, axes, FilesEngine(drift=0.0), store)
    assert result.result.pairs == 4 * 2
    report = analysis.sweep_report(store, result.sweep_id, plot=False)
    assert sorted(g.label for g in report.groups) == sorted(f"draft_variant={p}" for p in (large, small))
    decision = result.result.decision.decision
    assert decision.verdict == "recommend" and decision.chosen is not None
    assert decision.chosen.label.endswith(f"{small})")  # at whichever length, the smaller draft


def test_an_experiment_file_names_models_by_location(pair, tmp_path: Path) -> None:
    folder = pair[0].parent
    third = tiny_gguf(folder / "draft2.gguf", seed=2)
    path = folder / "mine.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "cases": [{
        "name": "c", "prompt": "x", "target": {"file": "target.gguf"},
        "drafts": [{"file": "draft.gguf"}, {"file": str(third)}]}]}))
    exp = experiment.load(str(path))
    (case,) = exp.cases
    assert case.target == ModelRef(GIVEN, str(pair[0])) and case.draft == ModelRef(GIVEN, str(pair[1]))
    assert adhoc.draft_axis(exp) == (str(pair[1]), str(third))
    path.write_text(yaml.safe_dump({"name": "mine", "cases": [{"prompt": "x", "target": {"file": "gone.gguf"},
                                                               "draft": {"hf": "o/r:Q4_0"}}]}))
    with pytest.raises(LlamaspecError, match=r"cases\[0\]\.target\.file: model file not found: .*gone.gguf"):
        experiment.load(str(path))


@pytest.mark.hub
def test_open_ref_takes_a_repo_quant_as_a_cluster_worker_does(hub: Hub, pair) -> None:
    from llamaspec import models

    hub.add(REPO, {"Tiny-Q4_0.gguf": pair[1].read_bytes()})
    got = models.open_ref(f"{REPO}:Q4_0")
    assert got.path.name == "Tiny-Q4_0.gguf" and got.sha256 == given.file_sha256(pair[1])
    assert models.open_ref(str(pair[0])).path == pair[0]


def test_every_kind_of_model_text_goes_through_the_one_resolver(pair, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """models.open_ref (local runs, the CLI, cluster workers) is given.open_ref: a path, a link (its
    name kept, as llama.cpp reads it), a split file (any part names the first), a catalog name with
    and without a variant (the catalog's first fetch variant); USER/REPO: the hub test above."""
    from llamaspec import models
    from llamaspec.models import catalog, store

    assert models.open_ref is given.open_ref
    target, draft = pair
    link = tmp_path / "linked.gguf"
    link.symlink_to(target)
    first = tiny_gguf(tmp_path / "s-00001-of-00002.gguf", seed=0)
    second = tiny_gguf(tmp_path / "s-00002-of-00002.gguf", seed=1)
    asked: list[tuple[str, str, object]] = []

    def catalog_variant(name: str, variant: str, *, catalog: object = None, tools: object = None) -> store.ModelFile:
        asked.append((name, variant, tools))
        return given.describe_file(draft)

    monkeypatch.setattr(store, "resolve", catalog_variant)
    monkeypatch.setattr(given, "_resolved", {})  # what this process resolved before is not asked again
    assert models.open_ref(str(target)).path == target
    got = models.open_ref(str(link))
    assert got.path == link and got.sha256 == given.file_sha256(target)
    assert models.open_ref(str(second)).path == first
    tools = object()
    entry = catalog.load().entry("smollm2-135m")
    assert models.open_ref("smollm2-135m:q4_1", tools=tools).path == draft  # type: ignore[arg-type]
    default = (entry.fetch or entry.plain_variants)[0]
    assert models.open_ref("smollm2-135m", tools=tools).path == draft  # type: ignore[arg-type]
    assert asked == [("smollm2-135m", "q4_1", tools), ("smollm2-135m", default, tools)]


def test_the_commands_and_a_study_resolve_model_text_by_open_ref_only(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """`parse` says what a text names; `open_ref` is the one resolver (no second public one), and the
    commands that read a header only (check-pair, drafts) take a path as given, its bytes not hashed."""
    from llamaspec import models

    assert not hasattr(given, "resolve")
    target, draft = pair
    opened: list[str] = []
    real = given.open_ref
    monkeypatch.setattr(given, "open_ref", lambda text, **kw: opened.append(text) or real(text, **kw))
    exp = adhoc.experiment_from_models(str(target), [str(draft)], prompt="x")
    assert opened == [str(target), str(draft)]
    assert adhoc.files_of(exp) == {str(p): given.file_sha256(p) for p in pair} and opened[2:] == sorted(map(str, pair))
    assert models.gguf_model(GIVEN, str(draft)).path == str(draft) and opened[-1] == str(draft)
    done = CliRunner().invoke(main, ["models", "show", str(target)])
    assert done.exit_code == 0 and opened[-1] == str(target), done.output

    def hashed(path: Path, *args: object) -> str:
        raise AssertionError(f"{path} was hashed")

    monkeypatch.setattr(given, "file_sha256", hashed)
    monkeypatch.setattr(given, "_resolved", {})
    for argv in (["models", "check-pair", str(target), str(draft)], ["models", "drafts", str(target), "--no-caches",
                                                                      str(draft.parent)]):
        done = CliRunner().invoke(main, argv)
        assert done.exit_code == 0, done.output
    assert given.path_of(str(target)) == target


def test_a_study_rerun_by_name_refuses_a_file_changed_since(pair) -> None:
    exp = adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], prompt="x")
    adhoc.save_study(exp)
    assert yaml.safe_load(adhoc.study_path(exp.name).read_text())["files"] == {
        str(p): given.file_sha256(p) for p in pair}
    data = bytearray(pair[1].read_bytes())
    data[-1] ^= 0xFF  # the same path, other bytes (a draft quantized again)
    pair[1].write_bytes(bytes(data))
    given._resolved.clear()
    code, lines = _error(["run", exp.name])
    assert code != 0 and lines[0].startswith(f"Error: {pair[1]} has changed since study {exp.name} was named for it")
    # the same command with -m names a new study for the new bytes
    assert adhoc.experiment_from_models(str(pair[0]), [str(pair[1])], prompt="x").name != exp.name


@pytest.mark.parametrize("spec_type", sorted(spectypes.SPEC_TYPES))
def test_open_study_picks_each_spec_types_engine_in_the_core(pair, spec_type: str) -> None:
    """``adhoc.open_study`` (what the CLI's measuring commands call) asks the spec-type table for
    the engine and whether a draft is measured, for every row: one prompt on the row's engine, a
    prompt set on llama-server."""
    from llamaspec.cli import options

    row = spectypes.of(spec_type)
    drafts = [str(pair[1])] if row.needs_draft else []
    exp = adhoc.open_study(None, str(pair[0]), drafts, None, settings=Settings(spec_type=spec_type), prompt="x")
    assert exp.engine == spectypes.engine_for(spec_type)
    assert all((c.draft is not None) == row.needs_draft for c in exp.cases)
    via_cli = options.experiment_or_study(None, str(pair[0]), tuple(drafts), None,
                                          settings=Settings(spec_type=spec_type), prompt="x")
    assert via_cli.engine == exp.engine and via_cli.name == exp.name
