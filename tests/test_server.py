"""The llama-server backend: argv from the flag table, refusals, answers parsed from recorded
real responses, and the real server from the pinned build on the real offline SmolLM2 pair."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import real_checks
from click.testing import CliRunner
from fakes import swept

from llamaspec.base.errors import LlamaspecError
from llamaspec.decision.decide import VERDICTS
from llamaspec.llamacpp import flags, modeltools, programhelp, server
from llamaspec.llamacpp.build import Build
from llamaspec.measure.contract import ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.store.results import Store
from llamaspec.store.rows import run_meta
from llamaspec.studies import concurrency
from llamaspec.studies.experiment import Case, ModelRef
from llamaspec.studies.prompts import Prompt, PromptSet, PromptSource
from llamaspec.studies.run import resolve_case

REC = Path(__file__).resolve().parent / "fixtures" / "llamacpp" / "0c1e570"
HELP = (REC / "llama-server.help.txt").read_text()
ANSWERS = json.loads((REC / "server-completion.json").read_text())

TARGET = ModelPath("smollm2-135m:f32", "/m/f32.gguf")
DRAFT = ModelPath("smollm2-135m:q4_1", "/m/q4_1.gguf")


def caps() -> programhelp.HelpFlags:
    options, removed, spec_types = programhelp.parse_help(HELP)
    return programhelp.HelpFlags("llama-server", options, removed, spec_types, programhelp.Version(None, "0c1e570"), HELP)


def case(spec_type: str | None = None, draft: ModelPath | None = DRAFT, **settings: Any) -> ResolvedCase:
    s = Settings(n_predict=16, threads=2, ctx_size=1024, spec_type=spec_type, **settings).with_defaults()
    return ResolvedCase("e", "c", TARGET, draft, "hello", None, s)


class Offline(server.ServerEngine):
    """The backend on the recorded --help, without a binary (argv and refusals only)."""

    def __init__(self) -> None:  # noqa: D107 - no build, no process
        self.build = Build(bin_dir="/nowhere", commit="0c1e570", accel="cpu", cmake_args=(), programs={})
        self.program = Path("/nowhere/llama-server")
        self.caps = caps()
        types = [t for t in self.caps.spec_types if t not in ("none", "draft-simple")]
        self.capabilities = server.Capabilities(modes=frozenset({"baseline", "speculative"}), settings=server.HONOURED,
                                                spec_types=("draft", *types), draft_policy="capped",
                                                keeps_models_loaded=True, token_ids=True)


def test_recorded_help_lists_the_spec_types_and_ngram_flags() -> None:
    c = caps()
    assert {"draft-simple", "ngram-simple", "ngram-map-k", "ngram-mod"} <= set(c.spec_types)
    for row in flags.SPEC_TYPE_FLAGS.values():
        assert row.value in c.spec_types
        for names in row.sizes.values():
            assert c.pick(names), names


def test_argv_speculative_draft_and_baseline() -> None:
    c = caps()
    spec = server.server_args(c, "cpu", case(draft_max=8), "speculative")
    assert spec[:2] == ["-m", "/m/f32.gguf"]
    joined = " ".join(spec)
    assert "-md /m/q4_1.gguf" in joined and "--spec-type draft-simple" in joined and "--spec-draft-n-max 8" in joined
    assert "-t 2" in joined and "-c 1024" in joined and "-ngl 0" in joined and "--metrics" in joined
    base = server.server_args(c, "cpu", case(draft_max=8), "baseline")
    # the target alone, said explicitly: the speculative server's first arguments, then --spec-type none
    assert "-md" not in base and base[-2:] == ["--spec-type", "none"] and base[:-2] == spec[:len(base) - 2]


def test_the_baseline_server_says_spec_type_none_where_its_help_offers_it() -> None:
    """The pinned server's --help lists --spec-type with none: the baseline says it, ahead of the
    passed-through flags (which may still turn speculation on: then the run core refuses it); a
    server whose --help has no --spec-type gets no flag it would refuse."""
    line = next(x for x in HELP.splitlines() if x.startswith("--spec-type"))
    assert "none" in line.split()[1].split(",")  # the recorded text, not an assumption
    with_extra = case(draft_max=8, extra_args=("--top-k", "1"))
    base = server.server_args(caps(), "cpu", with_extra, "baseline")
    assert base[-4:] == ["--spec-type", "none", "--top-k", "1"] and base.count("--spec-type") == 1
    text = "\n".join(x for x in HELP.splitlines() if not x.startswith("--spec-type"))
    options, removed, spec_types = programhelp.parse_help(text)
    older = programhelp.HelpFlags("llama-server", options, removed, spec_types, programhelp.Version(None, "old"), text)
    assert "--spec-type" not in server.server_args(older, "cpu", case(draft_max=8), "baseline")


def test_draft_min_reaches_the_speculative_server_only() -> None:
    c = caps()
    spec = server.server_args(c, "cpu", case(draft_max=8, draft_min=3), "speculative")
    assert spec[spec.index("--spec-draft-n-min") + 1] == "3"
    base = server.server_args(c, "cpu", case(draft_max=8, draft_min=3), "baseline")
    assert "--spec-draft-n-min" not in base and base[:-2] == spec[:len(base) - 2]
    assert "draft_min" in server.HONOURED


def test_argv_ngram_mode_with_sizes_and_slots() -> None:
    args = server.server_args(caps(), "cpu", case("ngram-simple", None, ngram_size_n=3, ngram_size_m=8, parallel=2),
                              "speculative")
    joined = " ".join(args)
    assert "--spec-type ngram-simple" in joined and "--spec-ngram-simple-size-n 3" in joined
    assert "--spec-ngram-simple-size-m 8" in joined and "-np 2" in joined and "-md" not in args
    mod = " ".join(server.server_args(caps(), "cpu", case("ngram-mod", None, ngram_size_n=4), "speculative"))
    assert "--spec-ngram-mod-n-match 4" in mod


@pytest.mark.parametrize(("kind", "draft", "extra", "message"), [
    ("ngram-bogus", None, {}, "has no spec_type 'ngram-bogus'"),
    ("ngram-simple", DRAFT, {}, "draft-free, but the case names draft model"),
    ("draft", None, {}, "needs a draft model"),
    ("draft", DRAFT, {"ngram_size_n": 3}, "ngram_size_n applies to n-gram modes"),
    ("ngram-cache", None, {"ngram_size_m": 3}, "ngram_size_m has no meaning for spec_type ngram-cache"),
    ("ngram-simple", None, {"draft_p_min": 0.5}, "draft_p_min applies to a draft model"),
    ("ngram-simple", None, {"draft_min": 2}, "draft_min applies to a draft model"),
    ("draft", DRAFT, {"program": "speculative-simple"}, "does not take setting program"),
])
def test_check_refuses_with_one_clear_line(kind: str, draft: ModelPath | None, extra: dict[str, Any],
                                           message: str) -> None:
    with pytest.raises(LlamaspecError, match=message) as info:
        Offline().check(case(kind, draft, **extra))
    assert info.value.hint
    if kind == "ngram-bogus":
        assert "ngram-simple" in (info.value.hint or "")


def test_fields_from_a_recorded_speculative_answer() -> None:
    answer = ANSWERS["speculative"]
    s = case(draft_max=8)
    f = server.completion_fields(answer, "speculative", s.settings, drafted_rounds=2)
    t = answer["timings"]
    assert f["decode_tps"] == pytest.approx((t["predicted_n"] - 1) / t["predicted_ms"] * 1000)
    assert f["decode_tps"] == pytest.approx(t["predicted_per_second"], rel=1e-6)
    assert f["n_drafted"] == t["draft_n"] and f["n_accept"] == t["draft_n_accepted"]
    assert "accept" not in f and "acceptance" not in f  # the contract derives it from the counters
    assert f["tokens"] == tuple(answer["tokens"]) and f["text"] == answer["content"]
    assert f["n_predict"] == 16 and not f["end_of_text"] and f["draft_len"] == 8
    # every target call after the first token (16 - 12 - 1), and the 2 that drafted apart (/metrics)
    assert (f["rounds"], f["drafted_rounds"]) == (3, 2)


def test_fields_when_nothing_was_drafted_and_when_the_model_stopped() -> None:
    base = server.completion_fields(ANSWERS["baseline"], "baseline", case().settings)
    assert base["draft_policy"] == "none" and "n_drafted" not in base
    nothing = server.completion_fields(ANSWERS["ngram-nothing"], "speculative", case("ngram-simple", None).settings)
    assert "draft_n" not in ANSWERS["ngram-nothing"]["timings"]
    assert nothing["n_drafted"] == 0 and nothing["n_accept"] == 0  # absent means 0
    early = server.completion_fields(ANSWERS["eos"], "baseline", case().settings)
    assert early["end_of_text"] and early["n_predict"] < 16
    # a target-only server that drafted says so in its answer's draft_n: counted, for the run core to refuse
    drafted = server.completion_fields(ANSWERS["speculative"], "baseline", case().settings)
    assert (drafted["n_drafted"], drafted["n_accept"], drafted["draft_policy"]) == (16, 12, "none")


def test_top_tokens_from_a_recorded_n_probs_answer() -> None:
    rec = json.loads((REC / "server-nprobs.json").read_text())
    answer = rec["response"]
    at = rec["request"]["n_predict"] - 1
    top = server.top_tokens_at(answer, at, answer["tokens"][:at])
    assert top is not None and [t["id"] for t in top] == [198, 11181]  # "\n" and "\n  ": the flip the draft run took
    assert top[0]["p"] >= top[1]["p"] and top[0]["p"] - top[1]["p"] < 1e-3
    assert top[0]["p"] == pytest.approx(math.exp(answer["completion_probabilities"][at]["top_logprobs"][0]["logprob"]))
    assert server.top_tokens_at(answer, at, [0] * at) is None  # another path: its probabilities say nothing here


def test_the_recorded_state_table_says_what_spectypes_and_docs_say() -> None:
    """benchmarks/server_state.py's recording on the pinned build: the modes whose one-server counts
    differ from the fresh ones are spectypes.KEEPS_STATE, the slot erase clears none of them, and
    docs/engines.md's table shows the recorded counts."""
    from benchmarks.server_state import Counts, StateProbe
    from llamaspec.measure import spectypes

    recorded = json.loads((REC / "server-state.json").read_text())
    assert recorded["llama_cpp"] == "0c1e570"
    probes = {mode: StateProbe(mode, *(tuple(Counts(**c) for c in row[part]) for part in ("fresh", "served", "erased")))
              for mode, row in recorded["modes"].items()}
    assert {m for m, p in probes.items() if p.keeps_state} == spectypes.KEEPS_STATE
    assert all(p.keeps_state == recorded["modes"][m]["keeps_state"] for m, p in probes.items())
    assert all(p.erase_clears is False for p in probes.values() if p.keeps_state)  # why a study restarts the server
    assert not probes["ngram-simple"].changed() and probes["ngram-cache"].changed()[0][0] == "sum-hotel-reviews"
    docs = (Path(__file__).resolve().parent.parent / "docs" / "engines.md").read_text()
    for mode, p in probes.items():
        row = next(line for line in docs.splitlines() if line.startswith(f"| {mode} "))
        for part in (p.fresh, p.served):
            assert all(c.text() in row for c in part), (mode, row)
        assert ("| yes |" in row) == p.keeps_state, row


