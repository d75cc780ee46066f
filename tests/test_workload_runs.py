"""Stored runs as a workload (llamaspec.decision.workload_runs): which prompt and which setup each run
measured, its cell, and the one decision over them. Run rows are shaped as ``Store.runs`` returns
them; their summaries come from the run core's own ``summarize`` over measurements."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from llamaspec.decision import workload
from llamaspec.decision.workload_runs import RunSetup, cost, workload_of_runs
from llamaspec.measure import estimators
from llamaspec.measure.contract import Measurement
from llamaspec.measure.summary import summarize


def summary(ratios: list[float], differs: bool = False, blocks: bool = False) -> dict[str, Any]:
    """A point's summary from pairs whose speculative speed is ``ratio`` times its baseline's
    (``blocks``: each speculative run at place 1 of a block of its own, B S B, on a machine that
    drifts 2 % a run, its baselines kept apart as a study keeps them)."""
    ms, bases = [], []
    for i, r in enumerate(ratios):
        base = 50.0 * (1 + 0.01 * i)  # the baseline drifts: the ratios are the pairs', not the speeds'
        block = f"s/p/{i}" if blocks else None
        before = Measurement(mode="baseline", ok=True, error=None, argv=("x",), exit_code=0, wall_seconds=1.0,
                             peak_rss_bytes=None, n_prompt=4, n_predict=32, decode_tps=base, text="same",
                             pair=0 if blocks else i, block=block)
        spec = Measurement(mode="speculative", ok=True, error=None, argv=("x",), exit_code=0, wall_seconds=1.0,
                           peak_rss_bytes=None, n_prompt=4, n_predict=32, decode_tps=base * 1.04 ** 0.5 * r,
                           text="other" if differs else "same", pair=1 if blocks else i, block=block)
        if blocks:  # the machine drifts 2 % a run: the speculative run is over the two baselines at its place
            after = dataclasses.replace(before, decode_tps=base * 1.04, pair=2)
            ms.append(spec)
            bases += [before, after]
        else:
            ms += [before, dataclasses.replace(spec, decode_tps=base * r)]
    return summarize(ms, bases).to_dict()


def row(i: int, prompt: str, ratios: list[float], status: str = "ok", category: str | None = None,
        draft: str | None = "smollm2-135m:q4_1", **settings: Any) -> dict[str, Any]:
    s = summary(ratios, differs=status == "differs") if status in ("ok", "differs") else {"status": status}
    return {"id": i, "case_name": prompt, "prompt_id": None, "category": category, "status": status,
            "error": "boom" if status == "failed" else None, "draft": draft,
            "settings": {"spec_type": "draft", "draft_max": 8, "threads": 1, "n_predict": 32, **settings},
            "provenance": {"models": {"draft": {"label": draft, "metadata": {"size_bytes": 1000}}}} if draft else {},
            "summary": s}


def by_length(run: dict[str, Any]) -> RunSetup:
    """The setup a study names: here its draft length."""
    k = run["settings"]["draft_max"]
    return RunSetup(k, f"draft {k}", cost(False, k))


def test_cells_take_each_runs_pairs_and_how_it_ended() -> None:
    runs = [row(1, "code", [1.5, 1.6], category="code"), row(2, "chat", [1.2], status="failed", category="chat"),
            row(3, "chat", [1.3, 1.25], category="chat"),  # the rerun after the failure counts
            row(4, "code", [1.9], draft_max=4, status="differs"), row(5, "chat", [1.1], draft_max=4),
            {**row(6, "chat", [2.0], draft_max=4), "status": "running"},  # still measuring: nothing to decide on
            row(7, "code", [1.2], draft_max=2, status="failed"), row(8, "chat", [1.2, 1.3], draft_max=2)]
    cells, prompts = workload_of_runs(runs, by_length)
    assert prompts == {"code": "code", "chat": "chat"}
    by = {(c.prompt, c.label): c for c in cells}
    assert len(cells) == 6
    assert by[("code", "draft 8")].ratios == pytest.approx((1.5, 1.6)) and by[("code", "draft 8")].status == workload.OK
    assert by[("chat", "draft 8")].ratios == pytest.approx((1.3, 1.25))
    assert by[("code", "draft 4")].status == workload.DIFFERS and "DIFFERS at char 0" in (by[("code", "draft 4")].why or "")
    assert by[("chat", "draft 4")].ratios == pytest.approx((1.1,))
    assert by[("code", "draft 2")].status == "failed" and by[("code", "draft 2")].why == "boom"
    d = workload.decide_workload(cells, prompts, over_prompts=False)  # the two prompts are the workload
    excluded = {s.label: s.excluded for s in d.setups}
    assert excluded == {"draft 8": None, "draft 4": "output differs on code", "draft 2": "failed on code (boom)"}
    assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == "draft 8"
    # speculative runs in blocks (a workload study's cells): each ratio over its own block's baselines,
    # interpolated at its place, and counts
    blocked = {**row(9, "code", [1.5, 1.6]), "summary": summary([1.5, 1.6], blocks=True)}
    assert blocked["summary"]["paired"] and blocked["summary"]["estimator"] == estimators.BLOCK
    (cell,), _ = workload_of_runs([blocked], by_length)
    assert cell.ratios == pytest.approx((1.5, 1.6)) and cell.status == workload.OK
    # speculative runs with no baseline of their own pair or block: no ratio of runs measured apart counts
    spec = [Measurement(mode="speculative", ok=True, error=None, argv=("x",), exit_code=0, wall_seconds=1.0,
                        peak_rss_bytes=None, n_prompt=4, n_predict=32, decode_tps=75.0 + i, text="same") for i in range(2)]
    base = Measurement(mode="baseline", ok=True, error=None, argv=("x",), exit_code=0, wall_seconds=1.0,
                       peak_rss_bytes=None, n_prompt=4, n_predict=32, decode_tps=50.0, text="same")
    apart = {**row(10, "code", [1.5]), "summary": summarize([*spec, base]).to_dict()}
    assert apart["summary"]["status"] == "failed" and apart["summary"]["speedup"] is None
    (cell,), _ = workload_of_runs([apart], by_length)
    assert cell.ratios == () and cell.status == "failed"
    # a study's block baselines (their own run) are no setup of the workload
    assert workload_of_runs([{**row(11, "code", [1.5]), "kind": "baselines"}], by_length) == ([], {})


def test_the_workloads_prompts_keep_their_category_and_order() -> None:
    runs = [{**row(2, "b", [1.1]), "prompt_id": "p-b", "category": "chat"}, {**row(1, "a", [1.2]), "category": None}]
    _cells, prompts = workload_of_runs(runs, by_length)
    assert list(prompts.items()) == [("a", "a"), ("p-b", "chat")]  # by when first measured; a case is its own category


def timed_summary(decode: list[float], prompt_ms: tuple[float, float] | None) -> dict[str, Any]:
    """Pairs whose speculative decode speed is ``decode`` times the baseline's; with ``prompt_ms``
    (baseline, speculative), each side's prompt timed apart as llama-server times it."""
    ms = []
    for i, r in enumerate(decode):
        for mode, tps in (("baseline", 50.0), ("speculative", 50.0 * r)):
            timed = {"prompt_ms": prompt_ms[mode == "speculative"], "generation_ms": 1000.0 * 31 / tps} if prompt_ms else {}
            ms.append(Measurement(mode=mode, ok=True, error=None, argv=("x",), exit_code=0, wall_seconds=1.0,
                                  peak_rss_bytes=None, n_prompt=4, n_predict=32, decode_tps=tps, text="same", pair=i,
                                  **timed))
    return summarize(ms).to_dict()


