//! The types a HIP plan is made of: the device capabilities the planner may assume and the
//! launches and arguments of a [`Plan`].

use crate::backend::planning;

/// What the planner may assume about a device.
#[derive(Debug, Clone, PartialEq)]
pub struct HipCaps {
    pub compute_units: u32,
    /// `maxThreadsPerBlock` (1024 on every AMD GPU).
    pub max_threads_per_block: u32,
    /// `sharedMemPerBlock` (64 KiB on every AMD GPU).
    pub shared_mem_per_block: u64,
    /// A dot product of four bytes (`code_objects::has_int8_dot`): compute_peak's int8.
    pub int8_dot: bool,
}

impl Default for HipCaps {
    fn default() -> Self {
        HipCaps {
            compute_units: 64,
            max_threads_per_block: 1024,
            shared_mem_per_block: 64 * 1024,
            int8_dot: true,
        }
    }
}

/// One kernel argument (shared with the OpenCL planner).
pub use crate::backend::planning::Arg;

/// One hipModuleLaunchKernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The extern "C" kernel name in the code object.
    pub kernel: String,
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Work-items per block in x, y, z (the size the kernel was compiled for).
    pub block: [u32; 3],
    pub args: Vec<Arg>,
}

/// Buffers and the launches of one iteration; no program (the code object is chosen per arch).
pub type Plan = planning::Plan<Launch>;

/// Why a plan cannot be made (shared by the GPU planners).
pub use crate::backend::planning::Unsupported;
