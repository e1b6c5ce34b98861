//! `oversub sim swap`: the paper's Figs. 4-6 (or a scenario file) under Baseline, MaT and the proposed swap space
//! management; lengthened latency per task as tables, JSON and charts, over 20 seeds by default (`seeds`) or for one
//! draw (`--seed`).

mod seeds;

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use oversub_profile::SwapMachine;
use oversub_report::{format_bytes, text_table, BarChart, BarSeries};
use oversub_sim::swap::report::{alpha_rules, expand_policies, ProfileSwap, SwapDoc};
use oversub_sim::swap::scenarios;
use oversub_sim::swap::{
    reduction_pct, run_study, Policy, PrioritySource, Scenario, Study, StudyOptions, Summary,
};
use oversub_tenants::swap::AlphaRule;

use crate::error::BoxError;

/// Simulate contention-aware swap space management (Yang & Chen): Baseline, MaT, each of the proposed policy's
/// two algorithms alone (the ablation) and both, on the paper's scenarios; lengthened latency per task.
///
/// Examples:
///   oversub sim swap                                      # Figs. 4(a)-6, every policy, seeds 1-20
///   oversub sim swap --seeds 50 --json out.json --plot figs   # 50 seeds, both direct-access timings
///   oversub sim swap --seed 3                             # one draw, with each task's figures and the ablation
///   oversub sim swap --scenario fig6 --alpha-rule fraction,printed-ceil
///   oversub sim swap --scenario-file mine.toml --json out.json --plot figs
///   oversub sim swap --profile profile.toml               # this machine's memory and SSD bandwidths
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SwapArgs {
    /// Scenarios, comma separated, or `all` (the default unless --scenario-file is given): fig4a, fig4b, fig5a,
    /// fig5b, fig6.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    scenario: Vec<String>,
    /// A scenario of your own, as TOML (see docs/sim-swap.md); may repeat.
    #[arg(long, value_name = "FILE")]
    scenario_file: Vec<PathBuf>,
    /// Policies, comma separated: `all` (the default: baseline, mat, alg1-priority, alg2-direct, proposed),
    /// `paper` (baseline, mat, proposed), or any of baseline, mat, alg1-priority, alg2-direct, proposed,
    /// proposed-printed-ceil.
    #[arg(long, value_delimiter = ',')]
    policy: Vec<String>,
    /// Alg. 2's swap ratio for the last victim: fraction (default) or printed-ceil (the paper's ⌈SWAP_req/MEM⌉);
    /// both, comma separated, run the proposed policy once with each.
    #[arg(long, value_delimiter = ',', value_name = "RULE")]
    alpha_rule: Vec<String>,
    /// Memory capacity for every scenario (default: each scenario's, 18GB or 240MiB in the paper).
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true, value_parser = crate::args::parse_positive_size_arg)]
    capacity: Option<u64>,
    /// Streaming multiprocessors (default: the number of tasks).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = crate::args::parse_count::<u32>)]
    sms: Option<u32>,
    /// Which tasks Baseline and MaT may swap out: `not-transferring` (default: any task not moving data, also
    /// while it executes) or `between-subtasks` (only in the allocate step between two subtasks).
    #[arg(long, value_name = "RULE")]
    evictable: Option<oversub_sim::swap::Evictable>,
    /// When the proposed policy's victims access their share on the SSD: `serial` (default: in the read and
    /// write-back steps, as the paper's Sec. III places the SSD) or `overlapped` (while the subtask executes).
    /// Without it, a run over seeds reports both.
    #[arg(long, value_name = "TIMING")]
    direct_access: Option<oversub_sim::swap::DirectAccess>,
    /// Platform profile (docs/profile.md) whose [swap] table overrides the machine's memory-controller and SSD
    /// bandwidths in every scenario, built-in or from a file.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Multiply every subtask's compute time by this factor (compute per byte: e.g. Fig. 6's kernels at the
    /// scale where Baseline thrashes, as in the paper); a list, comma separated, runs each scenario once per factor.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "FACTOR",
        allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_number
    )]
    compute_scale: Vec<f64>,
    /// One draw: the synthetic compute times of this seed only, with each task's figures and the ablation (the
    /// same seed gives the same figures). Without it, every figure is reported over --seeds.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Seeds to report every figure over: a count N (seeds 1..N) or a range A-B (default 20: seeds 1-20). Each
    /// scenario runs once per seed, and, unless --direct-access is given, once per direct-access timing.
    #[arg(long, value_name = "N|A-B")]
    seeds: Option<String>,
    /// Where priorities come from (default: the library's, `measured`, Alg. 1 as written).
    #[arg(long, value_enum, default_value_t = PrioritySource::default())]
    priorities: PrioritySource,
    /// Every built-in scenario, every policy, both swap-ratio rules.
    #[arg(long)]
    suite: bool,
    /// Write the lengthened latencies as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write one SVG bar chart per scenario (like the paper's Figs. 4-6) into this folder.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Run the conservation checks on every simulation and say so (always on in debug builds).
    #[arg(long)]
    check: bool,
    /// No progress bar (also OVERSUB_NO_PROGRESS=1).
    #[arg(long)]
    no_progress: bool,
    /// Run the scenarios as Ray tasks on the cluster at ADDRESS, or on a local one without it, through the Python
    /// package (`pip install "oversub[ray]"`); prints each scenario's summary. --json works; --plot, --check,
    /// --alpha-rule, --evictable, --direct-access and --scenario-file do not yet.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "ADDRESS")]
    ray: Option<String>,
}

