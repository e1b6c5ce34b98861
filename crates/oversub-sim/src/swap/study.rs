//! One scenario's study, as the paper's Section V does it: every task alone (C_i(1)), all together under Baseline
//! (C_i(N)), the priorities of Alg. 1 from those two measurements, the swap ratios of Alg. 2, then each policy's
//! run and every task's lengthened latency (its response time among the others less its response time alone).

use oversub_tenants::priority::{self, Contention, Ranking};
use oversub_tenants::swap::{self as plan_swap, Plan};
use serde::Serialize;

use super::model::{ns_to_seconds, Scenario};
use super::orders::{canonical_order, simulate_orders};
use super::sim::{simulate, Mode, Outcome};
use super::{Policy, SwapSimError};

/// Where the priorities come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PrioritySource {
    /// Alg. 1 as written, the default: C_i(1) alone and C_i(N) together under Baseline in the scenario's own
    /// memory, so C_i(N) includes Baseline's swapping (the reading `oversub tasks` and `oversub bench tenants`
    /// measure on real systems).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Alg. 1 as written (the default, as in the library and Python): C_i(N) together under Baseline in the scenario's own memory, swapping included"
        )
    )]
    Measured,
    /// Alg. 1 with C_i(N) measured with all tasks together in a memory large enough for all of them: memory
    /// controller and SM contention only, no swapping (the contention of the paper's Fig. 2). A named alternative
    /// reading: thrashing is what Alg. 2 removes, so one may argue it should not decide who becomes a victim.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Alg. 1 with C_i(N) measured together in a memory that holds every task: memory contention only (an alternative reading, for the sensitivity table)"
        )
    )]
    Contention,
    /// The tasks' `priority` weights (larger is higher) or, when none has one, the order they are listed in.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "The scenario file's `priority` weights, or the order the tasks are listed in"
        )
    )]
    Given,
}

impl PrioritySource {
    /// Every source by name, the default first.
    pub const NAMES: [&'static str; 3] = ["measured", "contention", "given"];

    /// Its name: `measured`, `contention` or `given`.
    pub fn name(&self) -> &'static str {
        match self {
            PrioritySource::Measured => "measured",
            PrioritySource::Contention => "contention",
            PrioritySource::Given => "given",
        }
    }

    /// The source named `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<PrioritySource> {
        match name.trim().to_ascii_lowercase().as_str() {
            "measured" | "literal" => Some(PrioritySource::Measured),
            "contention" => Some(PrioritySource::Contention),
            "given" => Some(PrioritySource::Given),
            _ => None,
        }
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyOptions {
    /// The policies, in the order to report them.
    pub policies: Vec<Policy>,
    /// Where priorities come from.
    pub priorities: PrioritySource,
    /// The unit of Alg. 2's resident limits.
    pub page_bytes: u64,
    /// Run the conservation checks on every outcome and fail on the first broken one.
    pub check: bool,
}

impl Default for StudyOptions {
    fn default() -> Self {
        StudyOptions {
            policies: Policy::all(Default::default()),
            priorities: PrioritySource::Measured,
            page_bytes: 4096,
            check: true,
        }
    }
}

/// One task's measurements and priority.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskResult {
    /// Its name.
    pub name: String,
    /// MEM(i).
    pub memory_bytes: u64,
    /// n_i.
    pub subtasks: usize,
    /// Σ c_ij.
    pub compute_s: f64,
    /// C_i(1): its response time with the system to itself.
    pub alone_s: f64,
    /// C_i(N): its response time among all the tasks under Baseline, the mean over the arrival orders.
    pub together_s: f64,
    /// Alg. 1's contention degree W_i (or the given weight with `--priorities given`).
    pub degree: f64,
    /// Its priority rank, 0 the highest.
    pub rank: usize,
}

