-- gpufleet store, schema version 14 in PostgreSQL's dialect (the same as SQLite's): indexes for the
-- regression check's per-night queries, whose cost grew with the history.
--
-- Why: at 600k results a night's check read every suspect through a pass over `checks` (a row per
-- result) and SQLite built automatic indexes over `jobs` and `results` for each call; each baseline
-- looked for its series' last alert through every alert with a smaller result id (100k alerts after
-- a driver change on many hosts made that a pass per result checked). Inserts through the campaign
-- path fell from 4,400 to 1,900 results/s between an empty file and 800k results.
CREATE INDEX checks_suspect ON checks (result_id) WHERE verdict = 'suspect';
CREATE INDEX jobs_by_confirms ON jobs (confirms_result_id) WHERE confirms_result_id IS NOT NULL;
CREATE INDEX alerts_by_series ON alerts (device_row_id, spec_key, segment, result_id);
