//! `oversub bench tenants`: flags and rendering of the tenants benchmark ([`oversub_lab::tenants`]: several
//! tenants oversubscribing one pool, alone, together under LRU swapping and together under the contention-aware
//! plan, Yang & Chen Alg. 1 and 2).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use oversub_core::AlphaRule;
use oversub_lab::tenants::{
    self as lab, Priorities, TenantRow, TenantsOptions, TenantsReport as Report,
};
use oversub_report::{format_bytes, text_table, BarChart, BarSeries};

use super::paging::EngineArg;
use crate::error::BoxError;

/// A comma-separated list of durations (one clap value, not many).
#[derive(Debug, Clone)]
pub struct Durations(Vec<Duration>);

fn parse_duration_list(s: &str) -> Result<Durations, String> {
    s.split(',')
        .map(|part| oversub_arbiter::parse_duration(part.trim()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()
        .map(Durations)
}

#[derive(Debug, Args)]
pub struct TenantsArgs {
    /// Number of tenants.
    #[arg(long, default_value_t = 3, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    tenants: usize,
    /// Memory each tenant needs (its buffers together).
    #[arg(
        long,
        default_value = "256MiB",
        allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg
    )]
    demand: u64,
    /// Size of each buffer (one subtask's data).
    #[arg(
        long,
        default_value = "16MiB",
        allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg
    )]
    buffer: u64,
    /// Total demand over pool capacity (1.3: the tenants need 30% more than the pool holds).
    #[arg(long, default_value_t = 1.3, allow_hyphen_values = true, value_parser = crate::args::parse_positive_number)]
    oversubscription: f64,
    /// Kernel time per subtask, one per tenant, cycled (e.g. `10ms,20ms,40ms`).
    #[arg(long, default_value = "10ms,20ms,40ms", value_parser = parse_duration_list)]
    compute: Durations,
    /// Passes of each tenant over its buffers.
    #[arg(long, default_value_t = 3, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    rounds: usize,
    /// Runs of each condition; medians are reported.
    #[arg(long, default_value_t = 3, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    samples: usize,
    /// Where tenant priorities come from.
    #[arg(long, value_enum, default_value_t = Priorities::Measured)]
    priorities: Priorities,
    /// Swap-ratio rule of Alg. 2: `fraction` (default) or `printed-ceil`.
    #[arg(long, default_value = "fraction")]
    alpha_rule: AlphaRule,
    /// Directory for the swap files (default: the temp directory).
    #[arg(long)]
    store_dir: Option<PathBuf>,
    /// I/O engine.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    engine: EngineArg,
    /// Small sizes and one sample, for a quick look.
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG chart of the slowdowns into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Skip the cold-start experiment (FIFO against priority I/O).
    #[arg(long)]
    no_priority_io: bool,
    /// Windows of the priority queue to measure in the cold-start experiment (requests let into the engine at
    /// once; 0 means the engine's queue depth), comma-separated.
    #[arg(
        long,
        default_value = "0",
        value_delimiter = ',',
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<usize>
    )]
    priority_windows: Vec<usize>,
}

pub fn run(args: TenantsArgs) -> Result<(), BoxError> {
    let opts = TenantsOptions {
        tenants: args.tenants,
        demand: args.demand,
        buffer: args.buffer,
        oversubscription: args.oversubscription,
        compute: args.compute.0,
        rounds: args.rounds,
        samples: args.samples,
        priorities: args.priorities,
        alpha_rule: args.alpha_rule,
        store_dir: args.store_dir,
        engine: args.engine.into(),
        quick: args.quick,
        no_priority_io: args.no_priority_io,
        priority_windows: args.priority_windows,
    };
    let bar = crate::progress_bar(lab::steps(&opts), "tenants", "", false);
    let report = lab::run(&opts, &|stage: &str| {
        bar.inc(1);
        bar.set_message(stage.to_string());
    });
    bar.finish_and_clear();
    let report = report?;
    print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if let Some(dir) = &args.plot {
        write_plot(&report, dir)?;
    }
    Ok(())
}

