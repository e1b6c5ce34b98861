//! Locality analysis of an access stream: the LRU stack distance of every access at several tracking granularities,
//! as in Fig. 2 of the DynaMap paper (Sec. 4.1). The paper's point is that the CDF moves right (worse temporal
//! locality) as the granularity grows from a cache line to a 4 KiB page to a 64 KiB group, because a sparse,
//! irregular application touches only a few bytes of each big unit.
//!
//! The stack distance of an access is the number of *distinct* units touched since the previous access to the same
//! unit (A B C A: 2 for the second A; A A: 0); the first access to a unit is *cold* (infinite distance). An access
//! hits in a fully associative LRU cache of `C` units exactly when its distance is below `C`, so the CDF is plotted
//! against `(distance + 1) × granularity` bytes: the capacity of the smallest such cache that would hit, which puts
//! the curves of all granularities on one byte axis next to the L1, L2 and memory capacities.
//!
//! The algorithm is the usual O(log N) one: each unit gets a dense id on first sight (one hash lookup per access);
//! every access takes the next slot of a time line, and a Fenwick tree over the slots marks the slot of each unit's
//! latest access, so the distance is the number of marks after the unit's previous slot. The time line is compacted
//! (live marks renumbered in order) whenever it fills, which keeps memory proportional to the distinct units rather
//! than to the accesses. Distances go into a log-linear histogram (8 buckets per octave, exact below 8), which is
//! exact at every bucket edge the CDF is sampled at. Several granularities are tracked on separate threads over the
//! same buffered chunk of addresses.

use super::{SimError, Trace};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// The CDF of the LRU stack distance at one granularity.
#[derive(Debug, Clone, PartialEq)]
pub struct StackDistanceCdf {
    /// Size of the tracking unit in bytes (a power of two).
    pub granularity_bytes: u64,
    /// Accesses seen.
    pub accesses: u64,
    /// First accesses to a unit (infinite distance); not part of the CDF.
    pub cold: u64,
    /// Distinct units touched (the footprint is `distinct_units × granularity_bytes`).
    pub distinct_units: u64,
    /// `(bytes, fraction)`, ascending in both, log-spaced in bytes: `bytes = (d + 1) × granularity_bytes` for the
    /// upper edge `d` of a histogram bucket, and `fraction` the share of the non-cold accesses whose distance is at
    /// most `d` (equivalently: that hit in a fully associative LRU cache of `bytes`). The last fraction is exactly 1.
    /// Empty when there is no non-cold access.
    pub points: Vec<(f64, f64)>,
}

impl StackDistanceCdf {
    /// Share of the non-cold accesses that hit in a fully associative LRU cache of `capacity_bytes` (the CDF at the
    /// largest sampled point not above it; 0 below the first point, and 0 when there is no non-cold access).
    pub fn hit_fraction(&self, capacity_bytes: f64) -> f64 {
        self.points
            .iter()
            .take_while(|(x, _)| *x <= capacity_bytes)
            .last()
            .map_or(0.0, |(_, y)| *y)
    }
}

/// LRU stack distances of one access stream at several granularities at once.
///
/// ```
/// use oversub_sim::uvm::analysis::StackDistance;
/// let mut sd = StackDistance::new(&[64, 4096])?;
/// for addr in [0u64, 64, 4096, 0] {
///     sd.push(addr);
/// }
/// let cdfs = sd.finish();
/// // 64 B lines 0, 1, 64, 0: three cold, then line 0 again at distance 2 (3 lines = 192 B).
/// assert_eq!(cdfs[0].cold, 3);
/// assert_eq!(cdfs[0].points.last(), Some(&(192.0, 1.0)));
/// // 4 KiB pages 0, 0, 1, 0: two cold, reuses at distances 0 and 1.
/// assert_eq!(cdfs[1].points, vec![(4096.0, 0.5), (8192.0, 1.0)]);
/// # Ok::<(), oversub_sim::uvm::SimError>(())
/// ```
#[derive(Debug)]
pub struct StackDistance {
    trackers: Vec<Tracker>,
    /// Addresses not yet given to the trackers.
    pending: Vec<u64>,
    /// How many addresses to buffer before handing them to the trackers.
    chunk: usize,
}

/// Addresses buffered between two rounds of the trackers (2 MiB).
const CHUNK: usize = 1 << 18;

