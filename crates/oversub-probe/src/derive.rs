//! The arithmetic that turns timings and counts into the probe's figures. Kept apart from the measuring code so
//! that it can be tested on fixed inputs (the paper's own Table 3 among them).

use serde::Serialize;

use crate::ProbeError;

/// TLB-miss latency by the paper's method (Table 3): two runs with the same number of accesses, one with few TLB
/// misses (64 B stride) and one with many (4 KiB stride); the extra time over the extra misses.
///
/// Errors when the second run does not have more misses than the first, or a time is negative or not finite.
pub fn tlb_miss_latency_s(
    few_misses_s: f64,
    few_misses: f64,
    many_misses_s: f64,
    many_misses: f64,
) -> Result<f64, ProbeError> {
    for (what, v) in [
        ("the 64 B-stride time", few_misses_s),
        ("the 4 KiB-stride time", many_misses_s),
        ("the 64 B-stride miss count", few_misses),
        ("the 4 KiB-stride miss count", many_misses),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(ProbeError::InvalidInput(format!(
                "{what} must be a non-negative number, not {v}"
            )));
        }
    }
    if many_misses <= few_misses {
        return Err(ProbeError::InvalidInput(format!(
            "the 4 KiB-stride run must miss the TLB more often than the 64 B-stride run ({many_misses} vs \
             {few_misses} misses)"
        )));
    }
    Ok((many_misses_s - few_misses_s) / (many_misses - few_misses))
}

/// Events per second.
pub fn rate_per_s(count: f64, seconds: f64) -> Result<f64, ProbeError> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(ProbeError::InvalidInput(format!(
            "a rate needs a positive time, not {seconds} s"
        )));
    }
    if !(count.is_finite() && count >= 0.0) {
        return Err(ProbeError::InvalidInput(format!(
            "a rate needs a non-negative count, not {count}"
        )));
    }
    Ok(count / seconds)
}

/// Seconds per event.
pub fn per_event_s(seconds: f64, count: f64) -> Result<f64, ProbeError> {
    if !(count.is_finite() && count > 0.0) {
        return Err(ProbeError::InvalidInput(format!(
            "a time per event needs at least one event, not {count}"
        )));
    }
    if !(seconds.is_finite() && seconds >= 0.0) {
        return Err(ProbeError::InvalidInput(format!(
            "a time per event needs a non-negative time, not {seconds} s"
        )));
    }
    Ok(seconds / count)
}

/// Mean of the samples; `None` when there are none.
pub fn mean(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64)
}

pub use oversub_base::stats::median;

/// Where the time of a fault serviced in user space went, from four timestamps (ns on one clock): the faulting
/// access began (`fault_ns`), the handler picked the fault up (`pick_ns`), the handler finished resolving it
/// (`done_ns`), and the access completed in the faulting thread (`resume_ns`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FaultSplit {
    /// Fault to pick-up: the kernel delivering the event and the handler getting to it (the paper's "schedule").
    pub queueing_s: f64,
    /// Pick-up to resolved: finding a page and installing it (the paper's "processing").
    pub servicing_s: f64,
    /// Resolved to the access completing: waking the faulting thread.
    pub resume_s: f64,
    /// The whole fault.
    pub total_s: f64,
}

impl FaultSplit {
    /// Errors when the timestamps are out of order.
    pub fn from_timestamps(
        fault_ns: u64,
        pick_ns: u64,
        done_ns: u64,
        resume_ns: u64,
    ) -> Result<Self, ProbeError> {
        if !(fault_ns <= pick_ns && pick_ns <= done_ns && done_ns <= resume_ns) {
            return Err(ProbeError::InvalidInput(format!(
                "fault timestamps out of order: fault {fault_ns}, pick-up {pick_ns}, done {done_ns}, resume \
                 {resume_ns} ns"
            )));
        }
        let s = |a: u64, b: u64| (b - a) as f64 * 1e-9;
        Ok(FaultSplit {
            queueing_s: s(fault_ns, pick_ns),
            servicing_s: s(pick_ns, done_ns),
            resume_s: s(done_ns, resume_ns),
            total_s: s(fault_ns, resume_ns),
        })
    }

