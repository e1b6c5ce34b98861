//! CPU facts and scheduling for the experiments: real-time priority, the online CPU count and the last-level
//! cache size (pinning comes from `oversub_base::cpu`).

use std::io;
use std::path::Path;

pub use oversub_base::cpu::{pin_thread_to_cpu, pin_to_cpu};

/// Tries `SCHED_FIFO` at `priority` for the calling thread: `Ok(true)` if set, `Ok(false)` if not permitted
/// (`EPERM`), Err otherwise (e.g. a priority outside the policy's range).
pub fn try_realtime(priority: i32) -> io::Result<bool> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid sched_param the call only reads; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EPERM) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// Number of online CPUs (`sysconf(_SC_NPROCESSORS_ONLN)`, at least 1).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory effects; it returns -1 on error, handled below.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Size of the last-level cache in bytes, from `/sys/devices/system/cpu/cpu0/cache/index*/` (the entry of the
/// highest `level` that holds data, its `size` like `32768K`); None if unknown.
pub fn last_level_cache_bytes() -> Option<u64> {
    last_level_cache_in(Path::new("/sys/devices/system/cpu/cpu0/cache"))
}

fn last_level_cache_in(dir: &Path) -> Option<u64> {
    let mut best: Option<(u32, u64)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("index") {
            continue;
        }
        let path = entry.path();
        let read = |file: &str| std::fs::read_to_string(path.join(file)).ok();
        if read("type").is_some_and(|t| t.trim() == "Instruction") {
            continue;
        }
        let Some(level) = read("level").and_then(|l| l.trim().parse::<u32>().ok()) else {
            continue;
        };
        let Some(size) = read("size").and_then(|s| parse_cache_size(&s)) else {
            continue;
        };
        if best.is_none_or(|(l, s)| level > l || (level == l && size > s)) {
            best = Some((level, size));
        }
    }
    best.map(|(_, size)| size)
}

/// Parses a sysfs cache size: a number with an optional `K`, `M` or `G` suffix (binary units).
fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = digits.trim().parse().ok()?;
    n.checked_mul(mult).filter(|&b| b > 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_sysfs_sizes() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("8M"), Some(8 << 20));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("0K"), None);
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn picks_highest_data_level() {
        let dir = tempfile::tempdir().unwrap();
        let entries = [
            ("index0", "1", "Data", "32K"),
            ("index1", "1", "Instruction", "64K"),
            ("index2", "2", "Unified", "1024K"),
            ("index3", "3", "Unified", "16M"),
            ("index4", "4", "Instruction", "999M"),
        ];
        for (name, level, ty, size) in entries {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("level"), level).unwrap();
            std::fs::write(d.join("type"), ty).unwrap();
            std::fs::write(d.join("size"), size).unwrap();
        }
        std::fs::write(dir.path().join("uevent"), "").unwrap();
        assert_eq!(last_level_cache_in(dir.path()), Some(16 << 20));
        assert_eq!(last_level_cache_in(&dir.path().join("missing")), None);
    }

    #[test]
    fn cpu_count_and_pinning() {
        let n = online_cpus();
        assert!(n >= 1);
        // Pin a scratch thread so the test runner's threads keep their affinity; a cpuset may exclude some CPUs.
        let pinned = std::thread::spawn(move || (0..n).any(|cpu| pin_to_cpu(cpu).is_ok()))
            .join()
            .unwrap();
        assert!(pinned);
        assert!(pin_to_cpu(usize::MAX).is_err());
    }
}
