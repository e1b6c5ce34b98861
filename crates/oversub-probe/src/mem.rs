//! Anonymous memory mappings the probes measure on: owned, unmapped on drop, optionally backed by transparent
//! huge pages.

use crate::ProbeError;

/// 4 KiB, the base page.
pub const PAGE_BYTES: usize = 4096;
/// 2 MiB, the x86-64 / arm64 (4 KiB granule) huge page.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// An anonymous private read-write mapping.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// The mapping as the kernel returned it (before alignment), for munmap.
    raw_ptr: *mut u8,
    raw_len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving it to another thread moves that ownership.
unsafe impl Send for Mapping {}
// SAFETY: shared access only hands out raw pointers and `&[u8]`-free accessors; users synchronise their writes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes (rounded up to whole pages). With `huge`, the region is aligned to 2 MiB and advised
    /// `MADV_HUGEPAGE`; otherwise it is advised `MADV_NOHUGEPAGE` so that 4 KiB pages are what is measured even
    /// where THP is `always`. Pages are not touched.
    pub fn new(len: usize, huge: bool) -> Result<Self, ProbeError> {
        if len == 0 {
            return Err(ProbeError::InvalidInput(
                "a mapping needs at least one byte".into(),
            ));
        }
        let align = if huge { HUGE_PAGE_BYTES } else { PAGE_BYTES };
        let len = len
            .checked_next_multiple_of(align)
            .ok_or_else(|| ProbeError::InvalidInput(format!("{len} bytes cannot be mapped")))?;
        let raw_len = len + if huge { HUGE_PAGE_BYTES } else { 0 };
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no existing memory.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                raw_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(ProbeError::last_os(format!("mmap of {len} bytes")));
        }
        let raw_ptr = raw.cast::<u8>();
        let offset = (raw_ptr as usize).next_multiple_of(align) - raw_ptr as usize;
        // SAFETY: `offset < align <= raw_len - len`, so the result stays inside the mapping.
        let ptr = unsafe { raw_ptr.add(offset) };
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: advice on our own fresh mapping; failure only means the kernel ignores the hint.
        if unsafe { libc::madvise(ptr.cast(), len, advice) } != 0 {
            tracing::debug!(huge, "madvise refused: {}", std::io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr,
            len,
            raw_ptr,
            raw_len,
        })
    }

    /// Start of the (aligned) region.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: [`Mapping::new`] refuses 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region as `usize` words.
    pub fn words_mut(&mut self) -> &mut [usize] {
        // SAFETY: the region is mapped read-write, page-aligned (so word-aligned), owned by `self` and borrowed
        // mutably for the slice's life; anonymous memory reads as zeros, a valid `usize`.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr.cast::<usize>(),
                self.len / std::mem::size_of::<usize>(),
            )
        }
    }

    /// Bytes of this region the kernel backs with huge pages now (from /proc/self/smaps), when it says.
    pub fn huge_backed_bytes(&self) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let start = self.raw_ptr as usize;
        let end = start + self.raw_len;
        let mut in_region = false;
        let mut total = 0u64;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        in_region = a < end && b > start;
                        continue;
                    }
                }
            }
            if in_region {
                if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                    let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                    total += kb * 1024;
                }
            }
        }
        Some(total)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mmap returned, once; no references into it outlive `self`.
        unsafe { libc::munmap(self.raw_ptr.cast(), self.raw_len) };
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn maps_aligned_zeroed_memory() {
        for huge in [false, true] {
            let mut m = Mapping::new(5000, huge).unwrap();
            let align = if huge { HUGE_PAGE_BYTES } else { PAGE_BYTES };
            assert_eq!(m.ptr() as usize % align, 0);
            assert_eq!(m.len() % align, 0);
            let w = m.words_mut();
            assert!(w.iter().all(|&x| x == 0));
            w[0] = 7;
            assert_eq!(m.words_mut()[0], 7);
            assert!(m.huge_backed_bytes().is_some());
        }
        assert!(Mapping::new(0, false).is_err());
    }
}
