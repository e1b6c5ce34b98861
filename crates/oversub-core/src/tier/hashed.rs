//! Checksums as a wrapper tier: [`Hashed<T>`] takes the xxh3 of each [`CHECKSUM_PIECE_BYTES`] piece of a buffer
//! when it is written to `T`'s copy, keeps the hashes with the copy, and checks them when the copy is read back, so
//! a store that flips bits or acknowledges a write it did not finish (or host memory that was overwritten) gives a
//! checksum mismatch instead of wrong bytes. Any tier can be wrapped; the pool wraps the ones its options say.
//!
//! Hashing reads the buffer's device memory, so it needs memory the host can address; elsewhere (the staging path)
//! a move goes to `T` unhashed. Hashes run on the pool's checksum thread. When `T` takes a move piece by piece (the
//! store on the direct path), each piece is hashed as soon as its own I/O is done (a read) or beside it from the
//! start (a write), so the hash overlaps the transfer instead of adding a pass over the buffer after it; otherwise
//! a write's pieces are hashed beside the whole move and a read's after it.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oversub_accel::DeviceMemory;
use oversub_base::sync::lock;
use oversub_io::{Direction, IoCallback, IoVec, Slot};

use super::{Tier, TierIo};
use crate::transfer::{TransferCallback, TransferError};
use crate::workers::Workers;
use crate::PagerError;

/// Bytes hashed as one piece. A checksummed transfer is submitted in pieces of this size where the tier takes
/// pieces. (4 and 8 MiB came out alike in one noisy `bench paging` run; 1 and 32 MiB worse.)
pub(crate) const CHECKSUM_PIECE_BYTES: u64 = 8 << 20;

/// `T`, with every move of a buffer's bytes checksummed.
#[derive(Debug)]
pub(crate) struct Hashed<T> {
    inner: T,
    device: Arc<dyn DeviceMemory>,
    /// The checksum thread.
    hasher: Arc<Workers>,
}

impl<T: Tier> Hashed<T> {
    /// `inner`, hashing the memory of `device` on `hasher`.
    pub(crate) fn new(inner: T, device: Arc<dyn DeviceMemory>, hasher: Arc<Workers>) -> Self {
        Hashed {
            inner,
            device,
            hasher,
        }
    }

    /// The wrapped tier (tests reach the copy behind the checksums through it).
    #[cfg(test)]
    pub(crate) fn inner(&self) -> &T {
        &self.inner
    }
}

/// A copy of the inner tier, with the hashes of the move that last described it.
#[derive(Debug)]
pub(crate) struct HashedCopy<C> {
    inner: C,
    /// The hashes of the copy's write, or of its first read when it had none (an external file's range, a slot
    /// born zeroed: a later page-in of a file rewritten behind the pool's back is then a mismatch). Trusted only
    /// once complete.
    sums: Mutex<Option<Arc<PieceSet>>>,
}

impl<C> HashedCopy<C> {
    fn new(inner: C) -> Self {
        HashedCopy {
            inner,
            sums: Mutex::new(None),
        }
    }

    /// The copy of the inner tier.
    #[cfg(test)]
    pub(crate) fn inner(&self) -> &C {
        &self.inner
    }

    /// The hashes that describe the copy, when it has complete ones.
    fn sums(&self) -> Option<Arc<PieceSet>> {
        lock(&self.sums)
            .clone()
            .filter(|s| s.complete.load(Ordering::Acquire))
    }
}

/// The pieces of one checksummed move: their hashes as they come in, the first failure, and what runs when the
/// last piece is done. If a piece's callback is lost, the last reference to this drops `finish`, whose own
/// completion guard then fails the operation.
pub(crate) struct PieceSet {
    remaining: AtomicUsize,
    hashes: Mutex<Vec<u64>>,
    failure: Mutex<Option<TransferError>>,
    finish: Mutex<Option<TransferCallback>>,
    /// Every piece was moved and hashed (and matched, for a verified read).
    complete: AtomicBool,
}

