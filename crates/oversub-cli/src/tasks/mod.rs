//! `oversub tasks`: flags and rendering of the cgroup case study ([`oversub_lab::tasks`]: Yang & Chen, Sec. V-C,
//! on Linux memory cgroups; see docs/tasks.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use oversub_lab::tasks::{
    self as lab, Builtin, Priorities, TaskReport, TasksOptions, TasksReport as Report,
    WorkerCommand,
};
use oversub_report::{format_bytes, text_table};
use oversub_tenants::swap::AlphaRule;

use crate::error::BoxError;

mod worker;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TasksArgs {
    #[command(subcommand)]
    command: Option<TasksCommand>,

    /// Print which memory cgroup controller was found and whether this process may use it, then exit.
    #[arg(long)]
    detect: bool,

    #[command(flatten)]
    options: TasksOptions,

    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// The built-in tasks' bodies, run inside their cgroups.
    #[command(subcommand, hide = true)]
    Worker(worker::WorkerCommand),
}

pub fn run(args: TasksArgs) -> Result<(), BoxError> {
    if let Some(TasksCommand::Worker(cmd)) = args.command {
        return worker::run(cmd);
    }
    if args.detect {
        return detect();
    }
    experiment_cmd(args)
}

fn detect() -> Result<(), BoxError> {
    let (controller, access) = lab::detect()?;
    println!("{}", controller.describe());
    match access {
        Ok(()) => {
            println!(
                "usable: yes (created, limited and removed a probe group under {})",
                controller.dir.display()
            );
            Ok(())
        }
        Err(e) => {
            println!("usable: no");
            Err(e.into())
        }
    }
}

fn experiment_cmd(args: TasksArgs) -> Result<(), BoxError> {
    let builtin = args.options.config.is_none() && args.options.tasks.is_empty();
    let worker = if builtin {
        // The built-in tasks are this binary again, as the hidden `tasks worker`.
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the oversub binary for the built-in tasks: {e}"))?;
        Some(WorkerCommand {
            program: exe,
            args: vec!["tasks".into(), "worker".into()],
        })
    } else {
        None
    };
    let opts = TasksOptions {
        worker,
        ..args.options
    };
    // Bad input is refused before any cgroup is touched, and before the JSON's directory is looked at.
    opts.check()?;
    if let Some(path) = &args.json {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if parent.is_some_and(|p| !p.is_dir()) {
            return Err(format!(
                "--json {}: the directory it would go in does not exist",
                path.display()
            )
            .into());
        }
    }
    let bar = crate::progress_bar(lab::steps(&opts)?, "tasks", " runs", false);
    let report = lab::run(&opts, &|stage: &str| {
        bar.inc(1);
        bar.set_message(stage.to_string());
    });
    bar.finish_and_clear();
    let report = report?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    print!("{}", render(&report));
    Ok(())
}

fn secs(s: f64) -> String {
    format!("{s:.2} s")
}

fn signed(s: f64, pct: f64) -> String {
    format!("{s:+.2} s ({pct:+.1}%)")
}

