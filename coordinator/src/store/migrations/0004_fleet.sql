-- gpufleet store, schema version 4: agents that dial in.
--
-- `kind` says how the coordinator reaches the agent: `direct` (it dials `url`) or `dial-in` (the
-- agent dials `gpufleet serve --fleet-listen`; `url` is empty). A dial-in agent's enrolment token
-- is stored only as its SHA-256 (`token_hash`, lowercase hex); `token` stays NULL for it.
-- `connected_since` is set while a serve holds the agent's stream (NULL otherwise), `last_seen`
-- is refreshed while it does (a stale `last_seen` with a `connected_since` means the serve holding
-- it died), and `remote_addr`, `agent_version` and `info_json` (its last Hello's AgentInfo, so a
-- process other than the serve can plan a campaign for it) are what it last said.
-- A direct agent at an https:// URL is verified by `tls_pin` (SHA-256 of its certificate, hex)
-- or `tls_ca` (a CA certificate, PEM).
ALTER TABLE agents ADD COLUMN kind TEXT NOT NULL DEFAULT 'direct' CHECK (kind IN ('direct', 'dial-in'));
ALTER TABLE agents ADD COLUMN token_hash TEXT;
ALTER TABLE agents ADD COLUMN connected_since REAL;
ALTER TABLE agents ADD COLUMN last_seen REAL;
ALTER TABLE agents ADD COLUMN remote_addr TEXT;
ALTER TABLE agents ADD COLUMN agent_version TEXT;
ALTER TABLE agents ADD COLUMN info_json TEXT;
ALTER TABLE agents ADD COLUMN tls_pin TEXT;
ALTER TABLE agents ADD COLUMN tls_ca TEXT;
