//! Two sets of constants: the *decision* constants DynaMap and StaticMap decide with (Sec. 5.3's table, Eqs. 1-3
//! as printed), and the *machine* the simulator's clock runs on (remote-line latency, batched fault service,
//! transfers with a per-copy setup, outstanding misses, the L2, the page statistics table's instrumentation).
//!
//! They are kept apart so that a what-if about the machine (a faster bus, a cheaper remote line) never changes what
//! a policy decides — only what its decisions cost. `--decide-with machine` ([`CostModel::decide_with_machine`])
//! is the one way to make them agree, when that is the question asked.
//!
//! Every default cites its source; the ones no paper gives are marked as estimates.

use std::path::Path;

use oversub_profile::{Profile, Uvm};
use serde::{Deserialize, Serialize};

use super::SimError;

/// GPU memory of the paper's machine (Table 2: 5935 MB, as `nvidia-smi` reports MiB), the reference the
/// simulator scales its L2 and driver granularities against.
pub const PAPER_GPU_MEMORY_BYTES: u64 = 5935 * 1024 * 1024;
/// The paper's GPU clock (Table 2: 1680 MHz), which turns the instrumentation's cycles into time.
pub const PAPER_GPU_CLOCK_HZ: f64 = 1.68e9;
/// Cycles of one page-statistics-table update (Sec. 5.1: "taking around 6000 cycles").
pub const PST_UPDATE_CYCLES: f64 = 6000.0;

/// The constants of Eqs. 1 and 3, as the paper prints them (Sec. 5.3's table). Only DynaMap and StaticMap read
/// them, and only to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecisionConstants {
    /// B_C: host memory bandwidth (12.8 GB/s).
    pub cpu_mem_bytes_per_s: f64,
    /// B_G: GPU memory bandwidth (336 GB/s).
    pub gpu_mem_bytes_per_s: f64,
    /// B_PCI: bus bandwidth (16 GB/s).
    pub pci_bytes_per_s: f64,
    /// H: page-fault handling time (20 µs), charged per page in Eq. 3 and per line in Eq. 1.
    pub fault_s: f64,
}

impl Default for DecisionConstants {
    fn default() -> Self {
        Self {
            cpu_mem_bytes_per_s: 12.8e9,
            gpu_mem_bytes_per_s: 336e9,
            pci_bytes_per_s: 16e9,
            fault_s: 20e-6,
        }
    }
}

/// The machine the clock runs on. Field names carry their units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MachineModel {
    /// Host memory bandwidth (Table 2: 12.8 GB/s).
    pub cpu_mem_bytes_per_s: f64,
    /// GPU memory bandwidth (Table 2: 336 GB/s).
    pub gpu_mem_bytes_per_s: f64,
    /// Bus bandwidth, each direction (Table 2: PCIe 3.0 x16, 16 GB/s).
    pub pci_bytes_per_s: f64,
    /// Fixed cost of one fault batch: invoking and returning from the handler (Sec. 5.1: "roughly 20 µs to
    /// simply invoke and return from a page fault handler with no data transfer").
    pub fault_batch_s: f64,
    /// Service time of each fault within a batch (Vesely et al., ISPASS'16, Fig. 6: fault service saturates at
    /// about 260 faults/ms, 3.8 µs each; an integrated GPU, the only per-fault figure the seed papers give).
    pub fault_service_s: f64,
    /// Most faults in one batch (the NVIDIA driver's fault batch, 256; also the paper's "batched" faults).
    pub fault_batch_max: u32,
    /// Latency of one 128 B read of host memory over the bus, zero-copy. Estimate: no seed paper measures it; a
    /// PCIe 3.0 round trip to host DRAM is about a microsecond.
    pub remote_line_latency_s: f64,
    /// Setup of one DMA copy (migration or eviction), on top of its bytes: the size curve of PCIe copies, where
    /// 4 KiB moves at a fraction of the peak and 2 MiB near it. Estimate: no seed paper measures it.
    pub transfer_setup_s: f64,
    /// Misses in flight at once, which hide latency (the resident warps of the trace generator: 30 SMs × 8).
    pub outstanding_misses: u32,
    /// GPU L2 capacity on the paper's machine (Table 2: 3 MB); scaled with GPU memory unless fixed.
    pub l2_bytes: u64,
    /// GPU L2 associativity (not in the paper; 16 ways is the usual NVIDIA L2 slice).
    pub l2_ways: u32,
    /// Time of one page-statistics-table update (Sec. 5.1: ~6000 cycles at Table 2's 1680 MHz, 3.6 µs).
    pub pst_update_s: f64,
    /// Warps whose accesses one update covers (Sec. 5.1's batch update: "a small batch size of 4 warps").
    pub pst_batch_warps: u32,
    /// Ceiling on remote (zero-copy) line reads per second. None: the link's bytes per second over the line size,
    /// which is what the paper's machine gives (Table 2 has no separate figure). A profile's measured value.
    pub remote_lines_per_s: Option<f64>,
    /// Bytes per second of a demand migration's copy. None: the link ([`MachineModel::link_bytes_per_s`]). A
    /// profile derives it from the two demand-migration strides (see [`CostModel::apply_profile`]).
    pub migration_bytes_per_s: Option<f64>,
}

