//! Range checks: the values serde cannot refuse by type. Each check names the key by its dotted path so a user can
//! find it in the file; the first problem found is reported.

use std::path::Path;

use crate::{Cpu, Gpu, Meta, Profile, ProfileError, Storage, SwapMachine, Uvm, VERSION};

/// Checks against one file's name, for the messages.
struct Check<'a> {
    path: &'a Path,
}

impl Check<'_> {
    fn fail(&self, key: &str, message: String) -> Result<(), ProfileError> {
        Err(ProfileError::Invalid {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            message,
        })
    }

    /// Bandwidths and latencies: a zero or negative one describes no machine.
    fn positive(&self, key: &str, v: f64) -> Result<(), ProfileError> {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            self.fail(key, format!("must be a positive finite number, not {v}"))
        }
    }

    fn positive_opt(&self, key: &str, v: Option<f64>) -> Result<(), ProfileError> {
        v.map_or(Ok(()), |v| self.positive(key, v))
    }

    /// Costs the simulator may take as free.
    fn non_negative_opt(&self, key: &str, v: Option<f64>) -> Result<(), ProfileError> {
        match v {
            Some(v) if !(v.is_finite() && v >= 0.0) => self.fail(
                key,
                format!("must be a finite number of at least 0, not {v}"),
            ),
            _ => Ok(()),
        }
    }

    /// Sizes and counts.
    fn nonzero(&self, key: &str, v: u64) -> Result<(), ProfileError> {
        if v > 0 {
            Ok(())
        } else {
            self.fail(key, "must be at least 1, not 0".to_string())
        }
    }

    fn nonzero_opt(&self, key: &str, v: Option<u64>) -> Result<(), ProfileError> {
        v.map_or(Ok(()), |v| self.nonzero(key, v))
    }

    fn power_of_two_opt(&self, key: &str, v: Option<u64>) -> Result<(), ProfileError> {
        match v {
            Some(v) if !v.is_power_of_two() => {
                self.fail(key, format!("must be a power of two, not {v}"))
            }
            _ => Ok(()),
        }
    }

    fn meta(&self, m: &Meta) -> Result<(), ProfileError> {
        self.nonzero_opt("profile.cpus", m.cpus.map(u64::from))
    }

    fn cpu(&self, c: &Cpu) -> Result<(), ProfileError> {
        self.positive("cpu.tlb_miss_latency_s", c.tlb_miss_latency_s)?;
        self.positive_opt("cpu.stride_4k_access_s", c.stride_4k_access_s)?;
        self.positive_opt("cpu.stride_4k_access_thp_s", c.stride_4k_access_thp_s)?;
        self.positive("cpu.page_fault_s", c.page_fault_s)?;
        self.positive_opt("cpu.uffd_fault_s", c.uffd_fault_s)?;
        self.positive_opt("cpu.shootdown_s", c.shootdown_s)?;
        self.positive("cpu.memcpy_bytes_per_s", c.memcpy_bytes_per_s)
    }

    fn storage(&self, s: &Storage) -> Result<(), ProfileError> {
        self.positive("storage.read_bytes_per_s", s.read_bytes_per_s)?;
        self.positive("storage.write_bytes_per_s", s.write_bytes_per_s)?;
        self.nonzero_opt("storage.block_bytes", s.block_bytes)?;
        self.nonzero_opt("storage.queue_depth", s.queue_depth.map(u64::from))?;
        for (i, p) in s.points.iter().enumerate() {
            let key = |k: &str| format!("storage.points[{i}].{k}");
            self.nonzero(&key("block_bytes"), p.block_bytes)?;
            self.nonzero(&key("queue_depth"), u64::from(p.queue_depth))?;
            self.positive(&key("read_bytes_per_s"), p.read_bytes_per_s)?;
            self.positive(&key("write_bytes_per_s"), p.write_bytes_per_s)?;
        }
        Ok(())
    }

    fn gpu(&self, g: &Gpu) -> Result<(), ProfileError> {
        for (key, v) in [
            ("gpu.h2d_pinned_bytes_per_s", g.h2d_pinned_bytes_per_s),
            ("gpu.d2h_pinned_bytes_per_s", g.d2h_pinned_bytes_per_s),
            ("gpu.h2d_pageable_bytes_per_s", g.h2d_pageable_bytes_per_s),
            ("gpu.d2h_pageable_bytes_per_s", g.d2h_pageable_bytes_per_s),
            ("gpu.managed_fault_s", g.managed_fault_s),
            ("gpu.prefetch_bytes_per_s", g.prefetch_bytes_per_s),
            ("gpu.vmm_map_s", g.vmm_map_s),
            ("gpu.vmm_unmap_s", g.vmm_unmap_s),
            ("gpu.preempt_s", g.preempt_s),
        ] {
            self.positive_opt(key, v)?;
        }
        self.nonzero_opt("gpu.vmm_granularity_bytes", g.vmm_granularity_bytes)
    }

    /// Only what holds for any value; how the constants fit together (a page of at most 64 lines, an L2 of at
    /// least one set) is the simulator's `CostModel::validate`, since it depends on the defaults a key left out keeps.
    fn uvm(&self, u: &Uvm) -> Result<(), ProfileError> {
        self.power_of_two_opt("uvm.line_bytes", u.line_bytes)?;
        self.power_of_two_opt("uvm.page_bytes", u.page_bytes)?;
        self.positive_opt("uvm.cpu_mem_bytes_per_s", u.cpu_mem_bytes_per_s)?;
        self.positive_opt("uvm.gpu_mem_bytes_per_s", u.gpu_mem_bytes_per_s)?;
        self.positive_opt("uvm.pci_bytes_per_s", u.pci_bytes_per_s)?;
        // The simulator accepts free faults and remote lines: a what-if, not a measurement error.
        self.non_negative_opt("uvm.fault_s", u.fault_s)?;
        self.non_negative_opt("uvm.remote_line_s", u.remote_line_s)?;
        self.non_negative_opt("uvm.fault_service_s", u.fault_service_s)?;
        self.non_negative_opt("uvm.transfer_setup_s", u.transfer_setup_s)?;
        self.positive_opt("uvm.remote_lines_per_s", u.remote_lines_per_s)?;
        self.positive_opt("uvm.migrate_4k_stride_page_s", u.migrate_4k_stride_page_s)?;
        self.positive_opt(
            "uvm.migrate_64k_stride_touch_s",
            u.migrate_64k_stride_touch_s,
        )?;
        self.nonzero_opt(
            "uvm.outstanding_misses",
            u.outstanding_misses.map(u64::from),
        )?;
        self.nonzero_opt("uvm.l2_bytes", u.l2_bytes)?;
        self.nonzero_opt("uvm.l2_ways", u.l2_ways.map(u64::from))
    }

    fn swap(&self, s: &SwapMachine) -> Result<(), ProfileError> {
        self.positive_opt("swap.memory_bytes_per_s", s.memory_bytes_per_s)?;
        self.positive_opt("swap.ssd_read_bytes_per_s", s.ssd_read_bytes_per_s)?;
        self.positive_opt("swap.ssd_write_bytes_per_s", s.ssd_write_bytes_per_s)
    }
}

impl Profile {
    /// Checks the version and every value's range; `path` only names the file in the error.
    pub fn validate(&self, path: impl AsRef<Path>) -> Result<(), ProfileError> {
        let c = Check {
            path: path.as_ref(),
        };
        if self.profile.version != VERSION {
            return Err(ProfileError::Version {
                path: c.path.to_path_buf(),
                found: self.profile.version,
                supported: VERSION,
            });
        }
        c.meta(&self.profile)?;
        if let Some(cpu) = &self.cpu {
            c.cpu(cpu)?;
        }
        if let Some(s) = &self.storage {
            c.storage(s)?;
        }
        if let Some(g) = &self.gpu {
            c.gpu(g)?;
        }
        if let Some(u) = &self.uvm {
            c.uvm(u)?;
        }
        if let Some(s) = &self.swap {
            c.swap(s)?;
        }
        Ok(())
    }
}
