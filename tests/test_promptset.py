"""Prompt-set runs: per-prompt summaries, set statistics (hand-checkable numbers), resuming,
recommendations. The real server runs in test_server.py; here an in-process backend answers
each request from what it is asked (mode, prompt, n_predict)."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from llamaspec import promptset
from llamaspec.measure import estimators
from llamaspec.measure.contract import Capabilities, Measurement, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.store.results import Store
from llamaspec.studies.prompts import Prompt, PromptSet, PromptSource


def m(mode: str, tps: float, n: int = 64, drafted: int | None = None, accepted: int | None = None,
      rounds: int | None = None, tokens: tuple[int, ...] | None = None, eot: bool = False,
      prompt_ms: float | None = None, pair: int = 0) -> Measurement:
    """A measurement of pair ``pair``; with ``prompt_ms``, llama-server's timings as the server reports
    them (``predicted_ms`` from the first generated token to the last: (n - 1) tokens at ``tps``)."""
    timings = {"prompt_n": 20, "prompt_ms": prompt_ms, "predicted_n": n, "predicted_ms": 1000.0 * (n - 1) / tps}
    return Measurement(mode=mode, ok=True, error=None, argv=(), exit_code=None, wall_seconds=1.0, peak_rss_bytes=None,
                       n_predict=n, decode_tps=tps, n_drafted=drafted, n_accept=accepted, rounds=rounds,
                       tokens=tokens if tokens is not None else tuple(range(n)), end_of_text=eot,
                       prompt_ms=prompt_ms, generation_ms=timings["predicted_ms"] if prompt_ms is not None else None,
                       stats={"timings": timings} if prompt_ms is not None else None, pair=pair)


def summary(pid: str, category: str, base: float, spec: float, **kw: Any) -> promptset.PromptFigures:
    eot = kw.pop("eot", False)
    n = kw.pop("n", 64)
    base_ms, spec_ms = kw.pop("prompt_ms", (None, None))
    return promptset.prompt_summary(Prompt(pid, "x", category), [m("baseline", base, n=n, eot=eot, prompt_ms=base_ms),
                                                                   m("speculative", spec, n=n, eot=eot, prompt_ms=spec_ms,
                                                                     **kw)])


def paired(pid: str, category: str, base: float, specs: list[float], **kw: Any) -> promptset.PromptFigures:
    """A prompt measured ``len(specs)`` times: pair i is the baseline at ``base`` t/s and the
    speculative run at ``specs[i]`` (``kw``: the speculative runs' other fields, e.g. their tokens)."""
    ms = []
    for i, spec in enumerate(specs):
        ms += [m("baseline", base, pair=i), m("speculative", spec, pair=i, **kw)]
    return promptset.prompt_summary(Prompt(pid, "x", category), ms)


def verdicts(recommendation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A recommendation's JSON: each category's decision (the same rule on its prompts)."""
    return {c["category"]: c["decision"] for c in recommendation["categories"]}


def test_prompt_summary_pairs_repeats_and_checks_tokens() -> None:
    s = promptset.prompt_summary(Prompt("a", "x", "code"), [
        m("baseline", 10.0), m("speculative", 20.0, drafted=40, accepted=30, rounds=10),
        m("speculative", 30.0, drafted=40, accepted=30, rounds=10, pair=1), m("baseline", 10.0, pair=1)])
    assert s.speedup == 2.5  # median of the paired ratios 2.0 and 3.0
    assert s.n_drafted == 80 and s.n_accept == 60 and s.acceptance == 0.75 and s.rounds == 20
    assert s.lossless is True and s.first_difference is None
    assert s.baseline_tokens == 126 and math.isclose(s.baseline_seconds, 12.6)
    assert promptset.PromptFigures.from_dict(json.loads(json.dumps(s.to_dict()))) == s  # as a run row stores it
    differs = promptset.prompt_summary(Prompt("b", "x"), [m("baseline", 10.0), m("speculative", 12.0,
                                                                                 tokens=(0, 1, 2, 9) + tuple(range(4, 64)))])
    assert differs.lossless is False and differs.first_difference == 3


def test_prompt_summary_takes_the_run_cores_lossless_verdict() -> None:
    short = promptset.prompt_summary(Prompt("s", "x"), [m("baseline", 10.0), m("speculative", 12.0, tokens=tuple(range(40)))])
    assert short.lossless is False and short.first_difference == 40 and "shorter" in (short.lossless_text or "")
    past_eot = promptset.prompt_summary(Prompt("e", "x"), [m("baseline", 10.0, n=10, eot=True),
                                                           m("speculative", 12.0, n=12)])
    assert past_eot.lossless is False and "end of text" in (past_eot.lossless_text or "")
    # the speculative side diverged, then stopped on its own: said so, not as the baseline ending early
    spec_ended = promptset.prompt_summary(Prompt("d", "x"), [m("baseline", 10.0),
                                                             m("speculative", 12.0, n=30, eot=True)])
    assert spec_ended.ended_early and spec_ended.lossless is False
    assert spec_ended.ended_early_note == "the speculative output ended after 30 tokens, the baseline ran on to 64"
    same = promptset.prompt_summary(Prompt("i", "x"), [m("baseline", 10.0), m("speculative", 12.0)])
    assert same.lossless is True and (same.lossless_text or "").startswith("identical over 64 generated tokens")
    assert same.paired is True and same.divergence is None


def test_a_sampled_prompt_has_no_lossless_verdict() -> None:
    """Sampled outputs differ by chance: a sampled prompt is neither lossless nor differing, and
    it does not count in the set's lossless rate (nor sends the divergence probe)."""
    diverged = [m("baseline", 10.0), m("speculative", 12.0, tokens=(0, 1, 2, 9) + tuple(range(4, 64)))]
    assert promptset.prompt_summary(Prompt("g", "x"), diverged).lossless is False  # greedy: it differs
    sampled = promptset.prompt_summary(Prompt("t", "x"), diverged, temperature=0.7)
    assert sampled.lossless is None and sampled.first_difference is None and sampled.status == "ok"
    assert sampled.lossless_text == "not applicable: sampled (temperature 0.7)" and sampled.speedup == 1.2
    group = promptset.group_statistics([sampled])
    assert group.lossless_rate is None and group.differing == 0


def test_set_statistics_by_hand() -> None:
    items = [
        summary("p1", "code", 10.0, 20.0, drafted=40, accepted=30, rounds=10),
        summary("p2", "code", 10.0, 5.0, drafted=40, accepted=10, rounds=20),
        summary("p3", "prose", 10.0, 10.0, drafted=0, accepted=0, rounds=0),
        summary("p4", "prose", 10.0, 40.0, n=3, eot=True, drafted=2, accepted=2, rounds=1),
    ]
    st = promptset.set_statistics(items)
    s = st.set
    assert (s.prompts, s.counted, s.ended_early) == (4, 3, 1)
    assert s.mean_speedup and math.isclose(s.mean_speedup.median, 7 / 6)  # (2 + 0.5 + 1) / 3; p4's 4x is not counted
    assert s.geomean_speedup and math.isclose(s.geomean_speedup.median, 1.0)  # (2 * 0.5 * 1) ** (1/3)
    assert s.median_speedup and math.isclose(s.median_speedup.median, 1.0)
    # 189 tokens in 3.15 + 12.6 + 6.3 s against 189 tokens in 3 * 6.3 s
    assert s.total_speedup and math.isclose(s.total_speedup.median, 18.9 / 22.05)
    assert s.total_speedup.low <= s.total_speedup.median <= s.total_speedup.high
    assert s.acceptance == 0.5  # 40 of 80
    assert s.tokens_per_round and math.isclose(s.tokens_per_round, (40 + 30) / 30)  # the target's own token included
    assert s.lossless_rate == 1.0 and s.lossless_checked == 4
    code = st.categories["code"]
    assert code.mean_speedup and math.isclose(code.mean_speedup.median, 1.25)
    assert code.total_speedup and math.isclose(code.total_speedup.median, 0.8)
    assert st.categories["prose"].counted == 1
    assert st.ended_early == (promptset.EndedEarly("p4", "prose", 3, "3 tokens"),)
    assert st.to_dict()["ended_early"] == [{"id": "p4", "category": "prose", "n_predict": 3, "note": "3 tokens"}]


def test_intervals_are_seeded_and_cover_the_estimate() -> None:
    """The set's speedup is the workload estimator: the geometric mean of the prompts' medians, its
    interval from each prompt's pairs resampled (seeded: the same figures twice). Prompts measured
    once each have no pair-to-pair noise to go by: no interval (n 1), so none is shown faster."""
    items = [paired(f"p{i}", "c", 10.0, [10.0 + i, 10.4 + i, 9.8 + i]) for i in range(10)]
    a = promptset.set_statistics(items).set.geomean_speedup
    b = promptset.set_statistics(items).set.geomean_speedup
    assert a is not None and a == b and a.low < a.median < a.high
    assert a.median == pytest.approx(math.prod(1.0 + i / 10 for i in range(10)) ** 0.1)  # each prompt's median pair
    assert a.n == 30  # every pair of every prompt
    once = promptset.set_statistics([summary(f"p{i}", "c", 10.0, 10.0 + i) for i in range(10)]).set.geomean_speedup
    assert once is not None and once.n == 1 and once.low == once.median == once.high
    assert once.median == pytest.approx(a.median)


def test_end_to_end_figures_by_hand_include_the_prompt() -> None:
    """A case measured on the shipped set: the draft makes decoding 1.26x faster, but the
    speculative server takes 700 ms on the prompt against 267 ms: at 32 tokens the request is slower."""
    s = summary("p1", "code", 100.0, 126.0, n=32, prompt_ms=(267.0, 700.0))
    assert s.speedup and math.isclose(s.speedup, 1.26)  # decode: unchanged
    base_s, spec_s = 0.267 + 31 / 100.0, 0.700 + 31 / 126.0
    assert math.isclose(s.baseline_e2e_seconds, base_s) and math.isclose(s.speculative_e2e_seconds, spec_s)
    assert s.baseline_e2e_tokens == s.speculative_e2e_tokens == 32  # every token: the first comes from the prompt
    assert s.e2e_speedup and math.isclose(s.e2e_speedup, base_s / spec_s) and s.e2e_speedup < 1 < s.speedup
    assert (s.baseline_prompt_ms, s.speculative_prompt_ms) == (267.0, 700.0)
    # Two repeats, ABBA: paired in the order taken, like the decode speedup.
    two = promptset.prompt_summary(Prompt("p2", "x", "code"), [
        m("baseline", 100.0, n=11, prompt_ms=100.0), m("speculative", 200.0, n=11, prompt_ms=50.0),
        m("speculative", 100.0, n=11, prompt_ms=100.0, pair=1), m("baseline", 100.0, n=11, prompt_ms=100.0, pair=1)])
    assert two.e2e_speedup_spread and list(two.e2e_speedup_spread.values) == pytest.approx([2.0, 1.0])
    assert two.e2e_speedup and math.isclose(two.e2e_speedup, 1.5)
    assert math.isclose(two.speculative_e2e_seconds, 0.1 + 0.2) and math.isclose(two.baseline_e2e_seconds, 0.4)

    items = [s, summary("p3", "prose", 100.0, 100.0, n=64, prompt_ms=(100.0, 400.0)),
             summary("p4", "prose", 100.0, 200.0, n=64)]  # p4: no server timings (decode only)
    st = promptset.set_statistics(items)
    g = st.set
    assert g.counted == 3 and g.e2e_counted == 2
    # all tokens over all request seconds, speculative against the baseline, over p1 and p3
    total = (32 + 64) / (spec_s + 0.4 + 0.63) / ((32 + 64) / (base_s + 0.1 + 0.63))
    assert g.e2e_total_speedup and math.isclose(g.e2e_total_speedup.median, total)
    assert g.e2e_total_speedup.low <= total <= g.e2e_total_speedup.high
    assert g.e2e_geomean_speedup and math.isclose(g.e2e_geomean_speedup.median, math.sqrt(s.e2e_speedup * 0.73 / 1.03))
    assert g.total_speedup and g.total_speedup.median > 1 > g.e2e_total_speedup.median  # the decode figure is unchanged
    code_e2e = st.categories["code"].e2e_total_speedup
    assert code_e2e and math.isclose(code_e2e.median, base_s / spec_s)
    assert (g.baseline_prompt_ms, g.speculative_prompt_ms) == (183.5, 550.0)  # medians over prompts


def chosen_label(d: Any) -> str | None:
    return d.chosen.label if d.verdict == "recommend" and d.chosen is not None else None


def test_recommend_skips_methods_whose_output_differs_and_says_baseline_when_none_pays() -> None:
    """One decision over the set's prompts: the fast method whose output differs on a prompt is
    excluded (and said), the identical one recommended; per category (three prompts each, the least
    a category's verdict rests on), code gains and prose does not ("no draft"). One pair of one
    prompt gives no interval: undecided, measure it again."""
    good = [paired("p1", "code", 10.0, [15.0, 15.3]), paired("p3", "code", 10.0, [16.0, 15.8]),
            paired("p5", "code", 10.0, [15.5, 15.6]), paired("p2", "prose", 10.0, [8.0, 8.1]),
            paired("p4", "prose", 10.0, [8.2, 8.0]), paired("p6", "prose", 10.0, [7.9, 8.1])]
    wrong = [paired("p1", "code", 10.0, [30.0, 30.5], tokens=(5,) * 64), paired("p3", "code", 10.0, [30.0, 31.0]),
             paired("p5", "code", 10.0, [30.0, 31.0]), paired("p2", "prose", 10.0, [7.0, 7.1]),
             paired("p4", "prose", 10.0, [7.0, 7.1]), paired("p6", "prose", 10.0, [7.0, 7.1])]
    rec = promptset.recommend({"wrong": wrong, "good": good})
    assert rec.method == "good" and rec.decision.estimator == estimators.WORKLOAD, rec.lines()
    setup = rec.decision.setup("wrong")
    assert setup is not None and setup.excluded == "output differs on p1" and setup.speedup is None
    assert chosen_label(rec.category("code")) == "good" and rec.category("prose").verdict == "no draft"
    assert rec.decision.categories_disagree and "  excluded: wrong: output differs on p1" in rec.lines()
    one = promptset.recommend({"good": [summary("p1", "code", 10.0, 15.0)]})
    assert one.verdict == "undecided" and one.decision.decision.requests[0].key == "good"
    data = one.to_dict()
    assert data["decision"]["measure_next"][0]["key"] == "good" and data["decision"]["chosen"]["label"] == "good"
    assert data["basis"] == "decode" and data["method"] is None and data["estimator"] == estimators.WORKLOAD


def near_tie(gap: float = 0.0035) -> dict[str, Any]:
    return {"position": 7, "top": [{"id": 1, "p": 0.3}, {"id": 2, "p": 0.3 - gap}], "gap": gap, "near_tie": True}


def test_recommend_keeps_a_method_whose_only_differences_are_near_ties_labelled() -> None:
    """The faster method differs on one prompt. When that difference is a greedy near-tie it is
    still recommended, labelled, and its lossless rate stays as measured; when it is not a
    near-tie, or was never probed, the slower identical method is recommended instead."""
    def faster(divergence: dict[str, Any] | None) -> list[promptset.PromptFigures]:
        items = [paired(f"p{i}", "code", 10.0, [20.0 + i, 20.4 + i]) for i in range(3)]
        differs = paired("p3", "code", 10.0, [21.0, 21.4], tokens=(0, 1, 2, 3, 4, 5, 6, 9) + tuple(range(8, 64)))
        assert differs.lossless is False
        return [*items, replace(differs, divergence=promptset.Divergence.from_dict(divergence))]

    slower = [paired(f"p{i}", "code", 10.0, [12.0 + 0.1 * i, 12.3 + 0.1 * i]) for i in range(4)]
    tie = faster(near_tie(0.0035))
    tie_set = promptset.set_statistics(tie).set
    assert tie_set.lossless_rate == 0.75 and tie_set.differing == 1 and tie_set.differs_near_tie == 1
    rec = promptset.recommend({"draft-k8": tie, "ngram": slower})
    assert rec.method == "draft-k8", rec.lines()
    assert rec.decision.setup("draft-k8").excluded is None  # type: ignore[union-attr]
    assert rec.near_ties == (promptset.NearTie("draft-k8", "all", 1, 4, 0.0035),)
    assert rec.near_ties[0].text() == "output differs on 1 of 4 prompts, each at a greedy near-tie (gap <= 0.0035)"
    text = "\n".join(rec.lines())
    assert "recommended: draft-k8 -> 2.1" in text
    assert "near-tie: draft-k8 (the whole set): output differs on 1 of 4 prompts, each at a greedy near-tie" in text
    assert rec.to_dict()["near_ties"][0]["note"] == rec.near_ties[0].text()

    clear = {**near_tie(0.4), "near_tie": False}
    for divergence in (clear, None, {**near_tie(), "top": None, "gap": None, "near_tie": None}):
        rec = promptset.recommend({"draft-k8": faster(divergence), "ngram": slower})
        assert rec.method == "ngram", (divergence, rec.lines())
        assert rec.decision.setup("draft-k8").excluded == "output differs on p3", divergence  # type: ignore[union-attr]
        assert rec.near_ties == ()
    # one near-tie and one real difference: excluded
    mixed = replace(tie_set, differing=2, lossless_rate=0.6, lossless_checked=5)
    assert promptset.near_tie_note(mixed) is None
    assert promptset.near_tie_note(tie_set) == rec_note(1, 4, 0.0035)
    # alone, a near-tie-only method still gets its labelled recommendation rather than none
    assert promptset.recommend({"draft-k8": tie}).method == "draft-k8"


def rec_note(differing: int, checked: int, gap: float) -> str:
    return promptset.NearTie("m", "all", differing, checked, gap).text()


# --- running over a set ------------------------------------------------------------------------

@dataclass
class Engine:
    """Answers like the server: n_predict tokens (a prompt containing "short" ends after 3),
    faster when speculative on prompts with "code", its prompt processing 100 ms alone and 400 ms
    with the draft; dies on the prompt named ``die_on``."""

    die_on: str | None = None
    name: str = "fake"
    calls: int = 0
    flip: dict[str, int] | None = None  # prompt id -> position where speculation takes token 999
    probed: list[tuple[str, int]] | None = None

    capabilities = Capabilities(modes=frozenset({"baseline", "speculative"}), settings=frozenset(), keeps_models_loaded=True,
                                token_ids=True, prepares=True, top_tokens=True, prompt_timings=True)

    def identity(self) -> str:
        return "fake-1"

    def provenance(self) -> dict[str, Any]:
        return {"commit": "fake"}

    def check(self, case: ResolvedCase) -> None:
        pass

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        self.calls += 1
        if mode == "speculative" and self.die_on and case.prompt_id == self.die_on:
            return Measurement(mode=mode, ok=False, error="llama-server (speculative) was killed by SIGKILL", argv=(),
                               exit_code=None, wall_seconds=0.1, peak_rss_bytes=None, error_kind="server")
        if case.prompt and "too long" in case.prompt:
            return Measurement(mode=mode, ok=False, error="llama-server refused the prompt: exceeds the context",
                               argv=(), exit_code=None, wall_seconds=0.1, peak_rss_bytes=None,
                               error_kind="prompt")
        n = 3 if "short" in (case.prompt or "") else case.settings.n_predict or 16
        tps = 10.0 * (2 if mode == "speculative" and "code" in (case.prompt or "") else 1)
        tokens = list(range(n))
        at = (self.flip or {}).get(case.prompt_id or "")
        if mode == "speculative" and at is not None:
            tokens[at] = 999
        return m(mode, tps, n=n, eot=n < (case.settings.n_predict or 16),
                 drafted=8 if mode == "speculative" else None, accepted=6 if mode == "speculative" else None,
                 rounds=2 if mode == "speculative" else None, tokens=tuple(tokens),
                 prompt_ms=400.0 if mode == "speculative" else 100.0)

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = ("baseline", "speculative")) -> None:
        """Nothing to load: this fake answers at once."""

    def top_tokens(self, case: ResolvedCase, position: int, prefix: Any, log_path: Path) -> list[dict[str, Any]]:
        """The target's top two at ``position``: a near-tie where this fake flips for ``c1``, a clear
        winner where it flips for the others, on the baseline's path (token i at position i)."""
        assert list(prefix) == list(range(position))
        if self.probed is not None:
            self.probed.append((case.prompt_id or "", position))
        if case.prompt_id == "c1":
            return [{"id": position, "piece": "a", "p": 0.401}, {"id": 999, "piece": "b", "p": 0.399}]
        return [{"id": position, "piece": "a", "p": 0.90}, {"id": 999, "piece": "b", "p": 0.05}]

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Exp:
    name: str = "exp"
    cases: tuple[str, ...] = ("m1",)
    path: str = ""


def resolve(exp: Any, name: Any) -> ResolvedCase:
    model = ModelPath("t:f32", "/models/t.gguf")
    return ResolvedCase(exp.name, name, model, model, None, None, Settings(n_predict=16, seed=1, draft_max=4))


PROMPTS = PromptSet(PromptSource("jsonl", "/x.jsonl"), (
    Prompt("c1", "code one", "code"), Prompt("c2", "code two", "code"), Prompt("s1", "short", "prose"),
    Prompt("t1", "too long", "prose"), Prompt("p1", "prose one", "prose"), Prompt("p2", "prose two", "prose")))


def test_a_prompt_goes_into_its_case_with_its_earlier_turns() -> None:
    case = resolve(Exp(), "draft")
    turns = (("user", "Plan a trip."), ("assistant", "Where to?"))
    one = promptset.prompt_case(case, Prompt("t1", "To Porto.", "multi-turn", True, 4, turns))
    assert (one.prompt, one.prompt_id, one.category, one.chat, one.history) == ("To Porto.", "t1", "multi-turn", True, turns)
    assert promptset.prompt_case(one, Prompt("c1", "Write a loop.", "code", False)).history == ()


@pytest.fixture
def no_provenance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promptset.runcore, "provenance", lambda backend, case, hw: {"llamacpp": backend.provenance()})