/// One policy's run.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRun {
    /// The policy.
    pub policy: Policy,
    /// What the simulator recorded in the canonical arrival order (its swap counts and logs; one of `orders`).
    pub outcome: Outcome,
    /// How many arrival orders the response times are the mean over.
    pub orders: u64,
    /// Each task's response time, its mean over the arrival orders.
    pub response_s: Vec<f64>,
    /// Each task's lengthened latency: mean response time here less response time alone.
    pub lengthened_s: Vec<f64>,
    /// Each task's swap ratio α_i (zero under Baseline and MaT).
    pub alpha: Vec<f64>,
    /// Alg. 2's plan, in priority order (proposed policy only).
    pub plan: Option<Plan>,
}

/// A scenario under every policy asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Study {
    /// The scenario simulated.
    pub scenario: Scenario,
    /// Per task, in the scenario's order.
    pub tasks: Vec<TaskResult>,
    /// Alg. 1's outcome (or the given priorities).
    pub ranking: Ranking,
    /// One run per policy, in the order asked.
    pub runs: Vec<PolicyRun>,
}

/// The paper's headline numbers for one scenario.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Index of the highest-priority task.
    pub highest: usize,
    /// Index of the lowest-priority task.
    pub lowest: usize,
    /// The highest-priority task's lengthened latency under the proposed policy.
    pub highest_proposed_s: Option<f64>,
    /// The lowest-priority task's lengthened latency under Baseline, MaT and the proposed policy.
    pub lowest_baseline_s: Option<f64>,
    /// See `lowest_baseline_s`.
    pub lowest_mat_s: Option<f64>,
    /// See `lowest_baseline_s`.
    pub lowest_proposed_s: Option<f64>,
    /// How much the proposed policy cuts the lowest-priority task's lengthened latency against Baseline, percent
    /// (negative: it lengthens it).
    pub vs_baseline_pct: Option<f64>,
    /// The same against MaT.
    pub vs_mat_pct: Option<f64>,
}

/// Reduction of `new` against `old`, percent; `None` when `old` is not positive.
pub fn reduction_pct(old: f64, new: f64) -> Option<f64> {
    (old > 0.0).then(|| (old - new) / old * 100.0)
}

impl Study {
    /// The run of `policy`, if it was asked for.
    pub fn run_of(&self, policy: Policy) -> Option<&PolicyRun> {
        self.runs.iter().find(|r| r.policy == policy)
    }

    /// The first proposed-policy run.
    pub fn proposed(&self) -> Option<&PolicyRun> {
        self.runs.iter().find(|r| r.policy.is_proposed())
    }

    /// Highest-priority task's lengthened latency under `proposed`, and the lowest-priority task's reductions.
    pub fn summary(&self, proposed: Option<Policy>) -> Summary {
        let highest = self.ranking.order.first().copied().unwrap_or(0);
        let lowest = self.ranking.order.last().copied().unwrap_or(0);
        let prop = match proposed {
            Some(p) => self.run_of(p),
            None => self.proposed(),
        };
        let get =
            |run: Option<&PolicyRun>, i: usize| run.and_then(|r| r.lengthened_s.get(i).copied());
        let base = self.run_of(Policy::Baseline);
        let mat = self.run_of(Policy::Mat);
        let lowest_proposed_s = get(prop, lowest);
        let lowest_baseline_s = get(base, lowest);
        let lowest_mat_s = get(mat, lowest);
        Summary {
            highest,
            lowest,
            highest_proposed_s: get(prop, highest),
            lowest_baseline_s,
            lowest_mat_s,
            lowest_proposed_s,
            vs_baseline_pct: lowest_baseline_s
                .zip(lowest_proposed_s)
                .and_then(|(b, p)| reduction_pct(b, p)),
            vs_mat_pct: lowest_mat_s
                .zip(lowest_proposed_s)
                .and_then(|(m, p)| reduction_pct(m, p)),
        }
    }
}

fn checked(outcome: Outcome, check: bool) -> Result<Outcome, SwapSimError> {
    if check {
        outcome.check()?;
    }
    Ok(outcome)
}

