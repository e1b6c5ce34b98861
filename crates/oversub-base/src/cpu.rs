//! Pinning threads to CPUs, in one place.

use std::io;

/// Pins the calling thread to one CPU (`sched_setaffinity(0, …)`). Err with the OS error.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    pin_thread_to_cpu(0, cpu)
}

/// Pins thread `tid` (0: the calling thread) to one CPU. Err with the OS error (`EINVAL` for a CPU number at or
/// above `CPU_SETSIZE`).
pub fn pin_thread_to_cpu(tid: libc::pid_t, cpu: usize) -> io::Result<()> {
    // CPU_SETSIZE is a small positive constant (1024).
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data, so all-zero bytes are a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE (checked above), so CPU_SET writes inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; the call only reads it.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_cpu_is_einval() {
        let e = pin_to_cpu(1 << 20).err().map(|e| e.raw_os_error());
        assert_eq!(e, Some(Some(libc::EINVAL)));
    }
}
