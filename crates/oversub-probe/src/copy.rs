//! memcpy bandwidth: one thread copying between two buffers much larger than the caches, the host-memory
//! bandwidth B_C of the UVM cost model and the swap simulator's memory-controller bandwidth.

use std::time::Instant;

use serde::Serialize;

use crate::derive::{median, rate_per_s};
use crate::mem::Mapping;
use crate::ProbeError;

/// The result.
#[derive(Debug, Clone, Serialize)]
pub struct CopyResult {
    /// Bytes per copy.
    pub bytes: u64,
    /// Copies timed.
    pub repeats: usize,
    /// Bytes copied per second (each byte counted once, though it is read and written), median run.
    pub median_bytes_per_s: f64,
    /// The fastest run.
    pub best_bytes_per_s: f64,
}

/// Copies `bytes` from one fresh, pre-faulted buffer to another `repeats` times.
pub fn measure(bytes: usize, repeats: usize) -> Result<CopyResult, ProbeError> {
    if bytes == 0 || repeats == 0 {
        return Err(ProbeError::InvalidInput(
            "the copy probe needs a size and at least one repeat".into(),
        ));
    }
    let mut src = Mapping::new(bytes, false)?;
    let mut dst = Mapping::new(bytes, false)?;
    // Fault both in first; the pattern keeps the kernel from sharing zero pages.
    for (i, w) in src.words_mut().iter_mut().enumerate() {
        *w = i;
    }
    dst.words_mut().fill(1);
    let mut rates = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        dst.words_mut().copy_from_slice(src.words_mut());
        let s = t.elapsed().as_secs_f64();
        std::hint::black_box(dst.words_mut().last());
        rates.push(rate_per_s(bytes as f64, s.max(1e-9))?);
    }
    let best = rates.iter().copied().fold(0.0, f64::max);
    Ok(CopyResult {
        bytes: bytes as u64,
        repeats,
        median_bytes_per_s: median(&rates).unwrap_or(best),
        best_bytes_per_s: best,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tiny_copy() {
        let r = measure(1 << 16, 3).unwrap();
        assert!(r.median_bytes_per_s > 0.0 && r.median_bytes_per_s.is_finite());
        assert!(r.best_bytes_per_s >= r.median_bytes_per_s);
        assert!(measure(0, 1).is_err());
    }
}