# --- the real server ---------------------------------------------------------------------------

real = [pytest.mark.llamacpp, pytest.mark.slow]


@pytest.fixture(scope="module")
def server_build(request: pytest.FixtureRequest) -> Build:
    """The pinned build (conftest's llama_build), or LLAMASPEC_TEST_BIN_DIR's binaries of the same commit."""
    from llamaspec.llamacpp import build

    bin_dir = os.environ.get("LLAMASPEC_TEST_BIN_DIR")
    if bin_dir:
        return build.prebuilt(Path(bin_dir))
    return request.getfixturevalue("llama_build")


@pytest.fixture(scope="module")
def pair(server_build):
    from llamaspec import models

    return (models.resolve("smollm2-135m", "f32", tools=modeltools.tools(server_build)),
            models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(server_build)))


@pytest.fixture(scope="module")
def backend(server_build, tmp_path_factory):
    b = server.ServerEngine(server_build, servers_dir=tmp_path_factory.mktemp("servers"))
    yield b
    b.close()


def real_case(pair, spec_type: str = "draft", prompt: str = "# Quick-sort implementation in Python and sample usage:",
              chat: bool = False, **settings: Any) -> ResolvedCase:
    target, draft = pair
    values: dict[str, Any] = {"n_predict": 24, "threads": 1, "ctx_size": 1024, "seed": 20, "temperature": 0.0,
                              "draft_max": 8, "spec_type": spec_type, **settings}
    s = Settings(**values).with_defaults()
    return ResolvedCase("server-test", spec_type, ModelPath("t", str(target.path)),
                        ModelPath("d", str(draft.path)) if spec_type == "draft" else None, prompt, None, s, chat=chat)


