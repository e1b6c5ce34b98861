//! The host backend: device memory is system DRAM, as on an integrated GPU (NVIDIA Jetson and the like).

use oversub_base::sync::{lock, read, write};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{round_up, AccelError, DeviceMemory, DevicePtr, Reservation};

const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Options of the host backend.
#[derive(Debug, Clone, Copy)]
pub struct HostMemoryConfig {
    /// Align reservations of 2 MiB or more to 2 MiB and ask for transparent huge pages: page-out then frees and
    /// page-in faults 512 times fewer pages.
    pub huge_pages: bool,
    /// How a decommit gives the pages back.
    pub release: PageRelease,
}

impl Default for HostMemoryConfig {
    fn default() -> Self {
        HostMemoryConfig {
            huge_pages: true,
            release: PageRelease::Recycle,
        }
    }
}

/// How [`HostMemory`]'s decommit releases a range's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum PageRelease {
    /// `madvise(MADV_DONTNEED)`: the pages are freed at once and the next commit faults in zeroed ones.
    #[cfg_attr(feature = "clap", value(help = "madvise(MADV_DONTNEED) at page-out"))]
    Immediate,
    /// `madvise(MADV_FREE)`: the pages are freed only when the kernel needs memory; until then the next commit
    /// finds them in place (with their old contents, which a page-in overwrites) and faults nothing in. On a
    /// virtual machine each freed page can also be reported to the host and refaulted there, which stalled the
    /// other vCPUs by up to 50 ms in the SiΓ benchmark (docs/benchmarks.md#interference); lazy release avoids
    /// both. The pages stay resident (`resident_bytes`, RSS) until reclaimed. Falls back to `Immediate` on
    /// kernels without `MADV_FREE` (before 4.5).
    #[cfg_attr(feature = "clap", value(help = "madvise(MADV_FREE) at page-out"))]
    Lazy,
    /// Physical memory is recycled, as the cuda backend's VMM handles are: at decommit each 2 MiB chunk's pages
    /// are moved (`mremap` with `MREMAP_DONTUNMAP`, which moves page tables, huge pages whole) into a slot of the
    /// backend's pool, and the range is left `PROT_NONE`; at commit chunks are moved back from the pool into the
    /// range. The address stays; the pages are neither given back to the kernel, nor zeroed, nor faulted in again,
    /// so a page-in reads straight into populated memory. `zero_new` clears recycled chunks of a new allocation,
    /// so no buffer sees another's bytes. Chunks the pool lacks fault in fresh, as with `Immediate`; ranges under
    /// 2 MiB and the tail of a range past its last whole chunk are released as `Immediate` does. The pool holds at
    /// most what was once committed at the same time, which the pager's capacity bounds.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "Physical 2 MiB chunks moved into a pool (mremap) and back, never refaulted")
    )]
    Recycle,
}

/// Bytes of one chunk of the recycling pool (a huge page).
const CHUNK_BYTES: usize = HUGE_PAGE_BYTES;

/// The recycling pool of [`PageRelease::Recycle`]: 2 MiB-aligned slots of address space, each holding a chunk's
/// pages (`full`) or nothing (`empty`).
#[derive(Debug, Default)]
struct PhysPool {
    full: Vec<u64>,
    empty: Vec<u64>,
    /// Committed ranges of 2 MiB or more (commit of a committed range keeps it as it is).
    committed: std::collections::HashSet<u64>,
    /// Chunk indices of a range filled from the pool at its last commit, until `zero_new` or decommit.
    recycled: HashMap<u64, Vec<usize>>,
}

/// Slots of address space the pool maps at once. Slots of one arena are adjacent, so a range's chunks moved into
/// them in order (a decommit) and back (the next commit) move as one `mremap` instead of one per chunk: 512 calls
/// for 1 GiB took 2-3 ms on the thread that asked for a page-in (issue 33). Address space only (`MAP_NORESERVE`,
/// never touched): no memory is spent on empty slots.
const ARENA_CHUNKS: usize = 256;

