//! Access to a buffer's bytes: copies to and from resident memory, and direct reads and writes of the stored copy
//! of a buffer that is not resident (through an aligned bounce buffer), each under an `AccessGuard`.

use super::*;

/// The most bytes one direct store transfer moves (and the size of its bounce buffer).
pub(super) const DIRECT_PIECE_BYTES: usize = 8 << 20;

impl AddressSpace {
    /// Bytes of the buffer physically in memory now, where the backend can tell.
    pub fn resident_bytes(&self, buffer: Buffer) -> Result<Option<u64>, PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self.shared.entry_mut(&mut st, buffer)?;
        Ok(self.shared.pool.device.resident_bytes(&e.reservation)?)
    }

    /// Copies `data` into a resident buffer at `offset`.
    pub fn write(&self, buffer: Buffer, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let (dst, _access) = {
            let mut st = self.shared.lock_idle(buffer)?;
            let e = self
                .shared
                .accessible(&mut st, buffer, offset, data.len() as u64)?;
            if e.flags.read_only && e.state.stored() {
                return Err(PagerError::ReadOnly(buffer));
            }
            let dst = e.reservation.addr.offset(offset);
            (dst, self.shared.begin_access(e, buffer))
        };
        let device = &self.shared.pool.device;
        self.shared
            .pool
            .copy_chunked(data.len(), WorkKind::Copy, |off, n| {
                // SAFETY: the span was checked to lie inside the buffer, which is resident (committed); the access guard
                // keeps paging calls on it waiting until the copy is done.
                unsafe { device.copy_from_host(dst.offset(off as u64), &data[off..off + n]) }
            })?;
        Ok(())
    }

    /// Copies bytes of a resident buffer from `offset` into `out`.
    pub fn read(&self, buffer: Buffer, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let (src, _access) = {
            let mut st = self.shared.lock_idle(buffer)?;
            let e = self
                .shared
                .accessible(&mut st, buffer, offset, out.len() as u64)?;
            let src = e.reservation.addr.offset(offset);
            (src, self.shared.begin_access(e, buffer))
        };
        let device = &self.shared.pool.device;
        self.shared
            .pool
            .copy_chunked(out.len(), WorkKind::Copy, |off, n| {
                // SAFETY: as in `write`.
                unsafe { device.copy_to_host(src.offset(off as u64), &mut out[off..off + n]) }
            })?;
        Ok(())
    }

    /// Copies bytes of a buffer from `offset` into `out` without making it resident: from memory when it is
    /// resident, otherwise straight from its copy on the store (rounded out to the store's alignment and trimmed).
    /// This is how a victim tenant reads the part of its data the planner keeps on the store.
    pub fn read_direct(
        &self,
        buffer: Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let mut st = self.shared.lock_idle(buffer)?;
        let e = self
            .shared
            .in_bounds(&mut st, buffer, offset, out.len() as u64)?;
        let public = e.state.public();
        match &mut e.state {
            State::Resident(_) => {
                let src = e.reservation.addr.offset(offset);
                let _access = self.shared.begin_access(e, buffer);
                drop(st);
                let device = &self.shared.pool.device;
                self.shared
                    .pool
                    .copy_chunked(out.len(), WorkKind::Copy, |off, n| {
                        // SAFETY: as in `read`.
                        unsafe {
                            device.copy_to_host(src.offset(off as u64), &mut out[off..off + n])
                        }
                    })?;
                Ok(())
            }
            State::Stored {
                copy,
                phase: Phase::PagedOut,
            } => match copy {
                StoredCopy::Host(copy) => {
                    // A memory copy: quick enough to do under the lock.
                    copy.read(offset, out);
                    Ok(())
                }
                StoredCopy::Store { slot, .. } => {
                    let slot = Arc::clone(slot);
                    let access = self.shared.begin_store_access(e, buffer, slot);
                    drop(st);
                    access.store_range(offset, StoreAccess::Read(out))
                }
            },
            State::Stored { .. } => Err(PagerError::OperationInFlight {
                buffer,
                state: public,
            }),
        }
    }

    /// Copies `data` into a buffer at `offset` without making it resident: into memory when it is resident,
    /// otherwise straight into its copy on the store (partial blocks at either end are read, patched and written
    /// back). The counterpart of [`read_direct`](Self::read_direct).
    pub fn write_direct(&self, buffer: Buffer, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let mut st = self.shared.lock_idle(buffer)?;
        let e = self
            .shared
            .in_bounds(&mut st, buffer, offset, data.len() as u64)?;
        if e.flags.read_only && e.state.stored() {
            return Err(PagerError::ReadOnly(buffer));
        }
        let public = e.state.public();
        match &mut e.state {
            State::Resident(_) => {
                let dst = e.reservation.addr.offset(offset);
                let _access = self.shared.begin_access(e, buffer);
                drop(st);
                let device = &self.shared.pool.device;
                self.shared
                    .pool
                    .copy_chunked(data.len(), WorkKind::Copy, |off, n| {
                        // SAFETY: as in `write`.
                        unsafe {
                            device.copy_from_host(dst.offset(off as u64), &data[off..off + n])
                        }
                    })?;
                Ok(())
            }
            State::Stored {
                copy,
                phase: Phase::PagedOut,
            } => match copy {
                StoredCopy::Host(copy) => {
                    copy.write(offset, data);
                    Ok(())
                }
                StoredCopy::Store { slot, checksum } => {
                    // The checksum taken at page-out no longer describes the stored bytes (even if this write
                    // fails half-way, so it is dropped first).
                    *checksum = None;
                    let slot = Arc::clone(slot);
                    let access = self.shared.begin_store_access(e, buffer, slot);
                    drop(st);
                    access.store_range(offset, StoreAccess::Write(data))
                }
            },
            State::Stored { .. } => Err(PagerError::OperationInFlight {
                buffer,
                state: public,
            }),
        }
    }

    /// The host address of a resident buffer, for backends whose memory the host can address (the host backend).
    /// The pointer is valid for `size_bytes` while the buffer stays resident; accessing it after a page-out faults.
    pub fn host_ptr(&self, buffer: Buffer) -> Result<*mut u8, PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self.shared.accessible(&mut st, buffer, 0, 0)?;
        self.shared
            .pool
            .device
            .host_ptr(&e.reservation)
            .ok_or(PagerError::Unsupported(
                "device memory is not host-addressable".into(),
            ))
    }
}

