//! Memory cgroups: where an `oversub_tenants::swap::Plan` is applied to real processes (the paper's case study, Sec. V-C).
//!
//! Linux cannot run a task "on storage directly", but a memory cgroup whose limit is below what the task touches
//! keeps the rest of it out of memory: its own page cache and anonymous memory are reclaimed against its limit
//! instead of against everybody else's. This module finds the memory controller ([`Controller::detect`]), creates
//! groups ([`Controller::create_group`], [`Group::child`]), limits them ([`Group::set_limit`]), starts commands
//! inside them ([`Group::spawn`]) and removes them again, processes included, when a [`Group`] is dropped.
//!
//! Both cgroup versions are supported: v2 (a `cgroup2` mount whose `cgroup.controllers` lists `memory`; files
//! `memory.max`, `memory.swap.max`, `memory.current`, `memory.peak`, `cgroup.kill`) and v1 (a `cgroup` mount with
//! the `memory` option; files `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`, `memory.usage_in_bytes`,
//! `memory.max_usage_in_bytes`). Parsing of `/proc/self/mountinfo`, `/proc/mounts` and `/proc/self/cgroup` is done
//! by pure functions ([`parse_mountinfo`], [`parse_mounts`], [`parse_proc_cgroup`]); [`Controller::detect_with`]
//! takes their text and a file-system root, so that detection can be tried on fixtures.
//!
//! ```no_run
//! # fn main() -> Result<(), oversub_lab::tasks::cgroup::CgroupError> {
//! use oversub_lab::tasks::cgroup::Controller;
//!
//! let controller = Controller::detect()?; // which version, where, and this process's own memory cgroup
//! let run = controller.create_group("example")?; // a group under this process's own memory cgroup
//! run.set_limit(Some(512 << 20))?; // 512 MiB for everything below it
//! let task = run.child("task")?;
//! let mut cmd = std::process::Command::new("sh");
//! cmd.args(["-c", "cat /proc/self/cgroup"]);
//! let exit = task.spawn(cmd)?.wait()?; // in the group from its first instruction on
//! println!("{:?} after {:?}, peak {:?} bytes", exit.status, exit.elapsed, task.peak()?);
//! # Ok(())
//! # } // both groups are removed here, any process left in them killed first
//! ```

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Everything the cgroup runner can refuse or fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CgroupError {
    /// A name or a kernel file that cannot be used (a bad group name, an unparsable `/proc/self/cgroup`).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The machine has no usable memory cgroup controller.
    #[error("no memory cgroup controller: {0}")]
    NoCgroup(String),
    /// The memory cgroup controller is there but we may not use it.
    #[error("no permission to manage memory cgroups under {path}: {source} (run as root, or delegate a cgroup to this user)")]
    Permission {
        /// The cgroup directory or file.
        path: String,
        /// The refusal.
        #[source]
        source: std::io::Error,
    },
    /// A system call or file operation failed.
    #[error("{op} {path}: {source}")]
    Os {
        /// What was being done.
        op: &'static str,
        /// The file or command it was about.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// How long dropping a group waits for its processes to die and for the kernel to let it be removed.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A v1 limit at or above this is "unlimited" (the kernel shows `PAGE_COUNTER_MAX` pages as about 2^63 bytes).
const V1_UNLIMITED: u64 = 1 << 62;

/// The cgroup interface version of the memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    /// The legacy hierarchy: one mount per controller (`cgroup` file system with the `memory` option).
    V1,
    /// The unified hierarchy (`cgroup2` file system).
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V1 => "cgroup v1",
            Version::V2 => "cgroup v2",
        })
    }
}

/// A mounted cgroup hierarchy, as listed in `/proc/self/mountinfo` or `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// `cgroup` (v1) or `cgroup2` (v2).
    pub version: Version,
    /// The cgroup the mount shows at its top (`/` unless a sub-tree was bind-mounted; `/proc/mounts` does not say,
    /// and `/` is assumed there).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The super-block options: for v1 they name the controllers bound to the hierarchy (`memory`, `cpu`, ...).
    pub options: Vec<String>,
}

impl CgroupMount {
    /// Whether the super-block options include `option` (for v1, whether that controller is bound here).
    pub fn has_option(&self, option: &str) -> bool {
        self.options.iter().any(|o| o == option)
    }
}

/// Decodes the octal escapes (`\040` for a space, `\011`, `\012`, `\134`) the kernel uses in mount paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(b) = u8::try_from(v) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn version_of(fs_type: &str) -> Option<Version> {
    match fs_type {
        "cgroup" => Some(Version::V1),
        "cgroup2" => Some(Version::V2),
        _ => None,
    }
}

fn split_options(options: &str) -> Vec<String> {
    options
        .split(',')
        .filter(|o| !o.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The cgroup mounts in the text of `/proc/self/mountinfo`
/// (`ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS` per line). Other file
/// systems and lines that do not have this shape are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split_whitespace().collect();
            let tail: Vec<&str> = after.split_whitespace().collect();
            if fields.len() < 6 || tail.len() < 2 {
                return None;
            }
            let version = version_of(tail[0])?;
            Some(CgroupMount {
                version,
                root: unescape(fields[3]),
                mount_point: PathBuf::from(unescape(fields[4])),
                options: split_options(tail.get(2).copied().unwrap_or("")),
            })
        })
        .collect()
}

/// The cgroup mounts in the text of `/proc/mounts` (`SOURCE MOUNT-POINT FSTYPE OPTIONS DUMP PASS` per line), the
/// fallback where `/proc/self/mountinfo` cannot be read. The mounted root is taken to be `/`.
pub fn parse_mounts(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 4 {
                return None;
            }
            let version = version_of(fields[2])?;
            Some(CgroupMount {
                version,
                root: "/".into(),
                mount_point: PathBuf::from(unescape(fields[1])),
                options: split_options(fields[3]),
            })
        })
        .collect()
}

