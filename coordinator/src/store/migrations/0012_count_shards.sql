-- gpufleet store, schema version 12: nothing changes in SQLite.
--
-- In PostgreSQL the counters the triggers keep (result_counts, campaign_counts) are split in
-- shards (postgres/0012_count_shards.sql says why: a transaction updating one row many times is
-- quadratic there). SQLite updates a row in place, so its counters stay one row per key; the
-- readers add up the rows of a key on both engines, which here is the one row.
SELECT 1;
