"""llamaspec watch on the real llama-server of the pinned build with the offline pair: a bounded load
of the built-in workload (a prompt of each category), then ``watch --once``, whose counts must be
the server's own counters and the sums of the answers' own figures. Nothing here depends on this machine's speed: the prediction
is checked for its parts (every length, an interval around each, a verdict of the known kinds and
its command-line change), never for which length it picks or whether the draft pays."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llamaspec.cli import main
from llamaspec.llamacpp import live, modeltools
from llamaspec.llamacpp.build import Build
from llamaspec.llamacpp.server_process import Server
from llamaspec.measure import chat
from llamaspec.store.results import Store
from llamaspec.studies import adhoc
from llamaspec.studies import prompts as loader
from llamaspec.watch import Watcher, forecast

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

N_PREDICT = 32


@pytest.fixture(scope="module")
def server_build(request: pytest.FixtureRequest) -> Build:
    from llamaspec.llamacpp import build

    bin_dir = os.environ.get("LLAMASPEC_TEST_BIN_DIR")
    if bin_dir:
        return build.prebuilt(Path(bin_dir))
    return request.getfixturevalue("llama_build")


@pytest.fixture(scope="module")
def pair(server_build: Build) -> tuple[Any, Any]:
    from llamaspec import models

    return (models.resolve("smollm2-135m", "f32", tools=modeltools.tools(server_build)),
            models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(server_build)))


SPECULATION = {
    "draft": ["--spec-type", "draft-simple", "--spec-draft-n-max", "8", "-ngld", "0"],
    "ngram-simple": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "8"],
}


def start(server_build: Build, pair: tuple[Any, Any], kind: str, tmp_path: Path) -> Server:
    target, draft = pair
    args = ["-m", str(target.path), "-t", "1", "-ngl", "0", "-c", "1024", "-np", "1", "--metrics", "--jinja"]
    if kind == "draft":
        args += ["-md", str(draft.path)]
    srv = Server(server_build.program("server"), args + SPECULATION[kind], tmp_path / "server.log", kind)
    srv.start()
    return srv


def load(srv: Server) -> list[dict[str, Any]]:
    """The built-in workload's first prompt of each category, one at a time, greedy, served as the
    workload is: rendered with the model's chat template (its earlier turns first), then completed."""
    answers = []
    for p in loader.first_of_each_category(adhoc.builtin_workload().prompts):
        rendered = srv.post("/apply-template", {"messages": chat.as_dicts([*p.history, ("user", p.prompt)])}, timeout=60)["prompt"]
        answers.append(srv.post("/completion", {"prompt": rendered, "n_predict": N_PREDICT, "temperature": 0, "seed": 20},
                                timeout=600))
    return answers


@pytest.mark.parametrize("kind", ["draft", "ngram-simple"])
def test_watch_once_counts_what_the_server_counted(server_build: Build, pair: tuple[Any, Any], kind: str,
                                                   tmp_path: Path) -> None:
    srv = start(server_build, pair, kind, tmp_path)
    try:
        answers = load(srv)
        result = CliRunner().invoke(main, ["watch", f"http://127.0.0.1:{srv.port}", "--once", "--json",
                                           "--cost", "0.3,0.05"])
        text = srv.metrics_text()
        own = live.read_metrics(text or "")
    finally:
        srv.stop()
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout.splitlines()[0])
    w, s, f = data["window"], data["server"], data["forecast"]
    assert own is not None
    # the server's own counters, and the answers' own figures
    assert w["tokens"] == own.get("tokens_predicted_total") == sum(a["timings"]["predicted_n"] for a in answers)
    assert w["drafted"] == own.get("spec_decode_num_draft_tokens_total") == sum(a["timings"].get("draft_n", 0) for a in answers)
    assert w["accepted"] == own.get("spec_decode_num_accepted_tokens_total") == sum(
        a["timings"].get("draft_n_accepted", 0) for a in answers)
    assert w["verification_steps"] == own.get("spec_decode_num_drafts_total")
    assert w["requests"] == len(answers) and w["since_server_start"]
    assert w["generation_seconds"] == pytest.approx(sum(a["timings"]["predicted_ms"] for a in answers) / 1000, abs=2e-3)
    assert s["speculation"] == ("draft" if kind == "draft" else "ngram-simple") and s["slots"] == 1
    assert s["argv"] is not None and s["threads"] == 1  # its command line, read here
    assert s["models"]["target"]["sha256"] == pair[0].sha256
    if kind == "draft":
        assert s["models"]["draft"]["sha256"] == pair[1].sha256
    if not w["verification_steps"]:
        assert f is None and any("no speculative request" in n for n in data["notes"])
        return
    assert w["accepted_by_position"] == list(own.accepted_by_position or ()) and s["draft_max"] == 8
    shares = w["acceptance_by_position"]
    assert shares == [a / w["verification_steps"] for a in w["accepted_by_position"]]
    assert w["tokens_per_step"] == pytest.approx(1 + w["accepted"] / w["verification_steps"])
    # the prediction's parts, whatever this machine's speed
    assert [p["draft_max"] for p in f["lengths"]] == list(range(1, 9))
    assert all(p["low"] <= p["speedup"] <= p["high"] for p in f["lengths"])
    assert f["verdict"] in forecast.VERDICTS and data["change"]["verdict"] == f["verdict"]
    if kind == "ngram-simple":
        assert f["cost_ratio"] == 0.0
    command = data["change"]["command"]
    if f["verdict"] == "change":
        assert f"{'--spec-draft-n-max' if kind == 'draft' else '--spec-ngram-simple-size-m'} {f['best']}" in command
    elif f["verdict"] == "no draft":
        assert "--spec-type" not in command and " -md " not in command
    else:
        assert command is None
    (row,) = Store.open().windows()
    assert row["counts"]["tokens"] == w["tokens"] and row["target_sha256"] == pair[0].sha256


def test_costs_are_timed_here_once_then_found_in_the_store(server_build: Build, pair: tuple[Any, Any],
                                                          tmp_path: Path) -> None:
    """Without --cost and no stored study: llama-bench beside the server's binary times the pair on
    the server's flags; the next watch of the same files finds those costs in the store."""
    srv = start(server_build, pair, "draft", tmp_path)
    try:
        load(srv)
        url = f"http://127.0.0.1:{srv.port}"
        first = Watcher(url, span=None, refits=50)
        timed = first.once()
        first.finish()
        again = Watcher(url, span=None, refits=50).once()
    finally:
        srv.stop()
    assert timed.costs is not None and timed.costs.source == "measured" and timed.costs.absolute
    assert timed.costs.cost.verify_batches and timed.costs.cost.depth == timed.window.depth
    assert timed.costs.cost.baseline_step_ms is not None  # the target alone, timed beside llama-bench
    assert timed.forecast is not None and timed.forecast.predicted_tps(None) == pytest.approx(
        1000 / timed.costs.cost.baseline_step_ms)
    assert timed.forecast.calibrated in ("none", "loop", "draft")
    assert again.costs is not None and again.costs.source == "stored" and "timed here by llamaspec watch" in again.costs.label
    assert again.costs.cost.verify_batches == timed.costs.cost.verify_batches
