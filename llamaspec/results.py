"""The results store: every run and every measurement, with provenance, in SQLite.

Tables (columns named after llama.cpp's own labels where there is one):
- ``runs``: one row per ``llamaspec run`` case or sweep point: experiment, case, status
  (running / ok / failed / interrupted), error, settings, provenance (llama.cpp commit, backend,
  build flags, models with files and sha256, hardware), summary.
- ``measurements``: one row per llama.cpp process: mode (speculative / baseline), repeat, argv,
  exit status, wall seconds, peak memory, parsed counters and timings, generated text, log path.

Schema changes are an append-only list of migrations (``MIGRATIONS``); never edit one that shipped.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from llamaspec import paths
from llamaspec.errors import LlamaspecError

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        experiment TEXT NOT NULL,
        case_name TEXT NOT NULL,
        kind TEXT NOT NULL DEFAULT 'run',          -- run | sweep
        sweep_id TEXT,
        point_key TEXT,                             -- identifies a sweep point, for resuming
        status TEXT NOT NULL,                       -- running | ok | failed | interrupted
        error TEXT,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        llamacpp_commit TEXT,
        backend TEXT,
        target TEXT,
        draft TEXT,
        draft_max INTEGER,
        settings TEXT NOT NULL,                     -- JSON
        provenance TEXT NOT NULL,                   -- JSON
        summary TEXT                                -- JSON
    );
    CREATE TABLE measurements (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        mode TEXT NOT NULL,                         -- speculative | baseline | draft
        repeat INTEGER NOT NULL,
        ok INTEGER NOT NULL,
        error TEXT,
        argv TEXT NOT NULL,                         -- JSON list
        exit_code INTEGER,
        wall_seconds REAL,
        peak_rss_bytes INTEGER,
        n_prompt INTEGER,
        n_predict INTEGER,
        encode_tps REAL,
        decode_tps REAL,
        n_drafted INTEGER,
        n_accept INTEGER,
        accept REAL,
        text TEXT,
        stats TEXT,                                 -- JSON: the full parse
        log_path TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX runs_by_experiment ON runs(experiment, case_name);
    CREATE INDEX runs_by_point ON runs(sweep_id, point_key);
    CREATE INDEX measurements_by_run ON measurements(run_id);
    """,
    # Measurements shared by several runs (the baseline of a sweep's points with the same target
    # settings, the draft-alone timing): the key they are shared under.
    "ALTER TABLE measurements ADD COLUMN baseline_key TEXT; CREATE INDEX measurements_by_baseline ON measurements(baseline_key);",
    "ALTER TABLE measurements ADD COLUMN speed_basis TEXT; ALTER TABLE measurements ADD COLUMN rounds INTEGER;"
    "ALTER TABLE measurements ADD COLUMN draft_len INTEGER; ALTER TABLE measurements ADD COLUMN draft_policy TEXT;"
    "ALTER TABLE measurements ADD COLUMN tokens TEXT; ALTER TABLE measurements ADD COLUMN end_of_text INTEGER;",
)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass(frozen=True)
class MeasurementRow:
    run_id: int
    mode: str
    repeat: int
    ok: bool
    error: str | None
    argv: list[str]
    exit_code: int | None
    wall_seconds: float | None
    peak_rss_bytes: int | None
    n_prompt: int | None
    n_predict: int | None
    encode_tps: float | None
    decode_tps: float | None
    n_drafted: int | None
    n_accept: int | None
    accept: float | None
    text: str | None
    stats: dict[str, Any] | None
    log_path: str | None
    baseline_key: str | None = None
    speed_basis: str | None = None
    rounds: int | None = None
    draft_len: int | None = None
    draft_policy: str | None = None
    tokens: list[int] | None = None
    end_of_text: bool = False
    id: int | None = None
    created_at: str = ""


JSON_COLUMNS = {"argv", "stats", "settings", "provenance", "summary", "tokens"}


