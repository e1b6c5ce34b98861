//! Each policy on small hand-made traces whose outcome is worked out by hand below, plus properties that hold on
//! any trace: GPU memory never holds more than its capacity, and the oracle never migrates more than demand
//! migration without prefetch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use oversub_sim::uvm::cost::{CostModel, MachineModel};
use oversub_sim::uvm::policy::Policy;
use oversub_sim::uvm::sim::{
    simulate, EvictionOrder, EvictionUnit, MachineScale, PreparedTrace, SimConfig, SimResult,
    TimeModel,
};
use oversub_sim::uvm::{Access, Trace};
use proptest::prelude::*;

/// (page, line) pairs as loads.
fn trace(refs: &[(u64, u64)]) -> Trace {
    Trace {
        name: "hand".into(),
        accesses: refs
            .iter()
            .map(|&(p, l)| Access::read(0, 0x10_0000_0000 + p * 4096 + l * 128, 4))
            .collect(),
    }
}

fn run_with(refs: &[(u64, u64)], config: SimConfig) -> SimResult {
    let t = PreparedTrace::new(&trace(refs), &config.cost).unwrap();
    simulate(&t, &config).unwrap()
}

/// Hand-worked settings: the paper's absolute L2 (3 MiB, so reuse hits) and block, page eviction, no thrashing
/// detection (each rule is switched on by the test about it).
fn config(policy: Policy, ratio: f64) -> SimConfig {
    let mut c = SimConfig::new(policy, ratio);
    c.machine_scale = MachineScale::None;
    c.eviction_unit = EvictionUnit::Page;
    c.thrashing.enabled = false;
    c
}

fn run(refs: &[(u64, u64)], policy: Policy, ratio: f64) -> SimResult {
    run_with(refs, config(policy, ratio))
}

const CYCLE: [(u64, u64); 8] = [
    (0, 0),
    (1, 0),
    (2, 0),
    (3, 0),
    (0, 0),
    (1, 0),
    (2, 0),
    (3, 0),
];

#[test]
fn eager_without_prefetch_thrashes_a_cycle_in_allocation_order() {
    // 4 pages, ratio 100% -> 2 frames. FIFO on a cyclic scan misses every time.
    let r = run(&CYCLE, Policy::EagerNoPrefetch, 1.0);
    assert_eq!(r.capacity_pages, 2);
    assert_eq!(r.counters.faults, 8);
    assert_eq!(r.counters.migrations, 8);
    assert_eq!(r.counters.evictions, 6);
    assert_eq!(r.counters.remote_accesses, 0);
    assert_eq!(r.evictions_per_page, 1.5);
}

#[test]
fn oracle_evicts_the_page_used_furthest_ahead() {
    // 0 1 2(evict 1: next use 5 > 0's 4) 3(evict 2: 6 > 0's 4) 0 hit 1(evict 0: never again)
    // 2(evict 1: never again) 3 hit -> 6 migrations, 4 evictions.
    let r = run(&CYCLE, Policy::Oracle, 1.0);
    assert_eq!(r.counters.migrations, 6);
    assert_eq!(r.counters.evictions, 4);
    assert_eq!(r.counters.faults, 6);
}

#[test]
fn lru_order_keeps_the_page_in_use() {
    let refs = [(0, 0), (1, 0), (0, 1), (2, 0), (0, 2)];
    // Allocation order evicts page 0 (migrated first) although it is in use: 4 migrations.
    assert_eq!(
        run(&refs, Policy::EagerNoPrefetch, 0.5).counters.migrations,
        4
    );
    let mut c = config(Policy::EagerNoPrefetch, 0.5);
    c.eviction = EvictionOrder::Lru;
    // LRU evicts page 1 instead: 3 migrations.
    assert_eq!(run_with(&refs, c).counters.migrations, 3);
}

#[test]
fn eviction_unit_group_evicts_the_whole_group() {
    // Pages 0 and 1 share a 64 KiB group; page 16 is in the next. 3 pages at ratio 50% -> 2 frames.
    let refs = [(0, 0), (1, 0), (16, 0)];
    let mut c = config(Policy::EagerNoPrefetch, 0.5);
    c.eviction_unit = EvictionUnit::Group;
    let r = run_with(&refs, c);
    assert_eq!(r.counters.evictions, 2);
    assert_eq!(
        run(&refs, Policy::EagerNoPrefetch, 0.5).counters.evictions,
        1
    );
}