/// Runs the study of `scenario`: alone runs, Baseline, priorities, then each policy of `options`. Every run of
/// more than one task is simulated in every arrival order and each task's figures are means over the orders
/// ([`super::orders`]), so the order the tasks are listed in changes nothing.
pub fn run_study(scenario: &Scenario, options: &StudyOptions) -> Result<Study, SwapSimError> {
    scenario.validate()?;
    let sys = &scenario.system;
    let tasks = &scenario.tasks;
    let mut alone_ns = Vec::with_capacity(tasks.len());
    for t in tasks {
        let o = checked(
            simulate(sys, std::slice::from_ref(t), &Mode::Baseline)?,
            options.check,
        )?;
        alone_ns.push(o.response_ns[0]);
    }
    let alone_s: Vec<f64> = alone_ns.iter().map(|&ns| ns_to_seconds(ns)).collect();
    let baseline = simulate_orders(sys, tasks, &Mode::Baseline, options.check)?;
    let together_s = baseline.response_s();

    let ranking = match options.priorities {
        PrioritySource::Measured | PrioritySource::Contention => {
            let together_s = if options.priorities == PrioritySource::Contention {
                let roomy = super::model::System {
                    capacity_bytes: sys.capacity_bytes.max(scenario.total_demand_bytes()),
                    ..sys.clone()
                };
                simulate_orders(&roomy, tasks, &Mode::Baseline, options.check)?.response_s()
            } else {
                together_s.clone()
            };
            // Alg. 1 in the canonical order, so that equal degrees (identical tasks) rank by what the tasks are,
            // not by where they are listed.
            let canon = canonical_order(tasks);
            let apps = canon
                .iter()
                .map(|&i| {
                    Contention::new(
                        tasks[i].name.clone(),
                        alone_s[i],
                        together_s[i],
                        tasks[i].subtasks() as u32,
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            let c = priority::assign(&apps)?;
            let mut degrees = vec![0.0; tasks.len()];
            let mut rank = vec![0; tasks.len()];
            for (k, &i) in canon.iter().enumerate() {
                degrees[i] = c.degrees[k];
                rank[i] = c.rank[k];
            }
            Ranking {
                degrees,
                order: c.order.iter().map(|&k| canon[k]).collect(),
                rank,
            }
        }
        PrioritySource::Given => {
            let given = tasks.iter().filter(|t| t.weight.is_some()).count();
            let weights: Vec<f64> = if given == 0 {
                (0..tasks.len()).map(|i| -(i as f64)).collect()
            } else if given == tasks.len() {
                tasks.iter().map(|t| t.weight.unwrap_or(0.0)).collect()
            } else {
                return Err(SwapSimError::invalid(
                    &scenario.name,
                    "give every task a priority, or none (then the listed order is the priority order)",
                ));
            };
            priority::from_weights(&weights)?
        }
    };

    let mut runs = Vec::new();
    for &policy in &options.policies {
        let (outcome, alpha, plan) = match policy {
            Policy::Baseline => (baseline.clone(), vec![0.0; tasks.len()], None),
            Policy::Mat => (
                simulate_orders(sys, tasks, &Mode::Mat, options.check)?,
                vec![0.0; tasks.len()],
                None,
            ),
            Policy::PriorityOnly => (
                simulate_orders(
                    sys,
                    tasks,
                    &Mode::PriorityOnly {
                        ranks: ranking.rank.clone(),
                    },
                    options.check,
                )?,
                vec![0.0; tasks.len()],
                None,
            ),
            Policy::Proposed(rule) | Policy::DirectOnly(rule) => {
                let demands: Vec<u64> = ranking
                    .order
                    .iter()
                    .map(|&i| tasks[i].memory_bytes)
                    .collect();
                let plan = plan_swap::plan(
                    &demands,
                    sys.capacity_bytes,
                    &plan_swap::Options {
                        rule,
                        page_bytes: options.page_bytes,
                    },
                )?;
                let mut direct = vec![0u64; tasks.len()];
                let mut alpha = vec![0.0; tasks.len()];
                for (q, &i) in plan.tenants.iter().zip(&ranking.order) {
                    direct[i] = q.swapped_bytes;
                    alpha[i] = q.alpha;
                }
                let mode = if policy.is_proposed() {
                    Mode::Proposed {
                        ranks: ranking.rank.clone(),
                        direct_bytes: direct,
                    }
                } else {
                    Mode::DirectOnly {
                        ranks: ranking.rank.clone(),
                        direct_bytes: direct,
                    }
                };
                (
                    simulate_orders(sys, tasks, &mode, options.check)?,
                    alpha,
                    Some(plan),
                )
            }
        };
        runs.push(PolicyRun {
            policy,
            response_s: outcome.response_s(),
            lengthened_s: outcome.lengthened_s(&alone_ns),
            orders: outcome.orders,
            outcome: outcome.canonical,
            alpha,
            plan,
        });
    }
    let task_results = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| TaskResult {
            name: t.name.clone(),
            memory_bytes: t.memory_bytes,
            subtasks: t.subtasks(),
            compute_s: ns_to_seconds(t.compute_ns.iter().sum()),
            alone_s: alone_s[i],
            together_s: together_s[i],
            degree: ranking.degrees[i],
            rank: ranking.rank[i],
        })
        .collect();
    Ok(Study {
        scenario: scenario.clone(),
        tasks: task_results,
        ranking,
        runs,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::swap::model::{System, Task, MB};
    use crate::swap::scenarios::{builtin, BUILTIN};
    use oversub_tenants::swap::AlphaRule;

    fn all_policies() -> Vec<Policy> {
        vec![
            Policy::Baseline,
            Policy::Mat,
            Policy::Proposed(AlphaRule::Fraction),
            Policy::Proposed(AlphaRule::PrintedCeil),
        ]
    }

    #[test]
    fn conservation_holds_on_every_builtin_and_policy() {
        let options = StudyOptions {
            policies: all_policies(),
            ..StudyOptions::default()
        };
        for name in BUILTIN {
            let study = run_study(&builtin(name, 1).unwrap(), &options).unwrap();
            let scenario = builtin(name, 1).unwrap();
            for run in &study.runs {
                run.outcome.check().unwrap();
                // Nobody runs faster than alone, except by what overlapped direct access hides of its own reads
                // and write-backs (a victim's SSD traffic runs during its execution instead of before and after).
                for (i, &l) in run.lengthened_s.iter().enumerate() {
                    let own_transfers_s = 2.0 * scenario.tasks[i].memory_bytes as f64
                        / scenario.system.memory_bytes_per_s as f64;
                    let slack = if run.policy.planned() {
                        own_transfers_s
                    } else {
                        0.0
                    };
                    assert!(l >= -slack - 1e-6, "{name} {} task {i}: {l}", run.policy);
                }
                if run.policy.planned() {
                    assert!(
                        run.outcome.swap_outs.iter().all(|&s| s == 0),
                        "{name}: the proposed policy never swaps"
                    );
                }
            }
        }
    }

    #[test]
    fn the_top_task_suffers_nothing_under_the_proposed_policy() {
        for name in BUILTIN {
            let study = run_study(&builtin(name, 1).unwrap(), &StudyOptions::default()).unwrap();
            let s = study.summary(None);
            assert_eq!(s.highest_proposed_s, Some(0.0), "{name}");
        }
    }

    #[test]
    fn given_priorities_follow_the_list_or_the_weights() {
        let mut scenario = builtin("fig4a", 1).unwrap();
        let options = StudyOptions {
            priorities: PrioritySource::Given,
            ..StudyOptions::default()
        };
        let study = run_study(&scenario, &options).unwrap();
        assert_eq!(study.ranking.order, vec![0, 1, 2, 3]);
        let alpha = &study.proposed().unwrap().alpha;
        assert_eq!(alpha, &vec![0.0, 0.0, 0.0, 1.0]);
        for (t, w) in scenario.tasks.iter_mut().zip([1.0, 4.0, 3.0, 2.0]) {
            t.weight = Some(w);
        }
        let study = run_study(&scenario, &options).unwrap();
        assert_eq!(study.ranking.order, vec![1, 2, 3, 0]);
        scenario.tasks[0].weight = None;
        assert!(run_study(&scenario, &options).is_err());
    }

    #[test]
    fn the_lowest_task_keeps_its_quota_and_reads_the_rest_from_the_ssd() {
        // Two 100 MB tasks in 150 MB: the lowest-priority one keeps 50 MB and reads 50 MB of each pass from the
        // SSD (fraction rule); with the printed ceiling it keeps nothing.
        let sys = System {
            capacity_bytes: 150 * MB,
            ..System::paper(150 * MB, 2)
        };
        let task = |name: &str| Task {
            name: name.into(),
            memory_bytes: 100 * MB,
            compute_ns: vec![50_000_000; 2],
            weight: None,
        };
        let scenario = Scenario {
            name: "pair".into(),
            description: String::new(),
            system: sys,
            tasks: vec![task("a"), task("b")],
            paper: None,
        };
        let options = StudyOptions {
            policies: all_policies(),
            page_bytes: 1,
            ..StudyOptions::default()
        };
        let study = run_study(&scenario, &options).unwrap();
        let low = study.ranking.order[1];
        let frac = study.run_of(Policy::Proposed(AlphaRule::Fraction)).unwrap();
        let ceil = study
            .run_of(Policy::Proposed(AlphaRule::PrintedCeil))
            .unwrap();
        assert_eq!(frac.alpha[low], 0.5);
        assert_eq!(ceil.alpha[low], 1.0);
        assert_eq!(frac.outcome.memory_peak_bytes, 150 * MB);
        assert_eq!(ceil.outcome.memory_peak_bytes, 100 * MB);
        // More on the SSD is slower for the victim.
        assert!(ceil.lengthened_s[low] > frac.lengthened_s[low]);
    }

    #[test]
    fn contention_priorities_rank_gesummv_last_in_fig6_as_the_paper_does() {
        // Measured without the memory limit, only queueing on the memory controller counts: GESUMMV, one long
        // kernel, suffers least relative to its time alone and ranks last, as in the paper's Fig. 6. (The paper's
        // top task, MVT, is not asserted: ATAX, BICG and MVT's degrees differ by 0.02% here.)
        let options = StudyOptions {
            priorities: PrioritySource::Contention,
            ..StudyOptions::default()
        };
        let study = run_study(&builtin("fig6", 1).unwrap(), &options).unwrap();
        let name = |i: usize| study.tasks[i].name.as_str();
        assert_eq!(name(study.ranking.order[3]), "GESUMMV");
        let s = study.summary(None);
        assert_eq!(s.highest_proposed_s, Some(0.0));
    }

    #[test]
    fn the_listing_order_decides_nothing_in_fig6() {
        // Fig. 6's tasks differ by microseconds, and with ties broken by listing position the listing chose the
        // victim (BICG, GESUMMV or ATAX in three orders). Over every arrival order, every listing of the same tasks
        // gives the same priorities, the same victim and the same figure, to the last bit.
        let base = builtin("fig6", 1).unwrap();
        let options = StudyOptions::default();
        let figure = |scenario: &Scenario| {
            let study = run_study(scenario, &options).unwrap();
            let name = |i: usize| study.tasks[i].name.clone();
            let order: Vec<String> = study.ranking.order.iter().map(|&i| name(i)).collect();
            let mut per_task: Vec<(String, Vec<u64>)> = (0..study.tasks.len())
                .map(|i| {
                    let bits = study
                        .runs
                        .iter()
                        .flat_map(|r| [r.lengthened_s[i].to_bits(), r.alpha[i].to_bits()])
                        .chain([study.tasks[i].degree.to_bits()])
                        .collect();
                    (name(i), bits)
                })
                .collect();
            per_task.sort();
            (order, per_task)
        };
        let want = figure(&base);
        for perm in [[3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
            let mut s = base.clone();
            s.tasks = perm.iter().map(|&i| base.tasks[i].clone()).collect();
            assert_eq!(figure(&s), want, "listing {perm:?}");
        }
    }

    #[test]
    fn reductions() {
        assert_eq!(reduction_pct(10.0, 2.0), Some(80.0));
        assert_eq!(reduction_pct(0.0, 2.0), None);
        assert_eq!(reduction_pct(10.0, 20.0), Some(-100.0));
    }
}