class Store:
    """A results database. Open with ``Store.open()``; safe for one writer and many readers."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: Path | None = None) -> Store:
        path = path or paths.results_db()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: safe against a crashed process, one fsync per checkpoint
            db.execute("PRAGMA foreign_keys=ON")
            store = cls(db, path)
            store._migrate()
            return store
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise LlamaspecError(f"the results store {path} is locked by another process",
                                     hint="wait for the other llamaspec to finish, or set LLAMASPEC_DATA to use another store") from exc
            raise _damaged(path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise _damaged(path, exc) from exc

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise LlamaspecError(f"the results store {self.path} was written by a newer llamaspec (schema {version})",
                                 hint="upgrade llamaspec, or set LLAMASPEC_DATA to use another store")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            with self.transaction():
                for statement in script.split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {number}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise LlamaspecError(f"the results store {self.path} is locked by another process",
                                 hint="wait for the other llamaspec to finish, or set LLAMASPEC_DATA to use another store") from exc
        try:
            yield self.db
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._rollback()
            if "full" in str(exc):
                raise LlamaspecError(f"no space left to write the results store {self.path}",
                                     hint="free some space; everything stored before is intact") from exc
            raise _damaged(self.path, exc) from exc
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self.db.in_transaction:  # SQLite ends some failed transactions itself (a full disk)
            self.db.execute("ROLLBACK")

    def close(self) -> None:
        self.db.close()

    # --- writing ---------------------------------------------------------------------------

    def start_run(self, *, experiment: str, case_name: str, settings: dict, provenance: dict, kind: str = "run",
                  sweep_id: str | None = None, point_key: str | None = None) -> int:
        models = provenance.get("models", {})
        engine = provenance.get("engine") or provenance.get("llamacpp") or {}  # "llamacpp" in stores before 0.2
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO runs (experiment, case_name, kind, sweep_id, point_key, status, started_at, llamacpp_commit,"
                " backend, target, draft, draft_max, settings, provenance) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (experiment, case_name, kind, sweep_id, point_key, "running", now(),
                 engine.get("commit"), engine.get("accel") or engine.get("backend"),
                 models.get("target", {}).get("label"), models.get("draft", {}).get("label"), settings.get("draft_max"),
                 json.dumps(settings, sort_keys=True), json.dumps(provenance, sort_keys=True)),
            )
            return int(cur.lastrowid or 0)

    def add_measurement(self, row: MeasurementRow) -> int:
        data = asdict(row)
        data.pop("id")
        data["created_at"] = now()
        data["argv"] = json.dumps(data["argv"])
        data["stats"] = json.dumps(data["stats"]) if data["stats"] is not None else None
        data["tokens"] = json.dumps(data["tokens"]) if data["tokens"] is not None else None
        data["end_of_text"] = int(data["end_of_text"])
        data["ok"] = int(data["ok"])
        cols = ", ".join(data)
        with self.transaction() as db:
            cur = db.execute(f"INSERT INTO measurements ({cols}) VALUES ({', '.join('?' * len(data))})", tuple(data.values()))
            return int(cur.lastrowid or 0)

    def finish_run(self, run_id: int, status: str, summary: dict | None = None, error: str | None = None) -> None:
        with self.transaction() as db:
            db.execute("UPDATE runs SET status=?, summary=?, error=?, finished_at=? WHERE id=?",
                       (status, json.dumps(summary, sort_keys=True) if summary is not None else None, error, now(), run_id))

    def mark_stale_running(self) -> int:
        """Runs left 'running' by a killed process become 'interrupted' (their measurements stay)."""
        with self.transaction() as db:
            return db.execute("UPDATE runs SET status='interrupted', finished_at=? WHERE status='running'", (now(),)).rowcount

    # --- reading ---------------------------------------------------------------------------

    def runs(self, experiment: str | None = None, sweep_id: str | None = None, status: str | None = None,
             limit: int | None = None, ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("experiment", experiment), ("sweep_id", sweep_id), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if ids is not None:
            where.append(f"id IN ({', '.join('?' * len(ids))})")
            args.extend(ids)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_decode(r) for r in self._query(sql, args)]

    def run(self, run_id: int) -> dict[str, Any]:
        rows = self.runs(ids=[run_id])
        if not rows:
            raise LlamaspecError(f"no run {run_id} in {self.path}", hint="list runs with `llamaspec results list`")
        return rows[0]

    def measurements(self, run_id: int) -> list[dict[str, Any]]:
        return [_decode(r) for r in self._query("SELECT * FROM measurements WHERE run_id = ? ORDER BY id", (run_id,))]

    def shared(self, key: str, mode: str = "baseline") -> list[dict[str, Any]]:
        """Finished measurements of ``mode`` that any run recorded under this shared key."""
        return [_decode(r) for r in self._query(
            "SELECT * FROM measurements WHERE baseline_key = ? AND mode = ? AND ok = 1 ORDER BY id", (key, mode))]

    def finished_point(self, sweep_id: str, point_key: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM runs WHERE sweep_id = ? AND point_key = ? AND status IN ('ok', 'differs') ORDER BY id DESC LIMIT 1",
                           (sweep_id, point_key))
        return _decode(rows[0]) if rows else None

    def _query(self, sql: str, args: Sequence[Any]) -> list[sqlite3.Row]:
        try:
            return self.db.execute(sql, tuple(args)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise _damaged(self.path, exc) from exc

    # --- export ------------------------------------------------------------------------------

    def export(self, fmt: str, experiment: str | None = None) -> str:
        runs = list(reversed(self.runs(experiment)))
        if fmt == "json":
            for r in runs:
                r["measurements"] = self.measurements(r["id"])
            return json.dumps(runs, indent=2, sort_keys=True)
        if fmt == "csv":
            columns = ["run_id", "experiment", "case_name", "kind", "sweep_id", "status", "started_at", "llamacpp_commit",
                       "backend", "target", "draft", "draft_max"] + [
                f.name for f in fields(MeasurementRow) if f.name not in ("run_id", "text", "stats", "argv", "id")]
            out = io.StringIO()
            writer = csv.DictWriter(out, columns, extrasaction="ignore")
            writer.writeheader()
            for r in runs:
                for m in self.measurements(r["id"]):
                    writer.writerow({**{k: r[k] for k in columns if k in r}, **m, "run_id": r["id"]})
            return out.getvalue()
        raise LlamaspecError(f"unknown export format {fmt!r}", hint="use csv or json")


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in JSON_COLUMNS & out.keys():
        if out[key] is not None:
            out[key] = json.loads(out[key])
    if "ok" in out:
        out["ok"] = bool(out["ok"])
    return out


def _damaged(path: Path, exc: Exception) -> LlamaspecError:
    return LlamaspecError(f"the results store {path} is damaged: {exc}",
                          hint=f"move it aside (mv {path} {path}.bad) to start a new one; "
                               "`sqlite3 FILE .recover` may save its rows")