/// One line of `/proc/self/cgroup`: the process's cgroup in one hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The hierarchy ID; 0 for the unified (v2) hierarchy.
    pub hierarchy: u32,
    /// The controllers bound to the hierarchy (`memory`, `name=systemd`, ...); empty for v2.
    pub controllers: Vec<String>,
    /// The cgroup's path, relative to the hierarchy's root (or to the cgroup namespace's root).
    pub path: String,
}

/// Parses the text of `/proc/self/cgroup` (`ID:CONTROLLERS:PATH` per line). Blank lines are skipped; any other
/// line without that shape is an error.
pub fn parse_proc_cgroup(text: &str) -> Result<Vec<Membership>, CgroupError> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let bad = || {
                CgroupError::InvalidInput(format!(
                    "a /proc/self/cgroup line must read ID:CONTROLLERS:PATH, not {line:?}"
                ))
            };
            let mut parts = line.splitn(3, ':');
            let id = parts.next().ok_or_else(bad)?;
            let controllers = parts.next().ok_or_else(bad)?;
            let path = parts.next().ok_or_else(bad)?;
            Ok(Membership {
                hierarchy: id.trim().parse().map_err(|_| bad())?,
                controllers: split_options(controllers),
                path: path.to_owned(),
            })
        })
        .collect()
}

/// `path` (absolute) under `fs_root`: `/sys/fs/cgroup` under `/tmp/x` is `/tmp/x/sys/fs/cgroup`.
fn under(fs_root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix("/") {
        Ok(rel) => fs_root.join(rel),
        Err(_) => fs_root.join(path),
    }
}

/// The directory of the cgroup `cgroup_path` in a hierarchy mounted at `mount_dir` showing `mount_root`.
fn cgroup_dir(mount_dir: &Path, mount_root: &str, cgroup_path: &str) -> PathBuf {
    let rel = if mount_root == "/" {
        cgroup_path
    } else {
        // A bind-mounted sub-tree: the process's path starts with it unless a cgroup namespace already hid it.
        cgroup_path
            .strip_prefix(mount_root)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .unwrap_or(cgroup_path)
    };
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount_dir.to_path_buf()
    } else {
        mount_dir.join(rel)
    }
}

/// Maps an I/O error on a cgroup file to the error a user can act on: refusals (`EACCES`, `EPERM`, `EROFS`)
/// become [`CgroupError::Permission`], anything else [`CgroupError::Os`].
pub fn classify(op: &'static str, path: &Path, source: io::Error) -> CgroupError {
    let refused = source.kind() == io::ErrorKind::PermissionDenied
        || source.raw_os_error() == Some(libc::EROFS)
        || source.raw_os_error() == Some(libc::EPERM);
    if refused {
        CgroupError::Permission {
            path: path.display().to_string(),
            source,
        }
    } else {
        CgroupError::Os {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

fn read_text(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|e| classify("read", path, e))
}

/// Writes a control file in one write(2), as the kernel expects; never creates one.
fn write_text(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| classify("write", path, e))
}

fn read_u64(path: &Path) -> Result<u64, CgroupError> {
    let text = read_text(path)?;
    text.trim().parse().map_err(|_| CgroupError::Os {
        op: "parse",
        path: path.display().to_string(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected a byte count, found {:?}", text.trim()),
        ),
    })
}

/// The memory controller this process can use, and where its own memory cgroup is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controller {
    /// v1 or v2.
    pub version: Version,
    /// Where the hierarchy is mounted.
    pub mount_point: PathBuf,
    /// This process's memory cgroup, relative to the hierarchy (as `/proc/self/cgroup` shows it).
    pub cgroup: String,
    /// The directory of that cgroup: groups are created below it.
    pub dir: PathBuf,
    /// What else detection found, for `--detect` and error messages (a v2 hierarchy without the memory
    /// controller on a hybrid machine, ...).
    pub notes: Vec<String>,
}

static NEXT_GROUP: AtomicU64 = AtomicU64::new(0);

impl Controller {
    /// Finds the memory controller from `/proc/self/mountinfo` (or `/proc/mounts`) and `/proc/self/cgroup`.
    /// [`CgroupError::NoCgroup`] says what was found instead when there is none this process can use.
    pub fn detect() -> Result<Controller, CgroupError> {
        let mounts = match fs::read_to_string("/proc/self/mountinfo") {
            Ok(text) => text,
            Err(e) => {
                let text = fs::read_to_string("/proc/mounts").map_err(|_| {
                    CgroupError::NoCgroup(format!(
                        "cannot read /proc/self/mountinfo ({e}) nor /proc/mounts: is /proc mounted?"
                    ))
                })?;
                return Self::detect_in(
                    &parse_mounts(&text),
                    &Self::read_proc_cgroup()?,
                    Path::new("/"),
                );
            }
        };
        Self::detect_with(&mounts, &Self::read_proc_cgroup()?, Path::new("/"))
    }

    fn read_proc_cgroup() -> Result<String, CgroupError> {
        fs::read_to_string("/proc/self/cgroup").map_err(|e| {
            CgroupError::NoCgroup(format!(
                "cannot read /proc/self/cgroup ({e}): the kernel has no cgroup support, or /proc is not mounted"
            ))
        })
    }

    /// Detection from the text of `/proc/self/mountinfo` and `/proc/self/cgroup`, with the mount points looked up
    /// under `fs_root` (`/` for the real system; a fixture directory in tests). Only `cgroup.controllers` (v2) and
    /// the existence of the cgroup directory are read from there.
    pub fn detect_with(
        mountinfo: &str,
        proc_cgroup: &str,
        fs_root: &Path,
    ) -> Result<Controller, CgroupError> {
        Self::detect_in(&parse_mountinfo(mountinfo), proc_cgroup, fs_root)
    }

