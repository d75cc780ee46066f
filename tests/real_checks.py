"""What a measurement of the real llama.cpp programs must satisfy, beyond "a speed above 0".

Each check ties a figure llamaspec derives to numbers the program printed independently, so a
wrong parse, a wrong formula or a missing input fails here:

- counters: accepted <= drafted; rounds by the program's own loop (llama-speculative and
  llama-server sample the first token from the prompt's logits, then each round emits its
  accepted drafts plus one token of the target: rounds = n_predict - n_accept - 1); where the
  program drafts exactly k a round, drafted = k x rounds, a count it printed that the formula did
  not use; tokens per round = (n_predict - 1) / rounds; the printed percentage agrees;
- the speed definition's inputs (contract.SPEED_DEFINITION) present and the speed computed from
  them: llama-speculative's "decoded N tokens in T seconds" as (N - 1) / T; the baseline's eval
  runs over eval plus sampling time (both printed: a build that stops printing sampling time would
  silently time less); llama-server's predicted_n and predicted_ms;
- outputs identical: greedy decoding with a draft generates what the target alone does.
"""

from __future__ import annotations

from typing import Any

import pytest

from llamaspec.contract import Measurement


def speculative_counters(spec: Measurement, k: int, *, fixed: bool = True) -> None:
    """llama-speculative's counters (2024 on: exactly k drafted a round when ``fixed``)."""
    assert spec.ok, spec.error
    assert spec.n_drafted is not None and spec.n_accept is not None and spec.n_predict is not None
    assert 0 <= spec.n_accept <= spec.n_drafted
    assert spec.rounds == spec.n_predict - spec.n_accept - 1 >= 1, (spec.rounds, spec.n_predict, spec.n_accept)
    if fixed:
        assert spec.draft_policy == "fixed" and spec.draft_len == k
        assert spec.n_drafted == k * spec.rounds, (spec.n_drafted, k, spec.rounds)
    else:
        assert spec.n_drafted <= k * spec.rounds
    assert spec.tokens_per_round == pytest.approx((spec.n_predict - 1) / spec.rounds)
    assert spec.accept == pytest.approx(100 * spec.n_accept / spec.n_drafted, abs=0.01)  # printed to 3 decimals


def speculative_speed(spec: Measurement, requested: int) -> None:
    """llama-speculative's decode speed from "decoded N tokens in T seconds": (N - 1) / T."""
    stats = spec.stats or {}
    n, t = stats.get("n_decoded"), stats.get("decode_s")
    assert isinstance(n, int) and isinstance(t, float) and t > 0, (n, t)
    assert n == spec.n_predict >= requested  # the last round's accepted tokens may overshoot -n
    assert spec.decode_tps == pytest.approx((n - 1) / t)
    assert spec.speed_basis and "(N - 1) / T" in spec.speed_basis


def baseline_speed(base: Measurement, requested: int) -> None:
    """The target alone: exactly ``requested`` tokens, and its speed from eval runs, eval time and
    sampling time (each printed)."""
    assert base.ok, base.error
    t = (base.stats or {}).get("timings") or {}
    runs, eval_ms = t.get("eval_runs"), t.get("eval_ms")
    sampling = t.get("sampling_total_ms") if t.get("sampling_total_ms") is not None else t.get("sample_ms")
    assert isinstance(runs, int) and eval_ms and sampling is not None, t
    assert base.n_predict == runs + 1 == requested and not base.end_of_text
    assert base.decode_tps == pytest.approx(runs / (eval_ms + sampling) * 1e3)
    assert base.n_drafted is None and base.draft_policy == "none"


def same_output(spec: Measurement, base: Measurement, at_least: int = 40) -> None:
    """The generated texts agree (token ids too, where the engine gives them); a speculative run
    may generate a few tokens more (its last round), so the shorter is a prefix of the longer."""
    a, b = (spec.text or "").strip(), (base.text or "").strip()
    shorter, longer = sorted((a, b), key=len)
    assert len(shorter) >= at_least and longer.startswith(shorter), (a, b)
    if spec.tokens is not None and base.tokens is not None:
        n = min(len(spec.tokens), len(base.tokens))
        assert n >= 1 and spec.tokens[:n] == base.tokens[:n]


def server_counters(spec: Measurement, k: int) -> None:
    """llama-server's speculative counters: its answer's draft_n / draft_n_accepted, rounds by its
    loop, and /metrics' count of the rounds that drafted (at most every round, and each of those
    drafted at least one token and at most k; an n-gram mode may find nothing to draft at all)."""
    assert spec.ok, spec.error
    assert spec.n_drafted is not None and spec.n_accept is not None and spec.n_predict is not None
    assert 0 <= spec.n_accept <= spec.n_drafted
    assert spec.rounds == spec.n_predict - spec.n_accept - 1 >= 1, (spec.rounds, spec.n_predict, spec.n_accept)
    assert spec.drafted_rounds is not None and 0 <= spec.drafted_rounds <= spec.rounds  # 0: an n-gram mode found nothing
    assert spec.drafted_rounds <= spec.n_drafted <= k * spec.drafted_rounds, (spec.n_drafted, k, spec.drafted_rounds)
    assert spec.tokens_per_round == pytest.approx((spec.n_predict - 1) / spec.rounds)
    timings: dict[str, Any] = (spec.stats or {}).get("timings") or {}
    assert (timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)) == (spec.n_drafted, spec.n_accept)  # absent: none


def server_speed(m: Measurement, requested: int) -> None:
    """llama-server's decode speed from its answer's timings: (predicted_n - 1) / predicted_ms."""
    t: dict[str, Any] = (m.stats or {}).get("timings") or {}
    n, ms = t.get("predicted_n"), t.get("predicted_ms")
    assert isinstance(n, int) and ms and ms > 0, t
    assert n == m.n_predict and (m.tokens is None or len(m.tokens) == n)
    assert n == requested or m.end_of_text, (n, requested)
    assert m.generation_ms == pytest.approx(ms) and m.decode_tps == pytest.approx((n - 1) / ms * 1e3)
    assert m.prompt_ms is not None and m.prompt_ms > 0 and m.n_prompt
