//! A minimal safe wrapper of Linux userfaultfd: open (syscall, then `/dev/userfaultfd`), the API handshake,
//! registration of one [`Mapping`] in MISSING mode, reading fault events, and resolving them with `UFFDIO_COPY`.
//!
//! Of the kernel interface the `libc` crate has only `SYS_userfaultfd`; the structures and ioctl numbers below
//! are transcribed from `include/uapi/linux/userfaultfd.h`.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::mem::{Mapping, PAGE_BYTES};
use crate::ProbeError;

/// How often a waiter rechecks the stop flag, in case the eventfd write failed.
const STOP_RECHECK_MS: libc::c_int = 100;

/// `UFFD_API` in linux/userfaultfd.h: the only API version there is.
const UFFD_API: u64 = 0xAA;
/// `UFFD_USER_MODE_ONLY` (fcntl-style flag of userfaultfd(2), Linux >= 5.11): only faults from user mode are
/// reported, which unprivileged users may ask for even when `vm.unprivileged_userfaultfd = 0`.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
/// `UFFD_EVENT_PAGEFAULT`.
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
/// `UFFDIO_COPY_MODE_DONTWAKE`.
const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_REGISTER_MODE_MISSING`.
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
/// The `_UFFDIO_*` ioctl numbers; `uffdio_register.ioctls` is a bit mask of them.
const NR_REGISTER: u64 = 0x00;
const NR_UNREGISTER: u64 = 0x01;
const NR_WAKE: u64 = 0x02;
const NR_COPY: u64 = 0x03;
const NR_API: u64 = 0x3F;
/// The ioctl type of userfaultfd (`UFFDIO`, also `USERFAULTFD_IOC` of /dev/userfaultfd).
const UFFDIO: u64 = 0xAA;

// asm-generic/ioctl.h, and the variant of powerpc, mips and sparc (fewer size bits, other direction bits).
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "mips32r6",
    target_arch = "mips64r6",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
mod ioc {
    pub(super) const NONE: u64 = 0;
    pub(super) const WRITE: u64 = 1;
    pub(super) const READ: u64 = 2;
    pub(super) const DIRSHIFT: u64 = 30;
}
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "mips32r6",
    target_arch = "mips64r6",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
mod ioc {
    pub(super) const NONE: u64 = 1;
    pub(super) const WRITE: u64 = 4;
    pub(super) const READ: u64 = 2;
    pub(super) const DIRSHIFT: u64 = 29;
}

/// `_IOC(dir, type, nr, size)`.
const fn ioc(dir: u64, ty: u64, nr: u64, size: usize) -> u64 {
    (dir << ioc::DIRSHIFT) | ((size as u64) << 16) | (ty << 8) | nr
}

/// `UFFDIO_API = _IOWR(UFFDIO, _UFFDIO_API, struct uffdio_api)`.
const UFFDIO_API: u64 = ioc(
    ioc::READ | ioc::WRITE,
    UFFDIO,
    NR_API,
    std::mem::size_of::<UffdioApi>(),
);
/// `UFFDIO_REGISTER = _IOWR(UFFDIO, _UFFDIO_REGISTER, struct uffdio_register)`.
const UFFDIO_REGISTER: u64 = ioc(
    ioc::READ | ioc::WRITE,
    UFFDIO,
    NR_REGISTER,
    std::mem::size_of::<UffdioRegister>(),
);
/// `UFFDIO_UNREGISTER = _IOR(UFFDIO, _UFFDIO_UNREGISTER, struct uffdio_range)`.
const UFFDIO_UNREGISTER: u64 = ioc(
    ioc::READ,
    UFFDIO,
    NR_UNREGISTER,
    std::mem::size_of::<UffdioRange>(),
);
/// `UFFDIO_WAKE = _IOR(UFFDIO, _UFFDIO_WAKE, struct uffdio_range)`.
const UFFDIO_WAKE: u64 = ioc(
    ioc::READ,
    UFFDIO,
    NR_WAKE,
    std::mem::size_of::<UffdioRange>(),
);
/// `UFFDIO_COPY = _IOWR(UFFDIO, _UFFDIO_COPY, struct uffdio_copy)`.
const UFFDIO_COPY: u64 = ioc(
    ioc::READ | ioc::WRITE,
    UFFDIO,
    NR_COPY,
    std::mem::size_of::<UffdioCopy>(),
);
/// `USERFAULTFD_IOC_NEW = _IO(USERFAULTFD_IOC, 0x00)`, on /dev/userfaultfd (Linux >= 6.1).
const USERFAULTFD_IOC_NEW: u64 = ioc(ioc::NONE, UFFDIO, 0x00, 0);

/// `struct uffdio_api`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_range`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioRange {
    start: u64,
    len: u64,
}