/// `oversub sim swap --ray`: the same study through `oversub.sweep` (crate::sim::ray).
fn run_on_ray(args: &SwapArgs, address: &str) -> Result<(), BoxError> {
    let unsupported = [
        (args.plot.is_some(), "--plot"),
        (args.check, "--check"),
        (!args.alpha_rule.is_empty(), "--alpha-rule"),
        (args.evictable.is_some(), "--evictable"),
        (args.direct_access.is_some(), "--direct-access"),
    ];
    if let Some((_, flag)) = unsupported.iter().find(|(set, _)| *set) {
        return Err(format!("{flag} is not available with --ray").into());
    }
    let mut py: Vec<String> = Vec::new();
    let named: Vec<&String> = args
        .scenario
        .iter()
        .filter(|s| !s.eq_ignore_ascii_case("all"))
        .collect();
    if !named.is_empty() && !args.suite {
        py.extend([
            "--scenarios".into(),
            named
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ]);
    }
    if !args.scenario_file.is_empty() {
        return Err(
            "--scenario-file is not available with --ray yet; name built-in scenarios".into(),
        );
    }
    let policies = if args.policy.is_empty() {
        "all".to_string()
    } else {
        args.policy.join(",")
    };
    py.extend([
        "--policies".into(),
        policies,
        "--seeds".into(),
        match (&args.seed, &args.seeds) {
            (Some(s), _) => s.to_string(),
            (None, spec) => {
                oversub_sim::swap::parse_seeds(spec.as_deref().unwrap_or(&seeds_default()))?
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }
        },
    ]);
    if let Some(c) = args.capacity {
        py.extend(super::ray::option("capacity", c));
    }
    if let Some(n) = args.sms {
        py.extend(super::ray::option("sms", n));
    }
    if let Some(p) = &args.profile {
        py.extend(super::ray::option("profile", p.display()));
    }
    let priorities = args
        .priorities
        .to_possible_value()
        .map_or_else(String::new, |p| p.get_name().to_string());
    py.extend(super::ray::option("priorities", priorities));
    if args.no_progress {
        py.push("--no-progress".into());
    }
    super::ray::delegate("swap", py, address, args.json.as_deref(), false).map(|_| ())
}

fn parse_rules(args: &SwapArgs) -> Result<Vec<AlphaRule>, BoxError> {
    let named = args
        .alpha_rule
        .iter()
        .map(|r| r.trim().parse().map_err(|e| format!("--alpha-rule: {e}")))
        .collect::<Result<Vec<AlphaRule>, String>>()?;
    Ok(alpha_rules(&named, args.suite))
}

