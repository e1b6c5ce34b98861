//! Planner: the paper's example, invariants on random tables, and optimality against a brute-force search.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use oversub_sched::plan::{self, PlanContext};
use oversub_sched::{Bandwidths, Mode};

/// The paper's assumptions (Sec. III-B): 4 GiB/s both ways with direct I/O, 1.33 GiB/s when demand paging.
const PAPER: Bandwidths = Bandwidths::direct(4.0 * GIB as f64, 4.0 * GIB as f64)
    .with_demand(1.33 * GIB as f64, 1.33 * GIB as f64);

/// Direct I/O only, demand not measured.
const PAPER_DIRECT: Bandwidths = Bandwidths::direct(4.0 * GIB as f64, 4.0 * GIB as f64);

fn min_period(sys: &oversub_sched::System, mode: Mode, bw: Bandwidths) -> Option<f64> {
    plan::feasible_table(sys, mode, bw).map(|s| s.table.hyperperiod_s)
}

/// Figs. 6-8 at the paper's speeds, from one `Bandwidths`: async 1.5 s, sync (paging component) 2.5 s, demand 6 s.
#[test]
fn paper_example_periods() {
    let sys = paper(GIB, 4);
    let got: Vec<Option<f64>> = Mode::ALL
        .iter()
        .map(|&m| min_period(&sys, m, PAPER))
        .collect();
    eprintln!("async/sync/demand: {got:?}");
    for (mode, want, got) in [
        (Mode::Async, 1.5, got[0]),
        (Mode::Sync, 2.5, got[1]),
        (Mode::Demand, 6.0, got[2]),
    ] {
        let got = got.unwrap_or_else(|| panic!("{mode}: no feasible period"));
        assert!(
            (got - want).abs() <= 0.05,
            "{mode}: {got} s, the paper's {want} s"
        );
    }
    // Without demand speeds, demand is priced at the direct ones (as before): shorter than with them.
    let direct_demand = min_period(&sys, Mode::Demand, PAPER_DIRECT).unwrap();
    assert!(direct_demand < 6.0 - 0.05, "{direct_demand}");
    assert_eq!(min_period(&sys, Mode::Sync, PAPER_DIRECT), got[1]);
    assert_eq!(min_period(&sys, Mode::Async, PAPER_DIRECT), got[0]);
    let _ = PlanContext::new(&sys, Mode::Async, 1, PAPER);
}

use oversub_sched::plan::{PageKind, PlannerState};
use oversub_sched::{BufferSpec, Component, DeviceKind, Platform, Slot, System, Table, Work};
use proptest::prelude::*;

const UNIT: u64 = 1 << 20;
const FAST: Bandwidths = Bandwidths::direct(1e12, 1e12);

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
            stores: Vec::new(),
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
        let bw = Bandwidths::direct(mbps * 1e6, mbps * 2e6);
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

// --- Sync: the periodic victim choice ------------------------------------------------------------------------------

/// The plan of `table` follows `victims` (per slot of `table`) in every steady-state repetition, without a problem.
fn follows_choice(
    table: &System,
    victims: &[Vec<oversub_sched::BufferId>],
    bw: Bandwidths,
) -> bool {
    let p = plan::plan(table, Mode::Sync, plan::ANALYSIS_HYPERPERIODS, bw);
    p.slots
        .iter()
        .filter(|s| s.instance.hyperperiod > 0)
        .all(|s| {
            let mut out: Vec<_> = s.page_outs.iter().map(|o| o.buffer).collect();
            out.sort();
            let mut want = victims[s.instance.slot].clone();
            want.sort();
            s.problem.is_none() && out == want
        })
}

