"""The results store: round trip, exports, migrations, locked and damaged databases."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest

from llamaspec.errors import LlamaspecError
from llamaspec.results import MIGRATIONS, MeasurementRow, Store

PROVENANCE = {"engine": {"commit": "0c1e570", "backend": "cpu"},
              "models": {"target": {"label": "smollm2-135m:f16"}, "draft": {"label": "smollm2-135m:q4_0"}}}


def row(run_id: int, mode: str, **kw) -> MeasurementRow:
    base = dict(run_id=run_id, mode=mode, repeat=0, ok=True, error=None, argv=["llama-speculative", "-m", "x"],
                exit_code=0, wall_seconds=1.5, peak_rss_bytes=123, n_prompt=12, n_predict=64, encode_tps=100.0,
                decode_tps=30.0, n_drafted=70, n_accept=40, accept=57.143, text="def f():", stats={"a": 1}, log_path="/x.log")
    base.update(kw)
    return MeasurementRow(**base)


def test_round_trip_and_exports(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    run_id = store.start_run(experiment="e", case_name="c", settings={"draft_max": 4}, provenance=PROVENANCE)
    store.add_measurement(row(run_id, "baseline", n_drafted=None, n_accept=None, accept=None, baseline_key="k1"))
    store.add_measurement(row(run_id, "speculative"))
    store.finish_run(run_id, "ok", {"speedup": {"median": 1.1}})
    got = store.run(run_id)
    assert got["status"] == "ok" and got["draft_max"] == 4 and got["llamacpp_commit"] == "0c1e570"
    assert got["target"] == "smollm2-135m:f16" and got["summary"]["speedup"]["median"] == 1.1
    ms = store.measurements(run_id)
    assert [m["mode"] for m in ms] == ["baseline", "speculative"]
    assert ms[1]["argv"] == ["llama-speculative", "-m", "x"] and ms[1]["ok"] is True
    assert [m["mode"] for m in store.shared("k1")] == ["baseline"]
    exported = json.loads(store.export("json"))
    assert exported[0]["measurements"][1]["n_accept"] == 40
    table = list(csv.DictReader(io.StringIO(store.export("csv"))))
    assert len(table) == 2 and table[1]["decode_tps"] == "30.0" and table[1]["experiment"] == "e"
    with pytest.raises(LlamaspecError, match="unknown export format"):
        store.export("xml")


def test_failed_runs_are_stored_with_their_error(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    run_id = store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE)
    store.add_measurement(row(run_id, "speculative", ok=False, error="llama-speculative was killed by SIGKILL", exit_code=-9))
    store.finish_run(run_id, "failed", {}, "llama-speculative was killed by SIGKILL")
    assert store.runs(status="failed")[0]["error"] == "llama-speculative was killed by SIGKILL"


def test_stale_running_runs_become_interrupted(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "r.sqlite")
    store.start_run(experiment="e", case_name="c", settings={}, provenance=PROVENANCE)
    assert store.mark_stale_running() == 1
    assert store.runs()[0]["status"] == "interrupted"


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