impl StackDistance {
    /// A tracker per granularity in `granularities` (bytes; each a power of two, at least 1; duplicates allowed),
    /// reported by [`StackDistance::finish`] in the same order.
    pub fn new(granularities: &[u64]) -> Result<Self, SimError> {
        if granularities.is_empty() {
            return Err(SimError::InvalidParameter(
                "stack distance needs at least one granularity".to_string(),
            ));
        }
        let trackers = granularities
            .iter()
            .map(|&g| Tracker::new(g))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            trackers,
            pending: Vec::new(),
            chunk: CHUNK,
        })
    }

    /// One access to byte address `addr`.
    pub fn push(&mut self, addr: u64) {
        if self.trackers.len() == 1 {
            // Nothing to run in parallel: no need to buffer.
            if let Some(t) = self.trackers.first_mut() {
                t.access(addr);
            }
            return;
        }
        self.pending.push(addr);
        if self.pending.len() >= self.chunk {
            self.flush();
        }
    }

    /// Accesses to every address of `addrs`, in order.
    pub fn extend(&mut self, addrs: impl IntoIterator<Item = u64>) {
        for a in addrs {
            self.push(a);
        }
    }

    /// The CDF of each granularity, in the order given to [`StackDistance::new`].
    pub fn finish(mut self) -> Vec<StackDistanceCdf> {
        self.flush();
        self.trackers.iter().map(Tracker::cdf).collect()
    }

    /// Hands the buffered addresses to every tracker, one thread per tracker.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = &self.pending;
        let (first, rest) = match self.trackers.split_first_mut() {
            Some(split) => split,
            None => return,
        };
        let mut not_spawned = Vec::new();
        std::thread::scope(|s| {
            for (i, t) in rest.iter_mut().enumerate() {
                let spawned = std::thread::Builder::new()
                    .name("stack-distance".to_string())
                    .spawn_scoped(s, move || t.run(pending));
                if spawned.is_err() {
                    not_spawned.push(i);
                }
            }
            first.run(pending);
        });
        // Threads the OS would not give: their trackers run here, afterwards.
        for i in not_spawned {
            if let Some(t) = rest.get_mut(i) {
                t.run(pending);
            }
        }
        self.pending.clear();
    }
}

/// The stack-distance CDFs of every access of `trace` at each of `granularities` (see [`StackDistance::new`]).
pub fn stack_distance_cdfs(
    trace: &Trace,
    granularities: &[u64],
) -> Result<Vec<StackDistanceCdf>, SimError> {
    let mut sd = StackDistance::new(granularities)?;
    sd.extend(trace.accesses.iter().map(|a| a.addr));
    Ok(sd.finish())
}

// ---- one granularity ----

/// Marks a time-line slot whose unit has been accessed again since.
const DEAD: u32 = u32::MAX;
/// Smallest time line (slots).
const MIN_SLOTS: usize = 4096;
/// Most distinct units tracked, so that slots (at most twice as many) fit in a `u32`; later new units count as cold
/// and are not tracked (it takes some 2 billion distinct units, far beyond any trace that fits in memory).
const MAX_UNITS: usize = (u32::MAX / 2 - 1) as usize;
/// Buckets per octave of the distance histogram, as a power of two.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets enough for any `u64` distance.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// Stack distances at one granularity.
#[derive(Debug)]
struct Tracker {
    granularity: u64,
    shift: u32,
    /// Unit → dense id, in order of first access.
    ids: HashMap<u64, u32, FoldHash>,
    /// Id → slot of the unit's latest access.
    last_slot: Vec<u32>,
    /// Slot → id of the unit accessed there, or [`DEAD`]; its length is the next free slot.
    owner: Vec<u32>,
    /// Fenwick tree over the slots (1-based, `tree[0]` unused), counting live marks.
    tree: Vec<u32>,
    /// Slots in the time line before the next compaction.
    slots: usize,
    hist: Vec<u64>,
    accesses: u64,
    cold: u64,
}

impl Tracker {
    fn new(granularity: u64) -> Result<Self, SimError> {
        if !granularity.is_power_of_two() {
            return Err(SimError::InvalidParameter(format!(
                "stack-distance granularity must be a power of two bytes, not {granularity}"
            )));
        }
        Ok(Self {
            granularity,
            shift: granularity.trailing_zeros(),
            ids: HashMap::with_hasher(FoldHash),
            last_slot: Vec::new(),
            owner: Vec::with_capacity(MIN_SLOTS),
            tree: vec![0; MIN_SLOTS + 1],
            slots: MIN_SLOTS,
            hist: vec![0; BUCKETS],
            accesses: 0,
            cold: 0,
        })
    }

    fn run(&mut self, addrs: &[u64]) {
        for &a in addrs {
            self.access(a);
        }
    }

