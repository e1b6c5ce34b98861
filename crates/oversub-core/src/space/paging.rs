//! Paging: starting page-outs and page-ins through the pool's tiers, and settling a buffer when its ticket
//! finishes.

use crate::workers::Workers;

use super::*;

/// The completion of a page-out's copy away (to the store or the host tier): release the memory (under an arbiter,
/// as a gated memory operation), then settle.
pub(super) fn release_when_copied(
    device: Arc<dyn DeviceMemory>,
    mm: Option<MmLane>,
    done: Completion,
    reservation: Reservation,
) -> TransferCallback {
    Box::new(move |result: Result<(), TransferError>| match result {
        // SAFETY: the copy is complete and the buffer is PagingOut, so nothing uses its memory.
        Ok(()) => unsafe {
            release_then(mm.as_ref(), device.as_ref(), reservation, move |r| {
                done.complete(r.map_err(|e| Failed::kept_memory(OpFailure::Release(e))))
            })
        },
        Err(err) => done.complete(Err(Failed::kept_memory(err.into()))),
    })
}

/// Releases the memory of `reservation`, then calls `then` with the outcome: here and now without an arbiter;
/// under one, as a gated memory operation on the pool's gated worker, admitted for its measured worst-case cost
/// (this thread does not wait for the grant, and `then` runs on the worker).
///
/// # Safety
/// As [`DeviceMemory::decommit`]: nothing uses the range's memory any more.
pub(super) unsafe fn release_then(
    mm: Option<&MmLane>,
    device: &dyn DeviceMemory,
    reservation: Reservation,
    then: impl FnOnce(Result<(), AccelError>) + Send + 'static,
) {
    match mm {
        // SAFETY: forwarded from our caller.
        Some(mm) => unsafe { mm.decommit(reservation, then) },
        // SAFETY: forwarded from our caller.
        None => then(unsafe { device.decommit(&reservation) }),
    }
}

/// A page-out's start, one way per case (the copy is current already, or a new one is written): each gives the copy
/// the buffer's state keeps; the completion (`done`) releases the memory once the bytes are safe, then settles.
struct PageOut<'a> {
    pool: &'a PoolShared,
    reservation: Reservation,
    io_bytes: u64,
    size_bytes: u64,
    mm: Option<MmLane>,
    done: Completion,
}

impl PageOut<'_> {
    /// A read-only buffer's copy is current: only release the memory.
    ///
    /// # Safety
    /// Nothing uses the buffer's memory, and nothing will until the completion has run.
    unsafe fn release_only(self, copy: StoredCopy) -> StoredCopy {
        let done = self.done;
        // SAFETY: forwarded from our caller.
        unsafe {
            release_then(
                self.mm.as_ref(),
                self.pool.device.as_ref(),
                self.reservation,
                move |r| done.complete(r.map_err(|e| Failed::kept_memory(OpFailure::Release(e)))),
            )
        };
        copy
    }

    /// Writes the buffer into `copy`, new room in the first tier that had it (checksummed where that tier is);
    /// the completion releases the memory once the bytes are safe. On failure the room goes back.
    ///
    /// # Safety
    /// The memory stays committed and unchanged until the completion has run.
    unsafe fn into_copy(self, copy: StoredCopy) -> Result<StoredCopy, PagerError> {
        let on_done = release_when_copied(
            Arc::clone(&self.pool.device),
            self.mm,
            self.done,
            self.reservation,
        );
        // SAFETY: forwarded from our caller; the copy is new, the entry's alone.
        let submitted = unsafe {
            copy.submit(TierIo {
                direction: Direction::Write,
                range: &self.reservation,
                io_bytes: self.io_bytes,
                size_bytes: self.size_bytes,
                after: None,
                on_done,
            })
        };
        match submitted {
            Ok(()) => Ok(copy),
            Err(err) => {
                copy.release();
                Err(err)
            }
        }
    }
}

