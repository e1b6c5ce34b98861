//! Whole runs on generated workloads: the same seed gives the same output, results come back in order, the
//! oracle bound holds on real access patterns, and a document rebuilt from its rows (as `--ray` does) is the same.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use oversub_sim::uvm::policy::Policy;
use oversub_sim::uvm::report::{RunRow, UvmDoc};
use oversub_sim::uvm::sim::{simulate, SimConfig, SimResult};
use oversub_sim::uvm::suite::{run_suite, speedups, SuiteSpec, TraceSource};
use oversub_sim::uvm::workload::{WorkloadKind, WorkloadParams, WorkloadSize};

fn spec(seed: u64, threads: usize) -> SuiteSpec {
    SuiteSpec {
        sources: vec![
            TraceSource::Workload(WorkloadKind::Nw),
            TraceSource::Workload(WorkloadKind::Bst),
        ],
        ratios: vec![1.0, 3.0],
        policies: vec![
            Policy::LazyGrpHw { threshold: 256 },
            Policy::DynaMap,
            Policy::LazyPgStatSw { threshold: 8 },
            Policy::LazyPgStatSw { threshold: 64 },
            Policy::EagerNoPrefetch,
            Policy::Oracle,
        ],
        params: WorkloadParams {
            size: WorkloadSize::Quick,
            seed,
            graph: None,
        },
        template: SimConfig::new(Policy::DynaMap, 2.0),
        threads,
    }
}

/// Everything but the wall time.
fn outcome(r: &SimResult) -> String {
    format!(
        "{} {} {} {:?} {}",
        r.workload, r.ratio, r.policy, r.counters, r.est_time_s
    )
}

#[test]
fn same_seed_same_output_whatever_the_threads() {
    let a = run_suite(&spec(7, 1), &|_| {}).unwrap();
    let b = run_suite(&spec(7, 2), &|_| {}).unwrap();
    assert_eq!(a.len(), 2 * 2 * 6);
    assert_eq!(
        a.iter().map(outcome).collect::<Vec<_>>(),
        b.iter().map(outcome).collect::<Vec<_>>()
    );
    // Order: source, then ratio, then policy.
    assert_eq!(a[0].workload, "nw");
    assert_eq!(a[6].ratio, 3.0);
    assert_eq!(a[12].workload, "bst");
    let c = run_suite(&spec(8, 2), &|_| {}).unwrap();
    assert_ne!(
        outcome(&a[12]),
        outcome(&c[12]),
        "BST's keys depend on the seed"
    );

    for chunk in a.chunks(6) {
        let demand = chunk
            .iter()
            .find(|r| r.policy == Policy::EagerNoPrefetch)
            .unwrap();
        let oracle = chunk.iter().find(|r| r.policy == Policy::Oracle).unwrap();
        assert!(oracle.counters.migrations <= demand.counters.migrations);
        for r in chunk {
            assert!(r.peak_resident_pages <= r.capacity_pages);
        }
    }
    // The figures keep LazyPgStatSW's best threshold and normalise to LazyGrpHW.
    let rows = speedups(&a);
    let base = rows.iter().find(|r| r.label == "LazyGrpHW").unwrap();
    assert_eq!(base.speedup, 1.0);
    assert_eq!(rows.iter().filter(|r| r.label == "LazyPgStatSW").count(), 4);
    assert!(rows.iter().all(|r| !r.label.starts_with("LazyPgStatSW(")));
}

#[test]
fn a_bad_trace_file_fails_the_suite_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.ovtrace");
    std::fs::write(&path, b"OVSTRACE\x01\x00").unwrap();
    let mut s = spec(1, 2);
    s.sources = vec![TraceSource::File(path)];
    let e = run_suite(&s, &|_| {}).unwrap_err().to_string();
    assert!(e.contains("broken.ovtrace"), "{e}");
}

/// `oversub sim uvm --ray` gets each run's row back as JSON from Python, in another order, and rebuilds the
/// document with `UvmDoc::from_runs`: that must be the local document, speed-ups included.
#[test]
fn a_document_rebuilt_from_its_rows_is_the_same() {
    let spec = spec(3, 2);
    let results = run_suite(&spec, &|_| {}).unwrap();
    let doc = UvmDoc::new(&results, &spec, 1.5);
    let mut rows: Vec<(Policy, RunRow)> = doc
        .runs
        .iter()
        .map(|r| {
            let mut value = serde_json::to_value(r).unwrap();
            value["speedup_vs_lazygrphw"] = serde_json::Value::Null; // recomputed
            let row: RunRow = serde_json::from_value(value).unwrap();
            (Policy::parse(&row.policy).unwrap(), row)
        })
        .collect();
    rows.reverse();
    let mut again = UvmDoc::from_runs(rows, &spec.template, 1.5);
    again.runs.reverse();
    assert_eq!(
        serde_json::to_value(&again.runs).unwrap(),
        serde_json::to_value(&doc.runs).unwrap()
    );
    // The figures' rows follow the runs' order, so compare them as sets.
    let key = |d: &UvmDoc| {
        let mut v: Vec<String> = d.speedups.iter().map(|s| format!("{s:?}")).collect();
        v.sort();
        v
    };
    assert_eq!(key(&again), key(&doc));
    assert!(doc.runs.iter().any(|r| r.speedup_vs_lazygrphw.is_some()));
}

/// Without the oracle a suite streams its generated workloads (the generator runs twice, the trace is never held);
/// every run must give what the same run on the held trace gives, on all seven workloads.
#[test]
fn a_streamed_suite_gives_what_runs_on_held_traces_give() {
    let spec = SuiteSpec {
        sources: WorkloadKind::ALL
            .iter()
            .map(|&k| TraceSource::Workload(k))
            .collect(),
        ratios: vec![0.5, 2.0],
        policies: vec![
            Policy::LazyGrpHw { threshold: 256 },
            Policy::DynaMap,
            Policy::DynaMapOffline,
            Policy::Eager,
            Policy::PinHost,
        ],
        params: WorkloadParams {
            size: WorkloadSize::Scale(1.0 / 64.0),
            seed: 3,
            graph: None,
        },
        template: SimConfig::new(Policy::DynaMap, 2.0),
        threads: 2,
    };
    let streamed = run_suite(&spec, &|_| {}).unwrap();
    let json = |r: &SimResult| {
        let mut r = r.clone();
        r.sim_seconds = 0.0;
        serde_json::to_string(&r).unwrap()
    };
    let mut next = streamed.iter();
    for source in &spec.sources {
        let trace = source.prepare(&spec.params, &spec.template).unwrap();
        for &ratio in &spec.ratios {
            for &policy in &spec.policies {
                let mut config = spec.template.clone();
                config.ratio = ratio;
                config.policy = policy;
                let held = simulate(&trace, &config).unwrap();
                let got = next.next().unwrap();
                assert_eq!(json(got), json(&held), "{} {policy} {ratio}", source.name());
            }
        }
    }
    assert!(next.next().is_none());
}