    /// Records an access to `addr`; its stack distance in units, `None` when cold.
    fn access(&mut self, addr: u64) -> Option<u64> {
        self.accesses += 1;
        if self.owner.len() >= self.slots {
            self.compact();
        }
        let slot = self.owner.len();
        let unit = addr >> self.shift;
        let next_id = self.last_slot.len();
        let (id, distance) = match self.ids.entry(unit) {
            Entry::Occupied(e) => {
                let id = *e.get();
                let prev = self.last_slot.get(id as usize).copied()? as usize;
                // Every known unit has exactly one mark; those after `prev` are the distinct units since.
                let live = self.last_slot.len() as u64;
                let distance = live - self.prefix(prev);
                self.add(prev, false);
                if let Some(o) = self.owner.get_mut(prev) {
                    *o = DEAD;
                }
                (id, Some(distance))
            }
            Entry::Vacant(e) => {
                self.cold += 1;
                if next_id >= MAX_UNITS {
                    return None;
                }
                let id = next_id as u32;
                e.insert(id);
                self.last_slot.push(0);
                (id, None)
            }
        };
        if let Some(s) = self.last_slot.get_mut(id as usize) {
            *s = slot as u32;
        }
        self.owner.push(id);
        self.add(slot, true);
        if let Some(d) = distance {
            if let Some(h) = self.hist.get_mut(bucket(d)) {
                *h += 1;
            }
        }
        distance
    }

    /// Marks (`true`) or unmarks `slot` in the Fenwick tree.
    fn add(&mut self, slot: usize, mark: bool) {
        let mut i = slot + 1;
        while let Some(v) = self.tree.get_mut(i) {
            *v = if mark {
                v.wrapping_add(1)
            } else {
                v.wrapping_sub(1)
            };
            i += i & i.wrapping_neg();
        }
    }

    /// Marks in slots `0..=slot`.
    fn prefix(&self, slot: usize) -> u64 {
        let mut i = slot + 1;
        let mut sum = 0u64;
        while i > 0 {
            sum += u64::from(self.tree.get(i).copied().unwrap_or(0));
            i &= i - 1;
        }
        sum
    }

    /// Renumbers the live slots `0..live` in order, sizes the time line to twice the live units (at least
    /// [`MIN_SLOTS`]) and rebuilds the tree.
    fn compact(&mut self) {
        let mut live = 0usize;
        for s in 0..self.owner.len() {
            let Some(&id) = self.owner.get(s) else {
                break;
            };
            if id == DEAD {
                continue;
            }
            if let Some(o) = self.owner.get_mut(live) {
                *o = id;
            }
            if let Some(ls) = self.last_slot.get_mut(id as usize) {
                *ls = live as u32;
            }
            live += 1;
        }
        self.owner.truncate(live);
        self.slots = (2 * live).max(MIN_SLOTS);
        self.owner
            .reserve(self.slots.saturating_sub(self.owner.capacity()));
        self.tree.clear();
        self.tree.resize(self.slots + 1, 0);
        // Linear-time build: each node passes its total to its parent.
        for i in 1..=self.slots {
            if i <= live {
                if let Some(v) = self.tree.get_mut(i) {
                    *v += 1;
                }
            }
            let parent = i + (i & i.wrapping_neg());
            let v = self.tree.get(i).copied().unwrap_or(0);
            if let Some(p) = self.tree.get_mut(parent) {
                *p += v;
            }
        }
    }

    fn cdf(&self) -> StackDistanceCdf {
        let reused: u64 = self.hist.iter().sum();
        let last = self.hist.iter().rposition(|&c| c > 0);
        let mut points = Vec::new();
        if let (Some(last), true) = (last, reused > 0) {
            let mut cum = 0u64;
            for (b, &c) in self.hist.iter().enumerate().take(last + 1) {
                cum += c;
                let units = u128::from(bucket_upper(b)) + 1;
                let bytes = (units * u128::from(self.granularity)) as f64;
                points.push((bytes, cum as f64 / reused as f64));
            }
        }
        StackDistanceCdf {
            granularity_bytes: self.granularity,
            accesses: self.accesses,
            cold: self.cold,
            distinct_units: self.last_slot.len() as u64,
            points,
        }
    }
}

/// Histogram bucket of distance `d`: `d` itself below [`SUB`], then [`SUB`] buckets per octave.
fn bucket(d: u64) -> usize {
    if d < SUB {
        d as usize
    } else {
        let e = 63 - d.leading_zeros(); // ≥ SUB_BITS
        let m = (d >> (e - SUB_BITS)) & (SUB - 1);
        ((u64::from(e - SUB_BITS) + 1) * SUB + m) as usize
    }
}

