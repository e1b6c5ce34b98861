//! Checksummed transfers: a buffer's bytes hashed in pieces as their own I/O completes, on the direct path.

use super::*;

/// Bytes hashed as one piece. A checksummed transfer is submitted in pieces of this size; a page-in's pieces are
/// hashed as soon as their own reads are done, while the later pieces are still in flight, and a page-out's from
/// the start, beside their writes. Either way the hash overlaps the transfer instead of adding a pass over the
/// buffer after it. (4 and 8 MiB came out alike in one noisy `bench paging` run; 1 and 32 MiB worse.)
pub(super) const CHECKSUM_PIECE_BYTES: u64 = 8 << 20;

/// A buffer's checksum: the xxh3 of each [`CHECKSUM_PIECE_BYTES`] piece of its bytes, in order.
pub(super) type Checksums = Arc<[u64]>;

pub(super) fn piece_count(size_bytes: u64) -> usize {
    size_bytes.div_ceil(CHECKSUM_PIECE_BYTES).max(1) as usize
}

/// The pieces of one checksummed transfer: their hashes as they come in, the first failure, and what runs when the
/// last piece is done. If a piece's callback is lost, the last reference to this drops `finish`, whose own
/// [`Completion`] then fails the operation.
pub(super) struct PieceSet {
    pub(super) remaining: std::sync::atomic::AtomicUsize,
    pub(super) hashes: Mutex<Vec<u64>>,
    pub(super) failure: Mutex<Option<OpFailure>>,
    pub(super) finish: Mutex<Option<PiecesDone>>,
}

pub(super) type PiecesDone = Box<dyn FnOnce(Result<Checksums, OpFailure>) + Send>;

impl PieceSet {
    /// A set of `pieces` hashes that completes after `events` calls of [`done`](Self::done).
    pub(super) fn new(pieces: usize, events: usize, finish: PiecesDone) -> Arc<Self> {
        Arc::new(PieceSet {
            remaining: std::sync::atomic::AtomicUsize::new(events),
            hashes: Mutex::new(vec![0; pieces]),
            failure: Mutex::new(None),
            finish: Mutex::new(Some(finish)),
        })
    }

    pub(super) fn fail(&self, cause: OpFailure) {
        lock(&self.failure).get_or_insert(cause);
    }

    /// Counts `n` pieces as done; the last one runs `finish`.
    pub(super) fn done(&self, n: usize) {
        if self.remaining.fetch_sub(n, Ordering::AcqRel) == n {
            let outcome = match lock(&self.failure).take() {
                Some(cause) => Err(cause),
                None => Ok(Checksums::from(std::mem::take(&mut *lock(&self.hashes)))),
            };
            if let Some(finish) = lock(&self.finish).take() {
                finish(outcome);
            }
        }
    }
}

/// A raw pointer that may cross to the I/O engine's thread.
#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut u8);

// SAFETY: the pointer is only dereferenced while its buffer is pinned in an in-flight state (see the submit calls).
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The address `bytes` further on (a method, so closures capture the whole `SendPtr`, not its raw field).
    pub(super) fn add(self, bytes: u64) -> SendPtr {
        SendPtr(self.0.wrapping_add(bytes as usize))
    }
}

