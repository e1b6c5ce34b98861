//! Demand-paged buffers: the honest baseline of the paper's Fig. 6 (Sec. III-A/B).
//!
//! oversub pages whole buffers with large direct I/O. To show what that buys, a schedule's `Mode::Demand` has to
//! run the alternative for real, not a model of it: buffers live in a memory-mapped store, a page is read from the
//! store when it is first touched, and a buffer chosen for eviction (LRU, decided by the caller) is written back and
//! dropped the way the kernel's reclaim would. [`DemandSpace`] is that mechanism; it knows nothing of schedules.
//!
//! - **One `MAP_SHARED` mapping of one store file.** Private or anonymous memory would page to swap, not to the
//!   store; a shared file mapping writes dirty pages back to the file and reads them from it again, through the page
//!   cache, as Linux demand paging of a mapped file does. The file is created in a given directory (never tmpfs for
//!   a meaningful run, see [`EvictStats::still_resident_pages`]), mode 0600, and unlinked at once.
//! - **`madvise(MADV_RANDOM)`** turns off the fault path's readahead, so every fault reads one page (4 KiB on
//!   x86-64) from the store and is a major fault: the fault-in cost is per page, and the kernel does not hide it by
//!   reading ahead of a sequential walk. The paper's Fig. 4 walk ran with the kernel's readahead, which is much
//!   faster for a sequential walk; [`Readahead::Kernel`] gives that behaviour where a comparison needs it.
//! - **Evict = `msync(MS_SYNC)` + `madvise(MADV_DONTNEED)` + `posix_fadvise(POSIX_FADV_DONTNEED)`, in that order.**
//!   The write-back comes first because the page cache drops neither dirty pages nor pages still mapped: msync makes
//!   the buffer's pages clean (its time is the write-back cost), MADV_DONTNEED unmaps them from this mapping (a shared
//!   file mapping keeps its data in the file), and FADV_DONTNEED then drops them from the page cache, so the next
//!   touch must read the store. `mincore` afterwards says whether that really happened.

use std::fs::{File, OpenOptions, Permissions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Files created so far by this process (part of the unique name).
static NEXT_FILE_ID: AtomicUsize = AtomicUsize::new(0);

/// Pages asked of `mincore` per call (a 64 KiB vector).
const MINCORE_CHUNK_PAGES: usize = 64 << 10;

/// Everything a [`DemandSpace`] can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemandError {
    /// A system call on the store or its mapping failed.
    #[error("demand paging: cannot {op} (store file {})", path.display())]
    Os {
        /// What was being done.
        op: &'static str,
        /// The store file (unlinked once created: its former name).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The index names no buffer of this space.
    #[error("no demand-paged buffer {index}: the space has {count}")]
    NoSuchBuffer {
        /// The index asked for.
        index: usize,
        /// Buffers in the space.
        count: usize,
    },
    /// An argument that cannot work (sizes too large to map, zero bytes or rounds to measure).
    #[error("demand paging: {0}")]
    InvalidArgument(String),
    /// Eviction left pages in memory, so faults would not reach the store: the file system keeps its pages (tmpfs
    /// does) and a demand-paging speed measured there would be a lie.
    #[error(
        "demand paging: {still_resident_pages} pages stayed resident after eviction from {} (a tmpfs?); \
         use a directory on a real disk",
        path.display()
    )]
    NotEvictable {
        /// The store file.
        path: PathBuf,
        /// Pages `mincore` still saw.
        still_resident_pages: usize,
    },
    /// Bytes read back through the mapping differ from those written (a measurement's check).
    #[error("demand paging: read back byte sum {found}, expected {expected} (store file {})", path.display())]
    DataMismatch {
        /// The store file.
        path: PathBuf,
        /// Sum expected.
        expected: u64,
        /// Sum found.
        found: u64,
    },
}

/// A buffer of a [`DemandSpace`]: its index in creation order (the order of `sizes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DemandBufferId(pub usize);

impl std::fmt::Display for DemandBufferId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "d{}", self.0)
    }
}

/// Page faults counted by the kernel (`getrusage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Faults that had to wait for I/O (or were retried after dropping the lock for it): `ru_majflt`.
    pub major: u64,
    /// Faults served from memory: `ru_minflt`.
    pub minor: u64,
}

