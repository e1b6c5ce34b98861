//! Graphs for BFS, SSSP and PageRank: a CSR adjacency, the R-MAT (Kronecker) generator, and readers for edge lists
//! and Matrix Market files.

use std::path::{Path, PathBuf};

use crate::rng::Rng;
use crate::uvm::SimError;

/// Edges per vertex of the synthetic graphs unless a workload asks for another: Graph500's edge factor, 16, which
/// BFS and SSSP keep.
pub(crate) const EDGE_FACTOR: u64 = 16;
/// Largest edge factor accepted, so that a scale and a factor together cannot ask for more than 2^36 edges.
pub(crate) const MAX_EDGE_FACTOR: u64 = 64;
/// R-MAT quadrant probabilities (Graph500's): top-left, top-right, bottom-left; bottom-right takes the rest.
const RMAT_ABC: [f64; 3] = [0.57, 0.19, 0.19];
/// Largest R-MAT scale accepted: 2^30 vertices (16 Gi edges) is already beyond any machine this runs on.
pub(crate) const MAX_RMAT_SCALE: u32 = 30;
/// Largest vertex count accepted from a Matrix Market size line (64 Mi), so that a bogus header cannot make the
/// generator allocate gigabytes of per-vertex arrays.
pub(crate) const MAX_FILE_VERTICES: u64 = 1 << 26;

/// A directed graph in compressed sparse row form, the layout graphBIG and Hetero-Mark hand to the GPU.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Graph {
    /// `offsets[v]..offsets[v + 1]` index the out-edges of `v`; `vertices + 1` entries.
    offsets: Vec<u64>,
    /// Edge targets, grouped by source.
    targets: Vec<u32>,
    /// Edge weights in the order of `targets`, when the file gave them.
    weights: Option<Vec<f32>>,
}

impl Graph {
    /// The graph on `n` vertices with the given edges (and their weights), keeping the edge order within a source.
    fn from_edges(n: usize, edges: &[(u32, u32)], weights: Option<&[f32]>) -> Self {
        let mut offsets = vec![0u64; n + 1];
        for &(s, _) in edges {
            if let Some(o) = offsets.get_mut(s as usize + 1) {
                *o += 1;
            }
        }
        for i in 1..offsets.len() {
            offsets[i] += offsets[i - 1];
        }
        let mut fill: Vec<u64> = offsets[..n].to_vec();
        let mut targets = vec![0u32; edges.len()];
        let mut ws = weights.map(|_| vec![0f32; edges.len()]);
        for (e, &(s, d)) in edges.iter().enumerate() {
            let Some(at) = fill.get_mut(s as usize) else {
                continue;
            };
            let pos = *at as usize;
            *at += 1;
            if let Some(t) = targets.get_mut(pos) {
                *t = d;
            }
            if let (Some(ws), Some(src)) = (ws.as_mut(), weights) {
                if let (Some(w), Some(&v)) = (ws.get_mut(pos), src.get(e)) {
                    *w = v;
                }
            }
        }
        Self {
            offsets,
            targets,
            weights: ws,
        }
    }

    /// Vertices.
    pub(crate) fn vertices(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Edges.
    pub(crate) fn edges(&self) -> usize {
        self.targets.len()
    }

    /// Edge index range of `v`'s out-edges.
    pub(crate) fn edge_range(&self, v: usize) -> (u64, u64) {
        let start = self.offsets.get(v).copied().unwrap_or(0);
        let end = self.offsets.get(v + 1).copied().unwrap_or(start);
        (start, end)
    }

    /// Target of edge `e`.
    pub(crate) fn target(&self, e: u64) -> u32 {
        self.targets.get(e as usize).copied().unwrap_or(0)
    }

    /// Weights from the file, if it had them.
    pub(crate) fn weights(&self) -> Option<&[f32]> {
        self.weights.as_deref()
    }

    /// The vertex with the most out-edges (the lowest such): the traversal root, so that a search reaches the
    /// giant component of a power-law graph rather than an isolated vertex.
    pub(crate) fn hub(&self) -> usize {
        let mut best = (0u64, 0usize);
        for v in 0..self.vertices() {
            let (s, e) = self.edge_range(v);
            if e - s > best.0 {
                best = (e - s, v);
            }
        }
        best.1
    }
}

/// Where a graph workload's graph comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GraphSpec {
    /// R-MAT with 2^scale vertices and `edge_factor` × 2^scale edges.
    Rmat {
        /// log2 of the vertex count.
        scale: u32,
        /// Edges per vertex ([`EDGE_FACTOR`] for Graph500's); clamped to 1..=[`MAX_EDGE_FACTOR`].
        edge_factor: u64,
    },
    /// An edge list or Matrix Market file.
    File(PathBuf),
}