/// `struct uffdio_register`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

/// `struct uffdio_copy`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// `struct uffd_msg` (32 bytes, packed in the header but naturally aligned): the event, then a union whose
/// `pagefault` member is `{ u64 flags; u64 address; u32 ptid; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UffdMsg {
    event: u8,
    reserved1: u8,
    reserved2: u16,
    reserved3: u32,
    arg: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<UffdMsg>() == 32);

impl UffdMsg {
    /// The faulting address (page-aligned, as no `UFFD_FEATURE_EXACT_ADDRESS` is asked for), when this is a
    /// page-fault event.
    pub(crate) fn pagefault_address(&self) -> Option<u64> {
        (self.event == UFFD_EVENT_PAGEFAULT).then_some(self.arg[1])
    }
}

/// The errno of an `io::Error` as its symbolic name, for messages.
fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::ENOSYS) => "ENOSYS".into(),
        Some(libc::ENOENT) => "ENOENT".into(),
        _ => e.to_string(),
    }
}

/// The userfaultfd(2) system call.
fn userfaultfd_syscall(flags: libc::c_int) -> Result<OwnedFd, io::Error> {
    // SAFETY: userfaultfd takes one integer argument and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A userfaultfd through /dev/userfaultfd (Linux >= 6.1), which access to the device node grants.
fn userfaultfd_device(flags: libc::c_int) -> Result<OwnedFd, io::Error> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")?;
    // SAFETY: USERFAULTFD_IOC_NEW takes its flags by value and returns a new descriptor or -1.
    let fd = unsafe {
        libc::ioctl(
            dev.as_raw_fd(),
            USERFAULTFD_IOC_NEW as libc::Ioctl,
            flags as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a userfaultfd and does the API handshake; an unavailable userfaultfd is
/// [`ProbeError::Unavailable`], with what to do about it.
fn open_handshaken() -> Result<OwnedFd, ProbeError> {
    let unavailable = |why: String| ProbeError::Unavailable {
        what: "userfaultfd",
        why,
    };
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let fd = match userfaultfd_syscall(flags | UFFD_USER_MODE_ONLY) {
        Ok(fd) => Ok(fd),
        // EINVAL: a kernel older than 5.11 without the flag; EPERM: user-mode-only refused as well.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EINVAL)) => {
            userfaultfd_syscall(flags)
        }
        Err(e) => Err(e),
    };
    let fd = match fd {
        Ok(fd) => fd,
        Err(syscall_err) => match userfaultfd_device(flags) {
            Ok(fd) => fd,
            Err(dev_err) => {
                let advice = match syscall_err.raw_os_error() {
                    Some(libc::ENOSYS) => {
                        "the kernel was built without CONFIG_USERFAULTFD, or a seccomp filter hides the call"
                    }
                    Some(libc::EPERM) => {
                        "the kernel or a seccomp filter refused it: run as root (or with CAP_SYS_PTRACE), set \
                         vm.unprivileged_userfaultfd=1, or give this user read-write access to /dev/userfaultfd"
                    }
                    _ => "check that the kernel has CONFIG_USERFAULTFD",
                };
                return Err(unavailable(format!(
                    "userfaultfd(2) failed ({}) and /dev/userfaultfd failed ({}): {advice}",
                    errno_name(&syscall_err),
                    errno_name(&dev_err)
                )));
            }
        },
    };
    let mut api = UffdioApi {
        api: UFFD_API,
        ..UffdioApi::default()
    };
    // SAFETY: UFFDIO_API reads and writes one `struct uffdio_api`, which `api` is, for the call's duration.
    if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API as libc::Ioctl, &raw mut api) } != 0 {
        let e = io::Error::last_os_error();
        return Err(unavailable(format!(
            "the UFFDIO_API handshake failed ({}): this kernel's userfaultfd API is not version 0xAA",
            errno_name(&e)
        )));
    }
    if api.ioctls & (1 << NR_REGISTER) == 0 {
        return Err(unavailable(
            "the kernel's userfaultfd offers no UFFDIO_REGISTER".into(),
        ));
    }
    Ok(fd)
}

