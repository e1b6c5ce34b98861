//! `oversub bench paging --device cuda`: renders the GPU run of `oversub_lab::paging::cuda` (what it measures is
//! described there): the header line, the tables, the JSON and the plots.

use std::collections::BTreeMap;
use std::path::Path;

use oversub_lab::paging::cuda::{CudaPagingReport, CudaRatio, MAIN_PLOT, NAMES};
use oversub_report::{format_bytes, text_table, Summary};

use super::paging::{pager_io_line, summary_table, write_box_plots, write_json, PagingArgs};
use crate::error::BoxError;

/// Prints a GPU run's tables and writes its JSON and plots.
pub(super) fn render(args: &PagingArgs, report: &CudaPagingReport) -> Result<(), BoxError> {
    println!(
        "{} on {} (device {}, driver {}); transfer path: {}",
        format_bytes(report.size_bytes),
        report.device_name,
        report.gpu_ordinal,
        report.driver_version_text,
        report.transfer_path
    );
    print_tables(&report.results, &report.rates_gb_per_s, &report.ratios);
    if let Some(why) = &report.unified_memory.skipped {
        println!("unified_memory: not measured ({why})");
    }
    println!("pager I/O: {}", pager_io_line(&report.pager_io));
    if let Some(json) = &args.json {
        write_json(json, report)?;
    }
    if let Some(plot) = &args.plot {
        write_plots(plot, args.options.size, &report.samples_s)?;
    }
    Ok(())
}

fn print_tables(
    results: &BTreeMap<&'static str, Summary>,
    rates: &BTreeMap<&'static str, f64>,
    ratios: &[CudaRatio],
) {
    let table = summary_table(&NAMES, results, |name, _| {
        rates
            .get(name)
            .filter(|r| r.is_finite())
            .map_or_else(|| "-".to_string(), |r| format!("{r:.2} GB/s"))
    });
    println!("{table}");
    let rows: Vec<Vec<String>> = ratios
        .iter()
        .map(|r| {
            vec![
                r.name.to_string(),
                format!("{:.3}", r.value),
                r.target.unwrap_or("-").to_string(),
                match r.met {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "-",
                }
                .to_string(),
            ]
        })
        .collect();
    println!("{}", text_table(&["ratio", "value", "target", ""], &rows));
}

fn write_plots(
    path: &Path,
    size: u64,
    samples: &BTreeMap<&'static str, Vec<f64>>,
) -> Result<(), BoxError> {
    let titles = [
        format!("Time to page {} in or out of a GPU", format_bytes(size)),
        format!("Time inside the async calls, {} (GPU)", format_bytes(size)),
    ];
    write_box_plots(path, samples, (&NAMES, MAIN_PLOT), titles, true)
}
