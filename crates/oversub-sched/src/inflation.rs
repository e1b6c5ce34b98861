//! Work inflation (Sec. III-D): how much longer the works take while paging runs, read from the report of
//! `oversub bench interference --json` (the CLI's `--inflate-from` and any other front).

use serde_json::Value;

/// The worst slowdown of a CPU task under paging found in an interference report.
#[derive(Debug, Clone, PartialEq)]
pub struct Slowdown {
    /// Time with paging over time alone (may be under 1: noise).
    pub factor: f64,
    /// What it was measured on, in words.
    pub what: String,
}

impl Slowdown {
    /// The factor to plan with: slowdowns under 1 count as 1.
    pub fn inflation(&self) -> f64 {
        self.factor.max(1.0)
    }
}

/// The worst slowdown in an interference report: the largest of (a) each DRAM-thrashing row's bandwidth alone over
/// its bandwidth with paging and (b) the PREM task's mean iteration (load + compute + unload) with paging over
/// alone. `None` when the report has neither.
pub fn worst_slowdown(doc: &Value) -> Option<Slowdown> {
    let num = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_f64)
            .filter(|x| x.is_finite() && *x > 0.0)
    };
    let mut found: Vec<Slowdown> = Vec::new();
    for row in doc
        .get("thrashing")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let (Some(alone), Some(with)) =
            (num(row, "bw_alone_mbs"), num(row, "bw_with_paging_mbs"))
        {
            let kind = row.get("kind").and_then(|k| k.as_str()).unwrap_or("?");
            let tasks = row.get("tasks").and_then(|t| t.as_u64()).unwrap_or(0);
            found.push(Slowdown {
                factor: alone / with,
                what: format!(
                    "{tasks} {kind} DRAM thrasher(s): {alone:.0} MB/s alone, {with:.0} MB/s with paging"
                ),
            });
        }
    }
    let iteration_us = |c: Option<&Value>| -> Option<f64> {
        let c = c?;
        ["mem_load_us", "compute_us", "mem_unload_us"]
            .iter()
            .map(|k| c.get(*k).and_then(|p| num(p, "mean")))
            .sum()
    };
    if let Some(prem) = doc.get("prem") {
        let alone = iteration_us(prem.get("alone"));
        let paged = iteration_us(prem.get("paging").and_then(|p| p.get("interfered")));
        if let (Some(a), Some(p)) = (alone, paged) {
            found.push(Slowdown {
                factor: p / a,
                what: format!(
                    "the PREM task's mean iteration: {a:.0} us alone, {p:.0} us with paging"
                ),
            });
        }
    }
    found
        .into_iter()
        .max_by(|a, b| a.factor.total_cmp(&b.factor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn worst_of_thrashing_and_prem() {
        let doc = json!({
            "thrashing": [
                {"kind": "read", "tasks": 1, "bw_alone_mbs": 1000.0, "bw_with_paging_mbs": 800.0},
                {"kind": "write", "tasks": 2, "bw_alone_mbs": 1000.0, "bw_with_paging_mbs": 0.0},
            ],
            "prem": {
                "alone": {"mem_load_us": {"mean": 10.0}, "compute_us": {"mean": 80.0}, "mem_unload_us": {"mean": 10.0}},
                "paging": {"interfered": {"mem_load_us": {"mean": 20.0}, "compute_us": {"mean": 80.0},
                                          "mem_unload_us": {"mean": 10.0}}}
            }
        });
        let s = worst_slowdown(&doc).unwrap();
        assert_eq!(s.factor, 1.25);
        assert_eq!(
            s.what,
            "1 read DRAM thrasher(s): 1000 MB/s alone, 800 MB/s with paging"
        );
    }

    #[test]
    fn prem_alone_counts_and_speedups_count_as_one() {
        let doc = json!({"prem": {
            "alone": {"mem_load_us": {"mean": 10.0}, "compute_us": {"mean": 80.0}, "mem_unload_us": {"mean": 10.0}},
            "paging": {"interfered": {"mem_load_us": {"mean": 9.0}, "compute_us": {"mean": 80.0},
                                      "mem_unload_us": {"mean": 1.0}}}
        }});
        let s = worst_slowdown(&doc).unwrap();
        assert_eq!(s.factor, 0.9);
        assert_eq!(s.inflation(), 1.0);
    }

    #[test]
    fn nothing_found() {
        assert_eq!(worst_slowdown(&json!({})), None);
        assert_eq!(
            worst_slowdown(&json!({"thrashing": [{"bw_alone_mbs": 1.0}]})),
            None
        );
    }
}
