//! The platform profile: the probes `oversub probe` runs ([`measure`], over a [`ProbePlan`]) and the profile
//! assembled from their results ([`to_profile`]), which `plan`, `run`, `sim uvm` and `sim swap` read.

use std::path::PathBuf;
use std::time::Instant;

use oversub_probe::{btree, copy, fault, gpu, shootdown, storage, system, tlb, Tick};
use oversub_profile::{Cpu, Meta, Profile, Storage, StoragePoint, SwapMachine, Uvm, VERSION};
use serde::Serialize;

use crate::LabError;

/// One probe (a value of `oversub probe --only`/`--skip`, hence the `clap` derive behind the feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ProbeName {
    /// TLB-miss latency (64 B vs 4 KiB stride), with huge pages, and against misses in flight.
    Tlb,
    /// Page-fault latency and throughput against concurrency: soft faults and userfaultfd.
    Faults,
    /// TLB shootdowns by mprotect and munmap.
    Shootdown,
    /// Sorted vs unsorted B+-tree lookups on 4 KiB and 2 MiB pages.
    Btree,
    /// memcpy bandwidth.
    Copy,
    /// Direct read/write bandwidth of the store by block size and queue depth.
    Storage,
    /// GPU copies, managed-memory faults, prefetch, virtual-memory map/unmap, preemption (needs CUDA).
    Gpu,
}

/// Every probe, in the order they run.
pub const ALL_PROBES: [ProbeName; 7] = [
    ProbeName::Tlb,
    ProbeName::Faults,
    ProbeName::Shootdown,
    ProbeName::Btree,
    ProbeName::Copy,
    ProbeName::Storage,
    ProbeName::Gpu,
];

/// Everything measured (the JSON of `oversub probe --json`).
#[derive(Debug, Default, Serialize)]
pub struct ProbeResults {
    /// The machine.
    pub system: Option<system::SystemInfo>,
    /// Whether the quick plan ran.
    pub quick: bool,
    /// Seconds the probes took.
    pub wall_s: f64,
    /// TLB misses.
    pub tlb: Option<tlb::TlbResults>,
    /// Page faults.
    pub faults: Option<fault::FaultResults>,
    /// TLB shootdowns.
    pub shootdown: Option<Vec<shootdown::ShootdownPoint>>,
    /// B+-tree lookups.
    pub btree: Option<btree::BtreeResults>,
    /// memcpy bandwidth.
    pub copy: Option<copy::CopyResult>,
    /// The store's grid.
    pub storage: Option<storage::StorageResults>,
    /// The GPU.
    pub gpu: Option<gpu::GpuResults>,
    /// Probes that could not run, with why.
    pub skipped: Vec<(String, String)>,
}

/// Which probes to run and the flags that override the quick or full plan: the fields are the flags of `oversub
/// probe` (its output flags aside), which flattens this struct; [`Default`] gives the CLI's defaults.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ProbeOptions {
    /// Smaller sizes and fewer points: under a minute.
    #[cfg_attr(feature = "clap", arg(long))]
    pub quick: bool,
    /// Only these probes (comma-separated).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_enum, value_delimiter = ',', value_name = "PROBES")
    )]
    pub only: Vec<ProbeName>,
    /// Skip these probes (comma-separated).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_enum, value_delimiter = ',', value_name = "PROBES")
    )]
    pub skip: Vec<ProbeName>,
    /// Directory of the storage probe's test file: put it where the store will be (default: the system's
    /// temporary directory).
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub dir: Option<PathBuf>,
    /// Size of the storage probe's test file (default 1GiB, 256MiB with --quick).
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub file_size: Option<u64>,
    /// Block sizes of the storage grid (comma-separated, e.g. 4KiB,1MiB; default 4KiB to 4MiB).
    #[cfg_attr(feature = "clap", arg(long, value_delimiter = ',', allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg, value_name = "SIZES"))]
    pub block_sizes: Vec<u64>,
    /// Queue depths of the storage grid (comma-separated; default 1 to 64, 1 and 32 with --quick).
    #[cfg_attr(feature = "clap", arg(long, value_delimiter = ',', value_name = "DEPTHS", allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub queue_depths: Vec<usize>,
    /// Seconds per storage point and direction (default 1, 0.4 with --quick).
    #[cfg_attr(feature = "clap", arg(long, value_name = "SECONDS", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_number))]
    pub storage_seconds: Option<f64>,
    /// Keep the storage probe's test file (to run fio on the same file) and print its path.
    #[cfg_attr(feature = "clap", arg(long))]
    pub keep_file: bool,
    /// I/O engine of the storage probe.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = oversub_io::EngineChoice::Auto))]
    pub engine: oversub_io::EngineChoice,
}

