//! The GPU L2: set-associative, true LRU within a set, in front of GPU memory and of host memory alike.
//!
//! It is the paper's key insight that lines of host-resident pages with temporal reuse are served from this
//! cache, so it sees every access, whatever the page's location. Tags are virtual line numbers: a migration does
//! not change the data, and an unmapped page faults before the cache is consulted (translation comes first).

use super::SimError;

/// Makes `line` the most recently used of `set`, which held it at `at` (a hit) or is full and loses its last
/// way (a miss, `at` = N − 1): ways 0..at shift down by one.
#[inline]
fn promote<const N: usize>(set: &mut [u32; N], at: usize, line: u32) {
    let old = *set;
    for (k, way) in set.iter_mut().enumerate() {
        *way = if k == 0 {
            line
        } else if k <= at {
            old[k - 1]
        } else {
            old[k]
        };
    }
}

/// Set-associative LRU cache of line numbers.
#[derive(Debug, Clone)]
pub struct L2Cache {
    sets: u32,
    /// Lemire's fastmod constant for `sets`: a set index costs two multiplications instead of a division.
    fastmod: u64,
    ways: usize,
    /// `ways` tags per set, most recently used first; `EMPTY` marks a free way.
    tags: Vec<u32>,
}

const EMPTY: u32 = u32::MAX;

impl L2Cache {
    /// A cache of `bytes` capacity in `line_bytes` lines, `ways`-way associative.
    pub fn new(bytes: u64, line_bytes: u64, ways: u32) -> Result<Self, SimError> {
        if ways == 0 || line_bytes == 0 {
            return Err(SimError::InvalidParameter(
                "the L2 needs ways and a line size".into(),
            ));
        }
        let lines = bytes / line_bytes;
        let sets = lines / u64::from(ways);
        if sets == 0 || sets > u64::from(u32::MAX) {
            return Err(SimError::InvalidParameter(format!(
                "an L2 of {bytes} bytes cannot hold one set of {ways} ways of {line_bytes}-byte lines"
            )));
        }
        let ways = ways as usize;
        Ok(Self {
            fastmod: (u64::MAX / sets).wrapping_add(1),
            sets: sets as u32,
            ways,
            tags: vec![EMPTY; sets as usize * ways],
        })
    }

    /// Number of sets.
    pub fn sets(&self) -> u32 {
        self.sets
    }

    #[inline]
    fn set_of(&self, line: u32) -> usize {
        let low = self.fastmod.wrapping_mul(u64::from(line));
        ((u128::from(low) * u128::from(self.sets)) >> 64) as usize
    }

    /// Looks `line` up and makes it most recently used; true on a hit. A miss fills the line, evicting the set's
    /// least recently used line.
    #[inline]
    pub fn access(&mut self, line: u32) -> bool {
        let start = self.set_of(line) * self.ways;
        let Some(set) = self.tags.get_mut(start..start + self.ways) else {
            return false;
        };
        if set.first() == Some(&line) {
            return true;
        }
        let found = set.iter().position(|&t| t == line);
        if let Ok(ways) = <&mut [u32; 16]>::try_from(&mut *set) {
            // The paper's 16 ways: the same reordering as below, element by element, which the compiler turns into
            // a few vector moves where a rotation of a runtime-length slice was a call to memmove (a tenth of the
            // simulator's time).
            promote(ways, found.unwrap_or(15), line);
            return found.is_some();
        }
        match found {
            Some(i) => {
                set[..=i].rotate_right(1);
                true
            }
            None => {
                set.rotate_right(1);
                set[0] = line;
                false
            }
        }
    }

    /// Whether `line` is cached, without touching the LRU order.
    pub fn contains(&self, line: u32) -> bool {
        let start = self.set_of(line) * self.ways;
        self.tags
            .get(start..start + self.ways)
            .is_some_and(|set| set.contains(&line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_within_a_set() {
        // 2 sets of 2 ways: lines 0, 2, 4 share set 0.
        let mut c = L2Cache::new(4 * 128, 128, 2).unwrap();
        assert_eq!(c.sets(), 2);
        assert!(!c.access(0));
        assert!(!c.access(2));
        assert!(c.access(0)); // 0 becomes MRU, 2 is LRU
        assert!(!c.access(4)); // evicts 2
        assert!(c.contains(0) && c.contains(4) && !c.contains(2));
        assert!(!c.access(1)); // other set untouched
        assert!(c.contains(0));
    }

    #[test]
    fn sixteen_ways_keep_true_lru() {
        // The 16-way fast path against a list kept by hand: most recently used first, the last one evicted.
        let sets = 3u32;
        let mut c = L2Cache::new(u64::from(sets) * 16 * 128, 128, 16).unwrap();
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); sets as usize];
        let mut x = 12345u64;
        for _ in 0..200_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let line = ((x >> 33) % 80) as u32;
            let list = &mut lists[(line % sets) as usize];
            let want = match list.iter().position(|&t| t == line) {
                Some(i) => {
                    list.remove(i);
                    true
                }
                None => {
                    list.truncate(15);
                    false
                }
            };
            list.insert(0, line);
            assert_eq!(c.access(line), want, "line {line}");
        }
    }

    #[test]
    fn fastmod_matches_the_remainder() {
        for sets in [1u64, 2, 3, 1536, 24576, 100_003] {
            let c = L2Cache::new(sets * 16 * 128, 128, 16).unwrap();
            for line in [0u32, 1, 2, 1535, 1536, 99_999, 1 << 30, u32::MAX - 1] {
                assert_eq!(
                    c.set_of(line) as u64,
                    u64::from(line) % sets,
                    "{line} % {sets}"
                );
            }
        }
    }

    #[test]
    fn rejects_impossible_geometry() {
        assert!(L2Cache::new(100, 128, 16).is_err());
        assert!(L2Cache::new(1 << 20, 128, 0).is_err());
    }
}