fn parse_policies(args: &SwapArgs, rules: &[AlphaRule]) -> Result<Vec<Policy>, BoxError> {
    Ok(expand_policies(&args.policy, rules, args.suite)?)
}

fn load_profile(args: &SwapArgs) -> Result<Option<ProfileSwap>, BoxError> {
    Ok(args.profile.as_deref().map(ProfileSwap::load).transpose()?)
}

/// The one line saying which machine constants the profile set.
fn describe_profile(p: &ProfileSwap) -> String {
    let SwapMachine {
        memory_bytes_per_s,
        ssd_read_bytes_per_s,
        ssd_write_bytes_per_s,
    } = p.swap;
    let taken: Vec<String> = [
        ("memory controller", memory_bytes_per_s),
        ("SSD read", ssd_read_bytes_per_s),
        ("SSD write", ssd_write_bytes_per_s),
    ]
    .into_iter()
    .filter_map(|(label, v)| v.map(|v| format!("{label} {} MB/s", mb_per_s(v))))
    .collect();
    if taken.is_empty() {
        format!(
            "{}: no [swap] bandwidths, so every scenario keeps its own machine constants",
            p.path
        )
    } else {
        format!(
            "machine constants from {} [swap], in every scenario: {}",
            p.path,
            taken.join(", ")
        )
    }
}

