//! The one aligned heap buffer of oversub ([`AlignedBuf`]: direct I/O's buffers, the pageable host buffers of the
//! device backends) and the region type the I/O engines read and write ([`IoVec`]).

use std::alloc::Layout;
use std::ptr::NonNull;

/// Why an [`AlignedBuf`] could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// The alignment is not a power of two, or the size overflows with it.
    #[error("bad buffer layout: {len} bytes aligned to {align}")]
    Layout {
        /// Bytes asked for.
        len: usize,
        /// Alignment asked for.
        align: usize,
    },
    /// The allocator had no memory.
    #[error("out of memory allocating {len} bytes")]
    OutOfMemory {
        /// Bytes asked for.
        len: usize,
    },
}

/// One contiguous memory region of an I/O request. A raw pointer because the memory (pinned host memory, mapped
/// device memory) is owned elsewhere.
#[derive(Debug, Clone, Copy)]
pub struct IoVec {
    /// Start of the region.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: an IoVec is only an address and a length; it is dereferenced solely by the
// kernel or engine threads under the contract of `IoEngine::submit`, whose caller
// guarantees the memory stays valid and unaliased until the batch completes.
unsafe impl Send for IoVec {}
// SAFETY: shared references only copy the address/length; see the Send impl above.
unsafe impl Sync for IoVec {}

/// A zero-initialised heap buffer aligned to a power of two (e.g. 4096 for O_DIRECT).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("align", &self.layout.align())
            .finish()
    }
}

// SAFETY: the buffer is uniquely owned heap memory, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to `align` (a power of two).
    pub fn new(len: usize, align: usize) -> Result<Self, AllocError> {
        // A zero-sized allocation is not allowed; allocate one unit and expose none.
        let size = len.max(align).max(1);
        let layout =
            Layout::from_size_align(size, align).map_err(|_| AllocError::Layout { len, align })?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(AllocError::OutOfMemory { len })?;
        Ok(AlignedBuf { ptr, len, layout })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Start of the buffer, never null.
    pub fn as_non_null(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The contents.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed) bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The contents, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The whole buffer as one [`IoVec`].
    pub fn iovec(&mut self) -> IoVec {
        IoVec {
            ptr: self.ptr.as_ptr(),
            len: self.len,
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_sized() {
        for (len, align) in [
            (0, 4096),
            (1, 4096),
            (5000, 4096),
            (3 << 20, 2 << 20),
            (7, 8),
        ] {
            let mut b = AlignedBuf::new(len, align).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % align, 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
            b.as_mut_slice().fill(7);
            let v = b.iovec();
            assert_eq!((v.ptr, v.len), (b.as_ptr(), len));
        }
    }

    #[test]
    fn a_bad_alignment_is_an_error() {
        assert_eq!(
            AlignedBuf::new(10, 3).unwrap_err(),
            AllocError::Layout { len: 10, align: 3 }
        );
    }
}
