"""The speedup model on the engines beyond llama.cpp's command-line programs: llama-server (its
/metrics count only the rounds that drafted; llama-bench's costs on the same build) and
transformers' assisted generation (the target's forward passes timed with torch, generate()'s
loop charged per round), on their round profiles and on recorded real sweeps of each engine."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.decision import speedup_model
from llamaspec.hf.profiles import TRANSFORMERS_ASSISTED
from llamaspec.llamacpp import server
from llamaspec.llamacpp.profiles import LLAMA_SERVER
from llamaspec.measure.settings import Settings
from llamaspec.measure.summary import Summary
from llamaspec.registry.engines import round_profile
from llamaspec.theory import CostModel, Observation, RoundProfile, analyze
from llamaspec.views import analysis

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REC = FIXTURES / "llamacpp" / "0c1e570"
SERVER_SWEEPS = REC / "sweep-server"
HF_SWEEPS = FIXTURES / "hf" / "sweep-smollm2"


# --- round profiles -----------------------------------------------------------------------------


def test_the_server_rounds_are_every_target_call_and_the_drafted_ones_apart() -> None:
    # A recorded answer of the pinned server at draft 8: 16 predicted (the first from the prompt),
    # 16 drafted, 12 accepted: 3 target calls after the first token, of which the 2 that drafted
    # are what /metrics counts (8 + 8 drafted; the last call, with 1 token left, drafts nothing).
    answer = json.loads((REC / "server-completion.json").read_text())["speculative"]
    settings = Settings(n_predict=16, draft_max=8).with_defaults()
    fields = server.completion_fields(answer, "speculative", settings, drafted_rounds=2)
    assert fields["program"] == server.PROGRAM == LLAMA_SERVER.name and round_profile(server.PROGRAM) is LLAMA_SERVER
    assert (fields["rounds"], fields["drafted_rounds"]) == (3, 2)  # one meaning of rounds for every engine
    assert server.completion_fields(answer, "speculative", settings)["rounds"] == 3  # without /metrics (slots)
    o = Observation(draft_max=8, n_drafted=fields["n_drafted"], n_accept=fields["n_accept"],
                    n_generated=fields["n_predict"], spec_decode_tps=fields["decode_tps"], baseline_decode_tps=5.82,
                    rounds=fields["rounds"], drafted_rounds=fields["drafted_rounds"], profile=LLAMA_SERVER)
    assert (o.n_drafted, o.n_accept, o.n_generated) == (16, 12, 16)
    assert o.calls == 3 and o.drafted_rounds == 2
    assert o.tokens_per_round == pytest.approx(1 + 12 / 3) and o.drafted_per_round == pytest.approx(16 / 3)
    assert replace(o, rounds=None).calls == 3  # derived from the counters by the server's loop: the same
    with pytest.raises(LlamaspecError, match="counted 4 rounds that drafted, more than its 3 rounds"):
        replace(o, drafted_rounds=4)
    fit = analyze([o]).points[0]
    assert fit.calls == 3 and fit.drafted_rounds == 2 and fit.calls_measured


def test_the_transformers_profile_counts_every_round_itself() -> None:
    # Every token comes from a round (the first is fused with the prompt): 24 = rounds + accepted.
    assert TRANSFORMERS_ASSISTED.rounds(24, 17) == 7
    o = Observation(draft_max=4, n_drafted=26, n_accept=17, n_generated=24, spec_decode_tps=10.0,
                    baseline_decode_tps=10.0, rounds=7, profile=TRANSFORMERS_ASSISTED)
    assert o.calls == 7 and o.drafted_rounds is None
    with pytest.raises(LlamaspecError, match="exceed n_generated"):
        replace(o, rounds=8)


def test_a_profile_refuses_an_unknown_loop() -> None:
    with pytest.raises(LlamaspecError, match="loop_overhead"):
        RoundProfile("x", 0, True, loop_overhead="call")


def test_the_loop_overhead_is_the_baselines_step_beyond_the_timed_one() -> None:
    batches = {1: 10.0, 2: 11.0, 3: 12.0, 5: 14.0}

    def cost(loop: str, step: float | None = 13.0) -> CostModel:
        return replace(CostModel.from_bench(batches, 2.0, RoundProfile(loop, 0, False, loop_overhead=loop)),
                       baseline_step_ms=step)

    k, tokens = 2, 2.5
    timed = k * 2.0 + 12.0  # k draft steps and the target's batch of k + 1
    assert cost("none").loop_overhead_ms == 0.0 and cost("none").call_ms(k, tokens) == pytest.approx(timed)
    assert cost("round").loop_overhead_ms == pytest.approx(3.0)
    assert cost("round").call_ms(k, tokens) == pytest.approx(timed + 3.0)
    assert cost("token").call_ms(k, tokens) == pytest.approx(timed + 3.0 * tokens)
    assert {cost(loop).baseline_ms_per_token for loop in ("none", "round", "token")} == {13.0}
    # a free draft accepted in full: k + 1 tokens at the baseline's 13 ms against one batch and one loop
    free = replace(cost("round"), draft_ms_per_token=0.0)
    assert free.speedup(1.0, 2) == pytest.approx(3 * 13.0 / (12.0 + 3.0))
    # a baseline step below the timed one is noise, not a negative overhead; without baselines none
    assert cost("round", 9.0).loop_overhead_ms == 0.0 and cost("round", None).loop_overhead_ms == 0.0


# --- recorded sweeps ------------------------------------------------------------------------------

# The bound on the median |predicted - measured| / measured (the decision's 10 %). Measured with the model
# as it stands: llama-server q4_1 4.2 % with the draft's cost fitted, 4.3 % as timed (llama-bench's step alone, no loop: 11.2 %; the loop charged
# per round: 61.6 %); transformers 13.2 % with the draft's cost fitted, 22.6 % as timed (below).
MODEL_ERROR_BOUND = 0.10


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        pytest.fail(f"recorded sweep {path} missing (record.sh in its folder records it)")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _group(data: dict[str, Any]) -> speedup_model.FittedGroup:
    rows = speedup_model.latest_per_draft([speedup_model.PointRow(p["run_id"], "", int(p["draft_max"]), Summary.from_dict(p["summary"]))
                                       for p in data["points"] if p["status"] == "ok"])
    fit, note = speedup_model.analyze_rows(rows)
    group = speedup_model.FittedGroup("", rows, fit, note=note)
    group.view = speedup_model.model_view(group, refits=50)
    return group


def _rendered(data: dict[str, Any], group: speedup_model.FittedGroup) -> str:
    meta = {"target": data["target"], "draft": data["draft"], "hardware": "recorded", "engine": "recorded",
            "commit": data.get("llamacpp_commit") or "", "experiment": data["experiment"], "case": data["case"]}
    return analysis.SweepReport(data["sweep_id"], data["experiment"], data["case"], meta, [group]).render()


def _costs(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for p in data["points"] for m in p["measurements"] if m["mode"] in ("batch", "draft")]


SERVER_CASES = ["q4_1"]


@pytest.mark.parametrize("name", SERVER_CASES)
def test_a_recorded_server_sweep_gets_the_model(name: str) -> None:
    data = _load(SERVER_SWEEPS / name / "sweep.json")
    assert data["settings"]["threads"] == 1 and data["llamacpp_commit"] == "0c1e570"
    spec = [m for p in data["points"] for m in p["measurements"] if m["mode"] == "speculative" and m["ok"]]
    assert spec
    for m in spec:
        # rounds: every target call; /metrics counted the steps that drafted, and at p-min 0 the
        # only other one is the last token's
        assert m["rounds"] == LLAMA_SERVER.rounds(m["n_predict"], m["n_accept"]), m
        assert m["drafted_rounds"] is not None and 0 <= m["rounds"] - m["drafted_rounds"] <= 1, m
    costs = _costs(data)
    assert {m["mode"] for m in costs} == {"batch", "draft"}  # llama-bench's timings, once per sweep
    assert all(m["speed_basis"].startswith("llama-bench") for m in costs)
    group = _group(data)
    a = group.analysis
    assert a is not None and a.cost is not None and a.profile is LLAMA_SERVER, group.note
    assert a.cost.baseline_step_ms is not None and a.cost.loop_overhead_ms >= 0.0
    assert all(p.drafted_rounds is not None and p.drafted_rounds <= p.calls for p in a.points)
    text = _rendered(data, group)
    print(text)
    assert "rounds that drafted (the engine's count) / rounds" in text and "model leaves out: sampling" in text
    assert "recommended" not in text and "model error: median" in text
    assert group.model_error is not None and group.model_error <= MODEL_ERROR_BOUND, a.points


def test_a_recorded_transformers_sweep_gets_the_model() -> None:
    data = _load(HF_SWEEPS / "q4_0-assistant" / "sweep.json")
    spec = [m for p in data["points"] for m in p["measurements"] if m["mode"] == "speculative" and m["ok"]]
    assert spec and all(m["rounds"] == TRANSFORMERS_ASSISTED.rounds(m["n_predict"], m["n_accept"]) for m in spec)
    costs = _costs(data)
    assert {m["mode"] for m in costs} == {"batch", "draft"}
    (batch,) = [m for m in costs if m["mode"] == "batch"]
    assert sorted(int(n) for n in batch["stats"]["batch_ms"]) == list(range(1, 18))
    assert batch["stats"]["depth"] == batch["n_prompt"] + data["settings"]["n_predict"] // 2
    group = _group(data)
    a = group.analysis
    assert a is not None and a.cost is not None and a.profile is TRANSFORMERS_ASSISTED, group.note
    text = _rendered(data, group)
    print(text)
    assert "model leaves out: generate()'s loop" in text and "recommended" not in text
    # both models run in float32 on the CPU: the assistant costs about what the target does
    assert 0.5 < a.cost.cost_ratio < 2.0
    assert a.cost.baseline_step_ms is not None and a.cost.loop_overhead_ms >= 0.0
    assert group.model_error is not None


# The transformers recording was made while other sessions loaded the 2 cores (other processes used
# 61 % of the CPU): its baselines ran at 7.1 to 14.2 t/s from one point to the next, and its measured
# curve is not smooth (0.46x at draft 2 between 0.62x at 1 and 0.69x at 4), so no smooth model meets
# the bound on it (13.2 % with the assistant's cost fitted to the speedups, 22.6 % as timed; 20.1 % with the timed step alone, no loop). A known miss, kept visible:
# strict, so a better model or recording shows up.
@pytest.mark.xfail(reason="median error 13.2 % on a recording made under heavy load", strict=True)
def test_the_model_predicts_the_recorded_transformers_sweep() -> None:
    group = _group(_load(HF_SWEEPS / "q4_0-assistant" / "sweep.json"))
    assert group.analysis is not None
    assert group.model_error is not None and group.model_error <= MODEL_ERROR_BOUND, group.analysis.points
