//! The unsafe HIP calls, each wrapped once with its safety argument; the handles that own device
//! memory, streams, events and modules and release them on drop; and the one place HIP status
//! codes become our errors.
//!
//! `hip-runtime-sys` links libamdhip64 (found through `HIP_PATH`/`ROCM_PATH`) and provides the
//! handle types and `hipDeviceProp_t`. The functions themselves are declared here, returning the
//! status as a plain `c_int`: the crate's bindings (generated from HIP 5.4) return `hipError_t` as
//! a Rust enum, and a code outside that enum — ROCm 6 added several — would be undefined
//! behaviour the moment it is returned. Its `hipDeviceProp_t` is the layout ROCm 5.x defines and
//! ROCm 6 keeps behind the plain `hipGetDeviceProperties` symbol (its R0000 ABI), so the same
//! binary source builds against both.

mod graph;

pub use graph::Graph;

use crate::backend::BackendError;
use hip_runtime_sys as sys;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

/// A HIP status code (`hipError_t`), kept as an integer.
pub type Status = c_int;

pub const HIP_SUCCESS: Status = 0;
pub const HIP_ERROR_OUT_OF_MEMORY: Status = 2;
pub const HIP_ERROR_INSUFFICIENT_DRIVER: Status = 35;
pub const HIP_ERROR_NO_DEVICE: Status = 100;

// SAFETY (for the block): these are libamdhip64's C entry points with the signatures of
// hip_runtime_api.h (ROCm 5.2 and later), the enum return type spelled as its `int` value.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" {
    fn hipGetDeviceCount(count: *mut c_int) -> Status;
    fn hipGetDeviceProperties(prop: *mut sys::hipDeviceProp_t, device: c_int) -> Status;
    fn hipDeviceGetPCIBusId(pci_bus_id: *mut c_char, len: c_int, device: c_int) -> Status;
    fn hipDriverGetVersion(version: *mut c_int) -> Status;
    fn hipRuntimeGetVersion(version: *mut c_int) -> Status;
    fn hipSetDevice(device: c_int) -> Status;
    fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> Status;
    fn hipFree(ptr: *mut c_void) -> Status;
    fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> Status;
    fn hipHostFree(ptr: *mut c_void) -> Status;
    fn hipMemcpyHtoD(dst: *mut c_void, src: *mut c_void, size: usize) -> Status;
    fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, size: usize) -> Status;
    fn hipMemcpyHtoDAsync(
        dst: *mut c_void,
        src: *mut c_void,
        size: usize,
        stream: sys::hipStream_t,
    ) -> Status;
    fn hipMemcpyDtoHAsync(
        dst: *mut c_void,
        src: *mut c_void,
        size: usize,
        stream: sys::hipStream_t,
    ) -> Status;
    fn hipMemcpyDtoDAsync(
        dst: *mut c_void,
        src: *mut c_void,
        size: usize,
        stream: sys::hipStream_t,
    ) -> Status;
    fn hipStreamCreate(stream: *mut sys::hipStream_t) -> Status;
    fn hipStreamDestroy(stream: sys::hipStream_t) -> Status;
    fn hipStreamSynchronize(stream: sys::hipStream_t) -> Status;
    fn hipEventCreate(event: *mut sys::hipEvent_t) -> Status;
    fn hipEventDestroy(event: sys::hipEvent_t) -> Status;
    fn hipEventRecord(event: sys::hipEvent_t, stream: sys::hipStream_t) -> Status;
    fn hipEventSynchronize(event: sys::hipEvent_t) -> Status;
    fn hipEventElapsedTime(ms: *mut f32, start: sys::hipEvent_t, stop: sys::hipEvent_t) -> Status;
    fn hipModuleLoadData(module: *mut sys::hipModule_t, image: *const c_void) -> Status;
    fn hipModuleUnload(module: sys::hipModule_t) -> Status;
    fn hipModuleGetFunction(
        function: *mut sys::hipFunction_t,
        module: sys::hipModule_t,
        name: *const c_char,
    ) -> Status;
    fn hipModuleLaunchKernel(
        f: sys::hipFunction_t,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: sys::hipStream_t,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Status;
    fn hipGetErrorName(status: Status) -> *const c_char;
}

