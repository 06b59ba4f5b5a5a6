//! The device lookup every GPU backend's `prepare` does: discovery ran in another worker, so the
//! backend enumerates again and finds its device by id, and a device that vanished in between
//! (unplugged, driver reset) is `unavailable` with one message whichever backend noticed.

use super::{BackendError, DeviceInfo};

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