/// The two directions of a direct store access, with the caller's bytes.
pub(super) enum StoreAccess<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

impl StoreAccess<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            StoreAccess::Read(b) => b.len(),
            StoreAccess::Write(b) => b.len(),
        }
    }
}

impl SpaceShared {
    /// Writes zeros over a new slot, so a buffer allocated on the store reads back as zeros like one in memory.
    pub(super) fn zero_slot(&self, slot: &Slot) -> Result<(), PagerError> {
        let store = &self.pool.store;
        let piece = DIRECT_PIECE_BYTES.min(slot.len() as usize);
        let mut zeros = oversub_io::AlignedBuf::new(piece, store.alignment())
            .map_err(oversub_io::IoError::from)?;
        let mut offset = 0u64;
        while offset < slot.len() {
            let n = (slot.len() - offset).min(piece as u64);
            let view = slot.view(offset, n)?;
            let mem = IoVec {
                ptr: zeros.iovec().ptr,
                len: n as usize,
            };
            // SAFETY: `zeros` outlives the blocking transfer and is only read by it.
            unsafe { store.transfer_view(Direction::Write, &view, &[mem]) }?;
            offset += n;
        }
        Ok(())
    }

    /// Marks `e` busy for a copy that runs after the space lock is dropped. The entry must not be busy (callers
    /// hold the guard of [`lock_idle`](Self::lock_idle)).
    pub(super) fn begin_access(&self, e: &mut Entry, buffer: Buffer) -> AccessGuard<'_> {
        e.busy = true;
        AccessGuard {
            space: self,
            buffer,
        }
    }

    /// As [`begin_access`](Self::begin_access), for a direct store transfer on `slot`, the paged-out entry's own
    /// (shared: the entry keeps it).
    pub(super) fn begin_store_access(
        &self,
        e: &mut Entry,
        buffer: Buffer,
        slot: Arc<Slot>,
    ) -> StoreAccessGuard<'_> {
        StoreAccessGuard {
            slot,
            access: self.begin_access(e, buffer),
        }
    }

    /// Reads or writes `offset..` of a slot through an aligned bounce buffer, in pieces of at most
    /// [`DIRECT_PIECE_BYTES`] (and, under an arbiter, in admitted chunks).
    pub(super) fn store_range(
        &self,
        slot: &Slot,
        offset: u64,
        mut access: StoreAccess<'_>,
    ) -> Result<(), PagerError> {
        let len = access.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let store = &self.pool.store;
        let align = store.alignment() as u64;
        let start = offset / align * align;
        let end = round_up(offset + len, align)
            .ok_or_else(|| PagerError::InvalidSize(format!("range {offset}+{len} overflows")))?
            .min(slot.len());
        let user_ptr = match &access {
            StoreAccess::Read(out) => out.as_ptr() as usize,
            StoreAccess::Write(data) => data.as_ptr() as usize,
        };
        if offset % align == 0 && len % align == 0 && user_ptr % store.alignment() == 0 {
            // Aligned on both sides: straight between the caller's memory and the store, no bounce buffer.
            return self
                .pool
                .copy_chunked(len as usize, WorkKind::Transfer, |off, n| {
                    let mut pos = 0usize;
                    while pos < n {
                        let piece = (n - pos).min(DIRECT_PIECE_BYTES);
                        let at = off + pos;
                        let view = slot.view(offset + at as u64, piece as u64)?;
                        let (direction, ptr) = match &mut access {
                            StoreAccess::Read(out) => (Direction::Read, out[at..].as_mut_ptr()),
                            // The engine only reads the memory of a write.
                            StoreAccess::Write(data) => {
                                (Direction::Write, data[at..].as_ptr().cast_mut())
                            }
                        };
                        let mem = IoVec { ptr, len: piece };
                        // SAFETY: `mem` lies inside the caller's slice, which this blocking transfer borrows for its
                        // whole duration (mutably for a read).
                        unsafe { store.transfer_view(direction, &view, &[mem]) }?;
                        pos += piece;
                    }
                    Ok::<(), PagerError>(())
                });
        }
        let piece_cap = DIRECT_PIECE_BYTES.min((end - start) as usize);
        let mut bounce = oversub_io::AlignedBuf::new(piece_cap, store.alignment())
            .map_err(oversub_io::IoError::from)?;
        let mut one_piece = |piece_start: u64, piece_len: u64| -> Result<(), PagerError> {
            let view = slot.view(piece_start, piece_len)?;
            let mem = IoVec {
                ptr: bounce.as_ptr(),
                len: piece_len as usize,
            };
            // The overlap of this piece with the caller's range, in both coordinates.
            let lo = piece_start.max(offset);
            let hi = (piece_start + piece_len).min(offset + len);
            let (in_piece, in_user, n) = (
                (lo - piece_start) as usize,
                (lo - offset) as usize,
                (hi - lo) as usize,
            );
            match &mut access {
                StoreAccess::Read(out) => {
                    // SAFETY: the bounce buffer outlives the blocking transfer and nothing else uses it.
                    unsafe { store.transfer_view(Direction::Read, &view, &[mem]) }?;
                    out[in_user..in_user + n]
                        .copy_from_slice(&bounce.as_slice()[in_piece..in_piece + n]);
                }
                StoreAccess::Write(data) => {
                    if n as u64 != piece_len {
                        // A partial block: keep the bytes around the caller's range.
                        // SAFETY: as above.
                        unsafe { store.transfer_view(Direction::Read, &view, &[mem]) }?;
                    }
                    bounce.as_mut_slice()[in_piece..in_piece + n]
                        .copy_from_slice(&data[in_user..in_user + n]);
                    // SAFETY: as above; the write only reads the bounce buffer.
                    unsafe { store.transfer_view(Direction::Write, &view, &[mem]) }?;
                }
            }
            Ok(())
        };
        self.pool
            .copy_chunked((end - start) as usize, WorkKind::Transfer, |off, n| {
                let mut pos = start + off as u64;
                let stop = pos + n as u64;
                while pos < stop {
                    let piece = (stop - pos).min(piece_cap as u64);
                    one_piece(pos, piece)?;
                    pos += piece;
                }
                Ok::<(), PagerError>(())
            })
    }
}