/// The name of a status (`hipErrorNoDevice`), from the runtime.
pub fn error_name(status: Status) -> String {
    // SAFETY: hipGetErrorName accepts any value and returns a pointer to a static NUL-terminated
    // string (or null, handled).
    let p = unsafe { hipGetErrorName(status) };
    if p.is_null() {
        return format!("hipError{status}");
    }
    // SAFETY: non-null and NUL-terminated, with static lifetime.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The error for a failed `call`: out-of-memory codes become `OutOfMemory`, the rest `Driver`;
/// the message is the status name and number (`hipErrorInvalidValue (1)`). Pure.
pub fn call_error(call: &str, status: Status, name: &str) -> BackendError {
    let message = format!("{name} ({status})");
    if status == HIP_ERROR_OUT_OF_MEMORY {
        return BackendError::OutOfMemory {
            backend: "hip".into(),
            message: format!("{call}: {message}"),
        };
    }
    BackendError::Driver {
        backend: "hip".into(),
        call: call.into(),
        message,
    }
}

/// Why the backend is unavailable when counting devices fails. Pure.
pub fn discovery_error(status: Status, name: &str) -> BackendError {
    let reason = match status {
        HIP_ERROR_NO_DEVICE => format!("no HIP device ({name})"),
        HIP_ERROR_INSUFFICIENT_DRIVER => format!(
            "the amdgpu kernel driver is missing or too old for this ROCm ({name}); \
             check /dev/kfd and `rocminfo`"
        ),
        _ => format!("hipGetDeviceCount: {name} ({status})"),
    };
    BackendError::Unavailable {
        backend: "hip".into(),
        reason,
    }
}

/// `Ok` for hipSuccess, else the call's error with the runtime's name for the status.
///
/// # Errors
/// See [`call_error`].
pub fn check(call: &str, status: Status) -> Result<(), BackendError> {
    if status == HIP_SUCCESS {
        Ok(())
    } else {
        Err(call_error(call, status, &error_name(status)))
    }
}

/// The number of HIP devices.
///
/// # Errors
/// `Unavailable` with [`discovery_error`]'s reason.
pub fn device_count() -> Result<usize, BackendError> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer for the call's duration.
    let status = unsafe { hipGetDeviceCount(&mut n) };
    if status != HIP_SUCCESS {
        return Err(discovery_error(status, &error_name(status)));
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The properties of device `ordinal`.
///
/// # Errors
/// `Driver` naming hipGetDeviceProperties.
pub fn properties(ordinal: c_int) -> Result<sys::hipDeviceProp_t, BackendError> {
    // SAFETY: hipDeviceProp_t is plain data (integers, arrays and two raw pointers the runtime
    // fills), for which all-zero bytes are a valid value.
    let mut prop: sys::hipDeviceProp_t = unsafe { std::mem::zeroed() };
    // SAFETY: `prop` is a writable hipDeviceProp_t of the layout the symbol fills (see the module
    // notes).
    check("hipGetDeviceProperties", unsafe {
        hipGetDeviceProperties(&mut prop, ordinal)
    })?;
    Ok(prop)
}

/// The PCI bus id string of device `ordinal` as the runtime formats it.
///
/// # Errors
/// `Driver` naming hipDeviceGetPCIBusId.
pub fn pci_bus_id(ordinal: c_int) -> Result<String, BackendError> {
    let mut buf = [0 as c_char; 64];
    // SAFETY: the runtime writes at most `len` bytes, NUL included, into `buf`.
    check("hipDeviceGetPCIBusId", unsafe {
        hipDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, ordinal)
    })?;
    buf[buf.len() - 1] = 0;
    // SAFETY: `buf` is NUL-terminated (forced above).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// The driver and runtime versions (`HIP_VERSION` encoding).
pub fn versions() -> (Option<i32>, Option<i32>) {
    let (mut d, mut r): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers for the calls' duration.
    let d_ok = unsafe { hipDriverGetVersion(&mut d) } == HIP_SUCCESS;
    // SAFETY: `r` is a live local `c_int`, a valid out-pointer for the call's duration.
    let r_ok = unsafe { hipRuntimeGetVersion(&mut r) } == HIP_SUCCESS;
    (d_ok.then_some(d), r_ok.then_some(r))
}

/// Makes device `ordinal` current for this thread.
///
/// # Errors
/// `Driver` naming hipSetDevice.
pub fn set_device(ordinal: c_int) -> Result<(), BackendError> {
    // SAFETY: plain value argument.
    check("hipSetDevice", unsafe { hipSetDevice(ordinal) })
}

/// Device memory, freed on drop.
pub struct DeviceBuffer {
    ptr: *mut c_void,
    bytes: usize,
}

impl DeviceBuffer {
    /// `bytes` bytes (at least 1) of device memory.
    ///
    /// # Errors
    /// `OutOfMemory` or `Driver` naming hipMalloc.
    pub fn new(bytes: usize) -> Result<DeviceBuffer, BackendError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; on success it owns `bytes` bytes until hipFree.
        check(&format!("hipMalloc({bytes} bytes)"), unsafe {
            hipMalloc(&mut ptr, bytes.max(1))
        })?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The device address, as a kernel argument takes it.
    pub fn device_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Copies `data` (at most [`Self::bytes`]) to the start of the buffer, synchronously.
    ///
    /// # Errors
    /// `Driver` naming hipMemcpyHtoD.
    pub fn upload(&mut self, data: &[u8]) -> Result<(), BackendError> {
        let n = data.len().min(self.bytes);
        if n == 0 {
            return Ok(());
        }
        // SAFETY: both regions hold at least `n` bytes; HIP only reads `data` despite the
        // non-const pointer in its signature, and the copy completes before returning.
        check("hipMemcpyHtoD", unsafe {
            hipMemcpyHtoD(self.ptr, data.as_ptr() as *mut c_void, n)
        })
    }

    /// Copies the start of the buffer into `out`, synchronously.
    ///
    /// # Errors
    /// `Driver` naming hipMemcpyDtoH.
    pub fn download(&self, out: &mut [u8]) -> Result<(), BackendError> {
        let n = out.len().min(self.bytes);
        if n == 0 {
            return Ok(());
        }
        // SAFETY: both regions hold at least `n` bytes and the copy completes before returning
        // (it waits for the work on the null stream, which synchronizes with other streams).
        check("hipMemcpyDtoH", unsafe {
            hipMemcpyDtoH(out.as_mut_ptr() as *mut c_void, self.ptr, n)
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from hipMalloc and is freed once; nothing uses it after drop (the
        // owner synchronizes its stream before dropping buffers).
        let _ = unsafe { hipFree(self.ptr) };
    }
}

/// Page-locked host memory (so timed transfers run at DMA speed), freed on drop.
pub struct PinnedBuffer {
    ptr: *mut c_void,
    bytes: usize,
}

impl PinnedBuffer {
    /// `bytes` bytes (at least 1) of pinned host memory.
    ///
    /// # Errors
    /// `OutOfMemory` or `Driver` naming hipHostMalloc.
    pub fn new(bytes: usize) -> Result<PinnedBuffer, BackendError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; flags 0 is hipHostMallocDefault.
        check(&format!("hipHostMalloc({bytes} bytes)"), unsafe {
            hipHostMalloc(&mut ptr, bytes.max(1), 0)
        })?;
        // SAFETY: `ptr` owns at least `bytes` writable bytes; zeroing them makes every later
        // read of the slice a read of initialized memory.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        Ok(PinnedBuffer { ptr, bytes })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` owns `bytes` bytes of host memory, zeroed at allocation, so initialized;
        // the device writes into it only during copies the owner waits for.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.bytes) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.bytes) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from hipHostMalloc and is freed once, after the owner's stream
        // finished every copy that used it.
        let _ = unsafe { hipHostFree(self.ptr) };
    }
}

/// A stream, destroyed on drop.
pub struct Stream(sys::hipStream_t);

impl Stream {
    /// # Errors
    /// `Driver` naming hipStreamCreate.
    pub fn new() -> Result<Stream, BackendError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("hipStreamCreate", unsafe { hipStreamCreate(&mut s) })?;
        Ok(Stream(s))
    }

    /// Waits for everything queued on the stream.
    ///
    /// # Errors
    /// `Driver` naming hipStreamSynchronize (a kernel fault surfaces here).
    pub fn synchronize(&self) -> Result<(), BackendError> {
        // SAFETY: a live stream.
        check("hipStreamSynchronize", unsafe {
            hipStreamSynchronize(self.0)
        })
    }

    /// Queues a copy of `src` (pinned, at most the buffer's size) into `dst`.
    ///
    /// # Errors
    /// `Driver` naming hipMemcpyHtoDAsync.
    pub fn upload(&self, dst: &DeviceBuffer, src: &PinnedBuffer) -> Result<(), BackendError> {
        let n = src.bytes.min(dst.bytes);
        // SAFETY: both regions hold `n` bytes and stay alive until the stream is synchronized
        // (the caller owns both for longer than the iteration).
        check("hipMemcpyHtoDAsync", unsafe {
            hipMemcpyHtoDAsync(dst.ptr, src.ptr, n, self.0)
        })
    }

    /// Queues a copy of `src` into `dst` (pinned, at most the buffer's size).
    ///
    /// # Errors
    /// `Driver` naming hipMemcpyDtoHAsync.
    pub fn download(&self, dst: &mut PinnedBuffer, src: &DeviceBuffer) -> Result<(), BackendError> {
        let n = dst.bytes.min(src.bytes);
        // SAFETY: as in `upload`.
        check("hipMemcpyDtoHAsync", unsafe {
            hipMemcpyDtoHAsync(dst.ptr, src.ptr, n, self.0)
        })
    }
}

impl Stream {
    /// Queues a copy of `src` into `dst` on the device (at most the smaller size).
    ///
    /// # Errors
    /// `Driver` naming hipMemcpyDtoDAsync.
    pub fn copy(&self, dst: &DeviceBuffer, src: &DeviceBuffer) -> Result<(), BackendError> {
        let n = dst.bytes.min(src.bytes);
        // SAFETY: both device regions hold `n` bytes and outlive the copy (the caller
        // synchronizes the stream before either is freed).
        check("hipMemcpyDtoDAsync", unsafe {
            hipMemcpyDtoDAsync(dst.ptr, src.ptr, n, self.0)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by hipStreamCreate, destroyed once; pending work completes first
        // (hipStreamDestroy waits for it).
        let _ = unsafe { hipStreamDestroy(self.0) };
    }
}

/// An event for timing, destroyed on drop.
pub struct Event(sys::hipEvent_t);

impl Event {
    /// # Errors
    /// `Driver` naming hipEventCreate.
    pub fn new() -> Result<Event, BackendError> {
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("hipEventCreate", unsafe { hipEventCreate(&mut e) })?;
        Ok(Event(e))
    }

    /// Records the event on `stream`.
    ///
    /// # Errors
    /// `Driver` naming hipEventRecord.
    pub fn record(&self, stream: &Stream) -> Result<(), BackendError> {
        // SAFETY: a live event and a live stream.
        check("hipEventRecord", unsafe {
            hipEventRecord(self.0, stream.0)
        })
    }

    /// Milliseconds from `start` to `self`, after waiting for `self`.
    ///
    /// # Errors
    /// `Driver` naming hipEventSynchronize or hipEventElapsedTime.
    pub fn elapsed_since(&self, start: &Event) -> Result<f32, BackendError> {
        // SAFETY: a live, recorded event.
        check("hipEventSynchronize", unsafe {
            hipEventSynchronize(self.0)
        })?;
        let mut ms = 0f32;
        // SAFETY: two live, completed events and a valid out-pointer.
        check("hipEventElapsedTime", unsafe {
            hipEventElapsedTime(&mut ms, start.0, self.0)
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by hipEventCreate, destroyed once.
        let _ = unsafe { hipEventDestroy(self.0) };
    }
}

/// A loaded code object, unloaded on drop. Its functions are valid while it lives.
pub struct Module(sys::hipModule_t);

impl Module {
    /// Loads a code object image (an AMDGPU ELF) for the current device.
    ///
    /// # Errors
    /// `Driver` naming hipModuleLoadData and the target, e.g. hipErrorNoBinaryForGpu or
    /// hipErrorInvalidImage when the device cannot run it.
    pub fn load(image: &'static [u8], target: &str) -> Result<Module, BackendError> {
        let mut m = std::ptr::null_mut();
        // SAFETY: `image` is a complete code object that lives for the whole program (embedded
        // with include_bytes!), which is what hipModuleLoadData may keep referring to.
        check(&format!("hipModuleLoadData({target})"), unsafe {
            hipModuleLoadData(&mut m, image.as_ptr() as *const c_void)
        })?;
        Ok(Module(m))
    }

    /// The kernel called `name`.
    ///
    /// # Errors
    /// `Driver` naming hipModuleGetFunction and the kernel.
    pub fn function(&self, name: &str) -> Result<Function, BackendError> {
        let call = format!("hipModuleGetFunction({name})");
        let c_name = std::ffi::CString::new(name).map_err(|_| BackendError::Driver {
            backend: "hip".into(),
            call: call.clone(),
            message: "kernel name contains NUL".into(),
        })?;
        let mut f = std::ptr::null_mut();
        // SAFETY: a live module, a NUL-terminated name and a valid out-pointer.
        check(&call, unsafe {
            hipModuleGetFunction(&mut f, self.0, c_name.as_ptr())
        })?;
        Ok(Function(f))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded once, unloaded once; the owner drops its functions' users first and has
        // synchronized the stream.
        let _ = unsafe { hipModuleUnload(self.0) };
    }
}

/// A kernel of a [`Module`] (valid while the module lives; the owner keeps both together).
pub struct Function(sys::hipFunction_t);

/// A kernel argument value, laid out as the kernel parameter it fills.
#[derive(Debug, Clone, Copy)]
pub enum ArgValue {
    Ptr(*mut c_void),
    Int(i32),
    Long(i64),
    Float(f32),
}

/// Queues `f` over `grid` blocks of `block` work-items on `stream` with `args`.
///
/// # Errors
/// `Driver` naming hipModuleLaunchKernel and the kernel.
pub fn launch(
    stream: &Stream,
    f: &Function,
    name: &str,
    grid: [u32; 3],
    block: [u32; 3],
    args: &mut [ArgValue],
) -> Result<(), BackendError> {
    // One pointer per argument, to the value itself (not to the enum).
    let mut params: Vec<*mut c_void> = args
        .iter_mut()
        .map(|a| match a {
            ArgValue::Ptr(p) => p as *mut *mut c_void as *mut c_void,
            ArgValue::Int(v) => v as *mut i32 as *mut c_void,
            ArgValue::Long(v) => v as *mut i64 as *mut c_void,
            ArgValue::Float(v) => v as *mut f32 as *mut c_void,
        })
        .collect();
    // SAFETY: `f` belongs to a live module; `params` holds one pointer per kernel parameter, in
    // order, each to a value of the parameter's type and size (device pointers, int, float: the
    // plan follows the kernel signatures in kernels/hip), alive for the call, which copies them
    // into the kernarg segment before returning.
    check(&format!("hipModuleLaunchKernel({name})"), unsafe {
        hipModuleLaunchKernel(
            f.0,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            0,
            stream.0,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

#[cfg(test)]
mod tests;