    fn detect_in(
        mounts: &[CgroupMount],
        proc_cgroup: &str,
        fs_root: &Path,
    ) -> Result<Controller, CgroupError> {
        let memberships = parse_proc_cgroup(proc_cgroup)?;
        let mut notes = Vec::new();
        if mounts.is_empty() {
            return Err(CgroupError::NoCgroup(
                "no cgroup or cgroup2 file system is mounted (the mount table lists none); mount one, e.g. \
                 `mount -t cgroup2 none /sys/fs/cgroup`"
                    .into(),
            ));
        }

        // v2 first: the unified hierarchy, if the memory controller is available to this process's cgroup there.
        let unified = memberships.iter().find(|m| m.hierarchy == 0);
        for mount in mounts.iter().filter(|m| m.version == Version::V2) {
            let Some(member) = unified else {
                notes.push(format!(
                    "cgroup2 is mounted at {} but /proc/self/cgroup has no 0::PATH line for it",
                    mount.mount_point.display()
                ));
                continue;
            };
            let dir = cgroup_dir(
                &under(fs_root, &mount.mount_point),
                &mount.root,
                &member.path,
            );
            let listed = dir.join("cgroup.controllers");
            match fs::read_to_string(&listed) {
                Ok(text) if text.split_whitespace().any(|c| c == "memory") => {
                    return Ok(Controller {
                        version: Version::V2,
                        mount_point: mount.mount_point.clone(),
                        cgroup: member.path.clone(),
                        dir,
                        notes,
                    });
                }
                Ok(text) => notes.push(format!(
                    "cgroup2 at {}: the memory controller is not available to cgroup {} (its cgroup.controllers \
                     lists {}): it is bound to a v1 hierarchy, or not enabled in the parent's cgroup.subtree_control",
                    mount.mount_point.display(),
                    member.path,
                    if text.trim().is_empty() {
                        "nothing".to_string()
                    } else {
                        format!("only \"{}\"", text.trim())
                    }
                )),
                Err(e) => notes.push(format!(
                    "cgroup2 at {}: cannot read {}: {e}",
                    mount.mount_point.display(),
                    listed.display()
                )),
            }
        }

        // v1: a hierarchy with the memory controller bound to it.
        let v1_memory: Vec<&CgroupMount> = mounts
            .iter()
            .filter(|m| m.version == Version::V1 && m.has_option("memory"))
            .collect();
        if v1_memory.is_empty() {
            notes.push("no cgroup (v1) hierarchy has the memory option".into());
        }
        for mount in v1_memory {
            let Some(member) = memberships
                .iter()
                .find(|m| m.hierarchy != 0 && m.controllers.iter().any(|c| c == "memory"))
            else {
                notes.push(format!(
                    "cgroup v1 memory is mounted at {} but /proc/self/cgroup has no memory line",
                    mount.mount_point.display()
                ));
                continue;
            };
            let dir = cgroup_dir(
                &under(fs_root, &mount.mount_point),
                &mount.root,
                &member.path,
            );
            if dir.is_dir() {
                return Ok(Controller {
                    version: Version::V1,
                    mount_point: mount.mount_point.clone(),
                    cgroup: member.path.clone(),
                    dir,
                    notes,
                });
            }
            notes.push(format!(
                "cgroup v1 memory at {}: this process's cgroup {} has no directory {} (mounted from another \
                 namespace?)",
                mount.mount_point.display(),
                member.path,
                dir.display()
            ));
        }
        Err(CgroupError::NoCgroup(notes.join("; ")))
    }

    /// A controller whose own cgroup directory is `dir`, for callers that know where to work (and for tests,
    /// which point it at a directory of their own).
    pub fn at(version: Version, dir: impl Into<PathBuf>) -> Controller {
        let dir = dir.into();
        Controller {
            version,
            mount_point: dir.clone(),
            cgroup: "/".into(),
            dir,
            notes: Vec::new(),
        }
    }

    /// One paragraph on what was found: version, mount point, own cgroup, which limit files are used.
    pub fn describe(&self) -> String {
        let (limit, swap, usage, peak) = match self.version {
            Version::V1 => (
                "memory.limit_in_bytes",
                "memory.memsw.limit_in_bytes",
                "memory.usage_in_bytes",
                "memory.max_usage_in_bytes",
            ),
            Version::V2 => (
                "memory.max",
                "memory.swap.max",
                "memory.current",
                "memory.peak",
            ),
        };
        let swap_file = self.dir.join(swap);
        let swap_note = if swap_file.exists() {
            format!("swap capped through {swap}")
        } else {
            format!("no {swap} here (swap accounting is off, or there is no swap): limits cap memory only")
        };
        let mut s = format!(
            "{} memory controller mounted at {}; this process's memory cgroup is {} ({}); limits through {limit}, \
             usage from {usage} and {peak}; {swap_note}",
            self.version,
            self.mount_point.display(),
            self.cgroup,
            self.dir.display(),
        );
        for n in &self.notes {
            s.push_str("\n  also: ");
            s.push_str(n);
        }
        s
    }

    /// Whether this process may create, limit and remove groups here: creates a probe group and removes it.
    pub fn check_access(&self) -> Result<(), CgroupError> {
        let probe = self.create_group("probe")?;
        probe.set_limit(Some(64 << 20))?;
        probe.remove()
    }

    /// Creates a group `oversub-LABEL-PID-N` under this process's own memory cgroup (on v2, where that cgroup holds
    /// processes and the memory controller is not enabled for its children, which the kernel then forbids, under
    /// the hierarchy's root instead). It is removed when the returned handle is dropped.
    pub fn create_group(&self, label: &str) -> Result<Group, CgroupError> {
        check_name(label)?;
        let name = format!(
            "oversub-{label}-{}-{}",
            std::process::id(),
            NEXT_GROUP.fetch_add(1, Ordering::Relaxed)
        );
        match self.version {
            Version::V1 => Group::create(Version::V1, &self.dir, &name),
            Version::V2 => match enable_memory_for_children(&self.dir) {
                Ok(()) => Group::create(Version::V2, &self.dir, &name),
                Err(busy @ CgroupError::Os { .. }) => {
                    let root = self.mount_point.clone();
                    if root != self.dir && enable_memory_for_children(&root).is_ok() {
                        tracing::info!(
                            "cgroup v2: {} holds processes, so its children cannot get the memory controller; \
                             creating groups under the hierarchy's root {} instead",
                            self.dir.display(),
                            root.display()
                        );
                        Group::create(Version::V2, &root, &name)
                    } else {
                        Err(CgroupError::NoCgroup(format!(
                            "cgroup v2: cannot enable the memory controller for the children of {} ({busy}); the \
                             kernel forbids it while that cgroup holds processes. Run oversub from a cgroup whose \
                             cgroup.subtree_control already lists memory, or as root",
                            self.dir.display()
                        )))
                    }
                }
                Err(e) => Err(e),
            },
        }
    }

