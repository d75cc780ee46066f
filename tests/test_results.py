"""The results store: round trip, exports, migrations (also by processes racing on a new store),
interrupted runs, locked and damaged databases."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Measurement
from llamaspec.store.results import INTERRUPTED, Store
from llamaspec.store.rows import Group, MeasurementRow
from llamaspec.store.schema import MIGRATIONS

ROOT = Path(__file__).resolve().parent.parent

PROVENANCE = {"engine": {"name": "llama.cpp", "version": "0c1e570", "accel": "cpu"},
              "models": {"target": {"label": "smollm2-135m:f16"}, "draft": {"label": "smollm2-135m:q4_0"}}}


def row(run_id: int, mode: str, **kw) -> MeasurementRow:
    base: dict[str, Any] = dict(run_id=run_id, mode=mode, repeat=0, ok=True, error=None, argv=["llama-speculative", "-m", "x"],
                exit_code=0, wall_seconds=1.5, peak_rss_bytes=123, n_prompt=12, n_predict=64, encode_tps=100.0,
                decode_tps=30.0, n_drafted=70, n_accept=40, acceptance=0.57143, text="def f():", stats={"a": 1}, log_path="/x.log")
    base.update(kw)
    return MeasurementRow(**base)


def test_round_trip_and_exports(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    run_id = store.start_run(experiment="e", case_name="c", settings={"draft_max": 4}, provenance=PROVENANCE)
    store.add_measurement(row(run_id, "baseline", n_drafted=None, n_accept=None, acceptance=None, baseline_key="k1"))
    store.add_measurement(row(run_id, "speculative"))
    store.finish_run(run_id, "ok", {"speedup": {"median": 1.1}})
    got = store.run(run_id)
    assert got["status"] == "ok" and got["draft_max"] == 4 and got["engine_version"] == "0c1e570"
    assert got["target"] == "smollm2-135m:f16" and got["summary"]["speedup"]["median"] == 1.1
    ms = store.measurements(run_id)
    assert [m["mode"] for m in ms] == ["baseline", "speculative"]
    assert ms[1]["argv"] == ["llama-speculative", "-m", "x"] and ms[1]["ok"] is True
    assert [m["mode"] for m in store.shared("k1")] == ["baseline"]
    exported = json.loads(store.export(as_json=True))
    assert exported[0]["measurements"][1]["n_accept"] == 40
    table = list(csv.DictReader(io.StringIO(store.export())))
    assert len(table) == 2 and table[1]["decode_tps"] == "30.0" and table[1]["experiment"] == "e"


def test_failed_runs_are_stored_with_their_error(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    run_id = store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE)
    store.add_measurement(row(run_id, "speculative", ok=False, error="llama-speculative was killed by SIGKILL", exit_code=-9))
    store.finish_run(run_id, "failed", {}, "llama-speculative was killed by SIGKILL")
    assert store.runs(status="failed")[0]["error"] == "llama-speculative was killed by SIGKILL"


def test_migrations_are_applied_once_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    Store.open(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    db.close()
    Store.open(path).close()  # reopening does not re-run them


def test_store_from_a_newer_llamaspec_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    db.close()
    with pytest.raises(LlamaspecError, match="newer llamaspec"):
        Store.open(path)


def test_damaged_store_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(LlamaspecError, match="is damaged") as err:
        Store.open(path)
    assert "mv " in (err.value.hint or "")


def test_locked_store_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store = Store.open(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        store.db.execute("PRAGMA busy_timeout = 100")
        with pytest.raises(LlamaspecError, match="locked by another process"):
            store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE)
    finally:
        other.execute("ROLLBACK")


def test_full_disk_while_storing_is_one_clear_error(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    run_id = store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE)
    store.db.execute("PRAGMA max_page_count = 1")  # the database cannot grow: as on a full disk
    with pytest.raises(LlamaspecError, match="no space left to write the results store") as err:
        store.add_measurement(row(run_id, "speculative", text="x" * 100_000))
    assert "intact" in (err.value.hint or "")
    assert store.run(run_id)["status"] == "running"  # what was stored before is still there


def test_new_counters_and_run_fields_round_trip(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    served = {**PROVENANCE, "engine": {**PROVENANCE["engine"], "name": "llama-server"}}
    run_id = store.start_run(experiment="e", case_name="c", settings={}, provenance=served, kind="prompt",
                             group=Group("sweep", "s1"), point_key="p1", prompt_id="q7", category="code", machine="node-2")
    m = Measurement(mode="speculative", ok=True, error=None, argv=("llama-server",), exit_code=None, wall_seconds=2.0,
                    peak_rss_bytes=None, n_predict=5, decode_tps=31.5, speed_basis="server timings", n_drafted=8,
                    n_accept=4, rounds=3, drafted_rounds=2, draft_len=4, draft_policy="capped", text="a b", tokens=(5, 6, 7, 8, 9),
                    end_of_text=True)
    store.add_measurement(MeasurementRow.of(m, run_id=run_id, repeat=2, baseline_key="k"))
    store.add_measurement(row(run_id, "baseline"))  # a caller that knows nothing of the new fields
    got = store.run(run_id)
    assert (got["pid"], got["host"]) == (os.getpid(), socket.gethostname())
    assert got["proc_start"] == pytest.approx(__import__("psutil").Process().create_time(), abs=1)
    assert (got["kind"], got["prompt_id"], got["category"], got["machine"], got["engine"]) == (
        "prompt", "q7", "code", "node-2", "llama-server")
    spec, base = store.measurements(run_id)
    assert spec["tokens"] == [5, 6, 7, 8, 9] and spec["end_of_text"] is True and spec["repeat"] == 2
    assert (spec["speed_basis"], spec["rounds"], spec["drafted_rounds"], spec["draft_len"], spec["draft_policy"]) == (
        "server timings", 3, 2, 4, "capped")
    assert base["tokens"] is None and base["end_of_text"] is False and base["rounds"] is None
    assert json.loads(store.export(as_json=True))[0]["measurements"][0]["tokens"] == [5, 6, 7, 8, 9]
    table = list(csv.DictReader(io.StringIO(store.export())))
    assert "tokens" not in table[0] and "text" not in table[0]
    assert table[0]["rounds"] == "3" and table[0]["draft_policy"] == "capped" and table[0]["prompt_id"] == "q7"


def test_runs_filter_by_kind_and_prompt(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    ids = {}
    for prompt in ("a", "b"):
        for point in ("p1", "p2"):
            ids[point, prompt] = store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE,
                                                 kind="sweep", group=Group("sweep", "s"), point_key=point,
                                                 prompt_id=prompt)
    base = store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE, kind="sweep-baseline",
                           group=Group("sweep", "s"))
    assert [r["id"] for r in store.runs(kind="sweep-baseline")] == [base]
    assert {r["id"] for r in store.runs(group_id="s", prompt_id="a")} == {ids["p1", "a"], ids["p2", "a"]}
    assert store.runs(kind="run") == []



def test_blocks_begun_counts_the_blocks_under_a_prefix_by_the_index(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    run_id = store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE)
    blocks = ["s1/c_1/0", "s1/c_1/0", "s1/c_1/1", "s1/c_1/10", "s1/c_1", "s1/c_10/0", "s1/cx1/0", "s1/c%1/0", "S1/c_1/2",
              "s1/c_1/\u00e9"]
    for block in blocks:
        store.add_measurement(row(run_id, "baseline", block=block))
    store.add_measurement(row(run_id, "speculative", ok=False, block="s1/c_1/3"))  # begun, never finished
    store.add_measurement(row(run_id, "baseline"))  # no block
    # "_" and "%" are plain characters, case counts, and a name that only begins like the prefix is not under it
    seen: list[str] = []
    store.db.set_trace_callback(seen.append)  # the statement as run, its arguments in place
    assert store.blocks_begun("s1/c_1/") == 5
    store.db.set_trace_callback(None)
    assert store.blocks_begun("s1/c%1/") == 1 and store.blocks_begun("s1/c_") == 7 and store.blocks_begun("s2/") == 0
    plan = [r["detail"] for r in store.db.execute(f"EXPLAIN QUERY PLAN {seen[-1]}")]
    assert any("INDEX measurements_by_block (block>? AND block<?)" in d for d in plan), plan

CHILD_RUN = """
import sys, time
from pathlib import Path
from llamaspec.store.results import Store
store = Store.open(Path(sys.argv[1]))
print(store.start_run(experiment="e", case_name="c", settings={}, provenance={}), flush=True)
time.sleep(120)
"""


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_killed_run_becomes_interrupted_when_read(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    child = subprocess.Popen([sys.executable, "-c", CHILD_RUN, str(path)], stdout=subprocess.PIPE, text=True,
                             env=child_env())
    try:
        assert child.stdout is not None
        run_id = int(child.stdout.readline())
        store = Store.open(path)
        assert store.run(run_id)["status"] == "running"  # its process is alive
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another writer busy for long: the runs are still listed, unmarked
    try:
        assert store.run(run_id)["status"] == "running"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    got = store.run(run_id)
    assert got["status"] == "interrupted" and got["error"] == INTERRUPTED and got["finished_at"]
    assert store.runs(status="running") == []


def test_only_runs_of_this_host_whose_process_is_gone_are_interrupted(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    mine, reused, remote = (store.start_run(experiment="e", case_name=c, settings={}, provenance=PROVENANCE)
                            for c in ("mine", "reused", "remote"))
    with store.transaction() as db:  # the pid now belongs to a process started later; a run of another host
        db.execute("UPDATE runs SET proc_start = proc_start - 1000 WHERE id = ?", (reused,))
        db.execute("UPDATE runs SET host = 'elsewhere', pid = 999999 WHERE id = ?", (remote,))
    assert store.mark_stale_running() == 1
    status = {r["case_name"]: r["status"] for r in store.runs()}
    assert status == {"mine": "running", "reused": "interrupted", "remote": "running"}
    store.finish_run(mine, "ok", {})
    assert store.run(mine)["status"] == "ok"


def test_an_older_store_is_migrated_and_its_rows_still_read(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    for number, script in enumerate(MIGRATIONS[:2], start=1):
        db.executescript(script)
        db.execute(f"PRAGMA user_version = {number}")
    db.execute("INSERT INTO runs (experiment, case_name, status, started_at, settings, provenance)"
               " VALUES ('e', 'old', 'running', 'then', '{}', '{}')")
    db.execute("INSERT INTO measurements (run_id, mode, repeat, ok, argv, created_at) VALUES (1, 'baseline', 0, 1, '[]', 'then')")
    db.close()
    store = Store.open(path)
    (old,) = store.runs()
    assert old["status"] == "interrupted" and "older llamaspec" in old["error"] and old["pid"] is None
    (m,) = store.measurements(1)
    assert m["tokens"] is None and m["end_of_text"] is None and m["ok"] is True


def _open_in_step(barrier, folder: str, rounds: int, failures) -> None:
    for k in range(rounds):
        barrier.wait(timeout=60)
        try:
            Store.open(Path(folder) / f"{k}.sqlite").close()
        except LlamaspecError as exc:
            failures.put(f"round {k}: {exc}")


@pytest.mark.slow
def test_processes_creating_a_new_store_at_once_all_succeed(tmp_path: Path) -> None:
    # Fresh interpreters (spawn) that open the same new store at the same moment, round after round.
    ctx = multiprocessing.get_context("spawn")
    workers, rounds = 3, 40
    barrier, failures = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_open_in_step, args=(barrier, str(tmp_path), rounds, failures)) for _ in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert errors == []
    assert [p.exitcode for p in procs] == [0] * workers
    for k in range(rounds):
        db = sqlite3.connect(tmp_path / f"{k}.sqlite")
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        db.close()


def test_random_bytes_are_called_damaged(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    path.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(LlamaspecError, match="is damaged") as err:
        Store.open(path)
    assert "mv " in (err.value.hint or "")


def test_a_truncated_store_is_called_damaged(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store = Store.open(path)
    for i in range(50):
        run_id = store.start_run(experiment="e", case_name=f"c{i}", settings={}, provenance=PROVENANCE)
        store.add_measurement(row(run_id, "speculative", text="x" * 4000))
    store.close()  # the last connection checkpoints the WAL into the file
    size = path.stat().st_size
    assert size > 200_000
    with path.open("r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(LlamaspecError, match="is damaged"):
        Store.open(path).runs()


def test_an_error_in_a_sound_file_is_not_called_damaged(tmp_path: Path) -> None:
    # A sound database where migration 1 cannot run (a table of that name already there): the
    # file passes SQLite's check, so the message says what failed instead of "move it aside".
    path = tmp_path / "r.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (x)")
    db.close()
    with pytest.raises(LlamaspecError, match="table runs already exists") as err:
        Store.open(path)
    assert "damaged" not in str(err.value) and "passes SQLite's check" in str(err.value)


@pytest.mark.parametrize("migrated", [False, True])
def test_a_store_locked_for_long_says_locked(tmp_path: Path, migrated: bool) -> None:
    path = tmp_path / "r.sqlite"
    if migrated:  # a WAL store that still needs a migration: readers pass, the migration waits
        Store.open(path).close()
        db = sqlite3.connect(path)
        db.execute("PRAGMA user_version = 2")
        db.close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        start = time.monotonic()
        with pytest.raises(LlamaspecError, match="is locked by another process") as err:
            Store.open(path, timeout=0.5)
        assert time.monotonic() - start >= 0.4  # it waited before giving up
        assert "damaged" not in str(err.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    if migrated:  # the columns of migration 3 are there: only the recorded version was turned back
        db = sqlite3.connect(path)
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        db.close()
    Store.open(path, timeout=0.5).close()  # free again: it opens


def test_the_accelerator_column_is_renamed_in_an_old_store(tmp_path) -> None:
    # Stores written before migration 4 named the accelerator "backend"; the row keeps its value.
    import sqlite3

    from llamaspec.store import schema

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    for script in schema.MIGRATIONS[:3]:
        db.executescript(script)
    db.execute("PRAGMA user_version = 3")
    db.execute("INSERT INTO runs (experiment, case_name, status, started_at, backend, settings, provenance)"
               " VALUES ('e', 'c', 'ok', 'now', 'cuda', '{}', '{}')")
    db.commit()
    db.close()
    (run,) = Store.open(path).runs()
    assert run["accel"] == "cuda" and "backend" not in run


def _store_before(path: Path, marker: str) -> sqlite3.Connection:
    """A store at the schema just before the migration containing ``marker``: every earlier one applied."""
    before = next(i for i, m in enumerate(MIGRATIONS) if marker in m)
    db = sqlite3.connect(path)
    for script in MIGRATIONS[:before]:
        db.executescript(script)
    db.execute(f"PRAGMA user_version = {before}")
    return db


def test_the_engine_columns_are_renamed_in_an_old_store(tmp_path: Path) -> None:
    # A store at the schema before the engine's columns were renamed (every migration up to that
    # one applied): llamacpp_commit becomes engine_version and backend_name engine, values kept; a
    # row stored before the engine had a column takes its name from the provenance, or is llama.cpp's.
    from llamaspec.store import rows

    path = tmp_path / "old.sqlite"
    db = _store_before(path, "RENAME COLUMN llamacpp_commit")
    old = "INSERT INTO runs (experiment, case_name, status, started_at, settings, provenance, llamacpp_commit, backend_name)"
    db.execute(old + " VALUES ('e', 'server', 'ok', 'then', '{}', ?, '0c1e570', 'llama-server')",
               (json.dumps({"engine": {"commit": "0c1e570", "accel": "cpu"}, "backend": "llama-server"}),))
    db.execute(old + " VALUES ('e', 'hf', 'ok', 'then', '{}', ?, NULL, NULL)",
               (json.dumps({"engine": {"versions": {"transformers": "4.57.1"}}, "backend": "transformers",
                            "identity": "transformers 4.57.1 torch 2.9.0 cpu"}),))
    db.execute(old + " VALUES ('e', 'ancient', 'ok', 'then', '{}', ?, 'b1240', NULL)",
               (json.dumps({"llamacpp": {"commit": "b1240", "backend": "metal"}}),))
    db.commit()
    db.close()
    runs = {r["case_name"]: r for r in Store.open(path).runs()}
    assert all("llamacpp_commit" not in r and "backend_name" not in r for r in runs.values())
    assert (runs["server"]["engine"], runs["server"]["engine_version"]) == ("llama-server", "0c1e570")
    assert (runs["hf"]["engine"], runs["hf"]["engine_version"]) == ("transformers", None)
    assert (runs["ancient"]["engine"], runs["ancient"]["engine_version"]) == ("llama.cpp", "b1240")
    # how the old provenance reads: the engine's name, and whether it was built from a source tree
    assert rows.engine_of(runs["server"]["provenance"])["name"] == "llama-server"
    assert rows.engine_of(runs["ancient"]["provenance"])["commit"] == "b1240"
    assert [rows.built_from(runs[c]) for c in ("server", "hf", "ancient")] == ["llama.cpp", None, "llama.cpp"]


def test_a_new_run_stores_its_engine_from_the_provenance(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    hf = {"engine": {"name": "transformers", "built_from": None, "version": "4.57.1", "accel": "cpu"}}
    run = store.run(store.start_run(experiment="e", case_name="c", settings={}, provenance=hf))
    assert (run["engine"], run["engine_version"], run["accel"]) == ("transformers", "4.57.1", "cpu")
    from llamaspec.store.rows import built_from

    assert built_from(run) is None  # a version, but no source tree: known by its identity


def test_the_group_column_is_renamed_and_its_kind_read_in_an_old_store(tmp_path: Path) -> None:
    # A store at the schema before sweep_id became group_id (every migration up to that one
    # applied): each row keeps its id, and its group's kind is read from where the row came from.
    path = tmp_path / "old.sqlite"
    db = _store_before(path, "RENAME COLUMN sweep_id")
    rows = [("sweep point", "sweep", "smollm2-quicksort-0123456789"), ("tune point", "sweep", "tune-e-0123456789"),
            ("draft timing", "draft-timing", "tune-e-0123456789"), ("prompt", "promptset", "set-0123456789abcdef"),
            ("study item", "cluster", "cluster-e-0123456789"), ("study tune", "cluster-tune", "cluster-e-9876543210"),
            ("tune on a machine", "sweep", "tune-e-0123456789@box-1"), ("plain run", "run", None)]
    for case, kind, sweep_id in rows:
        db.execute("INSERT INTO runs (experiment, case_name, kind, sweep_id, status, started_at, settings, provenance)"
                   " VALUES ('e', ?, ?, ?, 'ok', 'then', '{}', '{}')", (case, kind, sweep_id))
    db.commit()
    db.close()
    store = Store.open(path)
    got = {r["case_name"]: (r["group_kind"], r["group_id"]) for r in store.runs()}
    assert "sweep_id" not in store.runs()[0]
    assert got == {"sweep point": ("sweep", "smollm2-quicksort-0123456789"), "tune point": ("tune", "tune-e-0123456789"),
                   "draft timing": ("tune", "tune-e-0123456789"), "prompt": ("promptset", "set-0123456789abcdef"),
                   "study item": ("study", "cluster-e-0123456789"), "study tune": ("study", "cluster-e-9876543210"),
                   "tune on a machine": ("tune", "tune-e-0123456789@box-1"), "plain run": (None, None)}
    assert [r["case_name"] for r in store.runs(group_id="tune-e-0123456789")] == ["draft timing", "tune point"]


def test_a_group_has_one_of_the_known_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not one of sweep, tune, promptset, study"):
        Group("sweep-baseline", "s")
    store = Store.open(tmp_path / "r.sqlite")
    run = store.run(store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE,
                                    group=Group("tune", "tune-e-1"), point_key="k"))
    assert (run["group_kind"], run["group_id"], run["point_key"]) == ("tune", "tune-e-1", "k")
    assert run["kind"] == "run"  # what the row is; the group says what it belongs to


def test_the_server_rounds_become_every_target_call_in_an_old_store(tmp_path: Path) -> None:
    # A store from before rounds had one meaning: llama-server's rows held /metrics' count (the
    # rounds that drafted). They become drafted_rounds, and rounds every target call from the
    # counters (n_predict - n_accept - 1), in the rows and in the run's summary; llama.cpp's
    # command-line rows, whose rounds were already every call, are left as they were.
    path = tmp_path / "old.sqlite"
    db = _store_before(path, "ADD COLUMN drafted_rounds")
    summary = {"program": "llama-server", "n_predict": 16, "n_accept": 12, "n_drafted": 16, "rounds": 2,
               "mean_accepted": 6.0, "tokens_per_round": 7.0, "drafted_per_round": 8.0}
    for case, engine, program, rounds in (("server", "llama-server", "llama-server", 2),
                                          ("server, no program", "llama-server", None, 2),
                                          ("cli", "llama.cpp", "llama-speculative", 3)):
        run = db.execute("INSERT INTO runs (experiment, case_name, status, started_at, settings, provenance, engine, summary)"
                         " VALUES ('e', ?, 'ok', 'then', '{}', '{}', ?, ?)",
                         (case, engine, json.dumps({**summary, "program": program or engine})))
        for mode in ("speculative", "baseline"):
            db.execute("INSERT INTO measurements (run_id, mode, repeat, ok, argv, created_at, n_predict, n_accept, rounds,"
                       " program) VALUES (?, ?, 0, 1, '[]', 'then', 16, ?, ?, ?)",
                       (run.lastrowid, mode, 12 if mode == "speculative" else None,
                        rounds if mode == "speculative" else None, program if mode == "speculative" else None))
    db.commit()
    db.close()
    store = Store.open(path)
    runs = {r["case_name"]: r for r in store.runs()}
    for case in ("server", "server, no program"):
        spec, base = store.measurements(runs[case]["id"])
        assert (spec["rounds"], spec["drafted_rounds"]) == (3, 2) and base["rounds"] is None
    got = runs["server"]["summary"]
    assert (got["rounds"], got["drafted_rounds"]) == (3, 2)
    assert (got["mean_accepted"], got["tokens_per_round"], got["drafted_per_round"]) == pytest.approx((4.0, 5.0, 16 / 3))
    spec, _ = store.measurements(runs["cli"]["id"])
    assert (spec["rounds"], spec["drafted_rounds"]) == (3, None)
    assert "drafted_rounds" not in runs["cli"]["summary"] and runs["cli"]["summary"]["rounds"] == 2


def test_watch_windows_are_stored_and_found_by_their_files(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    first = store.add_window({"url": "http://127.0.0.1:8080", "finished_at": "2026-12-04T17:00:00+0000",
                              "target_sha256": "t" * 64, "draft_sha256": "d" * 64, "draft_max": 8, "threads": 1,
                              "counts": {"tokens": 109, "accepted_by_position": [14, 14]}, "costs": {"source": "measured"},
                              "provenance": {"server": {"url": "http://127.0.0.1:8080"}}})
    store.add_window({"url": "http://127.0.0.1:9090", "finished_at": "2026-12-04T17:01:00+0000", "counts": {"tokens": 1},
                      "provenance": {}})
    (found,) = store.windows(target_sha256="t" * 64, draft_sha256="d" * 64)
    assert found["id"] == first and found["counts"]["accepted_by_position"] == [14, 14]
    assert found["costs"] == {"source": "measured"} and found["forecast"] is None and found["started_at"] is None
    assert [w["url"] for w in store.windows()] == ["http://127.0.0.1:9090", "http://127.0.0.1:8080"]
    with pytest.raises(ValueError, match="no column"):
        store.add_window({"url": "x", "finished_at": "y", "counts": {}, "provenance": {}, "nonsense": 1})


def test_acceptance_becomes_a_fraction_in_an_old_store(tmp_path: Path) -> None:
    # A store from before acceptance had one unit: the measurements' accept column and the parse in
    # stats held llama.cpp's printed percentage, a run's summary a spread of percentages (a prompt's
    # figures one percentage). Each reads as the fraction named acceptance, and prints as before.
    from llamaspec.base import stats
    from llamaspec.measure.summary import Summary
    from llamaspec.store.rows import measurement_of

    path = tmp_path / "old.sqlite"
    db = _store_before(path, "RENAME COLUMN accept TO acceptance")
    spread = {"median": 40.85, "low": 40.514, "high": 41.0, "n": 3, "min": 40.514, "max": 41.0, "cv": 0.004,
              "values": [41.0, 40.514, 40.85]}
    point = {k: v for k, v in Summary.from_dict(None).to_dict().items() if k != "acceptance"}
    summaries = {"sweep point": {**point, "status": "ok", "pairs": 3, "paired": True, "accept": spread},
                 "prompt": {"id": "p", "category": "code", "status": "ok", "speedup": 1.5, "accept": 75.0},
                 "nothing drafted": {"status": "failed", "accept": None},
                 "failed early": None}
    run_ids = {}
    for case, summary in summaries.items():
        run_ids[case] = db.execute(
            "INSERT INTO runs (experiment, case_name, status, started_at, settings, provenance, summary)"
            " VALUES ('e', ?, 'ok', 'then', '{}', '{}', ?)",
            (case, json.dumps(summary) if summary is not None else None)).lastrowid
    insert = ("INSERT INTO measurements (run_id, mode, repeat, ok, argv, created_at, n_drafted, n_accept, accept, stats)"
              " VALUES (?, ?, 0, 1, '[]', 'then', ?, ?, ?, ?)")
    sweep, nothing = run_ids["sweep point"], run_ids["nothing drafted"]
    db.execute(insert, (sweep, "speculative", 317, 195, 61.514, json.dumps({"accept": 61.514, "n_accept": 195})))
    db.execute(insert, (sweep, "baseline", None, None, None, json.dumps({"timings": {"n": 1}})))
    db.execute(insert, (nothing, "speculative", 0, 0, None, json.dumps({"accept": None, "n_accept": 0})))
    db.commit()
    db.close()

    store = Store.open(path)
    spec, base = store.measurements(sweep)
    assert "accept" not in spec and spec["acceptance"] == pytest.approx(0.61514)
    assert spec["stats"] == {"acceptance": pytest.approx(0.61514), "n_accept": 195}
    assert measurement_of(spec).acceptance == pytest.approx(spec["acceptance"], abs=1e-5)  # the counters agree
    assert base["acceptance"] is None and base["stats"] == {"timings": {"n": 1}}
    (none,) = store.measurements(nothing)
    assert none["acceptance"] is None and none["stats"] == {"acceptance": None, "n_accept": 0}

    runs = {r["case_name"]: r for r in store.runs()}
    s = Summary.from_dict(runs["sweep point"]["summary"])
    assert "accept" not in runs["sweep point"]["summary"] and s.acceptance is not None
    assert (s.acceptance.median, s.acceptance.low, s.acceptance.high) == pytest.approx((0.4085, 0.40514, 0.41))
    assert s.acceptance.values == pytest.approx((0.41, 0.40514, 0.4085))  # in their order
    assert (s.acceptance.n, s.acceptance.cv) == (3, 0.004)
    # printed in percent, it reads as the stored percentages did (40.85 stays 40.9 at one decimal)
    old = stats.Spread.from_dict(spread)
    assert old is not None and s.acceptance.percent_text(1) == old.text("{:.1f}", "%") == "40.9% [40.5-41.0]"
    assert runs["prompt"]["summary"]["acceptance"] == pytest.approx(0.75)  # a prompt-set row of llamaspec before sweep
    assert runs["nothing drafted"]["summary"] == {"status": "failed", "acceptance": None}
    assert runs["failed early"]["summary"] is None
    # a store opened again is not migrated twice
    store.close()
    again = Store.open(path)
    assert again.measurements(sweep)[0]["acceptance"] == pytest.approx(0.61514)


def test_the_export_tells_the_n_gram_modes_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from llamaspec.cli import main

    monkeypatch.setenv("LLAMASPEC_DATA", str(tmp_path))
    store = Store.open()
    for spec_type, draft_max in (("ngram-simple", None), ("ngram-mod", None), ("draft", 8)):
        run_id = store.start_run(experiment="e", case_name=spec_type, provenance=PROVENANCE,
                                 settings={"draft_max": draft_max, "spec_type": spec_type})
        store.add_measurement(row(run_id, "speculative"))
        store.finish_run(run_id, "ok", {})
    csv_out = CliRunner().invoke(main, ["results", "export"])
    assert csv_out.exit_code == 0, csv_out.output
    table = list(csv.DictReader(io.StringIO(csv_out.stdout)))
    assert [(r["case_name"], r["spec_type"], r["draft_max"]) for r in table] == [
        ("ngram-simple", "ngram-simple", ""), ("ngram-mod", "ngram-mod", ""), ("draft", "draft", "8")]
    json_out = CliRunner().invoke(main, ["results", "export", "--json", "-e", "e"])
    assert [(r["case_name"], r["spec_type"]) for r in json.loads(json_out.stdout)] == [
        ("ngram-simple", "ngram-simple"), ("ngram-mod", "ngram-mod"), ("draft", "draft")]
    listed = CliRunner().invoke(main, ["results", "list", "--last", "2"])
    assert listed.exit_code == 0 and [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["3", "2"]