pub(super) fn checksum(ptr: SendPtr, len: u64) -> u64 {
    // SAFETY: callers pass a committed range of at least `len` bytes that nothing writes during the call.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.0, len as usize) };
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Submits the transfer of host-addressable memory at `ptr` to or from `slot` in [`CHECKSUM_PIECE_BYTES`] pieces,
/// each hashed on the I/O thread when its own I/O is done (after a write: the bytes written, which do not change
/// while the buffer is in flight; after a read: the bytes read) and compared with `expected` when given. `finish`
/// runs once, after the last piece, with the hashes or the first failure. Returns `Err` only when nothing was
/// submitted (then `finish` never runs). Under an arbiter, with `after`, every piece waits for that commit.
///
/// # Safety
/// As [`TransferPath::submit`](crate::transfer::TransferPath::submit): `ptr..ptr + io_bytes` stays valid and
/// otherwise untouched, and the slot allocated, until `finish` has run.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn submit_hashed(
    sums: &Checksummed,
    direction: Direction,
    slot: &Slot,
    ptr: SendPtr,
    io_bytes: u64,
    size_bytes: u64,
    expected: Option<Checksums>,
    after: Option<Arc<Prelude>>,
    finish: PiecesDone,
) -> Result<(), PagerError> {
    let pieces = piece_count(size_bytes);
    if expected.as_ref().is_some_and(|e| e.len() != pieces) {
        return Err(PagerError::Internal(
            "stored checksum does not match the buffer's size",
        ));
    }
    // A write's bytes do not change while it is in flight, so its pieces are hashed alongside their I/O from the
    // start; a read's only once they have arrived. Each piece then counts twice: its I/O and its hash.
    let hash_early = direction == Direction::Write;
    let set = PieceSet::new(pieces, 2 * pieces, finish);
    // One wake-up of the I/O engine's worker for all the pieces, when this returns.
    let _wakes = oversub_io::engine::DeferredWakes::begin();
    for k in 0..pieces {
        let start = k as u64 * CHECKSUM_PIECE_BYTES;
        let end = if k + 1 == pieces {
            io_bytes
        } else {
            start + CHECKSUM_PIECE_BYTES
        };
        let at = ptr.add(start);
        let hash = {
            let hashed_len = end.min(size_bytes).saturating_sub(start);
            let want = expected.as_ref().map(|e| e[k]);
            let piece_set = Arc::clone(&set);
            move || {
                let actual = checksum(at, hashed_len);
                lock(&piece_set.hashes)[k] = actual;
                if let Some(expected) = want.filter(|&w| w != actual) {
                    piece_set.fail(OpFailure::Checksum { expected, actual });
                }
                piece_set.done(1);
            }
        };
        let hasher = Arc::clone(&sums.hasher);
        // On a checksum thread, so the engine's thread goes back to its queue at once.
        let run_hash = move |hash: Box<dyn FnOnce() + Send>| hasher.run(hash);
        let (on_done, later_hash): (oversub_io::IoCallback, Option<Box<dyn FnOnce() + Send>>) =
            if hash_early {
                let piece_set = Arc::clone(&set);
                let on_done: oversub_io::IoCallback = Box::new(move |result| {
                    if let Err(e) = result {
                        piece_set.fail(OpFailure::Io(e));
                    }
                    piece_set.done(1);
                });
                (on_done, Some(Box::new(hash)))
            } else {
                let piece_set = Arc::clone(&set);
                let run_hash = run_hash.clone();
                let on_done: oversub_io::IoCallback = Box::new(move |result| match result {
                    Ok(_) => {
                        piece_set.done(1);
                        run_hash(Box::new(hash));
                    }
                    Err(e) => {
                        piece_set.fail(OpFailure::Io(e));
                        // Nothing to hash: count the piece's hash as done too.
                        piece_set.done(2);
                    }
                });
                (on_done, None)
            };
        let mem = IoVec {
            ptr: at.0,
            len: usize::try_from(end - start)
                .map_err(|_| PagerError::InvalidSize("buffer too large".into()))?,
        };
        // SAFETY: forwarded from our caller; the piece lies inside the range and the slot.
        match unsafe {
            sums.pieces
                .submit_piece(direction, slot, start, mem, after.clone(), on_done)
        } {
            // A read's piece is hashed by its completion.
            Ok(()) => {
                if let Some(hash) = later_hash {
                    run_hash(hash);
                }
            }
            // Nothing is in flight yet: the caller undoes the operation.
            Err(e) if k == 0 => return Err(e.into()),
            // Earlier pieces are in flight: fail the operation once they are done.
            Err(e) => {
                set.fail(OpFailure::Io(e));
                set.done(2 * (pieces - k));
                break;
            }
        }
    }
    Ok(())
}
