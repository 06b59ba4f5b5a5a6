-- gpufleet store, schema version 13: nothing changes in SQLite.
--
-- PostgreSQL's `checks_by_time` gains `result_id` (postgres/0013_checks_order.sql). Here the index
-- on `updated_at` already holds the rowid, which is `result_id`, so it gives the checks listing's
-- order (time, then result id) without a sort.
SELECT 1;
