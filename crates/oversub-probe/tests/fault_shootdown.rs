//! Smoke runs of the page-fault (Fig. 6) and TLB-shootdown (Table 4) probes at tiny sizes: the figures must be
//! positive and finite and the counts right; no timing is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use oversub_probe::derive::FaultSplit;
use oversub_probe::fault::{self, FaultPoint};
use oversub_probe::shootdown::{self, ShootdownOp};
use oversub_probe::{no_tick, ProbeError};
use oversub_testkit::require;

fn positive(what: &str, v: f64) {
    assert!(v.is_finite() && v > 0.0, "{what} = {v}");
}

fn check_split(s: &FaultSplit) {
    for (what, v) in [
        ("queueing", s.queueing_s),
        ("servicing", s.servicing_s),
        ("resume", s.resume_s),
    ] {
        assert!(v.is_finite() && v >= 0.0, "{what} = {v}");
    }
    positive("split total", s.total_s);
    let sum = s.queueing_s + s.servicing_s + s.resume_s;
    assert!(
        (sum - s.total_s).abs() <= 1e-9 * s.total_s.max(1.0) + 1e-12,
        "{sum} vs {}",
        s.total_s
    );
}

fn check_point(p: &FaultPoint, faults: usize, threads: usize, uffd: bool) {
    assert_eq!(p.threads, threads);
    assert_eq!(p.faults, faults as u64);
    positive("wall", p.wall_s);
    positive("mean latency", p.mean_latency_s);
    positive("median latency", p.median_latency_s);
    positive("throughput", p.throughput_per_s);
    match (&p.split, uffd) {
        (Some(s), true) => {
            check_split(s);
            // The mean of the totals is the mean latency.
            assert!((s.total_s - p.mean_latency_s).abs() <= 1e-9 * p.mean_latency_s + 1e-12);
        }
        (None, false) => {}
        (s, _) => panic!("split {s:?} for uffd = {uffd}"),
    }
}

#[test]
fn soft_faults_smoke() {
    for threads in [1, 4] {
        let p = fault::soft_faults(256, threads).unwrap();
        check_point(&p, 256, threads, false);
    }
}

#[test]
fn uffd_faults_smoke() {
    require!(
        oversub_testkit::userfaultfd_available(),
        "userfaultfd unavailable"
    );
    for threads in [1, 4] {
        let p = fault::uffd_faults(256, threads).unwrap();
        check_point(&p, 256, threads, true);
    }
}

#[test]
fn fault_measure_smoke() {
    let ticks = Mutex::new(Vec::new());
    let tick = |s: &str| ticks.lock().unwrap().push(s.to_owned());
    let r = fault::measure(128, &[1, 2], &tick).unwrap();
    assert_eq!(r.soft.len(), 2);
    for (p, threads) in r.soft.iter().zip([1, 2]) {
        check_point(p, 128, threads, false);
    }
    match &r.uffd_unavailable {
        None => {
            assert_eq!(r.uffd.len(), 2);
            for (p, threads) in r.uffd.iter().zip([1, 2]) {
                check_point(p, 128, threads, true);
            }
            assert_eq!(ticks.lock().unwrap().len(), 4);
        }
        Some(why) => {
            eprintln!("userfaultfd unavailable: {why}");
            assert!(r.uffd.is_empty());
            assert!(!why.is_empty());
        }
    }
    assert!(ticks.lock().unwrap()[0].contains("soft"));
}

#[test]
fn fault_inputs_are_checked() {
    for (faults, threads) in [(0, 1), (16, 0), (4, 8)] {
        assert!(matches!(
            fault::soft_faults(faults, threads),
            Err(ProbeError::InvalidInput(_))
        ));
        assert!(matches!(
            fault::uffd_faults(faults, threads),
            Err(ProbeError::InvalidInput(_))
        ));
    }
    assert!(matches!(
        fault::measure(16, &[], &no_tick),
        Err(ProbeError::InvalidInput(_))
    ));
}

#[test]
fn shootdown_measure_smoke() {
    let ticks = Mutex::new(0usize);
    let tick = |_: &str| *ticks.lock().unwrap() += 1;
    let points = shootdown::measure(20, 16, &tick).unwrap();
    assert_eq!(points.len(), 8);
    assert_eq!(*ticks.lock().unwrap(), 8);
    for op in ["mprotect", "munmap"] {
        for pages in [1, 16] {
            let here: Vec<_> = points
                .iter()
                .filter(|p| p.op == op && p.pages == pages)
                .collect();
            assert_eq!(here.len(), 2, "{op} {pages}");
            assert_eq!(here[0].remote_threads, 0);
            assert!(here[1].remote_threads >= 1);
        }
    }
    for p in &points {
        assert_eq!(p.iterations, 20);
        positive("mean", p.mean_s);
        positive("median", p.median_s);
    }
}

#[test]
fn shootdown_inputs_are_checked() {
    for (pages, iterations) in [(0, 5), (4, 0)] {
        assert!(matches!(
            shootdown::measure_one(ShootdownOp::Mprotect, pages, 1, iterations),
            Err(ProbeError::InvalidInput(_))
        ));
    }
    assert!(matches!(
        shootdown::measure(5, 0, &no_tick),
        Err(ProbeError::InvalidInput(_))
    ));
    let one = shootdown::measure(3, 1, &no_tick).unwrap();
    assert_eq!(one.len(), 4);
    // More spinners than CPUs is allowed: they share CPUs.
    let p = shootdown::measure_one(ShootdownOp::Munmap, 2, 3, 3).unwrap();
    assert_eq!((p.op.as_str(), p.pages, p.remote_threads), ("munmap", 2, 3));
}