def test_end_to_end_is_the_same_pairs_with_the_prompt_included_shown_beside_the_decision() -> None:
    """Decode 1.5x, but the speculative server takes 400 ms over a prompt the target alone reads in
    100 ms: end to end, (100 + 620) / (400 + 413.3) = 0.885x. Its figure is the same estimator over
    the same pairs, shown beside the answer and never deciding; a setup one of whose timed prompts
    has no prompt timing (the command-line programs) gets none rather than one over fewer prompts."""
    one = timed_summary([1.5, 1.5], (100.0, 400.0))
    assert one["end_to_end"]["median"] == pytest.approx((100 + 620) / (400 + 620 / 1.5))
    assert timed_summary([1.5], None)["end_to_end"] is None
    runs = [row(1, "code", [1.5]) | {"summary": one}, row(2, "chat", [1.5]) | {"summary": timed_summary([1.4, 1.5], (100.0, 400.0))},
            row(3, "code", [1.2], draft_max=4) | {"summary": timed_summary([1.2, 1.2], (100.0, 130.0))},
            row(4, "chat", [1.2], draft_max=4) | {"summary": timed_summary([1.2, 1.25], None)}]
    cells, prompts = workload_of_runs(runs, by_length)
    d = workload.decide_workload(cells, prompts, over_prompts=False)
    by = {s.label: s for s in d.setups}
    assert by["draft 8"].speedup is not None and by["draft 8"].speedup.median > 1.4
    assert by["draft 8"].end_to_end is not None and by["draft 8"].end_to_end.median < 1.0  # slower, end to end
    assert by["draft 4"].end_to_end is None  # chat's pairs were not timed end to end
    assert d.decision.chosen is not None and d.decision.chosen.label == "draft 8"  # decode decides
    line = next(line for line in d.lines() if line.startswith("  end to end"))
    assert "draft 8 0.8" in line and "draft 4" not in line
    shown = {s["label"]: s["end_to_end"] for s in d.to_dict()["setups"]}  # --json says the same
    assert shown["draft 8"] is not None and shown["draft 8"]["median"] < 1.0 and shown["draft 4"] is None
