//! Uses of a buffer recorded on the caller's streams. A program that queues work on the device (PyTorch's kernels
//! on its current stream) runs ahead of it, so when the host pages a buffer out, kernels queued earlier may still
//! read it. Without a record the page-out waits for the whole device, which also waits for everything queued
//! since and leaves the device idle until the host queues more. With [`AddressSpace::record_use`] after the
//! buffer's last use, the page-out (and a free) waits only for that point of that stream.

use super::*;

impl AddressSpace {
    /// Records that the work queued on `stream` so far uses `buffer` (for CUDA a `CUstream`, as
    /// `torch.cuda.current_stream().cuda_stream` gives it; 0 is the default stream). From then on a page-out or
    /// free of the buffer waits for the last use recorded on each stream, not for the whole device: record every
    /// stream that uses it, after its last use. A newer record on the same stream replaces the older one; a
    /// page-out consumes the records. On host memory, whose work is done when its call returns, it only checks
    /// the buffer.
    pub fn record_use(&self, buffer: Buffer, stream: u64) -> Result<(), PagerError> {
        let pool = &self.shared.pool;
        pool.check_fork()?;
        let fence = pool.device.record_fence(stream)?;
        let mut st = lock(&self.shared.state);
        let e = match self.shared.entry_mut(&mut st, buffer) {
            Ok(e) if matches!(e.state, State::Resident(_)) => e,
            Ok(e) => {
                let state = e.state.public();
                drop(st);
                pool.device.fence_forget(fence);
                return Err(PagerError::NotResident { buffer, state });
            }
            Err(err) => {
                drop(st);
                pool.device.fence_forget(fence);
                return Err(err);
            }
        };
        if fence == Fence::COMPLETE {
            return Ok(());
        }
        let old = match e.stream_uses.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, f)) => Some(std::mem::replace(f, fence)),
            None => {
                e.stream_uses.push((stream, fence));
                None
            }
        };
        drop(st);
        if let Some(old) = old {
            // Stream order: the new record completes after the old one.
            pool.device.fence_forget(old);
        }
        Ok(())
    }
}

impl SpaceShared {
    /// Before a page-out: waits until no queued device work uses `buffer`, that is for its recorded uses, or for
    /// the whole device when none were recorded. Not under the space lock (a device wait may be long).
    pub(super) fn wait_for_uses(&self, buffer: Buffer) -> Result<(), PagerError> {
        let uses = {
            let mut st = lock(&self.state);
            std::mem::take(&mut self.entry_mut(&mut st, buffer)?.stream_uses)
        };
        if uses.is_empty() {
            return Ok(self.pool.device.synchronize()?);
        }
        self.wait_fences(uses)
    }

    /// Waits for each fence (all of them, so each returns its resources); the first error.
    pub(super) fn wait_fences(&self, uses: Vec<(u64, Fence)>) -> Result<(), PagerError> {
        let mut first = None;
        for (_, fence) in uses {
            if let Err(e) = self.pool.device.fence_wait(fence) {
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
    }
}
