-- gpufleet store, schema version 2: energy figures of a result and the power samples of its run.
--
-- The figures the comparison and the dashboard sort by get their own columns; the whole Energy
-- message (method, idle watts, power-run note, ...) is kept as JSON next to them.

ALTER TABLE results ADD COLUMN energy_json     TEXT NOT NULL DEFAULT 'null';
ALTER TABLE results ADD COLUMN energy_j        REAL;
ALTER TABLE results ADD COLUMN avg_watts       REAL;
ALTER TABLE results ADD COLUMN metric_per_watt REAL;
ALTER TABLE results ADD COLUMN joules_per_unit REAL;

-- The power trace of a run's device from the idle baseline to the kernel window's end, in the
-- agent's order. monotonic_ns is the agent host's CLOCK_MONOTONIC (comparable with the result's
-- window in fingerprint/run timing), wall_unix_s its wall clock.
CREATE TABLE power_samples (
    result_id       INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL CHECK (seq >= 0),
    source          TEXT    NOT NULL,
    scope           TEXT    NOT NULL,
    pci_bus_id      TEXT    NOT NULL,
    monotonic_ns    INTEGER NOT NULL,
    wall_unix_s     REAL    NOT NULL,
    watts           REAL,
    energy_j        REAL,
    temperature_c   REAL,
    sclk_mhz        INTEGER,
    mclk_mhz        INTEGER,
    utilization_pct REAL,
    PRIMARY KEY (result_id, seq)
) WITHOUT ROWID;
