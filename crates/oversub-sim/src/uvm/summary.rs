//! Arithmetic over a suite's results that every front shows the same way: the main ratio, look-ups of one run or
//! speed-up, the workloads in order, and the per-run CSV (`oversub sim uvm --csv`).

use super::policy::Policy;
use super::report::speedup_of;
use super::sim::SimResult;
use super::suite::{ratio_percent, SpeedupRow};

/// The ratio (in percent) the headline figures show: 200% when the suite ran it, else its first ratio.
pub fn main_ratio_of(ratios: &[f64]) -> u32 {
    let ratios: Vec<u32> = ratios.iter().map(|r| ratio_percent(*r)).collect();
    if ratios.contains(&200) {
        200
    } else {
        ratios.first().copied().unwrap_or(200)
    }
}

/// The run of `policy` (by its display name) on `workload` at `ratio` percent.
pub fn find<'r>(
    results: &'r [SimResult],
    workload: &str,
    ratio: u32,
    policy: &str,
) -> Option<&'r SimResult> {
    results.iter().find(|r| {
        r.workload == workload && ratio_percent(r.ratio) == ratio && r.policy.to_string() == policy
    })
}

/// The best LazyPgStatSW threshold of a workload and ratio (as Fig. 10 shows it).
pub fn best_static<'r>(
    results: &'r [SimResult],
    workload: &str,
    ratio: u32,
) -> Option<&'r SimResult> {
    results
        .iter()
        .filter(|r| {
            r.workload == workload
                && ratio_percent(r.ratio) == ratio
                && matches!(r.policy, Policy::LazyPgStatSw { .. })
        })
        .min_by(|a, b| a.est_time_s.total_cmp(&b.est_time_s))
}

/// The workloads of `rows`, in their first-seen order.
pub fn workloads_in(rows: &[SpeedupRow]) -> Vec<String> {
    let mut w: Vec<String> = Vec::new();
    for r in rows {
        if !w.contains(&r.workload) {
            w.push(r.workload.clone());
        }
    }
    w
}

/// The speed-up of `label` on `workload` at `ratio` percent.
pub fn lookup(rows: &[SpeedupRow], workload: &str, ratio: u32, label: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == workload && r.ratio_percent == ratio && r.label == label)
        .map(|r| r.speedup)
}

/// One CSV line per run (with its speed-up over LazyGrpHW), commas in names replaced by semicolons.
pub fn csv(results: &[SimResult], rows: &[SpeedupRow]) -> String {
    let mut out = String::from(
        "workload,ratio_percent,policy,est_time_s,speedup_vs_lazygrphw,faults,migrations,prefetches,evictions,\
         evictions_per_page,remote_accesses,cache_hits,gpu_mem_accesses,bytes_h2d,bytes_d2h,accesses,sim_seconds,\
         serial_time_s,throttles,pins,pst_updates\n",
    );
    for r in results {
        let c = &r.counters;
        out.push_str(&format!(
            "{},{},{},{:e},{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:e},{},{},{}\n",
            r.workload.replace(',', ";"),
            ratio_percent(r.ratio),
            r.policy.to_string().replace(',', ";"),
            r.est_time_s,
            speedup_of(rows, r).map_or_else(String::new, |s| format!("{s:.6}")),
            c.faults,
            c.migrations,
            c.prefetches,
            c.evictions,
            r.evictions_per_page,
            c.remote_accesses,
            c.cache_hits,
            c.gpu_mem_accesses,
            c.bytes_h2d,
            c.bytes_d2h,
            c.accesses,
            r.sim_seconds,
            r.serial_time_s,
            c.throttles,
            c.pins,
            c.pst_updates
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, ratio: u32, label: &str, speedup: f64) -> SpeedupRow {
        SpeedupRow {
            workload: workload.into(),
            ratio_percent: ratio,
            label: label.into(),
            est_time_s: 1.0,
            speedup,
        }
    }

    #[test]
    fn main_ratio_prefers_200() {
        assert_eq!(main_ratio_of(&[1.5, 2.0, 3.0]), 200);
        assert_eq!(main_ratio_of(&[1.5, 3.0]), 150);
        assert_eq!(main_ratio_of(&[]), 200);
    }

    #[test]
    fn rows_in_order_and_looked_up() {
        let rows = vec![
            row("b", 200, "LazyGrpHW", 1.0),
            row("a", 200, "Oracle", 2.5),
            row("b", 150, "Oracle", 1.5),
        ];
        assert_eq!(workloads_in(&rows), vec!["b".to_string(), "a".to_string()]);
        assert_eq!(lookup(&rows, "a", 200, "Oracle"), Some(2.5));
        assert_eq!(lookup(&rows, "a", 150, "Oracle"), None);
    }

    #[test]
    fn empty_results() {
        assert!(find(&[], "a", 200, "Oracle").is_none());
        assert!(best_static(&[], "a", 200).is_none());
        assert!(csv(&[], &[]).starts_with("workload,ratio_percent,policy,"));
        assert_eq!(csv(&[], &[]).lines().count(), 1);
    }
}