/// From this size up, a page-in without an arbiter commits its memory on the pool's starter thread rather than the
/// caller's. Handing the work over costs a thread wake-up (tens of microseconds on a busy machine), which a commit
/// costs from about 64 MiB up: moving a 512 MiB range's pages back from the host backend's recycling pool took
/// 0.15-0.20 ms (strace of a 1 GiB page-in, docs/benchmarks.md#submit-cost), about 20 µs per 64 MiB. Smaller
/// page-ins (most of a real-time schedule's) keep the shorter path.
pub(super) const DEFERRED_COMMIT_BYTES: u64 = 64 << 20;

/// The end of a page-in, run once: with the transfer's outcome, or with the failure that kept it from starting.
/// On failure the memory is given back (under an arbiter, as a gated memory operation) before the ticket learns
/// it; a settle dropped without running completes its operation as lost.
pub(super) struct Settle {
    run: Mutex<Option<SettleFn>>,
    /// While a starter job shares the buffer's copy (`true`), an outcome waits here until the job lets go: the
    /// settle wakes `finish`, which may give the copy back, and must never find it still shared.
    held: Mutex<(bool, Option<Result<(), OpFailure>>)>,
}

type SettleFn = Box<dyn FnOnce(Result<(), OpFailure>) + Send>;

impl Settle {
    fn new(
        device: Arc<dyn DeviceMemory>,
        done: Completion,
        reservation: Reservation,
        mm: Option<MmLane>,
        prelude: Option<Arc<Prelude>>,
    ) -> Arc<Settle> {
        let run = move |outcome: Result<(), OpFailure>| {
            // A failed commit is the cause, whatever its transfer reported (it did not run).
            let outcome = match prelude.as_ref().and_then(|p| p.take_failure()) {
                Some(Some(err)) => Err(OpFailure::Commit(err)),
                Some(None) => Err(OpFailure::Lost(
                    "the commit before the page-in never ran (a panic in a device backend or worker)",
                )),
                None => outcome,
            };
            match outcome {
                Ok(()) => done.complete(Ok(())),
                Err(cause) => {
                    // Give the memory back now (under an arbiter, as a gated memory operation); finish only has to
                    // settle the state.
                    // SAFETY: the read is over (or never ran) and the buffer is PagingIn, so nothing uses its
                    // memory.
                    unsafe {
                        release_then(mm.as_ref(), device.as_ref(), reservation, move |r| {
                            let released = match r {
                                Ok(()) => true,
                                Err(err) => {
                                    tracing::warn!("decommit after a failed page-in: {err}");
                                    false
                                }
                            };
                            done.complete(Err(Failed {
                                cause,
                                memory_released: released,
                            }));
                        })
                    }
                }
            }
        };
        Arc::new(Settle {
            run: Mutex::new(Some(Box::new(run))),
            held: Mutex::new((false, None)),
        })
    }

    /// Settles with `outcome` (once the starter job that holds the copy, if any, has let go); only the first call
    /// does anything.
    pub(super) fn run(&self, outcome: Result<(), OpFailure>) {
        {
            let mut held = lock(&self.held);
            if held.0 {
                held.1.get_or_insert(outcome);
                return;
            }
        }
        let run = lock(&self.run).take();
        if let Some(run) = run {
            run(outcome);
        }
    }

    /// A starter job shares the copy from now on: outcomes wait for [`let_go`](Self::let_go).
    fn hold(&self) {
        lock(&self.held).0 = true;
    }

    /// The starter job no longer shares the copy: settle with the outcome that waited, if one did.
    fn let_go(&self) {
        let waited = {
            let mut held = lock(&self.held);
            held.0 = false;
            held.1.take()
        };
        if let Some(outcome) = waited {
            self.run(outcome);
        }
    }
}

/// The completion of a page-in's read: settle with its outcome.
fn settle_when_read(settle: &Arc<Settle>) -> TransferCallback {
    let settle = Arc::clone(settle);
    Box::new(move |r| settle.run(r.map_err(OpFailure::from)))
}

/// A page-in's read started on the pool's starter thread, owning what it needs there.
struct DeferredRead {
    copy: SharedCopy,
    reservation: Reservation,
    io_bytes: u64,
    size_bytes: u64,
}

