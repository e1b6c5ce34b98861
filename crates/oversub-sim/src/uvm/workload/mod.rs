//! Generators of the paper's seven irregular applications (Table 1 of Chang, Kumar & Sivasubramaniam, SYSTOR'21):
//! the stream of coalesced memory accesses their CUDA kernels issue, in the order a GPU would issue them.
//!
//! Each generator runs the real algorithm on the host (a BFS, Bellman-Ford, a tree insertion…) and records, per
//! warp, the loads and stores of the benchmark's kernel code; the shared emitter coalesces each warp instruction
//! into one access per 128-byte line and interleaves [`RESIDENT_WARPS`] resident warps round-robin, kernel after
//! kernel (see `emit`). Every array is its own managed allocation at a 2 MiB-aligned base ([`HEAP_BASE`] upward,
//! 2 MiB apart), as separate `cudaMallocManaged` calls would place them; [`info`] lists them.
//!
//! Problem sizes ([`WorkloadSize`]): `Quick` has 1–9 million accesses, `Default` 6.7–39 million; `Scale(f)`
//! multiplies the default footprint by `f` (0 < f ≤ [`MAX_SCALE`]). Footprints (seed 1): `Quick` 16–32 MiB for
//! BFS, SSSP, NW, ATAX and BST, `Default` 64–200 MiB for them; Gaussian (0.57 / 2.0 MiB) and PageRank (2.75 /
//! 11.0 MiB) are far smaller because they run the whole algorithm (every pivot row; 10 iterations), whose
//! accesses per byte of footprint are high (about 0.29·n³ accesses for 8n² bytes; about 2.6 accesses per edge and
//! iteration for 8 bytes). The simulator's GPU memory is the footprint over 1 + ratio: with the paper's absolute
//! 3 MiB L2 rather than one scaled to that memory, a footprint under about 9 MiB leaves GPU memory smaller than
//! the L2 at 200%, and one under 3 MiB fits in the L2 whole. Each [`WorkloadKind`] variant gives its own numbers. Generation runs at 10–90 million
//! accesses per second (release build), a few seconds at most for a default-size workload.

mod atax;
mod bfs;
mod bst;
mod emit;
mod gaussian;
mod graph;
mod nw;
mod pagerank;
mod sssp;

use std::path::PathBuf;

pub use emit::{coalesce, RESIDENT_WARPS};

use crate::uvm::{Access, SimError, Trace, BLOCK_BYTES};
use emit::Gpu;
use graph::GraphSpec;

/// Virtual address of the first allocation: where a Linux process's `cudaMallocManaged` heap typically starts.
pub const HEAP_BASE: u64 = 0x7f00_0000_0000;
/// Largest factor accepted by [`WorkloadSize::Scale`]: beyond it the generators' own memory runs to gigabytes.
pub const MAX_SCALE: f64 = 16.0;