/// Whether Alg. 1's ranking stands above the run-to-run noise: adjacent tasks' W_i ranges (over the repetitions) do
/// not overlap.
fn separation(r: &Report) -> String {
    let mut by_rank: Vec<&TaskReport> = r.tasks.iter().collect();
    by_rank.sort_by_key(|t| t.priority);
    let mut overlaps = Vec::new();
    for pair in by_rank.windows(2) {
        if let (Some((lo, _)), Some((_, hi))) = (pair[0].degree_range, pair[1].degree_range) {
            if lo <= hi {
                overlaps.push(format!("{} and {}", pair[0].name, pair[1].name));
            }
        }
    }
    if r.repeat < 3 {
        return format!(
            "W_i ranges over {} repetition(s); use --repeat 3 or more to tell the ranking from noise\n",
            r.repeat
        );
    }
    if overlaps.is_empty() {
        "W_i separated beyond the run-to-run spread: every task's lowest W_i is above the next task's highest\n"
            .to_string()
    } else {
        format!(
            "W_i NOT separated beyond the run-to-run spread: the ranges of {} overlap, so noise may have decided \
             their order\n",
            overlaps.join(", ")
        )
    }
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    let source = match r.builtin {
        Some(Builtin::FileIo) => format!(
            "built-in file-io: {} tasks, each writes a {} file and reads it back {}×",
            r.tasks.len(),
            format_bytes(r.size_bytes.unwrap_or(0)),
            r.passes.unwrap_or(0)
        ),
        Some(Builtin::Mixed) => format!(
            "built-in mixed: stream ({} read 4×, no compute), compute ({} read 3×, 3 hash rounds per byte), bulk \
             ({} read 2×, 1 hash round)",
            format_bytes(r.size_bytes.unwrap_or(0)),
            format_bytes(r.size_bytes.unwrap_or(0) / 2),
            format_bytes(r.size_bytes.unwrap_or(0) * 3 / 2)
        ),
        None => format!("{} tasks", r.tasks.len()),
    };
    out.push_str(&format!("oversub tasks: {source}\n"));
    out.push_str(&format!(
        "memory: {} of demand on {} of emulated memory ({}limit of the run's {} group, {:.0}% oversubscribed); \
         swap {}\n",
        format_bytes(r.total_demand_bytes),
        format_bytes(r.capacity_bytes),
        if r.capacity_default { "default: demand / 1.3; " } else { "" },
        r.controller.version,
        (r.total_demand_bytes as f64 / r.capacity_bytes as f64 - 1.0) * 100.0,
        if r.swap_capped {
            "capped by the limits"
        } else {
            "not accounted (no swap limit file): limits cap memory only"
        }
    ));
    out.push_str(&match r.priorities {
        Priorities::Measured => format!(
            "priorities: measured (Alg. 1), each task alone then all together under the shared limit, median of {}\n",
            r.repeat
        ),
        Priorities::Given => "priorities: given (the order listed)\n".to_string(),
    });
    let victims: Vec<String> = r
        .tasks
        .iter()
        .filter(|t| t.victim)
        .map(|t| {
            format!(
                "{} (α = {:.3}, keeps {})",
                t.name,
                t.alpha,
                format_bytes(t.planned_resident_bytes)
            )
        })
        .collect();
    out.push_str(&format!(
        "plan (Alg. 2, rule {}): {} must leave memory; victims: {}\n",
        match r.alpha_rule {
            AlphaRule::Fraction => "fraction",
            AlphaRule::PrintedCeil => "printed-ceil",
        },
        format_bytes(r.plan.swap_required_bytes),
        if victims.is_empty() {
            "none".to_string()
        } else {
            victims.join(", ")
        }
    ));
    if r.floor_applied {
        out.push_str(&format!(
            "note: a victim's limit was raised to the floor --min-limit {} (a process cannot run in less)\n",
            format_bytes(r.min_limit_bytes)
        ));
    }
    out.push('\n');

    let measured = r.priorities == Priorities::Measured;
    let mut header = vec!["task", "W_i", "priority", "demand", "limit"];
    if measured {
        header.extend(["alone", "together"]);
    }
    header.extend(["default", "planned", "change"]);
    let mut rows: Vec<Vec<String>> = r
        .tasks
        .iter()
        .map(|t| {
            let mut row = vec![
                t.name.clone(),
                match (t.degree, t.degree_range) {
                    (Some(w), Some((lo, hi))) => format!("{w:.3} ({lo:.3}-{hi:.3})"),
                    (Some(w), None) => format!("{w:.3}"),
                    _ => "-".to_string(),
                },
                t.priority.to_string(),
                format_bytes(t.demand_bytes),
                t.limit_bytes.map_or_else(|| "-".to_string(), format_bytes),
            ];
            if measured {
                row.push(t.alone_s.map_or_else(|| "-".to_string(), secs));
                row.push(t.together_s.map_or_else(|| "-".to_string(), secs));
            }
            row.extend([
                secs(t.default_s),
                secs(t.planned_s),
                signed(t.change_s, t.change_pct),
            ]);
            row
        })
        .collect();
    let mut total_row = vec![
        "total".to_string(),
        String::new(),
        String::new(),
        format_bytes(r.total_demand_bytes),
        String::new(),
    ];
    if measured {
        let alone: f64 = r.tasks.iter().filter_map(|t| t.alone_s).sum();
        let together: f64 = r.tasks.iter().filter_map(|t| t.together_s).sum();
        total_row.extend([secs(alone), secs(together)]);
    }
    total_row.extend([
        secs(r.total.default_s),
        secs(r.total.planned_s),
        signed(r.total.change_s, r.total.change_pct),
    ]);
    rows.push(total_row);
    out.push_str(&text_table(&header, &rows));
    if measured {
        out.push_str(&separation(r));
    }
    if let (Some(d), Some(p), Some(c)) = (
        r.total.lengthened_default_s,
        r.total.lengthened_planned_s,
        r.total.lengthened_change_pct,
    ) {
        out.push_str(&format!(
            "lengthened latency (Σ response − alone): default {}, planned {} ({c:+.1}%)\n",
            secs(d),
            secs(p)
        ));
    }
    if r.total.per_repetition_change_pct.len() > 1 {
        let changes: Vec<String> = r
            .total
            .per_repetition_change_pct
            .iter()
            .map(|c| format!("{c:+.1}%"))
            .collect();
        out.push_str(&format!(
            "total change within each repetition (planned against the default run next to it): {}\n",
            changes.join(", ")
        ));
    }
    out.push('\n');
    let bytes = |p: Option<u64>| p.map_or_else(|| "-".to_string(), format_bytes);
    let pages = |p: Option<u64>| bytes(p.map(|n| n.saturating_mul(lab::PAGE)));
    let memory_rows: Vec<Vec<String>> = r
        .tasks
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                bytes(t.default_peak_bytes),
                bytes(t.planned_peak_bytes),
                pages(t.default_refaults),
                pages(t.planned_refaults),
            ]
        })
        .collect();
    out.push_str(&text_table(
        &[
            "task",
            "peak default",
            "peak planned",
            "refaulted default",
            "refaulted planned",
        ],
        &memory_rows,
    ));
    out.push_str(
        "peak: most memory charged to the task's group; refaulted: file pages evicted and read back \
         (workingset_refault_file × 4 KiB), the page cache's thrashing\n",
    );
    out.push_str(&format!(
        "change = planned − default; response times are spawn to exit; {} runs in {}\n",
        r.warmup
            + if measured {
                r.repeat * (r.tasks.len() as u32 + 3)
            } else {
                r.repeat * 2
            },
        secs(r.wall_s)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_defaults_are_the_labs() {
        let args: TasksArgs = crate::args::parse_flags(&[]).unwrap();
        assert_eq!(args.options, TasksOptions::default());
        assert!(!args.detect && args.json.is_none() && args.command.is_none());
        let args: TasksArgs =
            crate::args::parse_flags(&["--task", "a:1GiB:true", "--alpha-rule", "printed-ceil"])
                .unwrap();
        assert_eq!(args.options.tasks.len(), 1);
        assert_eq!(args.options.alpha_rule, AlphaRule::PrintedCeil);
    }
}
