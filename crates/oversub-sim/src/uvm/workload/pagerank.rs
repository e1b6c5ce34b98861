//! Hetero-Mark PageRank (`pr`): sparse matrix-vector iterations, one thread per row (vertex), 64-thread blocks.
//!
//! ```text
//! pr(row_offsets, column_numbers, values, x, y): v = tid
//!   sum = 0
//!   for j in row_offsets[v] .. row_offsets[v+1]:
//!     sum += values[j] * x[column_numbers[j]]
//!   y[v] = sum
//! ```
//! launched once per iteration with `x` and `y` swapped each time. Everything is 4 bytes (`uint32_t`, `float`).
//! The access pattern depends only on the graph, so no ranks are computed.

use super::emit::{Gpu, Kernel, Warp, WARP_LANES};
use super::graph::Graph;
use super::{factor, graph_spec, Layout, WorkloadInfo, WorkloadParams};
use crate::uvm::SimError;

const QUICK_SCALE: u32 = 17;
const DEFAULT_SCALE: u32 = 19;
const QUICK_ITERATIONS: u32 = 2;
const DEFAULT_ITERATIONS: u32 = 2;

#[derive(Debug, Clone, Copy)]
struct Arrays {
    row_offsets: u64,
    column_numbers: u64,
    values: u64,
    rank: [u64; 2],
}

fn layout(vertices: u64, edges: u64) -> (Layout, Arrays) {
    let mut l = Layout::new();
    let a = Arrays {
        row_offsets: l.alloc("row_offsets", (vertices + 1) * 4),
        column_numbers: l.alloc("column_numbers", edges * 4),
        values: l.alloc("values", edges * 4),
        rank: [
            l.alloc("rank_1", vertices * 4),
            l.alloc("rank_2", vertices * 4),
        ],
    };
    (l, a)
}

pub(super) fn info(params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    let (v, e) = graph_spec(params, QUICK_SCALE, DEFAULT_SCALE)?.counts()?;
    Ok(layout(v, e).0.info())
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let iterations = match factor(params.size)? {
        None => QUICK_ITERATIONS,
        Some(_) => DEFAULT_ITERATIONS,
    };
    let graph = graph_spec(params, QUICK_SCALE, DEFAULT_SCALE)?.load(params.seed)?;
    let (_, arrays) = layout(graph.vertices() as u64, graph.edges() as u64);
    for i in 0..iterations {
        let (x, y) = if i % 2 == 0 {
            (arrays.rank[0], arrays.rank[1])
        } else {
            (arrays.rank[1], arrays.rank[0])
        };
        gpu.launch(&mut Spmv {
            graph: &graph,
            arrays,
            x,
            y,
        });
    }
    Ok(())
}

struct Spmv<'g> {
    graph: &'g Graph,
    arrays: Arrays,
    x: u64,
    y: u64,
}

impl Kernel for Spmv<'_> {
    fn warps(&self) -> u64 {
        (self.graph.vertices() as u64).div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let a = self.arrays;
        let first = index as usize * WARP_LANES;
        let count = (self.graph.vertices() - first).min(WARP_LANES);
        let (f, c) = (first as u64, count as u64);
        warp.range(a.row_offsets + f * 4, c * 4, false);
        warp.range(a.row_offsets + (f + 1) * 4, c * 4, false);
        let mut lanes = [(0u64, 0u64); WARP_LANES];
        for (lane, v) in lanes.iter_mut().zip(first..first + count) {
            *lane = self.graph.edge_range(v);
        }
        let lanes = &mut lanes[..count];
        let mut edges = [0u64; WARP_LANES];
        let mut cols = [0u32; WARP_LANES];
        loop {
            let mut k = 0;
            for lane in lanes.iter_mut() {
                if lane.0 < lane.1 {
                    edges[k] = lane.0;
                    cols[k] = self.graph.target(lane.0);
                    lane.0 += 1;
                    k += 1;
                }
            }
            if k == 0 {
                break;
            }
            warp.gather_with(&edges[..k], 4, false, |e| a.column_numbers + e * 4);
            warp.gather_with(&edges[..k], 4, false, |e| a.values + e * 4);
            warp.gather_with(&cols[..k], 4, false, |u| self.x + u64::from(u) * 4);
        }
        warp.range(self.y + f * 4, c * 4, true);
    }
}