impl std::fmt::Debug for PieceSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceSet")
            .field("pieces", &lock(&self.hashes).len())
            .field("complete", &self.complete.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

type Job = Box<dyn FnOnce() + Send>;

impl PieceSet {
    /// A set of `pieces` hashes that completes after `events` calls of [`done`](Self::done).
    fn new(pieces: usize, events: usize, finish: TransferCallback) -> Arc<Self> {
        Arc::new(PieceSet {
            remaining: AtomicUsize::new(events),
            hashes: Mutex::new(vec![0; pieces]),
            failure: Mutex::new(None),
            finish: Mutex::new(Some(finish)),
            complete: AtomicBool::new(false),
        })
    }

    fn fail(&self, cause: TransferError) {
        lock(&self.failure).get_or_insert(cause);
    }

    /// Counts `n` events as done; the last one runs `finish`.
    fn done(&self, n: usize) {
        if self.remaining.fetch_sub(n, Ordering::AcqRel) == n {
            let outcome = match lock(&self.failure).take() {
                Some(cause) => Err(cause),
                None => {
                    self.complete.store(true, Ordering::Release);
                    Ok(())
                }
            };
            if let Some(finish) = lock(&self.finish).take() {
                finish(outcome);
            }
        }
    }

    /// Hashes piece `k` (`len` bytes at `at`), checks it against `want` when given, and counts it as done.
    fn hash_job(self: &Arc<Self>, k: usize, at: SendPtr, len: u64, want: Option<u64>) -> Job {
        let set = Arc::clone(self);
        Box::new(move || {
            let actual = checksum(at, len);
            if let Some(slot) = lock(&set.hashes).get_mut(k) {
                *slot = actual;
            }
            if let Some(expected) = want.filter(|&w| w != actual) {
                set.fail(TransferError::Checksum { expected, actual });
            }
            set.done(1);
        })
    }

    /// The hash of piece `k`.
    fn hash(&self, k: usize) -> Option<u64> {
        lock(&self.hashes).get(k).copied()
    }
}

/// A raw pointer that may cross to the I/O engine's and the checksum thread.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);

// SAFETY: the pointer is only dereferenced while its buffer is pinned in an in-flight state (see `Tier::submit`).
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The address `bytes` further on (a method, so closures capture the whole `SendPtr`, not its raw field).
    fn add(self, bytes: u64) -> SendPtr {
        SendPtr(self.0.wrapping_add(bytes as usize))
    }
}

fn checksum(ptr: SendPtr, len: u64) -> u64 {
    // SAFETY: callers pass a committed range of at least `len` bytes that nothing writes during the call.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.0, len as usize) };
    xxhash_rust::xxh3::xxh3_64(bytes)
}

fn piece_count(size_bytes: u64) -> usize {
    size_bytes.div_ceil(CHECKSUM_PIECE_BYTES).max(1) as usize
}

/// Piece `k` of `pieces`: its I/O range `start..end` (the last one ends at `io_bytes`) and how many of its bytes
/// are hashed (those inside the buffer's size, not the alignment padding).
fn piece(k: usize, pieces: usize, io_bytes: u64, size_bytes: u64) -> (u64, u64, u64) {
    let start = k as u64 * CHECKSUM_PIECE_BYTES;
    let end = if k + 1 == pieces {
        io_bytes
    } else {
        start + CHECKSUM_PIECE_BYTES
    };
    (start, end, end.min(size_bytes).saturating_sub(start))
}

/// One checksummed move, as [`Hashed::submit`] prepared it.
struct Move<'a, C> {
    copy: &'a C,
    io: TierIo<'a>,
    ptr: SendPtr,
    pieces: usize,
    /// The hashes to check a read against.
    expected: Option<Arc<PieceSet>>,
}

