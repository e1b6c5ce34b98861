//! Hetero-Mark BST (`bst_cuda`): a binary search tree whose nodes live in one managed array, in insertion order.
//! The host builds the tree from the first nodes (not traced: CPU work); the GPU then inserts the rest, one thread
//! per node, 64-thread blocks:
//!
//! ```text
//! key = new.key
//! p = root; while p: parent = p; p = key < p.key ? p.left : p.right        // two loads per level
//! do: CAS(parent.mutex)                                                     // lock
//!     if won: child = slot of parent; if child: parent = child              // someone got there first
//!             else: parent.left/right = new; new.visited = 1; done
//!             unlock(parent.mutex)
//! while !done
//! ```
//! and finally looks up random keys (half of them present) the same way, writing one result per lookup. A node is
//! 32 bytes: key (8), left (8), right (8), lock (4), flags (4); Hetero-Mark's also keeps a parent pointer.

use super::emit::{Gpu, Kernel, Warp, WARP_LANES};
use super::{factor, scaled, Layout, WorkloadInfo, WorkloadParams};
use crate::rng::Rng;
use crate::uvm::SimError;

const NODE_BYTES: u64 = 32;
const KEY: u64 = 0;
const LEFT: u64 = 8;
const RIGHT: u64 = 16;
const MUTEX: u64 = 24;
const VISITED: u64 = 28;
const NIL: u32 = u32::MAX;

/// Nodes, GPU inserts and lookups.
const QUICK: (u64, u64, u64) = (512 << 10, 32 << 10, 48 << 10);
const DEFAULT: (u64, u64, u64) = (4 << 20, 192 << 10, 320 << 10);

#[derive(Debug, Clone, Copy)]
struct Dims {
    nodes: u64,
    inserts: u64,
    lookups: u64,
}

fn dims(params: &WorkloadParams) -> Result<Dims, SimError> {
    let (nodes, inserts, lookups) = match factor(params.size)? {
        None => QUICK,
        Some(f) => (
            scaled(DEFAULT.0, f, 1024),
            scaled(DEFAULT.1, f, 64),
            scaled(DEFAULT.2, f, 64),
        ),
    };
    // Node indices are 32-bit, and the host inserts at least the root.
    let nodes = nodes.min(u64::from(NIL) - 1);
    Ok(Dims {
        nodes,
        inserts: inserts.min(nodes - 1),
        lookups,
    })
}

#[derive(Debug, Clone, Copy)]
struct Arrays {
    nodes: u64,
    queries: u64,
    results: u64,
}

fn layout(d: Dims) -> (Layout, Arrays) {
    let mut l = Layout::new();
    let a = Arrays {
        nodes: l.alloc("nodes", d.nodes * NODE_BYTES),
        queries: l.alloc("queries", d.lookups * 8),
        results: l.alloc("results", d.lookups * 4),
    };
    (l, a)
}

pub(super) fn info(params: &WorkloadParams) -> Result<WorkloadInfo, SimError> {
    Ok(layout(dims(params)?).0.info())
}

/// The tree, as the host sees it.
struct Tree {
    key: Vec<i64>,
    left: Vec<u32>,
    right: Vec<u32>,
}

impl Tree {
    fn key(&self, v: u32) -> i64 {
        self.key.get(v as usize).copied().unwrap_or(0)
    }

    /// The child slot of `v` on the left or right.
    fn slot(&mut self, v: u32, left: bool) -> Option<&mut u32> {
        if left {
            self.left.get_mut(v as usize)
        } else {
            self.right.get_mut(v as usize)
        }
    }

    fn child(&self, v: u32, left: bool) -> u32 {
        let side = if left { &self.left } else { &self.right };
        side.get(v as usize).copied().unwrap_or(NIL)
    }

    /// Links nodes `0..count` as if inserted one by one in index order (equal keys going right), which gives the
    /// treap of (key, index) with the index as heap priority: built from the sorted keys with a stack, in
    /// O(n log n) instead of a pointer chase per level per node.
    fn build(&mut self, count: u32) {
        let mut order: Vec<(i64, u32)> = (0..count).map(|i| (self.key(i), i)).collect();
        order.sort_unstable();
        let mut spine: Vec<u32> = Vec::new();
        for &(_, x) in &order {
            let mut last = NIL;
            while let Some(&top) = spine.last() {
                if top > x {
                    last = top;
                    spine.pop();
                } else {
                    break;
                }
            }
            if let Some(l) = self.left.get_mut(x as usize) {
                *l = last;
            }
            if let Some(&top) = spine.last() {
                if let Some(r) = self.right.get_mut(top as usize) {
                    *r = x;
                }
            }
            spine.push(x);
        }
    }
}

