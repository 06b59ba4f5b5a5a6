-- gpufleet store, schema version 11 in PostgreSQL's dialect: job leases (see ../0011_leases.sql).
ALTER TABLE jobs ADD COLUMN claimed_by text COLLATE "C";
ALTER TABLE jobs ADD COLUMN lease_until double precision;
ALTER TABLE agents ADD COLUMN attached_to text COLLATE "C";