impl<T: Tier> Hashed<T> {
    /// Submits the move in [`CHECKSUM_PIECE_BYTES`] pieces, each hashed on the checksum thread when its own I/O is
    /// done (after a write: the bytes written, which do not change while the buffer is in flight, from the start;
    /// after a read: the bytes read). Returns the set, or `Err` only when nothing was submitted.
    ///
    /// # Safety
    /// As [`Tier::submit`].
    unsafe fn submit_pieces(&self, m: Move<'_, T::Copy>) -> Result<Arc<PieceSet>, PagerError> {
        let TierIo {
            direction,
            io_bytes,
            size_bytes,
            after,
            on_done,
            ..
        } = m.io;
        let pieces = m.pieces;
        // Each piece counts twice: its I/O and its hash.
        let set = PieceSet::new(pieces, 2 * pieces, on_done);
        let hash_early = direction == Direction::Write;
        // One wake-up of the I/O engine's worker for all the pieces, when this returns.
        let _wakes = oversub_io::engine::DeferredWakes::begin();
        for k in 0..pieces {
            let (start, end, hashed_len) = piece(k, pieces, io_bytes, size_bytes);
            let at = m.ptr.add(start);
            let want = m.expected.as_ref().and_then(|e| e.hash(k));
            let hash = set.hash_job(k, at, hashed_len, want);
            let piece_set = Arc::clone(&set);
            let (on_done, later_hash): (IoCallback, Option<Job>) = if hash_early {
                let on_done: IoCallback = Box::new(move |result| {
                    if let Err(e) = result {
                        piece_set.fail(TransferError::Io(e));
                    }
                    piece_set.done(1);
                });
                (on_done, Some(hash))
            } else {
                // On the checksum thread, so the engine's thread goes back to its queue at once.
                let hasher = Arc::clone(&self.hasher);
                let on_done: IoCallback = Box::new(move |result| match result {
                    Ok(_) => {
                        piece_set.done(1);
                        hasher.run(hash);
                    }
                    Err(e) => {
                        piece_set.fail(TransferError::Io(e));
                        // Nothing to hash: count the piece's hash as done too.
                        piece_set.done(2);
                    }
                });
                (on_done, None)
            };
            // `io_bytes` fits in usize (checked by `submit`), so each piece does.
            let mem = IoVec {
                ptr: at.0,
                len: (end - start) as usize,
            };
            // SAFETY: forwarded from our caller; the piece lies inside the range and the copy.
            match unsafe {
                self.inner
                    .submit_piece(m.copy, direction, start, mem, after.clone(), on_done)
            } {
                Ok(()) => {
                    if let Some(hash) = later_hash {
                        self.hasher.run(hash);
                    }
                }
                // Nothing is in flight yet: the caller undoes the operation.
                Err(e) if k == 0 => return Err(e.into()),
                // Earlier pieces are in flight: fail the move once they are done.
                Err(e) => {
                    set.fail(TransferError::Io(e));
                    set.done(2 * (pieces - k));
                    break;
                }
            }
        }
        Ok(set)
    }

    /// Submits the move whole to the inner tier and hashes its pieces on the checksum thread: a write's beside it
    /// (its bytes do not change while it is in flight), a read's once it is done.
    ///
    /// # Safety
    /// As [`Tier::submit`].
    unsafe fn submit_whole(&self, m: Move<'_, T::Copy>) -> Result<Arc<PieceSet>, PagerError> {
        let TierIo {
            direction,
            range,
            io_bytes,
            size_bytes,
            after,
            on_done,
        } = m.io;
        let pieces = m.pieces;
        // Each piece's hash, and the move once.
        let set = PieceSet::new(pieces, pieces + 1, on_done);
        let hashes: Vec<Job> = (0..pieces)
            .map(|k| {
                let (start, _, hashed_len) = piece(k, pieces, io_bytes, size_bytes);
                let want = m.expected.as_ref().and_then(|e| e.hash(k));
                set.hash_job(k, m.ptr.add(start), hashed_len, want)
            })
            .collect();
        let piece_set = Arc::clone(&set);
        let (on_done, hash_now): (TransferCallback, Vec<Job>) = match direction {
            Direction::Write => (
                Box::new(move |r: Result<(), TransferError>| {
                    if let Err(e) = r {
                        piece_set.fail(e);
                    }
                    piece_set.done(1);
                }),
                hashes,
            ),
            Direction::Read => {
                let hasher = Arc::clone(&self.hasher);
                (
                    Box::new(move |r: Result<(), TransferError>| match r {
                        Ok(()) => {
                            piece_set.done(1);
                            for hash in hashes {
                                hasher.run(hash);
                            }
                        }
                        Err(e) => {
                            piece_set.fail(e);
                            // Nothing to hash.
                            piece_set.done(1 + pieces);
                        }
                    }),
                    Vec::new(),
                )
            }
        };
        let io = TierIo {
            direction,
            range,
            io_bytes,
            size_bytes,
            after,
            on_done,
        };
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.submit(m.copy, io) }?;
        for hash in hash_now {
            self.hasher.run(hash);
        }
        Ok(set)
    }
}

