//! The unsafe OpenCL calls, each wrapped once with its safety argument, and
//! the one place OpenCL status codes become our errors.

use crate::backend::BackendError;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::error_codes::{ClError, error_text};
use opencl3::event::Event;
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE, ClMem};
use opencl3::types::{CL_BLOCKING, CL_NON_BLOCKING, cl_device_id, cl_event};
use std::ptr;

/// `CL_OUT_OF_RESOURCES (-5)` style text for a status code.
pub fn cl_err(code: i32) -> String {
    format!("{} ({code})", error_text(code))
}

/// A failed call, named: `clEnqueueNDRangeKernel(gemm): CL_INVALID_WORK_GROUP_SIZE (-54)`.
pub fn driver(call: impl Into<String>, e: ClError) -> BackendError {
    let call = call.into();
    match e.0 {
        -4 | -6 | -61 => BackendError::OutOfMemory {
            backend: "opencl".into(),
            message: format!("{call}: {}", cl_err(e.0)),
        },
        _ => BackendError::Driver {
            backend: "opencl".into(),
            call,
            message: cl_err(e.0),
        },
    }
}

/// Warp / wavefront width, or the preferred work-group multiple.
pub fn preferred_multiple(id: cl_device_id) -> usize {
    let d = Device::new(id);
    if let Ok(w) = d.wavefront_width_amd() {
        return w as usize;
    }
    d.preferred_work_group_size_multiple().unwrap_or(1)
}

/// A device buffer of `bytes` bytes (at least 1, as OpenCL requires).
///
/// # Errors
/// `OutOfMemory` or `Driver` naming clCreateBuffer.
pub fn buffer(ctx: &Context, bytes: usize) -> Result<Buffer<u8>, BackendError> {
    // SAFETY: no host pointer is passed, so OpenCL allocates and owns the
    // memory; the Buffer releases it on drop.
    unsafe { Buffer::<u8>::create(ctx, CL_MEM_READ_WRITE, bytes.max(1), ptr::null_mut()) }
        .map_err(|e| driver("clCreateBuffer", e))
}

/// Copies `data` into `buf`; blocking when `wait` is true.
///
/// # Errors
/// `Driver` naming clEnqueueWriteBuffer.
pub fn write(
    q: &CommandQueue,
    buf: &mut Buffer<u8>,
    data: &[u8],
    wait: bool,
) -> Result<Option<Event>, BackendError> {
    if data.is_empty() {
        return Ok(None);
    }
    // SAFETY: `buf` holds at least data.len() bytes (allocated from the same
    // plan) and `data` outlives the call: for a non-blocking write the caller
    // waits on the returned event before `data` can be dropped.
    unsafe {
        q.enqueue_write_buffer(
            buf,
            if wait { CL_BLOCKING } else { CL_NON_BLOCKING },
            0,
            data,
            &[],
        )
    }
    .map(Some)
    .map_err(|e| driver("clEnqueueWriteBuffer", e))
}

/// Copies `buf` into `out` (blocking).
///
/// # Errors
/// `Driver` naming clEnqueueReadBuffer.
pub fn read(
    q: &CommandQueue,
    buf: &Buffer<u8>,
    out: &mut [u8],
) -> Result<Option<Event>, BackendError> {
    if out.is_empty() {
        return Ok(None);
    }
    // SAFETY: blocking read into a host slice no longer than the buffer.
    unsafe { q.enqueue_read_buffer(buf, CL_BLOCKING, 0, out, &[]) }
        .map(Some)
        .map_err(|e| driver("clEnqueueReadBuffer", e))
}

/// A kernel argument value, resolved to what clSetKernelArg takes.
pub enum ArgValue<'a> {
    Mem(&'a Buffer<u8>),
    Int(i32),
    Long(i64),
    Float(f32),
    Local(usize),
}

/// Sets every argument of `kernel`.
///
/// # Errors
/// `Driver` naming clSetKernelArg, the kernel and the index.
pub fn set_args(kernel: &Kernel, name: &str, args: &[ArgValue]) -> Result<(), BackendError> {
    for (i, a) in args.iter().enumerate() {
        let i = i as u32;
        // SAFETY: each value has the size and type the kernel's parameter
        // expects by construction of the plan (buffers as cl_mem, ints as
        // cl_int, floats as cl_float, local memory as a size).
        let r = unsafe {
            match a {
                ArgValue::Mem(b) => kernel.set_arg(i, &b.get()),
                ArgValue::Int(v) => kernel.set_arg(i, v),
                ArgValue::Long(v) => kernel.set_arg(i, v),
                ArgValue::Float(v) => kernel.set_arg(i, v),
                ArgValue::Local(bytes) => kernel.set_arg_local_buffer(i, *bytes),
            }
        };
        r.map_err(|e| driver(format!("clSetKernelArg({name}, {i})"), e))?;
    }
    Ok(())
}