    /// Removes groups left behind by processes that no longer exist (named `oversub-*-PID-N`, whose PID is gone),
    /// as long as no process is in them: what a `SIGKILL`ed run leaves. Returns how many were removed.
    pub fn sweep_stale(&self) -> usize {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = stale_pid(&name) else {
                continue;
            };
            if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
                continue;
            }
            let path = entry.path();
            if subtree_has_procs(&path) {
                continue;
            }
            if destroy(&path, self.version).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// The PID in a group name `oversub-LABEL-PID-N`.
fn stale_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("oversub-")?;
    let mut parts = rest.rsplitn(3, '-');
    let _n: u64 = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next().filter(|label| !label.is_empty())?;
    Some(pid)
}

fn subtree_has_procs(path: &Path) -> bool {
    if procs_in(path).map(|p| !p.is_empty()).unwrap_or(true) {
        return true;
    }
    subgroups(path).iter().any(|p| subtree_has_procs(p))
}

/// A group name must be one path component of printable characters.
fn check_name(name: &str) -> Result<(), CgroupError> {
    if oversub_base::name::is_safe_component(name, 200) {
        Ok(())
    } else {
        Err(CgroupError::InvalidInput(format!(
            "a cgroup name must be 1 to 200 letters, digits, '-', '_' or '.', not {name:?}"
        )))
    }
}

/// v2: makes sure `dir`'s children get the memory controller (writes `+memory` to its `cgroup.subtree_control`).
fn enable_memory_for_children(dir: &Path) -> Result<(), CgroupError> {
    let control = dir.join("cgroup.subtree_control");
    let current = read_text(&control)?;
    if current.split_whitespace().any(|c| c == "memory") {
        return Ok(());
    }
    write_text(&control, "+memory")
}