impl ProbeOptions {
    /// The probes to run: `only` (all when empty) less `skip`, in [`ALL_PROBES`]' order; refused when none is left.
    pub fn selected(&self) -> Result<Vec<ProbeName>, LabError> {
        let selected: Vec<ProbeName> = ALL_PROBES
            .iter()
            .copied()
            .filter(|p| self.only.is_empty() || self.only.contains(p))
            .filter(|p| !self.skip.contains(p))
            .collect();
        if selected.is_empty() {
            return Err(LabError::InvalidOption(
                "--only and --skip leave no probe to run".into(),
            ));
        }
        Ok(selected)
    }

    /// The plan: the quick or full one, with these overrides.
    pub fn plan(&self) -> ProbePlan {
        let dir = self.dir.clone().unwrap_or_else(std::env::temp_dir);
        let mut p = ProbePlan::new(self.quick, dir);
        if let Some(s) = self.file_size {
            p.storage.file_bytes = s;
        }
        if let Some(t) = self.storage_seconds {
            p.storage.seconds_per_point = t;
        }
        if !self.block_sizes.is_empty() {
            p.storage.block_bytes = self.block_sizes.iter().map(|&b| b as usize).collect();
        }
        if !self.queue_depths.is_empty() {
            p.storage.queue_depths = self.queue_depths.clone();
        }
        p.storage.keep_file = self.keep_file;
        p.storage.engine = self.engine;
        p
    }
}

/// The sizes and points each probe measures.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    /// Whether this is the quick plan (under a minute).
    pub quick: bool,
    /// The TLB probe's options.
    pub tlb: tlb::TlbOptions,
    /// Faults per point.
    pub faults: usize,
    /// Faulting threads of each point.
    pub fault_threads: Vec<usize>,
    /// Shootdowns per point.
    pub shootdown_iterations: usize,
    /// Pages of each shootdown's range.
    pub shootdown_range_pages: usize,
    /// The B+-tree probe's options.
    pub btree: btree::BtreeOptions,
    /// Bytes of each memcpy.
    pub copy_bytes: usize,
    /// memcpy repeats.
    pub copy_repeats: usize,
    /// The storage probe's options (its directory, grid and engine).
    pub storage: storage::StorageOptions,
    /// The GPU probe's options.
    pub gpu: gpu::GpuOptions,
}

impl ProbePlan {
    /// The quick plan (`oversub probe --quick`) or the full one, the store's file in `dir`.
    pub fn new(quick: bool, dir: PathBuf) -> ProbePlan {
        if quick {
            ProbePlan {
                quick,
                tlb: tlb::TlbOptions::quick(),
                faults: 64_000,
                fault_threads: vec![1, 4, 16, 64],
                shootdown_iterations: 200,
                shootdown_range_pages: 512,
                btree: btree::BtreeOptions::quick(),
                copy_bytes: 64 << 20,
                copy_repeats: 5,
                storage: storage::StorageOptions::quick(dir),
                gpu: gpu::GpuOptions::quick(),
            }
        } else {
            ProbePlan {
                quick,
                tlb: tlb::TlbOptions::full(),
                // The paper's 512,000 faults per point.
                faults: 512_000,
                fault_threads: vec![1, 2, 4, 8, 16, 32, 64],
                shootdown_iterations: 2000,
                shootdown_range_pages: 512,
                btree: btree::BtreeOptions::full(),
                copy_bytes: 256 << 20,
                copy_repeats: 10,
                storage: storage::StorageOptions::full(dir),
                gpu: gpu::GpuOptions::full(),
            }
        }
    }

    /// About how many times the probes `selected` call their tick (for a progress bar's length).
    pub fn steps(&self, selected: &[ProbeName], sys: &system::SystemInfo) -> u64 {
        let plan = self;
        selected
            .iter()
            .map(|p| match p {
                ProbeName::Tlb => {
                    1 + u64::from(sys.thp_usable()) + plan.tlb.concurrency.len() as u64
                }
                ProbeName::Faults => 2 * plan.fault_threads.len() as u64,
                ProbeName::Shootdown => 8,
                ProbeName::Btree => 1 + u64::from(sys.thp_usable()),
                ProbeName::Copy => 1,
                ProbeName::Storage => {
                    // The grid, and the untimed pass that writes the file first.
                    (plan.storage.block_bytes.len() * plan.storage.queue_depths.len()) as u64 + 1
                }
                ProbeName::Gpu => 5,
            })
            .sum()
    }
}