/// MB/s as the scenario reports print them, with decimals only where a slow device needs them.
fn mb_per_s(bytes_per_s: f64) -> String {
    let v = bytes_per_s / 1e6;
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn seeds_default() -> String {
    oversub_sim::swap::seeds::DEFAULT_SEEDS.to_string()
}

fn load_scenarios(
    args: &SwapArgs,
    profile: Option<&ProfileSwap>,
    seed: u64,
) -> Result<Vec<Scenario>, BoxError> {
    let names =
        scenarios::builtin_names(&args.scenario, args.suite, !args.scenario_file.is_empty());
    let mut out = Vec::new();
    for n in &names {
        out.push(scenarios::builtin(n, seed)?);
    }
    for f in &args.scenario_file {
        out.push(scenarios::from_file(f, seed)?);
    }
    if !args.compute_scale.is_empty() {
        let mut scaled = Vec::new();
        for s in &out {
            for &k in &args.compute_scale {
                let mut s = s.clone();
                s.scale_compute(k)?;
                if k != 1.0 {
                    s.name = format!("{}×{k}", s.name);
                }
                scaled.push(s);
            }
        }
        out = scaled;
    }
    for s in &mut out {
        if let Some(c) = args.capacity {
            s.system.capacity_bytes = c;
        }
        if let Some(n) = args.sms {
            s.system.sms = n;
        }
        if let Some(e) = args.evictable {
            s.system.evictable = e;
        }
        if let Some(d) = args.direct_access {
            s.system.direct_access = d;
        }
        if let Some(p) = profile {
            s.system
                .apply_profile(&p.swap)
                .map_err(|e| format!("{}: {e}", p.path))?;
        }
        s.validate()?;
    }
    Ok(out)
}

pub fn run(args: SwapArgs) -> Result<(), BoxError> {
    if let Some(address) = &args.ray {
        return run_on_ray(&args, address);
    }
    let rules = parse_rules(&args)?;
    let policies = parse_policies(&args, &rules)?;
    if args.sms == Some(0) {
        return Err("--sms must be at least 1 (the GPU needs an SM)".into());
    }
    let profile = load_profile(&args)?;
    let options = StudyOptions {
        policies: policies.clone(),
        priorities: args.priorities,
        page_bytes: 4096,
        check: args.check || cfg!(debug_assertions),
    };
    let Some(seed) = args.seed else {
        return run_seeds(&args, profile, &options);
    };
    let scenarios = load_scenarios(&args, profile.as_ref(), seed)?;
    if let Some(p) = &profile {
        eprintln!("{}", describe_profile(p));
    }
    let bar = progress_bar(&args, scenarios.len() as u64);
    println!(
        "one draw: seed {seed} of the synthetic compute times (run without --seed for every figure over {} seeds)\n",
        oversub_sim::swap::seeds::DEFAULT_SEEDS
    );
    let mut studies = Vec::new();
    for s in &scenarios {
        bar.set_message(s.name.clone());
        studies.push(run_study(s, &options).map_err(|e| format!("{}: {e}", s.name))?);
        bar.inc(1);
    }
    bar.finish_and_clear();

    for study in &studies {
        println!("{}", scenario_report(study));
    }
    if studies.len() > 1 || studies.iter().any(|s| s.scenario.paper.is_some()) {
        println!("{}", summary_table(&studies));
    }
    if options.check {
        let runs: usize = studies.iter().map(|s| s.runs.len() + s.tasks.len()).sum();
        println!(
            "conservation checks passed on {runs} runs (a run of several tasks: every arrival order)"
        );
    }
    if let Some(path) = &args.json {
        let doc = SwapDoc::new(&studies, seed, profile);
        write_file(path, &serde_json::to_string_pretty(&doc)?)?;
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for study in &studies {
            let path = dir.join(format!("{}.svg", file_stem(&study.scenario.name)));
            write_file(&path, &chart(study).to_svg())?;
        }
        println!("wrote {} figure(s) to {}", studies.len(), dir.display());
    }
    Ok(())
}

fn progress_bar(args: &SwapArgs, len: u64) -> ProgressBar {
    if args.no_progress || std::env::var_os("OVERSUB_NO_PROGRESS").is_some() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len).with_style(
            ProgressStyle::with_template("{spinner} sim swap [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    }
}

/// Every scenario once per seed (and per direct-access timing unless one is named), aggregated.
fn run_seeds(
    args: &SwapArgs,
    profile: Option<ProfileSwap>,
    options: &StudyOptions,
) -> Result<(), BoxError> {
    use oversub_sim::swap::{run_over_seeds, DirectAccess};
    let seed_list =
        oversub_sim::swap::parse_seeds(args.seeds.as_deref().unwrap_or(&seeds_default()))?;
    let timings = match args.direct_access {
        Some(d) => vec![d],
        None => DirectAccess::both().to_vec(),
    };
    if let Some(p) = &profile {
        eprintln!("{}", describe_profile(p));
    }
    // Scenarios are built here (cheaply, one list per seed) so that file and profile errors keep their wording.
    let mut per_seed = std::collections::HashMap::new();
    for &seed in &seed_list {
        let mut list = Vec::new();
        for s in load_scenarios(args, profile.as_ref(), seed)? {
            for &d in &timings {
                let mut s = s.clone();
                s.system.direct_access = d;
                list.push(s);
            }
        }
        per_seed.insert(seed, list);
    }
    let build = |seed: u64| Ok(per_seed.get(&seed).cloned().unwrap_or_default());
    let bar = progress_bar(args, 0);
    bar.set_message(format!("{} seeds", seed_list.len()));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sets = run_over_seeds(&build, &seed_list, options, threads, &|done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    for set in &sets {
        println!("{}", seeds::scenario_report(set, &seed_list));
    }
    println!("{}", seeds::summary_table(&sets));
    if options.check {
        let runs: usize = sets
            .iter()
            .map(|s| s.per_seed.len() * (s.policies.len() + s.positions.len()))
            .sum();
        println!(
            "conservation checks passed on {runs} runs (a run of several tasks: every arrival order)"
        );
    }
    if let Some(path) = &args.json {
        let doc =
            oversub_sim::swap::seeds::SeedsDoc::new(&seed_list, args.priorities.name(), &sets);
        write_file(path, &serde_json::to_string_pretty(&doc)?)?;
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for set in &sets {
            let stem = if set.direct_access == DirectAccess::default() {
                file_stem(&set.name)
            } else {
                format!(
                    "{}-{}",
                    file_stem(&set.name),
                    seeds::timing_name(set.direct_access)
                )
            };
            write_file(&dir.join(format!("{stem}.svg")), &seeds::svg(set))?;
        }
        println!("wrote {} figure(s) to {}", sets.len(), dir.display());
    }
    Ok(())
}

fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_file(path: &Path, text: &str) -> Result<(), BoxError> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn secs(s: f64) -> String {
    // Fig. 6 is in milliseconds, the synthetic figures in tens of seconds: four significant decimals cover both.
    if s.abs() < 10.0 {
        format!("{s:.4}")
    } else {
        format!("{s:.2}")
    }
}

/// Sizes as the paper writes them: decimal units for the synthetic tasks (6 GB), binary for the Polybench arrays
/// (64 MiB), whichever divides exactly; otherwise binary with decimals.
fn size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1 << 30, "GiB"),
        (1_000_000_000, "GB"),
        (1 << 20, "MiB"),
        (1_000_000, "MB"),
        (1 << 10, "KiB"),
        (1_000, "KB"),
    ];
    UNITS
        .iter()
        .find(|(u, _)| bytes >= *u && bytes % u == 0)
        .map_or_else(
            || format_bytes(bytes),
            |(u, name)| format!("{} {name}", bytes / u),
        )
}