/// One of the paper's seven irregular applications.
///
/// Sizes per variant: footprint (the sum of the allocations) and accesses generated, Quick / Default (seed 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// graphBIG BFS (topology-driven, thread-centric): one kernel per level over all vertices; a vertex on the
    /// current level reads its CSR offsets (8 B), its neighbour ids (8 B) and their levels (4 B) and writes the
    /// levels it discovers. Rooted at the highest-degree vertex. R-MAT (edge factor 16) scale 17: 17.5 MiB,
    /// 4.3 M accesses / scale 20: 140 MiB, 34 M.
    Bfs,
    /// graphBIG SSSP (topology-driven Bellman-Ford): per iteration, vertices whose distance changed relax their
    /// out-edges with `atomicMin` on a shadow distance array (reading offsets, ids and 4-byte weights), then a
    /// second kernel folds the shadow in and sets the next mask. Weights uniform in 1..=16 unless the graph file
    /// has some. R-MAT scale 17: 26 MiB, 9.0 M accesses / scale 19: 104.5 MiB, 36 M.
    Sssp,
    /// Rodinia Needleman-Wunsch: 16 × 16 tiles of an (n+1) × (n+1) score matrix and reference matrix (4-byte
    /// ints) swept in anti-diagonal wavefronts, one 16-thread block per tile, one kernel per diagonal.
    /// n = 2048: 32 MiB, 1.1 M accesses / n = 5120: 200 MiB, 6.7 M (NW touches each line only a few times).
    Nw,
    /// Rodinia Gaussian elimination (Fan1: the multipliers of column t; Fan2: the (n−t) × (n−t) trailing update
    /// with 4 × 4 thread blocks, rows across the warp) on float n × n matrices a and m and vector b, for every
    /// pivot row t = 0 ..= n−2 as Rodinia's host loop runs them (about 0.29·n³ accesses). n = 272: 0.57 MiB,
    /// 6.0 M accesses / n = 512: 2.0 MiB, 39 M.
    Gaussian,
    /// PolyBench/GPU ATAX, y = Aᵀ(Ax): kernel 1 gives each thread a row of A (strided across the warp), kernel 2
    /// a column (coalesced). Float n × n A. n = 2048: 16 MiB, 4.8 M accesses / n = 4096: 64 MiB, 19 M.
    Atax,
    /// Hetero-Mark PageRank: per iteration one thread per vertex reads its CSR offsets (4 B), neighbour ids and
    /// values (4 B each) and the neighbours' ranks, and writes its new rank, ping-ponging two rank vectors;
    /// 10 iterations. R-MAT with edge factor 4 (the rank vector gathered is 1/11 of the footprint, 3/11 of the GPU
    /// memory at 200%): scale 16: 2.75 MiB, 6.9 M accesses / scale 18: 11.0 MiB, 28 M.
    PageRank,
    /// Hetero-Mark BST: a host-built binary search tree of 32-byte nodes (random 64-bit keys) in one array; GPU
    /// threads insert further nodes, walking root to leaf and linking under a per-node lock, then look up random
    /// keys (half present). 512 Ki nodes, 32 Ki GPU inserts, 48 Ki lookups: 16.6 MiB, 3.1 M accesses / 4 Mi
    /// nodes, 192 Ki inserts, 320 Ki lookups: 132 MiB, 24 M.
    Bst,
}

impl WorkloadKind {
    /// All seven, in the paper's order.
    pub const ALL: [WorkloadKind; 7] = [
        Self::Bfs,
        Self::Sssp,
        Self::Nw,
        Self::Gaussian,
        Self::Atax,
        Self::PageRank,
        Self::Bst,
    ];

    /// Short lowercase name, as accepted by [`WorkloadKind::from_name`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Bfs => "bfs",
            Self::Sssp => "sssp",
            Self::Nw => "nw",
            Self::Gaussian => "gaussian",
            Self::Atax => "atax",
            Self::PageRank => "pagerank",
            Self::Bst => "bst",
        }
    }

    /// One line: what it computes and the suite it comes from.
    pub fn description(self) -> &'static str {
        match self {
            Self::Bfs => "Breadth-first search on a power-law graph (graphBIG)",
            Self::Sssp => "Single-source shortest paths, Bellman-Ford style (graphBIG)",
            Self::Nw => "Needleman-Wunsch DNA sequence alignment (Rodinia)",
            Self::Gaussian => "Gaussian elimination (Rodinia)",
            Self::Atax => "Matrix transpose and vector multiplication, y = A^T(Ax) (PolyBench)",
            Self::PageRank => "PageRank, sparse matrix-vector iterations (HeteroMark)",
            Self::Bst => "Binary search tree insertions and lookups (HeteroMark)",
        }
    }

    /// The workload called `s` (case-insensitive).
    pub fn from_name(s: &str) -> Result<Self, SimError> {
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| SimError::UnknownWorkload {
                name: s.to_string(),
                known: Self::ALL.map(Self::name).join(", "),
            })
    }

    /// Whether the workload runs on a graph, and so uses [`WorkloadParams::graph`].
    pub fn uses_graph(self) -> bool {
        matches!(self, Self::Bfs | Self::Sssp | Self::PageRank)
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How big a problem to generate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum WorkloadSize {
    /// Small: 1–9 million accesses (footprints 0.57–32 MiB, see [`WorkloadKind`]); for tests and quick looks.
    Quick,
    /// The study's size: 6.7–39 million accesses (footprints 2–200 MiB, see [`WorkloadKind`]).
    #[default]
    Default,
    /// The default footprint times this factor (0 < factor ≤ [`MAX_SCALE`]); dimensions round to what the
    /// kernels need (powers of two for R-MAT, whole tiles for NW).
    Scale(f64),
}

/// What to generate besides the workload itself.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadParams {
    /// Problem size.
    pub size: WorkloadSize,
    /// Seed of every random choice (graph, weights, keys): the same seed gives the same trace.
    pub seed: u64,
    /// Graph file for BFS, SSSP and PageRank instead of R-MAT (edge list `u v [w]` with `#`/`%` comments, or
    /// Matrix Market coordinate); the size then comes from the file. Other workloads ignore it.
    pub graph: Option<PathBuf>,
}

