//! Planner: the paper's example, invariants on random tables, and optimality against a brute-force search.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use oversub_sched::plan::{self, max_oversubscription, min_feasible_hyperperiod, PlanContext};
use oversub_sched::{Bandwidths, Mode};

/// The paper's assumption for direct I/O: 4 GiB/s both ways.
const PAPER_DIRECT: Bandwidths = Bandwidths {
    read_bytes_per_s: 4.0 * GIB as f64,
    write_bytes_per_s: 4.0 * GIB as f64,
};

#[test]
fn paper_example_numbers() {
    let sys = paper(GIB, 4);
    for mode in Mode::ALL {
        let p = plan::plan(&sys, mode, 4, PAPER_DIRECT);
        let minp = min_feasible_hyperperiod(&sys, mode, PAPER_DIRECT);
        let ft = plan::feasible_table(&sys, mode, PAPER_DIRECT).map(|s| s.table.hyperperiod_s);
        eprintln!("{mode}: feasible table period {ft:?}");
        let ov = max_oversubscription(&sys, mode, PAPER_DIRECT);
        eprintln!(
            "{mode}: steady page-outs {} feasible(steady) {} min period {:?} max oversub {:?}",
            p.steady_page_outs_per_hyperperiod(),
            plan::steady_feasible(&sys, mode, PAPER_DIRECT),
            minp,
            ov
        );
        for s in p.problems().take(3) {
            eprintln!(
                "  {} h{}: {:?}",
                s.instance.component, s.instance.hyperperiod, s.problem
            );
        }
    }
    let demand_bw = Bandwidths {
        read_bytes_per_s: 1.33 * GIB as f64,
        write_bytes_per_s: 1.33 * GIB as f64,
    };
    eprintln!(
        "demand @1.33: {:?}",
        plan::feasible_table(&sys, Mode::Demand, demand_bw).map(|s| s.table.hyperperiod_s)
    );
    let _ = PlanContext::new(&sys, Mode::Async, 1, PAPER_DIRECT);
}

use oversub_sched::plan::{PageKind, PlannerState};
use oversub_sched::{BufferSpec, Component, DeviceKind, Platform, Slot, System, Table, Work};
use proptest::prelude::*;

const UNIT: u64 = 1 << 20;
const FAST: Bandwidths = Bandwidths {
    read_bytes_per_s: 1e12,
    write_bytes_per_s: 1e12,
};

/// A random table: `n` one-unit components spread over two CPUs, packed in random order with random gaps.
fn random_system(
    n: usize,
    cap_units: u64,
    order: &[usize],
    gaps: &[u8],
    read_only: &[bool],
) -> System {
    let components: Vec<Component> = (0..n)
        .map(|i| Component {
            name: format!("c{i}"),
            budget_s: 0.1,
            period_s: 1.0,
            cpus: vec![i % 2],
            gpus: vec![],
            buffers: vec![BufferSpec {
                name: "b".into(),
                size_bytes: UNIT,
                read_only: read_only[i % read_only.len()],
            }],
            work: Work::Sleep { compute_s: 0.01 },
        })
        .collect();
    let mut lane_t = [0.0f64; 2];
    let mut slots = Vec::new();
    for (k, &c) in order.iter().enumerate() {
        let cpu = c % 2;
        let start = lane_t[cpu] + f64::from(gaps[k % gaps.len()]) * 0.01;
        slots.push(Slot {
            component: c,
            start_s: start,
            length_s: 0.1,
            cpu,
            gpu: None,
        });
        lane_t[cpu] = start + 0.1;
    }
    slots.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let h = lane_t[0].max(lane_t[1]) + 0.05;
    System {
        platform: Platform {
            capacity_bytes: cap_units * UNIT,
            store: None,
            device: DeviceKind::Host,
            cpus: 2,
            gpus: 0,
        },
        components,
        table: Table {
            hyperperiod_s: h,
            slots,
        },
    }
}

/// Fewest page-outs any choice of victims achieves over the horizon (exhaustive search).
fn brute_force_min(ctx: &PlanContext<'_>, order: &[usize], state: PlannerState) -> Option<usize> {
    let Some((&idx, rest)) = order.split_first() else {
        return Some(0);
    };
    let need = ctx.need(&state, idx);
    let k = need.shortfall_bytes.div_ceil(UNIT) as usize;
    if k > need.candidates.len() {
        return None;
    }
    let mut best: Option<usize> = None;
    for combo in combinations(&need.candidates, k) {
        let mut next = state.clone();
        let _ = ctx.apply(&mut next, idx, &combo, None);
        if let Some(c) = brute_force_min(ctx, rest, next) {
            best = Some(best.map_or(c + k, |b: usize| b.min(c + k)));
        }
    }
    best
}