CODE_EDIT = ("Rewrite these functions with type hints. Keep everything else unchanged.\n\n```\n"
             "def area(width, height):\n    return width * height\n\n\ndef perimeter(width, height):\n"
             "    return 2 * (width + height)\n\n\ndef scale(width, height, factor):\n"
             "    return width * factor, height * factor\n```")


@pytest.mark.llamacpp
@pytest.mark.slow
def test_greedy_output_with_the_draft_equals_without(backend, pair, tmp_path: Path) -> None:
    c = real_case(pair)
    base = backend.measure(c, "baseline", tmp_path / "b.json")
    spec = backend.measure(c, "speculative", tmp_path / "s.json")
    assert base.ok and spec.ok, (base.error, spec.error)
    assert base.tokens and spec.tokens == base.tokens and spec.text == base.text
    assert base.n_predict == spec.n_predict == 24 and not base.end_of_text
    # the pinned server takes --spec-type none, and its target alone drafts nothing
    assert base.argv[list(base.argv).index("--spec-type") + 1] == "none" and base.n_drafted is None
    real_checks.server_counters(spec, k=8)  # counters from the answer and /metrics agree (tests/real_checks.py)
    assert spec.n_accept and spec.drafted_rounds  # the pair's draft does get tokens accepted on this prompt
    for m in (base, spec):
        real_checks.server_speed(m, requested=24)
    assert base.speed_basis == spec.speed_basis == server.SPEED_BASIS
    assert base.n_drafted is None and base.draft_policy == "none" and spec.draft_policy == "capped"
    assert len(backend.servers()) == 2
    again = backend.measure(c, "speculative", tmp_path / "s2.json")  # same server, no restart
    assert again.tokens == base.tokens and len(backend.servers()) == 2
    record = json.loads((tmp_path / "s.json").read_text())
    assert record["request"]["cache_prompt"] is False and record["response"]["timings"]["cache_n"] == 0


