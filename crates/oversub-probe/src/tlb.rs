//! TLB-miss latency and concurrency by the paper's method (Sec. IV-A, Table 3 and Fig. 2).
//!
//! A chain of dependent loads (each address comes from the previous load) visits `accesses` locations at a fixed
//! stride, in a random order so that no prefetcher runs ahead of it. At a 64 B stride, consecutive accesses share a page, so only one access in 64 crosses into a new page;
//! at a page stride every access is on a new page (the stride is 4 KiB + 64 B, see [`PAGE_STRIDE_BYTES`]). Both runs touch the same number of cache lines, so after a
//! warm-up pass both find their lines in the caches alike, and the difference in time is the difference in TLB
//! misses. The chain is long enough (16,384 pages by default) that its pages overflow any second-level TLB, so
//! every access of the 4 KiB run walks the page table. Misses are counted with `perf_event_open` where it works;
//! otherwise they are derived from the pattern as the paper reasons (one per page touched) and the result says
//! so. Runs are repeated and the median kept.
//!
//! With transparent huge pages the same page-stride chain stays within a few 2 MiB pages; the time per access
//! it then takes shows what large pages save. For concurrency, `k` independent chains advance in one loop, so
//! the CPU keeps up to `k` misses in flight, like the paper's `k` workitems: the extra time per miss that a chain
//! sees, and the misses served per second, against `k`.

use std::time::Instant;

use oversub_profile::MissCount;
use serde::Serialize;

use crate::derive::{rate_per_s, tlb_miss_latency_s};
use crate::mem::{Mapping, HUGE_PAGE_BYTES, PAGE_BYTES};
use crate::perf::TlbMissCounter;
use crate::{ProbeError, Tick};

const WORD: usize = std::mem::size_of::<usize>();
/// The cache line, the small stride.
pub const LINE_BYTES: usize = 64;
/// The large stride: a page and a line. Every access still lands on a new page, but successive accesses fall in
/// different cache sets. A stride of exactly 4 KiB over physically contiguous memory (a huge page) maps every
/// access to the same few sets, so the huge-page run would measure cache conflicts instead of the TLB.
pub const PAGE_STRIDE_BYTES: usize = PAGE_BYTES + LINE_BYTES;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct TlbOptions {
    /// Dependent accesses per run (the paper: 10,000).
    pub accesses: usize,
    /// Timed runs per measurement; the median is kept.
    pub repeats: usize,
    /// Chains in flight at once for the concurrency sweep (the paper: 1 to 64 workitems).
    pub concurrency: Vec<usize>,
    /// Pages over all chains of one concurrency point (each of `k` chains gets `pages / k`).
    pub concurrency_pages: usize,
    /// Also measure with transparent huge pages.
    pub huge_pages: bool,
}

impl TlbOptions {
    /// The full probe.
    pub fn full() -> Self {
        TlbOptions {
            accesses: 16_384,
            repeats: 15,
            concurrency: vec![1, 2, 4, 8, 16, 32, 64],
            concurrency_pages: 65_536,
            huge_pages: true,
        }
    }

    /// `--quick`.
    pub fn quick() -> Self {
        TlbOptions {
            accesses: 16_384,
            repeats: 5,
            concurrency: vec![1, 4, 16, 64],
            concurrency_pages: 16_384,
            huge_pages: true,
        }
    }

    fn check(&self) -> Result<(), ProbeError> {
        if self.accesses < 2 || self.repeats == 0 {
            return Err(ProbeError::InvalidInput(
                "the TLB probe needs at least 2 accesses and 1 repeat".into(),
            ));
        }
        if let Some(&k) = self.concurrency.iter().find(|&&k| k == 0 || k > MAX_CHAINS) {
            return Err(ProbeError::InvalidInput(format!(
                "TLB concurrency {k}: chains must be 1 to {MAX_CHAINS}"
            )));
        }
        Ok(())
    }
}

/// One timed chain.
#[derive(Debug, Clone, Serialize)]
pub struct StrideRun {
    /// Distance between consecutive accesses of a chain.
    pub stride_bytes: usize,
    /// Dependent accesses per chain.
    pub accesses: u64,
    /// Chains run at once.
    pub chains: usize,
    /// Median run time.
    pub time_s: f64,
    /// TLB misses of the median run (counted or derived).
    pub tlb_misses: f64,
    /// Time per access of one chain.
    pub access_s: f64,
}