impl DeferredRead {
    /// Commits the buffer's memory, then queues the read, both on the pool's starter thread; a failure of either
    /// settles the page-in (and its ticket reports it).
    ///
    /// # Safety
    /// As [`Tier::submit`](crate::tier::Tier::submit) once the commit succeeded: nothing else uses the range, and
    /// the copy stays reserved, until `settle` has run.
    unsafe fn start_on(self, starter: &Workers, pool: &Arc<PoolShared>, settle: Arc<Settle>) {
        let pool = Arc::clone(pool);
        settle.hold();
        starter.run(Box::new(move || {
            let DeferredRead {
                copy,
                reservation,
                io_bytes,
                size_bytes,
            } = self;
            let started = pool
                .device
                .commit(&reservation)
                .map_err(OpFailure::Commit)
                .and_then(|()| {
                    let read = TierIo {
                        direction: Direction::Read,
                        range: &reservation,
                        io_bytes,
                        size_bytes,
                        after: None,
                        on_done: settle_when_read(&settle),
                    };
                    // SAFETY: the range is committed now; the rest is our caller's promise.
                    unsafe { copy.submit(read) }.map_err(OpFailure::Start)
                });
            if let Err(cause) = started {
                settle.run(Err(cause));
            }
            drop(copy);
            settle.let_go();
        }));
    }
}

impl AddressSpace {
    /// Pages a buffer out and waits: write to the store, then release its memory.
    pub fn page_out(&self, buffer: Buffer) -> Result<(), PagerError> {
        self.page_out_async(buffer)?.finish()
    }

    /// Pages a buffer in and waits: commit memory at the same address, then read from the store.
    pub fn page_in(&self, buffer: Buffer) -> Result<(), PagerError> {
        self.page_in_async(buffer)?.finish()
    }

    /// Starts a page-out: the write is submitted when this returns; the memory is released by the I/O side as soon
    /// as the write completes, and [`Ticket::finish`] marks the buffer paged out. With checksums on, the bytes are
    /// hashed on the I/O side, piece by piece as their writes complete.
    pub fn page_out_async(&self, buffer: Buffer) -> Result<Ticket, PagerError> {
        let shared = &self.shared;
        let pool = &shared.pool;
        pool.check_fork()?;
        // Queued device work may still use the buffer: wait for its recorded uses, or for the whole device.
        shared.wait_for_uses(buffer)?;
        let mut st = shared.lock_idle(buffer)?;
        let e = shared.entry_mut(&mut st, buffer)?;
        if e.flags.unpageable {
            return Err(PagerError::Unpageable(buffer));
        }
        let public = e.state.public();
        let resident_copy = match &mut e.state {
            State::Resident(copy) => copy,
            State::Stored {
                phase: Phase::PagedOut,
                ..
            } => return Err(PagerError::AlreadyPagedOut(buffer)),
            State::Stored { .. } => {
                return Err(PagerError::OperationInFlight {
                    buffer,
                    state: public,
                })
            }
        };
        // A read-only buffer written once keeps its copy (a read-write buffer never keeps one while resident).
        let reused = e.flags.read_only.then(|| resident_copy.take()).flatten();
        let op = Arc::new(OpState::default());
        let out = PageOut {
            pool,
            reservation: e.reservation,
            io_bytes: e.io_bytes,
            size_bytes: e.size_bytes,
            // Under an arbiter the decommit that ends a page-out is a gated memory operation on the gated worker.
            mm: pool.mm_lane(),
            done: Completion::new(&op),
        };
        // Each start below relies on this: the memory stays committed and unchanged until the completion has run:
        // the buffer is marked PagingOut below (under the same lock), `free` defers while an operation is in
        // flight, and the address space is kept alive by the ticket, whose finish waits for the completion. The
        // buffer is resident with no operation or access in flight, under the space lock, so nothing of ours uses
        // its memory (callers' own pointers are void once they page it out).
        let (copy, kept) = match reused {
            // The store already holds these bytes: only the memory goes.
            // SAFETY: see above.
            Some(copy) => (unsafe { out.release_only(copy) }, true),
            None => {
                let copy = pool.tiers.reserve(e.io_bytes, &shared.usage.io_priority)?;
                // SAFETY: see above.
                (unsafe { out.into_copy(copy) }?, false)
            }
        };
        e.state = State::Stored {
            copy,
            phase: Phase::PagingOut {
                op: Arc::clone(&op),
                kept,
            },
        };
        tracing::debug!(%buffer, "page-out started");
        Ok(Ticket {
            space: Arc::clone(shared),
            buffer,
            kind: OpKind::PageOut,
            op,
            finished: false,
        })
    }