impl GraphSpec {
    /// The graph itself; `seed` drives R-MAT.
    pub(crate) fn load(&self, seed: u64) -> Result<Graph, SimError> {
        match self {
            Self::Rmat { scale, edge_factor } => Ok(rmat(*scale, *edge_factor, seed)),
            Self::File(path) => read(path),
        }
    }

    /// Vertex and edge counts: free for R-MAT, a parse for a file.
    pub(crate) fn counts(&self) -> Result<(u64, u64), SimError> {
        match self {
            Self::Rmat { scale, edge_factor } => {
                let n = 1u64 << scale.min(&MAX_RMAT_SCALE);
                Ok((n, n * clamp_edge_factor(*edge_factor)))
            }
            Self::File(path) => {
                let g = read(path)?;
                Ok((g.vertices() as u64, g.edges() as u64))
            }
        }
    }
}

/// Draws R-MAT edges: each level picks a quadrant (a source bit and a target bit). Two levels at a time come from
/// one 16-bit random number through a table of the 16 joint outcomes, which is several times faster than a
/// branch per level and off the true probabilities by less than 2^-16 each.
struct RmatSampler {
    scale: u32,
    /// For each 16-bit value: source bits << 2 | target bits of two levels.
    pairs: Vec<u8>,
    /// Single-level thresholds (cumulative a, a+b, a+b+c in units of 2^-16) for an odd last level.
    single: [u32; 3],
}

impl RmatSampler {
    fn new(scale: u32) -> Self {
        let [a, b, c] = RMAT_ABC;
        // Quadrant q = source bit << 1 | target bit, probability p[q].
        let p = [a, b, c, 1.0 - a - b - c];
        let mut pairs = Vec::with_capacity(1 << 16);
        let mut cumulative = 0.0;
        for q1 in 0..4u8 {
            for q2 in 0..4u8 {
                cumulative += p[q1 as usize] * p[q2 as usize];
                let upto = ((cumulative * 65536.0).round() as usize).min(1 << 16);
                let code = ((q1 >> 1) << 3) | ((q2 >> 1) << 2) | ((q1 & 1) << 1) | (q2 & 1);
                while pairs.len() < upto {
                    pairs.push(code);
                }
            }
        }
        pairs.resize(1 << 16, 0b1111);
        let single = [
            (a * 65536.0).round() as u32,
            ((a + b) * 65536.0).round() as u32,
            ((a + b + c) * 65536.0).round() as u32,
        ];
        Self {
            scale,
            pairs,
            single,
        }
    }

    fn edge(&self, rng: &mut Rng) -> (u32, u32) {
        let (mut src, mut dst) = (0u32, 0u32);
        let mut level = 0;
        while level + 2 <= self.scale {
            let bits = rng.next_u64();
            for chunk in 0..4 {
                if level + 2 > self.scale {
                    break;
                }
                let r = ((bits >> (16 * chunk)) & 0xffff) as usize;
                let code = u32::from(self.pairs.get(r).copied().unwrap_or(0));
                src = (src << 2) | (code >> 2);
                dst = (dst << 2) | (code & 3);
                level += 2;
            }
        }
        if level < self.scale {
            let r = (rng.next_u64() & 0xffff) as u32;
            let [ta, tab, tabc] = self.single;
            src = (src << 1) | u32::from(r >= tab);
            dst = (dst << 1) | (u32::from(r >= ta) ^ u32::from(r >= tab) | u32::from(r >= tabc));
        }
        (src, dst)
    }
}

