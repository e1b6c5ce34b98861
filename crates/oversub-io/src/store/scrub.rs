//! Scrubbing: swapped-out data must not stay readable in a store that outlives its pool.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::sync::Mutex;

use oversub_base::sync::lock;

use super::header::Header;
use super::sys::{fstat, on_store, pwrite_all, write_header};
use crate::error::IoError;
use oversub_base::mem::AlignedBuf;

/// `_IO(0x12, 119)`; not exported by libc.
const BLKDISCARD: libc::Ioctl = 0x1277;
/// Zero-fill fallback write size.
const ZERO_CHUNK: u64 = 1 << 20;

/// What happens to swapped-out bytes in the data area once the store no longer needs them
/// ([`StoreBuilder::scrub`](super::StoreBuilder::scrub)).
///
/// Discarding means `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` on a regular file (the blocks go
/// back to the file system and the range reads as zeros) and the `BLKDISCARD` ioctl on a block device (loop
/// devices and most NVMe drives then read zeros, but the read-back of discarded blocks is up to the device).
/// A scrub covers only what oversub may have written: the data area up to the highest offset this store ever
/// handed out, or, when the file was an oversub store already, up to the scrub end its header recorded (what an
/// earlier store killed before its own scrub left, even past this store's capacity). So a user's file accepted as
/// blank never loses bytes the store did not write, and where discarding is unsupported the zeros written are
/// bounded the same way.
///
/// The header stays, so the file is still recognised as oversub's. Stores created without
/// [`keep`](super::StoreBuilder::keep) are never scrubbed at close: their file was unlinked when it was
/// created, so no name leads to it and the file system frees its blocks when the last descriptor closes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scrub {
    /// Discard the whole data area when the store closes: when the [`SwapStore`](super::SwapStore) is dropped,
    /// or, if batches are still in flight then, once the last of them completes (on the engine's thread). Freed
    /// ranges are not discarded while the store is open: under O_DIRECT, writing a punched range makes the file
    /// system allocate blocks again, which slows the next page-out. The scrub is one discard call (a metadata
    /// update for a file; for a device, as long as the drive takes to deallocate) or, as the fallback, a write of
    /// zeros up to the high-water mark, on the thread that drops the last reference. Failures are logged, never
    /// raised (a drop cannot return them).
    #[default]
    OnClose,
    /// Leave the data in place (benchmark files, or a store whose contents are not sensitive).
    Keep,
    /// As [`OnClose`](Scrub::OnClose), and every slot's ranges are discarded when the slot is released, before
    /// they can be allocated again. Costs a system call per release and, under O_DIRECT, block allocation on every
    /// later write to those ranges (slower page-outs, more fragmentation). Where discarding is unsupported,
    /// released ranges are left for the scrub at close (zeroing at every release would double the write traffic).
    OnRelease,
}

/// One open file or device: the store's only one, or one member of a striped store. Shared (in an `Arc`) by the
/// store and its in-flight batches: whoever drops the last reference scrubs (if asked) and closes, which also drops
/// the lock and the exclusive claim.
#[derive(Debug)]
pub(crate) struct Backing {
    pub fd: OwnedFd,
    /// This process's claim on the node; declared after `fd` so it is given up only once the fd is closed.
    pub held: super::exclusive::Held,
    pub path: PathBuf,
    pub block_device: bool,
    pub alignment: usize,
    /// File offset of the data area (the header's length).
    pub data_offset: u64,
    /// Bytes of the data area.
    pub capacity: u64,
    /// End (file offset) of the highest range ever allocated.
    pub high_water: AtomicU64,
    /// The header's scrub end when the store opened it (the data offset for a blank or new file): an earlier
    /// store's leftovers, scrubbed at close whatever this store's capacity.
    pub previous_end: u64,
    /// The header as last written; its scrub end is raised before any slot past it is handed out.
    pub header: Mutex<Header>,
    pub scrub_at_close: bool,
    /// Whether the file stays on disk (kept created files, opened files and devices).
    pub kept: bool,
    /// Whether the store created the file (rather than opening one that was there).
    pub created: bool,
    /// Whether the fd is O_DIRECT.
    pub direct: bool,
    /// Set once [`close_early`](Self::close_early) scrubbed and unlocked it: the file may belong to another store
    /// by the time this one drops, so the drop must not scrub it again.
    pub closed_early: AtomicBool,
}

impl Backing {
    /// Notes that `[.., end)` (a file offset) is about to be handed out. Before the first slot past the header's
    /// scrub end, the header is rewritten with a higher one (an eighth of the data area at a time, so a store's
    /// life costs a handful of header writes), so that a store killed before its scrub leaves a header that says
    /// how far to scrub. Called under the allocator's lock: on an error the caller gives the extents back.
    pub fn allocated_up_to(&self, end: u64) -> Result<(), IoError> {
        self.high_water.fetch_max(end, Ordering::Relaxed);
        if !self.kept {
            // Unlinked: nobody can reopen it, and its blocks go when it closes.
            return Ok(());
        }
        let mut header = lock(&self.header);
        if end <= header.scrub_end {
            return Ok(());
        }
        let data_end = self.data_offset + self.capacity;
        let step = (self.capacity / 8).next_multiple_of(self.alignment as u64);
        let raised = Header {
            // `end` never passes the data area's end, so the mark covers it.
            scrub_end: (header.scrub_end + step).max(end).min(data_end),
            ..*header
        };
        write_header(self.fd.as_raw_fd(), self.alignment, &raised).map_err(on_store(&self.path))?;
        *header = raised;
        Ok(())
    }

