-- gpufleet store, schema version 13 in PostgreSQL's dialect: `checks_by_time` orders by
-- (updated_at, result_id), the checks listing's order and cursor.
--
-- Why: a night's verdicts share one `updated_at` (2,700 of them in the generator's history), and
-- an index on `updated_at` alone left PostgreSQL to sort that group for every page of
-- `/api/checks` (20 ms a page at a million results, against 2 ms on SQLite, whose index ends in
-- the rowid). With the result id in the index, a page reads its rows in order and stops.
DROP INDEX checks_by_time;
CREATE INDEX checks_by_time ON checks (updated_at, result_id);