/// A random permutation of `0..2^bits` computed rather than stored: multiplications by odd numbers and
/// xor-shifts are bijections modulo a power of two, so their composition is one, and it scatters neighbouring
/// labels far apart.
#[derive(Debug, Clone, Copy)]
struct Relabel {
    mask: u64,
    shift: u32,
    mul: [u64; 2],
    xor: u64,
}

impl Relabel {
    fn new(bits: u32, rng: &mut Rng) -> Self {
        Self {
            mask: (1u64 << bits) - 1,
            shift: (bits / 2).max(1),
            mul: [rng.next_u64() | 1, rng.next_u64() | 1],
            xor: rng.next_u64(),
        }
    }

    fn apply(&self, v: u32) -> u32 {
        let mut x = u64::from(v);
        for m in self.mul {
            x = x.wrapping_mul(m) & self.mask;
            x ^= x >> self.shift;
        }
        ((x ^ self.xor) & self.mask) as u32
    }
}

/// The edge factor actually used for a requested one: 1..=[`MAX_EDGE_FACTOR`].
fn clamp_edge_factor(edge_factor: u64) -> u64 {
    edge_factor.clamp(1, MAX_EDGE_FACTOR)
}

/// An R-MAT graph with 2^scale vertices and `edge_factor` × 2^scale directed edges (the factor clamped to
/// 1..=[`MAX_EDGE_FACTOR`]), vertex labels randomly permuted as Graph500 does (so that the hubs do not all sit at
/// the low addresses). Duplicate edges and self-loops are kept, as the generator makes them: the kernels cope,
/// and the edge count stays exactly known. The edges are drawn one after another from one random stream, so for
/// the same scale and seed a lower factor keeps the first edges a higher one draws.
pub(crate) fn rmat(scale: u32, edge_factor: u64, seed: u64) -> Graph {
    let scale = scale.min(MAX_RMAT_SCALE);
    let n = 1usize << scale;
    let m = n * clamp_edge_factor(edge_factor) as usize;
    if m >= REDRAW_EDGES {
        return rmat_bucketed(scale, m, seed);
    }
    let mut rng = Rng::new(seed);
    let relabel = Relabel::new(scale, &mut rng);
    let sampler = RmatSampler::new(scale);
    let mut edges: Vec<u64> = (0..m)
        .map(|_| {
            let (s, d) = sampler.edge(&mut rng);
            (u64::from(relabel.apply(s)) << 32) | u64::from(relabel.apply(d))
        })
        .collect();
    // Group by source with a stable LSD radix sort on the source label: streaming passes instead of a random
    // scatter per edge, several times faster once the arrays outgrow the caches.
    let mut spare = vec![0u64; m];
    let mut shift = 32;
    while shift < 32 + scale {
        let bits = (32 + scale - shift).min(11);
        let digit = |x: u64| ((x >> shift) & ((1 << bits) - 1)) as usize;
        let mut starts = vec![0usize; (1 << bits) + 1];
        for &x in &edges {
            if let Some(c) = starts.get_mut(digit(x) + 1) {
                *c += 1;
            }
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        for &x in &edges {
            if let Some(at) = starts.get_mut(digit(x)) {
                if let Some(slot) = spare.get_mut(*at) {
                    *slot = x;
                }
                *at += 1;
            }
        }
        std::mem::swap(&mut edges, &mut spare);
        shift += bits;
    }
    drop(spare);
    let mut offsets = vec![0u64; n + 1];
    for &x in &edges {
        if let Some(o) = offsets.get_mut((x >> 32) as usize + 1) {
            *o += 1;
        }
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    Graph {
        offsets,
        targets: edges.iter().map(|&x| x as u32).collect(),
        weights: None,
    }
}

/// Edges from which [`rmat`] draws them twice instead of sorting a stored list: the sort holds 16 bytes an edge
/// (the 8-byte pairs and its spare), 2 GiB at 2^27 edges and 8 GiB at PageRank's paper-scale graph (R-MAT scale
/// 25, 2^29 edges), where [`rmat_bucketed`] holds 10 bytes an edge at its peak (5 GiB there).
const REDRAW_EDGES: usize = 1 << 27;

/// [`rmat`]'s graph with less memory: one pass of the random stream counts the edges of each bucket of sources
/// (the top bits of the source label), a second (the same stream again) puts each edge's target and the low bits
/// of its source in its bucket's next slot, and each bucket, a few megabytes, is then counted and filled by source
/// in the caches. A random fill of the whole graph instead (one cache and TLB miss per edge) took minutes at scale
/// 25. The stable sort by source keeps a source's edges in the order drawn, and so does every step here, so the
/// graph is the same.
fn rmat_bucketed(scale: u32, m: usize, seed: u64) -> Graph {
    let n = 1usize << scale;
    // Low source bits per bucket: at most 16, so they fit a u16; 2^14 sources make buckets of 16 edges a source
    // (at Graph500's factor) times 2^14, 1.5 MiB of targets and low bits.
    let low = scale.min(14);
    let buckets = 1usize << (scale - low);
    let low_mask = (1u32 << low) - 1;
    let sampler = RmatSampler::new(scale);
    let start = || {
        let mut rng = Rng::new(seed);
        let relabel = Relabel::new(scale, &mut rng);
        (rng, relabel)
    };
    let mut next = vec![0usize; buckets + 1];
    let (mut rng, relabel) = start();
    for _ in 0..m {
        let (s, _) = sampler.edge(&mut rng);
        if let Some(c) = next.get_mut((relabel.apply(s) >> low) as usize + 1) {
            *c += 1;
        }
    }
    for i in 1..next.len() {
        next[i] += next[i - 1];
    }
    let bounds = next.clone();
    let mut dst = vec![0u32; m];
    let mut src_low = vec![0u16; m];
    let (mut rng, relabel) = start();
    for _ in 0..m {
        let (s, d) = sampler.edge(&mut rng);
        let s = relabel.apply(s);
        if let Some(at) = next.get_mut((s >> low) as usize) {
            if let (Some(t), Some(l)) = (dst.get_mut(*at), src_low.get_mut(*at)) {
                *t = relabel.apply(d);
                *l = (s & low_mask) as u16;
            }
            *at += 1;
        }
    }
    let mut offsets = vec![0u64; n + 1];
    for b in 0..buckets {
        let (Some(&lo), Some(&hi)) = (bounds.get(b), bounds.get(b + 1)) else {
            continue;
        };
        for &l in src_low.get(lo..hi).unwrap_or_default() {
            if let Some(o) = offsets.get_mut((b << low) + usize::from(l) + 1) {
                *o += 1;
            }
        }
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    let mut targets = vec![0u32; m];
    let mut fill: Vec<u64> = Vec::with_capacity(1 << low);
    for b in 0..buckets {
        let (Some(&lo), Some(&hi)) = (bounds.get(b), bounds.get(b + 1)) else {
            continue;
        };
        fill.clear();
        fill.extend_from_slice(offsets.get(b << low..(b + 1) << low).unwrap_or_default());
        let edges = src_low.get(lo..hi).unwrap_or_default().iter();
        for (&l, &d) in edges.zip(dst.get(lo..hi).unwrap_or_default()) {
            if let Some(at) = fill.get_mut(usize::from(l)) {
                if let Some(t) = targets.get_mut(*at as usize) {
                    *t = d;
                }
                *at += 1;
            }
        }
    }
    Graph {
        offsets,
        targets,
        weights: None,
    }
}

/// Reads an edge list or a Matrix Market file (told apart by the `%%MatrixMarket` banner).
pub(crate) fn read(path: &Path) -> Result<Graph, SimError> {
    let bytes = std::fs::read(path).map_err(|e| SimError::io(path, e))?;
    parse(path, &bytes)
}

/// The lines of a file, numbered from 1, without line terminators.
fn lines<'a>(
    path: &'a Path,
    bytes: &'a [u8],
) -> impl Iterator<Item = Result<(usize, &'a str), SimError>> + 'a {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .map(move |(i, raw)| {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            std::str::from_utf8(raw)
                .map(|s| (i + 1, s))
                .map_err(|_| SimError::bad_file(path, format!("line {}", i + 1), "not UTF-8 text"))
        })
}

/// Parses graph file contents; `path` only names the file in errors.
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Graph, SimError> {
    let banner = bytes.get(..14).unwrap_or(&[]);
    if banner.eq_ignore_ascii_case(b"%%MatrixMarket") {
        parse_matrix_market(path, bytes)
    } else {
        parse_edge_list(path, bytes)
    }
}

fn bad(path: &Path, line: usize, reason: impl Into<String>) -> SimError {
    SimError::bad_file(path, format!("line {line}"), reason)
}

fn parse_weight(path: &Path, line: usize, tok: &str) -> Result<f32, SimError> {
    match tok.parse::<f64>() {
        Ok(w) if w.is_finite() => Ok(w as f32),
        _ => Err(bad(
            path,
            line,
            format!("`{tok}` is not a weight (a finite number)"),
        )),
    }
}

/// `u v [w]` per line, `#` or `%` comments; vertex ids are any non-negative integers and are renumbered densely in
/// increasing order (SNAP files leave gaps). A weight column, if the first edge has one, is required on all.
fn parse_edge_list(path: &Path, bytes: &[u8]) -> Result<Graph, SimError> {
    let mut raw: Vec<(u64, u64)> = Vec::new();
    let mut weights: Vec<f32> = Vec::new();
    let mut weighted: Option<bool> = None;
    let mut last_line = 1;
    for item in lines(path, bytes) {
        let (no, line) = item?;
        last_line = no;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with('%') {
            continue;
        }
        let mut tok = t.split_ascii_whitespace();
        let (Some(u), Some(v)) = (tok.next(), tok.next()) else {
            return Err(bad(
                path,
                no,
                format!("expected `u v [weight]`, found `{t}`"),
            ));
        };
        let id = |s: &str| {
            s.parse::<u64>().map_err(|_| {
                bad(
                    path,
                    no,
                    format!("`{s}` is not a vertex id (a non-negative integer)"),
                )
            })
        };
        raw.push((id(u)?, id(v)?));
        let w = tok.next();
        let has_weight = *weighted.get_or_insert(w.is_some());
        if has_weight {
            let Some(w) = w else {
                return Err(bad(
                    path,
                    no,
                    "missing the weight column (the first edge has one)",
                ));
            };
            weights.push(parse_weight(path, no, w)?);
        }
    }
    if raw.is_empty() {
        return Err(bad(path, last_line, "no edges in the file"));
    }
    let mut ids: Vec<u64> = raw.iter().flat_map(|&(u, v)| [u, v]).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > u32::MAX as usize {
        return Err(bad(path, last_line, "more than 2^32 - 1 distinct vertices"));
    }
    let dense = |x: u64| ids.binary_search(&x).unwrap_or(0) as u32;
    let edges: Vec<(u32, u32)> = raw.iter().map(|&(u, v)| (dense(u), dense(v))).collect();
    let w = weighted.unwrap_or(false).then_some(weights.as_slice());
    Ok(Graph::from_edges(ids.len(), &edges, w))
}

/// `%%MatrixMarket matrix coordinate FIELD SYMMETRY`, `%` comments, a `rows cols entries` line, then 1-based
/// `i j [value]` entries: entry (i, j) is the edge i → j, and symmetric storage stands for both directions.
fn parse_matrix_market(path: &Path, bytes: &[u8]) -> Result<Graph, SimError> {
    let mut it = lines(path, bytes);
    let header = match it.next() {
        Some(item) => item?.1.to_ascii_lowercase(),
        None => return Err(bad(path, 1, "empty file")),
    };
    let fields: Vec<&str> = header.split_ascii_whitespace().collect();
    let [_, object, format, field, symmetry] = fields.as_slice() else {
        return Err(bad(
            path,
            1,
            "expected the header `%%MatrixMarket matrix coordinate FIELD SYMMETRY`",
        ));
    };
    if *object != "matrix" {
        return Err(bad(
            path,
            1,
            format!("a `{object}` is not a graph; expected `matrix`"),
        ));
    }
    match *format {
        "coordinate" => {}
        "array" => {
            return Err(bad(
                path,
                1,
                "a dense `array` matrix is not a graph; expected `coordinate`",
            ))
        }
        other => {
            return Err(bad(
                path,
                1,
                format!("unknown format `{other}`; expected `coordinate`"),
            ))
        }
    }
    let values = match *field {
        "real" | "double" | "integer" => 1,
        "complex" => 2,
        "pattern" => 0,
        other => return Err(bad(path, 1, format!("unknown field `{other}`"))),
    };
    let mirror = match *symmetry {
        "general" => false,
        "symmetric" | "skew-symmetric" | "hermitian" => true,
        other => return Err(bad(path, 1, format!("unknown symmetry `{other}`"))),
    };

    let mut size: Option<(u64, u64, u64)> = None;
    let mut edges: Vec<(u32, u32)> = Vec::new();
    let mut weights: Vec<f32> = Vec::new();
    let mut entries = 0u64;
    let mut last_line = 1;
    for item in it {
        let (no, line) = item?;
        last_line = no;
        let t = line.trim();
        if t.is_empty() || t.starts_with('%') {
            continue;
        }
        let tok: Vec<&str> = t.split_ascii_whitespace().collect();
        let Some((rows, cols, nnz)) = size else {
            let parsed: Vec<u64> = tok.iter().filter_map(|s| s.parse().ok()).collect();
            let [rows, cols, nnz] = parsed.as_slice() else {
                return Err(bad(
                    path,
                    no,
                    format!("expected the size line `rows cols entries`, found `{t}`"),
                ));
            };
            if tok.len() != 3 {
                return Err(bad(
                    path,
                    no,
                    format!("expected the size line `rows cols entries`, found `{t}`"),
                ));
            }
            let n = (*rows).max(*cols);
            if n == 0 {
                return Err(bad(path, no, "the matrix has no rows"));
            }
            if n > MAX_FILE_VERTICES {
                return Err(bad(
                    path,
                    no,
                    format!("{n} vertices is more than the {MAX_FILE_VERTICES} supported"),
                ));
            }
            // Trust the declared count only as far as the file could hold it.
            let cap = (*nnz).min(bytes.len() as u64 / 4) as usize;
            edges.reserve(if mirror { 2 * cap } else { cap });
            size = Some((*rows, *cols, *nnz));
            continue;
        };
        if entries == nnz {
            return Err(bad(
                path,
                no,
                format!("more entries than the {nnz} the size line declares"),
            ));
        }
        entries += 1;
        if tok.len() < 2 + values {
            return Err(bad(
                path,
                no,
                format!("expected `i j` and {values} value(s), found `{t}`"),
            ));
        }
        let index = |s: &str, max: u64, what: &str| match s.parse::<u64>() {
            Ok(i) if (1..=max).contains(&i) => Ok((i - 1) as u32),
            _ => Err(bad(
                path,
                no,
                format!("{what} index `{s}` is not in 1..={max}"),
            )),
        };
        let i = index(tok.first().copied().unwrap_or(""), rows, "row")?;
        let j = index(tok.get(1).copied().unwrap_or(""), cols, "column")?;
        let w = match tok.get(2) {
            Some(v) if values > 0 => Some(parse_weight(path, no, v)?),
            _ => None,
        };
        edges.push((i, j));
        if let Some(w) = w {
            weights.push(w);
        }
        if mirror && i != j {
            edges.push((j, i));
            if let Some(w) = w {
                weights.push(w);
            }
        }
    }
    let Some((rows, cols, nnz)) = size else {
        return Err(bad(
            path,
            last_line,
            "missing the size line `rows cols entries`",
        ));
    };
    if entries < nnz {
        return Err(bad(
            path,
            last_line,
            format!("the size line declares {nnz} entries but the file has {entries}"),
        ));
    }
    if edges.is_empty() {
        return Err(bad(path, last_line, "no edges in the file"));
    }
    let n = rows.max(cols) as usize;
    let w = (values > 0).then_some(weights.as_slice());
    Ok(Graph::from_edges(n, &edges, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Graph, SimError> {
        parse(Path::new("g.txt"), text.as_bytes())
    }

    fn location(e: SimError) -> (String, String) {
        match e {
            SimError::BadFile {
                location, reason, ..
            } => (location, reason),
            other => panic!("expected BadFile, got {other}"),
        }
    }

    fn adjacency(g: &Graph) -> Vec<Vec<u32>> {
        (0..g.vertices())
            .map(|v| {
                let (s, e) = g.edge_range(v);
                (s..e).map(|e| g.target(e)).collect()
            })
            .collect()
    }

    #[test]
    fn rmat_has_the_promised_shape_and_is_deterministic() {
        let g = rmat(10, EDGE_FACTOR, 7);
        assert_eq!(g.vertices(), 1024);
        assert_eq!(g.edges(), 16 * 1024);
        assert_eq!(g, rmat(10, EDGE_FACTOR, 7));
        assert_ne!(g, rmat(10, EDGE_FACTOR, 8));
        assert!(g.targets.iter().all(|&t| t < 1024));
        // Skewed: the hub has far more than the average 16 edges.
        let (s, e) = g.edge_range(g.hub());
        assert!(e - s > 100, "hub degree {}", e - s);
    }

    #[test]
    fn drawing_twice_in_buckets_gives_the_sorted_graph() {
        // One bucket, and (scale 17) eight of 2^14 sources each.
        for (scale, factor, seed) in [(10, EDGE_FACTOR, 7), (9, 4, 2), (5, 1, 1), (17, 2, 3)] {
            let m = (1usize << scale) * clamp_edge_factor(factor) as usize;
            assert_eq!(rmat_bucketed(scale, m, seed), rmat(scale, factor, seed));
        }
    }

    #[test]
    fn rmat_edge_factor_sets_the_edge_count() {
        for (factor, edges) in [(4, 4 * 1024), (1, 1024), (0, 1024), (1000, 64 * 1024)] {
            let g = rmat(10, factor, 3);
            assert_eq!(g.edges(), edges, "factor {factor}");
            assert_eq!(
                GraphSpec::Rmat {
                    scale: 10,
                    edge_factor: factor
                }
                .counts()
                .unwrap(),
                (1024, edges as u64)
            );
        }
        let g = rmat(12, 4, 9);
        assert_eq!(g, rmat(12, 4, 9));
        let (s, e) = g.edge_range(g.hub());
        assert!(e - s > 40, "hub degree {}", e - s);
    }

    #[test]
    fn relabel_is_a_permutation() {
        for bits in [1u32, 4, 11] {
            let r = Relabel::new(bits, &mut Rng::new(u64::from(bits)));
            let mut seen: Vec<u32> = (0..1u32 << bits).map(|v| r.apply(v)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..1u32 << bits).collect::<Vec<_>>());
        }
    }

    #[test]
    fn rmat_sampler_follows_the_quadrant_probabilities() {
        for scale in [1u32, 2, 5] {
            let sampler = RmatSampler::new(scale);
            let mut rng = Rng::new(1);
            let trials = 200_000;
            let mut quadrant = [0u32; 4];
            for _ in 0..trials {
                let (s, d) = sampler.edge(&mut rng);
                assert!(s < 1 << scale && d < 1 << scale);
                // The top level's quadrant.
                let q = ((s >> (scale - 1)) << 1) | (d >> (scale - 1));
                quadrant[q as usize] += 1;
            }
            for (q, want) in [0.57, 0.19, 0.19, 0.05].into_iter().enumerate() {
                let got = f64::from(quadrant[q]) / f64::from(trials);
                assert!(
                    (got - want).abs() < 0.005,
                    "scale {scale} quadrant {q}: {got}"
                );
            }
        }
    }

    #[test]
    fn edge_list_with_gaps_comments_and_weights() {
        let g = p("# comment\n% other\n\n10 20 1.5\r\n20 30 2\n10 30 -1\n").unwrap();
        assert_eq!(g.vertices(), 3);
        assert_eq!(adjacency(&g), vec![vec![1, 2], vec![2], vec![]]);
        assert_eq!(g.weights(), Some(&[1.5f32, -1.0, 2.0][..]));
        let g = p("0 1\n1 2 extra\n").unwrap();
        assert_eq!(g.weights(), None);
        assert_eq!(g.edges(), 2);
    }

    #[test]
    fn edge_list_errors_name_the_line() {
        let (loc, why) = location(p("0 1\n\n1 x\n").unwrap_err());
        assert_eq!(loc, "line 3");
        assert!(why.contains("`x`"), "{why}");
        let (loc, _) = location(p("0 1 2\n1 2\n").unwrap_err());
        assert_eq!(loc, "line 2");
        let (loc, _) = location(p("0 1 2\n1 2 nan\n").unwrap_err());
        assert_eq!(loc, "line 2");
        let (loc, _) = location(p("0\n").unwrap_err());
        assert_eq!(loc, "line 1");
        let (_, why) = location(p("# nothing\n").unwrap_err());
        assert!(why.contains("no edges"));
        let (loc, why) = location(parse(Path::new("g"), b"0 1\n\xff\xfe 2\n").unwrap_err());
        assert_eq!(loc, "line 2");
        assert!(why.contains("UTF-8"));
        let (_, why) = location(p("-1 2\n").unwrap_err());
        assert!(why.contains("vertex id"));
    }

    #[test]
    fn matrix_market_general_symmetric_and_pattern() {
        let g = p(
            "%%MatrixMarket matrix coordinate real general\n% c\n3 3 3\n1 2 0.5\n3 1 2\n2 2 1\n",
        )
        .unwrap();
        assert_eq!(adjacency(&g), vec![vec![1], vec![1], vec![0]]);
        assert_eq!(g.weights(), Some(&[0.5f32, 1.0, 2.0][..]));
        let g = p("%%matrixmarket MATRIX coordinate pattern symmetric\n4 4 2\n2 1\n3 3\n").unwrap();
        assert_eq!(g.vertices(), 4);
        assert_eq!(adjacency(&g), vec![vec![1], vec![0], vec![2], vec![]]);
        assert_eq!(g.weights(), None);
        let g =
            p("%%MatrixMarket matrix coordinate complex general\n2 3 1\n1 3 1.0 -2.0\n").unwrap();
        assert_eq!(g.vertices(), 3);
        assert_eq!(adjacency(&g), vec![vec![2], vec![], vec![]]);
    }

    #[test]
    fn matrix_market_errors_name_the_line() {
        let cases = [
            (
                "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
                "line 1",
                "array",
            ),
            (
                "%%MatrixMarket vector coordinate real general\n",
                "line 1",
                "vector",
            ),
            (
                "%%MatrixMarket matrix coordinate real\n",
                "line 1",
                "header",
            ),
            (
                "%%MatrixMarket matrix coordinate real general\n%\n2 2\n",
                "line 3",
                "size line",
            ),
            (
                "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n",
                "line 3",
                "row index",
            ),
            (
                "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 0 1.0\n",
                "line 3",
                "column index",
            ),
            (
                "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1\n",
                "line 3",
                "value",
            ),
            (
                "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n2 2 1\n",
                "line 4",
                "more entries",
            ),
            (
                "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n",
                "line 4",
                "declares 3",
            ),
            (
                "%%MatrixMarket matrix coordinate pattern general\n",
                "line 2",
                "size line",
            ),
            (
                "%%MatrixMarket matrix coordinate pattern general\n999999999999 1 1\n1 1\n",
                "line 2",
                "supported",
            ),
            (
                "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 x\n",
                "line 3",
                "`x`",
            ),
        ];
        for (text, want_loc, want_reason) in cases {
            let (loc, why) = location(p(text).unwrap_err());
            assert_eq!(loc, want_loc, "{text}");
            assert!(why.contains(want_reason), "{text}: {why}");
        }
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let e = read(Path::new("/nonexistent/graph.el")).unwrap_err();
        assert!(matches!(e, SimError::Io { .. }), "{e}");
    }
}
