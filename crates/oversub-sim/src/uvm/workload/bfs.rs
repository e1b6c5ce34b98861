//! graphBIG BFS, `bfs_topo_thread_centric`: level-synchronous, one thread per vertex, no atomics.
//!
//! ```text
//! kernel(level, curr): v = tid
//!   if level[v] == curr:
//!     for e in vertexlist[v] .. vertexlist[v+1]:
//!       u = edgelist[e]
//!       if level[u] == INF: *changed = true; level[u] = curr + 1
//! ```
//! The host relaunches it with `curr + 1` while `changed`. The CSR arrays are 8-byte (graphBIG's `uint64_t`),
//! levels 4-byte. Blocks are 1024 threads, so warp numbers are simply thread / 32.

use super::emit::{Gpu, Kernel, Sweep, Warp, WARP_LANES};
use super::graph::{Graph, EDGE_FACTOR};
use super::{graph_spec, Layout, WorkloadInfo, WorkloadParams};
use crate::uvm::SimError;

const QUICK_SCALE: u32 = 17;
const DEFAULT_SCALE: u32 = 20;
const INF: u32 = u32::MAX;

/// Base addresses of the arrays.
#[derive(Debug, Clone, Copy)]
struct Arrays {
    vertexlist: u64,
    edgelist: u64,
    level: u64,
    changed: u64,
}

fn layout(vertices: u64, edges: u64) -> (Layout, Arrays) {
    let mut l = Layout::new();
    let a = Arrays {
        vertexlist: l.alloc("vertexlist", (vertices + 1) * 8),
        edgelist: l.alloc("edgelist", edges * 8),
        level: l.alloc("level", vertices * 4),
        changed: l.alloc("changed", 1),
    };
    (l, a)
}

pub(super) fn info(params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    let (v, e) = graph_spec(params, QUICK_SCALE, DEFAULT_SCALE, EDGE_FACTOR)?.counts()?;
    Ok(layout(v, e).0.info())
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let graph = graph_spec(params, QUICK_SCALE, DEFAULT_SCALE, EDGE_FACTOR)?.load(params.seed)?;
    let n = graph.vertices();
    let (_, arrays) = layout(n as u64, graph.edges() as u64);
    gpu.launch(&mut Sweep {
        elements: n as u64,
        arrays: vec![(arrays.level, 4)],
        write: true,
    });
    let mut level = vec![INF; n];
    // The host sets the root's level with a cudaMemcpy: not a GPU access.
    if let Some(l) = level.get_mut(graph.hub()) {
        *l = 0;
    }
    let mut curr = 0;
    loop {
        let mut k = LevelKernel {
            graph: &graph,
            level: &mut level,
            arrays,
            curr,
            changed: false,
        };
        gpu.launch(&mut k);
        if !k.changed || curr == INF - 1 {
            break;
        }
        curr += 1;
    }
    Ok(())
}

/// One launch of the level kernel.
struct LevelKernel<'g> {
    graph: &'g Graph,
    level: &'g mut [u32],
    arrays: Arrays,
    curr: u32,
    changed: bool,
}

impl Kernel for LevelKernel<'_> {
    fn warps(&self) -> u64 {
        (self.level.len() as u64).div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let a = self.arrays;
        let first = index as usize * WARP_LANES;
        let count = (self.level.len() - first).min(WARP_LANES);
        warp.range(a.level + first as u64 * 4, count as u64 * 4, false);
        // Active lanes: (vertex, next edge, end edge).
        let mut lanes = [(0usize, 0u64, 0u64); WARP_LANES];
        let mut active = 0;
        for v in first..first + count {
            if self.level.get(v) == Some(&self.curr) {
                let (s, e) = self.graph.edge_range(v);
                lanes[active] = (v, s, e);
                active += 1;
            }
        }
        let lanes = &mut lanes[..active];
        if lanes.is_empty() {
            return;
        }
        warp.gather_with(lanes, 8, false, |(v, _, _)| a.vertexlist + v as u64 * 8);
        warp.gather_with(lanes, 8, false, |(v, _, _)| {
            a.vertexlist + (v as u64 + 1) * 8
        });
        let mut edges = [0u64; WARP_LANES];
        let mut targets = [0u32; WARP_LANES];
        let mut found = [0u32; WARP_LANES];
        loop {
            // One trip of the edge loop: the lanes that still have edges.
            let mut k = 0;
            for lane in lanes.iter_mut() {
                if lane.1 < lane.2 {
                    edges[k] = lane.1;
                    targets[k] = self.graph.target(lane.1);
                    lane.1 += 1;
                    k += 1;
                }
            }
            if k == 0 {
                break;
            }
            warp.gather_with(&edges[..k], 8, false, |e| a.edgelist + e * 8);
            warp.gather_with(&targets[..k], 4, false, |u| a.level + u64::from(u) * 4);
            // All lanes test before any stores (SIMT), so two lanes can both claim one vertex, as on the GPU.
            let mut f = 0;
            for &u in &targets[..k] {
                if self.level.get(u as usize) == Some(&INF) {
                    found[f] = u;
                    f += 1;
                }
            }
            if f > 0 {
                warp.range(a.changed, 1, true);
                warp.gather_with(&found[..f], 4, true, |u| a.level + u64::from(u) * 4);
                for &u in &found[..f] {
                    if let Some(l) = self.level.get_mut(u as usize) {
                        *l = self.curr + 1;
                    }
                }
                self.changed = true;
            }
        }
    }
}
