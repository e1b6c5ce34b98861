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
//! BFS, SSSP, NW, ATAX and BST, `Default` 64–200 MiB for them; Gaussian (0.57 / 2.0 MiB) and PageRank (2.2 /
//! 8.75 MiB) are far smaller because they run the whole algorithm (every pivot row; 10 iterations), whose
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
/// Largest factor accepted by [`WorkloadSize::Scale`]. Beyond 16 the generators' own memory (and a held trace, 4
/// bytes an access; the suite streams generated ones instead) runs to gigabytes; the paper-scale sizes
/// ([`paper_scale`]) need up to a few hundred.
pub const MAX_SCALE: f64 = 512.0;

/// Smallest GPU memory, in bytes, whose scaled L2 keeps [`crate::uvm::sim::MIN_L2_SETS`] sets of the paper's
/// 16-way, 128 B-line 3 MiB L2 (1536 sets): 256 / 1536 of the paper's 5935 MiB, about 989 MiB. The 2 MiB block's
/// floor of 16 pages needs only 1/32 of it, so the L2 decides.
pub fn min_proportional_gpu_bytes() -> u64 {
    use crate::uvm::cost::PAPER_GPU_MEMORY_BYTES;
    use crate::uvm::sim::MIN_L2_SETS;
    let paper_sets = 3 * 1024 * 1024 / (128 * 16);
    (PAPER_GPU_MEMORY_BYTES * MIN_L2_SETS).div_ceil(paper_sets)
}

/// The [`WorkloadSize::Scale`] factor at which `kind`'s footprint leaves, at oversubscription `max_ratio` (2.0 =
/// 200%), GPU memory of at least [`min_proportional_gpu_bytes`]: the smallest problem whose L2 and 2 MiB block are
/// in the paper's proportions at every ratio up to `max_ratio`. Err when that is beyond [`MAX_SCALE`] (Gaussian:
/// its accesses grow as n³, about 10¹³ at that footprint) or the ratio is not a number ≥ 0.
pub fn paper_scale(kind: WorkloadKind, max_ratio: f64) -> Result<f64, SimError> {
    if !(max_ratio.is_finite() && max_ratio >= 0.0) {
        return Err(SimError::InvalidParameter(format!(
            "the oversubscription ratio must be 0 or more, not {max_ratio}"
        )));
    }
    let default = info(kind, &WorkloadParams::default())?.footprint_bytes as f64;
    let needed = min_proportional_gpu_bytes() as f64 * (1.0 + max_ratio);
    // Graph sizes move in powers of two and matrix sides in tiles: ask for a little more so rounding down
    // cannot leave the problem short.
    let mut f = needed / default * 1.05;
    if kind.uses_graph() {
        // R-MAT scales move in doublings and round log2(f) to the nearest: take the next whole doubling.
        f = 2f64.powi(f.log2().ceil() as i32);
    }
    if f > MAX_SCALE {
        return Err(SimError::InvalidParameter(format!(
            "{kind} at the paper's proportions needs {f:.0}x its default footprint, beyond the generators' \
             limit of {MAX_SCALE}x"
        )));
    }
    Ok(f)
}

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
    /// 10 iterations. R-MAT with Graph500's edge factor 16 (the rank vector gathered is 1/35 of the footprint,
    /// 3/35 = 8.6% of the GPU memory at 200%): scale 14: 2.2 MiB / scale 16: 8.75 MiB.
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
    /// Small: 1–9 million accesses (footprints 0.57–32 MiB, see [`WorkloadKind`]); for tests. Its GPU memory is
    /// far below the paper's proportions (the L2 and block hit their floors), so studies use [`paper_scale`].
    Quick,
    /// The study's size: 6.7–39 million accesses (footprints 2–200 MiB, see [`WorkloadKind`]).
    #[default]
    Default,
    /// The default footprint times this factor (0 < factor ≤ [`MAX_SCALE`]); dimensions round to what the
    /// kernels need (powers of two for R-MAT, whole tiles for NW).
    Scale(f64),
    /// Each workload at its own [`paper_scale`] for oversubscription up to `max_ratio` (2.0 = 200%): the smallest
    /// problem whose scaled L2 and 2 MiB block keep the paper's proportions to GPU memory (issue 37).
    PaperScale {
        /// The largest ratio the problem must stay proportional at.
        max_ratio: f64,
    },
}