    /// The component-wise mean of several splits; `None` when there are none.
    pub fn mean(splits: &[FaultSplit]) -> Option<FaultSplit> {
        let n = splits.len() as f64;
        (!splits.is_empty()).then(|| FaultSplit {
            queueing_s: splits.iter().map(|s| s.queueing_s).sum::<f64>() / n,
            servicing_s: splits.iter().map(|s| s.servicing_s).sum::<f64>() / n,
            resume_s: splits.iter().map(|s| s.resume_s).sum::<f64>() / n,
            total_s: splits.iter().map(|s| s.total_s).sum::<f64>() / n,
        })
    }
}

/// The value closest to `target` among `points` by a key, for picking an operating point from a grid.
pub fn closest<T>(points: &[T], target: f64, key: impl Fn(&T) -> f64) -> Option<&T> {
    points
        .iter()
        .min_by(|a, b| (key(a) - target).abs().total_cmp(&(key(b) - target).abs()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn the_papers_table_3() {
        // GPU: (18,444 - 12,707) µs / (10,010 - 166) misses = 0.58 µs.
        let gpu = tlb_miss_latency_s(12_707e-6, 166.0, 18_444e-6, 10_010.0).unwrap();
        assert!(close(gpu, 0.583e-6, 0.01), "{gpu}");
        // CPU: (477 - 134) µs / (15,938 - 1,412) misses = 0.023 µs.
        let cpu = tlb_miss_latency_s(134e-6, 1_412.0, 477e-6, 15_938.0).unwrap();
        assert!(close(cpu, 0.0236e-6, 0.01), "{cpu}");
        assert!(close(gpu / cpu, 25.0, 0.05), "the paper's 25×");
    }

    #[test]
    fn tlb_latency_refuses_impossible_inputs() {
        assert!(tlb_miss_latency_s(1.0, 10.0, 2.0, 10.0).is_err());
        assert!(tlb_miss_latency_s(1.0, 10.0, 2.0, 5.0).is_err());
        assert!(tlb_miss_latency_s(-1.0, 1.0, 2.0, 5.0).is_err());
        assert!(tlb_miss_latency_s(1.0, 1.0, f64::NAN, 5.0).is_err());
        // A faster many-miss run gives a negative latency: reported, not hidden (noise on a tiny run).
        assert!(tlb_miss_latency_s(2.0, 1.0, 1.0, 5.0).unwrap() < 0.0);
    }

    #[test]
    fn rates_and_times() {
        // The paper's Fig. 6 reading: 260 faults per millisecond.
        assert!(close(rate_per_s(260.0, 1e-3).unwrap(), 260_000.0, 1e-12));
        assert!(close(per_event_s(1e-3, 260.0).unwrap(), 3.846e-6, 1e-3));
        assert!(rate_per_s(1.0, 0.0).is_err());
        assert!(rate_per_s(-1.0, 1.0).is_err());
        assert!(per_event_s(1.0, 0.0).is_err());
        assert!(per_event_s(f64::INFINITY, 1.0).is_err());
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        assert_eq!(mean(&[]), None);
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn fault_split() {
        let s = FaultSplit::from_timestamps(1_000, 4_000, 4_500, 6_000).unwrap();
        assert!(close(s.queueing_s, 3e-6, 1e-12));
        assert!(close(s.servicing_s, 0.5e-6, 1e-12));
        assert!(close(s.resume_s, 1.5e-6, 1e-12));
        assert!(close(s.total_s, 5e-6, 1e-12));
        assert!(close(
            s.queueing_s + s.servicing_s + s.resume_s,
            s.total_s,
            1e-12
        ));
        assert!(FaultSplit::from_timestamps(5, 4, 6, 7).is_err());
        let m = FaultSplit::mean(&[
            s,
            FaultSplit::from_timestamps(0, 1_000, 2_000, 3_000).unwrap(),
        ])
        .unwrap();
        assert!(close(m.total_s, 4e-6, 1e-12));
        assert!(FaultSplit::mean(&[]).is_none());
    }

    #[test]
    fn closest_point() {
        let v = [1.0, 4.0, 16.0];
        assert_eq!(closest(&v, 5.0, |x| *x), Some(&4.0));
        assert_eq!(closest(&[] as &[f64], 5.0, |x| *x), None);
    }
}
