//! The paper's cost model (Sec. 5.3, Eqs. 1-3) and the platform constants it uses.
//!
//! The same constants serve twice: DynaMap decides with Eqs. 1 and 3, and the simulator turns the events it
//! counted into an estimated run time with the same per-event costs, so a policy is judged by the model it was
//! built for. Defaults are the paper's table (Turing RTX 2060 over PCIe 3.0 x16); a platform profile (TOML, the
//! `[uvm]` table, docs/profile.md) overrides any of them.

use std::path::Path;

use oversub_profile::{Profile, Uvm};
use serde::{Deserialize, Serialize};

use super::SimError;

/// Platform constants of the cost model. Field names carry their units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostModel {
    /// L: GPU cache line, the unit of remote access and of utilisation tracking (power of two).
    pub line_bytes: u64,
    /// P: page, the unit of migration (power of two, at most 64 lines and at most 64 KiB).
    pub page_bytes: u64,
    /// B_C: host memory bandwidth.
    pub cpu_mem_bytes_per_s: f64,
    /// B_G: GPU memory bandwidth.
    pub gpu_mem_bytes_per_s: f64,
    /// B_PCI: bus bandwidth between host and GPU.
    pub pci_bytes_per_s: f64,
    /// H: time to service one fault, without the transfer.
    pub fault_s: f64,
    /// Fixed cost of serving one cache line from host memory, on top of its transfer. Eq. 1 charges a fault (H)
    /// per line left on the host, so the default is H.
    pub remote_line_s: f64,
    /// GPU L2 capacity (Table 2: 3 MB).
    pub l2_bytes: u64,
    /// GPU L2 associativity (not in the paper; 16 ways is the usual NVIDIA L2 slice).
    pub l2_ways: u32,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            line_bytes: 128,
            page_bytes: 4096,
            cpu_mem_bytes_per_s: 12.8e9,
            gpu_mem_bytes_per_s: 336e9,
            pci_bytes_per_s: 16e9,
            fault_s: 20e-6,
            remote_line_s: 20e-6,
            l2_bytes: 3 * 1024 * 1024,
            l2_ways: 16,
        }
    }
}

impl CostModel {
    /// The paper's constants with a platform profile's `[uvm]` table over them; a profile without one keeps them
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

    /// Overrides every constant the `[uvm]` table has; the rest keep their values. Does not validate.
    pub fn apply_profile(&mut self, uvm: &Uvm) {
        let Uvm {
            line_bytes,
            page_bytes,
            cpu_mem_bytes_per_s,
            gpu_mem_bytes_per_s,
            pci_bytes_per_s,
            fault_s,
            remote_line_s,
            l2_bytes,
            l2_ways,
        } = *uvm;
        // Destructured without `..` so that a key added to the schema cannot be silently ignored here.
        self.line_bytes = line_bytes.unwrap_or(self.line_bytes);
        self.page_bytes = page_bytes.unwrap_or(self.page_bytes);
        self.cpu_mem_bytes_per_s = cpu_mem_bytes_per_s.unwrap_or(self.cpu_mem_bytes_per_s);
        self.gpu_mem_bytes_per_s = gpu_mem_bytes_per_s.unwrap_or(self.gpu_mem_bytes_per_s);
        self.pci_bytes_per_s = pci_bytes_per_s.unwrap_or(self.pci_bytes_per_s);
        self.fault_s = fault_s.unwrap_or(self.fault_s);
        self.remote_line_s = remote_line_s.unwrap_or(self.remote_line_s);
        self.l2_bytes = l2_bytes.unwrap_or(self.l2_bytes);
        self.l2_ways = l2_ways.unwrap_or(self.l2_ways);
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
        for (name, v) in [
            ("cpu_mem_bytes_per_s", self.cpu_mem_bytes_per_s),
            ("gpu_mem_bytes_per_s", self.gpu_mem_bytes_per_s),
            ("pci_bytes_per_s", self.pci_bytes_per_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} must be a positive number, not {v}"));
            }
        }
        for (name, v) in [
            ("fault_s", self.fault_s),
            ("remote_line_s", self.remote_line_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!("{name} must be a non-negative number, not {v}"));
            }
        }
        if self.l2_ways == 0 || self.l2_bytes < self.line_bytes * u64::from(self.l2_ways) {
            return bad("the L2 needs at least one set of l2_ways lines".into());
        }
        Ok(())
    }

    /// Cache lines per page.
    pub fn lines_per_page(&self) -> u32 {
        (self.page_bytes / self.line_bytes) as u32
    }

    /// Time to move one page across the bus, host memory included: P (1/B_C + 1/B_PCI).
    pub fn page_transfer_s(&self) -> f64 {
        self.page_bytes as f64 * (1.0 / self.cpu_mem_bytes_per_s + 1.0 / self.pci_bytes_per_s)
    }

    /// Time to serve one line from host memory: the fixed cost plus L (1/B_C + 1/B_PCI).
    pub fn remote_line_cost_s(&self) -> f64 {
        self.remote_line_s
            + self.line_bytes as f64 * (1.0 / self.cpu_mem_bytes_per_s + 1.0 / self.pci_bytes_per_s)
    }

    /// Time to read one line from GPU memory: L / B_G.
    pub fn gpu_line_s(&self) -> f64 {
        self.line_bytes as f64 / self.gpu_mem_bytes_per_s
    }

    /// Eq. 1: cost of serving `lines` distinct lines of a page from host memory (⌈x/L⌉ = `lines`).
    pub fn c_cpu(&self, lines: u32) -> f64 {
        f64::from(lines) * self.remote_line_cost_s()
    }

    /// Eq. 3: cost of migrating the page and then reading `lines` lines from GPU memory, when each migration
    /// brings `f_over` extra faults through premature eviction.
    pub fn c_gpu(&self, lines: u32, f_over: f64) -> f64 {
        f64::from(lines) * self.gpu_line_s()
            + (1.0 + f_over) * (self.fault_s + self.page_transfer_s())
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
        // Pressure moves the crossover right.
        let crossover = |f: f64| (1..=32).find(|&x| m.c_gpu(x, f) < m.c_cpu(x)).unwrap_or(33);
        assert!(crossover(0.0) < crossover(4.0));
        assert!(crossover(4.0) < crossover(16.0));
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
        assert_eq!(m.fault_s, 1e-5);
        assert_eq!(m.pci_bytes_per_s, 16e9);
        // No [uvm] table: the paper's constants.
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
        assert_eq!(m.fault_s, 0.0);
        let e = CostModel::from_profile_str("[uvm]\nfault_s = 1e-5\n", p).unwrap_err();
        assert!(e.to_string().contains("[profile]"), "{e}");
        let e = CostModel::from_profile_str("[profile]\nversion = 7\n", p).unwrap_err();
        assert!(e.to_string().contains("schema version 7"), "{e}");
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
            remote_line_s: Some(1e-6),
            l2_bytes: Some(40 << 20),
            l2_ways: Some(8),
        };
        let mut m = CostModel::default();
        m.apply_profile(&uvm);
        assert_eq!(
            m,
            CostModel {
                line_bytes: 64,
                page_bytes: 2048,
                cpu_mem_bytes_per_s: 1e10,
                gpu_mem_bytes_per_s: 2e12,
                pci_bytes_per_s: 3e10,
                fault_s: 1e-5,
                remote_line_s: 1e-6,
                l2_bytes: 40 << 20,
                l2_ways: 8,
            }
        );
        let mut m = CostModel::default();
        m.apply_profile(&Uvm::default());
        assert_eq!(m, CostModel::default());
    }
}