impl<T: Tier> Tier for Hashed<T> {
    type Copy = HashedCopy<T::Copy>;

    fn in_host_memory(&self) -> bool {
        self.inner.in_host_memory()
    }

    fn reserve(
        &self,
        io_bytes: u64,
        priority: &Arc<AtomicI64>,
    ) -> Result<Option<Self::Copy>, PagerError> {
        Ok(self.inner.reserve(io_bytes, priority)?.map(HashedCopy::new))
    }

    fn adopt(&self, slot: Slot) -> Result<Self::Copy, Slot> {
        self.inner.adopt(slot).map(HashedCopy::new)
    }

    fn release(&self, copy: Self::Copy) {
        self.inner.release(copy.inner);
    }

    fn deferred_start(&self) -> bool {
        self.inner.deferred_start()
    }

    unsafe fn submit(&self, copy: &Self::Copy, io: TierIo<'_>) -> Result<(), PagerError> {
        // Checksums are taken where the host can read the buffer (not through the staging path).
        let ptr = match self.device.host_ptr(io.range) {
            Some(ptr) => SendPtr(ptr),
            None => {
                if io.direction == Direction::Write {
                    // Whatever hashes the copy had do not describe what is written now.
                    *lock(&copy.sums) = None;
                }
                // SAFETY: forwarded from our caller.
                return unsafe { self.inner.submit(&copy.inner, io) };
            }
        };
        usize::try_from(io.io_bytes)
            .map_err(|_| PagerError::InvalidSize("buffer too large".into()))?;
        let pieces = piece_count(io.size_bytes);
        let expected = match io.direction {
            Direction::Write => None,
            Direction::Read => copy.sums(),
        };
        if expected
            .as_ref()
            .is_some_and(|e| lock(&e.hashes).len() != pieces)
        {
            return Err(PagerError::Internal(
                "stored checksum does not match the buffer's size",
            ));
        }
        let verified = expected.is_some();
        let m = Move {
            copy: &copy.inner,
            io,
            ptr,
            pieces,
            expected,
        };
        let set = if self.inner.by_pieces() {
            // SAFETY: forwarded from our caller.
            unsafe { self.submit_pieces(m) }?
        } else {
            // SAFETY: forwarded from our caller.
            unsafe { self.submit_whole(m) }?
        };
        if !verified {
            // A write's hashes, or those of the first read of a copy that had none, describe the copy once complete.
            *lock(&copy.sums) = Some(set);
        }
        Ok(())
    }

    fn quick_access(&self) -> bool {
        self.inner.quick_access()
    }

    fn read_at(&self, copy: &Self::Copy, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        self.inner.read_at(&copy.inner, offset, out)
    }

    fn write_at(&self, copy: &Self::Copy, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        // The hashes no longer describe the copy (even if this write fails half-way, so they go first).
        *lock(&copy.sums) = None;
        self.inner.write_at(&copy.inner, offset, data)
    }
}
