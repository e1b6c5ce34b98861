//! End-to-end runs of each mode on a temp store with tiny buffers and short slots; data integrity over many
//! hyperperiods. Timings are not asserted (the machine may be loaded); only completeness and integrity.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use oversub_core::{Pool, PoolSpec};
use oversub_sched::{plan, run, Bandwidths, Mode, RunOptions, System};

const MIB: u64 = 1 << 20;

fn tiny_paper() -> System {
    // The paper's example at 1/20 of its time scale with 1 MiB units (one read-only) and 4 units of capacity.
    let mut sys = paper(MIB, 4);
    scale_time(&mut sys, 0.05);
    for c in &mut sys.components {
        c.work = oversub_sched::Work::Sleep {
            compute_s: c.budget_s * 0.2,
        };
    }
    sys.components[1].buffers[0].read_only = true;
    sys
}

fn pool_for(sys: &System) -> Pool {
    // Page-granular slack over the planned capacity, as the CLI gives.
    PoolSpec::new(sys.platform.capacity_bytes + 64 * 4096)
        .store_capacity(64 * MIB)
        .open()
        .unwrap()
}

#[test]
fn every_mode_runs_end_to_end_and_keeps_data() {
    let sys = tiny_paper();
    let bw = Bandwidths::direct(500e6, 500e6);
    for mode in Mode::ALL {
        let table = plan::feasible_table(&sys, mode, bw).unwrap_or_else(|| sys.clone());
        let p = plan::plan(&table, mode, 12, bw);
        let pool = pool_for(&table);
        let space = pool.address_space();
        let result = run(&table, &space, &p, &RunOptions::default()).unwrap();
        assert_eq!(result.slots.len(), 5 * 12, "{mode}");
        assert_eq!(result.mode, mode.name());
        assert!(result.ops.iter().all(|o| o.end_s >= o.start_s));
        // Read-write buffers were paged out and in many times: every slot verified their checksums.
        assert!(
            result.ops.len() >= 10,
            "{mode}: only {} operations",
            result.ops.len()
        );
        assert_eq!(pool.stats().used_bytes, 0, "{mode}: buffers left behind");
    }
}

#[test]
fn a_capacity_the_table_cannot_fit_is_refused() {
    let mut sys = tiny_paper();
    sys.platform.capacity_bytes = MIB; // two components run at once and need two units
    let bw = Bandwidths::direct(500e6, 500e6);
    let p = plan::plan(&sys, Mode::Async, 2, bw);
    assert!(!p.feasible());
    let pool = pool_for(&sys);
    let err = run(&sys, &pool.address_space(), &p, &RunOptions::default()).unwrap_err();
    assert!(err.to_string().contains("capacity"), "{err}");
}

#[test]
fn the_store_is_primed_before_the_table_and_reported() {
    let sys = tiny_paper();
    let bw = Bandwidths::direct(500e6, 500e6);
    let p = plan::plan(&sys, Mode::Async, 3, bw);
    let pool = pool_for(&sys);
    let space = pool.address_space();
    // One round by default; with a target it runs rounds until one reads at 80% of it or the time is up (an
    // unreachable target: the time limit ends it, and the report says the target was not reached).
    let r = run(&sys, &space, &p, &RunOptions::default()).unwrap();
    let prime = r.prime.expect("primed by default");
    assert_eq!(prime.rounds, 1);
    assert!(prime.reached && prime.read_bytes_per_s[0] > 0.0);
    let options = RunOptions {
        prime: oversub_sched::Prime {
            max_s: 0.0,
            ..oversub_sched::Prime::until(1e18)
        },
        ..RunOptions::default()
    };
    let r = run(&sys, &space, &p, &options).unwrap();
    let prime = r.prime.unwrap();
    assert_eq!(prime.rounds, 1, "a round once started is finished");
    assert!(!prime.reached);
    assert_eq!(prime.target_read_bytes_per_s, Some(1e18));
    let off = RunOptions {
        prime: oversub_sched::Prime::off(),
        ..RunOptions::default()
    };
    assert!(run(&sys, &space, &p, &off).unwrap().prime.is_none());
    assert_eq!(pool.stats().used_bytes, 0, "buffers left behind");
}

