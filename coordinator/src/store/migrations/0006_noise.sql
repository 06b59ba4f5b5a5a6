-- gpufleet store, schema version 6: how far a result can be trusted.
--
-- Every result carries the 95% confidence interval of its median (seconds, NULL for results
-- stored before agents measured it) and the interval target it was measured to (percent of the
-- median, 0 for none). `noisy` is 1 when its CV is above 10% or its interval is wider than the
-- target: such a result is marked in every view, never the best of a row and not part of a
-- regression baseline. Results stored before this version are noisy by their CV alone.
ALTER TABLE results ADD COLUMN ci_low_s REAL;
ALTER TABLE results ADD COLUMN ci_high_s REAL;
ALTER TABLE results ADD COLUMN target_ci_pct REAL;
ALTER TABLE results ADD COLUMN noisy INTEGER NOT NULL DEFAULT 0;
UPDATE results SET noisy = 1 WHERE cv > 0.10;
-- Where the peak behind pct_of_peak came from ("spec table", "cpu table: …", "cpuinfo: …"), so a
-- figure above 100% can name the peak that is wrong. Empty for older results.
ALTER TABLE results ADD COLUMN peak_source TEXT NOT NULL DEFAULT '';
