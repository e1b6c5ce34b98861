//! Rodinia Needleman-Wunsch (`needle_cuda_shared_1` / `_2`): the (n+1) × (n+1) score matrix is filled in 16 × 16
//! tiles, one 16-thread block per tile, one kernel launch per anti-diagonal of tiles (growing, then shrinking).
//! Each block, thread `tx` owning a tile column:
//!
//! ```text
//! if tx == 0: temp[0][0] = matrix[nw corner]
//! for ty in 0..16: ref[ty][tx] = reference[tile row ty, column tx]     // 16 row loads
//! temp[tx+1][0] = matrix[west column, row tx]                         // a column: 16 lines
//! temp[0][tx+1] = matrix[north row, column tx]
//! … the wavefront inside the tile, in shared memory …
//! for ty in 0..16: matrix[tile row ty, column tx] = temp[ty+1][tx+1]  // 16 row stores
//! ```
//! Rows are n + 1 ints long, so tile rows drift across line boundaries as in the original.

use super::emit::{Gpu, Kernel, Warp};
use super::{factor, scaled_side, Layout, WorkloadInfo, WorkloadParams};
use crate::uvm::SimError;

const TILE: u64 = 16;
const QUICK_N: u64 = 2048;
const DEFAULT_N: u64 = 5120;

#[derive(Debug, Clone, Copy)]
struct Arrays {
    reference: u64,
    matrix: u64,
}

fn side(params: &WorkloadParams) -> Result<u64, SimError> {
    Ok(match factor(params.size)? {
        None => QUICK_N,
        Some(f) => scaled_side(DEFAULT_N, f, TILE),
    })
}

fn layout(n: u64) -> (Layout, Arrays) {
    let cells = (n + 1) * (n + 1) * 4;
    let mut l = Layout::new();
    let a = Arrays {
        reference: l.alloc("reference", cells),
        matrix: l.alloc("matrix", cells),
    };
    (l, a)
}

pub(super) fn info(params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    Ok(layout(side(params)?).0.info())
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let n = side(params)?;
    let (_, arrays) = layout(n);
    let width = n / TILE;
    // Upper-left triangle of tile diagonals, then the lower-right one.
    for i in 1..=width {
        gpu.launch(&mut Diagonal {
            arrays,
            cols: n + 1,
            blocks: i,
            tile: move |bx| (bx, i - 1 - bx),
        });
    }
    for i in (1..width).rev() {
        gpu.launch(&mut Diagonal {
            arrays,
            cols: n + 1,
            blocks: i,
            tile: move |bx| (bx + width - i, width - bx - 1),
        });
    }
    Ok(())
}

/// One launch: `blocks` tiles, block `bx` working on tile `tile(bx)` = (tile column, tile row).
struct Diagonal<F> {
    arrays: Arrays,
    cols: u64,
    blocks: u64,
    tile: F,
}

impl<F: Fn(u64) -> (u64, u64)> Kernel for Diagonal<F> {
    fn warps(&self) -> u64 {
        self.blocks
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let (bx, by) = (self.tile)(index);
        let cols = self.cols;
        let (m, r) = (self.arrays.matrix, self.arrays.reference);
        let nw = cols * TILE * by + TILE * bx;
        let cell = |base: u64, i: u64| base + i * 4;
        warp.range(cell(m, nw), 4, false);
        for ty in 0..TILE {
            warp.range(cell(r, nw + cols + 1 + ty * cols), TILE * 4, false);
        }
        let mut west = [0u64; TILE as usize];
        for (tx, w) in west.iter_mut().enumerate() {
            *w = cell(m, nw + cols * (tx as u64 + 1));
        }
        warp.gather(&west, 4, false);
        warp.range(cell(m, nw + 1), TILE * 4, false);
        for ty in 0..TILE {
            warp.range(cell(m, nw + cols + 1 + ty * cols), TILE * 4, true);
        }
    }
}
