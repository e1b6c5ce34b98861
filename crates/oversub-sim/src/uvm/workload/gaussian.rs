//! Rodinia Gaussian elimination (`gaussian.cu`), float n × n matrices `a` and `m` and vector `b`:
//!
//! ```text
//! Fan1 (512-thread blocks), i = tid < n-1-t:
//!   m[(i+t+1)*n + t] = a[(i+t+1)*n + t] / a[t*n + t]
//! Fan2 (4 × 4 blocks on an n × n grid; x = row, the fastest lane index), x < n-1-t, y < n-t:
//!   a[(x+1+t)*n + y+t] -= m[(x+1+t)*n + t] * a[t*n + y+t]
//!   if y == 0: b[x+1+t] -= m[(x+1+t)*n + y+t] * b[t]
//! ```
//! The host launches Fan1 then Fan2 for every pivot row t. Each Fan2 sweeps the whole trailing matrix with a
//! half-empty warp touching four rows, so the full elimination issues about n³/4 accesses; the generator runs a
//! sample of pivot rows spread evenly over 0..n-1 instead, which keeps the shape (repeated sweeps of a shrinking
//! working set) at a traceable length.

use super::emit::{Gpu, Kernel, Warp, WARP_LANES};
use super::{factor, scaled_side, Layout, WorkloadInfo, WorkloadParams};
use crate::uvm::SimError;

const QUICK_N: u64 = 1536;
const DEFAULT_N: u64 = 3072;
const QUICK_PIVOTS: u64 = 4;
const DEFAULT_PIVOTS: u64 = 6;
/// Fan2's thread block is BLOCK_XY × BLOCK_XY (Rodinia's default).
const BLOCK_XY: u64 = 4;

#[derive(Debug, Clone, Copy)]
struct Arrays {
    m: u64,
    a: u64,
    b: u64,
}

fn dims(params: &WorkloadParams) -> Result<(u64, u64), SimError> {
    Ok(match factor(params.size)? {
        None => (QUICK_N, QUICK_PIVOTS),
        Some(f) => (scaled_side(DEFAULT_N, f, 16), DEFAULT_PIVOTS),
    })
}

fn layout(n: u64) -> (Layout, Arrays) {
    let mut l = Layout::new();
    let a = Arrays {
        m: l.alloc("m", n * n * 4),
        a: l.alloc("a", n * n * 4),
        b: l.alloc("b", n * 4),
    };
    (l, a)
}

pub(super) fn info(params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    Ok(layout(dims(params)?.0).0.info())
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let (n, pivots) = dims(params)?;
    let (_, arrays) = layout(n);
    for j in 0..pivots {
        let t = j * (n - 1) / pivots;
        gpu.launch(&mut Fan1 { arrays, n, t });
        gpu.launch(&mut Fan2 { arrays, n, t });
    }
    Ok(())
}

/// Byte address of element (row, col) of an n × n float matrix at `base`.
fn at(base: u64, n: u64, row: u64, col: u64) -> u64 {
    base + (row * n + col) * 4
}

struct Fan1 {
    arrays: Arrays,
    n: u64,
    t: u64,
}

impl Kernel for Fan1 {
    fn warps(&self) -> u64 {
        (self.n - 1 - self.t).div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let (n, t, a) = (self.n, self.t, self.arrays);
        let first = index * WARP_LANES as u64;
        let last = (first + WARP_LANES as u64).min(n - 1 - t);
        let rows: Vec<u64> = (first..last).map(|i| i + t + 1).collect();
        warp.gather_with(&rows, 4, false, |r| at(a.a, n, r, t));
        warp.range(at(a.a, n, t, t), 4, false);
        warp.gather_with(&rows, 4, true, |r| at(a.m, n, r, t));
    }
}

struct Fan2 {
    arrays: Arrays,
    n: u64,
    t: u64,
}

impl Fan2 {
    /// Blocks along x (rows) and y (columns) that have any thread in range.
    fn blocks(&self) -> (u64, u64) {
        (
            (self.n - 1 - self.t).div_ceil(BLOCK_XY),
            (self.n - self.t).div_ceil(BLOCK_XY),
        )
    }
}

impl Kernel for Fan2 {
    fn warps(&self) -> u64 {
        let (x, y) = self.blocks();
        x * y
    }

    fn warp_id(&self, index: u64) -> u32 {
        // The grid covers the whole matrix whatever t is; blocks beyond the trailing part exit at once.
        let (x, _) = self.blocks();
        let grid_x = self.n.div_ceil(BLOCK_XY);
        ((index / x) * grid_x + index % x) as u32
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let (n, t, a) = (self.n, self.t, self.arrays);
        let (bxs, _) = self.blocks();
        let (bx, by) = (index % bxs, index / bxs);
        // Lanes: threadIdx.x (row) fastest, then threadIdx.y (column).
        let mut cells = [(0u64, 0u64); 16];
        let mut k = 0;
        for ty in 0..BLOCK_XY {
            for tx in 0..BLOCK_XY {
                let (x, y) = (bx * BLOCK_XY + tx, by * BLOCK_XY + ty);
                if x < n - 1 - t && y < n - t {
                    cells[k] = (x + 1 + t, y + t);
                    k += 1;
                }
            }
        }
        let cells = &cells[..k];
        warp.gather_with(cells, 4, false, |(r, _)| at(a.m, n, r, t));
        warp.gather_with(cells, 4, false, |(_, c)| at(a.a, n, t, c));
        warp.gather_with(cells, 4, false, |(r, c)| at(a.a, n, r, c));
        warp.gather_with(cells, 4, true, |(r, c)| at(a.a, n, r, c));
        if by == 0 {
            // The y == 0 threads also update b.
            let rows: Vec<u64> = cells
                .iter()
                .filter(|(_, c)| *c == t)
                .map(|(r, _)| *r)
                .collect();
            if !rows.is_empty() {
                warp.gather_with(&rows, 4, false, |r| at(a.m, n, r, t));
                warp.range(a.b + t * 4, 4, false);
                warp.gather_with(&rows, 4, false, |r| a.b + r * 4);
                warp.gather_with(&rows, 4, true, |r| a.b + r * 4);
            }
        }
    }
}