#[test]
fn eager_fault_grows_to_its_big_page() {
    // 16 pages of one 64 KiB big page touched in order: the first fault brings all of them.
    let refs: Vec<(u64, u64)> = (0..16).map(|p| (p, 0)).collect();
    let r = run(&refs, Policy::Eager, 0.0);
    assert_eq!(r.counters.faults, 1);
    assert_eq!(r.counters.migrations, 16);
    assert_eq!(r.counters.prefetches, 15);
    assert_eq!(r.counters.transfers_h2d, 1, "one contiguous copy");
    let plain = run(&refs, Policy::EagerNoPrefetch, 0.0);
    assert_eq!(plain.counters.faults, 16);
    assert_eq!(plain.counters.prefetches, 0);
}

#[test]
fn eager_tree_fills_the_largest_node_past_51_percent() {
    // Faults on pages 0, 16 and 32 bring their big pages; after the third, the 64-page node holds 48 of 64
    // (75% > 51%) and its last big page is filled; the 128-page node is then 64/128 = 50%, not more than 51%.
    let refs: Vec<(u64, u64)> = (0..64).map(|p| (p, 0)).collect();
    let r = run(&refs, Policy::Eager, 0.0);
    assert_eq!(r.counters.faults, 3);
    assert_eq!(r.counters.migrations, 64);
    assert_eq!(r.counters.prefetches, 61);
}

#[test]
fn pin_host_never_migrates_and_the_l2_serves_reuse() {
    let refs = [(0, 0), (0, 0), (0, 1), (1, 0), (0, 1)];
    let r = run(&refs, Policy::PinHost, 1.0);
    assert_eq!(r.counters.migrations, 0);
    assert_eq!(r.counters.faults, 0);
    assert_eq!(r.counters.remote_accesses, 3);
    assert_eq!(r.counters.cache_hits, 2);
    assert_eq!(r.counters.bytes_h2d, 3 * 128);
}

#[test]
fn lazy_group_counter_migrates_the_touched_pages_of_its_group() {
    // Threshold 3: the third access that reaches memory in group 0 migrates pages 0 and 1 (the group's touched
    // pages) in one notification; page 20 is in another group and stays remote.
    let refs = [(0, 0), (0, 1), (20, 0), (1, 0), (0, 2), (20, 1)];
    let r = run(&refs, Policy::LazyGrpHw { threshold: 3 }, 0.0);
    assert_eq!(r.counters.faults, 1);
    assert_eq!(r.counters.migrations, 2);
    assert_eq!(r.counters.remote_accesses, 5);
    assert_eq!(r.counters.gpu_mem_accesses, 1);
}

#[test]
fn lazy_page_counter_counts_only_accesses_that_reach_memory() {
    // The repeated line hits the L2 and does not count; the second distinct line reaches the threshold of 2.
    let refs = [(0, 0), (0, 0), (0, 1), (0, 2)];
    let r = run(&refs, Policy::LazyPgStatSw { threshold: 2 }, 0.0);
    assert_eq!(r.counters.migrations, 1);
    assert_eq!(r.counters.remote_accesses, 2);
    assert_eq!(r.counters.cache_hits, 1);
    assert_eq!(r.counters.gpu_mem_accesses, 1);
}

#[test]
fn lazy_dynamic_threshold_as_the_reference_simulator_computes_it() {
    // t_s = 4, p = 2, two frames. Before the first eviction t = 1 + 4 * resident / capacity: page 0 migrates at
    // its 1st miss (t = 1), page 1 at its 3rd (t = 3), page 2 at its 5th (t = 5), evicting page 0. From then on
    // t = 4 * 2 * (round trips + 1): page 0, back once, needs 16 misses (line 0 is still in the L2).
    let mut refs: Vec<(u64, u64)> = vec![(0, 0)];
    refs.extend((0..3).map(|l| (1, l)));
    refs.extend((0..5).map(|l| (2, l)));
    refs.extend((1..16).map(|l| (0, l)));
    // A fourth page, touched last, makes two frames of the four pages at 100%.
    let policy = Policy::LazyPgDynSw { base_threshold: 4 };
    let before = run(&[refs.clone(), vec![(3, 0)]].concat(), policy, 1.0);
    assert_eq!(before.counters.migrations, 3, "15 misses are not enough");
    refs.push((0, 16));
    refs.push((3, 0));
    let r = run(&refs, policy, 1.0);
    assert_eq!(r.capacity_pages, 2);
    assert_eq!(r.counters.migrations, 4);
    assert_eq!(r.counters.evictions, 2);
    assert_eq!(r.counters.faults, 4);
}

