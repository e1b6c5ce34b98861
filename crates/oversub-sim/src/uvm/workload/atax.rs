//! PolyBench/GPU ATAX (`atax.cu`), y = Aᵀ(Ax) with a float n × n row-major A, 256-thread blocks:
//!
//! ```text
//! atax_kernel1, i = tid:  for j in 0..n: tmp[i] += A[i*n + j] * x[j]
//! atax_kernel2, j = tid:  for i in 0..n: y[j] += A[i*n + j] * tmp[i]
//! ```
//! In kernel 1 the 32 lanes of a warp read 32 different rows (one line each per step: the poorly coalesced half);
//! kernel 2 reads a row segment per step (one line). The pointers are not `restrict`, so the compiler keeps the
//! accumulator in a register but still stores it every step; its reload is forwarded from that store.

use super::emit::{Gpu, Kernel, Warp, WARP_LANES};
use super::{factor, scaled_side, Layout, WorkloadInfo, WorkloadParams};
use crate::uvm::SimError;

const QUICK_N: u64 = 2048;
const DEFAULT_N: u64 = 4096;

#[derive(Debug, Clone, Copy)]
struct Arrays {
    a: u64,
    x: u64,
    y: u64,
    tmp: u64,
}

fn side(params: &WorkloadParams) -> Result<u64, SimError> {
    Ok(match factor(params.size)? {
        None => QUICK_N,
        Some(f) => scaled_side(DEFAULT_N, f, WARP_LANES as u64),
    })
}

fn layout(n: u64) -> (Layout, Arrays) {
    let mut l = Layout::new();
    let a = Arrays {
        a: l.alloc("A", n * n * 4),
        x: l.alloc("x", n * 4),
        y: l.alloc("y", n * 4),
        tmp: l.alloc("tmp", n * 4),
    };
    (l, a)
}

pub(super) fn info(params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    Ok(layout(side(params)?).0.info())
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let n = side(params)?;
    let (_, arrays) = layout(n);
    gpu.launch(&mut Rows { arrays, n });
    gpu.launch(&mut Columns { arrays, n });
    Ok(())
}

/// Kernel 1: a thread per row of A.
struct Rows {
    arrays: Arrays,
    n: u64,
}

impl Kernel for Rows {
    fn warps(&self) -> u64 {
        self.n.div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let (n, a) = (self.n, self.arrays);
        let first = index * WARP_LANES as u64;
        let count = (n - first).min(WARP_LANES as u64);
        let mut rows = [0u64; WARP_LANES];
        warp.range(a.tmp + first * 4, count * 4, false);
        for j in 0..n {
            for (lane, row) in rows.iter_mut().enumerate().take(count as usize) {
                *row = a.a + ((first + lane as u64) * n + j) * 4;
            }
            warp.gather(&rows[..count as usize], 4, false);
            warp.range(a.x + j * 4, 4, false);
            warp.range(a.tmp + first * 4, count * 4, true);
        }
    }
}

/// Kernel 2: a thread per column of A.
struct Columns {
    arrays: Arrays,
    n: u64,
}

impl Kernel for Columns {
    fn warps(&self) -> u64 {
        self.n.div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let (n, a) = (self.n, self.arrays);
        let first = index * WARP_LANES as u64;
        let count = (n - first).min(WARP_LANES as u64);
        warp.range(a.y + first * 4, count * 4, false);
        for i in 0..n {
            warp.range(a.a + (i * n + first) * 4, count * 4, false);
            warp.range(a.tmp + i * 4, 4, false);
            warp.range(a.y + first * 4, count * 4, true);
        }
    }
}
