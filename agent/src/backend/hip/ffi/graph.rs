//! A stream's launches captured once as a HIP graph (`hipStreamBeginCapture` …
//! `hipStreamEndCapture`, `hipGraphInstantiate`) and replayed with one `hipGraphLaunch`: a
//! transformer iteration's hundreds of kernels become one submission, the launch cost between them
//! paid once at capture (the same idea as Vulkan's recorded command buffer and CUDA graphs).

use super::{Status, Stream, check};
use crate::backend::BackendError;
use hip_runtime_sys as sys;
use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;

/// `hipStreamCaptureModeThreadLocal`: other threads' unsafe calls (a synchronous copy by another
/// kernel's worker) do not invalidate this capture; this thread's do, which is what we want.
const CAPTURE_THREAD_LOCAL: c_int = 1;

// SAFETY (for the block): libamdhip64's graph entry points with the signatures of
// hip_runtime_api.h (ROCm 5.2 and later), `hipGraph_t` and `hipGraphExec_t` as opaque pointers and
// the enum return type as its `int` value.
unsafe extern "C" {
    fn hipStreamBeginCapture(stream: sys::hipStream_t, mode: c_int) -> Status;
    fn hipStreamEndCapture(stream: sys::hipStream_t, graph: *mut *mut c_void) -> Status;
    fn hipGraphInstantiate(
        exec: *mut *mut c_void,
        graph: *mut c_void,
        error_node: *mut *mut c_void,
        log: *mut c_char,
        log_size: usize,
    ) -> Status;
    fn hipGraphLaunch(exec: *mut c_void, stream: sys::hipStream_t) -> Status;
    fn hipGraphExecDestroy(exec: *mut c_void) -> Status;
    fn hipGraphDestroy(graph: *mut c_void) -> Status;
}

/// A captured and instantiated graph, destroyed on drop (before the module its kernels come from:
/// the owner declares it first).
pub struct Graph {
    graph: *mut c_void,
    exec: *mut c_void,
}

impl Graph {
    /// Captures what `record` queues on `stream` (nothing runs) and instantiates it.
    ///
    /// # Errors
    /// `Driver` naming the call that failed: the capture, a launch inside it (`record`'s error),
    /// or the instantiation. The stream leaves capture mode either way.
    pub fn capture(
        stream: &Stream,
        record: impl FnOnce(&Stream) -> Result<(), BackendError>,
    ) -> Result<Graph, BackendError> {
        // SAFETY: a live stream, not capturing.
        check("hipStreamBeginCapture", unsafe {
            hipStreamBeginCapture(stream.0, CAPTURE_THREAD_LOCAL)
        })?;
        let recorded = record(stream);
        let mut g = Graph {
            graph: null_mut(),
            exec: null_mut(),
        };
        // SAFETY: the stream is capturing (begun above); a valid out-pointer. Called even when a
        // launch failed, so that the stream is usable again.
        let ended = check("hipStreamEndCapture", unsafe {
            hipStreamEndCapture(stream.0, &mut g.graph)
        });
        recorded?;
        ended?;
        // SAFETY: a graph just captured; no error node or log asked for.
        check("hipGraphInstantiate", unsafe {
            hipGraphInstantiate(&mut g.exec, g.graph, null_mut(), null_mut(), 0)
        })?;
        Ok(g)
    }

    /// Queues the whole graph on `stream`.
    ///
    /// # Errors
    /// `Driver` naming hipGraphLaunch.
    pub fn launch(&self, stream: &Stream) -> Result<(), BackendError> {
        // SAFETY: an instantiated graph (capture returns none otherwise) and a live stream; the
        // buffers its kernels use are owned by the same kernel as the graph and outlive it.
        check("hipGraphLaunch", unsafe {
            hipGraphLaunch(self.exec, stream.0)
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: each handle was made by capture and is destroyed once; null where it never was.
        unsafe {
            if !self.exec.is_null() {
                let _ = hipGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = hipGraphDestroy(self.graph);
            }
        }
    }
}