/// Whether a userfaultfd can be opened here; the error says why not, in words a user can act on.
pub fn userfaultfd_available() -> Result<(), String> {
    match open_handshaken() {
        Ok(_) => Ok(()),
        Err(e) => Err(match e {
            ProbeError::Unavailable { why, .. } => why,
            other => other.to_string(),
        }),
    }
}

/// What resolving a fault did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// The page was copied in.
    Copied,
    /// The page was already there (a duplicate event).
    AlreadyMapped,
}

/// A userfaultfd with one [`Mapping`] registered in MISSING mode: first accesses to its pages block until
/// resolved through [`Userfaultfd::copy_page`]. Dropping it unregisters the range (which wakes any blocked
/// thread, whose access then completes as an ordinary fault) and closes the descriptor. It cannot outlive the
/// mapping, so it never unregisters an address range that was reused.
#[derive(Debug)]
pub(crate) struct Userfaultfd<'m> {
    fd: OwnedFd,
    start: u64,
    len: u64,
    _mapping: PhantomData<&'m Mapping>,
}

impl<'m> Userfaultfd<'m> {
    /// Opens a userfaultfd and registers `mapping` in MISSING mode. Pages of the mapping already present are not
    /// reported; only first touches after this are.
    pub(crate) fn register(mapping: &'m Mapping) -> Result<Self, ProbeError> {
        let fd = open_handshaken()?;
        let start = mapping.ptr() as u64;
        let len = mapping.len() as u64;
        let mut reg = UffdioRegister {
            range: UffdioRange { start, len },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one `struct uffdio_register`, which `reg` is; the range is a
        // private anonymous mapping we own for at least `'m`.
        if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_REGISTER as libc::Ioctl, &raw mut reg) } != 0
        {
            return Err(ProbeError::last_os(format!(
                "UFFDIO_REGISTER of {len} bytes in MISSING mode"
            )));
        }
        let this = Userfaultfd {
            fd,
            start,
            len,
            _mapping: PhantomData,
        };
        if reg.ioctls & (1 << NR_COPY) == 0 {
            // `this` drops here, unregistering.
            return Err(ProbeError::Unavailable {
                what: "userfaultfd",
                why: "the kernel offers no UFFDIO_COPY on an anonymous mapping".into(),
            });
        }
        Ok(this)
    }

    /// Reads as many queued events as fit into `buf` in one read(2) (the descriptor is non-blocking): 0 when none
    /// is queued.
    pub(crate) fn read_events(&self, buf: &mut [UffdMsg]) -> Result<usize, ProbeError> {
        let bytes = std::mem::size_of_val(buf);
        loop {
            // SAFETY: `buf` is `bytes` writable bytes of plain integers, any bit pattern of which is valid.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), bytes) };
            if n >= 0 {
                // The kernel hands out whole messages only.
                return Ok(n as usize / std::mem::size_of::<UffdMsg>());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(0),
                Some(libc::EINTR) => continue,
                _ => {
                    return Err(ProbeError::Os {
                        what: "read of userfaultfd events".into(),
                        source: e,
                    })
                }
            }
        }
    }

    /// Checks that `[addr, addr + len)` lies in the registered range and is page-aligned.
    fn check_range(&self, addr: u64, len: u64) -> Result<(), ProbeError> {
        let page = PAGE_BYTES as u64;
        let inside = addr >= self.start
            && len > 0
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.start + self.len);
        if !inside || addr % page != 0 || len % page != 0 {
            return Err(ProbeError::InvalidInput(format!(
                "{len} bytes at {addr:#x} are not whole pages of the registered range {:#x}+{}",
                self.start, self.len
            )));
        }
        Ok(())
    }

    /// Resolves the missing page at `addr` (page-aligned, inside the registered mapping) with a copy of `src`
    /// (one page), without waking the threads that wait on it: call [`Userfaultfd::wake`] next, so that the
    /// moment the page was installed can be told apart from the moment its waiters resume. A page that is
    /// already there (`EEXIST`, from a duplicate event) is not an error; `EAGAIN` (the address space was
    /// changing, or a partial copy) is retried.
    pub(crate) fn copy_page(&self, addr: u64, src: &[u8]) -> Result<Resolved, ProbeError> {
        let page = PAGE_BYTES as u64;
        if src.len() != PAGE_BYTES {
            return Err(ProbeError::InvalidInput(format!(
                "a userfaultfd source page is {PAGE_BYTES} bytes, not {}",
                src.len()
            )));
        }
        self.check_range(addr, page)?;
        let mut done = 0u64;
        while done < page {
            let mut copy = UffdioCopy {
                dst: addr + done,
                src: src.as_ptr() as u64 + done,
                len: page - done,
                mode: UFFDIO_COPY_MODE_DONTWAKE,
                copy: 0,
            };
            // SAFETY: UFFDIO_COPY reads and writes one `struct uffdio_copy`, which `copy` is. The kernel reads
            // `len` bytes from `src` (inside the borrowed slice) and fills only missing pages of our registered
            // mapping, which no Rust reference views (it is borrowed shared by `self`, and `Mapping` hands out
            // references only through `&mut`).
            let rc = unsafe {
                libc::ioctl(
                    self.fd.as_raw_fd(),
                    UFFDIO_COPY as libc::Ioctl,
                    &raw mut copy,
                )
            };
            if rc == 0 {
                return Ok(Resolved::Copied);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EEXIST) => return Ok(Resolved::AlreadyMapped),
                Some(libc::EAGAIN) => {
                    // `copy` holds the bytes copied before the interruption, or a negative errno.
                    if copy.copy > 0 {
                        done += copy.copy as u64;
                    }
                    std::thread::yield_now();
                }
                Some(libc::EINTR) => {}
                _ => {
                    return Err(ProbeError::Os {
                        what: format!("UFFDIO_COPY of the page at {addr:#x}"),
                        source: e,
                    })
                }
            }
        }
        Ok(Resolved::Copied)
    }

    /// Wakes the threads waiting on `[addr, addr + len)`.
    pub(crate) fn wake(&self, addr: u64, len: u64) -> Result<(), ProbeError> {
        self.check_range(addr, len)?;
        let mut range = UffdioRange { start: addr, len };
        // SAFETY: UFFDIO_WAKE reads one `struct uffdio_range`, which `range` is.
        if unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                UFFDIO_WAKE as libc::Ioctl,
                &raw mut range,
            )
        } != 0
        {
            return Err(ProbeError::last_os(format!(
                "UFFDIO_WAKE of {len} bytes at {addr:#x}"
            )));
        }
        Ok(())
    }

    /// Unregisters the mapping, which wakes every thread blocked on one of its faults; their accesses then
    /// complete as ordinary faults. Idempotent.
    pub(crate) fn unregister(&self) -> Result<(), ProbeError> {
        let mut range = UffdioRange {
            start: self.start,
            len: self.len,
        };
        // SAFETY: UFFDIO_UNREGISTER reads one `struct uffdio_range`, which `range` is; the range is our mapping.
        if unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                UFFDIO_UNREGISTER as libc::Ioctl,
                &raw mut range,
            )
        } != 0
        {
            return Err(ProbeError::last_os("UFFDIO_UNREGISTER"));
        }
        Ok(())
    }

    /// Waits until a fault event is queued or `stop` is signalled (or a poll timeout passes: then neither may be
    /// set).
    pub(crate) fn wait(&self, stop: &StopSignal) -> Result<Ready, ProbeError> {
        let mut fds = [
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: `fds` is an array of two initialised pollfd structures, valid for the call.
            let n =
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, STOP_RECHECK_MS) };
            if n >= 0 {
                let bad = libc::POLLERR | libc::POLLNVAL;
                if (fds[0].revents | fds[1].revents) & bad != 0 {
                    return Err(ProbeError::Os {
                        what: "poll of userfaultfd".into(),
                        source: io::Error::other("a descriptor reported an error"),
                    });
                }
                return Ok(Ready {
                    events: fds[0].revents & (libc::POLLIN | libc::POLLHUP) != 0,
                    stop: fds[1].revents & libc::POLLIN != 0 || stop.is_signalled(),
                });
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(ProbeError::Os {
                    what: "poll of userfaultfd".into(),
                    source: e,
                });
            }
        }
    }
}

