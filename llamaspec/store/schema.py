"""The results store's schema: its tables, grown by an append-only list of migrations, and which
columns hold JSON, flags or a ``llamaspec watch`` window.

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
``results.Store`` applies them.
"""

from __future__ import annotations

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
    # A workload study measures a prompt in blocks (B S1..Sk B): each speculative run is divided by the
    # baselines of its own block, measured around it (llamaspec.measure.contract.Measurement.block).
    "ALTER TABLE measurements ADD COLUMN block TEXT; CREATE INDEX measurements_by_block ON measurements(block);",
)


JSON_COLUMNS = {"argv", "stats", "settings", "provenance", "summary", "tokens", "noise", "drafted_by_position",
                "accepted_by_position", "counts", "costs", "forecast"}
WINDOW_COLUMNS = ("url", "started_at", "finished_at", "speculation", "draft_max", "threads", "target_sha256",
                  "draft_sha256", "counts", "costs", "forecast", "provenance")
BOOL_COLUMNS = {"ok", "end_of_text"}
