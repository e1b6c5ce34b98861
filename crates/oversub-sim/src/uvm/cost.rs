//! The paper's cost model (Sec. 5.3, Eqs. 1-3) and the platform constants it uses.
//!
//! The same constants serve twice: DynaMap decides with Eqs. 1 and 3, and the simulator turns the events it
//! counted into an estimated run time with the same per-event costs, so a policy is judged by the model it was
//! built for. Defaults are the paper's table (Turing RTX 2060 over PCIe 3.0 x16); a platform profile (TOML, the
//! `[uvm]` table) overrides any of them.

use std::path::Path;

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

#[derive(Debug, Deserialize)]
struct ProfileFile {
    #[serde(default)]
    uvm: Option<CostModel>,
}

impl CostModel {
    /// Reads the `[uvm]` table of a platform profile; other tables (storage, probe results) are ignored, missing
    /// fields keep the paper's values.
    pub fn from_profile(path: &Path) -> Result<Self, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
        Self::from_profile_str(&text, path)
    }

    /// As [`CostModel::from_profile`], from the file's text.
    pub fn from_profile_str(text: &str, path: &Path) -> Result<Self, SimError> {
        let file: ProfileFile = toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|s| {
                    let before = text.get(..s.start).unwrap_or(text);
                    format!("line {}", before.matches('\n').count() + 1)
                })
                .unwrap_or_else(|| "profile".to_string());
            SimError::bad_file(path, location, e.message().to_string())
        })?;
        let model = file.uvm.unwrap_or_default();
        model.validate()?;
        Ok(model)
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

    #[test]
    fn profile_overrides_and_errors() {
        let p = Path::new("p.toml");
        let m = CostModel::from_profile_str(
            "[storage]\nread_bytes_per_s = 1\n[uvm]\nfault_s = 1e-5\n",
            p,
        )
        .unwrap();
        assert_eq!(m.fault_s, 1e-5);
        assert_eq!(m.pci_bytes_per_s, 16e9);
        let e = CostModel::from_profile_str("[uvm]\nfault = 3\n", p).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = CostModel::from_profile_str("[uvm]\npage_bytes = 3000\n", p).unwrap_err();
        assert!(e.to_string().contains("power"), "{e}");
    }
}
