//! Access to a buffer's bytes: copies to and from resident memory, and direct reads and writes of the stored copy
//! of a buffer that is not resident (through its tier), each under an `AccessGuard`.

use super::*;

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
    /// resident, otherwise straight from its stored copy (on the store: rounded out to the store's alignment and
    /// trimmed).
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
            } => {
                if copy.quick_access() {
                    // A memory copy: quick enough to do under the lock.
                    return copy.read_at(offset, out);
                }
                let copy = copy.share();
                let access = self.shared.begin_copy_access(e, buffer, copy);
                drop(st);
                access.copy.read_at(offset, out)
            }
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
            } => {
                if copy.quick_access() {
                    return copy.write_at(offset, data);
                }
                let copy = copy.share();
                let access = self.shared.begin_copy_access(e, buffer, copy);
                drop(st);
                access.copy.write_at(offset, data)
            }
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

impl SpaceShared {
    /// Marks `e` busy for a copy that runs after the space lock is dropped. The entry must not be busy (callers
    /// hold the guard of [`lock_idle`](Self::lock_idle)).
    pub(super) fn begin_access(&self, e: &mut Entry, buffer: Buffer) -> AccessGuard<'_> {
        e.busy = true;
        AccessGuard {
            space: self,
            buffer,
        }
    }

    /// As [`begin_access`](Self::begin_access), for a direct transfer of `copy`, the paged-out entry's own
    /// (shared: the entry keeps it).
    pub(super) fn begin_copy_access(
        &self,
        e: &mut Entry,
        buffer: Buffer,
        copy: SharedCopy,
    ) -> CopyAccessGuard<'_> {
        CopyAccessGuard {
            copy,
            _access: self.begin_access(e, buffer),
        }
    }
}

/// A copy or direct store transfer running on a buffer without the space lock. While it lives the buffer is
/// `busy` (paging calls on it wait, `free` defers); dropping it wakes the waiters and releases the buffer if it was
/// freed meanwhile.
pub(super) struct AccessGuard<'a> {
    pub(super) space: &'a SpaceShared,
    pub(super) buffer: Buffer,
}

/// A direct transfer of a paged-out buffer's stored copy, which it shares with the entry while the buffer is busy.
pub(super) struct CopyAccessGuard<'a> {
    /// Declared before `access`, so dropped first: the copy is the entry's alone again before the buffer stops
    /// being busy (and before a buffer freed meanwhile gives its copy back).
    pub(super) copy: SharedCopy,
    _access: AccessGuard<'a>,
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
