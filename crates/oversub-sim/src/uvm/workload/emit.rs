//! The GPU side of the generators: coalescing one warp instruction's lane addresses into cache-line accesses, and
//! interleaving the resident warps of a kernel the way the SMs issue them.
//!
//! A generator describes a kernel as a [`Kernel`]: how many warps it launches and, for one warp, the memory
//! instructions that warp executes, in program order (recorded into a [`Warp`]). [`Gpu::launch`] keeps a window of
//! [`RESIDENT_WARPS`] warps resident and lets each issue one instruction per round, round-robin; a finished warp's
//! slot goes to the next warp of the launch, as the next thread block would take a free SM. Kernels run one after
//! the other, as on a single CUDA stream.
//!
//! A warp's instructions are recorded in full when it becomes resident. Generators that update their algorithm
//! state while recording (the BFS levels, the tree of BST) therefore see the effects of the warps that became
//! resident before, which is how the races of the real kernels resolve on a GPU too, up to timing.

use crate::uvm::{Access, LINE_BYTES};

/// Threads in a warp.
pub(crate) const WARP_LANES: usize = 32;
/// Streaming multiprocessors of the paper's GPU (an RTX 2060, Table 2).
pub(crate) const SMS: usize = 30;
/// Warps resident per SM in the model; fewer than the hardware's 32 because irregular kernels are limited by
/// registers and memory latency, and a smaller window keeps the interleaving of far-apart warps realistic.
pub(crate) const WARPS_PER_SM: usize = 8;
/// Warps issuing at once: consecutive accesses of the trace come from up to this many different warps.
pub const RESIDENT_WARPS: usize = SMS * WARPS_PER_SM;

/// Bits `off..off + len` of a line's byte mask (`off + len <= 128`, `len >= 1`).
fn byte_mask(off: u64, len: u64) -> u128 {
    let ones = if len >= 128 {
        u128::MAX
    } else {
        (1u128 << len) - 1
    };
    ones << off
}

/// Coalesces lane accesses of `elem_bytes` bytes at `lanes` into distinct lines, calling `emit(line, mask)` in
/// ascending line order. `scratch` is reused between calls to avoid allocation.
fn coalesce_lines(
    lanes: &[u64],
    elem_bytes: u64,
    scratch: &mut Vec<(u64, u128)>,
    mut emit: impl FnMut(u64, u128),
) {
    scratch.clear();
    if elem_bytes == 0 {
        return;
    }
    let elem_mask = byte_mask(0, elem_bytes.min(LINE_BYTES));
    // Lanes usually come in address order: then no sort is needed and duplicates are neighbours.
    let mut sorted = true;
    let mut push = |scratch: &mut Vec<(u64, u128)>, line: u64, mask: u128| match scratch.last_mut()
    {
        Some(last) if last.0 == line => last.1 |= mask,
        Some(last) if sorted && last.0 < line => scratch.push((line, mask)),
        _ => {
            // Out of order (rows across a warp, say): merge with an earlier entry while the list is short; a
            // long one (scattered lanes) is sorted and merged at the end instead.
            let earlier = if scratch.len() <= 8 {
                scratch.iter_mut().find(|e| e.0 == line)
            } else {
                None
            };
            match earlier {
                Some(e) => e.1 |= mask,
                None => {
                    sorted &= scratch.last().is_none_or(|last| last.0 < line);
                    scratch.push((line, mask));
                }
            }
        }
    };
    for &addr in lanes {
        let off = addr % LINE_BYTES;
        if off + elem_bytes <= LINE_BYTES {
            push(scratch, addr / LINE_BYTES, elem_mask << off);
            continue;
        }
        // An element across a line boundary (or wider than a line) touches each line it overlaps.
        let end = addr.saturating_add(elem_bytes);
        let mut start = addr;
        while start < end {
            let line = start / LINE_BYTES;
            let line_start = line * LINE_BYTES;
            let stop = end.min(line_start.saturating_add(LINE_BYTES));
            push(scratch, line, byte_mask(start - line_start, stop - start));
            start = stop;
        }
    }
    if sorted {
        for &(line, mask) in scratch.iter() {
            emit(line, mask);
        }
        return;
    }
    scratch.sort_unstable_by_key(|e| e.0);
    let mut current: Option<(u64, u128)> = None;
    for &(line, mask) in scratch.iter() {
        match current.as_mut() {
            Some(c) if c.0 == line => c.1 |= mask,
            _ => {
                if let Some((l, m)) = current.replace((line, mask)) {
                    emit(l, m);
                }
            }
        }
    }
    if let Some((l, m)) = current {
        emit(l, m);
    }
}