/// The largest distance in bucket `b` (saturating at `u64::MAX`).
fn bucket_upper(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB {
        b
    } else {
        let e = (b / SUB - 1) as u32; // octave above SUB_BITS
        let m = b % SUB;
        let upper = (u128::from(SUB + m + 1) << e) - 1;
        u64::try_from(upper).unwrap_or(u64::MAX)
    }
}

/// A fast hash for `u64` keys: a folded 128-bit multiply, which mixes low and high bits alike (unit numbers are
/// often multiples of large powers of two).
#[derive(Debug, Clone, Copy, Default)]
struct FoldHash;

#[derive(Debug, Default)]
struct FoldHasher(u64);

const FOLD_K: u64 = 0x9E37_79B9_7F4A_7C15;

impl BuildHasher for FoldHash {
    type Hasher = FoldHasher;
    fn build_hasher(&self) -> FoldHasher {
        FoldHasher(0)
    }
}

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let p = u128::from(self.0 ^ x ^ 0x243F_6A88_85A3_08D3) * u128::from(FOLD_K);
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn distances(granularity: u64, addrs: &[u64]) -> (Vec<Option<u64>>, Tracker) {
        let mut t = Tracker::new(granularity).expect("valid granularity");
        let d = addrs.iter().map(|&a| t.access(a)).collect();
        (d, t)
    }

    /// Move-to-front list: the position of a unit is its stack distance.
    fn naive(granularity: u64, addrs: &[u64]) -> Vec<Option<u64>> {
        let mut stack: Vec<u64> = Vec::new();
        addrs
            .iter()
            .map(|&a| {
                let u = a / granularity;
                let pos = stack.iter().position(|&x| x == u);
                if let Some(p) = pos {
                    stack.remove(p);
                }
                stack.insert(0, u);
                pos.map(|p| p as u64)
            })
            .collect()
    }

    #[test]
    fn known_distances() {
        let (a, b, c) = (0u64, 128, 256);
        let (d, t) = distances(128, &[a, b, c, a]);
        assert_eq!(d, vec![None, None, None, Some(2)]);
        assert_eq!((t.cold, t.accesses), (3, 4));

        let (d, _) = distances(128, &[a, a, b, b, a, c, b, a]);
        assert_eq!(
            d,
            vec![
                None,
                Some(0),
                None,
                Some(0),
                Some(1),
                None,
                Some(2),
                Some(2)
            ]
        );
        let (d, _) = distances(128, &[a, b, c, a, b, c]);
        assert_eq!(d, vec![None, None, None, Some(2), Some(2), Some(2)]);
    }

    #[test]
    fn granularity_merges_units() {
        // 0 and 100 share a 4 KiB page but not a 64 B line; 4096 is the next page.
        let addrs = [0u64, 100, 4096, 0, 100];
        let (d, t) = distances(64, &addrs);
        assert_eq!(d, vec![None, None, None, Some(2), Some(2)]);
        assert_eq!(t.cold, 3);
        let (d, t) = distances(4096, &addrs);
        assert_eq!(d, vec![None, Some(0), None, Some(1), Some(0)]);
        assert_eq!(t.cold, 2);
        let (d, t) = distances(65536, &addrs);
        assert_eq!(d, vec![None, Some(0), Some(0), Some(0), Some(0)]);
        assert_eq!(t.cold, 1);

        let mut sd = StackDistance::new(&[64, 4096, 65536]).expect("valid");
        sd.extend(addrs);
        let cdfs = sd.finish();
        let cold: Vec<u64> = cdfs.iter().map(|c| c.cold).collect();
        assert_eq!(cold, vec![3, 2, 1]);
        let units: Vec<u64> = cdfs.iter().map(|c| c.distinct_units).collect();
        assert_eq!(units, vec![3, 2, 1]);
        // 64 B: both reuses at distance 2 → 3 lines = 192 B.
        assert_eq!(
            cdfs[0].points,
            vec![(64.0, 0.0), (128.0, 0.0), (192.0, 1.0)]
        );
        // 4 KiB: distances 0, 1, 0.
        assert_eq!(cdfs[1].points, vec![(4096.0, 2.0 / 3.0), (8192.0, 1.0)]);
        assert_eq!(cdfs[2].points, vec![(65536.0, 1.0)]);
        assert_eq!(cdfs[1].hit_fraction(5000.0), 2.0 / 3.0);
        assert_eq!(cdfs[1].hit_fraction(1000.0), 0.0);
        assert_eq!(cdfs[1].hit_fraction(1e12), 1.0);
    }

    #[test]
    fn matches_naive_across_compactions() {
        let mut rng = Rng::new(42);
        // Skewed reuse over 600 lines, long enough for several compactions of the 4096-slot time line.
        let addrs: Vec<u64> = (0..30_000)
            .map(|_| {
                let r = rng.below(600);
                let u = if rng.below(4) == 0 { r } else { r % 40 };
                u * 128 + rng.below(128)
            })
            .collect();
        for g in [128u64, 1024, 4096] {
            let (d, t) = distances(g, &addrs);
            assert_eq!(d, naive(g, &addrs), "granularity {g}");
            assert!(t.slots >= MIN_SLOTS && t.owner.len() <= t.slots);
        }
    }

    #[test]
    fn cdf_monotone_and_ends_at_one() {
        let mut rng = Rng::new(7);
        let mut sd = StackDistance::new(&[64, 4096, 65536]).expect("valid");
        // Small chunks so that the threaded path runs many times.
        sd.chunk = 1000;
        let addrs: Vec<u64> = (0..50_000)
            .map(|_| rng.below(1 << 14) * 64 + rng.below(64))
            .collect();
        sd.extend(addrs.iter().copied());
        let cdfs = sd.finish();
        assert_eq!(cdfs.len(), 3);
        for (c, g) in cdfs.iter().zip([64u64, 4096, 65536]) {
            assert_eq!(c.granularity_bytes, g);
            assert_eq!(c.accesses, 50_000);
            assert!(c.cold <= c.accesses && c.cold == c.distinct_units);
            assert!(!c.points.is_empty());
            for w in c.points.windows(2) {
                assert!(w[0].0 < w[1].0, "{:?}", w);
                assert!(w[0].1 <= w[1].1, "{:?}", w);
            }
            assert_eq!(c.points.last().map(|p| p.1), Some(1.0));
            assert_eq!(c.points.first().map(|p| p.0), Some(g as f64));
        }
        // Coarser tracking: fewer units, and the same with one tracker (no threads).
        assert!(cdfs[0].distinct_units > cdfs[1].distinct_units);
        assert!(cdfs[1].distinct_units > cdfs[2].distinct_units);
        let mut one = StackDistance::new(&[4096]).expect("valid");
        one.extend(addrs.iter().copied());
        assert_eq!(one.finish().first(), cdfs.get(1));
    }

    #[test]
    fn sparse_access_shifts_right() {
        // A random sparse stream over 64 MiB touching one line per access: at 64 KiB granularity reuses are
        // nearer in units but much farther in bytes than at 128 B.
        let mut rng = Rng::new(3);
        let hot: Vec<u64> = (0..2000).map(|_| rng.below(1 << 26) & !127).collect();
        let addrs: Vec<u64> = (0..40_000)
            .map(|_| hot[rng.below(hot.len() as u64) as usize])
            .collect();
        let mut sd = StackDistance::new(&[128, 65536]).expect("valid");
        sd.extend(addrs);
        let cdfs = sd.finish();
        let half_line = cdfs[0].hit_fraction(128.0 * 2048.0);
        let half_group = cdfs[1].hit_fraction(128.0 * 2048.0);
        assert!(
            half_line > 0.99 && half_group < 0.02,
            "{half_line} {half_group}"
        );
    }

    #[test]
    fn bad_granularities() {
        for g in [&[][..], &[0], &[3], &[64, 100]] {
            assert!(
                matches!(StackDistance::new(g), Err(SimError::InvalidParameter(_))),
                "{g:?}"
            );
        }
        assert!(StackDistance::new(&[1, 1 << 63]).is_ok());
        // Empty stream: no points.
        let cdfs = StackDistance::new(&[64]).expect("valid").finish();
        assert_eq!(cdfs[0].accesses, 0);
        assert!(cdfs[0].points.is_empty());
        assert_eq!(cdfs[0].hit_fraction(1e9), 0.0);
    }

    #[test]
    fn buckets_are_exact_at_edges() {
        let mut prev = 0usize;
        for d in 0..100_000u64 {
            let b = bucket(d);
            assert!(b == prev || b == prev + 1, "{d}");
            assert!(bucket_upper(b) >= d);
            if b > 0 {
                assert!(bucket_upper(b - 1) < d);
            }
            prev = b;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_upper(BUCKETS - 1), u64::MAX);
        assert_eq!(bucket_upper(bucket(1 << 40)), (1 << 40) + (1 << 37) - 1);
    }
}
