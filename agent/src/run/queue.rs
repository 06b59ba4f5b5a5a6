//! One run at a time per device, a bounded number waiting, and the
//! cancellation handles of every queued or running run.
//!
//! A "device" here is a physical one ([`queue_key`]): the OpenCL and Vulkan
//! views of one GPU (same PCI id) share a queue, and so do all CPU devices
//! (cpu, PoCL, lavapipe), so runs never disturb each other's times or power.

use crate::backend::DeviceInfo;
use crate::error::AgentError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// The queue a device's runs wait in: its PCI bus id where it has one, `host-cpu`
/// for every device that runs on the host's CPU, else its id.
pub fn queue_key(d: &DeviceInfo) -> String {
    if d.device_type == "cpu" || d.backend == "cpu" {
        "host-cpu".into()
    } else if !d.pci_bus_id.is_empty() {
        format!("pci:{}", d.pci_bus_id.to_ascii_lowercase())
    } else {
        d.id.clone()
    }
}

struct DeviceQueue {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
}

/// The per-device queues and the cancellation registry.
pub struct DeviceQueues {
    capacity: usize,
    queues: Mutex<HashMap<String, Arc<DeviceQueue>>>,
    cancels: Mutex<HashMap<String, watch::Sender<bool>>>,
}

/// A run admitted to a device queue. Dropping it frees its place and its
/// run id.
pub struct Ticket {
    queue: Arc<DeviceQueue>,
    queues: Arc<DeviceQueues>,
    run_id: String,
    waiting: bool,
    pub cancel: watch::Receiver<bool>,
}

impl DeviceQueues {
    /// Queues allowing `capacity` waiting runs per device.
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(DeviceQueues {
            capacity,
            queues: Mutex::new(HashMap::new()),
            cancels: Mutex::new(HashMap::new()),
        })
    }

    /// Runs waiting per device queue (not counting the running one), by queue key.
    pub fn depths(&self) -> Vec<(String, usize)> {
        let queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(String, usize)> = queues
            .iter()
            .map(|(k, q)| {
                (
                    k.clone(),
                    q.waiting.load(std::sync::atomic::Ordering::Relaxed),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Admits `run_id` to `device`'s queue.
    ///
    /// # Errors
    /// [`AgentError::QueueFull`] past the capacity,
    /// [`AgentError::DuplicateRun`] for a run id already admitted.
    pub fn admit(self: &Arc<Self>, device: &str, run_id: &str) -> Result<Ticket, AgentError> {
        let queue = {
            let mut q = self.queues.lock().expect("queue lock");
            q.entry(device.to_string())
                .or_insert_with(|| {
                    Arc::new(DeviceQueue {
                        running: Arc::new(Semaphore::new(1)),
                        waiting: AtomicUsize::new(0),
                    })
                })
                .clone()
        };
        let mut cancels = self.cancels.lock().expect("cancel lock");
        if cancels.contains_key(run_id) {
            return Err(AgentError::DuplicateRun {
                run_id: run_id.to_string(),
            });
        }
        let admitted = queue
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w < self.capacity).then_some(w + 1)
            })
            .is_ok();
        if !admitted {
            return Err(AgentError::QueueFull {
                device: device.to_string(),
                capacity: self.capacity,
            });
        }
        let (tx, rx) = watch::channel(false);
        cancels.insert(run_id.to_string(), tx);
        Ok(Ticket {
            queue,
            queues: self.clone(),
            run_id: run_id.to_string(),
            waiting: true,
            cancel: rx,
        })
    }

    /// Signals cancellation of `run_id`; false if no such run is queued or
    /// running.
    pub fn cancel(&self, run_id: &str) -> bool {
        match self.cancels.lock().expect("cancel lock").get(run_id) {
            Some(tx) => {
                let _ = tx.send(true);
                true
            }
            None => false,
        }
    }
}

impl Ticket {
    /// Waits for the device. Returns `None` if the run was cancelled while
    /// waiting.
    pub async fn start(&mut self) -> Option<OwnedSemaphorePermit> {
        let sem = self.queue.running.clone();
        let permit = tokio::select! {
            p = sem.acquire_owned() => p.ok(),
            _ = self.cancel.wait_for(|c| *c) => None,
        };
        self.leave_waiting();
        permit
    }

    fn leave_waiting(&mut self) {
        if self.waiting {
            self.waiting = false;
            self.queue.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// True once a cancel was requested.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.leave_waiting();
        self.queues
            .cancels
            .lock()
            .expect("cancel lock")
            .remove(&self.run_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_queue_per_device() {
        let s = DeviceQueues::new(1);
        let mut a = s.admit("d", "a").unwrap();
        let _running = a.start().await.unwrap();
        let _b = s.admit("d", "b").unwrap(); // waits
        assert!(matches!(
            s.admit("d", "c"),
            Err(AgentError::QueueFull { .. })
        ));
        // Another device has its own queue.
        assert!(s.admit("e", "c").is_ok());
    }

    #[tokio::test]
    async fn duplicate_run_ids_are_refused_until_done() {
        let s = DeviceQueues::new(4);
        let t = s.admit("d", "a").unwrap();
        assert!(matches!(
            s.admit("d", "a"),
            Err(AgentError::DuplicateRun { .. })
        ));
        drop(t);
        assert!(s.admit("d", "a").is_ok());
    }

    #[tokio::test]
    async fn cancel_while_waiting_gives_no_permit() {
        let s = DeviceQueues::new(4);
        let mut a = s.admit("d", "a").unwrap();
        let _p = a.start().await.unwrap();
        let mut b = s.admit("d", "b").unwrap();
        assert!(s.cancel("b"));
        assert!(b.start().await.is_none());
        assert!(!s.cancel("zzz"));
    }

    #[tokio::test]
    async fn one_run_at_a_time() {
        let s = DeviceQueues::new(4);
        let mut a = s.admit("d", "a").unwrap();
        let pa = a.start().await.unwrap();
        let mut b = s.admit("d", "b").unwrap();
        let waiter = tokio::spawn(async move { b.start().await.is_some() });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(pa);
        assert!(waiter.await.unwrap());
    }

    fn dev(id: &str, backend: &str, pci: &str, kind: &str) -> DeviceInfo {
        DeviceInfo {
            id: id.into(),
            backend: backend.into(),
            pci_bus_id: pci.into(),
            device_type: kind.into(),
            ..Default::default()
        }
    }

    #[test]
    fn one_queue_per_physical_device() {
        let cl = dev(
            "opencl:0000:00:06.0",
            "opencl",
            "0000:00:06.0",
            "discrete_gpu",
        );
        let vk = dev(
            "vulkan:0000:00:06.0",
            "vulkan",
            "0000:00:06.0",
            "discrete_gpu",
        );
        assert_eq!(queue_key(&cl), queue_key(&vk));
        let other = dev(
            "vulkan:0000:03:00.0",
            "vulkan",
            "0000:03:00.0",
            "discrete_gpu",
        );
        assert_ne!(queue_key(&cl), queue_key(&other));
        let cpu = dev("cpu:0", "cpu", "", "cpu");
        let pocl = dev("opencl:0.0", "opencl", "", "cpu");
        let lvp = dev("vulkan:lavapipe", "vulkan", "", "cpu");
        assert_eq!(queue_key(&cpu), queue_key(&pocl));
        assert_eq!(queue_key(&cpu), queue_key(&lvp));
        let nopci = dev("vulkan:uuid-1", "vulkan", "", "integrated_gpu");
        assert_eq!(queue_key(&nopci), "vulkan:uuid-1");
    }
}
