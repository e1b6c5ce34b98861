//! The store's raw limit: the whole buffer in fixed-size requests, all submitted at once to an I/O engine, into
//! memory that is already faulted in.

use std::sync::Arc;

use oversub_io::{Direction, IoEngine, IoRequest, IoVec, UringEngine};

use super::memory::Mapping;
use crate::LabError;

const MIB: usize = 1 << 20;

/// An io_uring engine of `depth` when the kernel allows it, else psync of the same depth.
pub fn raw_engine(depth: usize) -> Result<Arc<dyn IoEngine>, LabError> {
    Ok(match UringEngine::new(depth) {
        Ok(e) => Arc::new(e),
        Err(e) => {
            tracing::warn!("io_uring unavailable for the raw limit ({e}); using psync");
            Arc::new(oversub_io::PsyncEngine::new(depth)?)
        }
    })
}

/// The best the store gives at one point: 1 MiB requests, all submitted at once to `engine`.
pub fn raw_transfer(
    engine: &dyn IoEngine,
    fd: libc::c_int,
    buf: &mut Mapping,
    direction: Direction,
) -> Result<(), LabError> {
    raw_transfer_blocks(engine, fd, buf, direction, MIB)
}

/// One pass over `buf` in requests of `block` bytes, all submitted to `engine` (whose queue depth bounds the
/// requests in flight).
pub fn raw_transfer_blocks(
    engine: &dyn IoEngine,
    fd: libc::c_int,
    buf: &mut Mapping,
    direction: Direction,
    block: usize,
) -> Result<(), LabError> {
    let len = buf.len();
    let block = block.max(4096);
    let requests: Vec<IoRequest> = (0..len)
        .step_by(block)
        .map(|off| IoRequest {
            fd,
            direction,
            offset: off as u64,
            iovecs: vec![IoVec {
                // Pointer arithmetic only: off < len, inside the mapping.
                ptr: buf.as_ptr().wrapping_add(off),
                len: block.min(len - off),
            }],
        })
        .collect();
    // SAFETY: buf is borrowed mutably for the whole call and submit_wait returns only after every request finished.
    unsafe { oversub_io::submit_wait(engine, requests) }?;
    Ok(())
}
