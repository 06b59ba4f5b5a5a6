-- gpufleet store, schema version 9: a noise flag that means something.
--
-- Beside the plain CV, a result carries the robust figures of its iteration times: the robust CV
-- (1.4826 × MAD / median), the quartiles, Tukey's upper fence (Q3 + 1.5 × IQR) and how many
-- iterations lie above it. `noisy` is now 1 when the robust spread (robust CV, or the quartile CV
-- IQR / 1.349 / median) is above 12.5% or the median's interval is wider than its target
-- (gpufleet_kernels::NoiseFigures): a long tail of slow iterations no longer makes a result noisy.
-- NULL for results stored before this version, and from agents that do not send them.
ALTER TABLE results ADD COLUMN robust_cv REAL;
ALTER TABLE results ADD COLUMN p25_s REAL;
ALTER TABLE results ADD COLUMN p75_s REAL;
ALTER TABLE results ADD COLUMN upper_fence_s REAL;
ALTER TABLE results ADD COLUMN outliers_high INTEGER;
-- Results stored before were noisy by their plain CV too; judged again by what they carry, only
-- an interval wider than its target keeps them noisy (they have no robust figures).
UPDATE results SET noisy = 0
WHERE noisy = 1
  AND NOT (target_ci_pct > 0 AND median_s > 0 AND ci_high_s >= ci_low_s
           AND (ci_high_s - ci_low_s) / 2.0 / median_s * 100.0 > target_ci_pct);
