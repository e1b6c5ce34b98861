//! A study over many seeds: the synthetic scenarios draw their compute times from a seed, and one draw decides the
//! headline (issue 38 found the lowest task's cut in Fig. 4(a) ranging from −16052% to 92% over seeds 1-10). This
//! runs every scenario once per seed and reports, per priority position, the median and interquartile range of each
//! policy's lengthened latency and the share of seeds where Proposed beats Baseline and MaT.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use super::model::{DirectAccess, PaperFigure, Scenario};
use super::study::{run_study, Study, StudyOptions};
use super::{Policy, SwapSimError};

/// Seeds a run over seeds uses when none are named: 1..=20.
pub const DEFAULT_SEEDS: u64 = 20;

/// Median, quartiles and range of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Values in the sample (non-finite ones are left out).
    pub n: usize,
    /// The median.
    pub median: f64,
    /// First quartile.
    pub q1: f64,
    /// Third quartile.
    pub q3: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of the finite values in `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Spread {
            n: v.len(),
            median: quantile(&v, 0.5),
            q1: quantile(&v, 0.25),
            q3: quantile(&v, 0.75),
            min: v[0],
            max: v[v.len() - 1],
        })
    }

    /// Third quartile less first.
    pub fn iqr(&self) -> f64 {
        self.q3 - self.q1
    }
}

/// The `p` quantile of sorted, non-empty `v`, interpolated linearly between order statistics (the common "type 7"
/// definition, numpy's and R's default, so the numbers can be checked by hand).
fn quantile(v: &[f64], p: f64) -> f64 {
    let h = (v.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// Seeds from the command line's `--seeds`: a count `N` (seeds 1..=N) or an inclusive range `A-B` or `A..B`.
pub fn parse_seeds(text: &str) -> Result<Vec<u64>, SwapSimError> {
    let bad = |reason: String| SwapSimError::BadSeeds {
        text: text.to_string(),
        reason,
    };
    let t = text.trim();
    let num = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|e| bad(format!("{s:?} is not a whole number: {e}")))
    };
    let range = t
        .split_once("..")
        .or_else(|| t.split_once('-'))
        .map(|(a, b)| (a, b.strip_prefix('=').unwrap_or(b)));
    let (first, last) = match range {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let n = num(t)?;
            if n == 0 {
                return Err(bad("at least one seed".into()));
            }
            (1, n)
        }
    };
    if last < first {
        return Err(bad(format!(
            "the range ends ({last}) before it starts ({first})"
        )));
    }
    const MOST: u64 = 100_000;
    if last - first >= MOST {
        return Err(bad(format!("at most {MOST} seeds")));
    }
    Ok((first..=last).collect())
}

/// One seed's study of one scenario, reduced to what the aggregate needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedPoint {
    /// The seed.
    pub seed: u64,
    /// Task names by priority position (the first the highest).
    pub tasks_by_priority: Vec<String>,
    /// Per policy (in the study's order), each priority position's lengthened latency, seconds.
    pub lengthened_s: Vec<Vec<f64>>,
    /// How much Proposed cuts the lowest-priority task's lengthened latency against Baseline, percent (`None`
    /// when Baseline does not lengthen it).
    pub lowest_cut_vs_baseline_pct: Option<f64>,
    /// The same against MaT.
    pub lowest_cut_vs_mat_pct: Option<f64>,
    /// Swap-outs per policy, all tasks.
    pub swap_outs: Vec<u32>,
}

impl SeedPoint {
    fn of(seed: u64, study: &Study) -> SeedPoint {
        let order = &study.ranking.order;
        let sum = study.summary(None);
        SeedPoint {
            seed,
            tasks_by_priority: order.iter().map(|&i| study.tasks[i].name.clone()).collect(),
            lengthened_s: study
                .runs
                .iter()
                .map(|r| order.iter().map(|&i| r.lengthened_s[i]).collect())
                .collect(),
            lowest_cut_vs_baseline_pct: sum.vs_baseline_pct,
            lowest_cut_vs_mat_pct: sum.vs_mat_pct,
            swap_outs: study
                .runs
                .iter()
                .map(|r| r.outcome.swap_outs.iter().sum())
                .collect(),
        }
    }
}

/// One priority position (1 the highest) over all seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionStats {
    /// 1 is the highest priority, as in the paper's figures.
    pub priority: usize,
    /// Which tasks held this position, with how many seeds each.
    pub tasks: Vec<(String, usize)>,
    /// Per policy (in [`SeedSet::policies`]' order), the spread of the lengthened latency, seconds.
    pub lengthened_s: Vec<Option<Spread>>,
    /// Seeds where Proposed's lengthened latency is strictly below Baseline's.
    pub proposed_beats_baseline: Option<usize>,
    /// Seeds where Proposed's lengthened latency is strictly below MaT's.
    pub proposed_beats_mat: Option<usize>,
    /// Seeds counted.
    pub seeds: usize,
}

/// One scenario (at one direct-access timing) over every seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedSet {
    /// The scenario's name.
    pub name: String,
    /// The paper's figure and numbers, for the built-in scenarios.
    pub paper: Option<PaperFigure>,
    /// How the victims' direct accesses were timed.
    pub direct_access: DirectAccess,
    /// Whether the scenario changed with the seed at all (Fig. 6 and files with fixed compute times do not: every
    /// seed is then the same run).
    pub seed_dependent: bool,
    /// Policy keys, in the order of every per-policy list.
    pub policies: Vec<&'static str>,
    /// Policy labels as the reports print them.
    pub policy_labels: Vec<String>,
    /// Per priority position.
    pub positions: Vec<PositionStats>,
    /// The lowest-priority task's cut against Baseline over the seeds where it is defined, percent.
    pub lowest_cut_vs_baseline_pct: Option<Spread>,
    /// The same against MaT.
    pub lowest_cut_vs_mat_pct: Option<Spread>,
    /// Every seed's figures.
    pub per_seed: Vec<SeedPoint>,
}

impl SeedSet {
    /// The position of the lowest-priority task.
    pub fn lowest(&self) -> Option<&PositionStats> {
        self.positions.last()
    }

    /// The position of the highest-priority task.
    pub fn highest(&self) -> Option<&PositionStats> {
        self.positions.first()
    }

    /// Index of `policy` in the per-policy lists.
    pub fn policy_index(&self, policy: Policy) -> Option<usize> {
        self.policies.iter().position(|&k| k == policy.key())
    }

    /// Index of the first proposed policy in the per-policy lists.
    pub fn proposed_index(&self) -> Option<usize> {
        self.policies.iter().position(|k| k.starts_with("proposed"))
    }

    /// Gathers the per-seed points of one scenario. `points` must be non-empty and in seed order.
    fn aggregate(first: &Study, points: Vec<SeedPoint>, seed_dependent: bool) -> SeedSet {
        let policies: Vec<&'static str> = first.runs.iter().map(|r| r.policy.key()).collect();
        let policy_labels = first.runs.iter().map(|r| r.policy.to_string()).collect();
        let find = |key: &str| policies.iter().position(|&k| k == key);
        let base = find(Policy::Baseline.key());
        let mat = find(Policy::Mat.key());
        let prop = first.runs.iter().position(|r| r.policy.is_proposed());
        let n_pos = first.tasks.len();
        let positions = (0..n_pos)
            .map(|pos| {
                let mut tasks: Vec<(String, usize)> = Vec::new();
                for p in &points {
                    let name = &p.tasks_by_priority[pos];
                    match tasks.iter_mut().find(|(n, _)| n == name) {
                        Some((_, c)) => *c += 1,
                        None => tasks.push((name.clone(), 1)),
                    }
                }
                let at = |k: usize| -> Vec<f64> {
                    points.iter().map(|p| p.lengthened_s[k][pos]).collect()
                };
                let beats = |other: Option<usize>| {
                    let (o, pr) = (other?, prop?);
                    Some(
                        points
                            .iter()
                            .filter(|p| p.lengthened_s[pr][pos] < p.lengthened_s[o][pos])
                            .count(),
                    )
                };
                PositionStats {
                    priority: pos + 1,
                    tasks,
                    lengthened_s: (0..policies.len()).map(|k| Spread::of(&at(k))).collect(),
                    proposed_beats_baseline: beats(base),
                    proposed_beats_mat: beats(mat),
                    seeds: points.len(),
                }
            })
            .collect();
        let cuts = |f: fn(&SeedPoint) -> Option<f64>| {
            Spread::of(&points.iter().filter_map(f).collect::<Vec<_>>())
        };
        SeedSet {
            name: first.scenario.name.clone(),
            paper: first.scenario.paper,
            direct_access: first.scenario.system.direct_access,
            seed_dependent,
            policies,
            policy_labels,
            positions,
            lowest_cut_vs_baseline_pct: cuts(|p| p.lowest_cut_vs_baseline_pct),
            lowest_cut_vs_mat_pct: cuts(|p| p.lowest_cut_vs_mat_pct),
            per_seed: points,
        }
    }
}

/// What `oversub sim swap --json` writes, and Python's `sim_swap(seeds=...)` returns, for a run over seeds.
#[derive(Debug, Serialize)]
pub struct SeedsDoc<'a> {
    /// Always `"seeds"`: tells this document from a single draw's.
    pub kind: &'static str,
    /// The seeds run.
    pub seeds: &'a [u64],
    /// The direct-access timing the headline uses.
    pub default_direct_access: DirectAccess,
    /// Where priorities came from.
    pub priorities: &'static str,
    /// One entry per scenario and direct-access timing.
    pub scenarios: &'a [SeedSet],
}

impl<'a> SeedsDoc<'a> {
    /// The document of `sets`, run over `seeds` with priorities from `priorities`.
    pub fn new(seeds: &'a [u64], priorities: &'static str, sets: &'a [SeedSet]) -> Self {
        SeedsDoc {
            kind: "seeds",
            seeds,
            default_direct_access: DirectAccess::default(),
            priorities,
            scenarios: sets,
        }
    }
}

/// Runs `build(seed)`'s scenarios for every seed on up to `threads` threads and aggregates each scenario (by its
/// index in what `build` returns, which must be the same length for every seed) over the seeds. `progress` is
/// called with (studies done, studies in all) after each study; it must not block.
pub fn run_over_seeds(
    build: &(dyn Fn(u64) -> Result<Vec<Scenario>, SwapSimError> + Sync),
    seeds: &[u64],
    options: &StudyOptions,
    threads: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<SeedSet>, SwapSimError> {
    if seeds.is_empty() {
        return Err(SwapSimError::BadSeeds {
            text: String::new(),
            reason: "at least one seed".into(),
        });
    }
    let per_seed: Vec<Vec<Scenario>> = seeds.iter().map(|&s| build(s)).collect::<Result<_, _>>()?;
    let width = per_seed[0].len();
    if per_seed.iter().any(|v| v.len() != width) {
        return Err(SwapSimError::invalid(
            "seeds",
            "every seed must give the same scenarios",
        ));
    }
    let jobs: Vec<(usize, usize)> = (0..seeds.len())
        .flat_map(|s| (0..width).map(move |c| (s, c)))
        .collect();
    let total = jobs.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    // Each slot is written once by the thread that took its job.
    let slots: Mutex<Vec<Option<Result<Study, SwapSimError>>>> =
        Mutex::new((0..total).map(|_| None).collect());
    let worker = || loop {
        let j = next.fetch_add(1, Ordering::Relaxed);
        let Some(&(s, c)) = jobs.get(j) else { break };
        let scenario = &per_seed[s][c];
        let result = run_study(scenario, options).map_err(|e| SwapSimError::AtSeed {
            scenario: scenario.name.clone(),
            seed: seeds[s],
            source: Box::new(e),
        });
        let failed = result.is_err();
        if let Ok(mut v) = slots.lock() {
            v[j] = Some(result);
        }
        progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
        if failed {
            // Stop handing out work: the first error is what the caller sees.
            next.store(total, Ordering::Relaxed);
        }
    };
    let threads = threads.clamp(1, total.max(1));
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(worker);
        }
        worker();
    });
    let mut slots = slots
        .into_inner()
        .map_err(|_| SwapSimError::invalid("seeds", "a simulation thread failed"))?;
    let mut studies: Vec<Vec<Study>> = (0..width)
        .map(|_| Vec::with_capacity(seeds.len()))
        .collect();
    for (j, &(_, c)) in jobs.iter().enumerate() {
        match slots[j].take() {
            Some(Ok(study)) => studies[c].push(study),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    // A job left unrun means an earlier one failed; find and return that error.
    if studies.iter().any(|v| v.len() != seeds.len()) {
        return Err(SwapSimError::invalid("seeds", "a simulation did not run"));
    }
    Ok(studies
        .into_iter()
        .enumerate()
        .map(|(c, runs)| {
            let seed_dependent = per_seed.iter().any(|v| v[c].tasks != per_seed[0][c].tasks);
            let points = runs
                .iter()
                .zip(seeds)
                .map(|(st, &seed)| SeedPoint::of(seed, st))
                .collect();
            SeedSet::aggregate(&runs[0], points, seed_dependent)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::swap::scenarios::builtin;

    #[test]
    fn spread_is_median_quartiles_and_range() {
        let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (s.n, s.median, s.q1, s.q3, s.min, s.max),
            (5, 3.0, 2.0, 4.0, 1.0, 5.0)
        );
        assert_eq!(s.iqr(), 2.0);
        // Even count: interpolated between the middle pair, as numpy.percentile does.
        let s = Spread::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.median, s.q1, s.q3), (2.5, 1.75, 3.25));
        // One value; non-finite values are left out; nothing left is no spread.
        let s = Spread::of(&[f64::NAN, 7.0, f64::INFINITY]).unwrap();
        assert_eq!((s.n, s.median, s.q1, s.q3), (1, 7.0, 7.0, 7.0));
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn seeds_parse_as_a_count_or_a_range() {
        assert_eq!(parse_seeds("3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_seeds("5-7").unwrap(), vec![5, 6, 7]);
        assert_eq!(parse_seeds("5..7").unwrap(), vec![5, 6, 7]);
        assert_eq!(parse_seeds("5..=7").unwrap(), vec![5, 6, 7]);
        assert_eq!(parse_seeds(" 9-9 ").unwrap(), vec![9]);
        for bad in ["0", "", "x", "7-5", "1-x", "-3", "1-1000000"] {
            assert!(parse_seeds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shares_and_spreads_count_every_seed() {
        let seeds: Vec<u64> = (1..=4).collect();
        let build = |seed: u64| Ok(vec![builtin("fig5b", seed)?, builtin("fig6", seed)?]);
        let calls = AtomicUsize::new(0);
        let sets = run_over_seeds(&build, &seeds, &StudyOptions::default(), 3, &|_, total| {
            assert_eq!(total, 8);
            calls.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 8);
        assert_eq!(sets.len(), 2);
        let (synthetic, fig6) = (&sets[0], &sets[1]);
        assert!(synthetic.seed_dependent);
        assert!(!fig6.seed_dependent, "Fig. 6 draws nothing");
        for set in &sets {
            assert_eq!(set.per_seed.len(), 4);
            assert_eq!(
                set.per_seed.iter().map(|p| p.seed).collect::<Vec<_>>(),
                seeds
            );
            let prop = set.proposed_index().unwrap();
            let base = set.policy_index(Policy::Baseline).unwrap();
            for pos in &set.positions {
                assert_eq!(pos.seeds, 4);
                assert_eq!(pos.tasks.iter().map(|(_, c)| c).sum::<usize>(), 4);
                // The share is recounted from the per-seed figures.
                let beats = set
                    .per_seed
                    .iter()
                    .filter(|p| {
                        p.lengthened_s[prop][pos.priority - 1]
                            < p.lengthened_s[base][pos.priority - 1]
                    })
                    .count();
                assert_eq!(pos.proposed_beats_baseline, Some(beats));
                let s = pos.lengthened_s[prop].unwrap();
                assert!(s.min <= s.q1 && s.q1 <= s.median && s.median <= s.q3 && s.q3 <= s.max);
            }
            // The top task runs as if alone under Proposed, on every seed.
            let top = set.highest().unwrap().lengthened_s[prop].unwrap();
            assert_eq!((top.min, top.max), (0.0, 0.0));
        }
        // A deterministic scenario has no spread at all.
        let low = fig6.lowest().unwrap().lengthened_s[0].unwrap();
        assert_eq!(low.min, low.max);
        // The same seeds give the same figures, whatever the number of threads.
        let again =
            run_over_seeds(&build, &seeds, &StudyOptions::default(), 1, &|_, _| {}).unwrap();
        assert_eq!(again, sets);
    }
}