impl WorkloadParams {
    /// These parameters with [`WorkloadSize::PaperScale`] turned into `kind`'s own [`WorkloadSize::Scale`].
    pub fn resolved(&self, kind: WorkloadKind) -> Result<WorkloadParams, SimError> {
        match self.size {
            WorkloadSize::PaperScale { max_ratio } => Ok(WorkloadParams {
                size: WorkloadSize::Scale(paper_scale(kind, max_ratio)?),
                ..self.clone()
            }),
            _ => Ok(self.clone()),
        }
    }
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
        // Resolved per workload before a generator sees it (`WorkloadParams::resolved`).
        WorkloadSize::PaperScale { .. } => Err(SimError::InvalidParameter(
            "paper scale is a size per workload; resolve it first".into(),
        )),
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
    let params = &params.resolved(kind)?;
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
    let params = &params.resolved(kind)?;
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
    fn paper_scale_keeps_the_l2_at_its_floor_or_above() {
        use crate::uvm::cost::CostModel;
        use crate::uvm::policy::Policy;
        use crate::uvm::sim::{geometry, SimConfig, MIN_L2_SETS};
        let min = min_proportional_gpu_bytes();
        // 256 of the paper's 1536 sets: a sixth of 5935 MiB.
        assert!((min as f64 / (5935.0 * 1048576.0) - 256.0 / 1536.0).abs() < 1e-6);
        let page = CostModel::default().page_bytes;
        for kind in [WorkloadKind::Nw, WorkloadKind::Atax] {
            let f = paper_scale(kind, 3.0).unwrap();
            let p = WorkloadParams {
                size: WorkloadSize::Scale(f),
                ..WorkloadParams::default()
            };
            let footprint = info(kind, &p).unwrap().footprint_bytes;
            for ratio in [2.0, 3.0] {
                let capacity = (footprint / page) as f64 / (1.0 + ratio);
                let g = geometry(&SimConfig::new(Policy::DynaMap, ratio), capacity as u64);
                assert!(g.proportional, "{kind} at {ratio}: {g:?}");
                assert!(g.l2_bytes >= MIN_L2_SETS * 128 * 16);
                assert!(g.block_bytes >= 16 * page);
            }
        }
        // Gaussian's n³ accesses put it out of reach: a typed error, not a panic.
        assert!(paper_scale(WorkloadKind::Gaussian, 3.0).is_err());
        assert!(paper_scale(WorkloadKind::Nw, f64::NAN).is_err());
    }

    #[test]
    fn paper_scale_sweep_file_matches_the_simulator() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/uvm-paper-scale.toml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut workload = None;
        let mut checked = 0;
        let mut wrong = Vec::new();
        for line in text.lines() {
            if let Some(w) = line.strip_prefix("workloads = [\"") {
                workload = Some(WorkloadKind::from_name(w.trim_end_matches("\"]")).unwrap());
            }
            if let Some(v) = line.strip_prefix("scale = ") {
                let kind = workload.take().unwrap();
                let want = paper_scale(kind, 3.0).unwrap();
                let got: f64 = v.trim().parse().unwrap();
                if (got / want - 1.0).abs() >= 1e-3 {
                    wrong.push(format!(
                        "{kind}: the file says {got}, paper_scale {want:.4}"
                    ));
                }
                checked += 1;
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("; "));
        assert_eq!(checked, 6);
    }

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
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_SCALE + 1.0] {
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