impl PhysPool {
    /// An empty 2 MiB-aligned slot, new if none is free: a fresh arena's slots are handed out in ascending order.
    fn empty_slot(&mut self) -> Result<u64, AccelError> {
        if let Some(slot) = self.empty.pop() {
            return Ok(slot);
        }
        let map_len = (ARENA_CHUNKS + 1) * CHUNK_BYTES;
        // SAFETY: a new private anonymous mapping at an address of the kernel's choice.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(AccelError::last_os("mmap(pool slots)"));
        }
        let start = (base as usize).next_multiple_of(CHUNK_BYTES);
        let head = start - base as usize;
        let arena = ARENA_CHUNKS * CHUNK_BYTES;
        let tail = map_len - head - arena;
        // SAFETY: head and tail lie inside the mapping just made and nobody uses them.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap((start + arena) as *mut libc::c_void, tail);
            }
            libc::madvise(start as *mut libc::c_void, arena, libc::MADV_HUGEPAGE);
        }
        // Pushed highest first, so pops come out ascending and adjacent.
        self.empty.extend(
            (1..ARENA_CHUNKS)
                .rev()
                .map(|i| (start + i * CHUNK_BYTES) as u64),
        );
        Ok(start as u64)
    }

    /// Moves the pages of `chunks` 2 MiB chunks at `from` to `to` (both 2 MiB-aligned, `to` replaced); `from` stays
    /// mapped, empty. Fails (`EFAULT`) when the span at `from` is not one mapping; callers then move chunk by chunk.
    ///
    /// # Safety
    /// Both spans are ours, nobody uses them now, and `to` may be overwritten.
    unsafe fn move_chunks(from: u64, to: u64, chunks: usize) -> Result<(), AccelError> {
        let len = chunks * CHUNK_BYTES;
        // SAFETY: per the contract; MREMAP_FIXED replaces exactly `len` bytes at `to`, DONTUNMAP keeps `from`
        // mapped.
        let p = unsafe {
            libc::mremap(
                from as *mut libc::c_void,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP,
                to as *mut libc::c_void,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(AccelError::last_os("mremap"));
        }
        Ok(())
    }

    /// Moves chunk `srcs[k]` to `dsts[k]` for each k, a run of adjacent sources to adjacent destinations in one
    /// call (chunk by chunk where a run spans several mappings). Returns how many were moved, in order: all of
    /// them, or those before the first that failed (with its error).
    ///
    /// # Safety
    /// As [`move_chunks`](Self::move_chunks), for every pair.
    unsafe fn move_runs(srcs: &[u64], dsts: &[u64]) -> (usize, Option<AccelError>) {
        let chunk = CHUNK_BYTES as u64;
        let mut k = 0;
        while k < srcs.len() {
            let mut run = 1;
            while k + run < srcs.len()
                && srcs[k + run] == srcs[k] + run as u64 * chunk
                && dsts[k + run] == dsts[k] + run as u64 * chunk
            {
                run += 1;
            }
            // SAFETY: forwarded from our caller.
            if run == 1 || unsafe { Self::move_chunks(srcs[k], dsts[k], run) }.is_err() {
                for j in k..k + run {
                    // SAFETY: forwarded from our caller.
                    if let Err(e) = unsafe { Self::move_chunks(srcs[j], dsts[j], 1) } {
                        return (j, Some(e));
                    }
                }
            }
            k += run;
        }
        (srcs.len(), None)
    }
}

impl Drop for PhysPool {
    fn drop(&mut self) {
        for &slot in self.full.iter().chain(self.empty.iter()) {
            // SAFETY: every slot is a mapping the pool made and owns.
            unsafe { libc::munmap(slot as *mut libc::c_void, CHUNK_BYTES) };
        }
    }
}

/// Device memory modelled by anonymous mappings of this process.
#[derive(Debug)]
pub struct HostMemory {
    config: HostMemoryConfig,
    page_bytes: usize,
    /// Live reservations (address -> mapped length): every call checks its range against them, so a forged or stale
    /// `Reservation` can never make us `mprotect` or `munmap` memory we do not own. Calls hold the read lock from
    /// the check through their system call, and `unreserve` holds the write lock across `munmap` and the removal, so
    /// an address the kernel hands out again is never touched on behalf of the range that used to live there.
    reservations: RwLock<BTreeMap<u64, usize>>,
    /// The recycling pool, with [`PageRelease::Recycle`].
    pool: Option<Mutex<PhysPool>>,
}