/// A copy or direct store transfer running on a buffer without the space lock. While it lives the buffer is
/// `busy` (paging calls on it wait, `free` defers); dropping it wakes the waiters and releases the buffer if it was
/// freed meanwhile.
pub(super) struct AccessGuard<'a> {
    pub(super) space: &'a SpaceShared,
    pub(super) buffer: Buffer,
}

/// A direct store transfer on a paged-out buffer's slot, which it shares with the entry while the buffer is busy.
pub(super) struct StoreAccessGuard<'a> {
    /// Declared before `access`, so dropped first: the slot is the entry's alone again before the buffer stops
    /// being busy (and before a buffer freed meanwhile gives its slot back).
    slot: Arc<Slot>,
    access: AccessGuard<'a>,
}

impl StoreAccessGuard<'_> {
    /// Reads or writes `offset..` of the slot.
    pub(super) fn store_range(
        &self,
        offset: u64,
        access: StoreAccess<'_>,
    ) -> Result<(), PagerError> {
        self.access.space.store_range(&self.slot, offset, access)
    }
}

impl Drop for AccessGuard<'_> {
    fn drop(&mut self) {
        let freed = {
            let mut st = lock(&self.space.state);
            if let Some(e) = self.space.any_entry_mut(&mut st, self.buffer) {
                e.busy = false;
            }
            self.space.take_if_freed(&mut st, self.buffer)
        };
        self.space.idle.notify_all();
        if let Some(entry) = freed {
            self.space.release_logged(self.buffer, entry);
        }
    }
}
