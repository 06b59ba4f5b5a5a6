//! The one registry of backends: a backend per [`BackendKind`] compiled into this binary. It sits
//! above the backend folders (it builds them), which sit above the trait they implement.

use super::Backend;
use super::{cpu, opencl, vulkan};
use gpufleet_kernels::BackendKind;

/// The backend of `kind`, if this binary has it (`hip` only in a build with the `hip` feature).
pub fn of(kind: BackendKind) -> Option<Box<dyn Backend>> {
    match kind {
        BackendKind::Cpu => Some(Box::new(cpu::CpuBackend::new())),
        BackendKind::OpenCl => Some(Box::new(opencl::OpenClBackend)),
        BackendKind::Vulkan => Some(Box::new(vulkan::VulkanBackend)),
        #[cfg(feature = "hip")]
        BackendKind::Hip => Some(Box::new(super::hip::HipBackend)),
        #[cfg(not(feature = "hip"))]
        BackendKind::Hip => None,
    }
}

/// Every backend compiled into this binary, in [`BackendKind::ALL`]'s order.
pub fn all() -> Vec<Box<dyn Backend>> {
    BackendKind::ALL.into_iter().filter_map(of).collect()
}

/// The backend called `name`, if this binary has it.
pub fn by_name(name: &str) -> Option<Box<dyn Backend>> {
    BackendKind::parse(name).and_then(of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_its_own_backend_and_is_found_by_name() {
        for kind in BackendKind::ALL {
            if let Some(b) = of(kind) {
                assert_eq!(b.kind(), kind);
                assert_eq!(by_name(kind.name()).map(|b| b.kind()), Some(kind));
            }
        }
        let names: Vec<&str> = all().iter().map(|b| b.name()).collect();
        assert_eq!(names[..3], ["cpu", "opencl", "vulkan"]);
        assert_eq!(names.len(), if cfg!(feature = "hip") { 4 } else { 3 });
        assert!(by_name("cuda").is_none());
    }
}