impl FaultCounts {
    /// The faults counted since `earlier` (saturating).
    pub fn since(self, earlier: FaultCounts) -> FaultCounts {
        FaultCounts {
            major: self.major.saturating_sub(earlier.major),
            minor: self.minor.saturating_sub(earlier.minor),
        }
    }
}

/// Major and minor page faults of the calling thread so far (`getrusage(RUSAGE_THREAD)`). Zeros if the kernel
/// refuses (it cannot with these arguments).
pub fn thread_faults() -> FaultCounts {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: usage points to writable memory of the struct's size, which getrusage fills.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "getrusage(RUSAGE_THREAD) failed");
        return FaultCounts::default();
    }
    // SAFETY: getrusage succeeded, so the struct is initialised (and it was zeroed before).
    let usage = unsafe { usage.assume_init() };
    FaultCounts {
        major: u64::try_from(usage.ru_majflt).unwrap_or(0),
        minor: u64::try_from(usage.ru_minflt).unwrap_or(0),
    }
}

/// What [`DemandSpace::evict`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvictStats {
    /// Pages of the buffer in the page cache before (`mincore`).
    pub resident_pages_before: usize,
    /// Pages dirty or under write-back before (`cachestat`, Linux 6.5+); `None` where the kernel lacks it.
    pub dirty_pages_before: Option<usize>,
    /// Bytes the write-back wrote: the dirty pages times the page size (`None` with `dirty_pages_before`).
    pub written_back_bytes: Option<u64>,
    /// Pages still in the page cache after (`mincore`). Zero on a disk file system; a tmpfs (e.g. /dev/shm) keeps
    /// every page, because its pages have no store to go back to but swap. Non-zero also where another thread
    /// touched the buffer during the eviction.
    pub still_resident_pages: usize,
    /// Time of the write-back (`msync(MS_SYNC)`).
    pub writeback: Duration,
    /// Time of the whole eviction, `mincore` calls included.
    pub elapsed: Duration,
}

impl EvictStats {
    /// Whether no page of the buffer is left in memory, so its next touches must read the store.
    pub fn fully_evicted(&self) -> bool {
        self.still_resident_pages == 0
    }
}

/// How faults read the store: the mapping's `madvise` advice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Readahead {
    /// `MADV_RANDOM` (the default): no readahead, every fault reads one page. Each page touched after an eviction
    /// is a major fault of its own.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "None (MADV_RANDOM): one 4 KiB read per fault")
    )]
    Off,
    /// `MADV_NORMAL`: the kernel's readahead and fault-around, as the paper's Fig. 4 walk had. A sequential walk then
    /// reads the store in large blocks ahead of the faults, so most faults are minor and the walk is much faster
    /// (about 30x on this project's test VM); a random one still faults page by page.
    #[cfg_attr(
        feature = "clap",
        value(help = "Linux's default (MADV_NORMAL): faults bring the following pages in too")
    )]
    Kernel,
}

/// How [`DemandSpace::touch`] touches each page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemandAccess {
    /// Load one byte per page: a read fault where the page is absent.
    Read,
    /// Load one byte and write it back unchanged (atomically): a write fault, and the page becomes dirty.
    Write,
}

/// What [`DemandSpace::touch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchStats {
    /// Pages touched (one byte each, at page-size stride from the buffer's start).
    pub pages: usize,
    /// Faults of the calling thread during the walk.
    pub faults: FaultCounts,
    /// Time of the walk.
    pub elapsed: Duration,
    /// Wrapping sum of the bytes loaded (lets a caller check contents; keeps the loads from being optimised away).
    pub sum: u64,
}

/// Demand-paging speeds of a store directory, from [`measure_demand_bandwidths`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DemandSpeeds {
    /// Fault-in: the buffer's bytes over the time of a 4 KiB-stride walk of the evicted buffer, less the same walk
    /// over resident memory (the paper's footnote 12). Slowest round.
    pub read_bytes_per_s: f64,
    /// Write-back: the dirty bytes over the time of `msync(MS_SYNC)` of the fully written buffer. Slowest round.
    pub write_bytes_per_s: f64,
    /// Bytes measured (the size asked for, rounded up to whole pages).
    pub bytes: u64,
    /// Rounds measured.
    pub rounds: usize,
    /// Fewest major faults per page seen in a round's walk (1.0 when every page was read by a fault of its own;
    /// far less with [`Readahead::Kernel`], whose readahead turns most faults minor).
    pub major_faults_per_page: f64,
    /// The readahead the mapping had.
    pub readahead: Readahead,
}