/// The access that stands for the bytes `mask` of `line`: it starts at the lowest byte touched and counts the
/// distinct bytes touched, so it always lies within the line.
fn line_access(warp: u32, line: u64, mask: u128, write: bool) -> Access {
    Access {
        addr: line * LINE_BYTES + u64::from(mask.trailing_zeros()),
        warp,
        bytes: mask.count_ones() as u16,
        write,
    }
}

/// Coalesces one warp instruction the way the GPU's load/store unit does: the lanes' accesses of `elem_bytes` bytes
/// at `lanes` become one [`Access`] per distinct 128-byte line, in ascending address order, each starting at the
/// lowest byte touched in its line and counting the distinct bytes touched there. An element that straddles a line
/// boundary counts in both lines. Lanes that do not take part are simply left out of `lanes`.
///
/// This is the emitter the workload generators use; it also suits importers of per-lane address traces.
pub fn coalesce(warp: u32, lanes: &[u64], elem_bytes: u32, write: bool) -> Vec<Access> {
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    coalesce_lines(lanes, u64::from(elem_bytes), &mut scratch, |line, mask| {
        out.push(line_access(warp, line, mask, write));
    });
    out
}

/// The memory instructions of one warp, coalesced, in program order.
#[derive(Debug, Default)]
pub(crate) struct Warp {
    id: u32,
    accesses: Vec<Access>,
    /// One past the last access of each instruction in `accesses`.
    ends: Vec<usize>,
    scratch: Vec<(u64, u128)>,
    addrs: Vec<u64>,
}

impl Warp {
    fn reset(&mut self, id: u32) {
        self.id = id;
        self.accesses.clear();
        self.ends.clear();
    }

    fn close(&mut self, start: usize) {
        // An instruction no lane executes issues nothing and takes no turn.
        if self.accesses.len() > start {
            self.ends.push(self.accesses.len());
        }
    }

    /// One instruction whose active lanes access `elem_bytes` bytes at the given addresses.
    pub(crate) fn gather(&mut self, lanes: &[u64], elem_bytes: u64, write: bool) {
        let start = self.accesses.len();
        let (id, accesses) = (self.id, &mut self.accesses);
        coalesce_lines(lanes, elem_bytes, &mut self.scratch, |line, mask| {
            accesses.push(line_access(id, line, mask, write));
        });
        self.close(start);
    }

    /// One instruction whose active lanes access `elem_bytes` bytes at `addr(lane value)` for each of `values`:
    /// [`Warp::gather`] without building the address list at the call site.
    pub(crate) fn gather_with<T: Copy>(
        &mut self,
        values: &[T],
        elem_bytes: u64,
        write: bool,
        addr: impl Fn(T) -> u64,
    ) {
        let mut addrs = std::mem::take(&mut self.addrs);
        addrs.clear();
        addrs.extend(values.iter().map(|&v| addr(v)));
        self.gather(&addrs, elem_bytes, write);
        self.addrs = addrs;
    }

    /// One instruction whose lanes together cover the bytes `start..start + len` contiguously (consecutive lanes,
    /// consecutive elements, or one lane or a broadcast when `len` is one element).
    pub(crate) fn range(&mut self, start: u64, len: u64, write: bool) {
        let first = self.accesses.len();
        let end = start.saturating_add(len);
        let mut at = start;
        while at < end {
            let line = at / LINE_BYTES;
            let line_start = line * LINE_BYTES;
            let stop = end.min(line_start.saturating_add(LINE_BYTES));
            self.accesses.push(Access {
                addr: at,
                warp: self.id,
                bytes: (stop - at) as u16,
                write,
            });
            at = stop;
        }
        self.close(first);
    }

    /// Number of instructions recorded so far (for tests).
    #[cfg(test)]
    pub(crate) fn instructions(&self) -> usize {
        self.ends.len()
    }
}

/// One kernel launch: its warps in dispatch order (thread block by thread block) and what each does.
pub(crate) trait Kernel {
    /// Warps in the launch, in dispatch order. A generator may leave out warps whose threads all exit without
    /// touching memory (the out-of-range blocks of a grid rounded up).
    fn warps(&self) -> u64;

    /// Global warp number of the `index`-th warp: block × warps per block + warp in block.
    fn warp_id(&self, index: u64) -> u32 {
        index as u32
    }

    /// Records the memory instructions of the `index`-th warp, in program order.
    fn build(&mut self, index: u64, warp: &mut Warp);
}

/// A resident warp: its instructions and how far it has issued them.
#[derive(Debug, Default)]
struct Slot {
    warp: Warp,
    next_instr: usize,
    next_access: usize,
}