fn combinations<T: Copy>(items: &[T], k: usize) -> Vec<Vec<T>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    if items.len() < k {
        return Vec::new();
    }
    let mut out = combinations(&items[1..], k - 1);
    for c in &mut out {
        c.insert(0, items[0]);
    }
    out.extend(combinations(&items[1..], k));
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Belady's rule is optimal: the planner pages out no more than the best of all victim choices.
    #[test]
    fn page_outs_are_minimal(
        n in 3usize..6,
        extra in 0u64..3,
        perm_seed in any::<u64>(),
        gaps in proptest::collection::vec(0u8..5, 1..6),
        read_only in proptest::collection::vec(any::<bool>(), 1..4),
    ) {
        let mut order: Vec<usize> = (0..n).collect();
        let mut x = perm_seed | 1;
        for i in (1..n).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let cap = 2 + extra;
        let sys = random_system(n, cap, &order, &gaps, &read_only);
        let ctx = PlanContext::new(&sys, Mode::Async, 3, FAST).with_finite_horizon();
        let planned = ctx.plan();
        let best = brute_force_min(&ctx, &ctx.decision_order(), ctx.initial_state());
        if planned.slots.iter().all(|s| s.problem.is_none()) {
            let total: usize = planned.slots.iter().map(|s| s.page_outs.len()).sum();
            prop_assert_eq!(Some(total), best, "planner {} vs optimum {:?}", total, best);
        }
    }

    /// Capacity is never exceeded at any instant, and every async slot finds its buffers resident at its start.
    #[test]
    fn plans_keep_capacity_and_residency(
        n in 3usize..7,
        extra in 0u64..4,
        perm_seed in any::<u64>(),
        gaps in proptest::collection::vec(0u8..8, 1..6),
        read_only in proptest::collection::vec(any::<bool>(), 1..4),
        mbps in 50.0f64..5000.0,
    ) {
        let mut order: Vec<usize> = (0..n).collect();
        let mut x = perm_seed | 1;
        for i in (1..n).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let sys = random_system(n, 2 + extra, &order, &gaps, &read_only);
        let bw = Bandwidths { read_bytes_per_s: mbps * 1e6, write_bytes_per_s: mbps * 2e6 };
        for mode in Mode::ALL {
            let p = plan::plan(&sys, mode, 3, bw);
            // Memory over time: a page-in holds memory from its start, a page-out frees it at its end.
            let mut events: Vec<(f64, i64)> = Vec::new();
            let mut resident_at_start = std::collections::BTreeSet::new();
            let mut timeline: Vec<(f64, usize, bool)> = Vec::new();
            for s in &p.slots {
                let mut t = s.paging_start_s;
                for op in s.ops() {
                    let end = t + op.est_s;
                    match op.kind {
                        PageKind::In => { events.push((t, op.bytes as i64)); timeline.push((end, op.buffer.0, true)); }
                        PageKind::Out => { events.push((end, -(op.bytes as i64))); timeline.push((t, op.buffer.0, false)); }
                    }
                    t = end;
                }
                // Page-ins only ever start once the store has finished everything queued before them.
                prop_assert!(s.paging_start_s >= s.issue_s - 1e-9);
            }
            events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut used = 0i64;
            for (_, d) in &events {
                used += d;
                prop_assert!(used <= sys.platform.capacity_bytes as i64, "{mode}: capacity exceeded");
            }
            if mode == Mode::Async && p.feasible() {
                timeline.sort_by(|a, b| a.0.total_cmp(&b.0));
                for s in &p.slots {
                    resident_at_start.clear();
                    for (t, b, is_in) in &timeline {
                        if *t > s.instance.start_s + 1e-9 { break; }
                        if *is_in { resident_at_start.insert(*b); } else { resident_at_start.remove(b); }
                    }
                    for b in &s.instance.buffers {
                        prop_assert!(resident_at_start.contains(&b.0), "{mode}: buffer {} not resident at slot start", b.0);
                    }
                }
            }
        }
    }
}
