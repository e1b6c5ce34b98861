//! What machine the probe ran on: host, kernel, CPU, and whether the facilities the probes need are there.

use serde::Serialize;

/// The measured machine, for the profile's `[profile]` table and the report's header.
#[derive(Debug, Clone, Serialize)]
pub struct SystemInfo {
    /// Host name.
    pub host: Option<String>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: Option<String>,
    /// CPUs this process may run on.
    pub cpus: u32,
    /// Transparent huge pages mode (`always`, `madvise` or `never`), when the kernel has THP.
    pub thp_mode: Option<String>,
    /// Whether this runs under a hypervisor (the `hypervisor` CPU flag): faults and shootdowns then include VM
    /// exits.
    pub virtualized: bool,
}

impl SystemInfo {
    /// Reads what the kernel says; anything it does not say is `None`.
    pub fn detect() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
        };
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        let flags = field("flags").unwrap_or_default();
        SystemInfo {
            host: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpu_model: field("model name"),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            thp_mode: read("/sys/kernel/mm/transparent_hugepage/enabled")
                .and_then(|s| thp_mode(&s)),
            virtualized: flags.split_whitespace().any(|f| f == "hypervisor"),
        }
    }

    /// Whether a region advised `MADV_HUGEPAGE` can get huge pages.
    pub fn thp_usable(&self) -> bool {
        matches!(self.thp_mode.as_deref(), Some("always" | "madvise"))
    }
}

/// The bracketed choice of a sysfs setting like `always [madvise] never`.
fn thp_mode(setting: &str) -> Option<String> {
    let start = setting.find('[')? + 1;
    let end = setting[start..].find(']')? + start;
    Some(setting[start..end].to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn thp_setting() {
        assert_eq!(
            thp_mode("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            thp_mode("[always] madvise never").as_deref(),
            Some("always")
        );
        assert_eq!(thp_mode("garbage"), None);
        let s = SystemInfo::detect();
        assert!(s.cpus >= 1);
    }
}
