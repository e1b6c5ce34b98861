//! Free-space management of the swap file in units of the I/O alignment.

use std::collections::BTreeMap;

use crate::error::IoError;

/// A contiguous byte range of the swap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Byte offset in the file (a multiple of the alignment).
    pub offset: u64,
    /// Length in bytes (a multiple of the alignment).
    pub len: u64,
}

impl Extent {
    fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Allocator of `[0, capacity)` in multiples of `alignment`.
///
/// Prefers one contiguous extent (first fit by offset); when no single run is large
/// enough but the total free space is, it gathers several extents, largest first, so a
/// fragmented store still fits data up to its free space.
#[derive(Debug, Clone)]
pub struct ExtentAllocator {
    /// Free runs keyed by offset, never adjacent (always coalesced).
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
    capacity: u64,
    alignment: u64,
}

impl ExtentAllocator {
    /// Manages `[0, capacity_bytes)` rounded down to a multiple of `alignment`.
    /// `alignment` is rounded up to a power of two (0 counts as 1).
    pub fn new(capacity_bytes: u64, alignment: u64) -> Self {
        let alignment = alignment
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63);
        let capacity = capacity_bytes - capacity_bytes % alignment;
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        ExtentAllocator {
            free,
            free_bytes: capacity,
            capacity,
            alignment,
        }
    }

    /// The allocation unit.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Managed bytes (a multiple of the alignment).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }

    /// Free bytes in total (possibly fragmented).
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Length of the largest contiguous free run.
    pub fn largest_free(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Number of free runs (1 when nothing is allocated, 0 when full).
    pub fn free_extent_count(&self) -> usize {
        self.free.len()
    }

    /// Allocates `len` bytes rounded up to the alignment. The returned extents are in
    /// file-offset order, which is also the order the data is laid out in.
    ///
    /// `len == 0` is `InvalidArgument` (nothing needs swapping); a request larger than
    /// the free space is `StoreFull`.
    pub fn allocate(&mut self, len: u64) -> Result<Vec<Extent>, IoError> {
        if len == 0 {
            return Err(IoError::InvalidArgument(
                "cannot allocate 0 bytes of swap".into(),
            ));
        }
        let needed = match len.checked_next_multiple_of(self.alignment) {
            Some(n) => n,
            None => {
                return Err(IoError::StoreFull {
                    needed: u64::MAX,
                    free: self.free_bytes,
                })
            }
        };
        if needed > self.free_bytes {
            return Err(IoError::StoreFull {
                needed,
                free: self.free_bytes,
            });
        }
        // First fit by offset keeps allocations packed towards the start of the file.
        let first_fit = self
            .free
            .iter()
            .find(|(_, &l)| l >= needed)
            .map(|(&o, &l)| (o, l));
        if let Some((offset, run)) = first_fit {
            self.take(offset, run, needed);
            return Ok(vec![Extent {
                offset,
                len: needed,
            }]);
        }
        // Gather largest runs first to keep the extent count (and request count) low.
        let mut runs: Vec<(u64, u64)> = self.free.iter().map(|(&o, &l)| (o, l)).collect();
        runs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut out = Vec::new();
        let mut remaining = needed;
        for (offset, run) in runs {
            if remaining == 0 {
                break;
            }
            let take = run.min(remaining);
            self.take(offset, run, take);
            out.push(Extent { offset, len: take });
            remaining -= take;
        }
        out.sort_by_key(|e| e.offset);
        Ok(out)
    }

    /// Takes `take` bytes from the start of the free run `(offset, run)`.
    fn take(&mut self, offset: u64, run: u64, take: u64) {
        self.free.remove(&offset);
        if run > take {
            self.free.insert(offset + take, run - take);
        }
        self.free_bytes -= take;
    }

    /// Returns extents to the free pool, coalescing with neighbours. Extents that are
    /// misaligned, out of range or overlap free space (a double free) are ignored with
    /// an error log rather than corrupting the free list.
    pub fn free(&mut self, extents: &[Extent]) {
        for &e in extents {
            if let Err(msg) = self.free_one(e) {
                tracing::error!(
                    offset = e.offset,
                    len = e.len,
                    "ignoring bad extent free: {msg}"
                );
            }
        }
    }

    fn free_one(&mut self, e: Extent) -> Result<(), &'static str> {
        if e.len == 0 {
            return Ok(());
        }
        if e.offset % self.alignment != 0 || e.len % self.alignment != 0 {
            return Err("misaligned");
        }
        let end = e.offset.checked_add(e.len).ok_or("out of range")?;
        if end > self.capacity {
            return Err("out of range");
        }
        let prev = self
            .free
            .range(..=e.offset)
            .next_back()
            .map(|(&o, &l)| Extent { offset: o, len: l });
        let next = self
            .free
            .range(e.offset..)
            .next()
            .map(|(&o, &l)| Extent { offset: o, len: l });
        if prev.is_some_and(|p| p.end() > e.offset) || next.is_some_and(|n| n.offset < end) {
            return Err("overlaps free space (double free?)");
        }
        let mut start = e.offset;
        let mut len = e.len;
        if let Some(p) = prev.filter(|p| p.end() == e.offset) {
            self.free.remove(&p.offset);
            start = p.offset;
            len += p.len;
        }
        if let Some(n) = next.filter(|n| n.offset == end) {
            self.free.remove(&n.offset);
            len += n.len;
        }
        self.free.insert(start, len);
        self.free_bytes += e.len;
        Ok(())
    }

    /// The free runs in offset order (for tests and diagnostics).
    pub fn free_extents(&self) -> Vec<Extent> {
        self.free
            .iter()
            .map(|(&offset, &len)| Extent { offset, len })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_and_gather() {
        let mut a = ExtentAllocator::new(40960, 4096);
        let x = a.allocate(4096).unwrap();
        let y = a.allocate(8192).unwrap();
        let z = a.allocate(4096).unwrap();
        assert_eq!(
            x,
            vec![Extent {
                offset: 0,
                len: 4096
            }]
        );
        assert_eq!(
            y,
            vec![Extent {
                offset: 4096,
                len: 8192
            }]
        );
        assert_eq!(
            z,
            vec![Extent {
                offset: 12288,
                len: 4096
            }]
        );
        a.free(&y);
        // 8192 free at 4096 and 24576 free at 16384: 30000 needs gathering.
        let w = a.allocate(30000).unwrap();
        assert_eq!(w.iter().map(|e| e.len).sum::<u64>(), 32768);
        assert_eq!(a.free_bytes(), 0);
        assert!(matches!(
            a.allocate(1),
            Err(IoError::StoreFull {
                needed: 4096,
                free: 0
            })
        ));
        a.free(&w);
        a.free(&x);
        a.free(&z);
        assert_eq!(
            a.free_extents(),
            vec![Extent {
                offset: 0,
                len: 40960
            }]
        );
        assert!(matches!(a.allocate(0), Err(IoError::InvalidArgument(_))));
    }

    #[test]
    fn double_free_is_ignored() {
        let mut a = ExtentAllocator::new(8192, 4096);
        let x = a.allocate(4096).unwrap();
        a.free(&x);
        a.free(&x);
        assert_eq!(a.free_bytes(), 8192);
        a.free(&[Extent {
            offset: 8192,
            len: 4096,
        }]);
        a.free(&[Extent {
            offset: 1,
            len: 4096,
        }]);
        assert_eq!(a.free_bytes(), 8192);
    }
}