/// Table 3: the two runs and the latency derived from them.
#[derive(Debug, Clone, Serialize)]
pub struct TlbLatency {
    /// Whether the region was advised to use transparent huge pages.
    pub huge_pages: bool,
    /// Bytes of the 4 KiB-stride region the kernel backed with huge pages (from /proc/self/smaps).
    pub huge_backed_bytes: Option<u64>,
    /// The 64 B-stride run.
    pub line_stride: StrideRun,
    /// The 4 KiB-stride run.
    pub page_stride: StrideRun,
    /// (time difference) / (miss difference); absent with huge pages, where the miss difference is a handful
    /// and the quotient meaningless.
    pub latency_s: Option<f64>,
    /// How the misses were counted.
    pub miss_count: MissCount,
}

/// Fig. 2: latency per miss against misses in flight.
#[derive(Debug, Clone, Serialize)]
pub struct ConcurrencyPoint {
    /// Independent chains in flight.
    pub chains: usize,
    /// Extra time per TLB miss that each chain sees (4 KiB vs 64 B stride, as in Table 3).
    pub latency_s: f64,
    /// Misses served per second over all chains.
    pub misses_per_s: f64,
    /// Time per step of the 4 KiB-stride chains.
    pub page_stride_step_s: f64,
    /// Time per step of the 64 B-stride chains.
    pub line_stride_step_s: f64,
}

/// Everything the TLB probe measured.
#[derive(Debug, Clone, Serialize)]
pub struct TlbResults {
    /// With 4 KiB pages.
    pub base: TlbLatency,
    /// With transparent huge pages, when they could be had.
    pub huge: Option<TlbLatency>,
    /// Why there is no huge-page run.
    pub huge_unavailable: Option<String>,
    /// The concurrency sweep (4 KiB pages).
    pub concurrency: Vec<ConcurrencyPoint>,
    /// How misses were counted, and why not by counters when they were not.
    pub miss_count: MissCount,
    /// Why the hardware counter was not used.
    pub counter_unavailable: Option<String>,
}

/// Most chains one loop advances.
pub const MAX_CHAINS: usize = 64;

/// `chains` chains of `accesses` words each, at `stride` bytes, in one mapping; each word holds the word index
/// of the next access of its chain (the last points back to the first, so a chain can be walked again).
struct Chains {
    map: Mapping,
    starts: Vec<usize>,
    accesses: usize,
    stride: usize,
}

impl Chains {
    fn new(chains: usize, accesses: usize, stride: usize, huge: bool) -> Result<Self, ProbeError> {
        let span = accesses
            .checked_mul(stride)
            .and_then(|s| s.checked_next_multiple_of(PAGE_BYTES))
            .ok_or_else(|| ProbeError::InvalidInput("TLB chain too large".into()))?;
        let total = span
            .checked_mul(chains)
            .ok_or_else(|| ProbeError::InvalidInput("TLB chains too large".into()))?;
        let mut map = Mapping::new(total, huge)?;
        let words = map.words_mut();
        let step = stride / WORD;
        let mut starts = Vec::with_capacity(chains);
        // The slots are visited in a random order: a stride prefetcher that learns the pattern would fetch the
        // next line, and walk the page table for it, ahead of the dependent load, hiding the very miss we time.
        let mut rng =
            oversub_base::rng::Rng::new(0x5EED_u64 ^ (chains as u64) << 32 ^ stride as u64);
        let mut order: Vec<usize> = (0..accesses).collect();
        for c in 0..chains {
            let base = c * span / WORD;
            for i in (1..accesses).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
            for (i, &slot) in order.iter().enumerate() {
                let next = order[(i + 1) % accesses];
                words[base + slot * step] = base + next * step;
            }
            starts.push(base + order[0] * step);
        }
        Ok(Chains {
            map,
            starts,
            accesses,
            stride,
        })
    }

    /// Walks every chain once, all in lockstep; returns the seconds it took.
    fn walk(&mut self) -> f64 {
        let accesses = self.accesses;
        let mut at = [0usize; MAX_CHAINS];
        let k = self.starts.len();
        at[..k].copy_from_slice(&self.starts);
        let words = self.map.words_mut();
        let t = Instant::now();
        for _ in 0..accesses {
            for p in &mut at[..k] {
                *p = words[*p];
            }
        }
        let elapsed = t.elapsed().as_secs_f64();
        std::hint::black_box(&at);
        elapsed
    }

