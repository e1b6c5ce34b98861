//! `oversub-testkit`: what tests need of the machine, asked one way (tokio-rs/io-uring's `require!` pattern).
//!
//! A test that needs io_uring, userfaultfd, a writable cgroup v2 subtree, loop devices, root or a GPU starts with
//! [`require!`]: where the need is not met it prints `skipping <test>: <reason>` to stderr and returns, so the test
//! passes without checking anything (cargo has no "skipped" outcome). The probes ask the project's own checks where
//! one exists (the io_uring engine's NOP round trip, the fault probe's userfaultfd handshake, the cuda backend's
//! driver check) so that a test and the library agree on what "available" means.
//!
//! Only tests depend on this crate (`[dev-dependencies]`); it is never published and is the one oversub crate that
//! prints.

use std::ffi::CString;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod fork;

/// What [`require!`] accepts: a condition (`bool`), a value that may be missing (`Option`), or an outcome whose
/// error says why not (`Result`). The value of a met requirement is what `require!` evaluates to.
pub trait Requirement {
    /// What `require!` yields when the requirement is met.
    type Value;
    /// The value, or why not (`None` when the requirement has nothing to add to the test's reason).
    fn check(self) -> Result<Self::Value, Option<String>>;
}

impl Requirement for bool {
    type Value = ();
    fn check(self) -> Result<(), Option<String>> {
        if self {
            Ok(())
        } else {
            Err(None)
        }
    }
}

