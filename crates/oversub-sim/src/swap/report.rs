//! Studies as serializable documents: what `oversub sim swap --json` writes and the Python bindings' `sim_swap`
//! returns, and the expansion of policy names both take.

use std::path::Path;

use oversub_profile::{Profile, ProfileError, SwapMachine};
use oversub_tenants::swap::AlphaRule;
use serde::Serialize;

use super::study::Study;
use super::{Policy, SwapSimError};

/// Alg. 2's swap-ratio rules to study from those named (already parsed): each once, in the order first named; none
/// named is the fraction rule alone, or, for the suite, the fraction rule and the printed ceiling.
pub fn alpha_rules(named: &[AlphaRule], suite: bool) -> Vec<AlphaRule> {
    if suite && named.is_empty() {
        return vec![AlphaRule::Fraction, AlphaRule::PrintedCeil];
    }
    let mut rules = Vec::new();
    for rule in named {
        if !rules.contains(rule) {
            rules.push(*rule);
        }
    }
    if rules.is_empty() {
        rules.push(AlphaRule::Fraction);
    }
    rules
}

/// Policies named as on the command line, with Alg. 2's swap-ratio `rules`: `all` (or none named, or `all_policies`)
/// is Baseline, MaT and the proposed policy under each rule; `proposed` is the proposed policy under each rule;
/// other names as [`Policy::parse`] reads them. Each policy appears once, in the order first named.
pub fn expand_policies(
    names: &[String],
    rules: &[AlphaRule],
    all_policies: bool,
) -> Result<Vec<Policy>, SwapSimError> {
    let mut out: Vec<Policy> = Vec::new();
    let mut push = |p: Policy| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    let is = |name: &str, what: &str| name.trim().eq_ignore_ascii_case(what);
    if all_policies || names.is_empty() || names.iter().any(|n| is(n, "all")) {
        push(Policy::Baseline);
        push(Policy::Mat);
        push(Policy::PriorityOnly);
        for &r in rules {
            push(Policy::DirectOnly(r));
        }
        for &r in rules {
            push(Policy::Proposed(r));
        }
    }
    if names.iter().any(|n| is(n, "paper")) {
        push(Policy::Baseline);
        push(Policy::Mat);
        for &r in rules {
            push(Policy::Proposed(r));
        }
    }
    for name in names {
        if is(name, "all") || is(name, "paper") {
            continue;
        }
        if is(name, "proposed") {
            for &r in rules {
                push(Policy::Proposed(r));
            }
        } else if is(name, "alg2-direct") || is(name, "direct-only") {
            for &r in rules {
                push(Policy::DirectOnly(r));
            }
        } else {
            push(Policy::parse(name, AlphaRule::Fraction)?);
        }
    }
    Ok(out)
}

/// One task's figures in one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    /// The task's name.
    pub task: String,
    /// Its priority; 1 is the highest.
    pub priority: usize,
    /// Response time in the run less response time alone, seconds.
    pub lengthened_latency_s: f64,
    /// Response time in the run, seconds.
    pub response_s: f64,
    /// Response time alone, seconds.
    pub alone_s: f64,
    /// Alg. 1's degree of contention.
    pub degree: f64,
    /// Alg. 2's swap ratio (zero under Baseline and MaT).
    pub alpha: f64,
    /// Times the task was swapped out.
    pub swap_outs: u32,
}

/// One scenario under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    /// The scenario's name.
    pub name: String,
    /// The policy's key ([`Policy::key`]).
    pub policy: &'static str,
    /// The policy as the reports name it.
    pub policy_label: String,
    /// Per task, in the scenario's order.
    pub tasks: Vec<TaskRow>,
    /// When the last task finished, seconds.
    pub makespan_s: f64,
    /// Swap-outs of all tasks.
    pub swap_outs: u32,
    /// Most memory in use at once.
    pub memory_peak_bytes: u64,
}

/// A scenario's headline numbers ([`Study::summary`]) beside the paper's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryRow {
    /// The scenario's name.
    pub name: String,
    /// The paper's figure it reproduces, if any.
    pub figure: Option<&'static str>,
    /// The highest-priority task.
    pub highest: String,
    /// Its lengthened latency under the proposed policy, seconds.
    pub highest_proposed_lengthened_s: Option<f64>,
    /// The lowest-priority task.
    pub lowest: String,
    /// How much the proposed policy cuts its lengthened latency against Baseline, percent.
    pub lowest_cut_vs_baseline_pct: Option<f64>,
    /// The same against MaT.
    pub lowest_cut_vs_mat_pct: Option<f64>,
    /// The paper's cut against Baseline, percent.
    pub paper_cut_vs_baseline_pct: Option<f64>,
    /// The paper's cut against MaT, percent.
    pub paper_cut_vs_mat_pct: Option<f64>,
}

/// A platform profile's `[swap]` table and the file it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileSwap {
    /// The profile file, as displayed.
    pub path: String,
    /// Its `[swap]` keys (those absent keep each scenario's values; empty when it has no table).
    pub swap: SwapMachine,
}

impl ProfileSwap {
    /// Reads the profile at `path`.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        Ok(ProfileSwap {
            path: path.display().to_string(),
            swap: Profile::load(path)?.swap.unwrap_or_default(),
        })
    }
}

