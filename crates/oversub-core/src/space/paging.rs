//! Paging: starting page-outs and page-ins on the pool's transfer paths, and settling a buffer when its ticket
//! finishes.

use std::sync::atomic::AtomicI64;

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

/// A page-out's start, one way per place its copy can go: each queues the work and gives the copy the buffer's
/// state keeps; the completion (`done`) releases the memory once the bytes are safe, then settles.
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

    /// Copies the buffer into `room` in the host tier; on failure the room goes back.
    ///
    /// # Safety
    /// The memory stays committed and unchanged until the completion has run.
    unsafe fn into_host_tier(self, room: HostCopy) -> Result<StoredCopy, PagerError> {
        let on_done = release_when_copied(
            Arc::clone(&self.pool.device),
            self.mm,
            self.done,
            self.reservation,
        );
        // SAFETY: forwarded from our caller; the tier's room is the entry's alone.
        let submitted = unsafe {
            room.submit(
                Direction::Write,
                &self.reservation,
                self.io_bytes,
                None,
                on_done,
            )
        };
        match submitted {
            Ok(()) => Ok(StoredCopy::Host(room)),
            Err(err) => {
                room.release();
                Err(err)
            }
        }
    }

    /// Writes the buffer to a new store slot: checksummed where the pool hashes and the host can address the
    /// memory (the release then waits for the last piece's hash too), else on the store path. On failure the slot
    /// goes back.
    ///
    /// # Safety
    /// The memory stays committed and unchanged until the completion has run.
    unsafe fn into_store(self, priority: &Arc<AtomicI64>) -> Result<StoredCopy, PagerError> {
        let pool = self.pool;
        let mut slot = pool.store.allocate(self.io_bytes)?;
        slot.set_priority(Arc::clone(priority));
        // Checksums are taken where the host can read the buffer (not through the staging path).
        let hashed = pool.checksummed.as_ref().and_then(|sums| {
            pool.device
                .host_ptr(&self.reservation)
                .map(|ptr| (sums, SendPtr(ptr)))
        });
        let submitted = match hashed {
            Some((sums, ptr)) => {
                let (device, mm, done, reservation) = (
                    Arc::clone(&pool.device),
                    self.mm,
                    self.done,
                    self.reservation,
                );
                // Runs where the last piece ends (the I/O side or a checksum thread); under an arbiter the decommit
                // is queued to the gated worker from there.
                let finish: PiecesDone = Box::new(move |hashed| match hashed {
                    Ok(sums) => {
                        *lock(&done.op.checksum) = Some(sums);
                        // SAFETY: every piece is written and the buffer is PagingOut: nothing uses it.
                        unsafe {
                            release_then(mm.as_ref(), device.as_ref(), reservation, move |r| {
                                done.complete(
                                    r.map_err(|e| Failed::kept_memory(OpFailure::Release(e))),
                                )
                            })
                        }
                    }
                    Err(cause) => done.complete(Err(Failed::kept_memory(cause))),
                });
                // SAFETY: forwarded from our caller.
                unsafe {
                    submit_hashed(
                        sums,
                        Direction::Write,
                        &slot,
                        ptr,
                        self.io_bytes,
                        self.size_bytes,
                        None,
                        None,
                        finish,
                    )
                }
            }
            None => {
                let on_done = release_when_copied(
                    Arc::clone(&pool.device),
                    self.mm,
                    self.done,
                    self.reservation,
                );
                // SAFETY: forwarded from our caller.
                unsafe {
                    pool.store_path.submit(Transfer {
                        direction: Direction::Write,
                        range: &self.reservation,
                        copy: &slot,
                        io_bytes: self.io_bytes,
                        after: None,
                        on_done,
                    })
                }
            }
        };
        match submitted {
            Ok(()) => Ok(StoredCopy::store(slot)),
            Err(err) => {
                pool.store.release(slot);
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
pub(super) struct Settle(Mutex<Option<SettleFn>>);

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
        Arc::new(Settle(Mutex::new(Some(Box::new(run)))))
    }

    /// Settles with `outcome`; only the first call does anything.
    pub(super) fn run(&self, outcome: Result<(), OpFailure>) {
        let run = lock(&self.0).take();
        if let Some(run) = run {
            run(outcome);
        }
    }
}

/// A page-in's read from its store slot, owning what it needs so that it can be queued from another thread.
struct StoreRead {
    slot: Arc<Slot>,
    /// The copy's checksum, when one was taken.
    expected: Option<Checksums>,
    reservation: Reservation,
    io_bytes: u64,
    size_bytes: u64,
}

impl StoreRead {
    /// Commits the buffer's memory, then queues the read, both on the pool's starter thread; a failure of either
    /// settles the page-in (and its ticket reports it).
    ///
    /// # Safety
    /// As [`submit`](Self::submit) once the commit succeeded: nothing else uses the range, and the slot stays
    /// allocated, until `settle` has run.
    unsafe fn start_on(
        self,
        starter: &Workers,
        pool: &Arc<PoolShared>,
        op: &Arc<OpState>,
        settle: Arc<Settle>,
    ) {
        let pool = Arc::clone(pool);
        let op = Arc::clone(op);
        starter.run(Box::new(move || {
            let started = pool
                .device
                .commit(&self.reservation)
                .map_err(OpFailure::Commit)
                .and_then(|()| {
                    // SAFETY: the range is committed now; the rest is our caller's promise.
                    unsafe { self.submit(&pool, None, &op, &settle) }.map_err(OpFailure::Start)
                });
            if let Err(cause) = started {
                settle.run(Err(cause));
            }
        }));
    }

    /// Queues the read: checksummed where the pool hashes and the host can address the memory, else on the store
    /// path; `settle` runs with its outcome. `Err` means nothing was queued (then `settle` is not run).
    ///
    /// # Safety
    /// As [`TransferPath::submit`](crate::transfer::TransferPath::submit): the range is committed (with `after`:
    /// once that commit succeeded) and nothing else uses it, and the slot stays allocated, until `settle` has run.
    unsafe fn submit(
        &self,
        pool: &PoolShared,
        after: Option<Arc<Prelude>>,
        op: &Arc<OpState>,
        settle: &Arc<Settle>,
    ) -> Result<(), PagerError> {
        let hashed = pool.checksummed.as_ref().and_then(|sums| {
            pool.device
                .host_ptr(&self.reservation)
                .map(|ptr| (sums, SendPtr(ptr)))
        });
        let settle = Arc::clone(settle);
        match hashed {
            Some((sums, ptr)) => {
                // A copy without a checksum (an external file's range, a slot born zeroed) gets one from its first
                // read, kept with the copy: a later page-in of a file rewritten behind the pool's back (even with
                // its modification time put back) is then a mismatch.
                let first_read = self.expected.is_none().then(|| Arc::clone(op));
                let finish: PiecesDone = Box::new(move |r| {
                    if let (Some(op), Ok(sums)) = (&first_read, &r) {
                        *lock(&op.checksum) = Some(Arc::clone(sums));
                    }
                    settle.run(r.map(|_| ()))
                });
                // SAFETY: forwarded from our caller.
                unsafe {
                    submit_hashed(
                        sums,
                        Direction::Read,
                        &self.slot,
                        ptr,
                        self.io_bytes,
                        self.size_bytes,
                        self.expected.clone(),
                        after,
                        finish,
                    )
                }
            }
            None => {
                let on_done: TransferCallback =
                    Box::new(move |r| settle.run(r.map_err(OpFailure::from)));
                // SAFETY: forwarded from our caller.
                unsafe {
                    pool.store_path.submit(Transfer {
                        direction: Direction::Read,
                        range: &self.reservation,
                        copy: &*self.slot,
                        io_bytes: self.io_bytes,
                        after,
                        on_done,
                    })
                }
            }
        }
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
            None => match pool.host_tier.as_ref().and_then(|t| t.allocate(e.io_bytes)) {
                // SAFETY: see above.
                Some(room) => (unsafe { out.into_host_tier(room) }?, false),
                // SAFETY: see above.
                None => (unsafe { out.into_store(&shared.usage.io_priority) }?, false),
            },
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
        // Without one, a large page-in from the store is started on the starter thread: commit, then queue the read.
        let starter = match copy {
            StoredCopy::Store { .. }
                if prelude.is_none() && charge_bytes >= DEFERRED_COMMIT_BYTES =>
            {
                pool.starter()
            }
            _ => None,
        };
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
        match (copy, starter) {
            (StoredCopy::Host(copy), _) => {
                let settle = Arc::clone(&settle);
                let on_done: TransferCallback =
                    Box::new(move |r| settle.run(r.map_err(OpFailure::from)));
                // SAFETY: see above.
                unsafe {
                    copy.submit(
                        Direction::Read,
                        &e.reservation,
                        e.io_bytes,
                        prelude.clone(),
                        on_done,
                    )
                }
                .map_err(undo)?;
            }
            (StoredCopy::Store { slot, checksum }, starter) => {
                let read = StoreRead {
                    slot: Arc::clone(slot),
                    expected: checksum.clone(),
                    reservation: e.reservation,
                    io_bytes: e.io_bytes,
                    size_bytes: e.size_bytes,
                };
                match starter {
                    // SAFETY: see above.
                    Some(starter) => unsafe { read.start_on(starter, pool, &op, settle) },
                    None => {
                        // SAFETY: see above.
                        unsafe { read.submit(pool, prelude.clone(), &op, &settle) }.map_err(undo)?
                    }
                }
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
        let (mut copy, kept) = match std::mem::replace(&mut e.state, State::Resident(None)) {
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
                keep_checksum(&mut copy, op);
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
                keep_checksum(&mut copy, op);
                e.state = State::paged_out(copy);
                Err(err.into())
            }
            (OpKind::PageOut, Err(failed)) => {
                // The memory was never released, so the buffer is intact where it was; a new copy goes back.
                e.state = State::Resident(if kept {
                    Some(copy)
                } else {
                    self.release_copy(copy);
                    None
                });
                Err(failure_to_error(buffer, failed.cause))
            }
            (OpKind::PageIn, Ok(())) => {
                e.state = State::Resident(if e.flags.read_only {
                    keep_checksum(&mut copy, op);
                    Some(copy)
                } else {
                    // The bytes may change from now on, so the stored copy is stale: free its space.
                    self.release_copy(copy);
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