/// One buffer's place in the mapping.
#[derive(Debug, Clone, Copy)]
struct Region {
    /// Byte offset in the file and the mapping (page-aligned).
    offset: usize,
    /// Length in bytes.
    len: usize,
}

/// Demand-paged buffers in one memory-mapped store file: the baseline of Fig. 6 (see the module docs).
///
/// Buffers start zeroed. Their bytes are reached through [`as_ptr`](Self::as_ptr) (or walked with
/// [`touch`](Self::touch)); a touch of an absent page faults it in from the store, and [`evict`](Self::evict)
/// writes a buffer back and drops it from memory. Dropping the space unmaps the buffers and closes (so frees) the
/// store file.
///
/// ```
/// # fn main() -> Result<(), oversub_core::DemandError> {
/// use oversub_core::{DemandAccess, DemandBufferId, DemandSpace};
///
/// let space = DemandSpace::create(None, &[1 << 20, 4096])?;
/// let a = DemandBufferId(0);
/// space.touch(a, DemandAccess::Write)?; // every page faults in and becomes dirty
/// let evicted = space.evict(a)?; // the LRU victim: written back, dropped from memory
/// let walk = space.touch(a, DemandAccess::Read)?; // every page faults in again, from the store
/// if evicted.fully_evicted() {
///     // (not on a tmpfs temporary directory, whose pages stay in memory)
///     assert!(walk.faults.major >= walk.pages as u64);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct DemandSpace {
    file: File,
    path: PathBuf,
    base: NonNull<u8>,
    map_len: usize,
    page: usize,
    buffers: Vec<Region>,
    preallocated: bool,
}

// SAFETY: the space owns its mapping and file; nothing in it is tied to a thread. The mapping is only ever acted on by
// system calls (which the kernel serialises) and by callers through raw pointers, whose accesses are theirs to order.
unsafe impl Send for DemandSpace {}
// SAFETY: every `&self` method only makes system calls on the mapping and the file, or atomic loads and
// compare-exchanges on its bytes; none of them changes what a byte holds, so concurrent calls cannot race.
unsafe impl Sync for DemandSpace {}

