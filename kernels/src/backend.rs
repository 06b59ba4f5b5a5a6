//! The compute backends by name: the one list the catalog (which backends implement a kernel), the
//! agent's registry and the coordinator's `--backend` checks share.
//!
//! It lives here, below both binaries, because the coordinator must validate `--backend` without
//! depending on agent code, and the catalog must say which backends implement each kernel.

/// A compute backend an agent may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// Plain Rust on the host; always built.
    Cpu,
    /// OpenCL through a driver loaded at run time.
    OpenCl,
    /// Vulkan compute through a loader found at run time.
    Vulkan,
    /// HIP (ROCm), built with the agent's `hip` feature.
    Hip,
}

impl BackendKind {
    /// Every backend, in the order agents list them.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Cpu,
        BackendKind::OpenCl,
        BackendKind::Vulkan,
        BackendKind::Hip,
    ];

    /// The names of [`BackendKind::ALL`], in the same order (for argument parsers that take a
    /// list of accepted strings).
    pub const NAMES: [&'static str; BackendKind::ALL.len()] = ["cpu", "opencl", "vulkan", "hip"];

    /// Name in device ids, on the command line and in results (`cpu`, `opencl`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::OpenCl => "opencl",
            BackendKind::Vulkan => "vulkan",
            BackendKind::Hip => "hip",
        }
    }

    /// The backend called `name` (exact match); `None` for anything else.
    pub fn parse(name: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|b| b.name() == name)
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_match_the_name_list() {
        for (kind, name) in BackendKind::ALL.into_iter().zip(BackendKind::NAMES) {
            assert_eq!(kind.name(), name);
            assert_eq!(BackendKind::parse(name), Some(kind));
            assert_eq!(kind.to_string(), name);
        }
        assert_eq!(BackendKind::parse("CPU"), None);
        assert_eq!(BackendKind::parse(""), None);
    }
}
