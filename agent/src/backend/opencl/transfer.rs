//! `transfer` on OpenCL: one `clEnqueueWriteBuffer` (h2d), `clEnqueueReadBuffer` (d2h) or
//! `clEnqueueCopyBuffer` (d2d) of the problem's bytes, timed by its profiling event. Pinned host
//! memory is a mapped `CL_MEM_ALLOC_HOST_PTR` buffer ([`ffi::Pinned`]); pageable is a `Vec`. The
//! output is what arrived (read back after the timed copy), which validation compares with the
//! input.

use super::device::Found;
use super::ffi::{self, driver};
use crate::backend::planning::{Direction, Transfer};
use crate::backend::storage::{self, Elem};
use crate::backend::{BackendError, Prepare, PreparedKernel};
use gpufleet_kernels::Buffer;
use opencl3::command_queue::{CL_QUEUE_PROFILING_ENABLE, CommandQueue};
use opencl3::context::Context;
use opencl3::memory::Buffer as ClBuffer;
use std::collections::BTreeMap;
use std::time::Duration;

/// Host memory on one side of a copy.
enum Host {
    Pinned(ffi::Pinned),
    Pageable(Vec<u8>),
}

impl Host {
    fn new(ctx: &Context, bytes: usize, pinned: bool) -> Result<Host, BackendError> {
        Ok(if pinned {
            Host::Pinned(ffi::Pinned::new(ctx, bytes)?)
        } else {
            Host::Pageable(vec![0u8; bytes])
        })
    }

    fn bytes(&self, len: usize) -> &[u8] {
        match self {
            Host::Pinned(p) => &p.bytes()[..len],
            Host::Pageable(v) => &v[..len],
        }
    }

    fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        match self {
            Host::Pinned(p) => &mut p.bytes_mut()[..len],
            Host::Pageable(v) => &mut v[..len],
        }
    }
}

/// A transfer ready to run: the queue, the device buffer(s) and the host side.
pub struct OpenClTransfer {
    // Dropped in this order: the buffers and mapping before the queue and the context.
    host: Option<Host>,
    device: ClBuffer<u8>,
    /// d2d's destination.
    second: Option<ClBuffer<u8>>,
    queue: CommandQueue,
    _ctx: Context,
    transfer: Transfer,
    config: BTreeMap<String, String>,
}

impl OpenClTransfer {
    /// Allocates both sides of `transfer` on `found` and puts the input where the copy reads it.
    ///
    /// # Errors
    /// `OutOfMemory` or `Driver`.
    pub fn new(
        found: &Found,
        job: &Prepare<'_>,
        transfer: Transfer,
    ) -> Result<OpenClTransfer, BackendError> {
        let ctx = Context::from_device(&opencl3::device::Device::new(found.id))
            .map_err(|e| driver("clCreateContext", e))?;
        let queue = CommandQueue::create_default(&ctx, CL_QUEUE_PROFILING_ENABLE)
            .map_err(|e| driver("clCreateCommandQueue", e))?;
        let input = job
            .inputs
            .first()
            .map(|b| storage::to_bytes(b, Elem::F32))
            .unwrap_or_default();
        let n = transfer.bytes;
        let mut device = ffi::buffer(&ctx, n)?;
        let (host, second, call) = match transfer.direction {
            Direction::HostToDevice => {
                let mut host = Host::new(&ctx, n, transfer.pinned)?;
                host.bytes_mut(n).copy_from_slice(&input[..n]);
                (Some(host), None, "clEnqueueWriteBuffer")
            }
            Direction::DeviceToHost => {
                ffi::write(&queue, &mut device, &input[..n], true)?;
                let host = Host::new(&ctx, n, transfer.pinned)?;
                (Some(host), None, "clEnqueueReadBuffer")
            }
            Direction::DeviceToDevice => {
                ffi::write(&queue, &mut device, &input[..n], true)?;
                (None, Some(ffi::buffer(&ctx, n)?), "clEnqueueCopyBuffer")
            }
        };
        let config = transfer.config(call, "CL_MEM_ALLOC_HOST_PTR, mapped");
        Ok(OpenClTransfer {
            host,
            device,
            second,
            queue,
            _ctx: ctx,
            transfer,
            config,
        })
    }
}

impl PreparedKernel for OpenClTransfer {
    fn run(&mut self) -> Result<Duration, BackendError> {
        let n = self.transfer.bytes;
        let event = match (&mut self.host, &mut self.second) {
            (Some(host), _) if self.transfer.direction == Direction::HostToDevice => {
                ffi::write(&self.queue, &mut self.device, host.bytes(n), true)?
            }
            (Some(host), _) => ffi::read(&self.queue, &self.device, host.bytes_mut(n))?,
            (None, Some(dst)) => {
                let e = ffi::copy(&self.queue, &self.device, dst, n)?;
                self.queue.finish().map_err(|e| driver("clFinish", e))?;
                Some(e)
            }
            (None, None) => None,
        };
        match event {
            Some(e) => ffi::elapsed(&e, &e),
            None => Ok(Duration::ZERO),
        }
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        let n = self.transfer.bytes;
        let arrived = match (&self.host, &self.second) {
            (Some(host), _) if self.transfer.direction == Direction::DeviceToHost => {
                host.bytes(n).to_vec()
            }
            (_, second) => {
                let mut out = vec![0u8; n];
                ffi::read(
                    &self.queue,
                    second.as_ref().unwrap_or(&self.device),
                    &mut out,
                )?;
                out
            }
        };
        Ok(storage::from_bytes(&arrived, Elem::F32))
    }

    fn config(&self) -> BTreeMap<String, String> {
        self.config.clone()
    }
}