impl Default for WorkloadParams {
    fn default() -> Self {
        Self {
            size: WorkloadSize::Default,
            seed: 1,
            graph: None,
        }
    }
}

/// The managed allocations of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadInfo {
    /// Bytes of all allocations together (the problem size oversubscription ratios are taken against).
    pub footprint_bytes: u64,
    /// Each allocation's name and size in bytes, in allocation order.
    pub allocations: Vec<(String, u64)>,
}

impl WorkloadInfo {
    /// The address range of each allocation, in the order of [`WorkloadInfo::allocations`]: the first at
    /// [`HEAP_BASE`], each next one at the 2 MiB boundary that leaves at least a 2 MiB gap after the previous.
    pub fn ranges(&self) -> Vec<std::ops::Range<u64>> {
        let mut layout = Layout::new();
        self.allocations
            .iter()
            .map(|(name, bytes)| {
                let base = layout.alloc(name, *bytes);
                base..base + bytes
            })
            .collect()
    }
}

/// Places allocations the way [`WorkloadInfo::ranges`] documents.
#[derive(Debug)]
pub(crate) struct Layout {
    next: u64,
    allocations: Vec<(String, u64)>,
}

impl Layout {
    pub(crate) fn new() -> Self {
        Self {
            next: HEAP_BASE,
            allocations: Vec::new(),
        }
    }

    /// Base address of a new allocation of `bytes`.
    pub(crate) fn alloc(&mut self, name: &str, bytes: u64) -> u64 {
        let base = self.next;
        self.next = (base + bytes).div_ceil(BLOCK_BYTES) * BLOCK_BYTES + BLOCK_BYTES;
        self.allocations.push((name.to_string(), bytes));
        base
    }

    pub(crate) fn info(self) -> WorkloadInfo {
        WorkloadInfo {
            footprint_bytes: self.allocations.iter().map(|a| a.1).sum(),
            allocations: self.allocations,
        }
    }
}

/// The default-size multiplier a size stands for: `None` for Quick (which has its own dimensions).
pub(crate) fn factor(size: WorkloadSize) -> Result<Option<f64>, SimError> {
    match size {
        WorkloadSize::Quick => Ok(None),
        WorkloadSize::Default => Ok(Some(1.0)),
        WorkloadSize::Scale(f) if f.is_finite() && f > 0.0 && f <= MAX_SCALE => Ok(Some(f)),
        WorkloadSize::Scale(f) => Err(SimError::InvalidParameter(format!(
            "workload scale must be a number in (0, {MAX_SCALE}], not {f}"
        ))),
    }
}

/// A count that grows linearly with the footprint: `default × f`, at least `min`.
pub(crate) fn scaled(default: u64, f: f64, min: u64) -> u64 {
    ((default as f64 * f).round() as u64).max(min)
}

/// A matrix side that grows with the square root of the footprint, rounded to a multiple of `unit` (≥ `unit`).
pub(crate) fn scaled_side(default: u64, f: f64, unit: u64) -> u64 {
    let side = default as f64 * f.sqrt() / unit as f64;
    (side.round() as u64).max(1) * unit
}

/// The graph of a graph workload: the file if one was given, else R-MAT with `edge_factor` edges per vertex at
/// `quick` or `default` scale (a factor f adds round(log2 f) to the scale, as the footprint doubles with each).
pub(crate) fn graph_spec(
    params: &WorkloadParams,
    quick: u32,
    default: u32,
    edge_factor: u64,
) -> Result<GraphSpec, SimError> {
    let f = factor(params.size)?;
    if let Some(path) = &params.graph {
        return Ok(GraphSpec::File(path.clone()));
    }
    let scale = match f {
        None => quick,
        Some(f) => (i64::from(default) + f.log2().round() as i64)
            .clamp(4, i64::from(graph::MAX_RMAT_SCALE)) as u32,
    };
    Ok(GraphSpec::Rmat { scale, edge_factor })
}

