//! Device buffers of a [`VulkanKernel`]: creation with bound memory, host reads and writes of
//! host-visible memory, and one-shot command buffers (copies between buffers outside the timed
//! command buffer).

use super::{DevBuffer, VulkanKernel};
use crate::backend::BackendError;
use crate::backend::vulkan::ffi::fail;
use ash::vk;

fn memory_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
    want: vk::MemoryPropertyFlags,
) -> Option<u32> {
    (0..props.memory_type_count).find(|&i| {
        bits & (1 << i) != 0 && props.memory_types[i as usize].property_flags.contains(want)
    })
}

impl VulkanKernel {
    pub(super) fn create_buffer(
        &mut self,
        mem: &vk::PhysicalDeviceMemoryProperties,
        size: u64,
        host_visible: bool,
    ) -> Result<DevBuffer, BackendError> {
        let size = size.max(4);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let dev = self.dev();
        // SAFETY: valid device and create info.
        let buffer =
            unsafe { dev.create_buffer(&info, None) }.map_err(|e| fail("vkCreateBuffer", e))?;
        // SAFETY: `buffer` was just created on this device.
        let req = unsafe { dev.get_buffer_memory_requirements(buffer) };
        let want = if host_visible {
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT
        } else {
            vk::MemoryPropertyFlags::DEVICE_LOCAL
        };
        let Some(type_index) = memory_type(mem, req.memory_type_bits, want)
            .or_else(|| memory_type(mem, req.memory_type_bits, vk::MemoryPropertyFlags::empty()))
        else {
            // SAFETY: not bound yet, destroy directly.
            unsafe { dev.destroy_buffer(buffer, None) };
            return Err(fail(
                "vkAllocateMemory (no memory type)",
                vk::Result::ERROR_FEATURE_NOT_PRESENT,
            ));
        };
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size)
            .memory_type_index(type_index);
        // SAFETY: valid allocate info for this device.
        let memory = match unsafe { dev.allocate_memory(&alloc, None) } {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: `buffer` was created above on `dev`, has no memory bound and was never
                // used; it is destroyed once, here, and the error return leaves it unused.
                unsafe { dev.destroy_buffer(buffer, None) };
                return Err(fail("vkAllocateMemory", e));
            }
        };
        // SAFETY: fresh memory of a compatible type, offset 0.
        unsafe { dev.bind_buffer_memory(buffer, memory, 0) }
            .map_err(|e| fail("vkBindBufferMemory", e))?;
        let b = DevBuffer {
            buffer,
            memory,
            size,
        };
        self.buffers.push(b);
        Ok(b)
    }

    /// Destroys `b`, a buffer of this kernel no recorded command uses, before the kernel goes.
    pub(super) fn destroy_buffer(&mut self, b: DevBuffer) {
        self.buffers.retain(|x| x.buffer != b.buffer);
        let dev = self.dev();
        // SAFETY: `b` was made by `create_buffer` on this device and, as the caller promises,
        // nothing pending uses it (`one_shot` waits); removed from `buffers`, Drop skips it.
        unsafe {
            dev.destroy_buffer(b.buffer, None);
            dev.free_memory(b.memory, None);
        }
    }

    pub(super) fn write_host(&self, b: DevBuffer, data: &[u8]) -> Result<(), BackendError> {
        let dev = self.dev();
        // SAFETY: host-visible, coherent memory of at least data.len() bytes,
        // mapped once and unmapped before returning.
        unsafe {
            let p = dev
                .map_memory(b.memory, 0, b.size, vk::MemoryMapFlags::empty())
                .map_err(|e| fail("vkMapMemory", e))?;
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                p.cast::<u8>(),
                data.len().min(b.size as usize),
            );
            dev.unmap_memory(b.memory);
        }
        Ok(())
    }

    pub(super) fn read_host(&self, b: DevBuffer, len: usize) -> Result<Vec<u8>, BackendError> {
        let mut out = vec![0u8; len.min(b.size as usize)];
        self.read_host_into(b, &mut out)?;
        Ok(out)
    }

    /// Copies the start of host-visible `b` into `out` (as much as both hold).
    pub(super) fn read_host_into(&self, b: DevBuffer, out: &mut [u8]) -> Result<(), BackendError> {
        let dev = self.dev();
        let len = out.len().min(b.size as usize);
        // SAFETY: as in write_host, reading instead.
        unsafe {
            let p = dev
                .map_memory(b.memory, 0, b.size, vk::MemoryMapFlags::empty())
                .map_err(|e| fail("vkMapMemory", e))?;
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), out.as_mut_ptr(), len);
            dev.unmap_memory(b.memory);
        }
        Ok(())
    }

    /// Records and runs `f` on a one-shot command buffer, waiting for it.
    pub(super) fn one_shot(
        &self,
        f: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<(), BackendError> {
        let dev = self.dev();
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device; the command buffer is
        // freed before returning, after the fence says it finished.
        unsafe {
            let cb = dev
                .allocate_command_buffers(&alloc)
                .map_err(|e| fail("vkAllocateCommandBuffers", e))?[0];
            let begin = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            dev.begin_command_buffer(cb, &begin)
                .map_err(|e| fail("vkBeginCommandBuffer", e))?;
            f(dev, cb);
            dev.end_command_buffer(cb)
                .map_err(|e| fail("vkEndCommandBuffer", e))?;
            // Freed only once finished: a failed wait may leave it pending.
            self.submit_and_wait(cb)?;
            dev.free_command_buffers(self.pool, &[cb]);
        }
        Ok(())
    }

    /// Submits the recorded command buffer `cb` to the queue and waits for it on the fence.
    pub(super) fn submit_and_wait(&self, cb: vk::CommandBuffer) -> Result<(), BackendError> {
        let dev = self.dev();
        let cbs = [cb];
        let submit = vk::SubmitInfo::default().command_buffers(&cbs);
        // SAFETY: `cb` is a finished recording of this device's pool, the fence and queue are
        // this device's, and we wait for completion before returning.
        unsafe {
            dev.reset_fences(&[self.fence])
                .map_err(|e| fail("vkResetFences", e))?;
            dev.queue_submit(self.queue, &[submit], self.fence)
                .map_err(|e| fail("vkQueueSubmit", e))?;
            dev.wait_for_fences(&[self.fence], true, u64::MAX)
                .map_err(|e| fail("vkWaitForFences", e))?;
        }
        Ok(())
    }

    /// Records a copy of `src` into `dst` (as much as both hold).
    ///
    /// # Safety
    /// `cb` is a command buffer of this device in the recording state; both buffers are alive.
    pub(super) unsafe fn record_copy(
        dev: &ash::Device,
        cb: vk::CommandBuffer,
        src: DevBuffer,
        dst: DevBuffer,
    ) {
        let region = [vk::BufferCopy::default().size(src.size.min(dst.size))];
        // SAFETY: as the caller promises.
        unsafe { dev.cmd_copy_buffer(cb, src.buffer, dst.buffer, &region) };
    }

    /// Fills `b` with zeros now, on a one-shot command buffer.
    pub(super) fn fill_zero_now(&self, b: DevBuffer) -> Result<(), BackendError> {
        // SAFETY: one_shot hands a recording command buffer of this device; the buffer is ours
        // (VK_WHOLE_SIZE fills the largest multiple of 4 bytes it holds, at least 4).
        self.one_shot(|dev, cb| unsafe { dev.cmd_fill_buffer(cb, b.buffer, 0, vk::WHOLE_SIZE, 0) })
    }

    /// Copies `src` into `dst` now, on a one-shot command buffer.
    pub(super) fn copy_now(&self, src: DevBuffer, dst: DevBuffer) -> Result<(), BackendError> {
        // SAFETY: one_shot hands a recording command buffer of this device; both buffers are ours.
        self.one_shot(|dev, cb| unsafe { Self::record_copy(dev, cb, src, dst) })
    }
}
