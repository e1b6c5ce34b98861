//! What an address space's handles share: its table of entries under one lock, its charged bytes and quota, and the
//! bookkeeping that looks entries up, charges them and releases them.

use super::*;

#[derive(Debug)]
pub(crate) struct SpaceShared {
    pub(super) id: u32,
    pub(super) pool: Arc<PoolShared>,
    pub(super) state: Mutex<SpaceState>,
    /// Signalled when an access ends (a buffer stops being `busy`).
    pub(super) idle: Condvar,
    /// Bytes of device memory this space's buffers are charged for, and the most it may hold: its resident quota
    /// when it is a tenant the planner made a victim, otherwise unlimited.
    pub(crate) usage: Arc<SpaceUsage>,
    /// Set for spaces made by [`crate::Pool::tenant_space`]: they leave the tenant plan when dropped.
    pub(crate) tenant: bool,
}

/// A space's charged bytes and its limit, shared with the pool's tenant registry.
#[derive(Debug)]
pub(crate) struct SpaceUsage {
    pub(crate) charged_bytes: std::sync::atomic::AtomicU64,
    pub(crate) limit_bytes: std::sync::atomic::AtomicU64,
    /// A clock of accesses, for choosing which buffers a shrinking quota pages out first.
    pub(crate) clock: std::sync::atomic::AtomicU64,
    /// The priority of this space's store transfers (larger first, on a store with priority I/O): 0, or minus the
    /// tenant's rank. Every slot of the space reads it at each submission, so a new plan applies at once.
    pub(crate) io_priority: Arc<std::sync::atomic::AtomicI64>,
}

impl SpaceUsage {
    /// The next value of the access clock.
    pub(super) fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }
}

impl Default for SpaceUsage {
    fn default() -> Self {
        SpaceUsage {
            charged_bytes: std::sync::atomic::AtomicU64::new(0),
            limit_bytes: std::sync::atomic::AtomicU64::new(u64::MAX),
            clock: std::sync::atomic::AtomicU64::new(0),
            io_priority: Arc::new(std::sync::atomic::AtomicI64::new(0)),
        }
    }
}