def test_run_set_stores_each_prompt_and_resumes_after_a_dead_server(tmp_path: Path, no_provenance: None) -> None:
    store = Store.open(tmp_path / "r.db")
    events: list[tuple[str, dict[str, Any]]] = []
    first = promptset.run_set(Exp(), PROMPTS, Engine(die_on="p1"), store, repeats=2, resolve=resolve,
                              on_event=lambda e, d: events.append((e, d)))
    case = first.cases[0]
    assert not first.complete and case.not_run == ("p2",) and "SIGKILL" in (case.error or "")
    assert [i.id for i in case.items] == ["c1", "c2", "s1", "t1", "p1"]
    assert [i.status for i in case.items] == ["ok", "ok", "ok", "failed", "failed"]
    assert "exceeds the context" in (case.items[3].error or "")  # one prompt's error; the next ones still ran
    rows = store.runs(group_id=case.set_id)
    assert sorted(r["status"] for r in rows) == ["failed", "failed", "ok", "ok", "ok"]
    ok_rows = [r for r in rows if r["status"] == "ok"]
    assert all(len(store.measurements(r["id"])) == 4 for r in ok_rows)  # ABBA over two repeats
    orders = [[x["mode"] for x in store.measurements(r["id"])] for r in ok_rows]
    assert orders[0] == ["baseline", "speculative", "speculative", "baseline"]
    assert any(e == "stopped" for e, _ in events)

    again = Engine()
    second = promptset.run_set(Exp(), PROMPTS, again, store, repeats=2, resolve=resolve)
    assert second.complete
    # finished prompts skipped; the refused one, the one the server died on and the one not run are measured
    assert again.calls == 1 + 4 + 4  # t1 is refused at its first request
    items = second.cases[0].items
    assert [i.id for i in items] == ["c1", "c2", "s1", "t1", "p1", "p2"]
    st = promptset.set_summary(second)
    method = st.methods[second.cases[0].label].figures
    assert method.set.counted == 4 and method.ended_early[0].id == "s1"
    code_g, prose_g = method.categories["code"].geomean_speedup, method.categories["prose"].geomean_speedup
    assert code_g and code_g.median == 2.0 and prose_g and prose_g.median == 1.0
    assert [f.id for f in method.failed] == ["t1"]
    text = promptset.render(st)
    assert "ended early (not in speedups): s1 (3 tokens)" in text and "code" in text
    code_model = method.categories["code"].model  # the header's model column has each category's forecast
    assert code_model and f"k={code_model.best_draft} -> {code_model.best_speedup:.2f}x (alpha" in text
    figures = json.loads(promptset.as_json(st))
    assert figures["methods"][second.cases[0].label]["categories"]["code"]["counted"] == 2
    # one decision over the set: s1 ended early and t1 failed on every method (the server refused it), so
    # they are left out and said; the rest decide, over the set and per category
    label = second.cases[0].label
    decode = figures["recommendation"]
    assert decode["basis"] == "decode" and decode["estimator"] == estimators.WORKLOAD
    assert [(p["prompt"], p["why"].split(":")[0]) for p in decode["left_out"]] == [("s1", "ended early"),
                                                                                   ("t1", "failed on every method")]
    assert [p["prompt"] for p in decode["prompts"]] == ["c1", "c2", "p1", "p2"]
    assert decode["method"] == label and decode["decision"]["verdict"] == "recommend"
    assert verdicts(decode)["code"]["chosen"]["label"] == label and verdicts(decode)["prose"]["verdict"] == "no draft"
    # End to end, 16 tokens: code 1.6 s alone against 0.4 + 0.75 s; prose 1.6 s against 0.4 + 1.5 s.
    code, prose = (figures["methods"][second.cases[0].label]["categories"][c] for c in ("code", "prose"))
    assert math.isclose(code["e2e_total_speedup"]["median"], 1.6 / 1.15)
    assert math.isclose(prose["e2e_geomean_speedup"]["median"], 1.6 / 1.9) and prose["e2e_counted"] == 2
    end_to_end = verdicts(figures["recommendation_end_to_end"])
    assert end_to_end["prose"]["verdict"] == "no draft"  # decode says 1.00x, e2e 0.84x
    assert end_to_end["code"]["verdict"] == "recommend" and end_to_end["code"]["chosen"]["label"] == label
    assert "end to end" in figures["definitions"]["end_to_end"] and "prompt" in figures["definitions"]["decode"]
    assert "  decode:      total-token speedup" in text and "  end to end, prompt included: total-time speedup" in text
    assert "prompt processing 100 ms alone vs 400 ms speculative (median)" in text
    assert "Recommendation, end to end, prompt included" in text