/// The paper's Fig. 7: B, D and E stay resident; the paging slot before A swaps C out and A in, the one before C
/// swaps A out and C in. The executor's plan of the returned table does exactly that.
#[test]
fn paper_sync_is_the_paging_component() {
    let sys = paper(GIB, 4);
    let search = plan::sync_search(&sys, PAPER);
    assert!(search.exhaustive);
    let choice = search.best.expect("a periodic choice");
    let period = choice.table.table.hyperperiod_s;
    assert!((period - 2.5).abs() < 1e-6, "{period}");
    let name = |b: &oversub_sched::BufferId| sys.buffers()[b.0].0;
    let mut swaps: Vec<(usize, Vec<usize>)> = choice
        .table
        .table
        .slots
        .iter()
        .zip(&choice.victims)
        .filter(|(_, v)| !v.is_empty())
        .map(|(s, v)| (s.component, v.iter().map(name).collect()))
        .collect();
    swaps.sort();
    assert_eq!(
        swaps,
        vec![(0, vec![2]), (2, vec![0])],
        "A evicts C, C evicts A"
    );
    assert!(follows_choice(&choice.table, &choice.victims, PAPER));
    assert!(plan::steady_feasible(&choice.table, Mode::Sync, PAPER));
    assert_eq!(
        plan::feasible_table(&sys, Mode::Sync, PAPER).map(|t| t.table.hyperperiod_s),
        Some(period)
    );
    // At the paper's own period there is no gap for a paging slot.
    assert!(!plan::steady_feasible(&sys, Mode::Sync, PAPER));
}

/// A random table for the sync search: `n` components (one buffer each, one or two units, some read-only) on two
/// CPUs, one slot each in a random order with random gaps, lengths and works.
fn random_sync_system(
    n: usize,
    sizes: &[u64],
    read_only: &[bool],
    order: &[usize],
    gaps: &[u8],
    lengths: &[u8],
    spare_units: u64,
) -> System {
    let size = |i: usize| sizes[i % sizes.len()] * UNIT;
    let length = |i: usize| 0.05 * f64::from(1 + lengths[i % lengths.len()]);
    let components: Vec<Component> = (0..n)
        .map(|i| Component {
            name: format!("c{i}"),
            budget_s: length(i),
            period_s: 10.0,
            cpus: vec![i % 2],
            gpus: vec![],
            buffers: vec![BufferSpec {
                name: "b".into(),
                size_bytes: size(i),
                read_only: read_only[i % read_only.len()],
            }],
            work: Work::Sleep {
                compute_s: length(i) * 0.5,
            },
        })
        .collect();
    let mut lane_t = [0.0f64; 2];
    let mut slots = Vec::new();
    for (k, &c) in order.iter().enumerate() {
        let cpu = c % 2;
        let start = lane_t[cpu] + f64::from(gaps[k % gaps.len()]) * 0.02;
        slots.push(Slot {
            component: c,
            start_s: start,
            length_s: length(c),
            cpu,
            gpu: None,
        });
        lane_t[cpu] = start + length(c);
    }
    slots.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let total: u64 = (0..n).map(size).sum();
    let largest = (0..n).map(size).max().unwrap_or(UNIT);
    // Oversubscribed: at least the largest buffer, at most all but one unit.
    let capacity = (largest + spare_units * UNIT)
        .min(total - UNIT)
        .max(largest);
    System {
        platform: Platform {
            capacity_bytes: capacity,
            stores: Vec::new(),
            device: DeviceKind::Host,
            cpus: 2,
            gpus: 0,
        },
        components,
        table: Table {
            hyperperiod_s: lane_t[0].max(lane_t[1]) + 0.05,
            slots,
        },
    }
}

