"""Throughput against concurrency (``llamaspec concurrency``) on an in-process server whose speed
depends on its slots, on a virtual clock; and what became of the prompt-set runs' other routes
(``prompts run``): one-line pointers to the workload study."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Capabilities, Measurement, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.studies import concurrency as levels
from llamaspec.studies import prompts as loader
from llamaspec.studies.experiment import Case, ModelRef
from llamaspec.studies.prompts import Prompt, PromptSet, PromptSource
from llamaspec.studies.run import resolve_case


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


class Engine:
    """The parts of a server the concurrency loop asks for; ``measure`` is the subclass's."""

    name: str = "fake"
    capabilities = Capabilities(modes=frozenset({"baseline", "speculative"}), settings=frozenset(), keeps_models_loaded=True,
                                token_ids=True, prepares=True)

    def identity(self) -> str:
        return "fake-1"

    def provenance(self) -> dict[str, Any]:
        return {"commit": "fake"}

    def check(self, case: ResolvedCase) -> None:
        pass

    def close(self) -> None:
        pass


def method(name: str, **settings: Any) -> Case:
    """A case of the experiment: a pair of models and its settings, no prompt (the set's are sent)."""
    ref = ModelRef("t", "f32")
    return Case(name, ref, ref, None, None, Settings(**{"n_predict": 16, "seed": 1, "draft_max": 4, **settings}))


@dataclass(frozen=True)
class Exp:
    name: str = "exp"
    cases: tuple[Case, ...] = (method("m1"),)
    path: str = ""


def resolve(exp: Any, case: Case) -> ResolvedCase:
    """The one resolver, its model files found at one place."""
    return resolve_case(exp, case, None, models=lambda ref: ModelPath(f"{ref.model}:{ref.variant}", "/models/t.gguf"))  # type: ignore[arg-type]


PROMPTS = PromptSet(PromptSource("jsonl", "/x.jsonl"), (
    Prompt("c1", "code one", "code"), Prompt("c2", "code two", "code"), Prompt("s1", "short", "prose"),
    Prompt("t1", "too long", "prose"), Prompt("p1", "prose one", "prose"), Prompt("p2", "prose two", "prose")))


class Recording(Engine):
    """Records every request it is sent; each generates 16 tokens at a fixed speed."""

    def __init__(self) -> None:
        self.sent: list[ResolvedCase] = []

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = levels.MODES) -> None:
        pass

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        self.sent.append(case)
        return m(mode, 100.0, n=case.settings.n_predict or 16)


def test_each_prompt_is_sent_as_its_case_with_its_earlier_turns() -> None:
    """The prompts become cases as every route makes them (prompts.workload_cases): each request
    carries its prompt's id, category, chat form and earlier turns, at the case's settings and the
    level's slots."""
    turns = (("user", "Plan a trip."), ("assistant", "Where to?"))
    prompts = replace(PROMPTS, prompts=(Prompt("t1", "To Porto.", "multi-turn", True, 4, turns),
                                        Prompt("c1", "Write a loop.", "code", False)))
    backend = Recording()
    levels.run_concurrency(Exp(), prompts, backend, [2], resolve=resolve, repeats=1)
    timed = [c for c in backend.sent if c.settings.n_predict == 16]
    assert [(c.prompt, c.prompt_id, c.category, c.chat, c.history) for c in timed[:2]] == [
        ("To Porto.", "t1", "multi-turn", True, turns), ("Write a loop.", "c1", "code", False, ())]
    assert {c.settings.parallel for c in backend.sent} == {2} and {c.settings.draft_max for c in timed} == {4}


def test_a_prompt_too_long_for_the_context_is_refused_before_any_request() -> None:
    backend = Recording()
    long = replace(PROMPTS, prompts=(Prompt("l1", "word " * 2000, "prose"),))
    with pytest.raises(LlamaspecError, match="do not fit the context of 512 tokens"):
        levels.run_concurrency(Exp(cases=(method("m1", ctx_size=512),)), long, backend, [1], resolve=resolve, repeats=1)
    assert backend.sent == []


