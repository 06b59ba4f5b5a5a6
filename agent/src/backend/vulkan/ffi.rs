//! The one place Vulkan results become our errors, and the loaded library.

use crate::backend::BackendError;
use ash::vk;
use std::sync::{Arc, Mutex, PoisonError};

/// A failed call, named with its step: `vkQueueSubmit: ERROR_DEVICE_LOST`.
pub fn fail(call: &str, r: vk::Result) -> BackendError {
    match r {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            BackendError::OutOfMemory {
                backend: "vulkan".into(),
                message: format!("{call}: {r:?}"),
            }
        }
        _ => BackendError::Driver {
            backend: "vulkan".into(),
            call: call.to_string(),
            message: format!("{r:?}"),
        },
    }
}

/// The loader and one instance; destroyed on drop.
pub struct Vk {
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    /// Instance API version we asked for.
    pub api: u32,
}

impl Vk {
    /// Loads libvulkan and creates an instance (Vulkan 1.2 where the loader
    /// has it, else 1.1).
    ///
    /// # Errors
    /// `Unavailable` with the loader's or the driver's reason.
    pub fn new() -> Result<Vk, BackendError> {
        let unavailable = |reason: String| BackendError::Unavailable {
            backend: "vulkan".into(),
            reason,
        };
        // SAFETY: loading libvulkan runs its initialisers; the Entry keeps
        // the library loaded for as long as anything made from it lives.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| {
            unavailable(format!(
                "cannot load libvulkan.so.1 ({e}); install libvulkan1 and a driver"
            ))
        })?;
        // SAFETY: a plain query on a valid entry.
        let loader_version = unsafe { entry.try_enumerate_instance_version() }
            .ok()
            .flatten()
            .unwrap_or(vk::API_VERSION_1_0);
        let api = if loader_version >= vk::API_VERSION_1_2 {
            vk::API_VERSION_1_2
        } else {
            vk::API_VERSION_1_1
        };
        let app = vk::ApplicationInfo::default()
            .application_name(c"gpufleet")
            .engine_name(c"gpufleet")
            .api_version(api);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: `info` and what it points to live across the call.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| unavailable(format!("vkCreateInstance: {e:?}")))?;
        Ok(Vk {
            entry,
            instance,
            api,
        })
    }

    /// The worker's instance for its kernels: made on first use and kept for the life of the
    /// process, so that tuning, which prepares dozens of candidate kernels one after the other,
    /// and a pooled worker serving run after run do not create and destroy an instance each time.
    /// A failure is not kept: the next kernel tries again.
    ///
    /// # Errors
    /// [`Vk::new`]'s.
    pub fn shared() -> Result<Arc<Vk>, BackendError> {
        static SHARED: Mutex<Option<Arc<Vk>>> = Mutex::new(None);
        let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(vk) = slot.as_ref() {
            return Ok(Arc::clone(vk));
        }
        let vk = Arc::new(Vk::new()?);
        *slot = Some(Arc::clone(&vk));
        Ok(vk)
    }
}

impl Drop for Vk {
    fn drop(&mut self) {
        // SAFETY: every child object (devices) is destroyed before the Vk
        // that made it, by ownership order in the callers.
        unsafe { self.instance.destroy_instance(None) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk::Handle;

    /// Kernels made one after another (tuning's candidates, a pooled worker's runs) share one
    /// instance: the second `shared` hands back the first's.
    #[test]
    fn kernels_of_one_process_share_one_instance() {
        let first = match Vk::shared() {
            Ok(vk) => vk,
            Err(e) => {
                eprintln!("skipped: no Vulkan instance here ({e})");
                return;
            }
        };
        let handle = first.instance.handle().as_raw();
        drop(first);
        let second = Vk::shared().unwrap();
        assert_eq!(second.instance.handle().as_raw(), handle);
    }
}