/// Generates `kind` into a [`Trace`] named after it.
pub fn generate(kind: WorkloadKind, params: &WorkloadParams) -> Result<Trace, SimError> {
    let mut accesses = Vec::new();
    generate_into(kind, params, &mut |a| accesses.push(a))?;
    Ok(Trace {
        name: kind.name().to_string(),
        accesses,
    })
}

/// Streaming form of [`generate`]: the same accesses, pushed to `sink` in order without building a `Vec`. Errors
/// (a bad graph file, a bad scale) come before the first access.
pub fn generate_into(
    kind: WorkloadKind,
    params: &WorkloadParams,
    sink: &mut dyn FnMut(Access),
) -> Result<(), SimError> {
    let mut gpu = Gpu::new(sink);
    match kind {
        WorkloadKind::Bfs => bfs::run(params, &mut gpu),
        WorkloadKind::Sssp => sssp::run(params, &mut gpu),
        WorkloadKind::Nw => nw::run(params, &mut gpu),
        WorkloadKind::Gaussian => gaussian::run(params, &mut gpu),
        WorkloadKind::Atax => atax::run(params, &mut gpu),
        WorkloadKind::PageRank => pagerank::run(params, &mut gpu),
        WorkloadKind::Bst => bst::run(params, &mut gpu),
    }
}

/// The allocations `kind` would make: computed from the dimensions alone, except that a graph file is read.
pub fn info(kind: WorkloadKind, params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    match kind {
        WorkloadKind::Bfs => bfs::info(params),
        WorkloadKind::Sssp => sssp::info(params),
        WorkloadKind::Nw => nw::info(params),
        WorkloadKind::Gaussian => gaussian::info(params),
        WorkloadKind::Atax => atax::info(params),
        WorkloadKind::PageRank => pagerank::info(params),
        WorkloadKind::Bst => bst::info(params),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_and_separates() {
        let mut l = Layout::new();
        let a = l.alloc("a", 1);
        let b = l.alloc("b", BLOCK_BYTES);
        let c = l.alloc("c", 0);
        let d = l.alloc("d", 5);
        assert_eq!(a, HEAP_BASE);
        assert_eq!(b, HEAP_BASE + 2 * BLOCK_BYTES);
        assert_eq!(c, HEAP_BASE + 4 * BLOCK_BYTES);
        assert_eq!(d, HEAP_BASE + 5 * BLOCK_BYTES);
        let info = l.info();
        assert_eq!(info.footprint_bytes, 1 + BLOCK_BYTES + 5);
        let r = info.ranges();
        assert_eq!(r[1], b..b + BLOCK_BYTES);
        assert_eq!(r[3], d..d + 5);
    }

    #[test]
    fn scales() {
        assert_eq!(factor(WorkloadSize::Quick).unwrap(), None);
        assert_eq!(factor(WorkloadSize::Scale(2.0)).unwrap(), Some(2.0));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 17.0] {
            assert!(matches!(
                factor(WorkloadSize::Scale(bad)),
                Err(SimError::InvalidParameter(_))
            ));
        }
        assert_eq!(scaled_side(4096, 4.0, 16), 8192);
        assert_eq!(scaled_side(4096, 1e-9, 16), 16);
        let p = |f| WorkloadParams {
            size: WorkloadSize::Scale(f),
            ..WorkloadParams::default()
        };
        let rmat = |scale| GraphSpec::Rmat {
            scale,
            edge_factor: 16,
        };
        assert_eq!(graph_spec(&p(2.0), 10, 20, 16).unwrap(), rmat(21));
        assert_eq!(graph_spec(&p(0.26), 10, 20, 16).unwrap(), rmat(18));
        assert_eq!(graph_spec(&p(1e-9), 10, 20, 16).unwrap(), rmat(4));
        assert_eq!(
            graph_spec(&p(1.0), 10, 20, 4).unwrap(),
            GraphSpec::Rmat {
                scale: 20,
                edge_factor: 4
            }
        );
    }
}
