//! Row kernels (softmax and the normalisations) as every GPU planner launches them: the entry
//! point, inputs and epsilon from the family's definition in the catalog, the group size and
//! whether a row stays in registers, and the split of a few wide rows over several groups.

use super::{Arg, Unsupported, buffers, int_args, pow2_floor};
use gpufleet_kernels::{Problem, RowKernel, SplitStats};
use std::collections::BTreeMap;

/// A row kernel (softmax and the normalisations) as every GPU planner launches it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowLaunch {
    /// Entry-point stem, from the family's definition ([`RowKernel::stem`]).
    pub stem: &'static str,
    /// Input buffers read: the rows, then gamma/beta as the kernel needs.
    pub inputs: usize,
    pub rows: usize,
    pub cols: usize,
    /// The normalisations' epsilon; softmax has none.
    pub eps: Option<f32>,
    /// The partials of a split row, for kernels whose rows may split ([`RowKernel::split`]).
    pub split_stats: Option<SplitStats>,
}

impl RowLaunch {
    /// The configuration its plan records: the entry point (`("kernel", …)` or `("shader", …)`),
    /// the group size, the number of groups, and whether a row is held in registers (`chunks` > 0).
    pub fn config(
        &self,
        entry: (&str, String),
        local: usize,
        groups: usize,
        chunks: usize,
    ) -> BTreeMap<String, String> {
        let in_registers = if chunks > 0 { "yes" } else { "no" };
        crate::backend::config(&[
            entry,
            ("local", local.to_string()),
            ("groups", groups.to_string()),
            ("row_in_registers", in_registers.into()),
        ])
    }

    /// The kernel arguments of an OpenCL or HIP launch of the one-group kernel: the buffers, the
    /// rows and columns as `int`s (`largest` names their bound), then the epsilon.
    ///
    /// # Errors
    /// [`Unsupported`] when a size exceeds an `int`.
    pub fn args(&self, problem: &Problem, largest: &str) -> Result<Vec<Arg>, Unsupported> {
        let mut args = buffers(self.inputs, Arg::Input, Arg::Output);
        let sizes = [("rows", self.rows), ("cols", self.cols)];
        args.extend(int_args(problem, &sizes, largest, Arg::Int)?);
        args.extend(self.eps.map(Arg::Float));
        Ok(args)
    }

    /// How this kernel's rows are split over several groups, or `None` for one group per row:
    /// [`row_split`] decides, and only for the kernels whose family definition says their rows
    /// split (softmax and layernorm, whose one-group kernels read a row three times), on a device
    /// whose groups (at most `cap` invocations) hold [`SPLIT_GROUP`].
    pub fn split(&self, chunks: usize, compute_units: usize, cap: usize) -> Option<RowSplit> {
        let split = row_split(self.rows, self.cols, chunks, compute_units);
        let splits = self.split_stats.is_some();
        (split > 1 && splits && SPLIT_GROUP <= cap).then(|| RowSplit {
            split,
            len: self.cols.div_ceil(split),
            groups: self.rows * split,
        })
    }

    /// [`RowKernel::config`] of a split plan, with the groups per row.
    pub fn split_config(&self, entry: (&str, String), s: &RowSplit) -> BTreeMap<String, String> {
        let mut config = self.config(entry, SPLIT_GROUP, s.groups, 0);
        config.insert("groups_per_row".into(), s.split.to_string());
        config
    }
}

/// A split of few wide rows (see [`RowKernel::split`]): `split` groups of [`SPLIT_GROUP`] per row,
/// group g on row g / split and columns [s·len, min((s+1)·len, cols)) with s = g % split; a
/// statistics launch writes two partials per chunk into scratch 0, an apply launch merges them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowSplit {
    pub split: usize,
    /// Columns per chunk.
    pub len: usize,
    /// Groups in all: rows × split.
    pub groups: usize,
}

impl RowSplit {
    /// Bytes of the partials (two f32 per chunk: max and Σ exp for softmax, mean and Σ squared
    /// deviations for layernorm).
    pub fn scratch_bytes(&self) -> usize {
        4 * 2 * self.groups
    }
}

/// `kernel` over `problem`'s rows.
pub fn rows(problem: &Problem, kernel: RowKernel) -> RowLaunch {
    RowLaunch {
        stem: kernel.stem(),
        inputs: kernel.inputs(),
        rows: crate::backend::param(problem, "rows"),
        cols: crate::backend::param(problem, "cols"),
        eps: kernel.eps(),
        split_stats: kernel.split(),
    }
}

/// Row elements a work-item may keep in registers; longer rows are read again from cache.
pub const ROW_CHUNKS_MAX: usize = 16;
/// From this many columns on, the row kernels use 1024 work-items where the device allows.
pub const WIDE_ROW_COLS: usize = 8192;

/// Work-group size of a row kernel over `cols` columns, at most `cap` (a power of two), and the
/// chunks of that size a work-item keeps in registers (0: the row is read again from cache).
pub fn row_group(cols: usize, cap: usize) -> (usize, usize) {
    let mut group = if cols >= WIDE_ROW_COLS { 1024 } else { 256 }.min(cap);
    // Short rows: no more work-items than columns, but a warp's worth.
    while group > 32 && group / 2 >= cols {
        group /= 2;
    }
    let chunks = cols.div_ceil(group);
    (group, if chunks <= ROW_CHUNKS_MAX { chunks } else { 0 })
}

/// Groups a split-row launch aims for per compute unit: enough waves that no SM idles at the tail.
pub const SPLIT_GROUPS_PER_UNIT: usize = 8;
/// Most groups that share one row.
pub const SPLIT_MAX: usize = 64;
/// Work-group size of the split-row kernels (several resident per compute unit).
pub const SPLIT_GROUP: usize = 256;

/// How many work-groups share each row of a row kernel (1: one group per row, the plain kernels).
///
/// Rows are split only when one group cannot keep its row in registers (`chunks == 0`, so the
/// plain kernel reads the row from memory more than once anyway) and there are too few rows to
/// give every compute unit [`SPLIT_GROUPS_PER_UNIT`] groups; then each row gets the power of two
/// of groups that does, at most [`SPLIT_MAX`] and never so many that a group has less than four
/// columns per work-item of [`SPLIT_GROUP`].
pub fn row_split(rows: usize, cols: usize, chunks: usize, compute_units: usize) -> usize {
    let target = SPLIT_GROUPS_PER_UNIT * compute_units.max(1);
    if chunks > 0 || rows == 0 || rows >= target {
        return 1;
    }
    let most = (cols / (4 * SPLIT_GROUP)).clamp(1, SPLIT_MAX);
    target
        .div_ceil(rows)
        .next_power_of_two()
        .min(pow2_floor(most))
}
