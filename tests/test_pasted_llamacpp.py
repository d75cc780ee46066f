"""``llamaspec run -- COMMAND`` on the pinned llama.cpp build and the real offline SmolLM2 pair: the
pasted command measured as given against itself without its draft, passed-through flags on both
sides, and a sampled command measured with its lossless check labelled, not run."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llamaspec.cli import main
from llamaspec.llamacpp import modeltools
from llamaspec.store.results import Store

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]
PROMPT = "def quicksort(xs):"


@pytest.fixture(scope="session")
def offline_pair(llama_build):
    from llamaspec import models

    return models.resolve("smollm2-135m", "f32", tools=modeltools.tools(llama_build)), models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(llama_build))


def pasted_run(*words: str) -> list[dict]:
    done = CliRunner().invoke(main, ["run", "--repeats", "1", "--json", "--", *words])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_the_issue_server_line(offline_pair) -> None:
    target, draft = offline_pair
    (data,) = pasted_run("llama-server", "-m", str(target.path), "-md", str(draft.path), "--spec-draft-n-max", "4",
                         "-n", "16", "-t", "1", "-c", "512", "-p", PROMPT, "--top-k", "1", "--port", "8080")
    assert data["status"] == "ok", data["error"]
    assert data["settings"]["draft_max"] == 4 and data["settings"]["extra_args"] == ["--top-k", "1"]
    assert data["command"]["program"] == "llama-server" and data["command"]["passed_through"] == ["--top-k", "1"]
    assert data["command"]["left_out"] == ["--port", "8080"]
    s = data["summary"]
    assert s["pairs"] == 1 and s["speedup"]["median"] > 0 and s["n_drafted"] > 0
    assert s["lossless"]["verdict"] == "identical" and s["lossless"]["unit"] == "tokens"
    rows = {m["mode"]: m["argv"] for m in Store.open().measurements(data["run_id"])}
    for mode in ("baseline", "speculative"):  # the passed-through flags reached both servers, ours did not
        argv = rows[mode]
        assert argv[argv.index("--top-k") + 1] == "1" and "8080" not in argv, mode
    assert "-md" not in rows["baseline"] and "--spec-draft-n-max" not in rows["baseline"]
    assert rows["speculative"][rows["speculative"].index("--spec-draft-n-max") + 1] == "4"
    assert "llama-server" in json.dumps(data["deploy"]) and "--top-k" in json.dumps(data["deploy"])


def test_a_sampled_speculative_simple_line(offline_pair) -> None:
    """The 2024 spelling (--draft-max) on the 2026 build, sampled at 0.8: speed and acceptance are
    measured; the lossless check says "not applicable: sampled" and the run is not failed."""
    target, draft = offline_pair
    (data,) = pasted_run("llama-speculative-simple", "-m", str(target.path), "-md", str(draft.path), "--draft-max", "4",
                         "-n", "16", "-t", "1", "-c", "512", "-p", PROMPT, "--temp", "0.8", "--top-k", "40")
    assert data["status"] == "ok", data["error"]
    assert data["settings"]["program"] == "speculative-simple" and data["settings"]["temperature"] == 0.8
    s = data["summary"]
    assert s["lossless"] == {**s["lossless"], "verdict": "not applicable", "reason": "temperature 0.8"}
    assert s["speedup"]["median"] > 0 and 0 <= s["acceptance"]["median"] <= 1 and s["n_drafted"] > 0
    rows = {m["mode"]: m["argv"] for m in Store.open().measurements(data["run_id"])}
    assert rows["speculative"][rows["speculative"].index("--spec-draft-n-max") + 1] == "4"
    for mode in ("baseline", "speculative"):
        argv = rows[mode]
        assert argv[argv.index("--temp") + 1] == "0.8" and argv[argv.index("--top-k") + 1] == "40", mode


def test_a_line_without_a_prompt_states_its_plan_and_measures_one_prompt_a_category_in_blocks(offline_pair) -> None:
    """No prompt: the first prompt of each category of the built-in workload, each in one block
    (the target alone, the pasted setting, the target alone again), the plan said first."""
    from llamaspec.studies import adhoc

    target, draft = offline_pair
    done = CliRunner().invoke(main, ["run", "--json", "--no-check-deploy", "--", "llama-speculative-simple", "-m", str(target.path), "-md",
                                     str(draft.path), "--draft-max", "4", "-n", "16", "-t", "1", "-c", "1024"])
    assert done.exit_code == 0, done.output
    plan = next(line for line in done.stderr.splitlines() if line.startswith("plan: "))
    assert plan.startswith("plan: 6 prompts in 6 categories (code, multi-turn, summarization, rag, math, "
                           "rewriting), 1 block each (the target alone, draft 4, the target alone again): 18 runs of 16 "
                           "tokens"), plan
    assert done.stderr.index(plan) < done.stderr.index("[1/18] ")  # said before anything is measured
    assert "[18/18] " in done.stderr and "left" in done.stderr
    data = json.loads(done.stdout)
    firsts = {p.category: p.id for p in reversed(adhoc.builtin_workload().prompts)}
    assert sorted((p["category"], p["prompt"]) for p in data["prompts"]) == sorted(firsts.items())
    assert [s["label"] for s in data["setups"]] == ["draft 4"]
    assert data["deploy_check"] is None  # --no-check-deploy: no server started after the sample
    store = Store.open()
    runs = [r for r in store.runs(experiment=data["experiment"]) if r["kind"] != "study"]
    blocks: dict[str, list[str]] = {}
    for r in runs:
        assert r["settings"]["n_predict"] == 16 and r["settings"]["draft_max"] == 4
        for m in store.measurements(r["id"]):
            blocks.setdefault(m["block"], []).append(m["mode"])
    assert len(blocks) == 6 and all(sorted(modes) == ["baseline", "baseline", "speculative"] for modes in blocks.values())