/// Every assignment of victim sets to slots (each slot: any subset of the other components' buffers), by brute
/// force: the shortest sync period any of them gives.
fn brute_force_sync(sys: &System, bw: Bandwidths) -> Option<f64> {
    let bufs = sys.buffers().len();
    let slots = &sys.table.slots;
    let own: Vec<Vec<oversub_sched::BufferId>> = slots
        .iter()
        .map(|s| sys.component_buffers(s.component))
        .collect();
    let per_slot = 1usize << bufs;
    let total = per_slot.pow(slots.len() as u32);
    let mut best: Option<f64> = None;
    for code in 0..total {
        let mut c = code;
        let mut victims = Vec::with_capacity(slots.len());
        let mut skip = false;
        for own_i in &own {
            let mask = c % per_slot;
            c /= per_slot;
            let v: Vec<oversub_sched::BufferId> = (0..bufs)
                .filter(|b| mask & (1 << b) != 0)
                .map(oversub_sched::BufferId)
                .collect();
            skip |= v.iter().any(|b| own_i.contains(b));
            victims.push(v);
        }
        if skip {
            continue;
        }
        if let Some(p) = plan::sync_period_with(sys, &victims, bw) {
            best = Some(best.map_or(p, |b: f64| b.min(p)));
        }
    }
    best
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

/// The sync search is exhaustive and finds the period brute force finds, with a plan that follows its choice;
/// with `feasible_too`, `feasible_table` agrees.
fn check_sync_search(
    sys: &System,
    bw: Bandwidths,
    feasible_too: bool,
) -> Result<(), TestCaseError> {
    let search = plan::sync_search(sys, bw);
    prop_assert!(search.exhaustive);
    let found = search.best.as_ref().map(|c| c.table.table.hyperperiod_s);
    let brute = brute_force_sync(sys, bw);
    match (found, brute) {
        (Some(f), Some(b)) => {
            prop_assert!((f - b).abs() < 1e-9, "search {} vs brute force {}", f, b)
        }
        (f, b) => prop_assert_eq!(f, b),
    }
    if let Some(c) = &search.best {
        prop_assert!(
            follows_choice(&c.table, &c.victims, bw),
            "the plan strays from the choice"
        );
        if feasible_too {
            prop_assert_eq!(
                plan::feasible_table(sys, Mode::Sync, bw).map(|t| t.table.hyperperiod_s),
                found
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The sync search is exact: its period is the shortest over every periodic victim choice (brute force), and
    /// the executor's plan of the table it returns follows its choice without a problem.
    #[test]
    fn sync_period_is_optimal(
        n in 3usize..5,
        sizes in proptest::collection::vec(1u64..3, 1..5),
        read_only in proptest::collection::vec(any::<bool>(), 1..4),
        perm_seed in any::<u64>(),
        gaps in proptest::collection::vec(0u8..4, 1..5),
        lengths in proptest::collection::vec(0u8..3, 1..5),
        spare in 0u64..3,
        mbps in 5.0f64..60.0,
    ) {
        let sys = random_sync_system(n, &sizes, &read_only, &shuffled(n, perm_seed), &gaps, &lengths, spare);
        check_sync_search(&sys, Bandwidths::direct(mbps * 1e6, mbps * 0.7e6), true)?;
    }

    /// The same with a component that runs twice per hyperperiod (its buffer used twice in the window).
    #[test]
    fn sync_period_is_optimal_with_repeated_uses(
        sizes in proptest::collection::vec(1u64..3, 1..4),
        read_only in proptest::collection::vec(any::<bool>(), 1..3),
        perm_seed in any::<u64>(),
        twice in 0usize..3,
        gaps in proptest::collection::vec(0u8..4, 1..5),
        lengths in proptest::collection::vec(0u8..3, 1..4),
        spare in 0u64..2,
        mbps in 5.0f64..60.0,
    ) {
        let mut order = shuffled(3, perm_seed);
        order.push(twice);
        let sys = random_sync_system(3, &sizes, &read_only, &order, &gaps, &lengths, spare);
        check_sync_search(&sys, Bandwidths::direct(mbps * 1e6, mbps * 0.7e6), false)?;
    }
}

// --- Demand speeds and interference ------------------------------------------------------------------------------

#[test]
fn demand_is_priced_at_demand_speeds_when_given() {
    use oversub_sched::plan::Pricing;
    let sys = paper(GIB, 4);
    assert_eq!(PAPER.pricing(Mode::Demand), Pricing::MeasuredDemand);
    assert_eq!(
        PAPER_DIRECT.pricing(Mode::Demand),
        Pricing::DirectDemandNotMeasured
    );
    assert_eq!(PAPER.pricing(Mode::Sync), Pricing::Direct);
    let p = plan::plan(&sys, Mode::Demand, 2, PAPER);
    let op = p
        .slots
        .iter()
        .flat_map(|s| s.ops())
        .find(|o| o.io_bytes == GIB)
        .unwrap();
    assert!((op.est_s - 1.0 / 1.33).abs() < 1e-9, "{}", op.est_s);
    let p = plan::plan(&sys, Mode::Async, 2, PAPER);
    let op = p
        .slots
        .iter()
        .flat_map(|s| s.ops())
        .find(|o| o.io_bytes == GIB)
        .unwrap();
    assert!((op.est_s - 0.25).abs() < 1e-9, "{}", op.est_s);
}

fn speed(bw: Bandwidths) -> oversub_sched::StoreSpeed {
    oversub_sched::StoreSpeed {
        bw,
        source: oversub_sched::BandwidthSource::Given,
    }
}

/// The paper's example with works that nearly fill their slots (450 of 500 ms, 700 of 750 ms).
fn tight_paper() -> System {
    let mut sys = paper(GIB, 4);
    for c in &mut sys.components {
        c.work = Work::Spin {
            compute_s: c.budget_s - 0.05,
        };
    }
    sys
}

#[test]
fn inflation_raises_the_min_period_monotonically() {
    let sys = tight_paper();
    let modes = [Mode::Async, Mode::Sync];
    let mut last: Vec<f64> = vec![0.0; modes.len()];
    for inflate in [1.0, 1.05, 1.17, 1.3, 1.6] {
        let doc = oversub_sched::PlanDoc::new_inflated(&sys, speed(PAPER), &modes, inflate);
        assert_eq!(doc.work_inflation, inflate);
        for (i, m) in modes.iter().enumerate() {
            let a = &doc.modes[m.name()];
            let p = a.min_feasible_period_s.expect("a period");
            assert!(
                p >= last[i] - 1e-6,
                "{m} at x{inflate}: {p} after {}",
                last[i]
            );
            last[i] = p;
            let plain = a.min_feasible_period_uninflated_s.expect("a period");
            assert!(
                p >= plain - 1e-6,
                "{m} at x{inflate}: {p} below the uninflated {plain}"
            );
        }
    }
    let plain = oversub_sched::PlanDoc::new(&sys, speed(PAPER), &modes);
    let heavy = oversub_sched::PlanDoc::new_inflated(&sys, speed(PAPER), &modes, 1.6);
    for m in modes {
        let (a, b) = (&plain.modes[m.name()], &heavy.modes[m.name()]);
        assert!(
            b.min_feasible_period_s.unwrap() > a.min_feasible_period_s.unwrap() + 0.01,
            "{m}: inflation does not show"
        );
        assert_eq!(b.min_feasible_period_uninflated_s, a.min_feasible_period_s);
    }
}

#[test]
fn inflation_makes_a_tight_table_infeasible() {
    let sys = tight_paper();
    let doc = oversub_sched::PlanDoc::new_inflated(&sys, speed(PAPER), &[Mode::Async], 1.17);
    let a = &doc.modes["async"];
    // 450 ms of work fits the 500 ms slot; 527 ms does not.
    assert!(a.feasible_at_target_uninflated);
    assert!(!a.feasible_at_target);
    assert!(a.min_feasible_period_s.unwrap() > 1.5 + 0.01);
    assert!((a.min_feasible_period_uninflated_s.unwrap() - 1.5).abs() < 1e-3);
    assert_eq!(doc.work_inflation, 1.17);
}
