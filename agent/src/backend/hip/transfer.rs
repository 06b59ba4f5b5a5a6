//! `transfer` on HIP: `hipMemcpyHtoDAsync`/`hipMemcpyDtoHAsync` from or into `hipHostMalloc`
//! memory (pinned) timed by two events on the stream, `hipMemcpyHtoD`/`hipMemcpyDtoH` from or into
//! a `Vec` (pageable, which HIP stages itself) timed by the host clock, and `hipMemcpyDtoDAsync`
//! for d2d. The output is what arrived, read back after the timed copy.

use super::device::Found;
use super::ffi::{self, DeviceBuffer, Event, PinnedBuffer, Stream};
use crate::backend::planning::{Direction, Transfer};
use crate::backend::storage::{self, Elem};
use crate::backend::{BackendError, Prepare, PreparedKernel};
use gpufleet_kernels::Buffer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Host memory on one side of a copy.
enum Host {
    Pinned(PinnedBuffer),
    Pageable(Vec<u8>),
}

/// A transfer ready to run. Field order is drop order: the stream (which waits for queued
/// copies) before the memory.
pub struct HipTransfer {
    stream: Stream,
    start: Event,
    stop: Event,
    /// h2d's destination, d2h's and d2d's source.
    device: DeviceBuffer,
    /// d2d's destination.
    second: Option<DeviceBuffer>,
    host: Option<Host>,
    ordinal: i32,
    transfer: Transfer,
    config: BTreeMap<String, String>,
}

impl HipTransfer {
    /// Allocates both sides of `transfer` on `found` and puts the input where the copy reads it.
    ///
    /// # Errors
    /// `OutOfMemory` or `Driver`.
    pub fn new(
        found: &Found,
        job: &Prepare<'_>,
        transfer: Transfer,
    ) -> Result<HipTransfer, BackendError> {
        ffi::set_device(found.ordinal)?;
        let input = job
            .inputs
            .first()
            .map(|b| storage::to_bytes(b, Elem::F32))
            .unwrap_or_default();
        let n = transfer.bytes.min(input.len());
        let mut device = DeviceBuffer::new(n)?;
        let host = |fill: bool| -> Result<Host, BackendError> {
            Ok(if transfer.pinned {
                let mut p = PinnedBuffer::new(n)?;
                if fill {
                    p.as_mut_slice()[..n].copy_from_slice(&input[..n]);
                }
                Host::Pinned(p)
            } else if fill {
                Host::Pageable(input[..n].to_vec())
            } else {
                Host::Pageable(vec![0u8; n])
            })
        };
        let (host, second, call) = match transfer.direction {
            Direction::HostToDevice => (Some(host(true)?), None, "hipMemcpyHtoD"),
            Direction::DeviceToHost => {
                device.upload(&input[..n])?;
                (Some(host(false)?), None, "hipMemcpyDtoH")
            }
            Direction::DeviceToDevice => {
                device.upload(&input[..n])?;
                (None, Some(DeviceBuffer::new(n)?), "hipMemcpyDtoDAsync")
            }
        };
        let call = match (&host, transfer.direction) {
            (Some(Host::Pinned(_)), _) => format!("{call}Async (events)"),
            (Some(Host::Pageable(_)), _) => format!("{call} (host clock)"),
            (None, _) => format!("{call} (events)"),
        };
        Ok(HipTransfer {
            stream: Stream::new()?,
            start: Event::new()?,
            stop: Event::new()?,
            device,
            second,
            host,
            ordinal: found.ordinal,
            config: transfer.config(&call, "hipHostMalloc"),
            transfer,
        })
    }

    /// The copy between two events on the stream.
    fn timed_on_stream(&mut self) -> Result<Duration, BackendError> {
        self.start.record(&self.stream)?;
        match (&mut self.host, &self.second) {
            (Some(Host::Pinned(p)), _) if self.transfer.direction == Direction::HostToDevice => {
                self.stream.upload(&self.device, p)?;
            }
            (Some(Host::Pinned(p)), _) => self.stream.download(p, &self.device)?,
            (_, Some(dst)) => self.stream.copy(dst, &self.device)?,
            _ => {}
        }
        self.stop.record(&self.stream)?;
        let ms = self.stop.elapsed_since(&self.start)?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }
}

impl PreparedKernel for HipTransfer {
    fn run(&mut self) -> Result<Duration, BackendError> {
        ffi::set_device(self.ordinal)?;
        let to_device = self.transfer.direction == Direction::HostToDevice;
        match &mut self.host {
            Some(Host::Pageable(v)) => {
                let t = Instant::now();
                if to_device {
                    self.device.upload(v)?;
                } else {
                    self.device.download(v)?;
                }
                Ok(t.elapsed())
            }
            _ => self.timed_on_stream(),
        }
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        ffi::set_device(self.ordinal)?;
        self.stream.synchronize()?;
        let arrived = match (&self.host, &self.second) {
            (Some(Host::Pinned(p)), _) if self.transfer.direction == Direction::DeviceToHost => {
                p.as_slice().to_vec()
            }
            (Some(Host::Pageable(v)), _) if self.transfer.direction == Direction::DeviceToHost => {
                v.clone()
            }
            (_, second) => {
                let from = second.as_ref().unwrap_or(&self.device);
                let mut out = vec![0u8; from.bytes()];
                from.download(&mut out)?;
                out
            }
        };
        Ok(storage::from_bytes(&arrived, Elem::F32))
    }

    fn config(&self) -> BTreeMap<String, String> {
        self.config.clone()
    }
}