    /// Starts a page-in: the buffer's memory is committed at its address and the read queued, here or, for a large
    /// buffer, on the pool's starter thread (the commit of a 1 GiB range moves its pages in, a few tenths of a
    /// millisecond the caller need not wait for; under an arbiter the gated worker commits). [`Ticket::finish`]
    /// waits for the read (and the checksum, if on, verified piece by piece on the I/O side) and marks the buffer
    /// resident; a commit or submission that fails off this thread is its error.
    pub fn page_in_async(&self, buffer: Buffer) -> Result<Ticket, PagerError> {
        let shared = &self.shared;
        let pool = &shared.pool;
        pool.check_fork()?;
        let mut st = shared.lock_idle(buffer)?;
        let e = shared.entry_mut(&mut st, buffer)?;
        if e.flags.unpageable {
            return Err(PagerError::Unpageable(buffer));
        }
        let public = e.state.public();
        // The copy to read back, which a paged-out buffer always has, and its phase, to mark PagingIn below.
        let (copy, phase) = match &mut e.state {
            State::Resident(_) => return Err(PagerError::AlreadyResident(buffer)),
            State::Stored { copy, phase } => match phase {
                Phase::PagedOut => (&*copy, phase),
                Phase::PagingOut { .. } | Phase::PagingIn(_) => {
                    return Err(PagerError::OperationInFlight {
                        buffer,
                        state: public,
                    })
                }
            },
        };
        let charge_bytes = e.reservation.len as u64;
        // A buffer whose last release failed is still charged; never count it twice.
        let newly_charged = !e.charged;
        if newly_charged {
            shared
                .charge(charge_bytes)
                .map_err(|err| err.with_buffer(buffer))?;
        }
        // Under an arbiter the commit is a gated memory operation on the gated worker, admitted for its measured
        // cost: it is queued below once the transfer is, and the transfer waits for it (`prelude`), so this thread
        // never waits for a grant, and a transfer that cannot be queued leaves no commit to undo.
        let mm = pool.mm_lane();
        let prelude = mm.as_ref().map(|_| Arc::new(Prelude::default()));
        // Without one, a large page-in from a tier that prefers it is started on the starter thread: commit, then
        // queue the read.
        let starter =
            (prelude.is_none() && charge_bytes >= DEFERRED_COMMIT_BYTES && copy.deferred_start())
                .then(|| pool.starter())
                .flatten();
        let undo = |err: PagerError| {
            match &prelude {
                // Nothing was committed.
                Some(_) => {
                    if newly_charged {
                        shared.refund(charge_bytes);
                    }
                }
                None => {
                    // SAFETY: the read was not submitted, so nothing uses the memory just committed.
                    if unsafe { pool.device.decommit(&e.reservation) }.is_ok() && newly_charged {
                        shared.refund(charge_bytes);
                    }
                }
            }
            err
        };
        if prelude.is_none() && starter.is_none() {
            pool.device
                .commit(&e.reservation)
                .map_err(|x| undo(x.into()))?;
        }
        let op = Arc::new(OpState::default());
        let settle = Settle::new(
            Arc::clone(&pool.device),
            Completion::new(&op),
            e.reservation,
            mm.clone(),
            prelude.clone(),
        );
        // SAFETY (each start below): the buffer is PagingIn (set below under this lock) until its ticket's finish has
        // waited for the completion, which only `settle` gives, and nothing else touches the memory meanwhile; the
        // memory is committed here, or the transfer waits for its commit (`prelude`), or the starter commits first.
        match starter {
            Some(starter) => {
                let read = DeferredRead {
                    copy: copy.share(),
                    reservation: e.reservation,
                    io_bytes: e.io_bytes,
                    size_bytes: e.size_bytes,
                };
                // SAFETY: see above.
                unsafe { read.start_on(starter, pool, settle) }
            }
            None => {
                let read = TierIo {
                    direction: Direction::Read,
                    range: &e.reservation,
                    io_bytes: e.io_bytes,
                    size_bytes: e.size_bytes,
                    after: prelude.clone(),
                    on_done: settle_when_read(&settle),
                };
                // SAFETY: see above.
                unsafe { copy.submit(read) }.map_err(undo)?;
            }
        }
        if let (Some(mm), Some(prelude)) = (&mm, &prelude) {
            // The transfer is queued and waits for this.
            mm.commit(e.reservation, prelude);
        }
        *phase = Phase::PagingIn(Arc::clone(&op));
        e.charged = true;
        e.last_use = shared.usage.tick();
        tracing::debug!(%buffer, "page-in started");
        Ok(Ticket {
            space: Arc::clone(shared),
            buffer,
            kind: OpKind::PageIn,
            op,
            finished: false,
        })
    }