impl Default for MachineModel {
    fn default() -> Self {
        Self {
            cpu_mem_bytes_per_s: 12.8e9,
            gpu_mem_bytes_per_s: 336e9,
            pci_bytes_per_s: 16e9,
            fault_batch_s: 20e-6,
            fault_service_s: 1.0 / 260e3,
            fault_batch_max: 256,
            remote_line_latency_s: 1e-6,
            transfer_setup_s: 2e-6,
            outstanding_misses: 240,
            l2_bytes: 3 * 1024 * 1024,
            l2_ways: 16,
            pst_update_s: PST_UPDATE_CYCLES / PAPER_GPU_CLOCK_HZ,
            pst_batch_warps: 4,
            remote_lines_per_s: None,
            migration_bytes_per_s: None,
        }
    }
}

/// What the two demand-migration strides of a profile say about the handler, by a linear fit of the time per
/// touch against the bytes each touch moves: per fault `service_s`, per byte `1 / bytes_per_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DemandFit {
    /// Fixed cost per fault serviced (the intercept).
    pub service_s: f64,
    /// Copy bandwidth of migrations (the slope's inverse).
    pub bytes_per_s: f64,
}

/// Fits `t = service_s + bytes / bytes_per_s` through (4 KiB, `per_4k_s`) and (64 KiB, `per_64k_s`). None when
/// the two do not describe a machine (the 64 KiB touch no dearer than the 4 KiB one, or a negative intercept).
pub fn demand_fit(per_4k_s: f64, per_64k_s: f64) -> Option<DemandFit> {
    let (small, large) = (4096.0, 65536.0);
    let s_per_byte = (per_64k_s - per_4k_s) / (large - small);
    let service_s = per_4k_s - small * s_per_byte;
    (s_per_byte > 0.0 && service_s >= 0.0 && service_s.is_finite()).then(|| DemandFit {
        service_s,
        bytes_per_s: 1.0 / s_per_byte,
    })
}

impl MachineModel {
    /// A machine on which the overlap model, with overlap switched off, gives exactly the serial sum of
    /// [`CostModel::serial_time_s`]: every fault costs H, a remote line H plus its bytes, copies have no setup,
    /// nothing is in flight at once and the table's updates are free.
    pub fn serial_equivalent(decision: &DecisionConstants) -> Self {
        Self {
            cpu_mem_bytes_per_s: decision.cpu_mem_bytes_per_s,
            gpu_mem_bytes_per_s: decision.gpu_mem_bytes_per_s,
            pci_bytes_per_s: decision.pci_bytes_per_s,
            fault_batch_s: 0.0,
            fault_service_s: decision.fault_s,
            fault_batch_max: 1,
            remote_line_latency_s: decision.fault_s,
            transfer_setup_s: 0.0,
            outstanding_misses: 1,
            pst_update_s: 0.0,
            ..Self::default()
        }
    }

