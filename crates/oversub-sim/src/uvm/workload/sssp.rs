//! graphBIG SSSP, `sssp_topo_thread_centric`: Bellman-Ford by topology, one thread per vertex.
//!
//! ```text
//! kernel(dist, weight, update, mask): v = tid
//!   if mask[v]:
//!     cost = dist[v]
//!     for e in vertexlist[v] .. vertexlist[v+1]:
//!       atomicMin(&update[edgelist[e]], cost + weight[e])
//!     mask[v] = false
//! kernel2(dist, update, mask, changed): v = tid
//!   if dist[v] > update[v]: dist[v] = update[v]; mask[v] = true; *changed = true
//!   else: update[v] = dist[v]
//! ```
//! repeated while `changed`. CSR arrays are 8-byte, distances and weights 4-byte, the mask 1-byte. Because the
//! relaxations read `dist` and only `update` changes during the first kernel, the result does not depend on the
//! order the warps run in.

use super::emit::{Gpu, Kernel, Sweep, Warp, WARP_LANES};
use super::graph::{Graph, EDGE_FACTOR};
use super::{graph_spec, Layout, WorkloadInfo, WorkloadParams};
use crate::rng::Rng;
use crate::uvm::SimError;

const QUICK_SCALE: u32 = 17;
const DEFAULT_SCALE: u32 = 19;
/// Synthetic weights are uniform in 1..=MAX_WEIGHT.
const MAX_WEIGHT: u64 = 16;
/// Stream of the synthetic weights, apart from the graph's.
const WEIGHT_SALT: u64 = 0x5353_5350_5745_4947;
const INF: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Arrays {
    vertexlist: u64,
    edgelist: u64,
    dist: u64,
    mask: u64,
    update: u64,
    weight: u64,
    changed: u64,
}

fn layout(vertices: u64, edges: u64) -> (Layout, Arrays) {
    let mut l = Layout::new();
    let a = Arrays {
        vertexlist: l.alloc("vertexlist", (vertices + 1) * 8),
        edgelist: l.alloc("edgelist", edges * 8),
        dist: l.alloc("dist", vertices * 4),
        mask: l.alloc("mask", vertices),
        update: l.alloc("update", vertices * 4),
        weight: l.alloc("weight", edges * 4),
        changed: l.alloc("changed", 1),
    };
    (l, a)
}

pub(super) fn info(params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    let (v, e) = graph_spec(params, QUICK_SCALE, DEFAULT_SCALE, EDGE_FACTOR)?.counts()?;
    Ok(layout(v, e).0.info())
}

/// Edge weights: the file's, as non-negative integers (Bellman-Ford needs no negative cycles, graphBIG's weights
/// are `uint32_t`), or random.
fn weights(graph: &Graph, seed: u64) -> Vec<u32> {
    match graph.weights() {
        Some(w) => w
            .iter()
            .map(|&x| f64::from(x).abs().round().min(1e9) as u32)
            .collect(),
        None => {
            let mut rng = Rng::new(seed ^ WEIGHT_SALT);
            (0..graph.edges())
                .map(|_| 1 + rng.below(MAX_WEIGHT) as u32)
                .collect()
        }
    }
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let graph = graph_spec(params, QUICK_SCALE, DEFAULT_SCALE, EDGE_FACTOR)?.load(params.seed)?;
    let n = graph.vertices();
    let (_, arrays) = layout(n as u64, graph.edges() as u64);
    let weight = weights(&graph, params.seed);
    gpu.launch(&mut Sweep {
        elements: n as u64,
        arrays: vec![(arrays.dist, 4), (arrays.update, 4), (arrays.mask, 1)],
        write: true,
    });
    let mut state = State {
        dist: vec![INF; n],
        update: vec![INF; n],
        mask: vec![false; n],
    };
    // Set by the host with cudaMemcpy: not GPU accesses.
    let root = graph.hub();
    if let (Some(d), Some(m)) = (state.dist.get_mut(root), state.mask.get_mut(root)) {
        *d = 0;
        *m = true;
    }
    // Bellman-Ford settles within n rounds; the bound only guards against a bug looping forever.
    for _ in 0..=n {
        gpu.launch(&mut Relax {
            graph: &graph,
            weight: &weight,
            state: &mut state,
            arrays,
        });
        let mut k2 = Fold {
            state: &mut state,
            arrays,
            changed: false,
        };
        gpu.launch(&mut k2);
        if !k2.changed {
            break;
        }
    }
    Ok(())
}

