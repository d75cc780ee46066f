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
- outputs identical: greedy decoding with a draft generates what the target alone does;
- the answer: a decision of one of its kinds (``decide.VERDICTS``), each with the parts that kind
  requires (``answer``, ``answer_text``), never which kind: which one the timings lead to depends
  on the CPU, its load and the thread count (issue 38). A test that needs a decided outcome takes
  it from recorded timings or a fake engine whose speed follows what it is asked
  (tests/test_sweep.py), not from this machine.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from llamaspec.decision.decide import VERDICTS
from llamaspec.measure.contract import Measurement


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
    # the printed accept (a percentage to 3 decimals, read as a fraction) agrees with the counters
    assert (spec.stats or {})["acceptance"] == pytest.approx(spec.acceptance, abs=1e-5)


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


# --- the answer: a decision of one of its kinds, with the parts each kind requires ------------------

# How each kind of decision begins when printed (decide.Decision.lines), and whether it deploys:
# a recommendation deploys its setting, "no draft" the target alone; "undecided" says what to
# measure next instead, "nothing" why nothing finished.
KINDS = {"recommend": ("recommended: ", True), "no draft": ("recommended: no draft", True),
         "undecided": ("undecided: ", False), "nothing": ("recommended: nothing", False)}
assert set(KINDS) == set(VERDICTS), "a new kind of decision: say here what it must carry"


def sweep_answers(stdout: str) -> list[dict[str, Any]]:
    """The answers of ``sweep --json`` or ``tune --json`` (one: the workload's). The one place that
    knows that output's shape: when it changes, this changes."""
    data = json.loads(stdout)
    return data if isinstance(data, list) else [data]


def _commands_text(deploy: dict[str, Any]) -> str:
    return "\n".join(" ".join(c["argv"]) or c["text"] for c in deploy["commands"])


def answer(report: dict[str, Any], target: str | None = None, draft: str | None = None) -> str:
    """One answer of ``sweep --json`` (``sweep_answers``) is a decision of one of its kinds with
    that kind's parts; returns the kind, for the caller to print or to check an engine's own
    flags by, never to expect one:

    - recommend: the setting, shown faster (its interval above 1.0), why, and the command that
      deploys it: with the draft where the setting is a draft length (``draft`` named in it, as
      ``target`` is), without it where it is a draft-free mode;
    - no draft: why not, and the command that deploys the target alone (``draft`` absent);
    - undecided: why, and what to measure next (a setting and a number of pairs each); no command;
    - nothing: why; no command."""
    decision, deploy = report["decision"], report["deploy"]
    kind = decision["verdict"]
    assert kind in KINDS, kind
    assert decision["reason"].strip(), decision
    chosen = decision["chosen"]
    uses_draft = kind == "recommend" and chosen["label"].startswith("draft")
    if kind == "recommend":
        assert chosen and decision["interval"]["low"] > 1.0, decision  # never recommended unless shown faster
        assert any(s["label"] == chosen["label"] and s["speedup"] for s in report["setups"]), report["setups"]
    if kind == "undecided":
        # what to measure next, or why nothing is decided (the load changed while it measured)
        assert (decision["measure_next"] and all(r["label"] and r["pairs"] >= 1 for r in decision["measure_next"])
                or "the load changed" in decision["reason"]), decision
    if not KINDS[kind][1]:
        assert deploy is None, deploy
        return kind
    assert deploy is not None and deploy["commands"], (kind, deploy)
    assert deploy["speculative"] == (kind == "recommend"), deploy
    commands = _commands_text(deploy)
    if target is not None:
        assert target in commands, commands
    if draft is not None:
        assert (draft in commands) == uses_draft, commands
    return kind


def kind_of(head: str) -> str:
    """The kind of decision a printed head line says (``KINDS``)."""
    kind = next((k for k in ("no draft", "nothing", "undecided", "recommend") if head.startswith(KINDS[k][0])), None)
    assert kind is not None, head
    return kind


def answer_text(output: str, target: str | None = None, draft: str | None = None, deploys: bool = True) -> str:
    """The printed form of the last answer in ``output`` (``sweep`` or ``tune`` without --json):
    the decision's head, its "why" and "how sure" lines, then for a recommendation or "no draft"
    its deploy block (naming ``target``, and ``draft`` only when recommended), for "undecided"
    the pairs to measure next and no command. ``deploys=False``: an output that prints no command
    at all (a cluster tune's, one answer per machine). Returns the kind."""
    lines = output.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith(("recommended: ", "undecided: "))]
    assert heads, output
    at = heads[-1]
    head = lines[at]
    kind = kind_of(head)
    if kind == "recommend":
        assert re.match(r"recommended: .+ -> \d+\.\d+x \[", head), head
    assert lines[at + 1].startswith("  why: ") and lines[at + 1][7:].strip(), lines[at:at + 3]
    assert lines[at + 2].startswith("  how sure: "), lines[at:at + 3]
    rest = "\n".join(lines[at:])
    if kind == "undecided":
        # what to measure next (pairs on one prompt, prompts over several), or why nothing is decided
        # (the load changed while it measured)
        assert re.search(r"how sure: not settled(: .+: \d+ more (pairs?|prompts?) \(|$)", lines[at + 2]), lines[at + 2]
    if not KINDS[kind][1] or not deploys:
        assert "\ndeploy: " not in rest, rest
        return kind
    block = rest[rest.index("\ndeploy: "):]
    assert ("\ndeploy: no draft" in block) == (kind == "no draft"), block
    if target is not None:
        assert target in block, block
    if draft is not None:  # a draft length deploys the draft; a draft-free mode or "no draft" does not
        assert (draft in block) == head.startswith("recommended: draft "), block
    return kind