/// Runs the probes `selected` (in [`ALL_PROBES`]' order as given) over `plan` on this machine, `sys`; a GPU probe
/// without a driver is listed in `skipped` rather than failing the run.
pub fn measure(
    plan: &ProbePlan,
    selected: &[ProbeName],
    sys: &system::SystemInfo,
    tick: Tick<'_>,
) -> Result<ProbeResults, LabError> {
    let wall = Instant::now();
    let mut report = ProbeResults {
        system: Some(sys.clone()),
        quick: plan.quick,
        ..ProbeResults::default()
    };
    for p in selected {
        match p {
            ProbeName::Tlb => report.tlb = Some(tlb::measure(&plan.tlb, sys.thp_usable(), tick)?),
            ProbeName::Faults => {
                report.faults = Some(fault::measure(plan.faults, &plan.fault_threads, tick)?)
            }
            ProbeName::Shootdown => {
                report.shootdown = Some(shootdown::measure(
                    plan.shootdown_iterations,
                    plan.shootdown_range_pages,
                    tick,
                )?)
            }
            ProbeName::Btree => {
                report.btree = Some(btree::measure(&plan.btree, sys.thp_usable(), tick)?)
            }
            ProbeName::Copy => {
                tick("memcpy bandwidth");
                report.copy = Some(copy::measure(plan.copy_bytes, plan.copy_repeats)?)
            }
            ProbeName::Storage => report.storage = Some(storage::measure(&plan.storage, tick)?),
            ProbeName::Gpu => match gpu::detect() {
                Ok(()) => report.gpu = Some(gpu::measure(&plan.gpu, tick)?),
                Err(e) => report.skipped.push(("gpu".into(), e.to_string())),
            },
        }
    }
    report.wall_s = wall.elapsed().as_secs_f64();
    Ok(report)
}

/// A figure the profile can hold: positive and finite (the profile refuses anything else).
fn pos(x: f64) -> Option<f64> {
    (x.is_finite() && x > 0.0).then_some(x)
}