def test_a_differing_output_is_probed_labelled_and_still_not_lossless(tmp_path: Path, no_provenance: None) -> None:
    store = Store.open(tmp_path / "r.db")
    backend = Engine(flip={"c1": 5, "p1": 9}, probed=[])
    result = promptset.run_set(Exp(), PROMPTS, backend, store, resolve=resolve, repeats=2)
    assert backend.probed == [("c1", 5), ("p1", 9)]  # only the prompts that differ, at their divergence
    items = {i.id: i for i in result.cases[0].items}
    tie, clear = items["c1"].divergence, items["p1"].divergence
    assert tie and tie.position == 5 and tie.near_tie is True and math.isclose(tie.gap or 0, 0.002)
    assert clear and clear.near_tie is False and items["c2"].divergence is None
    st = promptset.set_summary(result)
    method = st.methods[result.cases[0].label].figures
    assert method.set.lossless_rate == 3 / 5  # near-tie or not, they are not lossless (t1 failed, unchecked)
    text = promptset.render(st)
    assert "c1 differs at token 5: near-tie p 0.4010 vs 0.3990 (gap 2.0e-03)" in text
    assert "p1 differs at token 9: not a near-tie (target's top two p 0.9000 vs 0.0500)" in text
    figures = json.loads(promptset.as_json(st))
    assert figures["methods"][result.cases[0].label]["differs"][0]["divergence"]["near_tie"] is True
    label = result.cases[0].label
    rec = st.recommendation
    # c1's only difference is a near-tie: on the code prompts the method is still recommended, labelled
    code = rec.category("code")
    assert code.verdict == "recommend" and code.chosen is not None and code.chosen.label == label, rec.lines()
    assert rec.near_ties == (promptset.NearTie(label, "code", 1, 2, pytest.approx(0.002)),)
    assert rec.near_ties[0].text() == "output differs on 1 of 2 prompts, each at a greedy near-tie (gap <= 0.002)"
    # p1 is no near-tie: excluded over the whole set, and on the prose prompts nothing is left to recommend
    assert rec.decision.setup(label).excluded == "output differs on p1"  # type: ignore[union-attr]
    assert rec.verdict == "nothing" and rec.category("prose").verdict == "nothing"
    assert f"code: {label} 2.00x" in text and f"near-tie: {label} (code): output differs on 1 of 2 prompts" in text
    assert method.categories["code"].differs_near_tie == 1
    again = promptset.run_set(Exp(), PROMPTS, Engine(), store, resolve=resolve, repeats=2)  # resumed: kept as stored
    assert {i.id: i for i in again.cases[0].items}["c1"].divergence == tie


