//! An input bound only in slices ([`Binding::Slice`]: a model's weights, one tensor a dispatch)
//! may be larger than one allocation (maxMemoryAllocationSize: 2 GiB on AMDVLK, 4 GiB on RADV)
//! and than one binding (maxStorageBufferRange, 4 GiB at most): it is made as several device
//! buffers, segments, each holding whole slices, and a slice is bound at its offset in its
//! segment. Any other input is one buffer, bound whole.

use super::{DevBuffer, VulkanKernel};
use crate::backend::vulkan::plan::{Binding, Plan};
use crate::backend::{BackendError, storage};
use ash::vk;
use gpufleet_kernels::Buffer;

/// The element ranges `first..end` of the segments input `input` of `len` elements of `elem`
/// bytes is made as: the whole input where a dispatch binds it whole or it fits `limit` bytes;
/// else, going through its slices by start, a segment from a slice's start holding every
/// following slice that ends within `limit` bytes of it. A slice larger than `limit` gets a
/// segment of its own (the limit is soft on some drivers; the allocation says).
pub(super) fn split(
    plan: &Plan,
    input: usize,
    len: usize,
    elem: usize,
    limit: u64,
) -> Vec<(usize, usize)> {
    let mut slices = Vec::new();
    for b in plan.dispatches.iter().flat_map(|d| &d.bindings) {
        match *b {
            Binding::Input(i) if i == input => return vec![(0, len)],
            Binding::Slice {
                input: i,
                first,
                len,
            } if i == input => slices.push((first, first + len)),
            _ => {}
        }
    }
    if slices.is_empty() || (len * elem) as u64 <= limit {
        return vec![(0, len)];
    }
    slices.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (first, end) in slices {
        match out.last_mut() {
            Some(s) if ((end - s.0) * elem) as u64 <= limit => s.1 = s.1.max(end),
            _ => out.push((first, end)),
        }
    }
    out
}

/// An input on the device: its segments, `first..end` elements each, and their buffers.
pub(super) struct Placed {
    pub segments: Vec<(usize, usize, DevBuffer)>,
    /// Bytes an element.
    pub elem: usize,
}

impl Placed {
    /// The buffer, byte offset and byte range of a binding of this input: the whole first
    /// segment, or the segment holding a slice at the slice's offset in it.
    pub fn bound(&self, b: &Binding) -> (vk::Buffer, u64, u64) {
        if let Binding::Slice { first, len, .. } = *b
            && let Some((start, _, buf)) = self
                .segments
                .iter()
                .find(|(s, e, _)| *s <= first && first + len <= *e)
        {
            let elem = self.elem as u64;
            return (buf.buffer, (first - start) as u64 * elem, len as u64 * elem);
        }
        (self.segments[0].2.buffer, 0, vk::WHOLE_SIZE)
    }
}

impl VulkanKernel {
    /// Makes input `input` (host buffer `b`, stored as `e`) on the device in its segments (see
    /// [`split`]), each filled through a host-visible staging buffer from the buffer's own bytes
    /// where it holds them ([`storage::input_range_bytes`]: no copy of a model's weights), else a
    /// segment's conversion; the staging buffers are kept (pushed
    /// to `staging`, the segments in the same order) only when `keep` says (the timed command
    /// buffer copies from them), else freed once copied.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn place(
        &mut self,
        mem: &vk::PhysicalDeviceMemoryProperties,
        plan: &Plan,
        input: usize,
        b: &Buffer,
        e: storage::Elem,
        limit: u64,
        keep: bool,
        staging: &mut Vec<DevBuffer>,
    ) -> Result<Placed, BackendError> {
        let (len, elem) = (b.len(), e.size());
        let mut segments = Vec::new();
        for (first, end) in split(plan, input, len, elem, limit) {
            let bytes = storage::input_range_bytes(b, e, first..end);
            let d = self.create_buffer(mem, bytes.len() as u64, false)?;
            let st = self.create_buffer(mem, bytes.len() as u64, true)?;
            self.write_host(st, &bytes)?;
            self.copy_now(st, d)?;
            if keep {
                staging.push(st);
            } else {
                self.destroy_buffer(st);
            }
            segments.push((first, end, d));
        }
        Ok(Placed { segments, elem })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vulkan::plan::{Dispatch, Passes, Storage};
    use std::collections::BTreeMap;

    fn plan_binding(bindings: Vec<Binding>) -> Plan {
        Plan {
            input_storage: vec![Storage::F32; 2],
            output_storage: Storage::F32,
            scratch_bytes: Vec::new(),
            passes: Passes::default(),
            dispatches: bindings
                .into_iter()
                .map(|b| Dispatch {
                    shader: "llm_linear".into(),
                    label: "linear".into(),
                    spirv: &[],
                    spec: Vec::new(),
                    push: Vec::new(),
                    bindings: vec![Binding::Input(0), b, Binding::Output],
                    groups: [1, 1, 1],
                })
                .collect(),
            config: BTreeMap::new(),
        }
    }

    fn slice(first: usize, len: usize) -> Binding {
        Binding::Slice {
            input: 1,
            first,
            len,
        }
    }

    #[test]
    fn an_input_past_the_limit_is_cut_between_slices_and_each_slice_binds_inside_its_segment() {
        // 4-byte elements, 1000 bytes a segment at most: 250 elements.
        let slices = [
            slice(0, 100),
            slice(64, 100),
            slice(192, 50),
            slice(256, 200),
            slice(448, 40),
        ];
        let plan = plan_binding(slices.to_vec());
        let segs = split(&plan, 1, 600, 4, 1000);
        assert_eq!(segs, vec![(0, 242), (256, 488)]);
        let placed = Placed {
            segments: segs
                .iter()
                .map(|&(s, e)| {
                    let buffer = vk::Buffer::null();
                    (
                        s,
                        e,
                        DevBuffer {
                            buffer,
                            memory: vk::DeviceMemory::null(),
                            size: 0,
                        },
                    )
                })
                .collect(),
            elem: 4,
        };
        for b in &slices {
            let Binding::Slice { first, len, .. } = *b else {
                unreachable!()
            };
            let (_, offset, range) = placed.bound(b);
            let seg = segs
                .iter()
                .find(|s| s.0 <= first && first + len <= s.1)
                .unwrap();
            assert_eq!(offset, 4 * (first - seg.0) as u64, "{b:?}");
            assert_eq!(range, 4 * len as u64, "{b:?}");
            assert!(range + offset <= 4 * (seg.1 - seg.0) as u64, "{b:?}");
        }
    }

    #[test]
    fn an_input_within_the_limit_or_bound_whole_stays_one_buffer() {
        let plan = plan_binding(vec![slice(0, 100), slice(400, 100)]);
        assert_eq!(split(&plan, 1, 500, 4, 2000), vec![(0, 500)]);
        // Input 0 is bound whole by every dispatch.
        assert_eq!(split(&plan, 0, 5000, 4, 1000), vec![(0, 5000)]);
        let mut whole = plan_binding(vec![slice(0, 100), slice(400, 100)]);
        whole.dispatches[0].bindings[1] = Binding::Input(1);
        assert_eq!(split(&whole, 1, 500, 4, 1000), vec![(0, 500)]);
        // A slice larger than the limit has a segment of its own.
        let big = plan_binding(vec![slice(0, 100), slice(128, 400)]);
        assert_eq!(split(&big, 1, 528, 4, 1000), vec![(0, 100), (128, 528)]);
    }
}