#[test]
fn lazy_dynamic_stores_always_migrate() {
    // Three pages read once each, then a store to page 2; ratio 0, so memory has room for all three. Page 0
    // migrates at its first miss (t = 1 at occupancy 0); pages 1 and 2 need 1 + 8 * 1/3 and 1 + 8 * 2/3 misses
    // and have one each. The store migrates page 2 under the reference reading only.
    let base = 0x10_0000_0000u64;
    let t = Trace {
        name: "w".into(),
        accesses: vec![
            Access::read(0, base, 4),
            Access::read(0, base + 4096, 4),
            Access::read(0, base + 8192, 4),
            Access::write(0, base + 8192 + 128, 4),
        ],
    };
    for (policy, migrations) in [
        (Policy::LazyPgDynSw { base_threshold: 8 }, 2),
        (Policy::LazyPgDynSwNoPenalty { base_threshold: 8 }, 1),
    ] {
        let c = config(policy, 0.0);
        let p = PreparedTrace::new(&t, &c.cost).unwrap();
        let r = simulate(&p, &c).unwrap();
        assert_eq!(r.counters.migrations, migrations, "{policy}");
    }
}

#[test]
fn lazy_dynamic_without_penalty_is_the_earlier_reading() {
    // t = t_s * occupancy + 1 before, t_s * (r + 1) + 1 after the first eviction: page 0 back once needs 17.
    let mut refs: Vec<(u64, u64)> = vec![(0, 0)];
    refs.extend((0..5).map(|l| (1, l)));
    refs.extend((0..9).map(|l| (2, l)));
    refs.extend((1..18).map(|l| (0, l)));
    refs.push((3, 0));
    let r = run(
        &refs,
        Policy::LazyPgDynSwNoPenalty { base_threshold: 8 },
        1.0,
    );
    assert_eq!(r.counters.migrations, 4);
}

/// Page 0 uses 20 of its 32 lines, page 1 one line; one frame.
fn spatial_refs() -> Vec<(u64, u64)> {
    let mut refs: Vec<(u64, u64)> = (0..20).map(|l| (0, l)).collect();
    refs.extend([(1, 0), (0, 0), (1, 0), (1, 1)]);
    refs
}

#[test]
fn static_map_keeps_low_utilisation_pages_on_the_host() {
    // 0 migrates (no history), 1 migrates (no history) evicting 0 (20 lines used), 0 faults: 20/32 >= 0.5,
    // migrates evicting 1 (1 line); 1 faults: 1/32 < 0.5, stays on the host: its line 0 is still in the L2 (a
    // hit), line 1 goes over the bus and 2/32 is still below the threshold.
    let r = run(&spatial_refs(), Policy::StaticMap { threshold: 0.5 }, 1.0);
    assert_eq!(r.capacity_pages, 1);
    assert_eq!(r.counters.migrations, 3);
    assert_eq!(r.counters.evictions, 2);
    assert_eq!(r.counters.faults, 4);
    assert_eq!(r.counters.remote_accesses, 1);
}

#[test]
fn dynamap_weighs_eq1_against_eq3() {
    // As above, without thrashing measured (f_over = 0): one line on the host costs 20.02 us (Eq. 1), a
    // migration 20.58 us (Eq. 3), so page 1 stays on the host. With the instrumentation's early stop (the
    // default) its table entry froze at its first eviction (one line), so it stays there.
    let r = run(&spatial_refs(), Policy::DynaMap, 1.0);
    assert_eq!(r.counters.migrations, 3);
    assert_eq!(r.counters.evictions, 2);
    assert_eq!(r.counters.remote_accesses, 1);
    assert!(r.counters.pst_updates > 0);
    // Tracked throughout, its second line makes the host cost 40.04 us: the driver migrates it, evicting page 0.
    let mut c = config(Policy::DynaMap, 1.0);
    c.pst_early_stop = false;
    let r = run_with(&spatial_refs(), c);
    assert_eq!(r.counters.migrations, 4);
    assert_eq!(r.counters.evictions, 3);
    assert_eq!(r.counters.remote_accesses, 1);
}

