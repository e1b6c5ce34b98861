//! Locality and large pages (Sec. IV-C, Fig. 4): the same lookups in a B+-tree, with the search keys sorted first
//! (neighbouring lookups walk the same pages) or in random order, on 4 KiB pages and on 2 MiB transparent huge
//! pages. The paper's GPU slowed 6-26× unsorted; huge pages took most of that away, showing that poor locality
//! hurts address translation more than the rest of the memory hierarchy.
//!
//! The tree is static and implicit: leaves are the sorted keys in nodes of [`FANOUT`] keys; each inner level
//! holds the first key of every node below it, so the child of a node's slot `i` is node `node * FANOUT + i` of
//! the level below. A lookup descends with a linear scan per node (one or two cache lines) and returns the key's
//! position. All levels live in one mapping so that the page size is the only thing that changes.

use std::time::Instant;

use serde::Serialize;

use crate::derive::rate_per_s;
use crate::mem::Mapping;
use crate::{ProbeError, Tick};

/// Keys per node: 16 × 8 B, two cache lines.
pub const FANOUT: usize = 16;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct BtreeOptions {
    /// Keys in the tree.
    pub keys: usize,
    /// Lookups per run.
    pub lookups: usize,
    /// Seed of the lookup keys.
    pub seed: u64,
}

impl BtreeOptions {
    /// The full probe: 2^25 keys (256 MiB of leaves, far beyond a 4 KiB-page TLB's reach, within a 2 MiB one's).
    pub fn full() -> Self {
        BtreeOptions {
            keys: 1 << 25,
            lookups: 4 << 20,
            seed: 1,
        }
    }

    /// `--quick`: 2^23 keys (64 MiB).
    pub fn quick() -> Self {
        BtreeOptions {
            keys: 1 << 23,
            lookups: 1 << 20,
            seed: 1,
        }
    }
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct BtreeRun {
    /// Whether the lookup keys were sorted first.
    pub sorted: bool,
    /// Whether the tree was on transparent huge pages.
    pub huge_pages: bool,
    /// Bytes of the tree the kernel backed with huge pages.
    pub huge_backed_bytes: Option<u64>,
    /// Time of all lookups.
    pub time_s: f64,
    /// Lookups per second.
    pub lookups_per_s: f64,
    /// Time over the sorted, 4 KiB-page run's (the paper's normalisation).
    pub slowdown: f64,
}

/// Fig. 4: the four runs.
#[derive(Debug, Clone, Serialize)]
pub struct BtreeResults {
    /// Keys in the tree.
    pub keys: u64,
    /// Bytes of the tree (all levels).
    pub tree_bytes: u64,
    /// Lookups per run.
    pub lookups: u64,
    /// Sorted and unsorted, 4 KiB pages then huge pages (when usable).
    pub runs: Vec<BtreeRun>,
}

struct Tree {
    map: Mapping,
    /// Word offset of each level, root first; the last is the leaves.
    levels: Vec<(usize, usize)>,
}

impl Tree {
    /// Keys are 2i + 1 for i in 0..keys.
    fn build(keys: usize, huge: bool) -> Result<Self, ProbeError> {
        if keys == 0 {
            return Err(ProbeError::InvalidInput(
                "a B+-tree needs at least one key".into(),
            ));
        }
        // Level sizes in nodes, leaves first.
        let mut nodes = vec![keys.div_ceil(FANOUT)];
        while let Some(&n) = nodes.last().filter(|&&n| n > 1) {
            nodes.push(n.div_ceil(FANOUT));
        }
        nodes.reverse();
        let words: usize = nodes.iter().map(|n| n * FANOUT).sum();
        let mut map = Mapping::new(words * 8, huge)?;
        let mut levels = Vec::with_capacity(nodes.len());
        let mut at = 0;
        for &n in &nodes {
            levels.push((at, n));
            at += n * FANOUT;
        }
        let w = map.words_mut();
        let leaves = levels[levels.len() - 1];
        for i in 0..leaves.1 * FANOUT {
            w[leaves.0 + i] = if i < keys { 2 * i + 1 } else { usize::MAX };
        }
        // Each inner slot holds the first key of its child node (MAX for children that do not exist).
        for l in (0..levels.len() - 1).rev() {
            let (off, n) = levels[l];
            let (child_off, child_nodes) = levels[l + 1];
            for slot in 0..n * FANOUT {
                w[off + slot] = if slot < child_nodes {
                    w[child_off + slot * FANOUT]
                } else {
                    usize::MAX
                };
            }
        }
        Ok(Tree { map, levels })
    }