    /// Completes an operation started by this space (same as [`Ticket::finish`]).
    pub fn finish(&self, ticket: Ticket) -> Result<(), PagerError> {
        if ticket.space.id != self.shared.id || !Arc::ptr_eq(&ticket.space, &self.shared) {
            return Err(PagerError::WrongAddressSpace(ticket.buffer));
        }
        ticket.finish()
    }

    /// Starts a page-out of every resident pageable buffer. Buffers that other threads free or page meanwhile are
    /// skipped. If one cannot start (full store, I/O error), those already started are finished and the error is
    /// returned.
    pub fn page_out_all_async(&self) -> Result<Vec<Ticket>, PagerError> {
        self.start_all(BufferState::Resident, |b| self.page_out_async(b))
    }

    /// Starts a page-in of every paged-out buffer, as [`page_out_all_async`](Self::page_out_all_async).
    pub fn page_in_all_async(&self) -> Result<Vec<Ticket>, PagerError> {
        self.start_all(BufferState::PagedOut, |b| self.page_in_async(b))
    }

    /// Pages out every resident pageable buffer and waits; unpageable buffers stay.
    pub fn page_out_all(&self) -> Result<(), PagerError> {
        finish_all(self.page_out_all_async()?)
    }

    /// Pages in every paged-out buffer and waits.
    pub fn page_in_all(&self) -> Result<(), PagerError> {
        finish_all(self.page_in_all_async()?)
    }

    pub(super) fn start_all(
        &self,
        from: BufferState,
        start: impl Fn(Buffer) -> Result<Ticket, PagerError>,
    ) -> Result<Vec<Ticket>, PagerError> {
        let targets: Vec<Buffer> = {
            let st = lock(&self.shared.state);
            st.buffers
                .iter()
                .filter(|(_, e)| e.state.public() == from && !e.flags.unpageable && !e.free_pending)
                .map(|(&index, _)| Buffer {
                    space: self.shared.id,
                    index,
                })
                .collect()
        };
        let mut tickets = Vec::with_capacity(targets.len());
        for buffer in targets {
            match start(buffer) {
                Ok(t) => tickets.push(t),
                // Another thread freed or paged this buffer since the list was taken: not ours to do any more.
                Err(
                    PagerError::UnknownBuffer(_)
                    | PagerError::AlreadyPagedOut(_)
                    | PagerError::AlreadyResident(_)
                    | PagerError::OperationInFlight { .. },
                ) => {}
                Err(e) => {
                    let _ = finish_all(tickets);
                    return Err(e);
                }
            }
        }
        Ok(tickets)
    }
}