/// The process IDs in a group (its `cgroup.procs`), not those of its children.
fn procs_in(path: &Path) -> Result<Vec<i32>, CgroupError> {
    let text = read_text(&path.join("cgroup.procs"))?;
    Ok(text
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// The child groups of a group (its subdirectories).
fn subgroups(path: &Path) -> Vec<PathBuf> {
    fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills everything in the group `path` and below, waits for it to empty and removes it, children first.
/// A group that is already gone is fine.
fn destroy(path: &Path, version: Version) -> Result<(), CgroupError> {
    if !path.exists() {
        return Ok(());
    }
    for child in subgroups(path) {
        destroy(&child, version)?;
    }
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    let kill_file = path.join("cgroup.kill");
    if version == Version::V2 && kill_file.exists() {
        // Kills the whole sub-tree at once, racing no fork.
        if let Err(e) = write_text(&kill_file, "1") {
            tracing::debug!("{e}; falling back to SIGKILL per process");
        }
    }
    loop {
        let procs = match procs_in(path) {
            Ok(p) => p,
            Err(CgroupError::Os { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        if procs.is_empty() {
            break;
        }
        for pid in procs {
            // SAFETY: kill(2) takes plain integers and has no memory-safety preconditions; a PID that has just
            // exited makes it fail with ESRCH, which is ignored.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        if Instant::now() > deadline {
            return Err(CgroupError::Os {
                op: "empty",
                path: path.display().to_string(),
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "processes still in the group {} s after SIGKILL",
                        REMOVE_TIMEOUT.as_secs()
                    ),
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    loop {
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            // The kernel lets a group go only once its last task has fully exited.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(classify("remove", path, e)),
        }
    }
}

/// A memory cgroup this process created. Dropping it kills any process left in it or below it, waits for them to
/// exit and removes the directories; [`Group::remove`] does the same and reports failures.
#[derive(Debug)]
pub struct Group {
    path: PathBuf,
    version: Version,
    removed: bool,
}

impl Group {
    fn create(version: Version, parent: &Path, name: &str) -> Result<Group, CgroupError> {
        let path = parent.join(name);
        fs::create_dir(&path).map_err(|e| classify("create the cgroup", &path, e))?;
        // From here on the handle owns the directory: any error below drops it, which removes it.
        let group = Group {
            path,
            version,
            removed: false,
        };
        if version == Version::V1 {
            // Limits must bind the whole sub-tree. The kernel forces this on since 5.x; older ones start a group
            // with its parent's setting, which can be changed while the group has no children.
            let hierarchy = group.path.join("memory.use_hierarchy");
            if let Ok(text) = fs::read_to_string(&hierarchy) {
                if text.trim() == "0" {
                    write_text(&hierarchy, "1")?;
                }
            }
        }
        Ok(group)
    }

    /// A child group `name` (letters, digits, `-`, `_`, `.`) below this one. On v2 this enables the memory
    /// controller for this group's children first; this group itself must then hold no process.
    pub fn child(&self, name: &str) -> Result<Group, CgroupError> {
        check_name(name)?;
        if self.version == Version::V2 {
            enable_memory_for_children(&self.path)?;
        }
        Group::create(self.version, &self.path, name)
    }

    /// The group's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// v1 or v2.
    pub fn version(&self) -> Version {
        self.version
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn swap_file(&self) -> PathBuf {
        self.file(match self.version {
            Version::V1 => "memory.memsw.limit_in_bytes",
            Version::V2 => "memory.swap.max",
        })
    }

    /// Whether limits also keep the group out of swap (the swap limit file exists: swap accounting is on).
    pub fn caps_swap(&self) -> bool {
        self.swap_file().exists()
    }

    /// Sets the memory limit of the group and everything below it (`None`: no limit). Where the kernel accounts
    /// swap, swap is capped too (v2 `memory.swap.max` = 0; v1 `memory.memsw.limit_in_bytes`, memory plus swap, =
    /// the same limit), so a limited group reclaims instead of swapping. The kernel rounds limits down to whole
    /// pages. Lowering a limit below the current usage makes the kernel reclaim first, and fails (`EBUSY`) when
    /// it cannot.
    pub fn set_limit(&self, bytes: Option<u64>) -> Result<(), CgroupError> {
        let swap = self.swap_file();
        let has_swap = swap.exists();
        match self.version {
            Version::V2 => {
                let value = bytes.map_or_else(|| "max".to_string(), |b| b.to_string());
                write_text(&self.file("memory.max"), &value)?;
                if has_swap {
                    write_text(&swap, if bytes.is_some() { "0" } else { "max" })?;
                }
            }
            Version::V1 => {
                // memory+swap may never be below memory: raise it first, lower it last.
                let value = bytes.map_or_else(|| "-1".to_string(), |b| b.to_string());
                let memory = self.file("memory.limit_in_bytes");
                let raising = match (bytes, self.limit()?) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(new), Some(old)) => new > old,
                };
                if raising && has_swap {
                    write_text(&swap, &value)?;
                }
                write_text(&memory, &value)?;
                if !raising && has_swap {
                    write_text(&swap, &value)?;
                }
            }
        }
        Ok(())
    }

    /// The memory limit as the kernel holds it (`None`: unlimited).
    pub fn limit(&self) -> Result<Option<u64>, CgroupError> {
        match self.version {
            Version::V2 => {
                let path = self.file("memory.max");
                let text = read_text(&path)?;
                if text.trim() == "max" {
                    Ok(None)
                } else {
                    read_u64(&path).map(Some)
                }
            }
            Version::V1 => {
                let v = read_u64(&self.file("memory.limit_in_bytes"))?;
                Ok((v < V1_UNLIMITED).then_some(v))
            }
        }
    }

    /// Bytes charged to the group now (its processes' memory and the page cache they brought in).
    pub fn usage(&self) -> Result<u64, CgroupError> {
        read_u64(&self.file(match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        }))
    }

    /// The most bytes ever charged to the group (`None` on v2 kernels before 5.19, which have no `memory.peak`).
    pub fn peak(&self) -> Result<Option<u64>, CgroupError> {
        let path = self.file(match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        });
        if !path.exists() {
            return Ok(None);
        }
        read_u64(&path).map(Some)
    }

    /// How many times the group was killed by the out-of-memory killer (`oom_kill` of v1 `memory.oom_control` or v2
    /// `memory.events`); `None` where the kernel does not say.
    pub fn oom_kills(&self) -> Result<Option<u64>, CgroupError> {
        let path = self.file(match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        });
        if !path.exists() {
            return Ok(None);
        }
        let text = read_text(&path)?;
        Ok(text.lines().find_map(|l| {
            let (key, value) = l.split_once(' ')?;
            (key == "oom_kill").then(|| value.trim().parse().ok())?
        }))
    }

    /// One counter of the group's `memory.stat` (both versions have `workingset_refault_file`: pages of files that
    /// were evicted and read back, the thrashing of the page cache; `pgmajfault`; `file` or `cache` ...). `None`
    /// when the kernel does not show that key.
    pub fn stat(&self, key: &str) -> Result<Option<u64>, CgroupError> {
        let text = read_text(&self.file("memory.stat"))?;
        Ok(text.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        }))
    }

    /// The IDs of the processes in this group (not in its children).
    pub fn procs(&self) -> Result<Vec<i32>, CgroupError> {
        procs_in(&self.path)
    }

    /// Asks the kernel to give back what the group holds (page cache, and anonymous memory to swap where there is
    /// swap), so that nothing charged to it outlives it: v1 `memory.force_empty`, v2 `memory.reclaim` (5.19+).
    /// Best effort: what cannot be reclaimed stays charged.
    pub fn reclaim(&self) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => {
                let path = self.file("memory.force_empty");
                if path.exists() {
                    write_text(&path, "0")?;
                }
            }
            Version::V2 => {
                let path = self.file("memory.reclaim");
                if path.exists() {
                    let usage = self.usage()?;
                    if usage > 0 {
                        match write_text(&path, &usage.to_string()) {
                            Ok(()) => {}
                            // EAGAIN: not all of it could be reclaimed.
                            Err(CgroupError::Os { source, .. })
                                if source.raw_os_error() == Some(libc::EAGAIN) => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts `cmd` inside this group. The child joins the group between `fork` and `exec` (it writes `0`, "the
    /// calling process", to a `cgroup.procs` descriptor opened here beforehand), so it never runs a single
    /// instruction of the command outside the group. The command is consumed: the hook holds that descriptor's
    /// number, which means nothing once this call returns.
    pub fn spawn(&self, mut cmd: Command) -> Result<Spawned, CgroupError> {
        let procs_path = self.file("cgroup.procs");
        let procs = fs::OpenOptions::new()
            .write(true)
            .open(&procs_path)
            .map_err(|e| classify("open", &procs_path, e))?;
        let fd = procs.as_raw_fd();
        // SAFETY: the hook runs in the child between fork and exec, where only async-signal-safe calls may be made.
        // It makes one write(2) on a descriptor the parent opened before forking (`procs`, open until spawn returns,
        // so the number is valid in the child) from a static buffer, and on failure reads errno into an io::Error,
        // which does not allocate. It takes no lock and touches no other state.
        unsafe {
            cmd.pre_exec(move || match libc::write(fd, b"0".as_ptr().cast(), 1) {
                1 => Ok(()),
                -1 => Err(io::Error::last_os_error()),
                _ => Err(io::ErrorKind::WriteZero.into()),
            });
        }
        let started = Instant::now();
        let child = cmd.spawn().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                CgroupError::Os {
                    op: "start",
                    path: format!("{:?}", cmd.get_program()),
                    source: e,
                }
            } else {
                classify("start a process in", &procs_path, e)
            }
        })?;
        drop(procs);
        Ok(Spawned {
            child,
            started,
            done: false,
        })
    }

    /// Kills what is left in the group and below, waits for it and removes the group, reporting any failure
    /// (dropping the handle does the same and logs failures).
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true;
        destroy(&self.path, self.version)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = destroy(&self.path, self.version) {
                tracing::warn!("could not remove the cgroup {}: {e}", self.path.display());
            }
        }
    }
}

/// A command started in a group by [`Group::spawn`]. Dropping it without [`Spawned::wait`] kills the process and
/// reaps it.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    started: Instant,
    done: bool,
}

/// How a spawned command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its response time: from just before the spawn to the moment its exit was seen.
    pub elapsed: Duration,
}