impl DemandSpace {
    /// Creates one store file in `dir` (default: the system's temporary directory) holding every buffer of `sizes`,
    /// each at a page-aligned offset, and maps it whole (`MAP_SHARED`, read-write, `MADV_RANDOM`).
    ///
    /// The file is created with mode 0600 and unlinked at once, so it cannot be reached by name and its blocks are
    /// freed when the space drops. It is buffered (no `O_DIRECT`: demand paging goes through the page cache) and
    /// preallocated with `fallocate`, so the buffers read as zeros and a write through the mapping cannot fail for
    /// lack of space; where the file system cannot preallocate, `ftruncate` makes it sparse instead (also zeros; see
    /// [`preallocated`](Self::preallocated)). A missing or unwritable `dir` is [`DemandError::Os`] naming the file.
    pub fn create(dir: Option<&Path>, sizes: &[u64]) -> Result<DemandSpace, DemandError> {
        let page = page_size();
        let too_large = || {
            DemandError::InvalidArgument(format!(
                "buffer sizes {sizes:?} total more than can be mapped"
            ))
        };
        let mut buffers = Vec::with_capacity(sizes.len());
        let mut total = 0usize;
        for &size in sizes {
            let len = usize::try_from(size).map_err(|_| too_large())?;
            let span = len.checked_next_multiple_of(page).ok_or_else(too_large)?;
            buffers.push(Region { offset: total, len });
            total = total.checked_add(span).ok_or_else(too_large)?;
        }
        // mmap refuses a zero length: a space of empty buffers maps one page.
        let map_len = total.max(page);
        let file_len = libc::off_t::try_from(map_len).map_err(|_| too_large())?;
        let dir = dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let (file, path) = create_unlinked(&dir)?;
        let preallocated = preallocate(&file, &path, file_len)?;
        // SAFETY: a new shared mapping of an open file at an address the kernel chooses; it overlaps nothing of ours.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(os_error("map the store", &path));
        }
        let Some(base) = NonNull::new(addr.cast::<u8>()) else {
            return Err(DemandError::InvalidArgument(
                "mmap returned a null address".into(),
            ));
        };
        // From here on, dropping the space unmaps.
        let space = DemandSpace {
            file,
            path,
            base,
            map_len,
            page,
            buffers,
            preallocated,
        };
        space.set_readahead(Readahead::Off)?;
        tracing::debug!(
            path = %space.path.display(),
            buffers = space.buffers.len(),
            bytes = map_len,
            preallocated,
            "demand-paging store mapped"
        );
        Ok(space)
    }

    /// Sets how faults read the store, for the whole mapping ([`Readahead::Off`] after [`create`](Self::create)).
    pub fn set_readahead(&self, readahead: Readahead) -> Result<(), DemandError> {
        let (advice, op) = match readahead {
            Readahead::Off => (libc::MADV_RANDOM, "madvise(MADV_RANDOM) the mapping"),
            Readahead::Kernel => (libc::MADV_NORMAL, "madvise(MADV_NORMAL) the mapping"),
        };
        // SAFETY: the range is exactly our mapping; this advice changes only how faults read ahead.
        if unsafe { libc::madvise(self.base.as_ptr().cast(), self.map_len, advice) } != 0 {
            return Err(self.os_error(op));
        }
        Ok(())
    }

    /// Number of buffers.
    pub fn buffer_count(&self) -> usize {
        self.buffers.len()
    }

    /// The buffers, in creation order.
    pub fn buffer_ids(&self) -> impl Iterator<Item = DemandBufferId> {
        (0..self.buffers.len()).map(DemandBufferId)
    }

    /// The store file's path (already unlinked: for messages and `/proc` lookups only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The page size: the alignment of every buffer, and the unit of faults and residency (4 KiB on x86-64).
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Whether the store was preallocated with `fallocate` (else made sparse with `ftruncate`: blocks are allocated
    /// at write-back, and a full disk then fails a write through the mapping with `SIGBUS`).
    pub fn preallocated(&self) -> bool {
        self.preallocated
    }

    /// Length of the buffer in bytes.
    pub fn len(&self, b: DemandBufferId) -> Result<usize, DemandError> {
        Ok(self.region(b)?.len)
    }

    /// Pointer to the buffer's first byte, valid for [`len`](Self::len) bytes of reads and writes while `self`
    /// lives. Touching a byte faults its page in from the store where it is not resident. Accesses through it are
    /// the caller's to synchronise (with each other, and with [`touch`](Self::touch)'s atomic accesses).
    pub fn as_ptr(&self, b: DemandBufferId) -> Result<*mut u8, DemandError> {
        let r = self.region(b)?;
        // SAFETY: offset <= map_len (an empty last buffer points one past the end, which `add` allows).
        Ok(unsafe { self.base.as_ptr().add(r.offset) })
    }

    /// Touches the first byte of every page of the buffer, in order, on the calling thread: the paper's 4 KiB-stride
    /// walk. Absent pages fault in from the store (one read per page, `MADV_RANDOM`); a [`DemandAccess::Write`]
    /// walk also dirties every page without changing its bytes.
    pub fn touch(
        &self,
        b: DemandBufferId,
        access: DemandAccess,
    ) -> Result<TouchStats, DemandError> {
        let r = self.region(b)?;
        let before = thread_faults();
        let start = Instant::now();
        let mut sum = 0u64;
        let mut pages = 0usize;
        let mut off = 0usize;
        while off < r.len {
            // SAFETY: off < len, so the byte lies inside this buffer's part of the mapping, which is readable and
            // writable while `self` (borrowed here) lives; AtomicU8 has u8's size and alignment.
            let cell = unsafe { &*self.base.as_ptr().add(r.offset + off).cast::<AtomicU8>() };
            let v = match access {
                DemandAccess::Read => cell.load(Ordering::Relaxed),
                // One compare-exchange: a single write access (one write fault, a dirty page) that stores the value
                // the byte holds, whichever it is (a guess of 0, or on failure the byte's value, stored back by the
                // locked instruction on x86). Unlike `fetch_or(0)`, it is not lowered to a plain load.
                DemandAccess::Write => {
                    match cell.compare_exchange(0, 0, Ordering::Relaxed, Ordering::Relaxed) {
                        Ok(v) | Err(v) => v,
                    }
                }
            };
            sum = sum.wrapping_add(u64::from(v));
            pages += 1;
            off += self.page;
        }
        let elapsed = start.elapsed();
        Ok(TouchStats {
            pages,
            faults: thread_faults().since(before),
            elapsed,
            sum,
        })
    }

    /// Evicts the buffer as the kernel's reclaim would under memory pressure: writes its dirty pages back
    /// (`msync(MS_SYNC)`), unmaps them (`MADV_DONTNEED`) and drops them from the page cache
    /// (`POSIX_FADV_DONTNEED`), so that its next touches read the store. Data is never lost. Where pages stay
    /// resident (a tmpfs store, or a concurrent toucher), [`EvictStats::still_resident_pages`] says how many.
    pub fn evict(&self, b: DemandBufferId) -> Result<EvictStats, DemandError> {
        let r = self.region(b)?;
        let start = Instant::now();
        let resident_pages_before = self.count_resident(r)?;
        let dirty_pages_before = self.dirty_pages(r);
        let span = self.span(r);
        let (addr, offset, flen) = (self.addr(r), self.file_offset(r)?, self.file_len(span)?);
        let mut writeback = Duration::ZERO;
        if span > 0 {
            let t = Instant::now();
            // SAFETY: addr..addr+span is a page-aligned part of our own mapping; msync only writes it back.
            if unsafe { libc::msync(addr, span, libc::MS_SYNC) } != 0 {
                return Err(self.os_error("msync(MS_SYNC) a buffer"));
            }
            writeback = t.elapsed();
            // SAFETY: the range is part of our own MAP_SHARED file mapping: MADV_DONTNEED only unmaps its pages, and
            // the next access maps the file's contents again, so no byte a pointer into it can see changes.
            if unsafe { libc::madvise(addr, span, libc::MADV_DONTNEED) } != 0 {
                return Err(self.os_error("madvise(MADV_DONTNEED) a buffer"));
            }
            // SAFETY: advice on a range of our open file; it drops only clean, unmapped pages from the cache.
            let rc = unsafe {
                libc::posix_fadvise(
                    self.file.as_raw_fd(),
                    offset,
                    flen,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
            if rc != 0 {
                return Err(DemandError::Os {
                    op: "posix_fadvise(POSIX_FADV_DONTNEED) a buffer",
                    path: self.path.clone(),
                    source: std::io::Error::from_raw_os_error(rc),
                });
            }
        }
        let still_resident_pages = self.count_resident(r)?;
        let page = self.page as u64;
        let stats = EvictStats {
            resident_pages_before,
            dirty_pages_before,
            written_back_bytes: dirty_pages_before.map(|d| d as u64 * page),
            still_resident_pages,
            writeback,
            elapsed: start.elapsed(),
        };
        tracing::debug!(buffer = %b, ?stats, "demand-paged buffer evicted");
        Ok(stats)
    }

    /// Pages of the buffer in memory now (`mincore` over its range: the page cache of the store, which a touch
    /// maps without I/O).
    pub fn resident_pages(&self, b: DemandBufferId) -> Result<usize, DemandError> {
        self.count_resident(self.region(b)?)
    }

    /// Bytes of all buffers in memory now, in whole pages.
    pub fn resident_bytes(&self) -> Result<u64, DemandError> {
        let mut pages = 0u64;
        for &r in &self.buffers {
            pages += self.count_resident(r)? as u64;
        }
        Ok(pages * self.page as u64)
    }

    fn region(&self, b: DemandBufferId) -> Result<Region, DemandError> {
        self.buffers
            .get(b.0)
            .copied()
            .ok_or(DemandError::NoSuchBuffer {
                index: b.0,
                count: self.buffers.len(),
            })
    }

    /// The buffer's length rounded up to whole pages (its share of the mapping).
    fn span(&self, r: Region) -> usize {
        r.len.div_ceil(self.page) * self.page
    }

    fn addr(&self, r: Region) -> *mut libc::c_void {
        // SAFETY: offset <= map_len, as in `as_ptr`.
        unsafe { self.base.as_ptr().add(r.offset).cast() }
    }

    fn file_offset(&self, r: Region) -> Result<libc::off_t, DemandError> {
        self.file_len(r.offset)
    }

    fn file_len(&self, n: usize) -> Result<libc::off_t, DemandError> {
        // Never fails: create checked that the whole mapping's length fits an off_t.
        libc::off_t::try_from(n).map_err(|_| {
            DemandError::InvalidArgument(format!("offset {n} does not fit a file offset"))
        })
    }

    fn count_resident(&self, r: Region) -> Result<usize, DemandError> {
        let pages = self.span(r) / self.page;
        let mut vec = vec![0u8; pages.min(MINCORE_CHUNK_PAGES)];
        let mut resident = 0;
        let mut first = 0;
        while first < pages {
            let n = (pages - first).min(MINCORE_CHUNK_PAGES);
            // SAFETY: the range (page-aligned, n pages from page `first` of the buffer) lies inside our mapping, and
            // vec has room for the n bytes mincore writes.
            let rc = unsafe {
                libc::mincore(
                    self.base.as_ptr().add(r.offset + first * self.page).cast(),
                    n * self.page,
                    vec.as_mut_ptr(),
                )
            };
            if rc != 0 {
                return Err(self.os_error("mincore a buffer"));
            }
            resident += vec[..n].iter().filter(|&&v| v & 1 != 0).count();
            first += n;
        }
        Ok(resident)
    }

    /// Dirty and under-write-back pages of the buffer's file range (`cachestat`), or `None` where unsupported.
    fn dirty_pages(&self, r: Region) -> Option<usize> {
        let span = self.span(r);
        if span == 0 {
            return Some(0);
        }
        let range = CachestatRange {
            off: r.offset as u64,
            len: span as u64,
        };
        let mut cs = Cachestat::default();
        // SAFETY: cachestat reads `range` and writes `cs`, both live structs of the kernel's layout; fd is open.
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                self.file.as_raw_fd(),
                &range as *const CachestatRange,
                &mut cs as *mut Cachestat,
                0u32,
            )
        };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cachestat unavailable");
            return None;
        }
        usize::try_from(cs.nr_dirty + cs.nr_writeback).ok()
    }

    fn os_error(&self, op: &'static str) -> DemandError {
        os_error(op, &self.path)
    }
}

