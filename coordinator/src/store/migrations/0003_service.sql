-- gpufleet store, schema version 3: the coordinator as a service. Schedules, which process owns a
-- running campaign, environment sets, baseline segments, regression checks and alerts.

-- A cron schedule of a suite. `last_slot` is the latest slot already handled (fired, or passed over
-- because catch_up is off), so a restart never fires a slot twice.
CREATE TABLE schedules (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    cron        TEXT    NOT NULL,
    spec_json   TEXT    NOT NULL,
    catch_up    INTEGER NOT NULL DEFAULT 1 CHECK (catch_up IN (0, 1)),
    created_at  REAL    NOT NULL,
    last_slot   REAL
);

-- Campaigns started by a schedule carry its name and slot; the unique index is what makes "never
-- twice" hold even with two coordinators on one file. `owner` (`pid@host`) and `heartbeat_at` say
-- which process executes a running campaign, so a restarted coordinator can tell an orphan (owner
-- dead or silent) from a campaign another process is still running.
ALTER TABLE campaigns ADD COLUMN schedule_name TEXT;
ALTER TABLE campaigns ADD COLUMN slot REAL;
ALTER TABLE campaigns ADD COLUMN owner TEXT;
ALTER TABLE campaigns ADD COLUMN heartbeat_at REAL;
CREATE UNIQUE INDEX campaigns_one_per_slot ON campaigns (schedule_name, slot)
    WHERE schedule_name IS NOT NULL AND slot IS NOT NULL;

-- A confirmation rerun is a job of the same campaign pointing at the suspect result.
ALTER TABLE jobs ADD COLUMN confirms_result_id INTEGER REFERENCES results (id);

-- `segment`: a hash of the environment fingerprint (agent, driver and runtime versions, OS kernel,
-- kernel sources, env overrides, power cap). Baselines never cross a segment boundary.
ALTER TABLE results ADD COLUMN segment TEXT NOT NULL DEFAULT '';
CREATE INDEX results_series ON results (device_row_id, spec_key, segment, id);

-- One regression verdict per checked result (`assessment_json` holds the figures). `suspect` rows
-- wait for their confirmation rerun, then become `confirmed` or `not_confirmed`.
CREATE TABLE checks (
    result_id              INTEGER PRIMARY KEY REFERENCES results (id) ON DELETE CASCADE,
    verdict                TEXT    NOT NULL
                           CHECK (verdict IN ('no_verdict', 'stable', 'suspect', 'confirmed',
                                              'not_confirmed')),
    direction              TEXT CHECK (direction IN ('regression', 'improvement')),
    reason                 TEXT    NOT NULL,
    assessment_json        TEXT    NOT NULL,
    confirmation_result_id INTEGER REFERENCES results (id),
    created_at             REAL    NOT NULL,
    updated_at             REAL    NOT NULL
);

-- A confirmed change: the suspect result and its confirmation moved the same way beyond the bound.
CREATE TABLE alerts (
    id                     INTEGER PRIMARY KEY,
    result_id              INTEGER NOT NULL UNIQUE REFERENCES results (id) ON DELETE RESTRICT,
    confirmation_result_id INTEGER NOT NULL REFERENCES results (id) ON DELETE RESTRICT,
    campaign_id            INTEGER REFERENCES campaigns (id) ON DELETE RESTRICT,
    device_row_id          INTEGER REFERENCES devices (id) ON DELETE RESTRICT,
    device_id              TEXT    NOT NULL,
    spec_key               TEXT    NOT NULL,
    segment                TEXT    NOT NULL,
    direction              TEXT    NOT NULL CHECK (direction IN ('regression', 'improvement')),
    metric_unit            TEXT    NOT NULL,
    before_value           REAL    NOT NULL,
    after_value            REAL    NOT NULL,
    change_pct             REAL    NOT NULL,
    bound_pct              REAL    NOT NULL,
    baseline_points        INTEGER NOT NULL,
    created_at             REAL    NOT NULL
);
CREATE INDEX alerts_by_time ON alerts (created_at);