    /// Position of `key` among the leaves' keys, or `None` when absent.
    fn find(words: &[usize], levels: &[(usize, usize)], key: usize) -> Option<usize> {
        let mut node = 0;
        for (depth, &(off, _)) in levels.iter().enumerate() {
            let base = off + node * FANOUT;
            let slots = &words[base..base + FANOUT];
            let last = depth + 1 == levels.len();
            if last {
                return slots
                    .iter()
                    .position(|&k| k == key)
                    .map(|i| node * FANOUT + i);
            }
            // The last slot whose first key is <= key.
            let i = slots.iter().take_while(|&&k| k <= key).count();
            node = node * FANOUT + i.checked_sub(1)?;
        }
        None
    }

    fn bytes(&self) -> u64 {
        self.map.len() as u64
    }
}

fn run(tree: &mut Tree, keys: &[usize]) -> Result<f64, ProbeError> {
    let levels = tree.levels.clone();
    let words = tree.map.words_mut();
    let t = Instant::now();
    let mut found = 0usize;
    for &k in keys {
        if let Some(p) = Tree::find(words, &levels, k) {
            std::hint::black_box(p);
            found += 1;
        }
    }
    let elapsed = t.elapsed().as_secs_f64();
    if found != keys.len() {
        return Err(ProbeError::InvalidInput(format!(
            "the B+-tree lost keys: found {found} of {}",
            keys.len()
        )));
    }
    Ok(elapsed)
}

/// Fig. 4 on this machine.
pub fn measure(
    opts: &BtreeOptions,
    thp_usable: bool,
    tick: Tick<'_>,
) -> Result<BtreeResults, ProbeError> {
    if opts.lookups == 0 {
        return Err(ProbeError::InvalidInput(
            "the B+-tree probe needs at least one lookup".into(),
        ));
    }
    let mut rng = oversub_base::rng::Rng::new(opts.seed);
    let unsorted: Vec<usize> = (0..opts.lookups)
        .map(|_| 2 * rng.below(opts.keys.max(1) as u64) as usize + 1)
        .collect();
    let mut sorted = unsorted.clone();
    sorted.sort_unstable();
    let mut runs = Vec::new();
    let mut tree_bytes = 0;
    let pages: &[bool] = if thp_usable { &[false, true] } else { &[false] };
    for &huge in pages {
        tick(if huge {
            "B+-tree lookups, huge pages"
        } else {
            "B+-tree lookups, 4 KiB pages"
        });
        let mut tree = Tree::build(opts.keys, huge)?;
        tree_bytes = tree.bytes();
        let huge_backed_bytes = tree.map.huge_backed_bytes();
        // Untimed pass: brings the tree into the caches and TLBs as far as they hold it.
        run(&mut tree, &sorted)?;
        for (is_sorted, keys) in [(true, &sorted), (false, &unsorted)] {
            let time_s = run(&mut tree, keys)?;
            runs.push(BtreeRun {
                sorted: is_sorted,
                huge_pages: huge,
                huge_backed_bytes,
                time_s,
                lookups_per_s: rate_per_s(keys.len() as f64, time_s)?,
                slowdown: 0.0,
            });
        }
    }
    let base = runs.first().map_or(1.0, |r| r.time_s);
    for r in &mut runs {
        r.slowdown = r.time_s / base;
    }
    Ok(BtreeResults {
        keys: opts.keys as u64,
        tree_bytes,
        lookups: opts.lookups as u64,
        runs,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_key_is_found_and_others_are_not() {
        for keys in [1, 15, 16, 17, 300, 4097] {
            let mut t = Tree::build(keys, false).unwrap();
            let levels = t.levels.clone();
            let w = t.map.words_mut();
            for i in 0..keys {
                assert_eq!(
                    Tree::find(w, &levels, 2 * i + 1),
                    Some(i),
                    "{keys} keys, key {i}"
                );
                assert_eq!(Tree::find(w, &levels, 2 * i), None);
            }
            assert_eq!(Tree::find(w, &levels, 2 * keys + 1), None);
        }
        assert!(Tree::build(0, false).is_err());
    }

    #[test]
    fn tiny_measurement() {
        let r = measure(
            &BtreeOptions {
                keys: 5000,
                lookups: 2000,
                seed: 7,
            },
            true,
            &crate::no_tick,
        )
        .unwrap();
        assert_eq!(r.runs.len(), 4);
        assert!(r
            .runs
            .iter()
            .all(|r| r.time_s > 0.0 && r.slowdown.is_finite()));
        assert_eq!(r.runs[0].slowdown, 1.0);
    }
}
