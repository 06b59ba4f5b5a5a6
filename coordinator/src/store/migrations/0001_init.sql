-- gpufleet store, schema version 1: agents, devices, campaigns, jobs, results and their raw samples.
--
-- Runs inside the migration transaction; `PRAGMA user_version` is set by the migration runner, not here.
-- Timestamps are unix seconds (REAL). JSON columns hold JSON text validated by the store before writing.

-- "GPFL" as a big-endian i32 (header offset 68): marks the file as gpufleet's so `Store::open` can tell it from another
-- application's SQLite database.
PRAGMA application_id = 1196443212;

-- Agents are never deleted: `removed_at` hides them from listings while their results stay
-- attached to them (see the module docs of `store`).
CREATE TABLE agents (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    url         TEXT    NOT NULL,
    token       TEXT,
    added_at    REAL    NOT NULL,
    removed_at  REAL
);

CREATE TABLE devices (
    id          INTEGER PRIMARY KEY,
    agent_id    INTEGER NOT NULL REFERENCES agents (id) ON DELETE RESTRICT,
    device_id   TEXT    NOT NULL,
    backend     TEXT    NOT NULL,
    vendor      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    arch        TEXT    NOT NULL,
    pci_bus_id  TEXT    NOT NULL,
    info_json   TEXT    NOT NULL,
    first_seen  REAL    NOT NULL,
    last_seen   REAL    NOT NULL,
    UNIQUE (agent_id, device_id)
);

CREATE TABLE campaigns (
    id          INTEGER PRIMARY KEY,
    suite       TEXT    NOT NULL,
    description TEXT    NOT NULL,
    state       TEXT    NOT NULL
                CHECK (state IN ('running', 'done', 'failed', 'interrupted')),
    created_at  REAL    NOT NULL,
    finished_at REAL,
    spec_json   TEXT    NOT NULL
);

CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY,
    campaign_id   INTEGER NOT NULL REFERENCES campaigns (id) ON DELETE RESTRICT,
    agent_id      INTEGER NOT NULL REFERENCES agents (id) ON DELETE RESTRICT,
    device_row_id INTEGER REFERENCES devices (id) ON DELETE RESTRICT,
    spec_key      TEXT    NOT NULL,
    spec_json     TEXT    NOT NULL,
    run_id        TEXT    NOT NULL UNIQUE,
    state         TEXT    NOT NULL
                  CHECK (state IN ('queued', 'running', 'done', 'failed', 'interrupted')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    error         TEXT,
    updated_at    REAL    NOT NULL
);

CREATE INDEX jobs_by_campaign ON jobs (campaign_id, state);

CREATE TABLE results (
    id               INTEGER PRIMARY KEY,
    run_id           TEXT    NOT NULL UNIQUE,
    campaign_id      INTEGER REFERENCES campaigns (id) ON DELETE RESTRICT,
    job_id           INTEGER REFERENCES jobs (id) ON DELETE RESTRICT,
    agent_id         INTEGER NOT NULL REFERENCES agents (id) ON DELETE RESTRICT,
    device_row_id    INTEGER REFERENCES devices (id) ON DELETE RESTRICT,
    device_id        TEXT    NOT NULL,
    backend          TEXT    NOT NULL,
    spec_key         TEXT    NOT NULL,
    kernel           TEXT    NOT NULL,
    variant          TEXT    NOT NULL,
    params_json      TEXT    NOT NULL,
    dtype            TEXT    NOT NULL,
    mode             TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    message          TEXT    NOT NULL,
    metric_kind      TEXT,
    metric_unit      TEXT,
    metric_value     REAL,
    higher_is_better INTEGER CHECK (higher_is_better IN (0, 1)),
    pct_of_peak      REAL,
    median_s         REAL,
    p10_s            REAL,
    p90_s            REAL,
    min_s            REAL,
    max_s            REAL,
    mean_s           REAL,
    stddev_s         REAL,
    cv               REAL,
    iterations       INTEGER NOT NULL CHECK (iterations >= 0),
    validation_json  TEXT    NOT NULL,
    config_json      TEXT    NOT NULL,
    fingerprint_json TEXT    NOT NULL,
    stderr_tail      TEXT    NOT NULL,
    signal           INTEGER,
    started_at       REAL    NOT NULL,
    wall_s           REAL    NOT NULL,
    created_at       REAL    NOT NULL
);

-- History and regression windows: the same work on the same device, in time order.
CREATE INDEX results_by_key_device_time ON results (spec_key, device_row_id, created_at);
CREATE INDEX results_by_campaign ON results (campaign_id);

-- Raw per-iteration device times, kept apart so listings never read them unless asked.
CREATE TABLE result_samples (
    result_id INTEGER PRIMARY KEY REFERENCES results (id) ON DELETE CASCADE,
    times     BLOB    NOT NULL CHECK (length(times) % 8 = 0)
);
