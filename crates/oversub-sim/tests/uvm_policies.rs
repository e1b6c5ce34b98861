//! Each policy on small hand-made traces whose outcome is worked out by hand below, plus properties that hold on
//! any trace: GPU memory never holds more than its capacity, and the oracle never migrates more than demand
//! migration without prefetch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use oversub_sim::uvm::policy::Policy;
use oversub_sim::uvm::sim::{
    simulate, EvictionOrder, EvictionUnit, PreparedTrace, SimConfig, SimResult,
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

fn run(refs: &[(u64, u64)], policy: Policy, ratio: f64) -> SimResult {
    run_with(refs, SimConfig::new(policy, ratio))
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
    let mut config = SimConfig::new(Policy::EagerNoPrefetch, 0.5);
    config.eviction = EvictionOrder::Lru;
    // LRU evicts page 1 instead: 3 migrations.
    assert_eq!(run_with(&refs, config).counters.migrations, 3);
}

#[test]
fn eviction_unit_group_evicts_the_whole_group() {
    // Pages 0 and 1 share a 64 KiB group; page 16 is in the next. 3 pages at ratio 50% -> 2 frames.
    let refs = [(0, 0), (1, 0), (16, 0)];
    let mut config = SimConfig::new(Policy::EagerNoPrefetch, 0.5);
    config.eviction_unit = EvictionUnit::Group;
    let r = run_with(&refs, config);
    assert_eq!(r.counters.evictions, 2);
    assert_eq!(
        run(&refs, Policy::EagerNoPrefetch, 0.5).counters.evictions,
        1
    );
}

#[test]
fn eager_tree_prefetch_fills_a_leaf_past_51_percent() {
    // 16 pages of one 64 KiB leaf touched in order, room for all. After the 9th fault 9/16 = 56% of the leaf is
    // resident, so the other 7 come as prefetches; the 32-page parent is then 16/32 = 50%, not more than 51%.
    let refs: Vec<(u64, u64)> = (0..16).map(|p| (p, 0)).collect();
    let r = run(&refs, Policy::Eager, 0.0);
    assert_eq!(r.counters.faults, 9);
    assert_eq!(r.counters.migrations, 16);
    assert_eq!(r.counters.prefetches, 7);
    let plain = run(&refs, Policy::EagerNoPrefetch, 0.0);
    assert_eq!(plain.counters.faults, 16);
    assert_eq!(plain.counters.prefetches, 0);
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
fn lazy_dynamic_threshold_grows_with_occupancy_then_with_round_trips() {
    // t_s = 8, two frames. Before the first eviction t = 8 * resident / capacity + 1: page 0 migrates at its 1st
    // miss (t = 1), page 1 at its 5th (t = 5), page 2 at its 9th (t = 9), evicting page 0. From then on
    // t = 8 * (round trips + 1) + 1: page 0, back once, needs 17 misses.
    let mut refs: Vec<(u64, u64)> = vec![(0, 0)];
    refs.extend((0..5).map(|l| (1, l)));
    refs.extend((0..9).map(|l| (2, l)));
    refs.extend((1..17).map(|l| (0, l)));
    let policy = Policy::LazyPgDynSw { base_threshold: 8 };
    let before = run(&[refs.clone(), vec![(3, 0)]].concat(), policy, 1.0);
    assert_eq!(before.counters.migrations, 3, "16 misses are not enough");
    refs.push((0, 17));
    refs.push((3, 0));
    let r = run(&refs, policy, 1.0);
    assert_eq!(r.capacity_pages, 2);
    assert_eq!(r.counters.migrations, 4);
    assert_eq!(r.counters.evictions, 2);
    assert_eq!(r.counters.faults, 4);
    assert_eq!(r.counters.remote_accesses, 1 + 5 + 9 + 17 + 1);
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
    // migration 20.58 us (Eq. 3), so page 1 first stays on the host; its second line makes the host cost
    // 40.04 us and the driver migrates it, evicting page 0.
    let r = run(&spatial_refs(), Policy::DynaMap, 1.0);
    assert_eq!(r.counters.migrations, 4);
    assert_eq!(r.counters.evictions, 3);
    assert_eq!(r.counters.remote_accesses, 1);
}

#[test]
fn estimated_time_follows_the_counters() {
    let r = run(&CYCLE, Policy::EagerNoPrefetch, 1.0);
    let c = oversub_sim::uvm::cost::CostModel::default();
    let expected = 8.0 * c.fault_s + 14.0 * c.page_transfer_s() + 4.0 * c.gpu_line_s();
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
            let mut config = SimConfig::new(policy, ratio);
            config.eviction_unit = unit;
            config.fault_batch = 8;
            if lru { config.eviction = EvictionOrder::Lru; }
            let r = simulate(&t, &config).unwrap();
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
        let oracle = simulate(&t, &SimConfig::new(Policy::Oracle, ratio)).unwrap();
        let mut demand = SimConfig::new(Policy::EagerNoPrefetch, ratio);
        if lru { demand.eviction = EvictionOrder::Lru; }
        let demand = simulate(&t, &demand).unwrap();
        prop_assert!(oracle.counters.migrations <= demand.counters.migrations,
            "oracle {} > demand {}", oracle.counters.migrations, demand.counters.migrations);
    }
}
