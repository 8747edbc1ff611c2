// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! A BPF_F_MMAPABLE array map as shared memory: the daemon reads and changes the port and
//! block words, and reads the open-addressed tables, without a syscall per entry.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::AtomicU64;

use libbpf_rs::{MapCore, MapHandle};

use super::{map_err, Result, TableError};

/// A BPF_F_MMAPABLE array map seen as shared u64 words: the daemon uses the same atomic
/// instructions on them as the BPF programs do.
pub struct MmapWords {
    ptr: *mut AtomicU64,
    len: usize,
    len32: usize,
    bytes: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for MmapWords {}
// SAFETY: as for Send: every access to the shared words is atomic, and the mapping is
// unmapped only by Drop, when no reference is left.
unsafe impl Sync for MmapWords {}

impl MmapWords {
    pub fn new(map: &MapHandle, name: &'static str) -> Result<Self> {
        let info = map.info().map_err(map_err(name))?;
        let (entries, vsize) = (info.info.max_entries as usize, info.info.value_size as usize);
        if vsize == 0 || vsize % 4 != 0 {
            return Err(TableError::Layout {
                map: name,
                what: format!("value size {vsize}, want a multiple of 4"),
            });
        }
        let page = 4096usize;
        let bytes = (entries * vsize).div_ceil(page) * page;
        // SAFETY: mapping a BPF array map fd created with BPF_F_MMAPABLE, shared, for its
        // whole (page-rounded) size; unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(TableError::Layout {
                map: name,
                what: format!("mmap failed: {}", std::io::Error::last_os_error()),
            });
        }
        Ok(MmapWords { ptr: ptr.cast(), len: entries * vsize / 8, len32: entries * vsize / 4, bytes })
    }

    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: ptr maps len u64 words for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The same memory as u32 words (a map of u32 values, such as nx_det_nsess).
    pub fn words32(&self) -> &[std::sync::atomic::AtomicU32] {
        // SAFETY: ptr maps len32 u32 words (page-aligned) for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.cast(), self.len32) }
    }
}

impl Drop for MmapWords {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}