@pytest.mark.llamacpp
@pytest.mark.slow
def test_ngram_mode_drafts_and_accepts_on_a_code_edit_prompt(backend, pair, tmp_path: Path) -> None:
    c = real_case(pair, "ngram-simple", CODE_EDIT, chat=True, ngram_size_n=3, ngram_size_m=8, n_predict=48)
    backend.check(c)
    base = backend.measure(c, "baseline", tmp_path / "b.json")
    spec = backend.measure(c, "speculative", tmp_path / "s.json")
    assert base.ok and spec.ok, (base.error, spec.error)
    assert spec.n_drafted and spec.n_accept and spec.n_accept > 0
    real_checks.server_counters(spec, k=8)  # an n-gram mode drafts at most m = 8 a round
    real_checks.server_speed(spec, requested=48)
    assert spec.tokens == base.tokens
    assert "def area" in (spec.text or "")  # chat template applied: the model answers the instruction


@pytest.mark.llamacpp
@pytest.mark.slow
def test_prompt_longer_than_the_context_fails_alone(backend, pair, tmp_path: Path) -> None:
    c = real_case(pair, prompt="word " * 1500)
    m = backend.measure(c, "baseline", tmp_path / "long.json")
    assert not m.ok and m.error_kind == "prompt" and "context" in (m.error or "")
    ok = backend.measure(real_case(pair), "baseline", tmp_path / "ok.json")
    assert ok.ok  # the server is still there for the next prompt


