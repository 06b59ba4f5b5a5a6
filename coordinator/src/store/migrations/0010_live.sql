-- gpufleet store, schema version 10: where a dial-in agent's live power can be read.
--
-- A dial-in agent's power samples reach only the serve that holds its stream. That serve records
-- the base URL of its HTTP API here when the agent attaches (and clears it when the agent
-- detaches), so `gpufleet power AGENT` run beside the database knows which serve to ask.
ALTER TABLE agents ADD COLUMN api_url TEXT;