fn pct(p: Option<f64>) -> String {
    p.map_or_else(|| "n/a".into(), |p| format!("{p:.0}%"))
}

/// Per task, in priority order: size, subtasks, time alone, W_i, priority, α per proposed rule, lengthened latency
/// per policy; then swaps and the headline numbers.
fn scenario_report(study: &Study) -> String {
    let s = &study.scenario;
    let sys = &s.system;
    let mut out = format!(
        "{}{}: {}\n",
        s.name,
        s.paper
            .map(|p| format!(" ({})", p.figure))
            .unwrap_or_default(),
        s.description
    );
    out.push_str(&format!(
        "memory {}, demand {}, memory controller {} MB/s, SSD read {} / write {} MB/s, {} SMs, tick {} ms\n",
        size(sys.capacity_bytes),
        size(s.total_demand_bytes()),
        sys.memory_bytes_per_s / 1_000_000,
        sys.ssd_read_bytes_per_s / 1_000_000,
        sys.ssd_write_bytes_per_s / 1_000_000,
        sys.sms,
        sys.tick_ns as f64 / 1e6,
    ));
    let proposed: Vec<_> = study
        .runs
        .iter()
        .filter(|r| r.policy.is_proposed())
        .collect();
    let mut header: Vec<String> = ["task", "MEM", "n", "alone (s)", "W_i", "prio"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    for r in &proposed {
        header.push(if proposed.len() > 1 {
            format!("α {}", rule_name(r.policy))
        } else {
            "α".into()
        });
    }
    for r in &study.runs {
        header.push(format!("{} (s)", r.policy));
    }
    let body: Vec<Vec<String>> = study
        .ranking
        .order
        .iter()
        .map(|&i| {
            let t = &study.tasks[i];
            let mut row = vec![
                t.name.clone(),
                size(t.memory_bytes),
                t.subtasks.to_string(),
                secs(t.alone_s),
                format!("{:.4}", t.degree),
                (t.rank + 1).to_string(),
            ];
            row.extend(proposed.iter().map(|r| format!("{:.3}", r.alpha[i])));
            row.extend(study.runs.iter().map(|r| secs(r.lengthened_s[i])));
            row
        })
        .collect();
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    out.push_str(&text_table(&header_refs, &body));
    let swaps: Vec<String> = study
        .runs
        .iter()
        .map(|r| {
            let n: u32 = r.outcome.swap_outs.iter().sum();
            let extra = if r.outcome.sm_suspensions > 0 {
                format!(
                    ", SM suspended {}x for {}",
                    r.outcome.sm_suspensions,
                    secs(r.outcome.sm_suspended_ns as f64 / 1e9)
                ) + " s"
            } else {
                String::new()
            };
            format!("{} {n}{extra}", r.policy)
        })
        .collect();
    out.push_str(&format!("swap-outs: {}\n", swaps.join("; ")));
    let sum = study.summary(None);
    let name = |i: usize| study.tasks[i].name.as_str();
    if let Some(h) = sum.highest_proposed_s {
        out.push_str(&format!(
            "highest priority {}: lengthened latency under Proposed {} s (paper: none)\n",
            name(sum.highest),
            secs(h)
        ));
    }
    if let Some(p) = sum.lowest_proposed_s {
        let paper = s.paper;
        let mut line = format!(
            "lowest priority {}: lengthened latency under Proposed {} s",
            name(sum.lowest),
            secs(p)
        );
        for (label, value, cut, paper_cut) in [
            (
                "Baseline",
                sum.lowest_baseline_s,
                sum.vs_baseline_pct,
                paper.map(|p| p.vs_baseline_pct),
            ),
            (
                "MaT",
                sum.lowest_mat_s,
                sum.vs_mat_pct,
                paper.map(|p| p.vs_mat_pct),
            ),
        ] {
            if let Some(v) = value {
                line.push_str(&format!(
                    "; {label} {} s, cut {}{}",
                    secs(v),
                    pct(cut),
                    paper_cut
                        .map(|c| format!(" (paper {c:.0}%)"))
                        .unwrap_or_default()
                ));
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(ablation) = ablation_lines(study) {
        out.push_str(&ablation);
    }
    out
}

/// What each half of the proposed policy buys: the top task's and the bottom task's lengthened latency under
/// Alg. 1's priority scheduling alone, Alg. 2's direct access alone and both, beside Baseline and MaT.
fn ablation_lines(study: &Study) -> Option<String> {
    let sum = study.summary(None);
    let base = study.run_of(Policy::Baseline)?;
    let rows: Vec<Vec<String>> = study
        .runs
        .iter()
        .map(|r| {
            let low = r.lengthened_s[sum.lowest];
            vec![
                r.policy.to_string(),
                secs(r.lengthened_s[sum.highest]),
                secs(low),
                pct(reduction_pct(base.lengthened_s[sum.lowest], low)),
                r.outcome.swap_outs.iter().sum::<u32>().to_string(),
            ]
        })
        .collect();
    let mut out = format!(
        "ablation (lengthened latency, s): top task {}, bottom task {}\n",
        study.tasks[sum.highest].name, study.tasks[sum.lowest].name
    );
    out.push_str(&text_table(
        &[
            "policy",
            "top task",
            "bottom task",
            "bottom cut vs Baseline",
            "swap-outs",
        ],
        &rows,
    ));
    Some(out)
}

fn rule_name(p: Policy) -> &'static str {
    match p.rule() {
        Some(AlphaRule::PrintedCeil) => "ceil",
        _ => "frac",
    }
}

/// One line per scenario: the paper's two claims (no lengthened latency for the top task, the bottom task's cut).
fn summary_table(studies: &[Study]) -> String {
    let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), secs);
    let body: Vec<Vec<String>> = studies
        .iter()
        .map(|st| {
            let s: Summary = st.summary(None);
            let paper = st.scenario.paper;
            // The bottom task's cut against Baseline under each half of the proposed policy alone.
            let cut_under = |want: fn(&Policy) -> bool| {
                let base = st.run_of(Policy::Baseline)?.lengthened_s[s.lowest];
                let run = st.runs.iter().find(|r| want(&r.policy))?;
                reduction_pct(base, run.lengthened_s[s.lowest])
            };
            vec![
                st.scenario.name.clone(),
                st.tasks[s.highest].name.clone(),
                opt(s.highest_proposed_s),
                st.tasks[s.lowest].name.clone(),
                opt(s.lowest_baseline_s),
                opt(s.lowest_mat_s),
                opt(s.lowest_proposed_s),
                pct(cut_under(|p| matches!(p, Policy::PriorityOnly))),
                pct(cut_under(|p| matches!(p, Policy::DirectOnly(_)))),
                pct(s.vs_baseline_pct),
                paper.map_or_else(|| "-".into(), |p| format!("{:.0}%", p.vs_baseline_pct)),
                pct(s.vs_mat_pct),
                paper.map_or_else(|| "-".into(), |p| format!("{:.0}%", p.vs_mat_pct)),
            ]
        })
        .collect();
    format!(
        "Summary (lengthened latency in s; highest = the top-priority task under Proposed; for the lowest-priority\n\
         task under each policy, and how much each policy cuts it against Baseline: Alg. 1's priority scheduling\n\
         alone, Alg. 2's direct access alone, both (Proposed); negative means it lengthens it)\n{}",
        text_table(
            &[
                "scenario",
                "highest",
                "Proposed",
                "lowest",
                "Baseline",
                "MaT",
                "Proposed",
                "cut: Alg.1 only",
                "cut: Alg.2 only",
                "cut: Proposed",
                "paper",
                "cut vs MaT",
                "paper",
            ],
            &body,
        )
    )
}

/// The paper's figure for one scenario: tasks in priority order, one bar per policy.
fn chart(study: &Study) -> BarChart {
    let s = &study.scenario;
    let title = match s.paper {
        Some(p) => format!("{} ({}): lengthened latency per task", s.name, p.figure),
        None => format!("{}: lengthened latency per task", s.name),
    };
    let mut c = BarChart::new(title, "lengthened latency (s)");
    c.categories = study
        .ranking
        .order
        .iter()
        .map(|&i| format!("{} (p{})", study.tasks[i].name, study.tasks[i].rank + 1))
        .collect();
    c.series = study
        .runs
        .iter()
        .map(|r| {
            BarSeries::new(
                r.policy.to_string(),
                study
                    .ranking
                    .order
                    .iter()
                    .map(|&i| Some(r.lengthened_s[i]))
                    .collect(),
            )
        })
        .collect();
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SwapArgs,
    }

    fn args(a: &[&str]) -> SwapArgs {
        Cli::try_parse_from(std::iter::once("x").chain(a.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn the_default_priorities_are_the_librarys() {
        // One reading of Alg. 1 everywhere: the command line's default is the library's (and Python's, tested
        // in python/tests/test_studies.py), the literal one.
        let a = args(&[]);
        assert_eq!(a.priorities, StudyOptions::default().priorities);
        assert_eq!(StudyOptions::default().priorities, PrioritySource::Measured);
    }

    #[test]
    fn seeds_are_the_default_and_one_seed_is_one_draw() {
        let a = args(&[]);
        assert_eq!((a.seed, a.seeds.as_deref()), (None, None));
        let a = args(&["--seeds", "5-9"]);
        assert_eq!(
            oversub_sim::swap::parse_seeds(a.seeds.as_deref().unwrap()).unwrap(),
            vec![5, 6, 7, 8, 9]
        );
        assert_eq!(args(&["--seed", "3"]).seed, Some(3));
        // One draw or many, not both.
        assert!(Cli::try_parse_from(["x", "--seed", "1", "--seeds", "3"]).is_err());
        assert_eq!(
            seeds_default(),
            oversub_sim::swap::seeds::DEFAULT_SEEDS.to_string()
        );
    }

    #[test]
    fn policies_and_rules_expand() {
        let a = args(&[]);
        let r = parse_rules(&a).unwrap();
        assert_eq!(
            parse_policies(&a, &r).unwrap(),
            Policy::all(AlphaRule::Fraction)
        );
        let a = args(&[
            "--policy",
            "proposed",
            "--alpha-rule",
            "fraction,printed-ceil",
        ]);
        let r = parse_rules(&a).unwrap();
        assert_eq!(
            parse_policies(&a, &r).unwrap(),
            vec![
                Policy::Proposed(AlphaRule::Fraction),
                Policy::Proposed(AlphaRule::PrintedCeil)
            ]
        );
        let a = args(&["--suite"]);
        let r = parse_rules(&a).unwrap();
        // Baseline, MaT, Alg. 1 alone, Alg. 2 alone and Proposed under each of the two rules.
        assert_eq!(parse_policies(&a, &r).unwrap().len(), 7);
        assert_eq!(load_scenarios(&a, None, 1).unwrap().len(), 5);
        let a = args(&["--alpha-rule", "round"]);
        assert!(parse_rules(&a).is_err());
        let a = args(&["--policy", "lru"]);
        assert!(parse_policies(&a, &[AlphaRule::Fraction]).is_err());
    }
}