class VirtualTime:
    """The concurrency loop's clock in these tests: it moves only when the fake server says time passed, so
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
    clock = VirtualTime()
    monkeypatch.setattr(levels, "time", clock)  # the batches' wall time
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
        self.clock = clock or VirtualTime()
        self.together = together
        self.rendered: set[tuple[str, int, str]] = set()
        self.order: list[tuple[int, str]] = []
        self._barriers: dict[int, threading.Barrier] = {}

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = levels.MODES) -> None:
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
    rows = levels.run_concurrency(Exp(), prompts, backend, [1, 2, 4], resolve=resolve, repeats=3)
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
    text = levels.render_concurrency(rows)
    assert "UNPAIRED" not in text and "median of paired batch ratios" in text


def batch(mode: str, repeat: int, agg: float | None, req: float | None = None, failed: int = 0) -> Measurement:
    return levels.batch_measurement(
        {"mode": mode, "repeat": repeat, "requests": 4, "failed": failed, "generated": 64, "wall_seconds": 1.0,
         "aggregate_tps": agg, "per_request_tps": req if req is not None else agg, "errors": ["boom"] if failed else []})


def test_level_figures_by_hand_and_a_failed_batch_leaves_its_partner_unpaired() -> None:
    batches = [batch("baseline", 0, 10.0), batch("speculative", 0, 20.0, 8.0), batch("speculative", 1, 30.0, 9.0),
               batch("baseline", 1, 10.0), batch("baseline", 2, 20.0), batch("speculative", 2, 0.5, failed=1)]
    f = levels.level_figures(batches, slots=3, prompts=4)
    assert f["pairs"] == 2 and f["paired"] and f["unpaired"] == 1
    assert f["aggregate_speedup"]["values"] == [2.0, 3.0] and f["aggregate_speedup"]["median"] == 2.5
    assert f["per_request_speedup"]["values"] == [0.8, 0.9]
    assert f["baseline"]["aggregate_tps"]["values"] == [10.0, 10.0, 20.0]  # the lone baseline batch is kept here
    assert f["speculative"]["completed"] == 2 and f["speculative"]["failed_requests"] == 1
    assert any("last wave runs 1" in n for n in f["notes"]) and any("without a completed partner" in n for n in f["notes"])
    alone = levels.level_figures([batch("baseline", 0, 10.0), batch("speculative", 0, None, failed=4)], 1, 4)
    assert not alone["paired"] and alone["aggregate_speedup"] is None
    row = {"case": "m1", "method": "m1 (draft)", "parallel": 1, **alone}
    assert "UNPAIRED" in levels.render_concurrency([row])


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
    (row,) = levels.run_concurrency(Exp(), replace(PROMPTS, prompts=PROMPTS.prompts[:2]), backend, [1],
                                       resolve=resolve, repeats=3)
    assert [mode for _n, mode in backend.order] == ["baseline"] * 2 + ["speculative"] * 4
    assert row["pairs"] == 1 and row["paired"] and row["speculative"]["batches"] == 2
    assert row["speculative"]["completed"] == 1 and row["baseline"]["batches"] == 1
    assert any(n.startswith("stopped at the first failed batch (2 of 2 requests failed: slot crashed)") for n in row["notes"])


def test_concurrency_plot_is_written(tmp_path: Path, virtual_time: VirtualTime) -> None:
    rows = levels.run_concurrency(Exp(cases=(method("m1"), method("m2"))), replace(PROMPTS, prompts=PROMPTS.prompts[:2]),
                                     Slots(virtual_time), [1, 2], resolve=resolve, repeats=1)
    from llamaspec.views.concurrency import plot_concurrency

    (path,) = plot_concurrency(rows, tmp_path / "plots", "exp")
    assert path.name == "exp-concurrency.png" and path.stat().st_size > 5000


def test_source_of_reads_the_experiments_mapping_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "set.jsonl").write_text(json.dumps({"prompt": "x"}) + "\n")

    @dataclass(frozen=True)
    class E:
        name: str = "e"
        path: str = str(tmp_path / "e.yaml")
        prompts: Any = None

    src = loader.source_of(E(prompts={"source": "set.jsonl", "format": "raw", "limit": 3}), limit=2)
    assert (src.kind, src.format, src.limit) == ("jsonl", "raw", 2) and src.path == str(tmp_path / "set.jsonl")
    with pytest.raises(Exception, match="names no prompt set"):
        loader.source_of(E())


# --- the command line ------------------------------------------------------------------------------

@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch, virtual_time: VirtualTime) -> dict[str, Any]:
    """``llama-server`` replaced by ``Slots``; each case resolved from the experiment as the command
    line left it (its settings recorded)."""
    from llamaspec.llamacpp import server

    seen: dict[str, Any] = {"settings": [], "backends": []}

    def open_engine(_options: Any) -> Any:
        backend = Slots(virtual_time)
        seen["backends"].append(backend)
        return backend

    def resolve_case(exp: Any, case: Any) -> ResolvedCase:
        seen["settings"].append(case.settings)
        model = ModelPath("t:f32", "/models/t.gguf")
        draft = None if case.settings.spec_type and case.settings.spec_type != "draft" else model
        return ResolvedCase(exp.name, case.name, model, draft, None, None, case.settings)

    monkeypatch.setattr(server, "open_engine", open_engine)
    monkeypatch.setattr(levels, "resolver", lambda _backend: resolve_case)
    return seen


def _cli(args: list[str]) -> Any:
    from click.testing import CliRunner

    from llamaspec.cli import main

    return CliRunner().invoke(main, args)


def test_the_concurrency_command_measures_each_case_at_each_level_with_its_settings(
        tmp_path: Path, fake_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMASPEC_DATA", str(tmp_path / "data"))
    prompts = tmp_path / "set.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in [{"id": "c1", "category": "code", "prompt": "code one"},
                                                       {"id": "p1", "category": "prose", "prompt": "prose one"}]))
    done = _cli(["concurrency", "smollm2-server-mini", "-P", str(prompts), "--levels", "2", "--json", "--batch-pairs", "1",
                 "-n", "8", "-t", "1", "--ngram-size-n", "2", "--flash-attn", "off"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)  # JSON alone on stdout: the plot's path goes to stderr
    assert [(r["case"], r["parallel"], r["pairs"]) for r in rows] == [("draft-k8", 2, 1), ("ngram-simple", 2, 1)]
    served = fake_server["backends"][-1].order  # one pair of batches (the 8-token requests) per case
    assert served == [(2, "baseline")] * 2 + [(2, "speculative")] * 2 + [(2, "baseline")] * 2 + [(2, "speculative")] * 2
    assert (tmp_path / "data" / "plots" / "concurrency" / "smollm2-server-mini-concurrency.png").is_file()
    assert {(s.threads, s.n_predict, s.ngram_size_n, s.flash_attn) for s in fake_server["settings"]} == {(1, 8, 2, "off")}
    bad = _cli(["concurrency", "smollm2-server-mini", "-P", str(prompts), "--ngram-size-n", "0"])
    assert bad.exit_code == 1 and "--ngram-size-n 0: must be at least 1" in bad.output and "Hint:" in bad.output
    assert len(fake_server["backends"]) == 1  # the bad value refused before a server was opened
    levels_bad = _cli(["concurrency", "smollm2-server-mini", "--levels", "0,2"])
    assert levels_bad.exit_code == 2 and "slot counts must be at least 1" in levels_bad.output


def _params(command: Any) -> dict[str, Any]:
    import click

    from llamaspec.cli import CONTEXT

    # a context as the command line makes it: click keeps the first help option it was asked for (-h)
    return {p.name: p for p in command.get_params(click.Context(command, **CONTEXT)) if isinstance(p, click.Option)}


def test_concurrency_takes_every_setting_llama_server_honours_under_runs_names() -> None:
    from llamaspec.cli import main
    from llamaspec.llamacpp import server
    from llamaspec.measure.settings import SWEEPABLE

    run, ours_cmd = main.get_command(None, "run"), main.get_command(None, "concurrency")  # type: ignore[arg-type]
    theirs, ours = _params(run), _params(ours_cmd)
    honoured = [s for s in SWEEPABLE if s in server.HONOURED]
    assert {"draft_max", "draft_min", "draft_p_min", "flash_attn", "ngram_size_n", "ngram_size_m", "parallel"} <= set(honoured)
    for setting in honoured:
        if setting != "parallel":  # the levels set it
            assert theirs[setting].opts == ours[setting].opts, setting  # run's names
    assert "parallel" not in ours
    for setting in set(SWEEPABLE) - server.HONOURED:  # program, transformers' settings: refused by the server
        assert setting not in ours and setting in theirs, setting
    shown = _cli(["concurrency", "-h"]).output
    assert "--ngram-size-n" in shown and "--flash-attn" in shown


def test_a_new_server_setting_reaches_concurrency_from_its_flag_table_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second of the two edits (the first: a Settings field; dtype stands in for one here):
    a row in llama.cpp's flag table gives `concurrency` the option, under run's name."""
    from llamaspec.cli.options import engine_setting_options
    from llamaspec.llamacpp import flags

    before = {o.name for o in engine_setting_options(flags.takes("server"))}
    monkeypatch.setitem(flags.FLAG_TABLE, "dtype", flags.Flag(("--dtype",), flags.SERVER))
    after = {o.name: o for o in engine_setting_options(flags.takes("server"))}
    assert "dtype" not in before and set(after) - before == {"dtype"} and after["dtype"].opts == ["--dtype"]


@pytest.mark.parametrize(("args", "first"), [
    (["prompts", "run", "smollm2-server-mini", "--limit", "2"], "Error: `llamaspec prompts run` is now `llamaspec sweep NAME`"),
    (["run", "smollm2-server-mini"], "Error: smollm2-server-mini is measured over a prompt set: that is a workload study"),
])
def test_the_prompt_set_runs_other_routes_are_one_line_pointers(args: list[str], first: str) -> None:
    done = _cli(args)
    # the log may say first which experiment file was read (INFO, where no other test has set the level)
    lines = [line for line in done.output.splitlines() if line.strip() and not line.startswith("experiment ")]
    assert done.exit_code == 1 and lines[0].startswith(first) and lines[1].startswith("Hint: "), done.output
    assert len(lines) == 2, done.output