    /// End (file offset) of what a scrub must cover: what this store handed out and what an earlier one left.
    fn scrub_end(&self) -> u64 {
        self.high_water
            .load(Ordering::Relaxed)
            .max(self.previous_end)
            .max(self.data_offset)
    }

    fn scrub(&self) {
        let fd = self.fd.as_raw_fd();
        let path = self.path.display();
        let end = self.scrub_end();
        let scrubbed = match discard(
            fd,
            self.block_device,
            self.data_offset,
            end - self.data_offset,
        ) {
            Ok(()) => {
                tracing::debug!(path = %path, end, "swap store scrubbed (discarded)");
                true
            }
            Err(e) if is_unsupported(&e) => {
                // Never past the end of a file: zeros there would grow it.
                let end = match fstat(fd) {
                    Ok(st) if !self.block_device => end.min(u64::try_from(st.st_size).unwrap_or(0)),
                    _ => end,
                };
                let end = end - end % self.alignment as u64;
                tracing::debug!(
                    path = %path,
                    "discard unsupported ({e}); zeroing the store up to {end}"
                );
                match zero_fill(fd, self.data_offset, end, self.alignment) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(path = %path, "could not scrub the swap store: {e}");
                        false
                    }
                }
            }
            Err(e) => {
                tracing::warn!(path = %path, "could not scrub the swap store: {e}");
                false
            }
        };
        if scrubbed && self.kept {
            // Nothing left to scrub: the next store to open the file scrubs only what it writes itself.
            let mut header = lock(&self.header);
            let clean = Header {
                scrub_end: self.data_offset,
                ..*header
            };
            match write_header(fd, self.alignment, &clean) {
                Ok(()) => *header = clean,
                Err(e) => {
                    tracing::warn!(path = %path, "could not lower the scrub end in the header: {e}")
                }
            }
        }
    }
}

impl Backing {
    /// Scrubs (if asked) and gives up the lock now rather than at the drop (the store was closed while idle).
    pub fn close_early(&self) {
        if self.closed_early.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.scrub_at_close {
            self.scrub();
        }
        // SAFETY: plain syscall on our open fd. Only the creator gets here (`close_if_idle` checks), so no forked
        // child's copy of the description is unlocked behind its parent's back.
        if unsafe { libc::flock(self.fd.as_raw_fd(), libc::LOCK_UN) } != 0 {
            tracing::warn!(
                path = %self.path.display(),
                "could not unlock the closed swap store: {}",
                std::io::Error::last_os_error()
            );
        }
        self.held.release();
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        if self.closed_early.load(Ordering::Acquire) {
            return;
        }
        // A forked child shares the open file description with its parent, whose store this still is: scrubbing
        // it would destroy the parent's paged-out buffers. The child only closes its copy of the descriptor, which
        // leaves the parent's flock in place (the lock belongs to the description, which the parent keeps open).
        if self.scrub_at_close && self.held.is_creator() {
            self.scrub();
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Lets unit tests take the zero-fill path on file systems that all punch holes.
    pub(crate) static REFUSE_DISCARD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn discard_refused_for_test() -> bool {
    #[cfg(test)]
    {
        REFUSE_DISCARD.with(|r| r.get())
    }
    #[cfg(not(test))]
    {
        false
    }
}

/// Discards `[offset, offset + len)`: punches a hole in a file, `BLKDISCARD`s a device range.
pub(crate) fn discard(fd: RawFd, block_device: bool, offset: u64, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    if discard_refused_for_test() {
        return Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    if block_device {
        let range: [u64; 2] = [offset, len];
        // SAFETY: BLKDISCARD reads two u64 (start, length) from the pointer.
        if unsafe { libc::ioctl(fd, BLKDISCARD, &range) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        return Ok(());
    }
    let too_large = || std::io::Error::from_raw_os_error(libc::EFBIG);
    let off = libc::off_t::try_from(offset).map_err(|_| too_large())?;
    let n = libc::off_t::try_from(len).map_err(|_| too_large())?;
    loop {
        // SAFETY: plain syscall on an open fd.
        let r = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                n,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Whether a discard failed because the file system or device cannot discard (so zeros must be written).
pub(crate) fn is_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::ENOTTY | libc::EINVAL)
    )
}

/// Writes zeros over `[offset, end)` (both multiples of `alignment`), then flushes them to the device.
pub(crate) fn zero_fill(fd: RawFd, offset: u64, end: u64, alignment: usize) -> Result<(), IoError> {
    if end <= offset {
        return Ok(());
    }
    let chunk = ZERO_CHUNK
        .min(end - offset)
        .next_multiple_of(alignment as u64);
    let zeros = AlignedBuf::new(chunk as usize, alignment)?;
    let mut pos = offset;
    while pos < end {
        let n = chunk.min(end - pos) as usize;
        pwrite_all(fd, &zeros.as_slice()[..n], pos)?;
        pos += n as u64;
    }
    // Buffered zeros sit in the page cache until written back; direct ones may sit in the drive's cache.
    // SAFETY: plain syscall on an open fd.
    if unsafe { libc::fdatasync(fd) } < 0 {
        return Err(IoError::last_os("fdatasync"));
    }
    Ok(())
}