impl<T> Requirement for Option<T> {
    type Value = T;
    fn check(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Requirement for Result<T, E> {
    type Value = T;
    fn check(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// Skips the calling test unless `requirement` is met: prints `skipping <test>: <reason>` (with the probe's own
/// reason after it, when it gives one) to stderr and returns from the test. Otherwise evaluates to the
/// requirement's value (`()` for a `bool`, the `Some` or `Ok` value otherwise).
///
/// ```ignore
/// require!(oversub_testkit::userfaultfd_available(), "userfaultfd unavailable");
/// let dev = require!(LoopDevice::attach(&image), "no loop device can be attached here");
/// ```
#[macro_export]
macro_rules! require {
    ($requirement:expr, $($reason:tt)+) => {
        match $crate::Requirement::check($requirement) {
            ::std::result::Result::Ok(value) => value,
            ::std::result::Result::Err(why) => {
                fn here() {}
                $crate::report_skip(
                    ::std::any::type_name_of_val(&here),
                    &::std::format!($($reason)+),
                    why.as_deref(),
                );
                return;
            }
        }
    };
}

/// Prints the skip line of [`require!`]; `here` is the type name of a function nested in the test.
#[doc(hidden)]
pub fn report_skip(here: &str, reason: &str, why: Option<&str>) {
    eprintln!("{}", skip_line(here, reason, why));
}

fn skip_line(here: &str, reason: &str, why: Option<&str>) -> String {
    let path = here.strip_suffix("::here").unwrap_or(here);
    // Drop the test binary's crate name: `stripe::striped_over_two_loop_devices` reads as the test's name.
    let test = path.split_once("::").map_or(path, |(_, rest)| rest);
    match why {
        Some(why) if !why.is_empty() => format!("skipping {test}: {reason} ({why})"),
        _ => format!("skipping {test}: {reason}"),
    }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every I/O engine this machine has, for tests that run their body on each: psync (queue depth `psync_depth`)
/// always, io_uring (`uring_depth`) where the kernel lets us (it says so on stderr where not).
// A test without the psync engine has nothing to run on: failing to make it fails the test.
#[allow(clippy::expect_used)]
pub fn engines(
    psync_depth: usize,
    uring_depth: usize,
) -> Vec<(&'static str, std::sync::Arc<dyn oversub_io::IoEngine>)> {
    let psync = oversub_io::PsyncEngine::new(psync_depth).expect("the psync engine");
    let mut v: Vec<(&'static str, std::sync::Arc<dyn oversub_io::IoEngine>)> =
        vec![("psync", std::sync::Arc::new(psync))];
    match oversub_io::UringEngine::new(uring_depth) {
        Ok(e) => v.push(("io_uring", std::sync::Arc::new(e))),
        Err(e) => eprintln!("io_uring unavailable here, testing psync only: {e}"),
    }
    v
}

/// `len` random-looking bytes fixed by `seed` (xorshift; a different seed gives different bytes).
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Whether io_uring works here: a ring can be set up and a NOP makes the round trip (the io_uring engine's own
/// check; seccomp may allow `io_uring_setup` and still refuse `io_uring_enter`).
pub fn io_uring_usable() -> Result<(), String> {
    oversub_io::UringEngine::new(2)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Whether a userfaultfd can be opened and handshaken here (the fault probe's own check).
pub fn userfaultfd_available() -> Result<(), String> {
    oversub_probe::fault::userfaultfd_available()
}

/// Whether this process may make memory cgroups: cgroup v2 is mounted at `/sys/fs/cgroup`, the process's own
/// cgroup there is writable, and it offers the memory controller.
pub fn cgroup_v2_delegated() -> Result<(), String> {
    let root = Path::new("/sys/fs/cgroup");
    if !root.join("cgroup.controllers").exists() {
        return Err("cgroup v2 is not mounted at /sys/fs/cgroup".into());
    }
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 group")?;
    let dir = root.join(rel.trim_start_matches('/'));
    if !writable(&dir) {
        return Err(format!("{} is not writable (not delegated)", dir.display()));
    }
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|e| format!("{}: {e}", dir.join("cgroup.controllers").display()))?;
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Err(format!("{} offers no memory controller", dir.display()));
    }
    Ok(())
}

/// Whether loop devices can be attached here: `/dev/loop-control` exists and this process may open it for writing
/// (root, or a member of its group where the node allows). `losetup` itself is [`LoopDevice::attach`]'s to find.
pub fn loop_devices_usable() -> Result<(), String> {
    let control = Path::new("/dev/loop-control");
    if !control.exists() {
        return Err("no /dev/loop-control".into());
    }
    if !writable(control) {
        return Err("/dev/loop-control is not writable (needs root)".into());
    }
    Ok(())
}

/// Whether the tests that need a real GPU were asked for: `OVERSUB_TEST_CUDA=1`. Opting in means the GPU must
/// work: a test that requires this and then finds no driver fails rather than skips, so a broken driver on a GPU
/// machine is not mistaken for a machine without one.
pub fn cuda_opted_in() -> Result<(), String> {
    if std::env::var("OVERSUB_TEST_CUDA").as_deref() == Ok("1") {
        Ok(())
    } else {
        Err("the GPU tests are opt-in: set OVERSUB_TEST_CUDA=1".into())
    }
}

/// Whether the CUDA driver loads and sees a device (the cuda backend's own check; creates no context).
pub fn cuda_driver_loads() -> Result<(), String> {
    oversub_accel::cuda::CudarcDriver::available().map_err(|e| e.to_string())
}

fn writable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The Python interpreter the CLI starts for `--ray` (`$OVERSUB_PYTHON`, else `python3`), when it can import
/// `modules` (as an import statement lists them: `"oversub.sweep, ray"`); otherwise why not (the import's last
/// error line).
pub fn python_with(modules: &str) -> Result<String, String> {
    let py = std::env::var("OVERSUB_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&py)
        .args(["-c", &format!("import {modules}")])
        .output()
        .map_err(|e| format!("`{py}` cannot be started: {e}"))?;
    if out.status.success() {
        return Ok(py);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "`{py}`: {} (set OVERSUB_PYTHON)",
        err.lines().last().unwrap_or("import failed").trim()
    ))
}

/// A loop device over an image file, attached with `losetup` and detached on drop, so a failing assertion leaves
/// nothing attached.
#[derive(Debug)]
pub struct LoopDevice(PathBuf);

impl LoopDevice {
    /// Attaches `image` to the first free loop device; `None` where that fails (no root, no `losetup`, no free
    /// device).
    pub fn attach(image: &Path) -> Option<LoopDevice> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(image)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let dev = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (!dev.is_empty()).then(|| LoopDevice(PathBuf::from(dev)))
    }

    /// The device node (`/dev/loopN`).
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skip_line_names_the_test_and_both_reasons() {
        assert_eq!(
            skip_line("stripe::striped::here", "no loop device", None),
            "skipping striped: no loop device"
        );
        assert_eq!(
            skip_line(
                "probe::a::b::here",
                "userfaultfd unavailable",
                Some("EPERM")
            ),
            "skipping a::b: userfaultfd unavailable (EPERM)"
        );
    }

    fn skipped_unless(met: bool, ran: &mut bool) {
        require!(met, "the condition is {met}");
        *ran = true;
    }

    fn value_or_skip(v: Option<u32>, out: &mut u32) {
        *out = require!(v, "no value");
    }

    #[test]
    fn require_returns_early_or_yields_the_value() {
        let mut ran = false;
        skipped_unless(false, &mut ran);
        assert!(!ran);
        skipped_unless(true, &mut ran);
        assert!(ran);
        let mut out = 0;
        value_or_skip(None, &mut out);
        assert_eq!(out, 0);
        value_or_skip(Some(7), &mut out);
        assert_eq!(out, 7);
    }

    #[test]
    fn probes_answer_without_panicking() {
        // Whatever this machine offers, every probe gives a verdict (and a reason when it says no).
        for verdict in [
            io_uring_usable(),
            userfaultfd_available(),
            cgroup_v2_delegated(),
            loop_devices_usable(),
            cuda_driver_loads(),
        ] {
            if let Err(why) = verdict {
                assert!(!why.is_empty());
            }
        }
    }
}