def test_plots_are_written(tmp_path: Path, no_provenance: None) -> None:
    store = Store.open(tmp_path / "r.db")
    result = promptset.run_set(Exp(cases=("m1", "m2")), PROMPTS, Engine(), store, resolve=resolve)
    paths = promptset.plot_set(promptset.set_summary(result), tmp_path / "plots")
    assert [p.name for p in paths] == ["exp-speedup-distribution.png", "exp-categories.png"]
    assert all(p.stat().st_size > 5000 for p in paths)


class VirtualTime:
    """``promptset``'s clock in these tests: it moves only when the fake server says time passed, so
    a batch's wall time (and so its aggregate throughput) is exact on a machine however loaded."""

    strftime = staticmethod(__import__("time").strftime)

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@pytest.fixture
def virtual_time(monkeypatch: pytest.MonkeyPatch) -> VirtualTime:
    from llamaspec.promptset import concurrency, measure

    clock = VirtualTime()
    for module in (concurrency, measure):  # the batches' wall time, and the ETA's
        monkeypatch.setattr(module, "time", clock)
    return clock


class Slots(Engine):
    """A server with N slots, on a virtual clock: a request's decode speed falls as slots fill, and
    the speculative server's edge shrinks with N (2x at 1 slot, 1.5x at 2, 1x at 4); N requests in
    flight share the time, so each one moves the clock by its duration over N. Like the real server,
    the first request for a prompt on a server pays its chat-template rendering (100 ms) unless
    ``prepare`` rendered it first, and the order inside a pair costs nothing. Records the order of
    the batches it served. With ``together``, the timed requests of a batch meet N at a time (a
    barrier): a batch that sent them one after another fails instead of finishing."""

    EDGE = {1: 2.0, 2: 1.5, 4: 1.0}

    def __init__(self, clock: VirtualTime | None = None, together: bool = False) -> None:
        super().__init__()
        self.clock = clock or VirtualTime()
        self.together = together
        self.rendered: set[tuple[str, int, str]] = set()
        self.order: list[tuple[int, str]] = []
        self._barriers: dict[int, threading.Barrier] = {}

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = promptset.MODES) -> None:
        for mode in modes:
            self.rendered.add((mode, case.settings.parallel or 1, case.prompt or ""))

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        n_slots = case.settings.parallel or 1
        key = (mode, n_slots, case.prompt or "")
        if key not in self.rendered:
            self.rendered.add(key)
            self.clock.advance(0.1)
        tps = 200.0 / (1 + 0.5 * (n_slots - 1)) * (self.EDGE[n_slots] if mode == "speculative" else 1.0)
        n = case.settings.n_predict or 16
        if n > 4:
            if self.together:
                self._barriers.setdefault(n_slots, threading.Barrier(n_slots)).wait(timeout=60)
            self.order.append((n_slots, mode))
        self.clock.advance(n / tps / n_slots)
        return m(mode, tps, n=n)


