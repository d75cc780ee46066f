"""The results store: every run and every measurement, with provenance, in SQLite.

``Store`` opens it, writes runs, their measurements and ``llamaspec watch`` windows, reads them
back and exports them, over one SQLite connection (one transaction discipline, one row decoder).
The tables and their append-only migrations are ``schema.py``; what a row holds, and the one
``Measurement`` <-> row mapping, ``rows.py``. Migrations are applied in one ``BEGIN IMMEDIATE``
transaction that re-reads the schema version inside it, so processes opening a new store at the
same moment apply each migration exactly once.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.lock import process_gone, this_process
from llamaspec.store.rows import Group, MeasurementRow, engine_of
from llamaspec.store.schema import BOOL_COLUMNS, JSON_COLUMNS, MIGRATIONS, WINDOW_COLUMNS

log = logging.getLogger(__name__)

INTERRUPTED = "the process ended without finishing (killed?)"
_REAP_WAIT_MS = 2000

# SQLite's primary result codes (sqlite3.h), for Python < 3.11 which lacks sqlite_errorcode.
_BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _PROTOCOL, _NOTADB = 5, 6, 8, 10, 11, 13, 14, 15, 26


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Store:
    """A results database. Open with ``Store.open()``; safe for several writers and readers
    (each write is one short transaction; a writer waits up to ``timeout`` for another)."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: Path | None = None, *, timeout: float = 30.0) -> Store:
        """Open (creating and migrating if needed) the store; ``timeout``: seconds to wait for a
        lock another process holds before saying it is locked."""
        path = path or paths.results_db()
        paths.writable_dir(path.parent)  # one line before anything is measured, not an OSError after
        try:
            db = sqlite3.connect(path, timeout=timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise _error(path, exc, "open") from exc
        try:
            db.row_factory = sqlite3.Row
            _wal(db, timeout)
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: safe against a crashed process, one fsync per checkpoint
            db.execute("PRAGMA foreign_keys=ON")
            store = cls(db, path)
            store._migrate()
            return store
        except sqlite3.Error as exc:
            db.close()
            raise _error(path, exc, "open") from exc
        except BaseException:
            db.close()
            raise

    def _migrate(self) -> None:
        version = self._user_version()
        if version == len(MIGRATIONS):
            return  # the usual case: nothing to write, no write lock taken
        self._refuse_newer(version)
        # Another process may be migrating the same new store right now: take the write lock
        # first, then look again at what is still missing.
        with self.transaction():
            version = self._user_version()
            self._refuse_newer(version)
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in script.split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {number}")
                log.debug("results store %s: applied migration %d", self.path, number)

    def _user_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _refuse_newer(self, version: int) -> None:
        if version > len(MIGRATIONS):
            raise LlamaspecError(f"the results store {self.path} was written by a newer llamaspec (schema {version})",
                                 hint="upgrade llamaspec, or set LLAMASPEC_DATA to use another store")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _error(self.path, exc, "write") from exc
        try:
            yield self.db
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise _error(self.path, exc, "write") from exc
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
                  group: Group | None = None, point_key: str | None = None, prompt_id: str | None = None,
                  category: str | None = None, machine: str | None = None) -> int:
        """Record a run as ``running``, with this process (pid, host, start time) as its owner.

        ``group``: the sweep, tune, prompt set or study it belongs to (``point_key``: its place
        there); ``machine``: the cluster machine that measures it (None: this one; the owner is then
        this process). The engine's name, version and accelerator come from ``provenance``
        (:func:`engine_of`).
        """
        models = provenance.get("models", {})
        engine = engine_of(provenance)
        pid, host, proc_start = this_process()
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO runs (experiment, case_name, kind, group_kind, group_id, point_key, status, started_at,"
                " engine_version, accel, target, draft, draft_max, settings, provenance, pid, host, proc_start, prompt_id,"
                " category, machine, engine) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (experiment, case_name, kind, group.kind if group else None, group.id if group else None, point_key,
                 "running", now(),
                 engine.get("version") or engine.get("commit"), engine.get("accel") or engine.get("backend"),
                 models.get("target", {}).get("label"), models.get("draft", {}).get("label"), settings.get("draft_max"),
                 json.dumps(settings, sort_keys=True), json.dumps(provenance, sort_keys=True),
                 pid, host, proc_start, prompt_id, category, machine, engine.get("name")),
            )
            return int(cur.lastrowid or 0)

    def add_measurement(self, row: MeasurementRow) -> int:
        data = asdict(row)
        data.pop("id")
        data["created_at"] = now()
        for key in JSON_COLUMNS & data.keys():
            data[key] = json.dumps(data[key]) if data[key] is not None else None
        for key in BOOL_COLUMNS & data.keys():
            data[key] = int(data[key])
        cols = ", ".join(data)
        with self.transaction() as db:
            cur = db.execute(f"INSERT INTO measurements ({cols}) VALUES ({', '.join('?' * len(data))})", tuple(data.values()))
            return int(cur.lastrowid or 0)

    def finish_run(self, run_id: int, status: str, summary: dict | None = None, error: str | None = None) -> None:
        # Unconditional: a run wrongly taken for interrupted (its owner was only unreachable) is
        # set right when it does finish.
        with self.transaction() as db:
            db.execute("UPDATE runs SET status=?, summary=?, error=?, finished_at=? WHERE id=?",
                       (status, json.dumps(summary, sort_keys=True) if summary is not None else None, error, now(), run_id))

    def mark_stale_running(self) -> int:
        """Runs left ``running`` by a process that is gone become ``interrupted`` (their
        measurements stay); returns how many. Only this host's processes can be checked: rows
        from other hosts are left alone. Called by ``runs()`` and ``run()``; it is best effort,
        so a store that is locked or read-only is still readable."""
        try:
            rows = self.db.execute("SELECT id, pid, host, proc_start FROM runs WHERE status = 'running'").fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, exc, "read") from exc
        if not rows:
            return 0
        _, host, _ = this_process()
        gone = [r["id"] for r in rows if r["host"] == host and r["pid"] is not None and process_gone(r["pid"], r["proc_start"])]
        if not gone or self.db.in_transaction:  # inside a caller's transaction: its writes come first
            return 0
        # Listing runs should not sit out another writer's long transaction: wait briefly, else
        # leave the marking to a later read.
        patience = self.db.execute("PRAGMA busy_timeout").fetchone()[0]
        self.db.execute(f"PRAGMA busy_timeout = {min(int(patience), _REAP_WAIT_MS)}")
        try:
            self.db.execute("BEGIN IMMEDIATE")
            count = self.db.execute(
                f"UPDATE runs SET status = 'interrupted', finished_at = ?, error = COALESCE(error, ?)"
                f" WHERE status = 'running' AND id IN ({', '.join('?' * len(gone))})", (now(), INTERRUPTED, *gone)).rowcount
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            if _code(exc) in (_BUSY, _LOCKED, _READONLY, _CANTOPEN):
                log.debug("results store %s: could not mark %d interrupted runs now: %s", self.path, len(gone), exc)
                return 0
            raise _error(self.path, exc, "write") from exc
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {int(patience)}")
        if count:
            log.info("results store %s: %d run(s) whose process is gone marked interrupted", self.path, count)
        return int(count)

    def add_window(self, window: dict[str, Any]) -> int:
        """Store one window of ``llamaspec watch`` (keys: :data:`WINDOW_COLUMNS`; the JSON ones as
        dicts); returns its id."""
        unknown = set(window) - set(WINDOW_COLUMNS)
        if unknown:
            raise ValueError(f"a watch window has no column {', '.join(sorted(unknown))}")
        values = [json.dumps(window.get(c), sort_keys=True) if c in JSON_COLUMNS and window.get(c) is not None
                  else window.get(c) for c in WINDOW_COLUMNS]
        with self.transaction() as db:
            cur = db.execute(f"INSERT INTO watch_windows ({', '.join(WINDOW_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(WINDOW_COLUMNS))})", values)
            return int(cur.lastrowid or 0)

    # --- reading ---------------------------------------------------------------------------

    def windows(self, *, url: str | None = None, target_sha256: str | None = None, draft_sha256: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        """Stored ``llamaspec watch`` windows, newest first, filtered by whichever arguments are given."""
        return self._newest("watch_windows", (("url", url), ("target_sha256", target_sha256), ("draft_sha256", draft_sha256)),
                            limit)

    def runs(self, experiment: str | None = None, group_id: str | None = None, status: str | None = None,
             limit: int | None = None, ids: Sequence[int] | None = None, *, kind: str | None = None,
             prompt_id: str | None = None) -> list[dict[str, Any]]:
        """Stored runs, newest first, filtered by whichever arguments are given."""
        self.mark_stale_running()
        return self._newest("runs", (("experiment", experiment), ("group_id", group_id), ("status", status), ("kind", kind),
                                     ("prompt_id", prompt_id)), limit,
                            None if ids is None else (f"id IN ({', '.join('?' * len(ids))})", ids))

    def _newest(self, table: str, equal: Sequence[tuple[str, Any]], limit: int | None,
                more: tuple[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
        """Rows of ``table``, newest first: those whose columns equal each value of ``equal`` given
        (not None), and meet ``more`` (a condition and its arguments), at most ``limit``."""
        given = [(column, value) for column, value in equal if value is not None]
        where = [f"{column} = ?" for column, _v in given] + ([more[0]] if more else [])
        args = [value for _c, value in given] + (list(more[1]) if more else [])
        sql = f"SELECT * FROM {table}" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
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

    def in_blocks(self, blocks: Sequence[str], mode: str = "baseline") -> list[dict[str, Any]]:
        """Finished measurements of ``mode`` measured in these blocks (``Measurement.block``)."""
        if not blocks:
            return []
        return [_decode(r) for r in self._query(
            f"SELECT * FROM measurements WHERE block IN ({', '.join('?' * len(blocks))}) AND mode = ? AND ok = 1 ORDER BY id",
            (*blocks, mode))]

    def blocks_begun(self, prefix: str) -> int:
        """How many blocks whose name starts with ``prefix`` (not empty) have a measurement, finished
        or not. The names that start with it are the range [prefix, prefix with its last character
        the next one), which the block index reads (a ``substr`` or ``LIKE`` would scan the table)."""
        after = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        rows = self._query("SELECT COUNT(DISTINCT block) AS n FROM measurements WHERE block >= ? AND block < ?",
                           (prefix, after))
        return int(rows[0]["n"]) if rows else 0

    def _query(self, sql: str, args: Sequence[Any]) -> list[sqlite3.Row]:
        try:
            return self.db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, exc, "read") from exc

    # --- export ------------------------------------------------------------------------------

    def export(self, as_json: bool = False, experiment: str | None = None) -> str:
        """The runs as JSON (each with its measurements) or as CSV (a row per measurement)."""
        # each run's spec type beside draft_max: n-gram modes (no draft length) told apart
        runs = [{**r, "spec_type": (r.get("settings") or {}).get("spec_type")} for r in reversed(self.runs(experiment))]
        if as_json:
            for r in runs:
                r["measurements"] = self.measurements(r["id"])
            return json.dumps(runs, indent=2, sort_keys=True)
        columns = ["run_id", "experiment", "case_name", "kind", "group_kind", "group_id", "prompt_id", "category", "status",
                   "started_at", "engine", "engine_version", "accel", "machine", "target", "draft",
                   "draft_max", "spec_type"] + [
            f.name for f in fields(MeasurementRow)
            if f.name not in ("run_id", "text", "tokens", "stats", "argv", "id", "noise")] + ["cpu_steal", "other_load"]
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, extrasaction="ignore")
        writer.writeheader()
        for r in runs:
            for m in self.measurements(r["id"]):
                noise = m.get("noise") or {}
                writer.writerow({**{k: r[k] for k in columns if k in r}, **m, "run_id": r["id"],
                                 "cpu_steal": noise.get("steal"), "other_load": noise.get("other_load")})
        return out.getvalue()


def _wal(db: sqlite3.Connection, timeout: float) -> None:
    """Switch a new store to WAL (readers never wait for the writer). Two processes switching the
    same new file at once: SQLite answers one of them "busy" at once, without waiting (each holds
    the read lock the other must wait to be rid of), so wait here."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if _code(exc) not in (_BUSY, _LOCKED) or time.monotonic() >= deadline:
                raise
        time.sleep(0.02)


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in JSON_COLUMNS & out.keys():
        if out[key] is not None:
            out[key] = json.loads(out[key])
    for key in BOOL_COLUMNS & out.keys():
        if out[key] is not None:
            out[key] = bool(out[key])
    return out


# --- errors ------------------------------------------------------------------------------------------

def _code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of an error (the low byte of the extended one)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return int(code) & 0xFF
    text = str(exc).lower()  # older Pythons: SQLite's fixed messages
    for needle, value in (("locked", _BUSY), ("readonly", _READONLY), ("disk i/o", _IOERR), ("malformed", _CORRUPT),
                          ("is full", _FULL), ("unable to open", _CANTOPEN), ("not a database", _NOTADB)):
        if needle in text:
            return value
    return None


def _error(path: Path, exc: sqlite3.Error, doing: str) -> LlamaspecError:
    """One accurate error for a failed SQLite call: "damaged" only for a file SQLite finds
    corrupt (or not a database at all), never for a lock, a full disk or a bug."""
    code = _code(exc)
    other_store = "or set LLAMASPEC_DATA to use another store"
    if code in (_BUSY, _LOCKED):
        return LlamaspecError(f"the results store {path} is locked by another process",
                              hint=f"wait for the other llamaspec (or sqlite3 session) to finish, {other_store}")
    if code == _FULL:
        return LlamaspecError(f"no space left to write the results store {path}",
                              hint="free some space; everything stored before is intact")
    if code == _READONLY:
        return LlamaspecError(f"the results store {path} cannot be written: {exc}",
                              hint=f"check the permissions of the file and its folder, {other_store}")
    if code == _CANTOPEN:
        return LlamaspecError(f"the results store {path} cannot be opened: {exc}",
                              hint=f"check that its folder exists and is writable, {other_store}")
    if code == _NOTADB:
        return _damaged(path, exc)
    verdict = _fails_check(path)  # only on this error path: it reads the whole file
    if verdict or (code == _CORRUPT and verdict is None):
        return _damaged(path, exc)
    if code == _IOERR:
        return LlamaspecError(f"could not {doing} the results store {path}: {exc}",
                              hint="check the disk and file system (a network file system without locking "
                                   f"cannot hold it), {other_store}")
    if code == _PROTOCOL:
        return LlamaspecError(f"the results store {path} could not be locked: {exc}",
                              hint=f"its file system does not lock files reliably; {other_store} on a local disk")
    return LlamaspecError(f"could not {doing} the results store {path}: {exc} (the file itself passes SQLite's check)",
                          hint="this is probably a bug in llamaspec; please report it with the command that failed")


def _fails_check(path: Path) -> bool | None:
    """True: SQLite finds the file damaged; False: it passes ``PRAGMA quick_check``; None:
    it could not be checked now (locked, gone)."""
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return None
    try:
        rows = db.execute("PRAGMA quick_check").fetchall()
        return [tuple(r) for r in rows] != [("ok",)]
    except sqlite3.Error as exc:
        return True if _code(exc) in (_CORRUPT, _NOTADB) else None
    finally:
        db.close()


def _damaged(path: Path, exc: Exception) -> LlamaspecError:
    return LlamaspecError(f"the results store {path} is damaged: {exc}",
                          hint=f"move it aside (mv {path} {path}.bad) to start a new one; "
                               "`sqlite3 FILE .recover` may save its rows")