impl Spawned {
    /// The process ID.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// When it was started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The child, for its pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for it to exit: its status and its response time.
    pub fn wait(mut self) -> Result<Exit, CgroupError> {
        let status = self.child.wait().map_err(|e| CgroupError::Os {
            op: "wait for",
            path: format!("process {}", self.child.id()),
            source: e,
        })?;
        let elapsed = self.started.elapsed();
        self.done = true;
        Ok(Exit { status, elapsed })
    }

    /// Reads what is left of its standard error, if it was piped (a convenience for error messages).
    pub fn stderr_text(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    const V1_MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
";

    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    const V2_MOUNTINFO: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
4:memory:/process_api/c720ca
1:cpu:/
0::/
";

    const V2_CGROUP: &str = "0::/user.slice/user-0.slice/session-1.scope\n";

    /// A fake file-system root holding `dirs`, and `cgroup.controllers` files with the given contents.
    fn fixture(dirs: &[&str], controllers: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for d in dirs {
            fs::create_dir_all(under(root.path(), Path::new(d))).unwrap();
        }
        for (d, text) in controllers {
            let dir = under(root.path(), Path::new(d));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cgroup.controllers"), text).unwrap();
        }
        root
    }

    #[test]
    fn parses_mountinfo() {
        let mounts = parse_mountinfo(HYBRID_MOUNTINFO);
        assert_eq!(mounts.len(), 3, "tmpfs is not a cgroup mount");
        assert_eq!(mounts[1].version, Version::V1);
        assert_eq!(mounts[1].mount_point, Path::new("/sys/fs/cgroup/memory"));
        assert!(mounts[1].has_option("memory") && !mounts[0].has_option("memory"));
        assert_eq!(mounts[2].version, Version::V2);
        assert_eq!(mounts[2].root, "/");
        let v2 = parse_mountinfo(V2_MOUNTINFO);
        assert_eq!(v2.len(), 1);
        assert!(v2[0].has_option("nsdelegate"));
        // Optional fields before the separator, a bind-mounted sub-tree, an escaped space.
        let odd = parse_mountinfo(
            "50 31 0:32 /docker/abc /mnt/my\\040cg rw shared:1 master:2 - cgroup cgroup rw,memory,cpu\nnot a line\n",
        );
        assert_eq!(odd.len(), 1);
        assert_eq!(odd[0].root, "/docker/abc");
        assert_eq!(odd[0].mount_point, Path::new("/mnt/my cg"));
        assert!(odd[0].has_option("cpu"));
        assert!(parse_mountinfo("").is_empty());
    }

    #[test]
    fn parses_proc_mounts() {
        let m = parse_mounts(
            "sysfs /sys sysfs rw 0 0\ncgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
             cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n",
        );
        assert_eq!(m.len(), 2);
        assert!(m[0].has_option("memory"));
        assert_eq!(m[1].version, Version::V2);
    }

    #[test]
    fn parses_proc_cgroup() {
        let m = parse_proc_cgroup(HYBRID_CGROUP).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].controllers, vec!["name=systemd".to_string()]);
        assert_eq!(m[1].hierarchy, 4);
        assert_eq!(m[1].path, "/process_api/c720ca");
        assert_eq!(m[3].hierarchy, 0);
        assert!(m[3].controllers.is_empty());
        // Several controllers on one hierarchy, and a path with a colon in it.
        let m = parse_proc_cgroup("3:cpu,cpuacct:/a:b\n\n").unwrap();
        assert_eq!(
            m[0].controllers,
            vec!["cpu".to_string(), "cpuacct".to_string()]
        );
        assert_eq!(m[0].path, "/a:b");
        let e = parse_proc_cgroup("garbage\n").unwrap_err();
        assert!(e.to_string().contains("ID:CONTROLLERS:PATH"), "{e}");
        assert!(parse_proc_cgroup("x:memory:/").is_err());
    }

    #[test]
    fn detects_v1() {
        let root = fixture(&["/sys/fs/cgroup/memory/process_api/c720ca"], &[]);
        let c =
            Controller::detect_with(V1_MOUNTINFO, "4:memory:/process_api/c720ca\n", root.path())
                .unwrap();
        assert_eq!(c.version, Version::V1);
        assert_eq!(c.mount_point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(c.cgroup, "/process_api/c720ca");
        assert_eq!(
            c.dir,
            root.path().join("sys/fs/cgroup/memory/process_api/c720ca")
        );
        assert!(c.notes.iter().any(|n| n.contains("no 0::PATH")) || c.notes.is_empty());
        assert!(c.describe().contains("memory.limit_in_bytes"));
    }

    #[test]
    fn detects_v2() {
        let root = fixture(
            &[],
            &[(
                "/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope",
                "cpu io memory pids\n",
            )],
        );
        let c = Controller::detect_with(V2_MOUNTINFO, V2_CGROUP, root.path()).unwrap();
        assert_eq!(c.version, Version::V2);
        assert_eq!(c.cgroup, "/user.slice/user-0.slice/session-1.scope");
        assert_eq!(
            c.dir,
            root.path()
                .join("sys/fs/cgroup/user.slice/user-0.slice/session-1.scope")
        );
        assert!(c.describe().contains("memory.max"));
    }

    #[test]
    fn detects_hybrid() {
        // This machine's layout: memory on v1, a cgroup2 without it. The v1 controller is chosen and the v2 one
        // explained.
        let root = fixture(
            &["/sys/fs/cgroup/memory/process_api/c720ca"],
            &[("/sys/fs/cgroup/unified", "hugetlb\n")],
        );
        let c = Controller::detect_with(HYBRID_MOUNTINFO, HYBRID_CGROUP, root.path()).unwrap();
        assert_eq!(c.version, Version::V1);
        assert_eq!(c.cgroup, "/process_api/c720ca");
        assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
        assert!(c.notes[0].contains("only \"hugetlb\""), "{:?}", c.notes);
        // The same mounts with memory on the unified hierarchy: v2 wins.
        let root = fixture(
            &["/sys/fs/cgroup/memory/process_api/c720ca"],
            &[("/sys/fs/cgroup/unified", "memory pids\n")],
        );
        let c = Controller::detect_with(HYBRID_MOUNTINFO, HYBRID_CGROUP, root.path()).unwrap();
        assert_eq!(c.version, Version::V2);
        assert_eq!(c.dir, root.path().join("sys/fs/cgroup/unified"));
    }

    #[test]
    fn bind_mounted_subtree() {
        // A container's view: the hierarchy's /docker/abc mounted at /sys/fs/cgroup/memory.
        let info = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let root = fixture(&["/sys/fs/cgroup/memory/job"], &[]);
        let c = Controller::detect_with(info, "4:memory:/docker/abc/job\n", root.path()).unwrap();
        assert_eq!(c.dir, root.path().join("sys/fs/cgroup/memory/job"));
        // With a cgroup namespace the path is already relative to it.
        let c = Controller::detect_with(info, "4:memory:/\n", root.path()).unwrap();
        assert_eq!(c.dir, root.path().join("sys/fs/cgroup/memory"));
    }

    #[test]
    fn no_controller_says_why() {
        let root = fixture(&[], &[]);
        let e = Controller::detect_with(
            "22 1 0:21 / /proc rw - proc proc rw\n",
            "0::/\n",
            root.path(),
        )
        .unwrap_err();
        assert!(matches!(e, CgroupError::NoCgroup(_)));
        assert!(
            e.to_string()
                .contains("no cgroup or cgroup2 file system is mounted"),
            "{e}"
        );

        // v2 only, without memory for this cgroup (not delegated).
        let root = fixture(
            &[],
            &[(
                "/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope",
                "cpu pids\n",
            )],
        );
        let e = Controller::detect_with(V2_MOUNTINFO, V2_CGROUP, root.path()).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("no memory cgroup controller"), "{text}");
        assert!(
            text.contains("not available to cgroup /user.slice"),
            "{text}"
        );
        assert!(
            text.contains("no cgroup (v1) hierarchy has the memory option"),
            "{text}"
        );

        // v1 without a memory hierarchy, and a v1 memory hierarchy whose directory for us is missing.
        let root = fixture(&[], &[]);
        let e = Controller::detect_with(
            "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
            "1:cpu:/\n",
            root.path(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("no cgroup (v1) hierarchy has the memory option"),
            "{e}"
        );
        let e = Controller::detect_with(V1_MOUNTINFO, "4:memory:/gone\n", root.path()).unwrap_err();
        assert!(e.to_string().contains("has no directory"), "{e}");
    }

    /// Environment variable that turns [`permission_child`] into the probe run as an unprivileged user.
    const PERMISSION_DIR: &str = "OVERSUB_TEST_CGROUP_READONLY_DIR";

    /// Run as `nobody` by [`permission_denied_is_reported`]: creating a group in a root-owned directory must fail
    /// with `Permission`.
    #[test]
    fn permission_child() {
        let Some(dir) = std::env::var_os(PERMISSION_DIR) else {
            return;
        };
        let e = Controller::at(Version::V1, PathBuf::from(dir))
            .check_access()
            .unwrap_err();
        assert!(matches!(e, CgroupError::Permission { .. }), "{e}");
        println!("PERMISSION-ERROR: {e}");
    }

    #[test]
    fn permission_denied_is_reported() {
        // A directory this process may not write: root-owned and read-only. Root writes anyway, so when running as
        // root the probe is run again as `nobody` (uid 65534).
        let dir = tempfile::tempdir().unwrap();
        let ro = dir.path().join("readonly");
        fs::create_dir(&ro).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        if fs::create_dir(ro.join("try")).is_err() {
            // Not privileged: the refusal is this process's own.
            let e = Controller::at(Version::V1, &ro).check_access().unwrap_err();
            assert!(matches!(e, CgroupError::Permission { .. }), "{e}");
            let text = e.to_string();
            assert!(
                text.contains("no permission") && text.contains("run as root"),
                "{text}"
            );
            assert!(
                std::error::Error::source(&e).is_some(),
                "the io::Error is kept"
            );
            return;
        }
        use std::os::unix::process::CommandExt as _;
        // The test binary may sit where `nobody` cannot reach it (a clone under a 0700 folder or a private home):
        // run a copy from a folder of its own that everyone may enter.
        let exe_dir = tempfile::tempdir().unwrap();
        fs::set_permissions(exe_dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let exe = exe_dir.path().join("probe-as-nobody");
        fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        let run = || {
            Command::new(&exe)
                .args([
                    "tasks::cgroup::tests::permission_child",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(PERMISSION_DIR, &ro)
                .uid(65534)
                .gid(65534)
                .output()
        };
        // Another test thread forking while the copy's write descriptor was open holds it until that child execs:
        // "text file busy" passes.
        let mut out = run();
        for _ in 0..50 {
            match &out {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(Duration::from_millis(20));
                    out = run();
                }
                _ => break,
            }
        }
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                // Even the copy is out of reach (a private temporary folder): nothing more can be simulated.
                println!("skipped: cannot start the probe as uid 65534 from {exe:?}: {e}");
                return;
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() && stdout.is_empty() {
            // The test binary is not readable by nobody here: nothing more can be simulated.
            println!(
                "skipped: cannot run the probe as uid 65534: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("PERMISSION-ERROR: no permission to manage memory cgroups"),
            "{stdout}"
        );
        assert!(
            stdout.contains("run as root, or delegate a cgroup"),
            "{stdout}"
        );
    }

    /// The real controller, if this machine has one this process may use; otherwise why not.
    fn usable() -> Option<Controller> {
        match Controller::detect().and_then(|c| c.check_access().map(|()| c)) {
            Ok(c) => Some(c),
            Err(e) => {
                println!("skipped: no usable memory cgroup here: {e}");
                None
            }
        }
    }

    #[test]
    fn end_to_end_group_limit_spawn_and_removal() {
        let Some(controller) = usable() else {
            return;
        };
        let parent = controller.create_group("test").unwrap();
        let parent_path = parent.path().to_path_buf();
        assert!(parent_path.starts_with(&controller.dir));
        parent.set_limit(Some(256 << 20)).unwrap();
        assert_eq!(parent.limit().unwrap(), Some(256 << 20));
        let leaf = parent.child("leaf").unwrap();
        let leaf_path = leaf.path().to_path_buf();
        leaf.set_limit(Some(64 << 20)).unwrap();
        assert_eq!(leaf.limit().unwrap(), Some(64 << 20));
        leaf.set_limit(Some(96 << 20)).unwrap(); // raising (v1: memory+swap first)
        assert_eq!(leaf.limit().unwrap(), Some(96 << 20));
        leaf.set_limit(None).unwrap();
        assert_eq!(leaf.limit().unwrap(), None);
        leaf.set_limit(Some(64 << 20)).unwrap();

        // The child sees itself in the group from its first instruction.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat /proc/self/cgroup"])
            .stdout(std::process::Stdio::piped());
        let mut spawned = leaf.spawn(cmd).unwrap();
        let mut out = String::new();
        spawned
            .child_mut()
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let exit = spawned.wait().unwrap();
        assert!(exit.status.success());
        let rel = leaf_path
            .strip_prefix(&controller.dir)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let line = out
            .lines()
            .find(|l| match controller.version {
                Version::V1 => l
                    .split(':')
                    .nth(1)
                    .is_some_and(|c| c.split(',').any(|c| c == "memory")),
                Version::V2 => l.starts_with("0::"),
            })
            .unwrap_or_else(|| panic!("no memory line in {out}"));
        assert!(line.ends_with(&rel), "{line} should end with {rel}");
        assert!(leaf.peak().unwrap().is_none_or(|p| p > 0));
        leaf.usage().unwrap();
        assert_eq!(leaf.oom_kills().unwrap().unwrap_or(0), 0);
        assert!(leaf.stat("workingset_refault_file").unwrap().is_some());
        assert_eq!(leaf.stat("no_such_counter").unwrap(), None);
        leaf.reclaim().unwrap();

        // A process left behind is killed when the group goes, and the whole tree is removed, parent first.
        let mut cmd = Command::new("sleep");
        cmd.arg("100");
        let sleeper = leaf.spawn(cmd).unwrap();
        assert_eq!(
            leaf.procs().unwrap(),
            vec![i32::try_from(sleeper.id()).unwrap()]
        );
        drop(parent);
        assert!(!parent_path.exists() && !leaf_path.exists());
        drop(leaf); // already gone: nothing to do
        drop(sleeper); // reaps the killed process
    }

    #[test]
    fn groups_are_removed_on_panic_and_by_sweep() {
        let Some(controller) = usable() else {
            return;
        };
        let path = std::thread::scope(|s| {
            s.spawn(|| {
                let g = controller.create_group("panic").unwrap();
                let mut cmd = Command::new("sleep");
                cmd.arg("100");
                let s = g.spawn(cmd).unwrap();
                std::mem::forget(s); // not even the Spawned handle cleans up
                let path = g.path().to_path_buf();
                if path.exists() {
                    std::panic::panic_any(path);
                }
                unreachable!()
            })
            .join()
            .unwrap_err()
            .downcast::<PathBuf>()
            .unwrap()
        });
        assert!(!path.exists(), "{} survived a panic", path.display());

        // A group named after a process that is gone, and empty, is swept; one of ours is not.
        let stale = controller.dir.join("oversub-test-999999999-0");
        fs::create_dir(&stale).unwrap();
        let ours = controller.create_group("keep").unwrap();
        assert!(controller.sweep_stale() >= 1);
        assert!(!stale.exists());
        assert!(ours.path().exists());
    }

    #[test]
    fn unescapes_mount_paths() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"/x\134y"), r"/x\y");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
        assert_eq!(unescape(r"/bad\089"), r"/bad\089");
    }

    #[test]
    fn group_names() {
        assert_eq!(stale_pid("oversub-tasks-1234-7"), Some(1234));
        assert_eq!(stale_pid("oversub-my-label-99-0"), Some(99));
        assert_eq!(stale_pid("oversub-1-2"), None);
        assert_eq!(stale_pid("other-tasks-1-2"), None);
        assert!(check_name("default-T1").is_ok());
        for bad in ["", "..", "a/b", "a b", "ä"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn classifies_refusals() {
        let p = Path::new("/sys/fs/cgroup/x");
        for errno in [libc::EACCES, libc::EPERM, libc::EROFS] {
            let e = classify("write", p, io::Error::from_raw_os_error(errno));
            assert!(matches!(e, CgroupError::Permission { .. }), "{e}");
            assert!(e.to_string().contains("run as root"), "{e}");
        }
        let e = classify("write", p, io::Error::from_raw_os_error(libc::EBUSY));
        assert!(matches!(e, CgroupError::Os { .. }), "{e}");
    }
}