#[test]
fn demand_mode_counts_the_bytes_its_write_back_wrote() {
    // The built-in works write their whole unit, so each eviction of a read-write buffer writes all of it; a
    // read-only buffer is never dirtied after the set-up, so its evictions write nothing.
    let sys = tiny_paper();
    let bw = Bandwidths::direct(500e6, 500e6);
    let table = plan::feasible_table(&sys, Mode::Demand, bw).unwrap_or_else(|| sys.clone());
    let p = plan::plan(&table, Mode::Demand, 6, bw);
    let pool = pool_for(&table);
    let space = pool.address_space();
    let r = run(&table, &space, &p, &RunOptions::default()).unwrap();
    let outs: Vec<_> = r.ops.iter().filter(|o| o.kind == "out").collect();
    assert!(!outs.is_empty());
    let read_only = format!(
        "{}.{}",
        table.components[1].name, table.components[1].buffers[0].name
    );
    // The kernel may write some dirty pages back on its own before an eviction does (a busy machine passing its
    // dirty threshold), so a single eviction can write less than the unit, never more.
    let mut whole = 0;
    for o in outs {
        if o.buffer == read_only {
            assert_eq!(o.io_bytes, 0, "{o:?}");
        } else {
            assert!(o.io_bytes <= MIB, "{o:?}");
            whole += usize::from(o.io_bytes == MIB);
        }
    }
    assert!(whole > 0, "no eviction wrote a whole unit");
}

#[test]
fn an_extra_warm_up_ends_the_run_its_counted_repetitions_later_and_frees_everything() {
    let sys = tiny_paper();
    let bw = Bandwidths::direct(500e6, 500e6);
    for mode in Mode::ALL {
        let table = plan::feasible_table(&sys, mode, bw).unwrap_or_else(|| sys.clone());
        // One asked, up to six more, three counted: the plan covers ten.
        let p = plan::plan(&table, mode, 10, bw);
        let pool = pool_for(&table);
        let space = pool.address_space();
        let options = RunOptions {
            warmup_hyperperiods: 1,
            max_extra_warmup: 6,
            ..RunOptions::default()
        };
        let r = run(&table, &space, &p, &options).unwrap();
        assert!((1..=7).contains(&r.warmup_hyperperiods), "{mode}: {r:?}");
        assert_eq!(r.warmup_asked, 1);
        assert_eq!(r.hyperperiods, r.warmup_hyperperiods + 3, "{mode}");
        assert_eq!(r.slots.len(), 5 * r.hyperperiods, "{mode}");
        assert_eq!(r.counted_slots(), 15, "{mode}");
        assert_eq!(pool.stats().used_bytes, 0, "{mode}: buffers left behind");
    }
}

#[test]
fn a_warm_up_that_does_not_catch_up_ends_when_the_lateness_stops_falling() {
    // Every work runs past its window: every repetition misses, none is on time, and the lateness never falls, so
    // the warm-up ends after the second repetition (the first that can be compared with one before).
    let mut sys = tiny_paper();
    for c in &mut sys.components {
        c.work = oversub_sched::Work::Sleep {
            compute_s: c.budget_s * 1.5,
        };
    }
    let bw = Bandwidths::direct(500e6, 500e6);
    let p = plan::plan(&sys, Mode::Async, 12, bw);
    let pool = pool_for(&sys);
    let space = pool.address_space();
    let options = RunOptions {
        warmup_hyperperiods: 1,
        max_extra_warmup: 9,
        ..RunOptions::default()
    };
    let r = run(&sys, &space, &p, &options).unwrap();
    // Two on a quiet machine; scheduling jitter of more than twice the on-time margin can make one repetition
    // look like progress and add one or more.
    assert!((2..=10).contains(&r.warmup_hyperperiods), "{r:?}");
    assert_eq!(r.hyperperiods, r.warmup_hyperperiods + 2);
    assert_eq!(r.deadline_misses, r.counted_slots());
    // The slots start on time and their works run past their windows: the works' own misses (WorkOverran) on a
    // quiet machine; a start delayed past the on-time margin by a busy one can read as another origin, never as
    // none or as a start that caught up.
    let profile = oversub_sched::miss_profile(&r);
    assert!(
        !matches!(
            profile.origin,
            oversub_sched::MissOrigin::None | oversub_sched::MissOrigin::StartCaughtUp { .. }
        ),
        "{profile:?}"
    );
    assert_eq!(pool.stats().used_bytes, 0, "buffers left behind");
}