impl Drop for DemandSpace {
    fn drop(&mut self) {
        // SAFETY: base..base+map_len is the mapping `create` made and this value owns; pointers into it are not to be
        // used after the space is gone (`as_ptr`'s contract), and no borrow of self outlives this call.
        if unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) } != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                path = %self.path.display(),
                "munmap of the demand-paging store failed"
            );
        }
        // The file closes (and, unlinked, is freed) when `self.file` drops after this.
    }
}

/// `cachestat(2)`'s number: 451 on every architecture (the unified table from 424 on); libc lacks it for x86-64.
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` of `<linux/mman.h>`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `<linux/mman.h>`.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

fn os_error(op: &'static str, path: &Path) -> DemandError {
    DemandError::Os {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::last_os_error(),
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|&n| n >= 4096)
        .unwrap_or(4096)
}

/// Creates a new uniquely named file in `dir`, mode 0600, and unlinks it.
fn create_unlinked(dir: &Path) -> Result<(File, PathBuf), DemandError> {
    let pid = std::process::id();
    let mut last = None;
    for _ in 0..16 {
        let n = NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = dir.join(format!("oversub-demand-{pid}-{n}-{nanos:08x}.store"));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => {
                if let Err(source) = std::fs::remove_file(&path) {
                    return Err(DemandError::Os {
                        op: "unlink the new store file",
                        path,
                        source,
                    });
                }
                // The umask can only have narrowed the mode; make it exactly 0600.
                if let Err(source) = file.set_permissions(Permissions::from_mode(0o600)) {
                    return Err(DemandError::Os {
                        op: "chmod 0600 the store file",
                        path,
                        source,
                    });
                }
                return Ok((file, path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((path, e)),
            Err(source) => {
                return Err(DemandError::Os {
                    op: "create the store file",
                    path,
                    source,
                })
            }
        }
    }
    match last {
        Some((path, source)) => Err(DemandError::Os {
            op: "create a uniquely named store file",
            path,
            source,
        }),
        None => Err(DemandError::InvalidArgument(format!(
            "no unique file name in {}",
            dir.display()
        ))),
    }
}

/// Sizes the file to `len` bytes of zeros: `fallocate` (returns true), else `ftruncate` (sparse, returns false).
fn preallocate(file: &File, path: &Path, len: libc::off_t) -> Result<bool, DemandError> {
    loop {
        // SAFETY: a plain system call on an open descriptor.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => break,
            _ => {
                return Err(DemandError::Os {
                    op: "fallocate the store file",
                    path: path.to_path_buf(),
                    source: err,
                })
            }
        }
    }
    file.set_len(len as u64).map_err(|source| DemandError::Os {
        op: "ftruncate the store file",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(false)
}

/// Measures demand paging on a store in `dir` (default: the system's temporary directory) with one buffer of
/// `bytes`, `rounds` times, and returns the slowest round's speeds.
///
/// Each round writes the whole buffer (every page dirty), times its write-back (`msync(MS_SYNC)`: the bytes are the
/// pages `cachestat` saw dirty, or the whole buffer where the kernel lacks it), evicts it, then walks it at page
/// stride reading one byte per page (every page faults in from the store) and subtracts the time of the same walk
/// over the now-resident buffer, as the paper's footnote 12 does. A store whose pages stay resident after eviction
/// (tmpfs) is [`DemandError::NotEvictable`]; the walk's byte sum is checked against what was written. Faults read
/// one page each ([`Readahead::Off`]); [`measure_demand_bandwidths_with`] can measure with the kernel's readahead.
pub fn measure_demand_bandwidths(
    dir: Option<&Path>,
    bytes: u64,
    rounds: usize,
) -> Result<DemandSpeeds, DemandError> {
    measure_demand_bandwidths_with(dir, bytes, rounds, Readahead::Off)
}

/// [`measure_demand_bandwidths`] with the given readahead.
pub fn measure_demand_bandwidths_with(
    dir: Option<&Path>,
    bytes: u64,
    rounds: usize,
    readahead: Readahead,
) -> Result<DemandSpeeds, DemandError> {
    if bytes == 0 || rounds == 0 {
        return Err(DemandError::InvalidArgument(format!(
            "measuring needs bytes > 0 and rounds > 0 (got {bytes} bytes, {rounds} rounds)"
        )));
    }
    let space = DemandSpace::create(dir, &[bytes])?;
    space.set_readahead(readahead)?;
    let b = DemandBufferId(0);
    let r = space.region(b)?;
    let span = space.span(r);
    let pages = span / space.page;
    let mut read = f64::INFINITY;
    let mut write = f64::INFINITY;
    let mut majors = f64::INFINITY;
    for round in 0..rounds {
        let value = (round % 255 + 1) as u8;
        // SAFETY: the space is private to this function and the range is the buffer's part of its live mapping; no
        // other access to it exists.
        unsafe { std::ptr::write_bytes(space.base.as_ptr().add(r.offset), value, span) };
        let dirty = space.dirty_pages(r).map_or(span, |d| d * space.page);
        let t = Instant::now();
        // SAFETY: the buffer's page-aligned range of our own mapping; msync only writes it back.
        if unsafe { libc::msync(space.addr(r), span, libc::MS_SYNC) } != 0 {
            return Err(space.os_error("msync(MS_SYNC) a buffer"));
        }
        write = write.min(dirty as f64 / seconds(t.elapsed()));
        let evicted = space.evict(b)?;
        if !evicted.fully_evicted() {
            return Err(DemandError::NotEvictable {
                path: space.path.clone(),
                still_resident_pages: evicted.still_resident_pages,
            });
        }
        let cold = space.touch(b, DemandAccess::Read)?;
        let warm = space.touch(b, DemandAccess::Read)?;
        let expected = u64::from(value) * pages as u64;
        if cold.sum != expected {
            return Err(DemandError::DataMismatch {
                path: space.path.clone(),
                expected,
                found: cold.sum,
            });
        }
        let fault_in = cold.elapsed.saturating_sub(warm.elapsed);
        read = read.min(span as f64 / seconds(fault_in));
        majors = majors.min(cold.faults.major as f64 / pages as f64);
        tracing::debug!(
            round,
            fault_in_s = seconds(fault_in),
            major_faults = cold.faults.major,
            minor_faults = cold.faults.minor,
            "demand-paging round"
        );
    }
    Ok(DemandSpeeds {
        read_bytes_per_s: read,
        write_bytes_per_s: write,
        bytes: span as u64,
        rounds,
        major_faults_per_page: majors,
        readahead,
    })
}

/// Seconds, at least a nanosecond (so a speed stays finite).
fn seconds(d: Duration) -> f64 {
    d.max(Duration::from_nanos(1)).as_secs_f64()
}