/// The platform profile from what was measured; the notes say what could not go in (and why).
pub fn to_profile(r: &ProbeResults, plan: &ProbePlan) -> (Profile, Vec<String>) {
    let detected;
    let sys = match &r.system {
        Some(s) => s,
        None => {
            detected = system::SystemInfo::detect();
            &detected
        }
    };
    let mut notes = Vec::new();
    let meta = Meta {
        version: VERSION,
        created_by: Some(format!("oversub {} probe", env!("CARGO_PKG_VERSION"))),
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs()),
        host: sys.host.clone(),
        kernel: sys.kernel.clone(),
        cpu_model: sys.cpu_model.clone(),
        cpus: Some(sys.cpus),
        quick: r.quick,
    };
    let uffd_1 = r
        .faults
        .as_ref()
        .and_then(|f| f.uffd.iter().find(|p| p.threads == 1))
        .and_then(|p| pos(p.mean_latency_s));
    let cpu = match (&r.tlb, &r.faults, &r.copy) {
        (Some(t), Some(f), Some(c)) => {
            let latency = t.base.latency_s.and_then(pos);
            let fault = f
                .soft
                .iter()
                .find(|p| p.threads == 1)
                .and_then(|p| pos(p.mean_latency_s));
            match (latency, fault, pos(c.median_bytes_per_s)) {
                (Some(l), Some(pf), Some(memcpy)) => Some(Cpu {
                    tlb_miss_latency_s: l,
                    tlb_miss_count: t.miss_count,
                    stride_4k_access_s: pos(t.base.page_stride.access_s),
                    stride_4k_access_thp_s: t
                        .huge
                        .as_ref()
                        .and_then(|h| pos(h.page_stride.access_s)),
                    page_fault_s: pf,
                    uffd_fault_s: uffd_1,
                    shootdown_s: r.shootdown.as_ref().and_then(|s| {
                        s.iter()
                            .find(|p| p.op == "mprotect" && p.pages == 1 && p.remote_threads > 0)
                            .and_then(|p| pos(p.mean_s))
                    }),
                    memcpy_bytes_per_s: memcpy,
                }),
                _ => {
                    notes.push(
                        "no [cpu] table: the TLB-miss latency was not positive (noise; run the full probe) or \
                         no single-thread fault was measured"
                            .into(),
                    );
                    None
                }
            }
        }
        _ => {
            notes.push("no [cpu] table: it needs the tlb, faults and copy probes".into());
            None
        }
    };
    let storage = r.storage.as_ref().and_then(|s| {
        let op = s.operating_point()?;
        Some(Storage {
            read_bytes_per_s: pos(op.read_bytes_per_s)?,
            write_bytes_per_s: pos(op.write_bytes_per_s)?,
            path: Some(plan.storage.dir.display().to_string()),
            block_bytes: Some(op.block_bytes as u64),
            queue_depth: Some(op.queue_depth as u32),
            points: s
                .points
                .iter()
                .filter(|p| pos(p.read_bytes_per_s).is_some() && pos(p.write_bytes_per_s).is_some())
                .map(|p| StoragePoint {
                    block_bytes: p.block_bytes as u64,
                    queue_depth: p.queue_depth as u32,
                    read_bytes_per_s: p.read_bytes_per_s,
                    write_bytes_per_s: p.write_bytes_per_s,
                })
                .collect(),
        })
    });
    if storage.is_none() {
        notes.push("no [storage] table: `plan` and `run` will measure the store themselves".into());
    }
    let gpu = r.gpu.as_ref().map(gpu::GpuResults::to_profile);
    let memcpy = r.copy.as_ref().and_then(|c| pos(c.median_bytes_per_s));
    // H: a GPU's managed-memory fault when there is one; otherwise a fault serviced in user space, the host's
    // closest equivalent (the host backend models an integrated GPU).
    let managed_fault_s = gpu.as_ref().and_then(|g| g.managed_fault_s);
    let machine = r.gpu.as_ref().and_then(|g| g.uvm.as_ref());
    // With the demand-migration strides measured, the fault batch cost is the isolated fault (one thread, one
    // touch per 64 KiB) less what the same touch costs when faults are batched: what batching amortises.
    let fault_s = match (managed_fault_s, machine) {
        (Some(f), Some(m)) => Some((f - m.migrate_64k_stride_touch_s).max(0.0)),
        (f, _) => f.or(uffd_1),
    };
    let uvm = Uvm {
        cpu_mem_bytes_per_s: memcpy,
        pci_bytes_per_s: gpu.as_ref().and_then(|g| g.h2d_pinned_bytes_per_s),
        fault_s,
        remote_line_s: machine.and_then(|m| pos(m.remote_line_s)),
        remote_lines_per_s: machine.and_then(|m| pos(m.remote_lines_per_s)),
        migrate_4k_stride_page_s: machine.and_then(|m| pos(m.migrate_4k_stride_page_s)),
        migrate_64k_stride_touch_s: machine.and_then(|m| pos(m.migrate_64k_stride_touch_s)),
        ..Uvm::default()
    };
    let swap = SwapMachine {
        memory_bytes_per_s: memcpy,
        ssd_read_bytes_per_s: storage.as_ref().map(|s| s.read_bytes_per_s),
        ssd_write_bytes_per_s: storage.as_ref().map(|s| s.write_bytes_per_s),
    };
    let profile = Profile {
        profile: meta,
        cpu,
        storage,
        gpu,
        uvm: (uvm != Uvm::default()).then_some(uvm),
        swap: (swap != SwapMachine::default()).then_some(swap),
    };
    (profile, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[uvm]` table from a GPU whose probe measured the simulator's machine (issue 37): every key copied,
    /// and the fault batch cost as the isolated fault less the batched 64 KiB touch.
    #[test]
    fn the_gpus_uvm_machine_goes_into_the_uvm_table() {
        let gpu = gpu::GpuResults {
            name: "test GPU".into(),
            h2d_pinned_bytes_per_s: 55e9,
            d2h_pinned_bytes_per_s: 55e9,
            h2d_pageable_bytes_per_s: 8.6e9,
            d2h_pageable_bytes_per_s: 14.7e9,
            managed_faults: vec![gpu::ManagedFaultPoint {
                concurrency: 1,
                faults: 64,
                kernel_s: 64.0 * 8.4e-6,
                latency_s: 8.4e-6,
                throughput_per_s: 1.0 / 8.4e-6,
            }],
            prefetch_bytes_per_s: None,
            vmm_granularity_bytes: 0,
            vmm_map_s: 0.0,
            vmm_unmap_s: 0.0,
            preempt_idle_s: None,
            preempt_busy_s: None,
            uvm: Some(gpu::UvmMachine {
                remote_line_s: 1.27e-6,
                remote_lines_per_s: 392e6,
                migrate_4k_stride_page_s: 1.04e-6,
                migrate_64k_stride_touch_s: 3.8e-6,
            }),
            skipped: vec![],
        };
        let r = ProbeResults {
            gpu: Some(gpu),
            ..ProbeResults::default()
        };
        let (profile, _) = to_profile(&r, &ProbePlan::new(true, std::env::temp_dir()));
        let u = profile.uvm.expect("a [uvm] table");
        assert_eq!(u.remote_line_s, Some(1.27e-6));
        assert_eq!(u.remote_lines_per_s, Some(392e6));
        assert_eq!(u.migrate_4k_stride_page_s, Some(1.04e-6));
        assert_eq!(u.migrate_64k_stride_touch_s, Some(3.8e-6));
        assert_eq!(u.pci_bytes_per_s, Some(55e9));
        let fault_s = u.fault_s.expect("a fault batch cost");
        assert!((fault_s - 4.6e-6).abs() < 1e-12, "{fault_s}");
    }
}
