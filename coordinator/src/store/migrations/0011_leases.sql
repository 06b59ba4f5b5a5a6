-- gpufleet store, schema version 11: job leases, for several `gpufleet serve` on one database.
--
-- A job is run by the process that claimed it: `claimed_by` is that process (`pid@host`, as
-- campaigns' `owner`) and `lease_until` (unix seconds) how long the claim holds without being
-- renewed. The claimer renews its leases with its heartbeat; a running job whose lease ran out,
-- or whose claimer is known dead, is interrupted and claimed again. Both are NULL for a job never
-- claimed, and for jobs written before version 11.
--
-- `attached_to` is the serve (`pid@host`) holding a dial-in agent's stream while it holds it:
-- only that serve can run the agent's jobs, so only it claims them.
ALTER TABLE jobs ADD COLUMN claimed_by TEXT;
ALTER TABLE jobs ADD COLUMN lease_until REAL;
ALTER TABLE agents ADD COLUMN attached_to TEXT;