def test_concurrency_pairs_batches_in_abba_order_and_reports_spreads(virtual_time: VirtualTime) -> None:
    prompts = replace(PROMPTS, prompts=PROMPTS.prompts[:4])
    backend = Slots(virtual_time, together=True)
    rows = promptset.run_concurrency(Exp(), prompts, backend, [1, 2, 4], resolve=resolve, repeats=3)
    assert [r["parallel"] for r in rows] == [1, 2, 4]
    b, s = "baseline", "speculative"
    for n in (1, 2, 4):  # per level: B S, S B, B S, each batch the whole set
        served = [mode for level, mode in backend.order if level == n]
        assert served == [b] * 4 + [s] * 4 + [s] * 4 + [b] * 4 + [b] * 4 + [s] * 4
    for r in rows:
        n, edge = r["parallel"], Slots.EDGE[r["parallel"]]
        assert r["paired"] and r["pairs"] == 3 and r["unpaired"] == 0 and r["repeats"] == 3
        req = r["per_request_speedup"]
        assert req["n"] == 3 and math.isclose(req["median"], edge)  # from the decode speeds: exact
        agg = r["aggregate_speedup"]
        assert agg["n"] == 3 and agg["low"] <= agg["median"] <= agg["high"]
        # wall-time based, exact on the virtual clock: no rendering inside a batch (it would add 100 ms)
        assert agg["values"] == pytest.approx([edge] * 3, rel=1e-9), (n, agg["values"])
        for mode in (b, s):
            assert r[mode]["aggregate_tps"]["n"] == 3 and r[mode]["per_request_tps"]["n"] == 3
            for run in r[mode]["runs"]:  # tokens the batch generated over its wall time: n slots' worth
                assert run["generated"] == 4 * 16 and run["aggregate_tps"] == pytest.approx(n * run["per_request_tps"])
    # more slots: more aggregate throughput for the baseline, slower requests
    base_agg = [r[b]["aggregate_tps"]["median"] for r in rows]
    assert base_agg[0] < base_agg[1] < base_agg[2]
    assert rows[0][b]["per_request_tps"]["median"] > rows[2][b]["per_request_tps"]["median"]
    text = promptset.render_concurrency(rows)
    assert "UNPAIRED" not in text and "median of paired batch ratios" in text