pub(super) fn run(params: &WorkloadParams, gpu: &mut Gpu<'_>) -> Result<(), SimError> {
    let d = dims(params)?;
    let (_, arrays) = layout(d);
    let mut rng = Rng::new(params.seed);
    let n = d.nodes as usize;
    let mut tree = Tree {
        key: (0..n).map(|_| rng.next_u64() as i64).collect(),
        left: vec![NIL; n],
        right: vec![NIL; n],
    };
    let host = (d.nodes - d.inserts) as u32;
    tree.build(host);
    gpu.launch(&mut Insert {
        tree: &mut tree,
        arrays,
        first: host,
        count: d.inserts,
    });
    let queries: Vec<i64> = (0..d.lookups)
        .map(|_| {
            if rng.below(2) == 0 {
                tree.key(rng.below(d.nodes) as u32)
            } else {
                rng.next_u64() as i64
            }
        })
        .collect();
    gpu.launch(&mut Lookup {
        tree: &tree,
        arrays,
        queries: &queries,
    });
    Ok(())
}

fn field(a: Arrays, node: u32, offset: u64) -> u64 {
    a.nodes + u64::from(node) * NODE_BYTES + offset
}

/// The GPU insertion kernel: thread t inserts node `first + t`.
struct Insert<'t> {
    tree: &'t mut Tree,
    arrays: Arrays,
    first: u32,
    count: u64,
}

/// An inserting lane: its node, key, current node (walk) or parent (lock loop), and direction.
#[derive(Clone, Copy, Default)]
struct Lane {
    node: u32,
    key: i64,
    at: u32,
    parent: u32,
    left: bool,
}

impl Kernel for Insert<'_> {
    fn warps(&self) -> u64 {
        self.count.div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let a = self.arrays;
        let start = index * WARP_LANES as u64;
        let count = (self.count - start).min(WARP_LANES as u64) as usize;
        let mut lanes = [Lane::default(); WARP_LANES];
        for (t, lane) in lanes.iter_mut().enumerate().take(count) {
            let node = self.first + (start as u32) + t as u32;
            *lane = Lane {
                node,
                key: self.tree.key(node),
                at: 0,
                parent: 0,
                left: false,
            };
        }
        let lanes = &mut lanes[..count];
        warp.gather_with(lanes, 8, false, |l| field(a, l.node, KEY));

        // The walk: lanes leave the loop as they fall off the tree and wait for the others.
        let mut walking = [0usize; WARP_LANES];
        loop {
            let mut k = 0;
            for (i, l) in lanes.iter().enumerate() {
                if l.at != NIL {
                    walking[k] = i;
                    k += 1;
                }
            }
            if k == 0 {
                break;
            }
            let walking = &walking[..k];
            warp.gather_with(walking, 8, false, |i| field(a, lanes[i].at, KEY));
            for &i in walking {
                let l = &mut lanes[i];
                l.parent = l.at;
                l.left = l.key < self.tree.key(l.at);
            }
            warp.gather_with(walking, 8, false, |i| {
                let l = lanes[i];
                field(a, l.parent, if l.left { LEFT } else { RIGHT })
            });
            for &i in walking {
                let l = &mut lanes[i];
                l.at = self.tree.child(l.parent, l.left);
            }
        }

        // The lock loop: of the lanes contending for one node's lock, the lowest wins each round.
        let mut pending: Vec<usize> = (0..lanes.len()).collect();
        let mut winners: Vec<usize> = Vec::with_capacity(WARP_LANES);
        let mut linked: Vec<usize> = Vec::with_capacity(WARP_LANES);
        let mut locked: Vec<u32> = Vec::with_capacity(WARP_LANES);
        while !pending.is_empty() {
            warp.gather_with(&pending, 4, true, |i| field(a, lanes[i].parent, MUTEX));
            winners.clear();
            for &i in &pending {
                if !winners.iter().any(|&w| lanes[w].parent == lanes[i].parent) {
                    winners.push(i);
                }
            }
            warp.gather_with(&winners, 8, false, |i| {
                let l = lanes[i];
                field(a, l.parent, if l.left { LEFT } else { RIGHT })
            });
            linked.clear();
            locked.clear();
            for &i in &winners {
                let l = &mut lanes[i];
                locked.push(l.parent);
                let child = self.tree.child(l.parent, l.left);
                if child != NIL {
                    // Hetero-Mark retries under the newcomer, keeping the direction it had chosen.
                    l.parent = child;
                } else {
                    if let Some(s) = self.tree.slot(l.parent, l.left) {
                        *s = l.node;
                    }
                    linked.push(i);
                }
            }
            warp.gather_with(&linked, 8, true, |i| field(a, lanes[i].parent, LEFT));
            warp.gather_with(&linked, 8, true, |i| field(a, lanes[i].parent, RIGHT));
            warp.gather_with(&linked, 4, true, |i| field(a, lanes[i].node, VISITED));
            warp.gather_with(&locked, 4, true, |p| field(a, p, MUTEX));
            pending.retain(|i| !linked.contains(i));
        }
    }
}