/// The GPU front end: runs kernels and passes their interleaved, coalesced accesses to a sink.
pub(crate) struct Gpu<'s> {
    sink: &'s mut dyn FnMut(Access),
    slots: Vec<Slot>,
}

impl std::fmt::Debug for Gpu<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl<'s> Gpu<'s> {
    /// A GPU whose accesses go to `sink`.
    pub(crate) fn new(sink: &'s mut dyn FnMut(Access)) -> Self {
        Self {
            sink,
            slots: Vec::new(),
        }
    }

    /// Gives slot `i` the next warp of `kernel` that has any instruction; false when the launch has none left.
    fn refill<K: Kernel + ?Sized>(
        &mut self,
        kernel: &mut K,
        i: usize,
        next: &mut u64,
        total: u64,
    ) -> bool {
        while self.slots.len() <= i {
            self.slots.push(Slot::default());
        }
        let Some(slot) = self.slots.get_mut(i) else {
            return false;
        };
        while *next < total {
            let index = *next;
            *next += 1;
            slot.warp.reset(kernel.warp_id(index));
            kernel.build(index, &mut slot.warp);
            if !slot.warp.ends.is_empty() {
                slot.next_instr = 0;
                slot.next_access = 0;
                return true;
            }
        }
        false
    }

    /// Runs one kernel to completion: every warp's accesses reach the sink before this returns.
    pub(crate) fn launch<K: Kernel + ?Sized>(&mut self, kernel: &mut K) {
        let total = kernel.warps();
        let mut next = 0u64;
        let mut live = 0usize;
        while live < RESIDENT_WARPS && self.refill(kernel, live, &mut next, total) {
            live += 1;
        }
        while live > 0 {
            let mut i = 0;
            while i < live {
                let finished = match self.slots.get_mut(i) {
                    Some(slot) => {
                        let end = slot
                            .warp
                            .ends
                            .get(slot.next_instr)
                            .copied()
                            .unwrap_or(slot.next_access);
                        for a in slot.warp.accesses.get(slot.next_access..end).unwrap_or(&[]) {
                            (self.sink)(*a);
                        }
                        slot.next_access = end;
                        slot.next_instr += 1;
                        slot.next_instr >= slot.warp.ends.len()
                    }
                    None => true,
                };
                if finished && !self.refill(kernel, i, &mut next, total) {
                    // Keep the round-robin order of the others; this only happens as the launch drains.
                    if let Some(tail) = self.slots.get_mut(i..live) {
                        tail.rotate_left(1);
                    }
                    live -= 1;
                    continue;
                }
                i += 1;
            }
        }
    }
}

/// A kernel that stores (or loads) whole arrays element by element, one thread per element: the initialisation
/// kernels of the graph benchmarks.
#[derive(Debug)]
pub(crate) struct Sweep {
    /// Elements (threads).
    pub(crate) elements: u64,
    /// Base address and element size of each array touched, in program order.
    pub(crate) arrays: Vec<(u64, u64)>,
    /// Stores rather than loads.
    pub(crate) write: bool,
}

impl Kernel for Sweep {
    fn warps(&self) -> u64 {
        self.elements.div_ceil(WARP_LANES as u64)
    }

