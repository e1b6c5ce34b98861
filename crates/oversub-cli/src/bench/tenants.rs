//! `oversub bench tenants`: flags and rendering of the tenants benchmark ([`oversub_lab::tenants`]: several
//! tenants oversubscribing one pool, alone, together under LRU swapping and together under the contention-aware
//! plan, Yang & Chen Alg. 1 and 2).

use std::path::PathBuf;

use clap::Args;
use oversub_lab::tenants::{self as lab, TenantRow, TenantsOptions, TenantsReport as Report};
use oversub_report::{format_bytes, text_table, BarChart, BarSeries};

use crate::error::BoxError;

#[derive(Debug, Args)]
pub struct TenantsArgs {
    #[command(flatten)]
    options: TenantsOptions,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG chart of the slowdowns into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(args: TenantsArgs) -> Result<(), BoxError> {
    let opts = args.options;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_defaults_are_the_labs() {
        let args: TenantsArgs = crate::args::parse_flags(&[]).unwrap();
        assert_eq!(args.options, TenantsOptions::default());
        let args: TenantsArgs =
            crate::args::parse_flags(&["--compute", "5ms,1s", "--priority-windows", "0,4"])
                .unwrap();
        assert_eq!(
            args.options.compute,
            [
                std::time::Duration::from_millis(5),
                std::time::Duration::from_secs(1)
            ]
        );
        assert_eq!(args.options.priority_windows, [0, 4]);
    }
}
