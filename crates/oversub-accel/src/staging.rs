//! Host memory for copies ([`HostBuffer`]) and completion of asynchronous copies ([`Fence`]).

use std::ptr::NonNull;

use oversub_base::mem::{AlignedBuf, AllocError};
use oversub_base::process::Creator;

use crate::AccelError;

/// Alignment of host buffers: a page, which also satisfies `O_DIRECT` on every common device.
pub const HOST_BUFFER_ALIGN: usize = 4096;

type Release = Box<dyn FnOnce(*mut u8) + Send + Sync>;

/// Host memory owned by a backend, page-aligned, freed on drop: pinned (page-locked) or pageable.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    pinned: bool,
    release: Option<Release>,
    /// The process that allocated it: a forked child must not hand a driver's pinned memory back.
    creator: Creator,
}

// SAFETY: the buffer owns its memory exclusively; the raw pointer is just an address, and the release closure is
// Send + Sync.
unsafe impl Send for HostBuffer {}
// SAFETY: shared references only give out `&[u8]` or the address.
unsafe impl Sync for HostBuffer {}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("pinned", &self.pinned)
            .finish()
    }
}

impl HostBuffer {
    /// `len` bytes of zeroed, page-aligned pageable memory.
    pub fn pageable(len: usize) -> Result<HostBuffer, AccelError> {
        if len == 0 {
            return Err(AccelError::InvalidArgument(
                "a host buffer of 0 bytes".into(),
            ));
        }
        // The house's one aligned heap buffer; the release closure owns it, so releasing frees it (and a forked
        // child, which forgets the closure, leaks it as before).
        let buf = AlignedBuf::new(len, HOST_BUFFER_ALIGN).map_err(|e| match e {
            AllocError::OutOfMemory { .. } => {
                AccelError::OutOfMemory(format!("allocating {len} bytes of host memory"))
            }
            _ => AccelError::InvalidArgument(format!("a host buffer of {len} bytes")),
        })?;
        Ok(HostBuffer {
            ptr: buf.as_non_null(),
            len,
            pinned: false,
            creator: Creator::current(),
            release: Some(Box::new(move |_| drop(buf))),
        })
    }

    /// Wraps memory a backend allocated; `release` frees it on drop.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` bytes, page-aligned, owned by nothing else, and stays valid until
    /// `release` is called with it.
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        len: usize,
        pinned: bool,
        release: impl FnOnce(*mut u8) + Send + Sync + 'static,
    ) -> HostBuffer {
        HostBuffer {
            ptr,
            len,
            pinned,
            release: Some(Box::new(release)),
            creator: Creator::current(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: host buffers have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the memory is page-locked.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// The first byte's address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the memory is valid for `len` bytes and exclusively ours; `&self` keeps it alive.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        let release = self.release.take();
        if !self.creator.is_current() {
            // A forked child: a driver (CUDA) cannot be called in a fork of the process that initialised it, and
            // the memory is a copy that goes with the child. Leak it.
            std::mem::forget(release);
            return;
        }
        if let Some(release) = release {
            release(self.ptr.as_ptr());
        }
    }
}

/// The completion of an asynchronous copy ([`crate::DeviceMemory::copy_to_host_async`]); wait for it with
/// [`crate::DeviceMemory::fence_wait`] on the backend that made it.
#[must_use = "a fence must be waited for before the copy's memory is used or freed"]
#[derive(Debug, PartialEq, Eq)]
pub struct Fence(u64);

impl Fence {
    /// A fence of a copy that has already completed.
    pub const COMPLETE: Fence = Fence(0);

    /// A backend's fence with its own identifier (not 0).
    pub fn new(id: u64) -> Fence {
        Fence(id)
    }

    /// The backend's identifier (0 for [`Fence::COMPLETE`]).
    pub fn id(&self) -> u64 {
        self.0
    }
}