/// [`launch`] without an event: the launches between an iteration's first and last, whose
/// timestamps nobody reads (an event a launch costs host time on some drivers, and a decode pass
/// enqueues hundreds of small kernels).
///
/// # Errors
/// `Driver` naming clEnqueueNDRangeKernel and the kernel.
pub fn launch_quiet(
    q: &CommandQueue,
    kernel: &Kernel,
    name: &str,
    global: &[usize],
    local: Option<&[usize]>,
) -> Result<(), BackendError> {
    let error = |status| driver(format!("clEnqueueNDRangeKernel({name})"), ClError(status));
    let runtime = cl3::load_library()
        .as_ref()
        .map_err(|_| error(cl3::error_codes::DLOPEN_FUNCTION_NOT_AVAILABLE))?;
    // dlopen2 declares the call safe; what it needs is what `launch` needs (`global` and `local`
    // hold `global.len()` sizes, every argument set), and a null event pointer asks for no event.
    let status = runtime
        .clEnqueueNDRangeKernel(
            q.get(),
            kernel.get(),
            global.len() as u32,
            ptr::null(),
            global.as_ptr(),
            local.map_or(ptr::null(), |l| l.as_ptr()),
            0,
            ptr::null(),
            ptr::null_mut(),
        )
        .ok_or_else(|| error(cl3::error_codes::DLOPEN_FUNCTION_NOT_AVAILABLE))?;
    if status == cl3::error_codes::CL_SUCCESS {
        Ok(())
    } else {
        Err(error(status))
    }
}

/// Enqueues `kernel` over `global` with optional `local` sizes.
///
/// # Errors
/// `Driver` naming clEnqueueNDRangeKernel and the kernel.
pub fn launch(
    q: &CommandQueue,
    kernel: &Kernel,
    name: &str,
    global: &[usize],
    local: Option<&[usize]>,
) -> Result<Event, BackendError> {
    let wait: &[cl_event] = &[];
    // SAFETY: `global` (and `local`) hold `global.len()` sizes, which is the
    // work dimension passed; every argument was set by `set_args`.
    unsafe {
        q.enqueue_nd_range_kernel(
            kernel.get(),
            global.len() as u32,
            ptr::null(),
            global.as_ptr(),
            local.map_or(ptr::null(), |l| l.as_ptr()),
            wait,
        )
    }
    .map_err(|e| driver(format!("clEnqueueNDRangeKernel({name})"), e))
}

/// Page-locked host memory: a buffer the driver allocates in host memory
/// (`CL_MEM_ALLOC_HOST_PTR`), mapped for the host as long as it lives, which is how OpenCL hands
/// out pinned memory (NVIDIA's bandwidth test does the same). Reads and writes of device buffers
/// from its slice go at DMA speed.
pub struct Pinned {
    queue: CommandQueue,
    buffer: Buffer<u8>,
    ptr: *mut u8,
    len: usize,
}

impl Pinned {
    /// `bytes` (at least 1) of pinned memory, mapped for reading and writing.
    ///
    /// # Errors
    /// `OutOfMemory`/`Driver` naming clCreateBuffer or clEnqueueMapBuffer.
    pub fn new(ctx: &Context, bytes: usize) -> Result<Pinned, BackendError> {
        use opencl3::memory::{CL_MAP_READ, CL_MAP_WRITE, CL_MEM_ALLOC_HOST_PTR};
        let queue =
            CommandQueue::create_default(ctx, 0).map_err(|e| driver("clCreateCommandQueue", e))?;
        let len = bytes.max(1);
        // SAFETY: no host pointer is passed; OpenCL allocates (in host memory) and owns it.
        let buffer = unsafe {
            Buffer::<u8>::create(
                ctx,
                CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                len,
                ptr::null_mut(),
            )
        }
        .map_err(|e| driver("clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)", e))?;
        let mut mapped: opencl3::types::cl_mem = ptr::null_mut();
        // SAFETY: a blocking map of the whole buffer we just made; the pointer stays valid until
        // the unmap in `drop`, and nothing else maps it.
        unsafe {
            queue.enqueue_map_buffer(
                &buffer,
                CL_BLOCKING,
                CL_MAP_READ | CL_MAP_WRITE,
                0,
                len,
                &mut mapped,
                &[],
            )
        }
        .map_err(|e| driver("clEnqueueMapBuffer", e))?;
        if mapped.is_null() {
            return Err(BackendError::Driver {
                backend: "opencl".into(),
                call: "clEnqueueMapBuffer".into(),
                message: "returned a null pointer".into(),
            });
        }
        Ok(Pinned {
            queue,
            buffer,
            ptr: mapped.cast(),
            len,
        })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` bytes for as long as `self` lives (see `new`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The mapped bytes, for writing.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the mapping of `buffer` made in `new`, unmapped once, here.
        let unmapped = unsafe {
            self.queue
                .enqueue_unmap_mem_object(self.buffer.get(), self.ptr.cast(), &[])
        };
        if unmapped.is_ok() {
            let _ = self.queue.finish();
        }
    }
}

/// Copies `bytes` bytes of `src` into `dst` on the device (not waiting).
///
/// # Errors
/// `Driver` naming clEnqueueCopyBuffer.
pub fn copy(
    q: &CommandQueue,
    src: &Buffer<u8>,
    dst: &mut Buffer<u8>,
    bytes: usize,
) -> Result<Event, BackendError> {
    // SAFETY: both buffers hold at least `bytes` bytes (the caller made them so).
    unsafe { q.enqueue_copy_buffer(src, dst, 0, 0, bytes, &[]) }
        .map_err(|e| driver("clEnqueueCopyBuffer", e))
}

/// The device time of `event`, from its start to its end (profiling queue).
///
/// # Errors
/// `Driver` naming clGetEventProfilingInfo.
pub fn elapsed(first: &Event, last: &Event) -> Result<std::time::Duration, BackendError> {
    let start = first
        .profiling_command_start()
        .map_err(|e| driver("clGetEventProfilingInfo(START)", e))?;
    let end = last
        .profiling_command_end()
        .map_err(|e| driver("clGetEventProfilingInfo(END)", e))?;
    Ok(std::time::Duration::from_nanos(end.saturating_sub(start)))
}
