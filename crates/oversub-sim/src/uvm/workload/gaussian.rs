//! Rodinia Gaussian elimination (`gaussian.cu`), float n × n matrices `a` and `m` and vector `b`:
//!
//! ```text
//! Fan1 (512-thread blocks), i = tid < n-1-t:
//!   m[(i+t+1)*n + t] = a[(i+t+1)*n + t] / a[t*n + t]
//! Fan2 (4 × 4 blocks on an n × n grid; x = row, the fastest lane index), x < n-1-t, y < n-t:
//!   a[(x+1+t)*n + y+t] -= m[(x+1+t)*n + t] * a[t*n + y+t]
//!   if y == 0: b[x+1+t] -= m[(x+1+t)*n + y+t] * b[t]
//! ```
//! The host launches Fan1 then Fan2 for every pivot row t = 0 ..= n-2, and so does the generator. Each Fan2 sweeps
//! the whole trailing matrix with a half-empty warp touching four rows (about 0.8 accesses per trailing cell), so
//! the elimination issues about 0.29·n³ accesses: n³ decides the trace length and 8n² bytes the footprint, which
//! keeps a traceable full elimination small (n = 272: 0.57 MiB, 6.0 M accesses; n = 512: 2.0 MiB, 39 M).

use super::emit::{Gpu, Kernel, Warp, WARP_LANES};
use super::{factor, scaled_side, Layout, WorkloadInfo, WorkloadParams};
use crate::uvm::SimError;

/// Matrix side of `Quick`: 0.57 MiB, 6.0 M accesses (seed 1; Gaussian uses no randomness).
const QUICK_N: u64 = 272;
/// Matrix side of `Default`: 2.0 MiB, 39 M accesses. `Scale(f)` multiplies it by √f (footprint × f, accesses
/// × f^1.5), rounded to a multiple of 16.
const DEFAULT_N: u64 = 512;
/// Fan2's thread block is BLOCK_XY × BLOCK_XY (Rodinia's default).
const BLOCK_XY: u64 = 4;

#[derive(Debug, Clone, Copy)]
struct Arrays {
    m: u64,
    a: u64,
    b: u64,
}

/// The matrix side n (a multiple of 16, at least 16).
fn side(params: &WorkloadParams) -> Result<u64, SimError> {
    Ok(match factor(params.size)? {
        None => QUICK_N,
        Some(f) => scaled_side(DEFAULT_N, f, 16),
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
    Ok(layout(side(params)?).0.info())
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let n = side(params)?;
    let (_, arrays) = layout(n);
    for t in 0..n.saturating_sub(1) {
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
        let mut rows = [0u64; WARP_LANES];
        let mut k = 0;
        for (slot, i) in rows.iter_mut().zip(first..last) {
            *slot = i + t + 1;
            k += 1;
        }
        let rows = rows.get(..k).unwrap_or(&[]);
        warp.gather_with(rows, 4, false, |r| at(a.a, n, r, t));
        warp.range(at(a.a, n, t, t), 4, false);
        warp.gather_with(rows, 4, true, |r| at(a.m, n, r, t));
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
        let mut cells = [(0u64, 0u64); (BLOCK_XY * BLOCK_XY) as usize];
        let mut k = 0;
        for ty in 0..BLOCK_XY {
            for tx in 0..BLOCK_XY {
                let (x, y) = (bx * BLOCK_XY + tx, by * BLOCK_XY + ty);
                if x < n - 1 - t && y < n - t {
                    if let Some(cell) = cells.get_mut(k) {
                        *cell = (x + 1 + t, y + t);
                        k += 1;
                    }
                }
            }
        }
        let cells = cells.get(..k).unwrap_or(&[]);
        warp.gather_with(cells, 4, false, |(r, _)| at(a.m, n, r, t));
        warp.gather_with(cells, 4, false, |(_, c)| at(a.a, n, t, c));
        warp.gather_with(cells, 4, false, |(r, c)| at(a.a, n, r, c));
        warp.gather_with(cells, 4, true, |(r, c)| at(a.a, n, r, c));
        if by == 0 {
            // The y == 0 threads also update b.
            let mut rows = [0u64; BLOCK_XY as usize];
            let mut j = 0;
            for &(r, _) in cells.iter().filter(|(_, c)| *c == t) {
                if let Some(slot) = rows.get_mut(j) {
                    *slot = r;
                    j += 1;
                }
            }
            let rows = rows.get(..j).unwrap_or(&[]);
            if !rows.is_empty() {
                warp.gather_with(rows, 4, false, |r| at(a.m, n, r, t));
                warp.range(a.b + t * 4, 4, false);
                warp.gather_with(rows, 4, false, |r| a.b + r * 4);
                warp.gather_with(rows, 4, true, |r| a.b + r * 4);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uvm::workload::WorkloadSize;
    use crate::uvm::Access;

    #[test]
    fn eliminates_over_every_pivot() {
        let params = WorkloadParams {
            size: WorkloadSize::Scale(1.0 / 256.0),
            ..WorkloadParams::default()
        };
        let n = side(&params).unwrap();
        assert_eq!(n, 32);
        assert_eq!(side(&WorkloadParams::default()).unwrap() % 16, 0);
        let (_, arrays) = layout(n);
        let mut writes = Vec::new();
        let mut sink = |a: Access| {
            if a.write {
                writes.push(a);
            }
        };
        run(&params, &mut Gpu::new(&mut sink)).unwrap();
        let written = |x: u64| {
            writes
                .iter()
                .any(|a| a.addr <= x && x < a.addr + u64::from(a.bytes))
        };
        // Fan1 of pivot t alone writes m[n-1][t]: every pivot row 0..=n-2 is eliminated.
        for t in 0..n - 1 {
            assert!(written(at(arrays.m, n, n - 1, t)), "pivot {t} skipped");
        }
        assert!(!written(at(arrays.m, n, n - 1, n - 1)));
    }
}