#[test]
fn dynamap_offline_starts_from_a_profile_and_pays_no_instrumentation() {
    let online = run(&spatial_refs(), Policy::DynaMap, 1.0);
    let offline = run(&spatial_refs(), Policy::DynaMapOffline, 1.0);
    assert_eq!(offline.counters.pst_updates, 0);
    assert_eq!(offline.breakdown.instrumentation_s, 0.0);
    assert!(online.breakdown.instrumentation_s > 0.0);
    // The profile knows page 1 uses one line: it never migrates, so page 0 is never evicted.
    assert_eq!(offline.counters.migrations, 1);
    assert_eq!(offline.counters.evictions, 0);
}

#[test]
fn thrashing_detection_throttles_then_pins() {
    // Four pages in two frames, cycled 40 times: every access faults, microseconds apart, so each page's
    // migrations and evictions come within the 500 us lapse. After 3 such events a page is thrashing; its next
    // 10 faults are throttled, the 11th pins it to the host, where its line is then served remotely.
    let refs: Vec<(u64, u64)> = (0..40u64)
        .flat_map(|lap| CYCLE.map(|(p, _)| (p, lap % 32)))
        .collect();
    let mut on = config(Policy::EagerNoPrefetch, 1.0);
    on.thrashing.enabled = true;
    let r = run_with(&refs, on);
    assert!(r.counters.throttles >= 10, "{:?}", r.counters);
    assert!(r.counters.pins >= 1, "{:?}", r.counters);
    assert!(r.counters.remote_accesses > 0);
    assert!(r.breakdown.throttle_s > 0.0);
    let off = run(&refs, Policy::EagerNoPrefetch, 1.0);
    assert_eq!((off.counters.pins, off.counters.throttles), (0, 0));
    assert_eq!(off.counters.remote_accesses, 0);
    assert!(r.counters.migrations < off.counters.migrations);
}

/// A machine unlike the default in every constant but the L2 (which decides what reaches memory).
fn other_machine() -> MachineModel {
    MachineModel {
        cpu_mem_bytes_per_s: 50e9,
        gpu_mem_bytes_per_s: 2e12,
        pci_bytes_per_s: 64e9,
        fault_batch_s: 5e-6,
        fault_service_s: 1e-7,
        fault_batch_max: 32,
        remote_line_latency_s: 3e-7,
        transfer_setup_s: 0.0,
        outstanding_misses: 4096,
        pst_update_s: 1e-8,
        pst_batch_warps: 1,
        ..MachineModel::default()
    }
}

#[test]
fn decisions_do_not_change_with_the_machine() {
    let refs: Vec<(u64, u64)> = (0..30)
        .flat_map(|i| [(i % 7, i % 5), (i % 3 + 7, i % 11), (0, i % 32)])
        .collect();
    for policy in Policy::suite() {
        // DynaMap's fault rate is per second of the clock (Sec. 5.3), so its decisions may follow the machine.
        if matches!(policy, Policy::DynaMap | Policy::DynaMapOffline) {
            continue;
        }
        for ratio in [0.5, 2.0] {
            let paper = run(&refs, policy, ratio);
            let mut c = config(policy, ratio);
            c.cost.machine = other_machine();
            let other = run_with(&refs, c);
            // Batches are the machine's (its batch size), not a decision.
            let decided = |mut c: oversub_sim::uvm::sim::Counters| {
                c.fault_batches = 0;
                c
            };
            assert_eq!(
                decided(paper.counters),
                decided(other.counters),
                "{policy} at {ratio}"
            );
            assert_ne!(
                paper.est_time_s, other.est_time_s,
                "{policy}: the clock did move"
            );
        }
    }
}