    fn build(&mut self, index: u64, warp: &mut Warp) {
        let first = index * WARP_LANES as u64;
        let count = (self.elements - first).min(WARP_LANES as u64);
        for &(base, elem) in &self.arrays {
            warp.range(base + first * elem, count * elem, self.write);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_words_make_one_line() {
        let lanes: Vec<u64> = (0..32).map(|i| 0x1000 + 4 * i).collect();
        let out = coalesce(3, &lanes, 4, false);
        assert_eq!(out, vec![Access::read(3, 0x1000, 128)]);
    }

    #[test]
    fn line_strided_lanes_make_one_access_each_in_order() {
        // Lanes in descending order: the accesses still come out ascending.
        let lanes: Vec<u64> = (0..32).rev().map(|i| 0x4000 + 128 * i + 8).collect();
        let out = coalesce(0, &lanes, 8, true);
        assert_eq!(out.len(), 32);
        for (i, a) in out.iter().enumerate() {
            assert_eq!(*a, Access::write(0, 0x4000 + 128 * i as u64 + 8, 8));
        }
    }

    #[test]
    fn straddling_and_duplicate_lanes() {
        // 8-byte element straddling two lines, plus a duplicate lane and a broadcast.
        let out = coalesce(1, &[124, 124, 0], 8, false);
        assert_eq!(out, vec![Access::read(1, 0, 12), Access::read(1, 128, 4)]);
        // Bytes counts distinct bytes, starting at the lowest one.
        let out = coalesce(1, &[8, 64], 4, false);
        assert_eq!(out, vec![Access::read(1, 8, 8)]);
        assert!(coalesce(1, &[], 4, false).is_empty());
        assert!(coalesce(1, &[0], 0, false).is_empty());
    }

    /// The obvious implementation: a byte set per line.
    fn naive(warp: u32, lanes: &[u64], elem: u32, write: bool) -> Vec<Access> {
        let mut bytes = std::collections::BTreeMap::<u64, std::collections::BTreeSet<u64>>::new();
        for &a in lanes {
            for b in a..a + u64::from(elem) {
                bytes
                    .entry(b / LINE_BYTES)
                    .or_default()
                    .insert(b % LINE_BYTES);
            }
        }
        bytes
            .into_iter()
            .map(|(line, set)| Access {
                addr: line * LINE_BYTES + set.first().copied().unwrap_or(0),
                warp,
                bytes: set.len() as u16,
                write,
            })
            .collect()
    }

    #[test]
    fn coalescing_matches_the_obvious_implementation() {
        let mut rng = crate::rng::Rng::new(5);
        for round in 0..2000 {
            let lanes_n = 1 + rng.below(32) as usize;
            let elem = [1u32, 2, 4, 8, 16, 200][rng.below(6) as usize];
            let spread = [64u64, 512, 1 << 12, 1 << 20][round % 4];
            let base = rng.below(1 << 40);
            let lanes: Vec<u64> = match round % 3 {
                0 => (0..lanes_n).map(|_| base + rng.below(spread)).collect(),
                1 => (0..lanes_n as u64).map(|i| base + i * spread / 8).collect(),
                _ => (0..lanes_n as u64)
                    .rev()
                    .map(|i| base + i * u64::from(elem))
                    .collect(),
            };
            assert_eq!(
                coalesce(2, &lanes, elem, round % 2 == 0),
                naive(2, &lanes, elem, round % 2 == 0)
            );
        }
    }

    #[test]
    fn range_matches_gather() {
        let mut w = Warp::default();
        w.reset(5);
        w.range(100, 32 * 4, false);
        let lanes: Vec<u64> = (0..32).map(|i| 100 + 4 * i).collect();
        assert_eq!(w.accesses, coalesce(5, &lanes, 4, false));
        assert_eq!(w.instructions(), 1);
        w.range(0, 0, false);
        w.gather(&[], 4, true);
        assert_eq!(w.instructions(), 1);
    }

    struct Toy {
        warps: u64,
        instrs: u64,
    }

    impl Kernel for Toy {
        fn warps(&self) -> u64 {
            self.warps
        }
        fn build(&mut self, index: u64, warp: &mut Warp) {
            for k in 0..self.instrs {
                warp.range((index * self.instrs + k) * 128, 4, false);
            }
        }
    }

    #[test]
    fn warps_interleave_round_robin_within_the_window() {
        let mut seen = Vec::new();
        {
            let mut sink = |a: Access| seen.push(a);
            let mut gpu = Gpu::new(&mut sink);
            gpu.launch(&mut Toy {
                warps: 3,
                instrs: 2,
            });
            gpu.launch(&mut Toy {
                warps: 1,
                instrs: 1,
            });
        }
        let warps: Vec<u32> = seen.iter().map(|a| a.warp).collect();
        assert_eq!(warps, vec![0, 1, 2, 0, 1, 2, 0]);
        let addrs: Vec<u64> = seen.iter().map(|a| a.addr / 128).collect();
        assert_eq!(addrs, vec![0, 2, 4, 1, 3, 5, 0]);
    }

    #[test]
    fn finished_warps_are_replaced_by_the_next() {
        let mut seen = Vec::new();
        {
            let mut sink = |a: Access| seen.push(a.warp);
            let mut gpu = Gpu::new(&mut sink);
            gpu.launch(&mut Toy {
                warps: RESIDENT_WARPS as u64 + 2,
                instrs: 2,
            });
        }
        assert_eq!(seen.len(), 2 * (RESIDENT_WARPS + 2));
        // First round: warps 0..240; warps 0 and 1 finish in round two and hand their slots to 240 and 241.
        assert_eq!(seen[RESIDENT_WARPS], 0);
        assert_eq!(seen[2 * RESIDENT_WARPS], 240);
        assert_eq!(seen[2 * RESIDENT_WARPS + 1], 241);
        assert_eq!(*seen.last().unwrap_or(&0), 241);
    }
}