def batch(mode: str, repeat: int, agg: float | None, req: float | None = None, failed: int = 0) -> Measurement:
    return promptset.batch_measurement(
        {"mode": mode, "repeat": repeat, "requests": 4, "failed": failed, "generated": 64, "wall_seconds": 1.0,
         "aggregate_tps": agg, "per_request_tps": req if req is not None else agg, "errors": ["boom"] if failed else []})


def test_level_figures_by_hand_and_a_failed_batch_leaves_its_partner_unpaired() -> None:
    batches = [batch("baseline", 0, 10.0), batch("speculative", 0, 20.0, 8.0), batch("speculative", 1, 30.0, 9.0),
               batch("baseline", 1, 10.0), batch("baseline", 2, 20.0), batch("speculative", 2, 0.5, failed=1)]
    f = promptset.level_figures(batches, slots=3, prompts=4)
    assert f["pairs"] == 2 and f["paired"] and f["unpaired"] == 1
    assert f["aggregate_speedup"]["values"] == [2.0, 3.0] and f["aggregate_speedup"]["median"] == 2.5
    assert f["per_request_speedup"]["values"] == [0.8, 0.9]
    assert f["baseline"]["aggregate_tps"]["values"] == [10.0, 10.0, 20.0]  # the lone baseline batch is kept here
    assert f["speculative"]["completed"] == 2 and f["speculative"]["failed_requests"] == 1
    assert any("last wave runs 1" in n for n in f["notes"]) and any("without a completed partner" in n for n in f["notes"])
    alone = promptset.level_figures([batch("baseline", 0, 10.0), batch("speculative", 0, None, failed=4)], 1, 4)
    assert not alone["paired"] and alone["aggregate_speedup"] is None
    row = {"case": "m1", "method": "m1 (draft)", "parallel": 1, **alone}
    assert "UNPAIRED" in promptset.render_concurrency([row])


class FailingSlots(Slots):
    """Slots whose speculative server fails every timed request from its second batch on."""

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        got = super().measure(case, mode, log_path)
        timed = [o for o in self.order if o[1] == "speculative"]
        if mode == "speculative" and (case.settings.n_predict or 16) > 4 and len(timed) > 2:  # 2 prompts a batch
            return dataclasses.replace(got, ok=False, error="slot crashed", decode_tps=None)
        return got


