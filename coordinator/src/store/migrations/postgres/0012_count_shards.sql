-- gpufleet store, schema version 12 in PostgreSQL's dialect: the counters the triggers keep
-- (result_counts, campaign_counts) are split in shards, picked by the counted row's id.
--
-- Why: PostgreSQL writes a new version of a row at each UPDATE, and a transaction that updates
-- one row k times leaves a chain of k versions that each later update walks (none is dead before
-- the commit). A transaction that stores many results (a night of `seed-history`, `db copy`, a
-- large delete) bumped the same few counter rows thousands of times: quadratic, 50 s for a night
-- of 2,700 results. With the increments spread over shards each chain is k / shards long; the
-- readers add the shards up (the totals are what they read: a shard alone may go below 0).
-- Concurrent writers of several serves also wait on each other's counter row less.
-- result_counts has 1024 shards (one row per status and shard: a few thousand rows at most,
-- summed by /metrics), campaign_counts 16 per (campaign, kind, state).
ALTER TABLE result_counts ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE result_counts DROP CONSTRAINT result_counts_pkey;
ALTER TABLE result_counts ADD PRIMARY KEY (status, shard);
ALTER TABLE campaign_counts ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE campaign_counts DROP CONSTRAINT campaign_counts_pkey;
ALTER TABLE campaign_counts ADD PRIMARY KEY (campaign_id, kind, state, shard);

-- The one place each counter's shard is picked and bumped: `id` is the counted row's, `delta` +1
-- or -1. A decrement makes its shard when missing: a row counted before this migration sits in
-- shard 0, and its own shard's total then goes below 0 while the sum stays right.
CREATE FUNCTION gpufleet_count_result(p_status text, p_id bigint, p_delta bigint) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO result_counts (status, shard, n) VALUES (p_status, p_id % 1024, p_delta)
    ON CONFLICT (status, shard) DO UPDATE SET n = result_counts.n + excluded.n;
$$;
CREATE FUNCTION gpufleet_count_campaign(p_campaign bigint, p_kind text, p_state text, p_id bigint,
                                        p_delta bigint) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO campaign_counts (campaign_id, kind, state, shard, n)
    VALUES (p_campaign, p_kind, p_state, p_id % 16, p_delta)
    ON CONFLICT (campaign_id, kind, state, shard) DO UPDATE SET n = campaign_counts.n + excluded.n;
$$;

CREATE OR REPLACE FUNCTION gpufleet_results_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO latest_results (agent_id, device_id, spec_key, created_at, result_id)
    VALUES (new.agent_id, new.device_id, new.spec_key, new.created_at, new.id)
    ON CONFLICT (agent_id, device_id, spec_key) DO UPDATE
       SET created_at = excluded.created_at, result_id = excluded.result_id
     WHERE excluded.created_at > latest_results.created_at
        OR (excluded.created_at = latest_results.created_at
            AND excluded.result_id > latest_results.result_id);
    PERFORM gpufleet_count_result(new.status, new.id, 1);
    IF new.campaign_id IS NOT NULL THEN
        PERFORM gpufleet_count_campaign(new.campaign_id, 'result', new.status, new.id, 1);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION gpufleet_results_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM gpufleet_count_result(old.status, old.id, -1);
    IF old.campaign_id IS NOT NULL THEN
        PERFORM gpufleet_count_campaign(old.campaign_id, 'result', old.status, old.id, -1);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION gpufleet_jobs_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM gpufleet_count_campaign(old.campaign_id, 'job', old.state, old.id, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM gpufleet_count_campaign(new.campaign_id, 'job', new.state, new.id, 1);
    END IF;
    RETURN NULL;
END $$;
