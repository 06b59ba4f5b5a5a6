-- gpufleet store, schema version 8: a year of results. Every hot read is bounded by an index or
-- by a small table kept in step with `results` by triggers, so it costs the same at a thousand
-- results as at a million. The triggers run inside the inserting transaction: a result and its
-- counters are committed together or not at all, whichever code path inserts it.

-- Listings newest first, keyset-paginated on (created_at, id): `id` is the rowid, which every
-- index entry carries, so ORDER BY created_at DESC, id DESC reads this index backwards.
CREATE INDEX results_by_time ON results (created_at);

-- One series (a spec on one device of one agent) in time order: the history page, and the newest
-- match per series for the compare matrix. Migration 5 meant to add this index but reused the
-- name `results_series`, which migration 3 had already given to the regression index.
CREATE INDEX results_by_series ON results (agent_id, device_id, spec_key, created_at);

-- The newest result of each series (agent, device id, spec key; the spec key carries the
-- environment set), for the compare matrix: a few thousand rows however long the history.
CREATE TABLE latest_results (
    agent_id   INTEGER NOT NULL,
    device_id  TEXT    NOT NULL,
    spec_key   TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    result_id  INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
    PRIMARY KEY (agent_id, device_id, spec_key)
) WITHOUT ROWID;
CREATE INDEX latest_results_by_result ON latest_results (result_id);

INSERT INTO latest_results (agent_id, device_id, spec_key, created_at, result_id)
SELECT agent_id, device_id, spec_key, created_at, id FROM (
    SELECT agent_id, device_id, spec_key, created_at, id, row_number() OVER (
        PARTITION BY agent_id, device_id, spec_key ORDER BY created_at DESC, id DESC) AS newest
    FROM results)
WHERE newest = 1;

-- A result stored with an older time than the series' latest (an import of old results) leaves
-- the latest alone; ties go to the later id, as the listing's order does.
CREATE TRIGGER results_latest AFTER INSERT ON results BEGIN
    INSERT INTO latest_results (agent_id, device_id, spec_key, created_at, result_id)
    VALUES (new.agent_id, new.device_id, new.spec_key, new.created_at, new.id)
    ON CONFLICT (agent_id, device_id, spec_key) DO UPDATE
       SET created_at = excluded.created_at, result_id = excluded.result_id
     WHERE excluded.created_at > latest_results.created_at
        OR (excluded.created_at = latest_results.created_at
            AND excluded.result_id > latest_results.result_id);
END;

-- Results by status, for /metrics.
CREATE TABLE result_counts (
    status TEXT    PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO result_counts (status, n) SELECT status, count(*) FROM results GROUP BY status;
CREATE TRIGGER results_count AFTER INSERT ON results BEGIN
    INSERT INTO result_counts (status, n) VALUES (new.status, 1)
    ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER results_uncount AFTER DELETE ON results BEGIN
    UPDATE result_counts SET n = n - 1 WHERE status = old.status;
END;

-- A campaign's jobs by state and results by status (`kind` 'job' or 'result'), for the campaign
-- listings.
CREATE TABLE campaign_counts (
    campaign_id INTEGER NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    kind        TEXT    NOT NULL CHECK (kind IN ('job', 'result')),
    state       TEXT    NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, kind, state)
) WITHOUT ROWID;
INSERT INTO campaign_counts (campaign_id, kind, state, n)
SELECT campaign_id, 'job', state, count(*) FROM jobs GROUP BY campaign_id, state;
INSERT INTO campaign_counts (campaign_id, kind, state, n)
SELECT campaign_id, 'result', status, count(*) FROM results
 WHERE campaign_id IS NOT NULL GROUP BY campaign_id, status;
CREATE TRIGGER jobs_count AFTER INSERT ON jobs BEGIN
    INSERT INTO campaign_counts (campaign_id, kind, state, n) VALUES (new.campaign_id, 'job', new.state, 1)
    ON CONFLICT (campaign_id, kind, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER jobs_recount AFTER UPDATE OF state, campaign_id ON jobs
WHEN old.state IS NOT new.state OR old.campaign_id IS NOT new.campaign_id BEGIN
    UPDATE campaign_counts SET n = n - 1
     WHERE campaign_id = old.campaign_id AND kind = 'job' AND state = old.state;
    INSERT INTO campaign_counts (campaign_id, kind, state, n) VALUES (new.campaign_id, 'job', new.state, 1)
    ON CONFLICT (campaign_id, kind, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER jobs_uncount AFTER DELETE ON jobs BEGIN
    UPDATE campaign_counts SET n = n - 1
     WHERE campaign_id = old.campaign_id AND kind = 'job' AND state = old.state;
END;
CREATE TRIGGER results_campaign_count AFTER INSERT ON results WHEN new.campaign_id IS NOT NULL BEGIN
    INSERT INTO campaign_counts (campaign_id, kind, state, n)
    VALUES (new.campaign_id, 'result', new.status, 1)
    ON CONFLICT (campaign_id, kind, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER results_campaign_uncount AFTER DELETE ON results WHEN old.campaign_id IS NOT NULL BEGIN
    UPDATE campaign_counts SET n = n - 1
     WHERE campaign_id = old.campaign_id AND kind = 'result' AND state = old.status;
END;

-- Each agent's latest campaign (the fleet page) by max(campaign_id) per agent, read off the index.
CREATE INDEX jobs_by_agent ON jobs (agent_id, campaign_id);

-- Verdicts newest first, keyset-paginated on (updated_at, result_id).
CREATE INDEX checks_by_time ON checks (updated_at);

-- Retention (`gpufleet db compact`): when a result's raw iteration times and its power trace were
-- dropped. Every summary stays; NULL while the raw data is kept.
ALTER TABLE results ADD COLUMN samples_compacted_at REAL;
ALTER TABLE results ADD COLUMN power_compacted_at REAL;