impl Drop for Userfaultfd<'_> {
    fn drop(&mut self) {
        // Best effort: closing the descriptor below releases the registration too.
        if let Err(e) = self.unregister() {
            tracing::debug!("userfaultfd unregister on drop: {e}");
        }
    }
}

/// What [`Userfaultfd::wait`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready {
    /// Fault events are queued.
    pub(crate) events: bool,
    /// Stop was signalled.
    pub(crate) stop: bool,
}

/// A level-triggered stop signal for a thread in [`Userfaultfd::wait`]: an eventfd that wakes its poll, and a flag
/// that the poll's timeout rechecks, so that the waiter stops even if the eventfd write were to fail.
#[derive(Debug)]
pub(crate) struct StopSignal {
    fd: OwnedFd,
    flag: AtomicBool,
}

impl StopSignal {
    pub(crate) fn new() -> Result<Self, ProbeError> {
        // SAFETY: eventfd takes an initial value and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(ProbeError::last_os("eventfd"));
        }
        Ok(StopSignal {
            // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            flag: AtomicBool::new(false),
        })
    }

    /// Whether stop was signalled.
    pub(crate) fn is_signalled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Signals stop; stays signalled. The flag is set first, so a failed write only delays the waiter by one
    /// poll timeout.
    pub(crate) fn signal(&self) -> Result<(), ProbeError> {
        self.flag.store(true, Ordering::Release);
        let one = 1u64.to_ne_bytes();
        loop {
            // SAFETY: writes the 8 bytes of `one`, which live for the call.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            if n == one.len() as isize {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The counter is full: it is signalled already.
                Some(libc::EAGAIN) => return Ok(()),
                _ => {
                    return Err(ProbeError::Os {
                        what: "write to the stop eventfd".into(),
                        source: e,
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn ioctl_numbers_match_the_header() {
        // As the C preprocessor computes them on x86-64.
        assert_eq!(UFFDIO_API, 0xc018_aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020_aa00);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010_aa01);
        assert_eq!(UFFDIO_WAKE, 0x8010_aa02);
        assert_eq!(UFFDIO_COPY, 0xc028_aa03);
        assert_eq!(USERFAULTFD_IOC_NEW, 0xaa00);
    }

    #[test]
    fn a_fault_is_resolved_by_a_handler_thread() {
        let mut mapping = Mapping::new(2 * PAGE_BYTES, false).unwrap();
        let uffd = match Userfaultfd::register(&mapping) {
            Ok(u) => u,
            Err(ProbeError::Unavailable { why, .. }) => {
                eprintln!("skipped: userfaultfd unavailable: {why}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let src: Vec<u8> = (0..PAGE_BYTES).map(|i| (i % 251) as u8).collect();
        let stop = StopSignal::new().unwrap();
        let base = mapping.ptr() as u64;
        let second = mapping.ptr() as usize + PAGE_BYTES;
        let (first_word, copied) = std::thread::scope(|s| {
            let handler = s.spawn(|| -> Result<usize, ProbeError> {
                let mut buf = [UffdMsg::default(); 8];
                let mut copied = 0;
                loop {
                    let ready = uffd.wait(&stop)?;
                    if ready.events {
                        let n = uffd.read_events(&mut buf)?;
                        for msg in &buf[..n] {
                            if let Some(addr) = msg.pagefault_address() {
                                if uffd.copy_page(addr, &src)? == Resolved::Copied {
                                    copied += 1;
                                }
                                uffd.wake(addr, PAGE_BYTES as u64)?;
                            }
                        }
                    }
                    if ready.stop {
                        return Ok(copied);
                    }
                }
            });
            let word = s
                .spawn(move || {
                    // SAFETY: an aligned read inside our mapping, which is alive and viewed by no reference; it
                    // blocks until the handler copies the page in.
                    unsafe { (second as *const u64).read_volatile() }
                })
                .join()
                .unwrap();
            stop.signal().unwrap();
            (word, handler.join().unwrap().unwrap())
        });
        assert_eq!(copied, 1);
        assert_eq!(first_word, u64::from_ne_bytes(src[..8].try_into().unwrap()));
        // The first page, never touched, is still missing: resolve it here, then again (a duplicate event).
        assert_eq!(uffd.copy_page(base, &src).unwrap(), Resolved::Copied);
        assert_eq!(uffd.copy_page(base, &src).unwrap(), Resolved::AlreadyMapped);
        assert!(uffd.copy_page(base + 1, &src).is_err());
        assert!(uffd.copy_page(base + 2 * PAGE_BYTES as u64, &src).is_err());
        assert!(uffd.copy_page(base, &src[1..]).is_err());
        drop(uffd);
        // Both pages hold whole copies of the source.
        let bytes: Vec<u8> = mapping
            .words_mut()
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        assert_eq!(&bytes[..PAGE_BYTES], &src[..]);
        assert_eq!(&bytes[PAGE_BYTES..], &src[..]);
    }

    #[test]
    fn availability_check_answers() {
        // Either way it must answer, not panic; where it is unavailable the reason is non-empty.
        if let Err(why) = userfaultfd_available() {
            assert!(!why.is_empty());
        }
    }
}