impl Default for HostMemory {
    fn default() -> Self {
        Self::new(HostMemoryConfig::default())
    }
}

impl HostMemory {
    /// A host backend with the given options.
    pub fn new(config: HostMemoryConfig) -> Self {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        HostMemory {
            config,
            page_bytes: usize::try_from(page)
                .ok()
                .filter(|p| *p > 0)
                .unwrap_or(4096),
            reservations: RwLock::new(BTreeMap::new()),
            pool: (config.release == PageRelease::Recycle).then(|| Mutex::new(PhysPool::default())),
        }
    }

    /// The pool, for a range it serves: recycling on, and the range 2 MiB-aligned and at least one chunk long.
    fn pool(&self, range: &Reservation) -> Option<std::sync::MutexGuard<'_, PhysPool>> {
        if range.len < CHUNK_BYTES || range.addr.0 % CHUNK_BYTES as u64 != 0 {
            return None;
        }
        self.pool.as_ref().map(|p| lock(p))
    }

    /// Commit from the pool: every whole chunk the pool can fill gets its pages moved in.
    fn commit_recycled(pool: &mut PhysPool, range: &Reservation) -> Result<(), AccelError> {
        if pool.committed.contains(&range.addr.0) {
            return Ok(());
        }
        // The chunks pushed last, in the order they were pushed: the last decommit's, adjacent where it filled a
        // fresh arena, so they move back in few calls.
        let n = (range.len / CHUNK_BYTES).min(pool.full.len());
        let srcs = pool.full.split_off(pool.full.len() - n);
        let dsts: Vec<u64> = (0..n)
            .map(|i| range.addr.0 + (i * CHUNK_BYTES) as u64)
            .collect();
        // SAFETY: the sources are full slots of ours; the destinations are chunks of our own reservation (the caller
        // holds the table's lock), uncommitted, so nobody uses them.
        let (moved, failed) = unsafe { PhysPool::move_runs(&srcs, &dsts) };
        if let Some(e) = failed {
            tracing::debug!("recycling a chunk failed ({e}); the rest faults in fresh");
        }
        // Emptied slots go back highest first, so the next decommit takes them ascending (adjacent) again.
        pool.empty.extend(srcs[..moved].iter().rev());
        pool.full.extend_from_slice(&srcs[moved..]);
        // The chunks moved in keep their pages; the rest fault in zeroed on first touch.
        Self::protect(range, libc::PROT_READ | libc::PROT_WRITE)?;
        pool.committed.insert(range.addr.0);
        pool.recycled.insert(range.addr.0, (0..moved).collect());
        Ok(())
    }

    /// Moves a committed range's whole chunks into the pool, releases the tail, and leaves it inaccessible.
    fn decommit_recycled(pool: &mut PhysPool, range: &Reservation) -> Result<(), AccelError> {
        pool.recycled.remove(&range.addr.0);
        let whole = range.len / CHUNK_BYTES;
        // Chunks from `released` on are given back to the kernel: the tail past the last whole chunk, and every
        // chunk after a move that failed (e.g. the process's map count at its limit), so a decommit never fails
        // only because the pool could not take a chunk.
        let mut released = whole * CHUNK_BYTES;
        let mut slots = Vec::with_capacity(whole);
        for i in 0..whole {
            match pool.empty_slot() {
                Ok(slot) => slots.push(slot),
                Err(e) => {
                    tracing::debug!("recycling stopped at chunk {i} ({e}); the rest is released");
                    released = i * CHUNK_BYTES;
                    break;
                }
            }
        }
        let srcs: Vec<u64> = (0..slots.len())
            .map(|i| range.addr.0 + (i * CHUNK_BYTES) as u64)
            .collect();
        // SAFETY: the sources are chunks of our own committed range that nobody uses (decommit's contract); the
        // slots are empty slots of ours.
        let (moved, failed) = unsafe { PhysPool::move_runs(&srcs, &slots) };
        if let Some(e) = failed {
            tracing::debug!("recycling stopped at chunk {moved} ({e}); the rest is released");
            released = moved * CHUNK_BYTES;
        }
        pool.full.extend_from_slice(&slots[..moved]);
        // Unused slots go back highest first, so the next decommit takes them ascending again.
        pool.empty.extend(slots[moved..].iter().rev());
        if released < range.len {
            // SAFETY: part of our own range, given up by the caller.
            let rc = unsafe {
                libc::madvise(
                    (range.addr.0 + released as u64) as *mut libc::c_void,
                    range.len - released,
                    libc::MADV_DONTNEED,
                )
            };
            if rc != 0 {
                return Err(AccelError::last_os("madvise(MADV_DONTNEED)"));
            }
        }
        Self::protect(range, libc::PROT_NONE)?;
        pool.committed.remove(&range.addr.0);
        Ok(())
    }

    // The table is consistent after every single insert or remove, so a panic elsewhere is no reason to refuse it.
    fn table(&self) -> RwLockReadGuard<'_, BTreeMap<u64, usize>> {
        read(&self.reservations)
    }

    fn table_mut(&self) -> RwLockWriteGuard<'_, BTreeMap<u64, usize>> {
        write(&self.reservations)
    }

    fn is_reservation(map: &BTreeMap<u64, usize>, range: &Reservation) -> Result<(), AccelError> {
        match map.get(&range.addr.0) {
            Some(&len) if len == range.len => Ok(()),
            _ => Err(AccelError::InvalidArgument(format!(
                "{} (+{} bytes) is not a reservation of this host backend",
                range.addr, range.len
            ))),
        }
    }

    /// The table, read-locked, after checking that `range` is one of ours.
    fn check(
        &self,
        range: &Reservation,
    ) -> Result<RwLockReadGuard<'_, BTreeMap<u64, usize>>, AccelError> {
        let map = self.table();
        Self::is_reservation(&map, range)?;
        Ok(map)
    }

    /// The table, read-locked, after checking that `[addr, addr + len)` lies inside one reservation.
    fn check_span(
        &self,
        addr: DevicePtr,
        len: usize,
    ) -> Result<RwLockReadGuard<'_, BTreeMap<u64, usize>>, AccelError> {
        let map = self.table();
        let inside = map
            .range(..=addr.0)
            .next_back()
            .is_some_and(|(&start, &rlen)| {
                addr.0
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= start + rlen as u64)
            });
        if inside {
            Ok(map)
        } else {
            Err(AccelError::InvalidArgument(format!(
                "{addr} (+{len} bytes) is outside every reservation"
            )))
        }
    }

    fn protect(range: &Reservation, prot: libc::c_int) -> Result<(), AccelError> {
        // SAFETY: callers checked the range is one of our own anonymous mappings and hold the table's read lock, so
        // it cannot be unmapped and reused meanwhile.
        let rc = unsafe { libc::mprotect(range.addr.0 as *mut libc::c_void, range.len, prot) };
        if rc != 0 {
            return Err(AccelError::last_os("mprotect"));
        }
        Ok(())
    }
}