struct State {
    dist: Vec<u32>,
    update: Vec<u32>,
    mask: Vec<bool>,
}

fn lanes_of(n: usize, index: u64) -> (usize, usize) {
    let first = index as usize * WARP_LANES;
    (first, (n - first).min(WARP_LANES))
}

/// The relaxation kernel.
struct Relax<'g> {
    graph: &'g Graph,
    weight: &'g [u32],
    state: &'g mut State,
    arrays: Arrays,
}

impl Kernel for Relax<'_> {
    fn warps(&self) -> u64 {
        (self.state.mask.len() as u64).div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let a = self.arrays;
        let (first, count) = lanes_of(self.state.mask.len(), index);
        warp.range(a.mask + first as u64, count as u64, false);
        // Active lanes: (vertex, next edge, end edge, cost).
        let mut lanes = [(0usize, 0u64, 0u64, 0u32); WARP_LANES];
        let mut active = 0;
        for v in first..first + count {
            if self.state.mask.get(v) == Some(&true) {
                let (s, e) = self.graph.edge_range(v);
                let cost = self.state.dist.get(v).copied().unwrap_or(INF);
                lanes[active] = (v, s, e, cost);
                active += 1;
            }
        }
        let lanes = &mut lanes[..active];
        if lanes.is_empty() {
            return;
        }
        warp.gather_with(lanes, 8, false, |l| a.vertexlist + l.0 as u64 * 8);
        warp.gather_with(lanes, 8, false, |l| a.vertexlist + (l.0 as u64 + 1) * 8);
        warp.gather_with(lanes, 4, false, |l| a.dist + l.0 as u64 * 4);
        let mut edges = [0u64; WARP_LANES];
        let mut targets = [0u32; WARP_LANES];
        loop {
            let mut k = 0;
            for lane in lanes.iter_mut() {
                if lane.1 < lane.2 {
                    let (e, u) = (lane.1, self.graph.target(lane.1));
                    edges[k] = e;
                    targets[k] = u;
                    let w = self.weight.get(e as usize).copied().unwrap_or(0);
                    if let Some(up) = self.state.update.get_mut(u as usize) {
                        *up = (*up).min(lane.3.saturating_add(w));
                    }
                    lane.1 += 1;
                    k += 1;
                }
            }
            if k == 0 {
                break;
            }
            warp.gather_with(&edges[..k], 8, false, |e| a.edgelist + e * 8);
            warp.gather_with(&edges[..k], 4, false, |e| a.weight + e * 4);
            // atomicMin is performed at the memory side: a store as far as the pages are concerned.
            warp.gather_with(&targets[..k], 4, true, |u| a.update + u64::from(u) * 4);
        }
        for l in lanes.iter() {
            if let Some(m) = self.state.mask.get_mut(l.0) {
                *m = false;
            }
        }
        warp.gather_with(lanes, 1, true, |l| a.mask + l.0 as u64);
    }
}

/// The kernel that folds `update` into `dist` and sets the next mask.
struct Fold<'g> {
    state: &'g mut State,
    arrays: Arrays,
    changed: bool,
}

impl Kernel for Fold<'_> {
    fn warps(&self) -> u64 {
        (self.state.mask.len() as u64).div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let a = self.arrays;
        let (first, count) = lanes_of(self.state.mask.len(), index);
        warp.range(a.dist + first as u64 * 4, count as u64 * 4, false);
        warp.range(a.update + first as u64 * 4, count as u64 * 4, false);
        let mut improved = [0u64; WARP_LANES];
        let mut kept = [0u64; WARP_LANES];
        let (mut i, mut k) = (0, 0);
        let s = &mut *self.state;
        for v in first..first + count {
            let (Some(d), Some(u), Some(m)) =
                (s.dist.get_mut(v), s.update.get_mut(v), s.mask.get_mut(v))
            else {
                continue;
            };
            if *d > *u {
                *d = *u;
                *m = true;
                improved[i] = v as u64;
                i += 1;
            } else {
                *u = *d;
                kept[k] = v as u64;
                k += 1;
            }
        }
        if i > 0 {
            warp.gather_with(&improved[..i], 4, true, |v| a.dist + v * 4);
            warp.gather_with(&improved[..i], 1, true, |v| a.mask + v);
            warp.range(a.changed, 1, true);
            self.changed = true;
        }
        warp.gather_with(&kept[..k], 4, true, |v| a.update + v * 4);
    }
}