@pytest.mark.llamacpp
@pytest.mark.slow
def test_bad_model_file_fails_to_start_with_the_log(server_build, pair, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file" * 10)
    b = server.ServerEngine(server_build, servers_dir=tmp_path / "servers")
    c = replace(real_case(pair), target=ModelPath("bad", str(bad)))
    with pytest.raises(LlamaspecError, match=r"failed to start: exited with code \d+: .*\(log: .*\.log\)") as info:
        b.measure(c, "baseline", tmp_path / "m.json")
    assert "\n" not in info.value.message
    b.close()


@pytest.mark.llamacpp
@pytest.mark.slow
def test_cli_runs_a_prompt_set_end_to_end(server_build, pair, tmp_path: Path) -> None:
    from llamaspec.cli import main

    set_file = tmp_path / "set.jsonl"
    set_file.write_text("\n".join(json.dumps(p) for p in [
        {"id": "e1", "category": "code-editing", "prompt": CODE_EDIT},
        {"id": "p1", "category": "prose", "prompt": "Write a short story about a lighthouse keeper."},
        "broken line"]) + "\n")
    args = ["sweep", "smollm2-server-mini", "--prompts", str(set_file), "-n", "16", "-t", "1", "--json",
            "--fixed-grid", "--repeats", "1", "--no-plot", "--bin-dir", server_build.bin_dir]
    result = CliRunner().invoke(main, args)
    assert result.stdout.lstrip().startswith("{"), result.output  # a crash shows as itself, not as bad JSON
    out = json.loads(result.stdout)  # the study's answer, whatever it is (it may be "nothing" on 16 tokens)
    assert result.exit_code == (1 if out["decision"]["verdict"] == "nothing" else 0), result.output
    # the experiment's two cases are the setups weighed, by their names; both prompts measured
    assert {s["label"] for s in out["setups"]} == {"draft-k8", "ngram-simple"} and out["decision"]["verdict"] in VERDICTS
    assert {p["prompt"] for p in out["prompts"]} == {"e1", "p1"}
    keys = {s["setup"] for s in out["setups"]}  # each setup's key, as the study's runs name it
    assert {(r["prompt"], r["setup"]) for r in out["runs"]} == {(p, k) for p in ("e1", "p1") for k in keys}
    # what the figures were made of: each stored prompt's runs, checked against the server's own answers
    from llamaspec.store.rows import measurements_of

    store = Store.open()
    runs = [r for r in store.runs() if r["id"] in {x["run_id"] for x in out["runs"]}]
    assert len(runs) == 2 * 2  # two setups, two prompts
    for run in runs:
        ms = measurements_of(store.measurements(run["id"]))
        spec = [m for m in ms if m.mode == "speculative"]
        blocks = sorted({m.block for m in spec if m.block})
        base = measurements_of(store.in_blocks(blocks))  # each run's block: the target alone before and after it
        assert spec and len(blocks) == len(spec) and len(base) == 2 * len(blocks), run["id"]
        for m in spec:
            real_checks.server_counters(m, k=m.draft_len or 0)
        # llama-server times the prompt apart: each point's end-to-end figure, over the same pairs
        assert (run["summary"]["end_to_end"] is not None) == (run["summary"]["speedup"] is not None), run["summary"]
        for m in base + spec:  # (the draft's and the target's cost timings are the speedup model's)
            real_checks.server_speed(m, requested=16)
            # greedy: every run of a prompt, with a draft or not, says the same; or it differs at a
            # greedy near-tie, which the probe found and the run says
            assert m.tokens == base[0].tokens or run["summary"]["lossless"]["near_tie"] is not None, run["summary"]
    stored = sum(len(store.measurements(r["id"])) for r in store.runs())
    again = CliRunner().invoke(main, args)  # everything stored: nothing measured again
    assert json.loads(again.stdout)["setups"] == out["setups"]
    assert sum(len(Store.open().measurements(r["id"])) for r in Store.open().runs()) == stored


@pytest.mark.llamacpp
@pytest.mark.slow
def test_concurrency_levels_on_the_real_server(server_build, pair, tmp_path: Path) -> None:
    prompts = PromptSet(PromptSource("jsonl", "/x"), (
        Prompt("c1", CODE_EDIT, "code-editing"), Prompt("w1", "Write a Python function that adds two numbers.", "code")))

    ngram = Settings(n_predict=12, threads=1, ctx_size=1024, seed=20, temperature=0.0, spec_type="ngram-simple",
                     ngram_size_n=3, ngram_size_m=8)

    class Exp:
        name = "server-test"
        cases = (Case("ngram", ModelRef("t", "f32"), None, None, None, ngram),)
        path = ""

    def resolve(exp: Any, case: Case) -> ResolvedCase:  # the one resolver, the target's file the pair's
        return resolve_case(exp, case, b, models=lambda _ref: ModelPath("t", str(pair[0].path)))

    b = server.ServerEngine(server_build, servers_dir=tmp_path / "servers")
    levels: list[int] = []
    b_check = b.check

    def check(case: ResolvedCase) -> None:  # the level's slots reach the server's argv
        levels.append(case.settings.parallel or 0)
        b_check(case)

    b.check = check  # type: ignore[method-assign]
    rows = concurrency.run_concurrency(Exp(), prompts, b, [1, 2], resolve=resolve, repeats=1)
    assert levels == [1, 2] and b.servers() == []  # each level's servers stopped after it
    for r in rows:
        assert r["paired"] and r["pairs"] == 1 and not r["notes"], r
        for mode in ("baseline", "speculative"):
            run = r[mode]["runs"][0]
            assert run["requests"] == 2 and run["failed"] == 0 and run["generated"] == 24
            assert run["wall_seconds"] > 0 and run["aggregate_tps"] == pytest.approx(24 / run["wall_seconds"])
            assert r[mode]["aggregate_tps"]["median"] > 0 and r[mode]["per_request_tps"]["median"] > 0
        assert r["aggregate_speedup"]["median"] > 0 and r["per_request_speedup"]["n"] == 1
    logs = sorted((tmp_path / "servers").glob("*.log"))
    assert any("-np 2" in p.read_text().splitlines()[0] for p in logs)


@pytest.mark.llamacpp
@pytest.mark.slow
def test_prepare_starts_both_servers_side_by_side_and_renders_the_prompt(server_build, pair, tmp_path: Path) -> None:
    b = server.ServerEngine(server_build, servers_dir=tmp_path / "servers")
    c = real_case(pair, chat=True, prompt="Say hi.")
    b.prepare(c)
    loading = [(s.launched_at, s.launched_at + s.started_seconds) for s in b.servers()
               if s.launched_at is not None and s.started_seconds is not None]
    try:
        assert len(loading) == 2
        if (os.cpu_count() or 1) >= 2:  # two -t 1 servers fit: the loads overlap (the second launched before the first was ready)
            (a_from, a_to), (b_from, b_to) = loading
            assert max(a_from, b_from) < min(a_to, b_to), loading
        assert (c.target.path, (("user", "Say hi."),)) in b._rendered
        m = b.measure(c, "speculative", tmp_path / "s.json")
        assert m.ok and len(b.servers()) == 2  # nothing more started
    finally:
        b.close()


@pytest.mark.llamacpp
@pytest.mark.slow
def test_a_sweep_on_the_server_times_its_costs_and_fits_the_speedup_model(server_build, pair, tmp_path: Path) -> None:
    """The sweep on llama-server: llama-bench's costs on the same build once per sweep (after the
    first pair, at the depth the server counted), then the fitted model on the server's profile."""
    import yaml

    from llamaspec.llamacpp.profiles import LLAMA_SERVER
    from llamaspec.studies import experiment
    from llamaspec.views import analysis
    target, draft = pair
    body = {"name": "server-sweep", "description": "the offline pair on llama-server", "backend": "llama-server", "repeats": 2,
            "settings": {"n_predict": 32, "seed": 20, "temperature": 0, "threads": 1, "ctx_size": 1024},
            "cases": [{"name": "q4_1", "target": {"model": "smollm2-135m", "variant": "f32"},
                       "draft": {"model": "smollm2-135m", "variant": "q4_1"},
                       "prompt": "# Quick-sort implementation in Python and sample usage:"}]}
    path = tmp_path / "server-sweep.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    engine = server.ServerEngine(server_build, servers_dir=tmp_path / "servers")
    store = Store.open()
    try:
        result = swept(experiment.load(str(path)), {"draft_max": (1, 4, 8)}, engine, store)
    finally:
        engine.close()
    runs = store.runs(group_id=result.sweep_id, kind="sweep")
    costs = [m for r in runs for m in store.measurements(r["id"]) if m["mode"] in ("draft", "batch")]
    assert sorted(m["mode"] for m in costs) == ["batch", "draft"] and all(m["ok"] for m in costs)
    assert all(Path(m["argv"][0]).name == "llama-bench" for m in costs)
    (batch,) = [m for m in costs if m["mode"] == "batch"]
    prompt_tokens = {m["n_prompt"] for r in store.runs(group_id=result.sweep_id) for m in store.measurements(r["id"])
                     if m["mode"] == "baseline"}  # the block baselines' own run
    assert batch["stats"]["depth"] == prompt_tokens.pop() + 32 // 2  # the prompt as the server counted it
    assert batch["stats"]["depth_basis"] == "prompt tokens as counted by the run"
    report = analysis.sweep_report(store, result.sweep_id, plot=False)
    (group,) = report.groups
    a = group.analysis
    assert a is not None and a.cost is not None and a.profile is LLAMA_SERVER, group.note
    assert sorted(p.draft_max for p in a.points) == [1, 4, 8]
    for p in a.points:  # /metrics counted the steps that drafted, at p-min 0 all but the last token's at most
        assert p.drafted_rounds is not None and 0 <= p.calls - p.drafted_rounds <= 1
    text = report.render()
    assert "model error: median" in text and "recommended" not in text  # a prompt's points: figures, no answer
    assert "rounds that drafted (the engine's count) / rounds (every target call)" in text


@pytest.mark.llamacpp
@pytest.mark.slow
def test_run_on_the_server_prints_acceptance_by_position(server_build, pair, tmp_path: Path) -> None:
    """llama-server's /metrics per-position counters, read around each request: `llamaspec run` shows
    acceptance by position and stores it; the counts match the request's own draft figures."""
    import re

    import yaml
    from click.testing import CliRunner

    from llamaspec.cli import main

    body = {"name": "server-positions", "description": "the offline pair on llama-server", "engine": "llama-server",
            "repeats": 1, "settings": {"n_predict": 32, "seed": 20, "temperature": 0, "threads": 1, "ctx_size": 1024,
                                       "draft_max": 8},
            "cases": [{"name": "q4_1", "target": {"model": "smollm2-135m", "variant": "f32"},
                       "draft": {"model": "smollm2-135m", "variant": "q4_1"},
                       "prompt": "# Quick-sort implementation in Python and sample usage:"}]}
    path = tmp_path / "server-positions.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    args = ["run", str(path)] + (["--bin-dir", os.environ["LLAMASPEC_TEST_BIN_DIR"]]
                                 if os.environ.get("LLAMASPEC_TEST_BIN_DIR") else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    line = re.search(r"accepted at position 1\.\.(\d+): .* \(of (\d+) drafting rounds\)", result.output)
    assert line, result.output
    store = Store.open()
    (run,) = store.runs(experiment="server-positions")
    (spec,) = [m for m in store.measurements(run["id"]) if m["mode"] == "speculative"]
    drafted, accepted = spec["drafted_by_position"], spec["accepted_by_position"]
    assert drafted[0] == spec["drafted_rounds"] == int(line.group(2)) and len(drafted) == int(line.group(1))
    if len(drafted) == 8:
        assert sum(drafted) == spec["n_drafted"] and sum(accepted) == spec["n_accept"]


def _server_study(tmp_path: Path, name: str, cases: list[dict], *, repeats: int, n_predict: int, ctx_size: int) -> Any:
    """An experiment of the offline pair (F32 target, Q4_1 draft) on llama-server over ``cases``
    (name, category, prompt, chat), written as a user writes one and loaded."""
    import yaml

    from llamaspec.studies import experiment

    pair = {"target": {"model": "smollm2-135m", "variant": "f32"}, "draft": {"model": "smollm2-135m", "variant": "q4_1"}}
    body = {"name": name, "description": "the offline pair on llama-server", "engine": "llama-server", "repeats": repeats,
            "settings": {"n_predict": n_predict, "seed": 20, "temperature": 0, "threads": 1, "ctx_size": ctx_size},
            "cases": [{**c, **pair} for c in cases]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return experiment.load(str(path))


@pytest.mark.llamacpp
@pytest.mark.slow
def test_the_workload_study_runs_on_the_server_too(server_build, pair, tmp_path: Path) -> None:
    """The one study (llamaspec.studies.study) on llama-server: two prompts, two draft lengths and an n-gram
    mode, every setup on every prompt; one decision over the workload, of one of its kinds with
    that kind's parts (which kind this machine's timings lead to is not asserted)."""
    import real_checks

    from llamaspec.studies import study

    exp = _server_study(tmp_path, "server-study", [
        {"name": "code", "category": "code", "prompt": "# Quick-sort implementation in Python and sample usage:"},
        {"name": "summary", "category": "summary",
         "prompt": "Summarize: the council voted to turn the rail yard into a park. Summary: the council voted to turn"}],
        repeats=1, n_predict=24, ctx_size=1024)
    engine = server.ServerEngine(server_build, servers_dir=tmp_path / "servers")
    store = Store.open()
    try:
        result = study.run_study(exp, study.setups_for({"draft_max": (2, 4)}, ("ngram-simple",)), engine, store,
                                 fixed_grid=True)
        answer = study.deployment(result, engine, exp, store)
    finally:
        engine.close()
    d = result.decision
    assert [p for p, _c in d.prompts] == ["code", "summary"] and result.pairs == 3 * 2 == result.fixed_grid_pairs
    assert {s.label for s in d.setups} == {"draft 2", "draft 4", "ngram-simple"}
    for s in d.setups:
        assert s.excluded or (s.speedup is not None and s.pairs == 2), s  # each on both prompts, or said why not
    report = {**result.as_dict(), "deploy": answer.to_dict() if answer else None}
    real_checks.answer(report)


# --- state between requests ----------------------------------------------------------------------

def builtin_prompts(*ids: str) -> list[tuple[str, str]]:
    """(id, text) of the built-in workload's chat prompts ``ids``, in that order."""
    from llamaspec.studies import adhoc
    from llamaspec.studies import prompts as loader

    found = {p.id: p.prompt for p in loader.load(str(adhoc.builtin_prompts())).prompts}
    return [(i, found[i]) for i in ids]


# A (longer) then B: ngram-cache keeps A's context cache for the shorter B; A again meets what
# ngram-mod and the ngram-map modes kept of it (docs/engines.md has the counts).
STATE_PROMPTS = ("rw-present-tense", "sum-hotel-reviews")


@pytest.mark.llamacpp
@pytest.mark.slow
def test_which_modes_keep_state_between_requests_is_what_spectypes_says(server_build, pair, tmp_path: Path) -> None:
    """Each mode the pinned server offers, measured fresh and on one server (A, B, A): the modes
    whose counts differ are spectypes.KEEPS_STATE; a new llama.cpp that changes it fails here."""
    from benchmarks import server_state
    from llamaspec.measure import spectypes

    target, draft = pair
    s = Settings(n_predict=64, threads=1, ctx_size=4096, seed=20)
    modes = server_state.probed_types(server.ServerEngine(server_build).capabilities.spec_types)
    assert {"draft", "ngram-simple", "ngram-mod", "ngram-cache"} <= set(modes)
    probes = {mode: server_state.probe(server_build, ModelPath("t", str(target.path)), ModelPath("d", str(draft.path)),
                                       mode, builtin_prompts(*STATE_PROMPTS), s, tmp_path / "servers")
              for mode in modes}
    measured = {mode for mode, p in probes.items() if p.keeps_state}
    assert measured == spectypes.KEEPS_STATE, {m: p.to_dict() for m, p in probes.items()}
    for p in probes.values():  # the drafting modes drafted on A at least: a probe that drafts nothing tells nothing
        assert p.fresh[0].drafted > 0 and all(c.accepted <= c.drafted for c in (*p.fresh, *p.served)), p.to_dict()


@pytest.mark.llamacpp
@pytest.mark.slow
def test_a_stateful_mode_is_timed_cold_when_a_study_repeats_its_prompt_and_warm_only_when_asked(
        server_build, pair, tmp_path: Path) -> None:
    """ngram-mod on a prompt the server has answered drafts from what it kept (more accepted). Asked
    for warm traffic (EngineOptions.warm, ``sweep --warm``), a study repeats the prompt on one
    long-lived server: the repeat is that warm drafting, and each run is stored warm (provenance
    traffic, stats warm and served_before) under a study of its own, whose output says warm. The
    default study, after it in the same store, times the cold drafting every time: nothing of the
    warm study pooled into it."""
    from llamaspec.store.rows import measurements_of
    from llamaspec.studies import study

    ((pid, text),) = builtin_prompts(STATE_PROMPTS[0])
    exp = _server_study(tmp_path, "server-state", [{"name": pid, "category": "rewriting", "prompt": text, "chat": True}],
                        repeats=2, n_predict=64, ctx_size=4096)
    store = Store.open()

    def measured(warm: bool) -> tuple[Any, list[Any], list[dict[str, Any]]]:
        engine = server.ServerEngine(server_build, servers_dir=tmp_path / "servers", warm=warm)
        try:
            result = study.run_study(exp, study.setups_for({}, ("ngram-mod",)), engine, store, fixed_grid=True)
        finally:
            engine.close()
        runs = [store.run(r) for r in result.runs.values()]
        spec = [m for r in runs for m in measurements_of(store.measurements(r["id"])) if m.mode == "speculative"]
        assert len(spec) >= 2 and result.pairs >= 1, (len(spec), result.pairs)
        return result, spec, runs

    warm, warm_spec, warm_runs = measured(True)
    assert all(r["provenance"]["engine"]["traffic"] == "warm" for r in warm_runs)
    assert all(m.stats["warm"] for m in warm_spec) and max(m.stats["served_before"] for m in warm_spec) >= 1
    got = [(m.stats["served_before"], m.n_drafted, m.n_accept) for m in warm_spec]
    # its first request drafts as a fresh server does (40/4 at 0c1e570); a repeat, from what the server kept
    assert all((d, a) == (40, 4) for served, d, a in got if served == 0) and all(a > 4 for served, _d, a in got if served), got
    assert "warm traffic: one long-lived llama-server per setup" in warm.render()
    assert run_meta(store.run(warm_runs[0]["id"]))["traffic"] == "warm"

    cold, spec, runs = measured(False)
    assert cold.study_id != warm.study_id and not set(r["id"] for r in runs) & set(r["id"] for r in warm_runs)
    counts = {(m.n_drafted, m.n_accept) for m in spec}
    assert counts == {(40, 4)}, counts  # every timing drafted as the first did: cold (40 drafted, 4 accepted at 0c1e570)
    assert all(m.stats["served_before"] == 0 and not m.stats["warm"] for m in spec)
    assert all(r["provenance"]["engine"]["traffic"] == "cold" for r in runs) and "warm traffic" not in cold.render()