// SAFETY: every range is checked against our own table under its lock before any system call, the host pointer of
// a reservation is its mapped address, and decommit/unreserve only touch memory the caller gives up.
unsafe impl DeviceMemory for HostMemory {
    fn name(&self) -> &'static str {
        "host"
    }

    fn granularity(&self) -> usize {
        self.page_bytes
    }

    fn host_accessible(&self) -> bool {
        true
    }

    fn reserve(&self, len: usize) -> Result<Reservation, AccelError> {
        if len == 0 {
            return Err(AccelError::InvalidArgument("cannot reserve 0 bytes".into()));
        }
        let len = round_up(len as u64, self.page_bytes as u64)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| AccelError::InvalidArgument(format!("size {len} overflows")))?;
        let huge = self.config.huge_pages && len >= HUGE_PAGE_BYTES;
        // Over-reserve by one huge page so the range can be trimmed to a 2 MiB boundary.
        let map_len = if huge {
            len.checked_add(HUGE_PAGE_BYTES)
                .ok_or_else(|| AccelError::InvalidArgument(format!("size {len} overflows")))?
        } else {
            len
        };
        // SAFETY: an anonymous PROT_NONE mapping at an address of the kernel's choice touches no existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(AccelError::last_os("mmap"));
        }
        let mut start = base as usize;
        if huge {
            let aligned = start.next_multiple_of(HUGE_PAGE_BYTES);
            let head = aligned - start;
            let tail = map_len - head - len;
            // SAFETY: head and tail lie inside the mapping just created and are not used by anyone.
            unsafe {
                if head > 0 {
                    libc::munmap(base, head);
                }
                if tail > 0 {
                    libc::munmap((aligned + len) as *mut libc::c_void, tail);
                }
            }
            start = aligned;
            // SAFETY: advice on our own fresh mapping; failure only loses the huge-page optimisation.
            let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
            if rc != 0 {
                tracing::debug!("MADV_HUGEPAGE refused: {}", std::io::Error::last_os_error());
            }
        }
        let range = Reservation {
            addr: DevicePtr(start as u64),
            len,
        };
        self.table_mut().insert(start as u64, len);
        Ok(range)
    }

    fn commit(&self, range: &Reservation) -> Result<(), AccelError> {
        let _table = self.check(range)?;
        if let Some(mut pool) = self.pool(range) {
            return Self::commit_recycled(&mut pool, range);
        }
        // Pages appear (zero-filled) on first touch, or after a lazy release as they were if the kernel has not
        // reclaimed them; the storage read that follows a page-in overwrites them all.
        Self::protect(range, libc::PROT_READ | libc::PROT_WRITE)
    }

    unsafe fn decommit(&self, range: &Reservation) -> Result<(), AccelError> {
        let _table = self.check(range)?;
        if let Some(mut pool) = self.pool(range) {
            return Self::decommit_recycled(&mut pool, range);
        }
        let advise = |advice| {
            // SAFETY: the range is one of our own private anonymous mappings (held so by the read lock); dropping
            // (or lazily freeing) its pages is the intent.
            unsafe { libc::madvise(range.addr.0 as *mut libc::c_void, range.len, advice) }
        };
        if self.config.release == PageRelease::Lazy {
            if advise(libc::MADV_FREE) == 0 {
                return Self::protect(range, libc::PROT_NONE);
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(AccelError::last_os("madvise(MADV_FREE)"));
            }
        }
        if advise(libc::MADV_DONTNEED) != 0 {
            return Err(AccelError::last_os("madvise(MADV_DONTNEED)"));
        }
        Self::protect(range, libc::PROT_NONE)
    }

    unsafe fn unreserve(&self, range: Reservation) -> Result<(), AccelError> {
        let mut map = self.table_mut();
        Self::is_reservation(&map, &range)?;
        if let Some(mut pool) = self.pool(&range) {
            // Its pages go with the mapping (not into the pool): the buffer is gone.
            pool.committed.remove(&range.addr.0);
            pool.recycled.remove(&range.addr.0);
        }
        // SAFETY: the range is one of our own mappings and the caller gives it up; the write lock keeps every other
        // call off it until it is out of the table.
        let rc = unsafe { libc::munmap(range.addr.0 as *mut libc::c_void, range.len) };
        if rc != 0 {
            return Err(AccelError::last_os("munmap"));
        }
        map.remove(&range.addr.0);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), AccelError> {
        Ok(())
    }

    fn zero_new(&self, range: &Reservation) -> Result<(), AccelError> {
        let _table = self.check(range)?;
        let Some(mut pool) = self.pool(range) else {
            // Fresh anonymous memory is already zero.
            return Ok(());
        };
        for i in pool.recycled.remove(&range.addr.0).unwrap_or_default() {
            // SAFETY: the chunk was moved into this committed range (read-write) at its last commit; the caller
            // has not handed the new range out yet.
            unsafe {
                std::ptr::write_bytes(
                    (range.addr.0 + (i * CHUNK_BYTES) as u64) as *mut u8,
                    0,
                    CHUNK_BYTES,
                )
            };
        }
        Ok(())
    }

    fn host_ptr(&self, range: &Reservation) -> Option<*mut u8> {
        let _table = self.check(range).ok()?;
        Some(range.addr.0 as *mut u8)
    }

    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), AccelError> {
        let _table = self.check_span(src, dst.len())?;
        // SAFETY: the caller guarantees the source span is committed and not written meanwhile; dst is a distinct
        // host slice (a device reservation is never handed out as a Rust slice).
        unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn copy_from_host(&self, dst: DevicePtr, src: &[u8]) -> Result<(), AccelError> {
        let _table = self.check_span(dst, src.len())?;
        // SAFETY: the caller guarantees the destination span is committed and not accessed meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len()) };
        Ok(())
    }

    fn resident_bytes(&self, range: &Reservation) -> Result<Option<u64>, AccelError> {
        let _table = self.check(range)?;
        let pages = range.len.div_ceil(self.page_bytes);
        let mut vec = vec![0u8; pages];
        // SAFETY: the range is our own mapping and vec holds one byte per page of it.
        let rc = unsafe {
            libc::mincore(
                range.addr.0 as *mut libc::c_void,
                range.len,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(AccelError::last_os("mincore"));
        }
        let resident = vec.iter().filter(|b| **b & 1 != 0).count() as u64;
        Ok(Some(resident * self.page_bytes as u64))
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // Reservations still alive belong to buffers nobody can free any more: give the address space back.
        let map = self
            .reservations
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        for (&addr, &len) in map.iter() {
            // SAFETY: every entry is a mapping this backend created and still owns.
            unsafe { libc::munmap(addr as *mut libc::c_void, len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(range: &Reservation, byte: u8) {
        // SAFETY: the range is committed read-write in these tests.
        unsafe { std::ptr::write_bytes(range.addr.0 as *mut u8, byte, range.len) };
    }

    fn maps_line(addr: u64) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .find(|l| {
                let span = l.split_whitespace().next().unwrap();
                let (a, b) = span.split_once('-').unwrap();
                let a = u64::from_str_radix(a, 16).unwrap();
                let b = u64::from_str_radix(b, 16).unwrap();
                a <= addr && addr < b
            })
            .unwrap()
            .to_string()
    }

    #[test]
    fn commit_decommit_keeps_address_and_releases_memory() {
        for huge in [false, true] {
            let dev = HostMemory::new(HostMemoryConfig {
                huge_pages: huge,
                release: PageRelease::Immediate,
            });
            let r = dev.reserve(8 << 20).unwrap();
            assert_eq!(r.len, 8 << 20);
            if huge {
                assert_eq!(r.addr.0 % HUGE_PAGE_BYTES as u64, 0);
            }
            assert_eq!(dev.resident_bytes(&r).unwrap(), Some(0));
            dev.commit(&r).unwrap();
            touch(&r, 0xAB);
            assert_eq!(dev.resident_bytes(&r).unwrap(), Some(8 << 20));
            // SAFETY: nothing uses the range's memory now.
            unsafe { dev.decommit(&r).unwrap() };
            assert_eq!(dev.resident_bytes(&r).unwrap(), Some(0));
            // No access while decommitted: a touch would fault rather than read stale bytes.
            assert!(maps_line(r.addr.0).contains(" ---p "));
            dev.commit(&r).unwrap();
            let mut back = vec![1u8; 16];
            // SAFETY: committed above.
            unsafe { dev.copy_to_host(r.addr, &mut back).unwrap() };
            assert_eq!(back, vec![0u8; 16], "fresh pages after a decommit are zero");
            // SAFETY: the test is done with the range.
            unsafe { dev.unreserve(r).unwrap() };
        }
    }

    #[test]
    fn a_lazy_release_keeps_the_address_and_blocks_access_until_the_next_commit() {
        let dev = HostMemory::new(HostMemoryConfig {
            release: PageRelease::Lazy,
            ..HostMemoryConfig::default()
        });
        let r = dev.reserve(4 << 20).unwrap();
        dev.commit(&r).unwrap();
        touch(&r, 0xCD);
        // SAFETY: nothing uses the range's memory now.
        unsafe { dev.decommit(&r).unwrap() };
        assert!(maps_line(r.addr.0).contains(" ---p "));
        dev.commit(&r).unwrap();
        let mut back = vec![1u8; 16];
        // SAFETY: committed above.
        unsafe { dev.copy_to_host(r.addr, &mut back).unwrap() };
        // The old bytes if the kernel kept the pages, zeros if it reclaimed them.
        assert!(back == vec![0xCD; 16] || back == vec![0; 16], "{back:?}");
        // SAFETY: the test is done with the range.
        unsafe { dev.unreserve(r).unwrap() };
    }

    /// Issue 33: a page-in's commit moved 1 GiB back chunk by chunk (512 mremap calls, 2-3 ms on the caller's
    /// thread). A range's chunks now go into adjacent slots in order and come back in order, one run each way.
    #[test]
    fn a_range_moves_out_and_back_in_order_through_adjacent_slots() {
        let dev = HostMemory::new(HostMemoryConfig {
            release: PageRelease::Recycle,
            ..HostMemoryConfig::default()
        });
        let chunks = 16;
        let a = dev.reserve(chunks * CHUNK_BYTES).unwrap();
        dev.commit(&a).unwrap();
        for i in 0..chunks {
            // SAFETY: committed read-write above.
            unsafe {
                std::ptr::write_bytes(
                    (a.addr.0 as usize + i * CHUNK_BYTES) as *mut u8,
                    i as u8,
                    CHUNK_BYTES,
                )
            };
        }
        for round in 0..3 {
            // SAFETY: nothing uses the range's memory now.
            unsafe { dev.decommit(&a).unwrap() };
            {
                let pool = dev.pool.as_ref().unwrap().lock().unwrap();
                assert_eq!(pool.full.len(), chunks);
                assert!(
                    pool.full
                        .windows(2)
                        .all(|w| w[1] == w[0] + CHUNK_BYTES as u64),
                    "round {round}: slots not adjacent in order"
                );
            }
            dev.commit(&a).unwrap();
            assert_eq!(
                dev.resident_bytes(&a).unwrap(),
                Some(a.len as u64),
                "moved in, not faulted"
            );
            for i in 0..chunks {
                let mut back = [0xFFu8; 8];
                // SAFETY: committed above.
                unsafe {
                    dev.copy_to_host(
                        a.addr.offset((i * CHUNK_BYTES + CHUNK_BYTES / 2) as u64),
                        &mut back,
                    )
                    .unwrap()
                };
                assert_eq!(
                    back, [i as u8; 8],
                    "round {round}: chunk {i} came back elsewhere"
                );
            }
        }
    }

    #[test]
    fn recycled_memory_keeps_its_pages_and_no_buffer_sees_anothers_bytes() {
        let dev = HostMemory::new(HostMemoryConfig {
            release: PageRelease::Recycle,
            ..HostMemoryConfig::default()
        });
        let a = dev.reserve(4 << 20).unwrap();
        dev.commit(&a).unwrap();
        dev.zero_new(&a).unwrap();
        touch(&a, 0xEE);
        assert_eq!(dev.resident_bytes(&a).unwrap(), Some(4 << 20));
        // SAFETY: nothing uses the range's memory now.
        unsafe { dev.decommit(&a).unwrap() };
        assert!(
            maps_line(a.addr.0).contains(" ---p "),
            "inaccessible while out"
        );
        assert_eq!(dev.resident_bytes(&a).unwrap(), Some(0));
        assert_eq!(dev.pool.as_ref().unwrap().lock().unwrap().full.len(), 2);
        // A new buffer gets a's pages, not fresh ones; zero_new clears them.
        let b = dev.reserve(4 << 20).unwrap();
        dev.commit(&b).unwrap();
        assert_eq!(
            dev.resident_bytes(&b).unwrap(),
            Some(4 << 20),
            "moved in, not faulted"
        );
        let mut back = vec![1u8; 64];
        // SAFETY: committed above.
        unsafe { dev.copy_to_host(b.addr.offset(3 << 20), &mut back).unwrap() };
        assert_eq!(back, vec![0xEE; 64], "the chunk is recycled, not refaulted");
        dev.zero_new(&b).unwrap();
        // SAFETY: committed above.
        unsafe { dev.copy_to_host(b.addr.offset(3 << 20), &mut back).unwrap() };
        assert_eq!(back, vec![0; 64], "a new allocation reads zeros");
        // A page-out and page-in of b keeps its bytes (the same chunks come back).
        touch(&b, 0x5A);
        // SAFETY: nothing uses b now.
        unsafe { dev.decommit(&b).unwrap() };
        dev.commit(&b).unwrap();
        // SAFETY: committed above.
        unsafe { dev.copy_to_host(b.addr.offset(1 << 20), &mut back).unwrap() };
        assert_eq!(back, vec![0x5A; 64]);
        // a, with the pool empty, faults in fresh memory.
        dev.commit(&a).unwrap();
        // SAFETY: committed above.
        unsafe { dev.copy_to_host(a.addr, &mut back).unwrap() };
        assert_eq!(back, vec![0; 64]);
        // SAFETY: the test is done with the ranges.
        unsafe {
            dev.unreserve(a).unwrap();
            dev.unreserve(b).unwrap();
        }
        let pool = dev.pool.as_ref().unwrap().lock().unwrap();
        assert!(pool.full.is_empty() && pool.committed.is_empty());
    }

    #[test]
    fn sizes_round_to_pages() {
        let dev = HostMemory::default();
        let r = dev.reserve(1).unwrap();
        assert_eq!(r.len, dev.granularity());
        // SAFETY: the test is done with the range.
        unsafe { dev.unreserve(r).unwrap() };
        assert!(dev.reserve(0).is_err());
        assert!(dev.reserve(usize::MAX).is_err());
    }

    #[test]
    fn forged_ranges_are_refused() {
        let dev = HostMemory::default();
        let r = dev.reserve(1 << 16).unwrap();
        let forged = Reservation {
            addr: r.addr.offset(4096),
            len: 4096,
        };
        assert!(dev.commit(&forged).is_err());
        // SAFETY: the call must refuse the forged range before touching it.
        assert!(unsafe { dev.decommit(&forged) }.is_err());
        assert!(dev.host_ptr(&forged).is_none());
        let mut buf = [0u8; 8];
        // SAFETY: the call must refuse the span before touching it.
        let outside = unsafe { dev.copy_to_host(r.addr.offset(1 << 16), &mut buf) };
        assert!(outside.is_err());
        // SAFETY: the test is done with the range.
        unsafe { dev.unreserve(r).unwrap() };
        assert!(dev.commit(&r).is_err(), "a released range is unknown");
    }

    #[test]
    fn reserve_and_unreserve_race_safely() {
        let dev = std::sync::Arc::new(HostMemory::new(HostMemoryConfig {
            huge_pages: false,
            ..HostMemoryConfig::default()
        }));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let r = dev.reserve(1 << 16).unwrap();
                        dev.commit(&r).unwrap();
                        // SAFETY: this thread owns the range and is done with it.
                        unsafe { dev.unreserve(r).unwrap() };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(dev.table().is_empty());
    }

    #[test]
    fn copies_round_trip() {
        let dev = HostMemory::default();
        let r = dev.reserve(10_000).unwrap();
        dev.commit(&r).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        // SAFETY: committed above.
        unsafe { dev.copy_from_host(r.addr, &data).unwrap() };
        let mut back = vec![0u8; 10_000];
        // SAFETY: committed above.
        unsafe { dev.copy_to_host(r.addr, &mut back).unwrap() };
        assert_eq!(back, data);
        // SAFETY: the test is done with the range.
        unsafe { dev.unreserve(r).unwrap() };
    }
}
