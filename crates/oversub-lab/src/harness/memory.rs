//! Page-aligned memory for the experiments' baselines (`O_DIRECT` needs aligned buffers): anonymous and file
//! mappings, and the random fill every experiment pages.

use crate::LabError;

/// An anonymous private mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes of fresh zero pages (not yet faulted in).
    pub fn anonymous(len: usize) -> Result<Mapping, LabError> {
        // SAFETY: a new anonymous mapping at an address of the kernel's choice touches no existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(LabError::last_os("mmap"));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Maps `len` bytes of a file read-only and shared, so touching a page faults it in from storage.
    pub fn file(fd: libc::c_int, len: usize) -> Result<Mapping, LabError> {
        // SAFETY: a new read-only shared mapping of an open file; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(LabError::last_os("mmap"));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads one byte of every 4 KiB page, faulting each in; returns a sum so the loop is not optimised away.
    pub fn walk_4k(&self) -> u64 {
        let mut sum = 0u64;
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, inside the readable mapping; volatile so every page is really touched.
            sum = sum.wrapping_add(u64::from(unsafe {
                std::ptr::read_volatile(self.ptr.add(off))
            }));
            off += 4096;
        }
        sum
    }

    /// The bytes, to fill or read.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is writable, len bytes long, and borrowed mutably through self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and still owns.
        unsafe { libc::munmap(self.ptr.cast(), self.len.max(1)) };
    }
}

/// Fills `buf` with fast pseudo-random bytes (incompressible, like the paper's randomly filled buffer).
pub fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}