    /// Pages a chain touches per walk, the paper's derived miss count: one per page, and never more than one per
    /// access.
    fn pages_per_chain(&self, page: usize) -> f64 {
        (self.accesses * self.stride)
            .div_ceil(page)
            .min(self.accesses) as f64
    }
}

/// Times `repeats` walks after one untimed warm-up walk (which also faults the pages in); returns the median
/// time and the misses of that run (counted when `counter` is given).
fn timed(
    chains: &mut Chains,
    repeats: usize,
    counter: Option<&TlbMissCounter>,
) -> Result<(f64, Option<f64>), ProbeError> {
    chains.walk();
    let mut runs = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        if let Some(c) = counter {
            c.start()?;
        }
        let t = chains.walk();
        let misses = counter.map(TlbMissCounter::stop).transpose()?;
        runs.push((t, misses));
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (t, m) = runs[runs.len() / 2];
    Ok((t, m.map(|m| m as f64)))
}

fn stride_run(
    chains: &mut Chains,
    repeats: usize,
    counter: Option<&TlbMissCounter>,
    page: usize,
) -> Result<StrideRun, ProbeError> {
    let (time_s, counted) = timed(chains, repeats, counter)?;
    let k = chains.starts.len();
    let tlb_misses = counted.unwrap_or_else(|| chains.pages_per_chain(page) * k as f64);
    Ok(StrideRun {
        stride_bytes: chains.stride,
        accesses: chains.accesses as u64,
        chains: k,
        time_s,
        tlb_misses,
        access_s: time_s / chains.accesses as f64,
    })
}

/// Table 3 with 4 KiB pages or (with `huge`) transparent huge pages.
pub fn latency(
    accesses: usize,
    repeats: usize,
    huge: bool,
    counter: Option<&TlbMissCounter>,
) -> Result<TlbLatency, ProbeError> {
    let page = if huge { HUGE_PAGE_BYTES } else { PAGE_BYTES };
    let mut lines = Chains::new(1, accesses, LINE_BYTES, huge)?;
    let line_stride = stride_run(&mut lines, repeats, counter, page)?;
    drop(lines);
    let mut pages = Chains::new(1, accesses, PAGE_STRIDE_BYTES, huge)?;
    let page_stride = stride_run(&mut pages, repeats, counter, page)?;
    let huge_backed_bytes = pages.map.huge_backed_bytes();
    let latency_s = if huge {
        None
    } else {
        Some(tlb_miss_latency_s(
            line_stride.time_s,
            line_stride.tlb_misses,
            page_stride.time_s,
            page_stride.tlb_misses,
        )?)
    };
    Ok(TlbLatency {
        huge_pages: huge,
        huge_backed_bytes,
        line_stride,
        page_stride,
        latency_s,
        miss_count: if counter.is_some() {
            MissCount::Perf
        } else {
            MissCount::Derived
        },
    })
}

/// One point of Fig. 2: `chains` chains in flight, `pages / chains` accesses each.
pub fn concurrency_point(
    chains: usize,
    pages: usize,
    repeats: usize,
    counter: Option<&TlbMissCounter>,
) -> Result<ConcurrencyPoint, ProbeError> {
    if chains == 0 || chains > MAX_CHAINS {
        return Err(ProbeError::InvalidInput(format!(
            "TLB concurrency {chains}: chains must be 1 to {MAX_CHAINS}"
        )));
    }
    let accesses = (pages / chains).max(2);
    let mut lines = Chains::new(chains, accesses, LINE_BYTES, false)?;
    let line = stride_run(&mut lines, repeats, counter, PAGE_BYTES)?;
    drop(lines);
    let mut paged = Chains::new(chains, accesses, PAGE_STRIDE_BYTES, false)?;
    let page = stride_run(&mut paged, repeats, counter, PAGE_BYTES)?;
    // Per chain: each chain makes `accesses` steps; the time is shared by all chains in lockstep.
    let per_chain = |r: &StrideRun| r.tlb_misses / chains as f64;
    let latency_s =
        tlb_miss_latency_s(line.time_s, per_chain(&line), page.time_s, per_chain(&page))?;
    Ok(ConcurrencyPoint {
        chains,
        latency_s,
        misses_per_s: rate_per_s(page.tlb_misses, page.time_s)?,
        page_stride_step_s: page.access_s,
        line_stride_step_s: line.access_s,
    })
}