def test_a_failed_batch_ends_its_level_through_the_pairs_loop(virtual_time: VirtualTime) -> None:
    """Batches go through the one pairs loop: pair 1's speculative batch fails (pair 1 runs S then B),
    so its baseline batch and pair 2 are never sent; the level reports the one whole pair and why
    it stopped."""
    backend = FailingSlots(virtual_time)
    (row,) = promptset.run_concurrency(Exp(), replace(PROMPTS, prompts=PROMPTS.prompts[:2]), backend, [1],
                                       resolve=resolve, repeats=3)
    assert [mode for _n, mode in backend.order] == ["baseline"] * 2 + ["speculative"] * 4
    assert row["pairs"] == 1 and row["paired"] and row["speculative"]["batches"] == 2
    assert row["speculative"]["completed"] == 1 and row["baseline"]["batches"] == 1
    assert any(n.startswith("stopped at the first failed batch (2 of 2 requests failed: slot crashed)") for n in row["notes"])


def test_concurrency_plot_is_written(tmp_path: Path, virtual_time: VirtualTime) -> None:
    rows = promptset.run_concurrency(Exp(cases=("m1", "m2")), replace(PROMPTS, prompts=PROMPTS.prompts[:2]),
                                     Slots(virtual_time), [1, 2], resolve=resolve, repeats=1)
    (path,) = promptset.plot_concurrency(rows, tmp_path / "plots", "exp")
    assert path.name == "exp-concurrency.png" and path.stat().st_size > 5000


def test_source_of_reads_the_experiments_mapping_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "set.jsonl").write_text(json.dumps({"prompt": "x"}) + "\n")

    @dataclass(frozen=True)
    class E:
        name: str = "e"
        path: str = str(tmp_path / "e.yaml")
        prompts: Any = None

    src = promptset.source_of(E(prompts={"source": "set.jsonl", "format": "raw", "limit": 3}), limit=2)
    assert (src.kind, src.format, src.limit) == ("jsonl", "raw", 2) and src.path == str(tmp_path / "set.jsonl")
    with pytest.raises(Exception, match="names no prompt set"):
        promptset.source_of(E())


# --- the command line: `llamaspec run NAME --prompts FILE` is `llamaspec prompts run` -----------

@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch, no_provenance: None, virtual_time: VirtualTime) -> dict[str, Any]:
    """``llama-server`` replaced by the fakes above (``Slots`` for --parallel, ``Engine``
    otherwise); each case resolved from the experiment as the command line left it."""
    from llamaspec.llamacpp import server

    seen: dict[str, Any] = {"settings": [], "backends": []}

    def open_engine(_options: Any) -> Any:
        backend = Slots(virtual_time) if seen.get("slots") else Engine()
        seen["backends"].append(backend)
        return backend

    def resolve_case(exp: Any, case: Any) -> ResolvedCase:
        seen["settings"].append(case.settings)
        model = ModelPath("t:f32", "/models/t.gguf")
        draft = None if case.settings.spec_type and case.settings.spec_type != "draft" else model
        return ResolvedCase(exp.name, case.name, model, draft, None, None, case.settings)

    monkeypatch.setattr(server, "open_engine", open_engine)
    monkeypatch.setattr(promptset.runcore, "resolver", lambda _backend: resolve_case)
    return seen


def _cli(args: list[str]) -> Any:
    from click.testing import CliRunner

    from llamaspec.cli import main

    return CliRunner().invoke(main, args)


def test_run_with_prompts_takes_parallel_plot_repeats_and_json_as_prompts_run_does(
        tmp_path: Path, fake_server: dict[str, Any]) -> None:
    prompts = tmp_path / "set.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in [{"id": "c1", "category": "code", "prompt": "code one"},
                                                       {"id": "p1", "category": "prose", "prompt": "prose one"}]))
    fake_server["slots"] = True
    common = ["--parallel", "2", "--json", "-r", "1", "-n", "8", "-t", "1"]
    outputs = []
    for args in (["prompts", "run", "smollm2-server-mini", "-P", str(prompts), "--plot", str(tmp_path / "a")],
                 ["run", "smollm2-server-mini", "--prompts", str(prompts), "--plot", str(tmp_path / "b")]):
        done = _cli([*args, *common])
        assert done.exit_code == 0, done.output
        rows = json.loads(done.stdout)
        assert [(r["case"], r["parallel"], r["pairs"]) for r in rows] == [("draft-k8", 2, 1), ("ngram-simple", 2, 1)]
        outputs.append(rows)
        served = fake_server["backends"][-1].order  # one pair of batches (the 8-token requests) per case
        assert served == [(2, "baseline")] * 2 + [(2, "speculative")] * 2 + [(2, "baseline")] * 2 + [(2, "speculative")] * 2
    assert (tmp_path / "a" / "smollm2-server-mini-concurrency.png").is_file()
    assert (tmp_path / "b" / "smollm2-server-mini-concurrency.png").is_file()
    assert {(s.threads, s.n_predict) for s in fake_server["settings"]} == {(1, 8)}

    # The per-prompt run: repeats, plots and the JSON figures (decode and end to end) reach it too;
    # and every setting option of `run` (here --flash-attn), not only those `prompts run` has.
    fake_server["slots"] = False
    done = _cli(["run", "smollm2-server-mini", "--prompts", str(prompts), "--plot", str(tmp_path / "c"), "--json",
                 "-r", "2", "-n", "8", "--flash-attn", "on"])
    assert done.exit_code == 0, done.output
    figures = json.loads(done.stdout)
    assert set(figures["methods"]) == {"draft-k8 (draft t:f32, k=8)", "ngram-simple (ngram-simple, n=3, m=8)"}
    end_to_end = figures["recommendation_end_to_end"]
    assert end_to_end["basis"] == "end to end" and end_to_end["estimator"] == estimators.WORKLOAD
    assert {setup["label"] for setup in end_to_end["setups"]} == set(figures["methods"])  # both methods weighed
    assert fake_server["backends"][-1].calls == 2 * 2 * 4  # cases x prompts x (2 repeats, both modes)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["smollm2-server-mini-categories.png",
                                                                  "smollm2-server-mini-speedup-distribution.png"]
    assert fake_server["settings"][-1].flash_attn == "on"


