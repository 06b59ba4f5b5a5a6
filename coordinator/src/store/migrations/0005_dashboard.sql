-- gpufleet store, schema version 5: what the dashboard needs.
--
-- An alert can be acknowledged (from the /alerts page, with the admin token): it then no longer
-- counts as open on the fleet page. `acknowledged_at` is unix seconds, NULL while open.
ALTER TABLE alerts ADD COLUMN acknowledged_at REAL;
-- The history page and the compare matrix select one series: a spec on one device of one agent.
CREATE INDEX IF NOT EXISTS results_series ON results (agent_id, device_id, spec_key, created_at);
