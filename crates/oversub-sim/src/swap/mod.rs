//! Contention-aware swap space management (Yang & Chen, "Memory Contention Aware Swap Space Management"),
//! simulated: several tasks share one memory, one memory controller, one SSD and a GPU's SMs, and a swap manager
//! decides what happens when their working sets do not all fit.
//!
//! The pieces: [`model`] (the machine and the tasks), [`scenarios`] (the paper's Figs. 4-6 and TOML scenario
//! files), [`policy`] (Baseline, MaT, the proposed policy), [`sim`] (the discrete-event engine and its conservation
//! checks), [`study`] (alone runs, Alg. 1 priorities, Alg. 2 swap ratios, each policy, lengthened latency) and
//! [`seeds`] (a study over many seeds: medians, quartiles and how often Proposed wins). The
//! algorithms themselves live in `oversub_tenants`; `docs/sim-swap.md` describes the model and its results.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use oversub_sim::swap::{run_study, scenarios, StudyOptions};
//!
//! let study = run_study(&scenarios::builtin("fig6", 1)?, &StudyOptions::default())?;
//! let summary = study.summary(None);
//! assert_eq!(summary.highest_proposed_s, Some(0.0)); // the top task runs as if alone
//! # Ok(())
//! # }
//! ```

mod error;
pub mod model;
pub mod orders;
pub mod policy;
pub mod report;
pub mod scenarios;
pub mod seeds;
pub mod sim;
pub mod study;

pub use error::SwapSimError;
pub use model::{DirectAccess, Evictable, Scenario, System, Task};
pub use policy::Policy;
pub use seeds::{parse_seeds, run_over_seeds, SeedSet, Spread};
pub use sim::{simulate, Mode, Outcome};
pub use study::{reduction_pct, run_study, PrioritySource, Study, StudyOptions, Summary};

#[cfg(test)]
mod proptests {
    use super::model::{System, Task, MB};
    use super::sim::{simulate, Mode};
    use proptest::prelude::*;

    fn scenario() -> impl Strategy<Value = (System, Vec<Task>, Vec<usize>, Vec<u64>)> {
        (
            proptest::collection::vec(
                (1u64..200, proptest::collection::vec(0u64..300, 1..=5)),
                1..=4,
            ),
            0u64..400,
            1u32..4,
            any::<u64>(),
        )
            .prop_map(|(specs, extra, sms, shuffle)| {
                let tasks: Vec<Task> = specs
                    .iter()
                    .enumerate()
                    .map(|(i, (mb, ms))| Task {
                        name: format!("t{i}"),
                        memory_bytes: mb * MB,
                        compute_ns: ms.iter().map(|m| m * 1_000_000).collect(),
                        weight: None,
                    })
                    .collect();
                let largest = tasks.iter().map(|t| t.memory_bytes).max().unwrap_or(MB);
                let system = System {
                    capacity_bytes: largest + extra * MB,
                    memory_bytes_per_s: 2_000 * MB,
                    ssd_read_bytes_per_s: 300 * MB,
                    ssd_write_bytes_per_s: 250 * MB,
                    sms,
                    tick_ns: 1_000_000,
                    evictable: if extra % 2 == 0 {
                        crate::swap::Evictable::NotTransferring
                    } else {
                        crate::swap::Evictable::BetweenSubtasks
                    },
                    direct_access: if extra % 3 == 0 {
                        crate::swap::DirectAccess::Serial
                    } else {
                        crate::swap::DirectAccess::Overlapped
                    },
                };
                // A rank permutation and direct shares that fit: the last tasks in rank order go to the SSD.
                let n = tasks.len();
                let mut ranks: Vec<usize> = (0..n).collect();
                ranks.rotate_left((shuffle % n as u64) as usize);
                let mut direct = vec![0u64; n];
                let mut excess = tasks
                    .iter()
                    .map(|t| t.memory_bytes)
                    .sum::<u64>()
                    .saturating_sub(system.capacity_bytes);
                for r in (0..n).rev() {
                    let i = ranks.iter().position(|&x| x == r).unwrap_or(0);
                    let take = excess.min(tasks[i].memory_bytes);
                    direct[i] = take;
                    excess -= take;
                }
                (system, tasks, ranks, direct)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn random_scenarios_terminate_and_conserve((system, tasks, ranks, direct) in scenario()) {
            for mode in [
                Mode::Baseline,
                Mode::Mat,
                Mode::Proposed { ranks: ranks.clone(), direct_bytes: direct.clone() },
            ] {
                let o = simulate(&system, &tasks, &mode);
                prop_assert!(o.is_ok(), "{mode:?}: {:?}", o.err());
                if let Ok(o) = o {
                    prop_assert!(o.check().is_ok(), "{mode:?}: {:?}", o.check().err());
                    prop_assert!(o.memory_peak_bytes <= system.capacity_bytes);
                }
            }
        }
    }
}