    /// Bytes per second of a pipelined copy between host memory and the GPU: the slower of the two.
    pub fn link_bytes_per_s(&self) -> f64 {
        self.cpu_mem_bytes_per_s.min(self.pci_bytes_per_s)
    }

    /// Remote line reads per second at saturation: measured, or the link over `line_bytes`.
    pub fn remote_lines_per_s(&self, line_bytes: u64) -> f64 {
        self.remote_lines_per_s
            .unwrap_or_else(|| self.link_bytes_per_s() / line_bytes as f64)
    }

    /// Bytes per second of a migration's (or eviction's) copy: measured, or the link.
    pub fn migration_bytes_per_s(&self) -> f64 {
        self.migration_bytes_per_s
            .unwrap_or_else(|| self.link_bytes_per_s())
    }

    /// Seconds per byte of a copy that passes host memory, then the bus, one after the other.
    pub fn serial_s_per_byte(&self) -> f64 {
        1.0 / self.cpu_mem_bytes_per_s + 1.0 / self.pci_bytes_per_s
    }
}

/// Geometry, decision constants and machine of one simulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostModel {
    /// L: GPU cache line, the unit of remote access and of utilisation tracking (power of two).
    pub line_bytes: u64,
    /// P: page, the unit of migration (power of two, at most 64 lines and at most 64 KiB).
    pub page_bytes: u64,
    /// What DynaMap and StaticMap decide with.
    pub decision: DecisionConstants,
    /// What the clock runs on.
    pub machine: MachineModel,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            line_bytes: 128,
            page_bytes: 4096,
            decision: DecisionConstants::default(),
            machine: MachineModel::default(),
        }
    }
}

impl CostModel {
    /// The defaults with a platform profile's `[uvm]` table over the machine; a profile without one keeps them
    /// all. The profile is read with [`oversub_profile::Profile::load`] (version, keys and ranges checked there);
    /// how the constants fit together is checked here.
    pub fn from_profile(path: &Path) -> Result<Self, SimError> {
        let profile = Profile::load(path)?;
        Self::from_uvm(profile.uvm.as_ref(), path)
    }

    /// As [`CostModel::from_profile`], from the file's text; `path` names the file in errors.
    pub fn from_profile_str(text: &str, path: &Path) -> Result<Self, SimError> {
        let profile = Profile::from_toml_str(text, path)?;
        Self::from_uvm(profile.uvm.as_ref(), path)
    }

    fn from_uvm(uvm: Option<&Uvm>, path: &Path) -> Result<Self, SimError> {
        let mut model = Self::default();
        if let Some(uvm) = uvm {
            if let (Some(t4), Some(t64)) =
                (uvm.migrate_4k_stride_page_s, uvm.migrate_64k_stride_touch_s)
            {
                if demand_fit(t4, t64).is_none() {
                    return Err(SimError::bad_file(
                        path,
                        "[uvm]",
                        format!(
                            "migrate_4k_stride_page_s = {t4} and migrate_64k_stride_touch_s = {t64} fit no \
                             machine: a 64 KiB touch must cost more than a 4 KiB one, by no more than 16 times"
                        ),
                    ));
                }
            }
            model.apply_profile(uvm);
        }
        // Each key passed the profile's own checks; together they may still describe no machine (a page of 128
        // lines), and that is the file's fault, so name it.
        model.validate().map_err(|e| match e {
            SimError::InvalidParameter(reason) => SimError::bad_file(path, "[uvm]", reason),
            other => other,
        })?;
        Ok(model)
    }