/// The whole TLB probe.
pub fn measure(
    opts: &TlbOptions,
    thp_usable: bool,
    tick: Tick<'_>,
) -> Result<TlbResults, ProbeError> {
    opts.check()?;
    let (counter, counter_unavailable) = match TlbMissCounter::open() {
        Ok(c) => (Some(c), None),
        Err(ProbeError::Unavailable { why, .. }) => (None, Some(why)),
        Err(e) => return Err(e),
    };
    let counter = counter.as_ref();
    tick("TLB miss latency, 4 KiB pages");
    let base = latency(opts.accesses, opts.repeats, false, counter)?;
    let (huge, huge_unavailable) = if !opts.huge_pages {
        (None, Some("not asked for".to_string()))
    } else if !thp_usable {
        (
            None,
            Some(
                "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled)"
                    .into(),
            ),
        )
    } else {
        tick("TLB miss latency, huge pages");
        let h = latency(opts.accesses, opts.repeats, true, counter)?;
        match h.huge_backed_bytes {
            Some(0) => (
                None,
                Some(
                    "the kernel gave no huge pages to an MADV_HUGEPAGE region (fragmented memory?)"
                        .into(),
                ),
            ),
            _ => (Some(h), None),
        }
    };
    let mut concurrency = Vec::with_capacity(opts.concurrency.len());
    for &k in &opts.concurrency {
        tick(&format!("TLB miss concurrency, {k} chains"));
        concurrency.push(concurrency_point(
            k,
            opts.concurrency_pages,
            opts.repeats,
            counter,
        )?);
    }
    Ok(TlbResults {
        base,
        huge,
        huge_unavailable,
        concurrency,
        miss_count: if counter.is_some() {
            MissCount::Perf
        } else {
            MissCount::Derived
        },
        counter_unavailable,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tiny_measurement_is_positive_and_finite() {
        let opts = TlbOptions {
            accesses: 256,
            repeats: 3,
            concurrency: vec![1, 4],
            concurrency_pages: 256,
            huge_pages: true,
        };
        let r = measure(&opts, true, &crate::no_tick).unwrap();
        for run in [&r.base.line_stride, &r.base.page_stride] {
            assert!(run.time_s > 0.0 && run.access_s.is_finite());
        }
        // Derived or counted, the page-stride run has more misses; the latency itself may be noise at this size.
        assert!(r.base.page_stride.tlb_misses > r.base.line_stride.tlb_misses);
        assert!(r.base.latency_s.is_some_and(f64::is_finite));
        assert_eq!(r.concurrency.len(), 2);
        assert!(r
            .concurrency
            .iter()
            .all(|p| p.latency_s.is_finite() && p.misses_per_s > 0.0));
        let bad = TlbOptions {
            concurrency: vec![0],
            ..opts
        };
        assert!(matches!(
            measure(&bad, true, &crate::no_tick),
            Err(ProbeError::InvalidInput(_))
        ));
    }

    #[test]
    fn chains_visit_every_slot_and_return() {
        let mut c = Chains::new(3, 10, PAGE_BYTES, false).unwrap();
        let starts = c.starts.clone();
        let words = c.map.words_mut();
        for &s in &starts {
            let mut p = s;
            let mut seen = 0;
            loop {
                p = words[p];
                seen += 1;
                if p == s {
                    break;
                }
            }
            assert_eq!(seen, 10);
        }
        assert_eq!(c.pages_per_chain(PAGE_BYTES), 10.0);
        let c = Chains::new(1, 128, LINE_BYTES, false).unwrap();
        assert_eq!(c.pages_per_chain(PAGE_BYTES), 2.0);
        let c = Chains::new(1, 100, PAGE_STRIDE_BYTES, false).unwrap();
        assert_eq!(
            c.pages_per_chain(PAGE_BYTES),
            100.0,
            "one miss per access at most"
        );
        assert_eq!(c.pages_per_chain(2 << 20), 1.0);
    }
}
