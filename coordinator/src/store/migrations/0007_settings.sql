-- gpufleet store, schema version 7: measurement settings stored in the meaning they are read in.
--
-- Until version 6 a stored 0 in a run's settings meant "the agent's default": the agent replaced a
-- 0 `warmup`, `min_iterations`, `min_seconds`, `max_iterations`, `timeout_s` or `max_seconds` (and
-- a 0 `target_ci_pct` on the wire) with its own value. From version 7 a setting that is not given
-- is null, and a 0 is a 0. This step rewrites what SQL can say without knowing the defaults: a
-- schedule's `timeout_s` override of 0 becomes "not given". The Rust step of this migration
-- (`migrations/settings.rs`) rewrites the rest: each queued or finished job's spec to the resolved
-- values it ran with (it needs the one place the defaults are written), and a campaign's runs and
-- overrides to "not given" where they said 0.
UPDATE schedules
   SET spec_json = json_set(spec_json, '$.timeout_s', NULL)
 WHERE json_valid(spec_json)
   AND json_type(spec_json, '$.timeout_s') IN ('integer', 'real')
   AND json_extract(spec_json, '$.timeout_s') = 0;