impl SpaceShared {
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Takes `bytes` of this space's quota and of the pool's capacity, or neither.
    pub(super) fn charge(&self, bytes: u64) -> Result<(), PagerError> {
        let usage = &self.usage;
        let limit = usage.limit_bytes.load(Ordering::Acquire);
        usage
            .charged_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= limit)
            })
            .map_err(|used| PagerError::QuotaExceeded {
                space: self.id,
                buffer: None,
                needed_bytes: bytes,
                charged_bytes: used,
                limit_bytes: limit,
            })?;
        if let Err(e) = self.pool.charge(bytes) {
            Self::release_usage(usage, bytes);
            return Err(e);
        }
        Ok(())
    }

    /// Gives `bytes` back to this space's quota and to the pool.
    pub(super) fn refund(&self, bytes: u64) {
        Self::release_usage(&self.usage, bytes);
        self.pool.refund(bytes);
    }

    pub(super) fn release_usage(usage: &SpaceUsage, bytes: u64) {
        let _ = usage
            .charged_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Adds an entry under a fresh handle.
    pub(super) fn insert(&self, mut entry: Entry) -> Buffer {
        entry.last_use = self.usage.tick();
        let mut st = lock(&self.state);
        let index = st.next_index;
        st.next_index += 1;
        st.buffers.insert(index, entry);
        Buffer {
            space: self.id,
            index,
        }
    }

    /// Resident buffers a shrinking quota may page out, least recently used first, with their charged bytes.
    pub(crate) fn eviction_candidates(&self) -> Vec<(Buffer, u64)> {
        let st = lock(&self.state);
        let mut found: Vec<(u64, Buffer, u64)> = st
            .buffers
            .iter()
            .filter(|(_, e)| {
                // A resident buffer has no operation in flight.
                matches!(e.state, State::Resident(_))
                    && !e.flags.unpageable
                    && !e.busy
                    && !e.free_pending
            })
            .map(|(&index, e)| {
                (
                    e.last_use,
                    Buffer {
                        space: self.id,
                        index,
                    },
                    e.reservation.len as u64,
                )
            })
            .collect();
        found.sort_unstable_by_key(|(last_use, ..)| *last_use);
        found.into_iter().map(|(_, b, bytes)| (b, bytes)).collect()
    }

    /// The live entry of `buffer`: one freed while in use is unknown to callers.
    pub(super) fn entry_mut<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
    ) -> Result<&'a mut Entry, PagerError> {
        self.any_entry_mut(st, buffer)
            .filter(|e| !e.free_pending)
            .ok_or(PagerError::UnknownBuffer(buffer))
    }

    /// The entry of `buffer`, freed or not (for settling its operation or access).
    pub(super) fn any_entry_mut<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
    ) -> Option<&'a mut Entry> {
        if buffer.space != self.id {
            return None;
        }
        st.buffers.get_mut(&buffer.index)
    }

    /// The space's lock, once no copy or direct store transfer (an [`AccessGuard`](super::access::AccessGuard)) is
    /// using `buffer`.
    pub(super) fn lock_idle(
        &self,
        buffer: Buffer,
    ) -> Result<MutexGuard<'_, SpaceState>, PagerError> {
        let mut st = lock(&self.state);
        while self.entry_mut(&mut st, buffer)?.busy {
            st = self
                .idle
                .wait(st)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        Ok(st)
    }

    /// Removes a freed entry whose last user is done; the caller releases it outside the lock.
    pub(super) fn take_if_freed(&self, st: &mut SpaceState, buffer: Buffer) -> Option<Entry> {
        let e = self.any_entry_mut(st, buffer)?;
        if e.free_pending && !e.state.in_flight() && !e.busy {
            st.buffers.remove(&buffer.index)
        } else {
            None
        }
    }

    pub(super) fn release_logged(&self, buffer: Buffer, entry: Entry) {
        tracing::debug!(%buffer, "releasing a buffer freed while in use");
        if let Err(err) = self.release_entry(entry) {
            tracing::warn!(%buffer, "releasing a buffer freed while in use: {err}");
        }
    }

    /// The entry, if `offset..offset + len` lies inside it (in any state); counts as a use.
    pub(super) fn in_bounds<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
        offset: u64,
        len: u64,
    ) -> Result<&'a mut Entry, PagerError> {
        let e = self.entry_mut(st, buffer)?;
        if offset.checked_add(len).is_none_or(|end| end > e.size_bytes) {
            return Err(PagerError::OutOfBounds {
                buffer,
                offset,
                len,
                size: e.size_bytes,
            });
        }
        e.last_use = self.usage.tick();
        Ok(e)
    }

    pub(super) fn accessible<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
        offset: u64,
        len: u64,
    ) -> Result<&'a mut Entry, PagerError> {
        let e = self.entry_mut(st, buffer)?;
        e.last_use = self.usage.tick();
        if !matches!(e.state, State::Resident(_)) {
            return Err(PagerError::NotResident {
                buffer,
                state: e.state.public(),
            });
        }
        if offset.checked_add(len).is_none_or(|end| end > e.size_bytes) {
            return Err(PagerError::OutOfBounds {
                buffer,
                offset,
                len,
                size: e.size_bytes,
            });
        }
        Ok(e)
    }

    /// `slot`, which already holds a buffer's bytes, as a copy of the pool's tier of store slots, with an address
    /// range of `reserve_len` bytes for its buffer; on failure neither is kept (the slot goes back to the store).
    pub(super) fn adopt_reserved(
        &self,
        slot: oversub_io::Slot,
        reserve_len: usize,
    ) -> Result<(StoredCopy, Reservation), PagerError> {
        let copy = self.pool.tiers.adopt(slot).map_err(|slot| {
            self.pool.store.release(slot);
            PagerError::Internal("no tier of the pool keeps store slots")
        })?;
        match self.pool.device.reserve(reserve_len) {
            Ok(reservation) => Ok((copy, reservation)),
            Err(e) => {
                copy.release();
                Err(e.into())
            }
        }
    }

    /// Gives back everything an entry holds.
    pub(super) fn release_entry(&self, mut e: Entry) -> Result<(), PagerError> {
        // Queued work recorded as using the memory finishes before it goes (unrecorded work is the caller's).
        if let Err(err) = self.wait_fences(std::mem::take(&mut e.stream_uses)) {
            tracing::warn!("waiting for a freed buffer's recorded uses: {err}");
        }
        if let Some(copy) = e.state.into_copy() {
            copy.release();
        }
        if e.charged {
            self.refund(e.reservation.len as u64);
        }
        // SAFETY: the entry is out of the table with no operation in flight, so nothing of ours uses the range.
        unsafe { self.pool.device.unreserve(e.reservation) }?;
        Ok(())
    }
}

impl Drop for SpaceShared {
    fn drop(&mut self) {
        if self.pool.forked() {
            // A forked child: the buffers' store slots and host-tier copies are the parent's, and the tenant
            // registry's lock may have been held by a thread that did not survive the fork. Leak the table; the
            // child's copy of the memory goes when it exits.
            std::mem::forget(std::mem::take(
                self.state.get_mut().unwrap_or_else(|p| p.into_inner()),
            ));
            return;
        }
        if self.tenant {
            self.pool.tenant_left(self.id);
        }
        // Tickets hold the space alive, so no operation is in flight here: every buffer can be released.
        let st = std::mem::take(self.state.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (_, e) in st.buffers {
            if let Err(err) = self.release_entry(e) {
                tracing::warn!(space = self.id, "releasing a buffer at drop: {err}");
            }
        }
    }
}