@pytest.mark.parametrize(("args", "message"), [
    (["--prompts", "set.jsonl", "-r", "auto"], "--repeats auto is for one prompt"),
    (["--prompts", "set.jsonl", "--prompt", "hello"], "--prompt and --prompt-file replace one prompt"),
])
def test_run_with_prompts_refuses_what_a_prompt_set_cannot_take(args: list[str], message: str,
                                                                fake_server: dict[str, Any]) -> None:
    done = _cli(["run", "smollm2-server-mini", *args])
    assert done.exit_code == 2 and message in done.output and not fake_server["backends"]


def test_run_plot_without_a_prompt_set_is_a_usage_error() -> None:
    done = _cli(["run", "smollm2-quicksort", "--plot", "plots"])
    assert done.exit_code == 2 and "--plot is for prompt sets" in done.output


def test_a_prompt_stored_before_end_to_end_figures_gets_them_from_its_measurements(tmp_path: Path,
                                                                                  no_provenance: None) -> None:
    store = Store.open(tmp_path / "r.db")
    first = promptset.run_set(Exp(), PROMPTS, Engine(), store, repeats=2, resolve=resolve)
    for run in store.runs(group_id=first.cases[0].set_id):  # as an earlier version stored them
        old = {k: v for k, v in (run["summary"] or {}).items() if k not in promptset.E2E_KEYS}
        store.db.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(old), run["id"]))
    store.db.commit()
    again = Engine()
    second = promptset.run_set(Exp(), PROMPTS, again, store, repeats=2, resolve=resolve)
    assert again.calls == 1  # only t1, refused before: nothing finished is measured again
    before = {i.id: i for i in first.cases[0].items}
    for item in second.cases[0].items:
        if item.status == "ok":
            assert item == before[item.id]  # the end-to-end figures, and all the others
    code = promptset.set_statistics(second.cases[0].items).categories["code"]
    assert code.e2e_total_speedup and math.isclose(code.e2e_total_speedup.median, 1.6 / 1.15)


def test_each_category_gets_the_models_best_draft_length_from_its_own_acceptance() -> None:
    """A category that accepts more is forecast a longer best draft than one that accepts less."""
    items = [summary("h1", "code", 10.0, 25.0, drafted=80, accepted=72, rounds=10),
             summary("h2", "code", 10.0, 24.0, drafted=80, accepted=70, rounds=10),
             summary("l1", "prose", 10.0, 11.0, drafted=80, accepted=24, rounds=10),
             summary("l2", "prose", 10.0, 10.5, drafted=80, accepted=20, rounds=10)]
    cats = promptset.set_statistics(items).categories
    code, prose = cats["code"].model, cats["prose"].model
    assert code and prose and code.drafted_per_round == prose.drafted_per_round == 8.0
    assert code.alpha > prose.alpha and code.best_draft > prose.best_draft
    assert promptset.set_statistics([summary("x", "code", 10.0, 10.0, drafted=0, accepted=0, rounds=0)]).set.model is None


# --- `prompts run`'s setting options: run's, for every setting llama-server honours ---------------

def _params(command: Any) -> dict[str, Any]:
    import click

    from llamaspec.cli import CONTEXT

    # a context as the command line makes it: click keeps the first help option it was asked for (-h)
    return {p.name: p for p in command.get_params(click.Context(command, **CONTEXT)) if isinstance(p, click.Option)}


def test_prompts_run_takes_every_setting_llama_server_honours_under_runs_names() -> None:
    from llamaspec.cli import main
    from llamaspec.llamacpp import server
    from llamaspec.measure.settings import SWEEPABLE

    run, prompts_run = main.get_command(None, "run"), main.get_command(None, "prompts").get_command(None, "run")  # type: ignore[union-attr]
    theirs, ours = _params(run), _params(prompts_run)
    honoured = [s for s in SWEEPABLE if s in server.HONOURED]
    assert {"draft_max", "draft_min", "draft_p_min", "flash_attn", "ngram_size_n", "ngram_size_m", "parallel"} <= set(honoured)
    for setting in honoured:
        assert set(theirs[setting].opts) <= set(ours[setting].opts), setting  # run's names (and hidden aliases)
    assert ours["parallel"].opts == ["--parallel"]  # the same name; here a list of concurrency levels
    for setting in set(SWEEPABLE) - server.HONOURED:  # program, transformers' settings: refused by the server
        assert setting not in ours and setting in theirs, setting
    shown = _cli(["prompts", "run", "-h"]).output
    assert "--ngram-size-n" in shown and "--flash-attn" in shown and "--ngram-n " not in shown


def test_a_new_server_setting_reaches_prompts_run_from_its_flag_table_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second of the two edits (the first: a Settings field; dtype stands in for one here):
    a row in llama.cpp's flag table gives `prompts run` the option, under run's name."""
    from llamaspec.cli.options import engine_setting_options
    from llamaspec.llamacpp import flags

    before = {o.name for o in engine_setting_options(flags.takes("server"))}
    monkeypatch.setitem(flags.FLAG_TABLE, "dtype", flags.Flag(("--dtype",), flags.SERVER))
    after = {o.name: o for o in engine_setting_options(flags.takes("server"))}
    assert "dtype" not in before and set(after) - before == {"dtype"} and after["dtype"].opts == ["--dtype"]


def test_prompts_run_settings_and_old_spellings_reach_the_server(tmp_path: Path, fake_server: dict[str, Any]) -> None:
    prompts = tmp_path / "set.jsonl"
    prompts.write_text(json.dumps({"id": "c1", "category": "code", "prompt": "code one"}) + "\n")
    done = _cli(["prompts", "run", "smollm2-server-mini", "-P", str(prompts), "-r", "1", "-n", "8", "--json",
                 "--ngram-n", "2", "--ngram-size-m", "5", "--draft-min", "2", "--flash-attn", "off"])
    assert done.exit_code == 0, done.output
    got = {(s.ngram_size_n, s.ngram_size_m, s.draft_min, s.flash_attn) for s in fake_server["settings"]}
    assert got == {(2, 5, 2, "off")}
    bad = _cli(["prompts", "run", "smollm2-server-mini", "-P", str(prompts), "--ngram-n", "0"])
    assert bad.exit_code == 1 and "--ngram-size-n 0: must be at least 1" in bad.output and "Hint:" in bad.output
    assert len(fake_server["backends"]) == 1  # the bad value refused before a server was opened