/// Studies of several scenarios.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwapDoc {
    /// One row per scenario and policy.
    pub scenarios: Vec<RunRow>,
    /// One row per scenario.
    pub summaries: Vec<SummaryRow>,
    /// Seed of the synthetic compute times.
    pub seed: u64,
    /// The profile whose `[swap]` table was applied; left out of the document when None.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileSwap>,
}

/// The name of task `i`, or `task N` for an index the study does not have.
fn task_name(study: &Study, i: usize) -> String {
    study
        .tasks
        .get(i)
        .map_or_else(|| format!("task {i}"), |t| t.name.clone())
}

impl SwapDoc {
    /// The document of `studies`, simulated with `seed` (and `profile`'s machine, if any).
    pub fn new(studies: &[Study], seed: u64, profile: Option<ProfileSwap>) -> Self {
        let mut scenarios = Vec::new();
        let mut summaries = Vec::new();
        for st in studies {
            for r in &st.runs {
                let at = |v: &[f64], i: usize| v.get(i).copied().unwrap_or(f64::NAN);
                scenarios.push(RunRow {
                    name: st.scenario.name.clone(),
                    policy: r.policy.key(),
                    policy_label: r.policy.to_string(),
                    tasks: st
                        .tasks
                        .iter()
                        .enumerate()
                        .map(|(i, t)| TaskRow {
                            task: t.name.clone(),
                            priority: t.rank + 1,
                            lengthened_latency_s: at(&r.lengthened_s, i),
                            response_s: at(&r.response_s, i),
                            alone_s: t.alone_s,
                            degree: t.degree,
                            alpha: at(&r.alpha, i),
                            swap_outs: r.outcome.swap_outs.get(i).copied().unwrap_or(0),
                        })
                        .collect(),
                    makespan_s: r.outcome.makespan_ns as f64 / 1e9,
                    swap_outs: r.outcome.swap_outs.iter().sum(),
                    memory_peak_bytes: r.outcome.memory_peak_bytes,
                });
            }
            let s = st.summary(None);
            summaries.push(SummaryRow {
                name: st.scenario.name.clone(),
                figure: st.scenario.paper.map(|p| p.figure),
                highest: task_name(st, s.highest),
                highest_proposed_lengthened_s: s.highest_proposed_s,
                lowest: task_name(st, s.lowest),
                lowest_cut_vs_baseline_pct: s.vs_baseline_pct,
                lowest_cut_vs_mat_pct: s.vs_mat_pct,
                paper_cut_vs_baseline_pct: st.scenario.paper.map(|p| p.vs_baseline_pct),
                paper_cut_vs_mat_pct: st.scenario.paper.map(|p| p.vs_mat_pct),
            });
        }
        SwapDoc {
            scenarios,
            summaries,
            seed,
            profile,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swap::{run_study, scenarios, StudyOptions};

    #[test]
    fn alpha_rules_default_and_dedupe() {
        use AlphaRule::{Fraction, PrintedCeil};
        assert_eq!(alpha_rules(&[], false), vec![Fraction]);
        assert_eq!(alpha_rules(&[], true), vec![Fraction, PrintedCeil]);
        assert_eq!(
            alpha_rules(&[PrintedCeil, Fraction, PrintedCeil], false),
            vec![PrintedCeil, Fraction]
        );
        assert_eq!(alpha_rules(&[PrintedCeil], true), vec![PrintedCeil]);
    }

    #[test]
    fn policies_expand() {
        let all = expand_policies(&[], &[AlphaRule::Fraction], false).unwrap();
        assert_eq!(all, Policy::all(AlphaRule::Fraction));
        let both = [AlphaRule::Fraction, AlphaRule::PrintedCeil];
        assert_eq!(
            expand_policies(&["proposed".into()], &both, false).unwrap(),
            vec![
                Policy::Proposed(AlphaRule::Fraction),
                Policy::Proposed(AlphaRule::PrintedCeil)
            ]
        );
        // Baseline, MaT, Alg. 1 alone, Alg. 2 alone and Proposed under each of the two rules.
        assert_eq!(
            expand_policies(&["mat".into()], &both, true).unwrap().len(),
            7
        );
        assert_eq!(
            expand_policies(&["paper".into()], &[AlphaRule::Fraction], false).unwrap(),
            Policy::paper(AlphaRule::Fraction)
        );
        assert!(expand_policies(&["lru".into()], &both, false).is_err());
    }

    #[test]
    fn the_document_has_a_row_per_scenario_and_policy() {
        let study = run_study(
            &scenarios::builtin("fig6", 1).unwrap(),
            &StudyOptions::default(),
        )
        .unwrap();
        let doc = SwapDoc::new(std::slice::from_ref(&study), 1, None);
        assert_eq!(doc.scenarios.len(), study.runs.len());
        assert_eq!(doc.summaries.len(), 1);
        let json = serde_json::to_value(&doc).unwrap();
        assert!(json.get("profile").is_none());
        assert_eq!(
            json["scenarios"][0]["tasks"].as_array().unwrap().len(),
            study.tasks.len()
        );
    }
}
