//! Hardware TLB-miss counting with `perf_event_open`, where the kernel and the (virtual) CPU allow it. Many VMs
//! expose no PMU; the probes then derive miss counts from their access patterns and say so.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::ProbeError;

// linux/perf_event.h, the first published layout (PERF_ATTR_SIZE_VER0, 64 bytes): enough for a counting event,
// and every kernel accepts it.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_COUNT_HW_CACHE_DTLB: u64 = 3;
const PERF_COUNT_HW_CACHE_OP_READ: u64 = 0;
const PERF_COUNT_HW_CACHE_RESULT_MISS: u64 = 1;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
// _IO('$', n)
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_RESET: libc::c_ulong = 0x2403;

/// A counter of data-TLB load misses of the calling thread, user mode only.
#[derive(Debug)]
pub struct TlbMissCounter {
    fd: OwnedFd,
}

impl TlbMissCounter {
    /// Opens the counter, or says why it cannot be had (no PMU in this VM, `perf_event_paranoid`, ...).
    pub fn open() -> Result<Self, ProbeError> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_HW_CACHE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_HW_CACHE_DTLB
                | (PERF_COUNT_HW_CACHE_OP_READ << 8)
                | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16),
            flags: FLAG_DISABLED | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            ..PerfEventAttr::default()
        };
        // SAFETY: `attr` is a valid, initialised perf_event_attr of the size it declares, alive for the call;
        // pid 0 / cpu -1 counts this thread on any CPU.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV) => {
                    format!("this CPU exposes no data-TLB miss event (a VM without a virtual PMU?): {e}")
                }
                Some(libc::EACCES | libc::EPERM) => format!(
                    "perf_event_open was refused ({e}): lower /proc/sys/kernel/perf_event_paranoid or run as root"
                ),
                _ => format!("perf_event_open failed: {e}"),
            };
            return Err(ProbeError::Unavailable {
                what: "TLB-miss counter",
                why,
            });
        }
        // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(TlbMissCounter { fd })
    }

    fn ioctl(&self, request: libc::c_ulong, what: &str) -> Result<(), ProbeError> {
        // SAFETY: a perf ioctl without an argument on our own perf descriptor.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, 0) } != 0 {
            return Err(ProbeError::last_os(format!("perf counter {what}")));
        }
        Ok(())
    }

    /// Zeroes and starts the counter.
    pub fn start(&self) -> Result<(), ProbeError> {
        self.ioctl(PERF_EVENT_IOC_RESET, "reset")?;
        self.ioctl(PERF_EVENT_IOC_ENABLE, "enable")
    }

    /// Stops the counter and reads it.
    pub fn stop(&self) -> Result<u64, ProbeError> {
        self.ioctl(PERF_EVENT_IOC_DISABLE, "disable")?;
        let mut count = 0u64;
        // SAFETY: reading 8 bytes into a u64 we own; a counting event without read_format gives one u64.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if n != std::mem::size_of::<u64>() as isize {
            return Err(ProbeError::last_os("reading the perf counter"));
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_or_says_why() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 64);
        match TlbMissCounter::open() {
            Ok(c) => {
                assert!(c.start().is_ok());
                let _ = std::hint::black_box(vec![1u8; 1 << 20]);
                assert!(c.stop().is_ok());
            }
            Err(ProbeError::Unavailable { why, .. }) => assert!(!why.is_empty()),
            Err(e) => unreachable!("unexpected error {e}"),
        }
    }
}