    /// Overrides every constant the `[uvm]` table has; the rest keep their values. A profile describes a
    /// machine, so its keys set the machine model (and the geometry); the decision constants stay the paper's
    /// unless [`CostModel::decide_with_machine`] is asked for. Does not validate.
    pub fn apply_profile(&mut self, uvm: &Uvm) {
        let Uvm {
            line_bytes,
            page_bytes,
            cpu_mem_bytes_per_s,
            gpu_mem_bytes_per_s,
            pci_bytes_per_s,
            fault_s,
            fault_service_s,
            remote_line_s,
            transfer_setup_s,
            outstanding_misses,
            l2_bytes,
            l2_ways,
            remote_lines_per_s,
            migrate_4k_stride_page_s,
            migrate_64k_stride_touch_s,
        } = *uvm;
        // Destructured without `..` so that a key added to the schema cannot be silently ignored here.
        let m = &mut self.machine;
        self.line_bytes = line_bytes.unwrap_or(self.line_bytes);
        self.page_bytes = page_bytes.unwrap_or(self.page_bytes);
        m.cpu_mem_bytes_per_s = cpu_mem_bytes_per_s.unwrap_or(m.cpu_mem_bytes_per_s);
        m.gpu_mem_bytes_per_s = gpu_mem_bytes_per_s.unwrap_or(m.gpu_mem_bytes_per_s);
        m.pci_bytes_per_s = pci_bytes_per_s.unwrap_or(m.pci_bytes_per_s);
        m.fault_batch_s = fault_s.unwrap_or(m.fault_batch_s);
        m.fault_service_s = fault_service_s.unwrap_or(m.fault_service_s);
        m.remote_line_latency_s = remote_line_s.unwrap_or(m.remote_line_latency_s);
        m.transfer_setup_s = transfer_setup_s.unwrap_or(m.transfer_setup_s);
        m.outstanding_misses = outstanding_misses.unwrap_or(m.outstanding_misses);
        m.l2_bytes = l2_bytes.unwrap_or(m.l2_bytes);
        m.l2_ways = l2_ways.unwrap_or(m.l2_ways);
        m.remote_lines_per_s = remote_lines_per_s.or(m.remote_lines_per_s);
        // The two strides measure the whole demand path (fault service, copy setup and bytes) on the machine
        // itself, so they replace the per-fault service, the copy setup and the copy bandwidth together. A pair
        // that fits no machine changes nothing here; `from_profile` refuses it.
        if let (Some(t4), Some(t64)) = (migrate_4k_stride_page_s, migrate_64k_stride_touch_s) {
            if let Some(fit) = demand_fit(t4, t64) {
                m.fault_service_s = fit.service_s;
                m.transfer_setup_s = 0.0;
                m.migration_bytes_per_s = Some(fit.bytes_per_s);
            }
        }
    }

    /// Makes the decision constants the machine's (B_C, B_G, B_PCI, and H = one fault batch's handler cost):
    /// DynaMap then decides for the machine it runs on rather than for the paper's table.
    pub fn decide_with_machine(&mut self) {
        let m = &self.machine;
        self.decision = DecisionConstants {
            cpu_mem_bytes_per_s: m.cpu_mem_bytes_per_s,
            gpu_mem_bytes_per_s: m.gpu_mem_bytes_per_s,
            pci_bytes_per_s: m.pci_bytes_per_s,
            fault_s: m.fault_batch_s,
        };
    }