impl SpaceShared {
    /// Settles a buffer after its I/O side is done.
    pub(super) fn finish(
        &self,
        buffer: Buffer,
        kind: OpKind,
        op: &Arc<OpState>,
    ) -> Result<(), PagerError> {
        // In a forked child the operation's I/O threads are gone: its completion never comes.
        self.pool.check_fork()?;
        let outcome = op.wait();
        let pool = &self.pool;
        let mut st = lock(&self.state);
        let e = self
            .any_entry_mut(&mut st, buffer)
            .ok_or(PagerError::UnknownBuffer(buffer))?;
        // The copy moves into the state each outcome below builds (the placeholder never outlives this call).
        let (copy, kept) = match std::mem::replace(&mut e.state, State::Resident(None)) {
            State::Stored {
                copy,
                phase: Phase::PagingOut { op: current, kept },
            } if Arc::ptr_eq(&current, op) => (copy, kept),
            State::Stored {
                copy,
                phase: Phase::PagingIn(current),
            } if Arc::ptr_eq(&current, op) => (copy, true), // a page-in reads a current copy
            other => {
                e.state = other;
                return Err(PagerError::Internal(
                    "ticket does not match the buffer's operation",
                ));
            }
        };
        let bytes = e.reservation.len as u64;
        let uncharge = |e: &mut Entry| {
            if e.charged {
                self.refund(bytes);
                e.charged = false;
            }
        };
        let result = match (kind, outcome) {
            (OpKind::PageOut, Ok(())) => {
                e.state = State::paged_out(copy);
                uncharge(e);
                Ok(())
            }
            (
                OpKind::PageOut,
                Err(Failed {
                    cause: OpFailure::Release(err),
                    ..
                }),
            ) => {
                // The bytes are safely stored, so the buffer counts as out; its memory may not be released, so it
                // stays charged until a page-in (which commits the range again) or free.
                e.state = State::paged_out(copy);
                Err(err.into())
            }
            (OpKind::PageOut, Err(failed)) => {
                // The memory was never released, so the buffer is intact where it was; a new copy goes back.
                e.state = State::Resident(if kept {
                    Some(copy)
                } else {
                    copy.release();
                    None
                });
                Err(failure_to_error(buffer, failed.cause))
            }
            (OpKind::PageIn, Ok(())) => {
                e.state = State::Resident(if e.flags.read_only {
                    Some(copy)
                } else {
                    // The bytes may change from now on, so the stored copy is stale: free its space.
                    copy.release();
                    None
                });
                Ok(())
            }
            (OpKind::PageIn, Err(failed)) => {
                // The stored copy is untouched; the memory was given back by the completion unless that failed or
                // never ran to its end: then, without an arbiter, try once more here, so that a lost completion
                // leaks nothing. Under an arbiter a decommit here would run outside any grant (and wait for one
                // under the space's lock), so the buffer stays charged instead, as after a failed release at
                // page-out: its next page-in commits the range again, and free releases it.
                e.state = State::paged_out(copy);
                let retry_release = || {
                    // SAFETY: the operation is over (its outcome is in) and the buffer is not resident, so nothing
                    // of ours uses the memory.
                    pool.gated.is_none() && unsafe { pool.device.decommit(&e.reservation) }.is_ok()
                };
                if failed.memory_released || retry_release() {
                    uncharge(e);
                }
                Err(failure_to_error(buffer, failed.cause))
            }
        };
        tracing::debug!(%buffer, ?kind, ok = result.is_ok(), "finished");
        let freed = self.take_if_freed(&mut st, buffer);
        drop(st);
        if let Some(entry) = freed {
            self.release_logged(buffer, entry);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// A deferred page-in's outcome waits while the starter job holds the copy, so `finish` (woken by the settle)
    /// never finds the copy still shared; it settles when the job lets go, whichever comes first.
    #[test]
    fn a_held_settle_waits_for_the_job_to_let_go() {
        let device: Arc<dyn DeviceMemory> = Arc::new(oversub_accel::HostMemory::default());
        let reservation = device.reserve(4096).unwrap();
        for outcome_first in [true, false] {
            let op = Arc::new(OpState::default());
            let settle = Settle::new(
                Arc::clone(&device),
                Completion::new(&op),
                reservation,
                None,
                None,
            );
            settle.hold();
            if outcome_first {
                settle.run(Ok(()));
                assert!(!op.is_complete(), "settled while the job held the copy");
                settle.let_go();
            } else {
                settle.let_go();
                assert!(!op.is_complete());
                settle.run(Ok(()));
            }
            assert!(op.is_complete());
            assert!(op.wait().is_ok());
        }
        // SAFETY: nothing uses the range.
        unsafe { device.unreserve(reservation) }.unwrap();
    }
}