/// The lookup kernel: thread s searches `queries[s]`.
struct Lookup<'t> {
    tree: &'t Tree,
    arrays: Arrays,
    queries: &'t [i64],
}

impl Kernel for Lookup<'_> {
    fn warps(&self) -> u64 {
        (self.queries.len() as u64).div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let a = self.arrays;
        let first = index as usize * WARP_LANES;
        let count = (self.queries.len() - first).min(WARP_LANES);
        warp.range(a.queries + first as u64 * 8, count as u64 * 8, false);
        // (key, current node) per lane; NIL once found or fallen off.
        let mut lanes = [(0i64, 0u32); WARP_LANES];
        for (lane, &q) in lanes
            .iter_mut()
            .zip(self.queries.get(first..first + count).unwrap_or(&[]))
        {
            *lane = (q, 0);
        }
        let lanes = &mut lanes[..count];
        let mut at = [0u32; WARP_LANES];
        let mut next = [0u64; WARP_LANES];
        loop {
            let mut k = 0;
            for l in lanes.iter() {
                if l.1 != NIL {
                    at[k] = l.1;
                    k += 1;
                }
            }
            if k == 0 {
                break;
            }
            warp.gather_with(&at[..k], 8, false, |v| field(a, v, KEY));
            let mut m = 0;
            for l in lanes.iter_mut().filter(|l| l.1 != NIL) {
                let node_key = self.tree.key(l.1);
                if node_key == l.0 {
                    l.1 = NIL;
                } else {
                    let left = l.0 < node_key;
                    next[m] = field(a, l.1, if left { LEFT } else { RIGHT });
                    m += 1;
                    l.1 = self.tree.child(l.1, left);
                }
            }
            warp.gather(&next[..m], 8, false);
        }
        warp.range(a.results + first as u64 * 4, count as u64 * 4, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_build_equals_inserting_one_by_one() {
        let mut rng = Rng::new(3);
        for n in [1usize, 2, 7, 300] {
            // Few distinct keys, so that equal keys are common.
            let key: Vec<i64> = (0..n).map(|_| rng.below(40) as i64 - 20).collect();
            let mut fast = Tree {
                key: key.clone(),
                left: vec![NIL; n],
                right: vec![NIL; n],
            };
            fast.build(n as u32);
            let mut slow = Tree {
                key,
                left: vec![NIL; n],
                right: vec![NIL; n],
            };
            for v in 1..n as u32 {
                let mut at = 0u32;
                loop {
                    let left = slow.key(v) < slow.key(at);
                    match slow.child(at, left) {
                        NIL => {
                            *slow.slot(at, left).unwrap() = v;
                            break;
                        }
                        c => at = c,
                    }
                }
            }
            assert_eq!(fast.left, slow.left, "n = {n}");
            assert_eq!(fast.right, slow.right, "n = {n}");
        }
    }

    #[test]
    fn gpu_inserts_link_every_node_exactly_once() {
        let params = WorkloadParams {
            size: crate::uvm::workload::WorkloadSize::Scale(1.0 / 256.0),
            seed: 4,
            graph: None,
        };
        let d = dims(&params).unwrap();
        let (_, arrays) = layout(d);
        let n = d.nodes as usize;
        let mut rng = Rng::new(4);
        // Few distinct keys: many lanes race for the same leaves.
        let mut tree = Tree {
            key: (0..n).map(|_| rng.below(64) as i64).collect(),
            left: vec![NIL; n],
            right: vec![NIL; n],
        };
        let host = (d.nodes - d.inserts) as u32;
        tree.build(host);
        let mut count = 0;
        let mut sink = |_| count += 1;
        let mut gpu = Gpu::new(&mut sink);
        gpu.launch(&mut Insert {
            tree: &mut tree,
            arrays,
            first: host,
            count: d.inserts,
        });
        let mut linked: Vec<u32> = tree
            .left
            .iter()
            .chain(&tree.right)
            .copied()
            .filter(|&c| c != NIL)
            .collect();
        linked.sort_unstable();
        assert_eq!(linked, (1..n as u32).collect::<Vec<_>>());
        assert!(count > 0);
    }
}