    /// Checks that the constants describe a machine the simulator can model.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::InvalidParameter(m));
        if !self.line_bytes.is_power_of_two() || !self.page_bytes.is_power_of_two() {
            return bad("line_bytes and page_bytes must be powers of two".into());
        }
        if self.line_bytes < 8 || self.page_bytes < self.line_bytes {
            return bad("need 8 <= line_bytes <= page_bytes".into());
        }
        if self.page_bytes / self.line_bytes > 64 || self.page_bytes > 64 * 1024 {
            return bad("page_bytes may hold at most 64 lines and be at most 64 KiB".into());
        }
        let (d, m) = (&self.decision, &self.machine);
        for (name, v) in [
            ("decision.cpu_mem_bytes_per_s", d.cpu_mem_bytes_per_s),
            ("decision.gpu_mem_bytes_per_s", d.gpu_mem_bytes_per_s),
            ("decision.pci_bytes_per_s", d.pci_bytes_per_s),
            ("cpu_mem_bytes_per_s", m.cpu_mem_bytes_per_s),
            ("gpu_mem_bytes_per_s", m.gpu_mem_bytes_per_s),
            ("pci_bytes_per_s", m.pci_bytes_per_s),
            ("remote_lines_per_s", m.remote_lines_per_s.unwrap_or(1.0)),
            (
                "migration_bytes_per_s",
                m.migration_bytes_per_s.unwrap_or(1.0),
            ),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} must be a positive number, not {v}"));
            }
        }
        for (name, v) in [
            ("decision.fault_s", d.fault_s),
            ("fault_s (fault batch)", m.fault_batch_s),
            ("fault_service_s", m.fault_service_s),
            ("remote_line_s", m.remote_line_latency_s),
            ("transfer_setup_s", m.transfer_setup_s),
            ("pst_update_s", m.pst_update_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!("{name} must be a non-negative number, not {v}"));
            }
        }
        if m.fault_batch_max == 0 || m.outstanding_misses == 0 || m.pst_batch_warps == 0 {
            return bad(
                "fault_batch_max, outstanding_misses and pst_batch_warps must be at least 1".into(),
            );
        }
        if m.l2_ways == 0 || m.l2_bytes < self.line_bytes * u64::from(m.l2_ways) {
            return bad("the L2 needs at least one set of l2_ways lines".into());
        }
        Ok(())
    }

    /// Cache lines per page.
    pub fn lines_per_page(&self) -> u32 {
        (self.page_bytes / self.line_bytes) as u32
    }

    /// Eqs. 1 and 3's time to move one page across the bus, host memory included: P (1/B_C + 1/B_PCI).
    pub fn page_transfer_s(&self) -> f64 {
        let d = &self.decision;
        self.page_bytes as f64 * (1.0 / d.cpu_mem_bytes_per_s + 1.0 / d.pci_bytes_per_s)
    }

    /// Eq. 1's cost of one line left on the host: a fault plus L (1/B_C + 1/B_PCI).
    pub fn remote_line_cost_s(&self) -> f64 {
        let d = &self.decision;
        d.fault_s + self.line_bytes as f64 * (1.0 / d.cpu_mem_bytes_per_s + 1.0 / d.pci_bytes_per_s)
    }

    /// Eq. 3's time to read one line from GPU memory: L / B_G.
    pub fn gpu_line_s(&self) -> f64 {
        self.line_bytes as f64 / self.decision.gpu_mem_bytes_per_s
    }

    /// Eq. 1: cost of serving `lines` distinct lines of a page from host memory (⌈x/L⌉ = `lines`).
    pub fn c_cpu(&self, lines: u32) -> f64 {
        f64::from(lines) * self.remote_line_cost_s()
    }

    /// Eq. 3: cost of migrating the page and then reading `lines` lines from GPU memory, when each migration
    /// brings `f_over` extra faults through premature eviction.
    pub fn c_gpu(&self, lines: u32, f_over: f64) -> f64 {
        f64::from(lines) * self.gpu_line_s()
            + (1.0 + f_over) * (self.decision.fault_s + self.page_transfer_s())
    }

    /// Fig. 7's curves: C_CPU and C_GPU (seconds) for every x = 1..=lines per page, at `f_over`; each point is
    /// (x in bytes, C_CPU, C_GPU).
    pub fn cost_curves(&self, f_over: f64) -> Vec<(u64, f64, f64)> {
        (1..=self.lines_per_page())
            .map(|lines| {
                (
                    u64::from(lines) * self.line_bytes,
                    self.c_cpu(lines),
                    self.c_gpu(lines, f_over),
                )
            })
            .collect()
    }

    /// The smallest number of used lines at which Eq. 3 is below Eq. 1 at `f_over` (Fig. 7's crossover); None
    /// when migrating never pays.
    pub fn crossover_lines(&self, f_over: f64) -> Option<u32> {
        (1..=self.lines_per_page()).find(|&x| self.c_gpu(x, f_over) < self.c_cpu(x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_defaults_and_equations() {
        let m = CostModel::default();
        m.validate().unwrap();
        assert_eq!(m.lines_per_page(), 32);
        // One line left on the host is cheaper than a migration with no thrashing; two are not (Fig. 7's
        // leftmost crossover).
        assert!(m.c_cpu(1) < m.c_gpu(1, 0.0));
        assert!(m.c_cpu(2) > m.c_gpu(2, 0.0));
        assert_eq!(m.crossover_lines(0.0), Some(2));
        // Pressure moves the crossover right.
        let crossover = |f: f64| m.crossover_lines(f).unwrap_or(33);
        assert!(crossover(0.0) < crossover(4.0));
        assert!(crossover(4.0) < crossover(16.0));
        assert_eq!(m.cost_curves(1.0).len(), 32);
        // 6000 cycles at 1680 MHz.
        assert!((m.machine.pst_update_s - 3.571e-6).abs() < 1e-9);
    }

    #[test]
    fn the_machine_does_not_move_the_decision_constants() {
        let mut m = CostModel::default();
        let before = (m.c_cpu(5), m.c_gpu(5, 2.0));
        m.machine.remote_line_latency_s = 1e-9;
        m.machine.pci_bytes_per_s = 1e12;
        m.machine.fault_batch_s = 0.0;
        assert_eq!((m.c_cpu(5), m.c_gpu(5, 2.0)), before);
        // Unless asked for.
        m.decide_with_machine();
        assert_ne!((m.c_cpu(5), m.c_gpu(5, 2.0)), before);
    }

    const HEAD: &str = "[profile]\nversion = 1\n";

    #[test]
    fn profile_overrides_and_errors() {
        let p = Path::new("p.toml");
        let m = CostModel::from_profile_str(
            &format!("{HEAD}[storage]\nread_bytes_per_s = 1\nwrite_bytes_per_s = 1\n[uvm]\nfault_s = 1e-5\n"),
            p,
        )
        .unwrap();
        assert_eq!(m.machine.fault_batch_s, 1e-5);
        assert_eq!(
            m.decision.fault_s, 20e-6,
            "a profile is a machine, not a decision"
        );
        assert_eq!(m.machine.pci_bytes_per_s, 16e9);
        // No [uvm] table: the defaults.
        assert_eq!(
            CostModel::from_profile_str(HEAD, p).unwrap(),
            CostModel::default()
        );
        let e = CostModel::from_profile_str(&format!("{HEAD}[uvm]\nfault = 3\n"), p).unwrap_err();
        assert!(e.to_string().contains("p.toml: line 4"), "{e}");
        let e = CostModel::from_profile_str(&format!("{HEAD}[uvm]\npage_bytes = 3000\n"), p)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("uvm.page_bytes must be a power of two"),
            "{e}"
        );
        // Each key fine alone, together no machine: the file and the table are named.
        let e = CostModel::from_profile_str(&format!("{HEAD}[uvm]\npage_bytes = 65536\n"), p)
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("p.toml: [uvm]: page_bytes may hold at most 64 lines"),
            "{e}"
        );
        // Free faults are a what-if the simulator takes.
        let m = CostModel::from_profile_str(&format!("{HEAD}[uvm]\nfault_s = 0\n"), p).unwrap();
        assert_eq!(m.machine.fault_batch_s, 0.0);
        let e = CostModel::from_profile_str("[uvm]\nfault_s = 1e-5\n", p).unwrap_err();
        assert!(e.to_string().contains("[profile]"), "{e}");
        let e = CostModel::from_profile_str("[profile]\nversion = 7\n", p).unwrap_err();
        assert!(e.to_string().contains("schema version 7"), "{e}");
    }

    #[test]
    fn the_two_demand_strides_fit_a_service_time_and_a_copy_bandwidth() {
        // Issue 37's H200: 1.0414 µs per 4 KiB touch, 3.784 µs per 64 KiB one.
        let fit = demand_fit(1.0414e-6, 3.784e-6).unwrap();
        assert!((fit.service_s - 0.858e-6).abs() < 0.005e-6, "{fit:?}");
        assert!((fit.bytes_per_s / 1e9 - 22.4).abs() < 0.1, "{fit:?}");
        // A 64 KiB touch no dearer than a 4 KiB one, or dearer than 16 of them, describes no machine.
        assert!(demand_fit(2e-6, 2e-6).is_none());
        assert!(demand_fit(1e-6, 20e-6).is_none());
        let p = Path::new("bad.toml");
        let text = format!(
            "{HEAD}[uvm]\nmigrate_4k_stride_page_s = 2e-6\nmigrate_64k_stride_touch_s = 1e-6\n"
        );
        let e = CostModel::from_profile_str(&text, p).unwrap_err();
        assert!(e.to_string().contains("bad.toml"), "{e}");
    }

    #[test]
    fn the_h200_example_profile_loads_as_a_measured_machine() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/profiles/h200-issue37.toml");
        let m = CostModel::from_profile(&path).unwrap();
        assert_eq!(m.machine.transfer_setup_s, 0.0);
        assert_eq!(m.machine.remote_lines_per_s(128), 392e6);
        assert!((m.machine.fault_service_s - 0.858e-6).abs() < 0.005e-6);
        assert_eq!(m.machine.link_bytes_per_s(), 55e9);
        // Decisions keep the paper's constants.
        assert_eq!(m.decision, DecisionConstants::default());
    }

    #[test]
    fn every_uvm_key_overrides_its_constant() {
        let uvm = Uvm {
            line_bytes: Some(64),
            page_bytes: Some(2048),
            cpu_mem_bytes_per_s: Some(1e10),
            gpu_mem_bytes_per_s: Some(2e12),
            pci_bytes_per_s: Some(3e10),
            fault_s: Some(1e-5),
            fault_service_s: Some(2e-6),
            remote_line_s: Some(1e-6),
            transfer_setup_s: Some(3e-6),
            outstanding_misses: Some(64),
            l2_bytes: Some(40 << 20),
            l2_ways: Some(8),
            remote_lines_per_s: Some(4e8),
            // 1 µs per 4 KiB touch and 4 µs per 64 KiB one: 0.8 µs a fault and 20.48 GB/s of copy.
            migrate_4k_stride_page_s: Some(1e-6),
            migrate_64k_stride_touch_s: Some(4e-6),
        };
        let mut m = CostModel::default();
        m.apply_profile(&uvm);
        assert_eq!(
            m,
            CostModel {
                line_bytes: 64,
                page_bytes: 2048,
                decision: DecisionConstants::default(),
                machine: MachineModel {
                    cpu_mem_bytes_per_s: 1e10,
                    gpu_mem_bytes_per_s: 2e12,
                    pci_bytes_per_s: 3e10,
                    fault_batch_s: 1e-5,
                    fault_service_s: 1e-6 - 4096.0 * ((4e-6 - 1e-6) / 61440.0),
                    remote_line_latency_s: 1e-6,
                    transfer_setup_s: 0.0,
                    outstanding_misses: 64,
                    l2_bytes: 40 << 20,
                    l2_ways: 8,
                    remote_lines_per_s: Some(4e8),
                    migration_bytes_per_s: Some(1.0 / ((4e-6 - 1e-6) / 61440.0)),
                    ..MachineModel::default()
                },
            }
        );
        let mut m = CostModel::default();
        m.apply_profile(&Uvm::default());
        assert_eq!(m, CostModel::default());
    }
}
