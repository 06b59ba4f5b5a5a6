//! The device lookup every GPU backend's `prepare` does: discovery ran in another worker, so the
//! backend enumerates again and finds its device by id, and a device that vanished in between
//! (unplugged, driver reset) is `unavailable` with one message whichever backend noticed.

use super::{BackendError, DeviceInfo};
use gpufleet_kernels::BackendKind;
use std::fmt::Display;

/// The stable id of a device of `backend`: `<backend>:<pci bus id>` where the driver reports one,
/// else `<backend>:<index>` in its enumeration order.
pub fn device_id(backend: BackendKind, pci_bus_id: &str, index: impl Display) -> String {
    if pci_bus_id.is_empty() {
        format!("{backend}:{index}")
    } else {
        format!("{backend}:{pci_bus_id}")
    }
}

/// A backend's enumeration record (`device::Found`): the device as reported plus the handles
/// and capabilities the worker needs to use it.
pub trait Enumerated {
    /// The device as the agent reports it.
    fn info(&self) -> &DeviceInfo;
}

/// The reported devices of an enumeration, for `Backend::discover`.
pub fn infos<F: Enumerated>(found: Vec<F>) -> Vec<DeviceInfo> {
    found.iter().map(|f| f.info().clone()).collect()
}

/// The record among `found` (a fresh enumeration by `backend`) for the device with id `id`.
///
/// # Errors
/// [`BackendError::Unavailable`] naming the device when it is no longer present.
pub fn find<F: Enumerated>(backend: &str, found: Vec<F>, id: &str) -> Result<F, BackendError> {
    found
        .into_iter()
        .find(|f| f.info().id == id)
        .ok_or_else(|| BackendError::Unavailable {
            backend: backend.into(),
            reason: format!("device {id} is no longer present"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(DeviceInfo);

    impl Enumerated for Fake {
        fn info(&self) -> &DeviceInfo {
            &self.0
        }
    }

    fn device(id: &str) -> DeviceInfo {
        DeviceInfo {
            id: id.into(),
            ..Default::default()
        }
    }

    #[test]
    fn device_ids_prefer_the_pci_bus_id() {
        assert_eq!(
            device_id(BackendKind::Vulkan, "0000:03:00.0", 1),
            "vulkan:0000:03:00.0"
        );
        assert_eq!(device_id(BackendKind::OpenCl, "", "0.1"), "opencl:0.1");
    }

    #[test]
    fn a_device_is_found_by_id_and_a_vanished_one_is_unavailable() {
        let found = || vec![Fake(device("x:0")), Fake(device("x:1"))];
        assert_eq!(infos(found()), vec![device("x:0"), device("x:1")]);
        let one = find("x", found(), "x:1").ok().unwrap();
        assert_eq!(one.0.id, "x:1");
        let gone = find("x", found(), "x:2").err().unwrap();
        assert_eq!(
            gone.to_string(),
            "x unavailable: device x:2 is no longer present"
        );
    }
}