#[test]
fn overlap_switched_off_is_the_serial_estimate() {
    let refs: Vec<(u64, u64)> = (0..200).map(|i| ((i * 7) % 13, (i * 5) % 32)).collect();
    for policy in Policy::suite() {
        let mut c = config(policy, 2.0);
        c.overlap = false;
        c.epoch_accesses = 17;
        c.cost.machine = MachineModel::serial_equivalent(&c.cost.decision);
        let r = run_with(&refs, c);
        let rel = (r.est_time_s - r.serial_time_s).abs() / r.serial_time_s.max(1e-30);
        assert!(
            rel < 1e-9,
            "{policy}: {} vs {}",
            r.est_time_s,
            r.serial_time_s
        );
        // With overlap the same events take no longer than their sum.
        let mut c = config(policy, 2.0);
        c.epoch_accesses = 17;
        let overlapped = run_with(&refs, c.clone());
        c.overlap = false;
        let summed = run_with(&refs, c);
        assert!(
            overlapped.est_time_s <= summed.est_time_s * (1.0 + 1e-12),
            "{policy}"
        );
    }
}

#[test]
fn estimated_time_follows_the_counters() {
    let mut serial = config(Policy::EagerNoPrefetch, 1.0);
    serial.time_model = TimeModel::Serial;
    let r = run_with(&CYCLE, serial);
    let c = CostModel::default();
    let expected = 8.0 * c.decision.fault_s + 14.0 * c.page_transfer_s() + 4.0 * c.gpu_line_s();
    // The second lap finds its lines in the L2 (4 hits), the first reads GPU memory.
    assert_eq!(r.counters.cache_hits, 4);
    assert!(
        (r.est_time_s - expected).abs() < 1e-12,
        "{} vs {expected}",
        r.est_time_s
    );
}

fn arb_refs() -> impl Strategy<Value = Vec<(u64, u64)>> {
    // Pages spread over two blocks so groups, leaves and blocks all matter.
    prop::collection::vec(
        (prop_oneof![0u64..40, 500u64..530, 1024u64..1030], 0u64..32),
        1..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn resident_pages_never_exceed_capacity(
        refs in arb_refs(),
        ratio in prop_oneof![Just(0.0), Just(0.5), Just(1.0), Just(2.0), Just(3.0)],
        unit in prop_oneof![Just(EvictionUnit::Page), Just(EvictionUnit::Group), Just(EvictionUnit::Block)],
        lru in any::<bool>(),
    ) {
        let t = PreparedTrace::new(&trace(&refs), &SimConfig::new(Policy::Eager, 0.0).cost).unwrap();
        let Ok(capacity) = t.capacity_pages(ratio) else { return Ok(()); };
        for policy in Policy::suite() {
            let mut c = config(policy, ratio);
            c.eviction_unit = unit;
            c.fault_batch = 8;
            c.thrashing.enabled = true;
            if lru { c.eviction = EvictionOrder::Lru; }
            let r = simulate(&t, &c).unwrap();
            prop_assert!(r.peak_resident_pages <= capacity, "{policy}: {} > {capacity}", r.peak_resident_pages);
            prop_assert_eq!(r.counters.accesses, refs.len() as u64);
            prop_assert_eq!(
                r.counters.cache_hits + r.counters.gpu_mem_accesses + r.counters.remote_accesses,
                refs.len() as u64
            );
            prop_assert!(r.counters.evictions <= r.counters.migrations);
        }
    }

    #[test]
    fn oracle_never_migrates_more_than_demand_migration(
        refs in arb_refs(),
        ratio in prop_oneof![Just(0.5), Just(1.0), Just(2.0), Just(3.0)],
        lru in any::<bool>(),
    ) {
        let cost = SimConfig::new(Policy::Eager, 0.0).cost;
        let t = PreparedTrace::new(&trace(&refs), &cost).unwrap();
        if t.capacity_pages(ratio).is_err() { return Ok(()); }
        let oracle = simulate(&t, &config(Policy::Oracle, ratio)).unwrap();
        // Demand migration of every faulting page: thrashing pins keep pages on the host, which is not
        // demand migration any more.
        let mut demand = config(Policy::EagerNoPrefetch, ratio);
        if lru { demand.eviction = EvictionOrder::Lru; }
        let demand = simulate(&t, &demand).unwrap();
        prop_assert!(oracle.counters.migrations <= demand.counters.migrations,
            "oracle {} > demand {}", oracle.counters.migrations, demand.counters.migrations);
    }
}
