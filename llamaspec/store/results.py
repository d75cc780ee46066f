"""The results store: every run and every measurement, with provenance, in SQLite.

Tables (columns named after llama.cpp's own labels where there is one):
- ``runs``: one row per ``llamaspec run`` case, sweep point or prompt of a prompt set: experiment,
  case, the group it belongs to (``group_kind``: sweep, tune, promptset or study; ``group_id``),
  status (running / ok / failed / interrupted), error, the engine (``engine``: what an
  experiment's ``engine:`` names; ``engine_version``: its build's commit or library version;
  ``accel``), settings, provenance (the engine's build flags, models with files and sha256,
  hardware), summary, and the process that measured it (pid, host, start time: a ``running`` row
  whose process is gone is shown as ``interrupted``).
- ``measurements``: one row per generation: mode (speculative / baseline / draft / batch), repeat,
  argv, exit status, wall seconds, peak memory, parsed counters and timings, generated text and
  token ids, log path.
- ``watch_windows``: one row per window of ``llamaspec watch`` (a running llama-server's traffic):
  the server and its files by sha256, the window's counts, the costs and the prediction.

Schema changes are an append-only list of migrations (``MIGRATIONS``); never edit one that shipped.
They are applied in one ``BEGIN IMMEDIATE`` transaction that re-reads the schema version inside
it, so processes opening a new store at the same moment apply each migration exactly once.

Its size: the schema, its append-only migrations and every query run over one SQLite
connection (one transaction discipline, one row decoder); the migrations alone are a quarter of it
and only grow.
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
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.host import NoiseSample
from llamaspec.base.lock import process_gone, this_process
from llamaspec.measure.contract import PAIR_MODES, Measurement

log = logging.getLogger(__name__)

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
    # The backend contract's counters (llamaspec.measure.contract.Measurement), the process that measured a
    # run (to tell a killed run from a running one), prompt sets, cluster machines, the engine.
    # Rows left 'running' by an older llamaspec recorded no process to check: they are over.
    """
    ALTER TABLE measurements ADD COLUMN speed_basis TEXT;
    ALTER TABLE measurements ADD COLUMN rounds INTEGER;
    ALTER TABLE measurements ADD COLUMN draft_len INTEGER;
    ALTER TABLE measurements ADD COLUMN draft_policy TEXT;
    ALTER TABLE measurements ADD COLUMN tokens TEXT;
    ALTER TABLE measurements ADD COLUMN end_of_text INTEGER;
    ALTER TABLE runs ADD COLUMN pid INTEGER;
    ALTER TABLE runs ADD COLUMN host TEXT;
    ALTER TABLE runs ADD COLUMN proc_start REAL;
    ALTER TABLE runs ADD COLUMN prompt_id TEXT;
    ALTER TABLE runs ADD COLUMN category TEXT;
    ALTER TABLE runs ADD COLUMN machine TEXT;
    ALTER TABLE runs ADD COLUMN backend_name TEXT;
    CREATE INDEX runs_by_prompt ON runs(sweep_id, prompt_id);
    CREATE INDEX runs_by_status ON runs(status);
    UPDATE runs SET status = 'interrupted', finished_at = strftime('%Y-%m-%dT%H:%M:%S+0000', 'now'),
        error = COALESCE(error, 'left running by an older llamaspec that recorded no process (killed?)')
        WHERE status = 'running';
    """,
    # "backend" named what a build computes on (cpu, cuda, metal): that is the accelerator; the word
    # backend means the engine (backend_name) everywhere else.
    "ALTER TABLE runs RENAME COLUMN backend TO accel;",
    # Every field of a measurement has its column (llamaspec.measure.contract.Measurement <-> MeasurementRow,
    # one mapping): the counters the speedup model reads, and what prompt sets kept in the stats JSON.
    """
    ALTER TABLE measurements ADD COLUMN draft_steps INTEGER;
    ALTER TABLE measurements ADD COLUMN program TEXT;
    ALTER TABLE measurements ADD COLUMN sample_ms_per_token REAL;
    ALTER TABLE measurements ADD COLUMN error_kind TEXT;
    ALTER TABLE measurements ADD COLUMN prompt_ms REAL;
    ALTER TABLE measurements ADD COLUMN generation_ms REAL;
    UPDATE measurements SET
        error_kind = json_extract(stats, '$.error_kind'),
        prompt_ms = json_extract(stats, '$.timings.prompt_ms'),
        generation_ms = json_extract(stats, '$.timings.predicted_ms')
        WHERE stats IS NOT NULL AND json_valid(stats);
    UPDATE measurements SET
        tokens = COALESCE(tokens, json_extract(stats, '$.tokens')),
        rounds = COALESCE(rounds, json_extract(stats, '$.rounds')),
        end_of_text = COALESCE(end_of_text, json_extract(stats, '$.end_of_text')),
        draft_len = COALESCE(draft_len, json_extract(stats, '$.draft_len')),
        draft_policy = COALESCE(draft_policy, json_extract(stats, '$.draft_policy')),
        speed_basis = COALESCE(speed_basis, json_extract(stats, '$.speed_basis'))
        WHERE stats IS NOT NULL AND json_valid(stats) AND json_type(stats, '$.draft_policy') IS NOT NULL
            AND draft_policy IS NULL;
    """,
    # Machine noise during each measurement (host.NoiseSample as JSON: CPU seconds of the window,
    # stolen by the hypervisor, used by the machine and by the measurement's own process tree).
    "ALTER TABLE measurements ADD COLUMN noise TEXT;",
    # One word for the engine: ``engine`` is what an experiment's ``engine:`` (formerly ``backend:``)
    # names (the column was backend_name), ``engine_version`` the version of it that measured
    # (llama.cpp's build commit; the column was llamacpp_commit). Rows stored before the engine had
    # a column were measured by llama.cpp's command-line programs, the only engine then.
    """
    ALTER TABLE runs RENAME COLUMN llamacpp_commit TO engine_version;
    ALTER TABLE runs RENAME COLUMN backend_name TO engine;
    UPDATE runs SET engine = COALESCE(CASE WHEN json_valid(provenance) THEN json_extract(provenance, '$.backend') END,
                                      'llama.cpp')
        WHERE engine IS NULL;
    """,
    # sweep_id held the id of whatever set a run belongs to: a sweep, a tune, a prompt set or a
    # cluster study. It is the group's id now, and group_kind says which (Group), read for the rows
    # stored before from where they came: a prompt set's rows are of kind promptset, a study's of
    # kind cluster*, a tune's ids (also a tune's points measured on a cluster machine, TUNE_ID@MACHINE)
    # begin with tune-; the rest were sweeps.
    """
    ALTER TABLE runs RENAME COLUMN sweep_id TO group_id;
    ALTER TABLE runs ADD COLUMN group_kind TEXT;
    UPDATE runs SET group_kind = CASE
        WHEN kind = 'promptset' THEN 'promptset'
        WHEN kind LIKE 'cluster%' THEN 'study'
        WHEN group_id LIKE 'tune-%' THEN 'tune'
        ELSE 'sweep' END
        WHERE group_id IS NOT NULL;
    """,
    # One definition of rounds for every engine: every target call after the prompt. llama-server's
    # rows held /metrics' count, which leaves out the steps that drafted nothing: that count is
    # drafted_rounds now, and rounds follow from the counters by the server's loop (the first
    # token comes from the prompt's logits: n_predict - n_accept - 1), in the rows and in the
    # runs' summaries, whose figures per round are then derived again from the new rounds.
    """
    ALTER TABLE measurements ADD COLUMN drafted_rounds INTEGER;
    UPDATE measurements SET drafted_rounds = rounds, rounds = n_predict - n_accept - 1
        WHERE mode = 'speculative' AND n_predict - n_accept - 1 >= 0
            AND (program = 'llama-server'
                 OR (program IS NULL AND run_id IN (SELECT id FROM runs WHERE engine = 'llama-server')));
    UPDATE runs SET summary = json_set(summary, '$.drafted_rounds', json_extract(summary, '$.rounds'),
            '$.rounds', json_extract(summary, '$.n_predict') - json_extract(summary, '$.n_accept') - 1)
        WHERE json_valid(summary) AND json_extract(summary, '$.program') = 'llama-server'
            AND json_extract(summary, '$.n_predict') - json_extract(summary, '$.n_accept') - 1 >= 0;
    UPDATE runs SET summary = json_set(summary,
            '$.mean_accepted', json_extract(summary, '$.n_accept') * 1.0 / json_extract(summary, '$.rounds'),
            '$.tokens_per_round', 1.0 + json_extract(summary, '$.n_accept') * 1.0 / json_extract(summary, '$.rounds'),
            '$.drafted_per_round', json_extract(summary, '$.n_drafted') * 1.0 / json_extract(summary, '$.rounds'))
        WHERE json_valid(summary) AND json_extract(summary, '$.program') = 'llama-server'
            AND json_extract(summary, '$.rounds') > 0;
    """,
    # Acceptance by draft position (contract.Measurement.drafted_by_position / accepted_by_position):
    # JSON lists of counts, index i-1 for position i; NULL where the engine counted none.
    """
    ALTER TABLE measurements ADD COLUMN drafted_by_position TEXT;
    ALTER TABLE measurements ADD COLUMN accepted_by_position TEXT;
    """,
    # llamaspec watch: one row per window of a running llama-server's traffic (llamaspec.watch): the
    # server (URL, the speculation it runs, its draft length, its files by sha256), the window's
    # counts, the costs the prediction used and where they came from, the prediction, provenance.
    """
    CREATE TABLE watch_windows (
        id INTEGER PRIMARY KEY,
        url TEXT NOT NULL,
        started_at TEXT,                            -- the window's first reading (NULL: the server's start)
        finished_at TEXT NOT NULL,
        speculation TEXT,                           -- draft | an n-gram mode | NULL: none
        draft_max INTEGER,
        threads INTEGER,
        target_sha256 TEXT,
        draft_sha256 TEXT,
        counts TEXT NOT NULL,                       -- JSON: the window's counts
        costs TEXT,                                 -- JSON: the cost model and its source
        forecast TEXT,                              -- JSON: the prediction and the verdict
        provenance TEXT NOT NULL                    -- JSON: the server, llamaspec, this machine
    );
    CREATE INDEX watch_windows_by_files ON watch_windows(target_sha256, draft_sha256);
    """,
    # One unit for acceptance: a fraction in [0, 1] (contract.Measurement.acceptance), a percentage only
    # in printed text. The measurements' column and the parse kept in stats held llama.cpp's printed
    # percentage (accept); the runs' summaries held a spread of percentages ($.accept), a prompt's
    # figures one percentage. Each moves to the fraction under the name acceptance; a spread's n and cv
    # stay as they are (cv has no unit).
    """
    ALTER TABLE measurements RENAME COLUMN accept TO acceptance;
    UPDATE measurements SET acceptance = acceptance / 100.0 WHERE acceptance IS NOT NULL;
    UPDATE measurements SET stats = json_remove(json_set(stats, '$.acceptance', json_extract(stats, '$.accept') / 100.0),
                                                '$.accept')
        WHERE json_valid(stats) AND json_type(stats, '$.accept') IS NOT NULL;
    UPDATE runs SET summary = json_remove(json_set(summary, '$.acceptance',
            CASE WHEN json_type(summary, '$.accept') = 'object' THEN json_object(
                'median', json_extract(summary, '$.accept.median') / 100.0,
                'low', COALESCE(json_extract(summary, '$.accept.low'), json_extract(summary, '$.accept.median')) / 100.0,
                'high', COALESCE(json_extract(summary, '$.accept.high'), json_extract(summary, '$.accept.median')) / 100.0,
                'n', COALESCE(json_extract(summary, '$.accept.n'), 1),
                'min', COALESCE(json_extract(summary, '$.accept.min'), json_extract(summary, '$.accept.median')) / 100.0,
                'max', COALESCE(json_extract(summary, '$.accept.max'), json_extract(summary, '$.accept.median')) / 100.0,
                'cv', json_extract(summary, '$.accept.cv'),
                'values', json((SELECT json_group_array(value / 100.0) FROM json_each(summary, '$.accept.values'))))
            WHEN json_type(summary, '$.accept') IN ('real', 'integer') THEN json_extract(summary, '$.accept') / 100.0
            END), '$.accept')
        WHERE json_valid(summary) AND json_type(summary, '$.accept') IS NOT NULL;
    """,
)

GROUP_KINDS = ("sweep", "tune", "promptset", "study")
# The kind of the row that keeps a workload study's one decision (llamaspec.studies.study), as it printed it:
# its answer, not a measurement (report shows it apart).
STUDY_KIND = "study"


@dataclass(frozen=True)
class Group:
    """The set a run belongs to beside its experiment: a sweep (its points), a tune (the settings it
    measured), a prompt set (its prompts) or a cluster study (its work items). ``id`` is what a rerun
    of the same command finds it by, to resume it."""

    kind: str  # of GROUP_KINDS
    id: str

    def __post_init__(self) -> None:
        if self.kind not in GROUP_KINDS:
            raise ValueError(f"group kind {self.kind!r} is not one of {', '.join(GROUP_KINDS)}")

INTERRUPTED = "the process ended without finishing (killed?)"
_REAP_WAIT_MS = 2000

# SQLite's primary result codes (sqlite3.h), for Python < 3.11 which lacks sqlite_errorcode.
_BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _PROTOCOL, _NOTADB = 5, 6, 8, 10, 11, 13, 14, 15, 26


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
    acceptance: float | None  # Measurement.acceptance (a fraction), kept for queries of the store
    text: str | None
    stats: dict[str, Any] | None
    log_path: str | None
    baseline_key: str | None = None
    speed_basis: str | None = None
    rounds: int | None = None
    drafted_rounds: int | None = None
    draft_len: int | None = None
    draft_policy: str | None = None
    tokens: list[int] | None = None  # generated token ids, where the engine gives them
    end_of_text: bool = False  # the model stopped on its own before n_predict
    draft_steps: int | None = None
    program: str | None = None
    sample_ms_per_token: float | None = None
    error_kind: str | None = None
    prompt_ms: float | None = None
    generation_ms: float | None = None
    noise: dict[str, Any] | None = None  # host.NoiseSample.to_dict() of the measurement's window
    drafted_by_position: list[int] | None = None
    accepted_by_position: list[int] | None = None
    id: int | None = None
    created_at: str = ""

    @classmethod
    def of(cls, m: Measurement, *, run_id: int, repeat: int | None = None, baseline_key: str | None = None) -> MeasurementRow:
        """The row for an engine's Measurement (every field of the contract, none forgotten). ``repeat``
        is the measurement's pair index (``Measurement.pair``); a draft or batch timing, in no pair,
        takes ``repeat`` (0 by default)."""
        if m.pair is not None and repeat is not None and repeat != m.pair:
            raise ValueError(f"a {m.mode} measurement of pair {m.pair} stored as repeat {repeat}")
        index = m.pair if m.pair is not None else (repeat or 0)
        return cls(run_id=run_id, mode=m.mode, repeat=index, ok=m.ok, error=m.error, argv=list(m.argv),
                   exit_code=m.exit_code, wall_seconds=m.wall_seconds, peak_rss_bytes=m.peak_rss_bytes,
                   n_prompt=m.n_prompt, n_predict=m.n_predict, encode_tps=m.encode_tps, decode_tps=m.decode_tps,
                   n_drafted=m.n_drafted, n_accept=m.n_accept, acceptance=m.acceptance, text=m.text, stats=m.stats,
                   log_path=m.log_path, baseline_key=baseline_key, speed_basis=m.speed_basis, rounds=m.rounds,
                   drafted_rounds=m.drafted_rounds,
                   draft_len=m.draft_len, draft_policy=m.draft_policy,
                   tokens=list(m.tokens) if m.tokens is not None else None, end_of_text=m.end_of_text,
                   draft_steps=m.draft_steps, program=m.program, sample_ms_per_token=m.sample_ms_per_token,
                   error_kind=m.error_kind, prompt_ms=m.prompt_ms, generation_ms=m.generation_ms,
                   noise=m.noise.to_dict() if m.noise is not None else None,
                   drafted_by_position=list(m.drafted_by_position) if m.drafted_by_position is not None else None,
                   accepted_by_position=list(m.accepted_by_position) if m.accepted_by_position is not None else None)


def measurement_of(row: dict[str, Any]) -> Measurement:
    """The Measurement a stored row holds (the inverse of :meth:`MeasurementRow.of`)."""
    names = {f.name for f in fields(Measurement)}
    data = {k: v for k, v in row.items() if k in names}
    for key in ("error", "exit_code", "peak_rss_bytes"):  # rows recorded without them (benchmark fixtures)
        data.setdefault(key, None)
    data["argv"] = tuple(row.get("argv") or ())
    data["tokens"] = tuple(row["tokens"]) if row.get("tokens") is not None else None
    for key in ("drafted_by_position", "accepted_by_position"):
        data[key] = tuple(row[key]) if row.get(key) is not None else None
    data["ok"], data["end_of_text"] = bool(row.get("ok")), bool(row.get("end_of_text"))
    data["noise"] = NoiseSample.from_dict(row.get("noise"))
    data["pair"] = int(row["repeat"]) if row.get("mode") in PAIR_MODES and row.get("repeat") is not None else None
    return Measurement(**data)


def measurements_of(rows: Sequence[dict[str, Any]]) -> list[Measurement]:
    return [measurement_of(r) for r in rows]


JSON_COLUMNS = {"argv", "stats", "settings", "provenance", "summary", "tokens", "noise", "drafted_by_position",
                "accepted_by_position", "counts", "costs", "forecast"}
WINDOW_COLUMNS = ("url", "started_at", "finished_at", "speculation", "draft_max", "threads", "target_sha256",
                  "draft_sha256", "counts", "costs", "forecast", "provenance")
BOOL_COLUMNS = {"ok", "end_of_text"}


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
        data["argv"] = json.dumps(data["argv"])
        data["stats"] = json.dumps(data["stats"]) if data["stats"] is not None else None
        data["tokens"] = json.dumps(data["tokens"]) if data["tokens"] is not None else None
        data["noise"] = json.dumps(data["noise"]) if data["noise"] is not None else None
        for key in ("drafted_by_position", "accepted_by_position"):
            data[key] = json.dumps(data[key]) if data[key] is not None else None
        data["ok"] = int(data["ok"])
        data["end_of_text"] = int(data["end_of_text"])
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
        where, args = [], []
        for column, value in (("url", url), ("target_sha256", target_sha256), ("draft_sha256", draft_sha256)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = "SELECT * FROM watch_windows" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_decode(r) for r in self._query(sql, args)]

    def runs(self, experiment: str | None = None, group_id: str | None = None, status: str | None = None,
             limit: int | None = None, ids: Sequence[int] | None = None, *, kind: str | None = None,
             prompt_id: str | None = None) -> list[dict[str, Any]]:
        """Stored runs, newest first, filtered by whichever arguments are given."""
        self.mark_stale_running()
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("experiment", experiment), ("group_id", group_id), ("status", status), ("kind", kind),
                              ("prompt_id", prompt_id)):
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

    def finished_point(self, group_id: str, point_key: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM runs WHERE group_id = ? AND point_key = ? AND status IN ('ok', 'differs') ORDER BY id DESC LIMIT 1",
                           (group_id, point_key))
        return _decode(rows[0]) if rows else None

    def finished_prompt(self, group_id: str, point_key: str | None, prompt_id: str) -> dict[str, Any] | None:
        """The newest finished run of one prompt of a prompt set at one point (``point_key`` None:
        a run outside a sweep's points), for resuming a prompt set prompt by prompt."""
        rows = self._query("SELECT * FROM runs WHERE group_id = ? AND prompt_id = ? AND point_key IS ? AND status IN ('ok', 'differs')"
                           " ORDER BY id DESC LIMIT 1", (group_id, prompt_id, point_key))
        return _decode(rows[0]) if rows else None

    def _query(self, sql: str, args: Sequence[Any]) -> list[sqlite3.Row]:
        try:
            return self.db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, exc, "read") from exc

    # --- export ------------------------------------------------------------------------------

    def export(self, fmt: str, experiment: str | None = None) -> str:
        runs = list(reversed(self.runs(experiment)))
        if fmt == "json":
            for r in runs:
                r["measurements"] = self.measurements(r["id"])
            return json.dumps(runs, indent=2, sort_keys=True)
        if fmt == "csv":
            columns = ["run_id", "experiment", "case_name", "kind", "group_kind", "group_id", "prompt_id", "category", "status",
                       "started_at", "engine", "engine_version", "accel", "machine", "target", "draft",
                       "draft_max"] + [
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
        raise LlamaspecError(f"unknown export format {fmt!r}", hint="use csv or json")


def engine_of(provenance: dict[str, Any]) -> dict[str, Any]:
    """A run's provenance of its engine, with its ``name`` (what an experiment's ``engine:`` names),
    however it was stored: ``provenance["engine"]`` holds the name since the engine's own provenance
    and its name were merged; before, the name was ``provenance["backend"]``, and before 0.2 the
    engine's provenance was under ``"llamacpp"``."""
    engine = provenance.get("engine") or provenance.get("llamacpp") or {}
    if not isinstance(engine, dict):
        return {}
    if "name" not in engine and isinstance(provenance.get("backend"), str):
        return {**engine, "name": provenance["backend"]}
    return engine


def built_from(run: dict[str, Any]) -> str | None:
    """The source tree a stored run's engine was built from (``Capabilities.built_from``; its
    ``engine_version`` is that tree's commit), None for an engine in a library. Runs stored before
    engines declared it: the engines that recorded a commit were the ones built from llama.cpp."""
    engine = engine_of(run.get("provenance") or {})
    if "built_from" in engine:
        found = engine["built_from"]
        return str(found) if found else None
    return "llama.cpp" if run.get("engine_version") else None


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