fn print_report(r: &Report) {
    println!(
        "{} tenants x {} in {} buffers, pool {} ({:.2}x oversubscribed), {} rounds, median of {}; priorities {}",
        r.tenants,
        format_bytes(r.demand_bytes),
        format_bytes(r.buffer_bytes),
        format_bytes(r.capacity_bytes),
        r.oversubscription,
        r.rounds,
        r.samples,
        r.priorities
    );
    let mut rows: Vec<&TenantRow> = r.rows.iter().collect();
    rows.sort_by_key(|t| t.rank);
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|t| {
            vec![
                t.tenant.clone(),
                format!("{:.0}", t.compute_ms),
                format!("{:.4}", t.contention_degree),
                t.rank.to_string(),
                format!("{:.2}", t.alpha),
                format_bytes(t.resident_limit_bytes),
                format!("{:.3}", t.alone_s),
                format!("{:.3} ({:.2}x)", t.lru_s, t.slowdown_lru),
                format!("{:.3} ({:.2}x)", t.planned_s, t.slowdown_planned),
                format_bytes(t.lru_paged_bytes),
                format_bytes(t.planned_direct_bytes),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &[
                "tenant",
                "compute_ms",
                "W_i",
                "rank",
                "alpha",
                "resident limit",
                "alone_s",
                "LRU_s (slowdown)",
                "planned_s (slowdown)",
                "LRU paged",
                "planned direct",
            ],
            &table
        )
    );
    println!(
        "highest-priority tenant: slowdown {:.3}x planned (target <= {:.2}x: {}), {:.3}x under LRU",
        r.highest_priority_slowdown_planned,
        r.target_highest_priority_slowdown,
        if r.target_met { "met" } else { "missed" },
        r.highest_priority_slowdown_lru
    );
    if let Some(p) = &r.priority_io {
        println!(
            "\ncold start (every tenant's buffers paged out at the start, paged in on first use), median of {}:",
            p.fifo_s.len()
        );
        let mut head = vec!["tenant".to_string(), "FIFO I/O s".to_string()];
        head.extend(
            p.priority
                .iter()
                .map(|w| format!("priority, window {} s", w.window)),
        );
        let rows: Vec<Vec<String>> = p
            .all_tenants_fifo_s
            .iter()
            .enumerate()
            .map(|(k, (name, fifo))| {
                let mut row = vec![name.clone(), format!("{fifo:.3}")];
                row.extend(p.priority.iter().map(|w| {
                    let s = w.all_tenants_s[k].1;
                    format!("{s:.3} ({:.2}x)", s / fifo)
                }));
                row
            })
            .collect();
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        print!("{}", text_table(&head, &rows));
        println!(
            "top tenant {}: alone (cold) {:.3} s; slowdown with FIFO I/O {:.3}x ({:.3}-{:.3})",
            p.tenant,
            oversub_base::stats::median_or_nan(&p.alone_cold_s),
            p.slowdown_fifo,
            p.slowdown_fifo_range.0,
            p.slowdown_fifo_range.1,
        );
        for w in &p.priority {
            println!(
                "  with priority I/O, window {}: {:.3}x ({:.3}-{:.3})",
                w.window, w.slowdown, w.slowdown_range.0, w.slowdown_range.1
            );
        }
        println!(
            "  target <= {:.2}x with priority I/O: {}",
            p.target_slowdown,
            if p.target_met { "met" } else { "missed" }
        );
    }
}

fn write_plot(r: &Report, dir: &std::path::Path) -> Result<(), BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--plot {}: {e}", dir.display()))?;
    let mut rows: Vec<&TenantRow> = r.rows.iter().collect();
    rows.sort_by_key(|t| t.rank);
    let mut chart = BarChart::new(
        format!(
            "{} tenants, {:.2}x oversubscribed: slowdown against running alone",
            r.tenants, r.oversubscription
        ),
        "response time / alone",
    );
    chart.categories = rows
        .iter()
        .map(|t| format!("{} (rank {})", t.tenant, t.rank))
        .collect();
    chart.series = vec![
        BarSeries::new(
            "LRU swapping",
            rows.iter().map(|t| Some(t.slowdown_lru)).collect(),
        ),
        BarSeries::new(
            "planned (Alg. 1 + 2)",
            rows.iter().map(|t| Some(t.slowdown_planned)).collect(),
        ),
    ];
    chart.reference = Some(1.0);
    let path = dir.join("tenants-slowdown.svg");
    chart
        .write_svg(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}
