//! Where the arbiter's state lives: a `#[repr(C)]` block of atomics, in this process's heap or in a file under
//! /dev/shm mapped by every process that uses it. All-zero bytes are a valid (empty) state, so a freshly
//! truncated file needs no initialisation beyond its header.
//!
//! The shared file is a trust boundary: whoever can write it steers every transfer side that maps it, and a file
//! shorter than the mapping makes the first access past its end kill the process (SIGBUS). /dev/shm is writable
//! by everyone, so a file is mapped only after checks made on the open descriptor, never on the name (which can be
//! swapped between a check and the open): a regular file, owned by this user (or a trusted one), that nobody else
//! can read or write (or only a trusted group), of exactly the layout's size. Its header (magic, version, slot
//! count, size) is checked after mapping, so that a stale or foreign file of the right size is refused too.
//!
//! A creating process (the server) holds an exclusive `flock` on its file for its whole life. The kernel drops the
//! lock when the process ends, however it ends, so a server that finds a file left behind can tell whether its
//! server is alive (lock held) or gone (lock free) without trusting a recorded pid, which may have been reused.

use std::fs::{File, OpenOptions, Permissions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use oversub_base::process::Creator;

use crate::ArbiterError;

/// Task slots of one arbiter: more than cores on any embedded board, small enough to scan on every request.
pub const MAX_TASKS: usize = 64;
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"OVSARB01");
/// Version of the shared layout; a file of another version is refused. Version 2 added the recorded size and
/// the server's pid to the header.
pub const LAYOUT_VERSION: u32 = 2;

#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) slot_count: AtomicU32,
    /// Size of the whole layout as its creator built it: with the magic, a file of the right size that some
    /// other program wrote is told apart from an arbiter.
    pub(crate) layout_bytes: AtomicU64,
    /// The process that created (or took over) the file; shown to users, not trusted for liveness (the lock is).
    pub(crate) server_pid: AtomicU32,
    pub(crate) _reserved: AtomicU32,
    pub(crate) stale_after_ns: AtomicU64,
    pub(crate) chunk_time_ns: AtomicU64,
    pub(crate) chunk_bytes: AtomicU64,
    pub(crate) poll_ns: AtomicU64,
    /// Bumped by every announcement, so a transfer side notices that its grant may have changed.
    pub(crate) generation: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) grants: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) expired: AtomicU64,
}

#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    pub(crate) word: AtomicU64,
    pub(crate) pid: AtomicU32,
    pub(crate) _reserved: AtomicU32,
    pub(crate) announcements: AtomicU64,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) header: Header,
    pub(crate) slots: [TaskSlot; MAX_TASKS],
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            header: Header::default(),
            slots: std::array::from_fn(|_| TaskSlot::default()),
        }
    }
}

pub(crate) const LAYOUT_BYTES: usize = std::mem::size_of::<Layout>();

/// How a shared arbiter's file is checked, created and recovered.
///
/// The default trusts only a file that this process's effective user owns and that nobody else may read or write
/// (mode 0600, as the arbiter creates it); that holds for root too, which by default refuses files of other users.
/// Wider trust is opt-in, one flag each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedOptions {
    group: Option<u32>,
    owner: Option<u32>,
    take_over: bool,
}

impl SharedOptions {
    /// The default: this user's files only, no take-over.
    pub fn new() -> Self {
        Self::default()
    }

    /// Shares the arbiter with the members of group `gid` (real-time tasks running as different users). A creator
    /// gives the file that group and mode 0660 (it must belong to the group); an opener also trusts a file of that
    /// group with mode up to 0660, whoever owns it. Only members of a group (and root) can give a file that group,
    /// so this trusts every member of it to steer the transfers.
    pub fn allow_group(mut self, gid: u32) -> Self {
        self.group = Some(gid);
        self
    }

    /// Also trusts a file owned by `uid` (mode still 0600), e.g. root opening an arbiter that a user serves.
    /// Only checked when opening; a creator always owns its file.
    pub fn allow_owner(mut self, uid: u32) -> Self {
        self.owner = Some(uid);
        self
    }

    /// On creation, takes over a file left at the name by a server that is gone (killed, crashed): if the file
    /// passes the opener's checks and no process holds its server lock, it is re-initialised in place with the
    /// new configuration and served by this process (slots of tasks still alive carry over). A file whose server
    /// is alive is [`ArbiterError::InUse`]. Without this, an existing file is an error.
    pub fn take_over_stale(mut self, take_over: bool) -> Self {
        self.take_over = take_over;
        self
    }
}

/// The state's storage.
#[derive(Debug)]
pub(crate) enum Region {
    Heap(Box<Layout>),
    Shared {
        ptr: NonNull<Layout>,
        path: PathBuf,
        /// Present in the process that created (or took over) the file: it removes the file when its last handle
        /// goes.
        server: Option<Server>,
    },
}

/// What the serving process keeps of its file.
#[derive(Debug)]
pub(crate) struct Server {
    /// The open file, holding the exclusive server lock until it closes (never read: holding it is the point).
    _lock: File,
    /// The file's identity, so that the name is removed only while it is still this file.
    dev: u64,
    ino: u64,
    /// Pid recorded by the server whose file this one took over (0: none was recorded).
    taken_over_from: Option<u32>,
    /// The serving process: a forked child's copy of the handle must not remove the file its parent serves.
    creator: Creator,
}

// SAFETY: the mapping is only accessed through atomics, which are safe to share between threads (and processes).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    pub(crate) fn layout(&self) -> &Layout {
        match self {
            Region::Heap(b) => b,
            // SAFETY: ptr is a live MAP_SHARED mapping of LAYOUT_BYTES bytes of a file checked to be that long,
            // page-aligned, unmapped only in Drop; every field is an atomic, and all bit patterns are valid atomics.
            Region::Shared { ptr, .. } => unsafe { ptr.as_ref() },
        }
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            Region::Heap(_) => None,
            Region::Shared { path, .. } => Some(path),
        }
    }

    pub(crate) fn taken_over_from(&self) -> Option<u32> {
        match self {
            Region::Shared {
                server: Some(s), ..
            } => s.taken_over_from,
            _ => None,
        }
    }

    /// Creates `path` (which must not exist, unless `options` allow taking over a dead server's file) with mode
    /// 0600 (0660 for a group), sized, locked and mapped. The caller writes the header.
    pub(crate) fn create(path: &Path, options: &SharedOptions) -> Result<Region, ArbiterError> {
        // Each round either creates the file, takes it over, or finds that it vanished or was replaced while we
        // looked (its server stopped just then) and tries again; a few rounds settle any real race.
        for _ in 0..8 {
            match open_file(path, true) {
                Ok(file) => return create_new(file, path, options),
                Err(e) if e.kind() == ErrorKind::AlreadyExists && options.take_over => {
                    if let Some(region) = take_over(path, options)? {
                        return Ok(region);
                    }
                }
                Err(e) => return Err(open_error("create", path, e)),
            }
        }
        Err(ArbiterError::Os {
            op: "create",
            path: path.display().to_string(),
            source: ErrorKind::AlreadyExists.into(),
        })
    }

    /// Maps an existing arbiter file after checking the open file and then its header.
    pub(crate) fn open(path: &Path, options: &SharedOptions) -> Result<Region, ArbiterError> {
        let file = open_file(path, false).map_err(|e| open_error("open", path, e))?;
        verify(&file, path, options, true)?;
        let region = Region::Shared {
            ptr: map(&file, path)?,
            path: path.to_path_buf(),
            server: None,
        };
        check_header(&region, path, false)?;
        // The descriptor closes here; the mapping stays valid without it.
        Ok(region)
    }

    /// Makes this handle the file's server (it is removed when the handle goes).
    fn serve(mut self, server: Server) -> Region {
        if let Region::Shared { server: s, .. } = &mut self {
            *s = Some(server);
        }
        self
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Region::Shared { ptr, path, server } = self {
            // A forked child's copy only unmaps (its own mapping) and closes its copy of the descriptor, which
            // leaves the parent's lock in place: the file stays the parent's.
            if let Some(s) = server.as_ref().filter(|s| s.creator.is_current()) {
                // Removed while the lock is still held (the file closes after this): a server about to take
                // over then finds either our lock or no file, never a removed file that it would serve unseen.
                // And only while the name is still ours: a file that replaced it (`serve --replace`) stays.
                if same_file(path, s.dev, s.ino) {
                    let _ = std::fs::remove_file(&*path);
                }
            }
            // SAFETY: we mapped exactly LAYOUT_BYTES at ptr and nothing references it past this handle's life.
            unsafe { libc::munmap(ptr.as_ptr().cast(), LAYOUT_BYTES) };
        }
    }
}

/// Opens (or creates, exclusively) the file at `path` for reading and writing.
fn open_file(path: &Path, create: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    // O_NOFOLLOW: anyone can put a symbolic link in /dev/shm, pointing at a file the caller may write.
    // O_NOCTTY and O_NONBLOCK: a device or FIFO planted at the name neither becomes our terminal nor blocks the
    // open; the checks on the descriptor then refuse it. std adds O_CLOEXEC.
    options
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK);
    if create {
        options.create_new(true).mode(0o600);
    }
    options.open(path)
}

fn os_error(op: &'static str, path: &Path, source: std::io::Error) -> ArbiterError {
    ArbiterError::Os {
        op,
        path: path.display().to_string(),
        source,
    }
}

fn untrusted(path: &Path, reason: String) -> ArbiterError {
    ArbiterError::Untrusted {
        path: path.display().to_string(),
        reason,
    }
}

/// An open that failed: a symbolic link at the name (ELOOP under O_NOFOLLOW) is a refusal, not an OS failure.
fn open_error(op: &'static str, path: &Path, source: std::io::Error) -> ArbiterError {
    let is_link = source.raw_os_error() == Some(libc::ELOOP)
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        untrusted(
            path,
            "it is a symbolic link, which could point at any file".into(),
        )
    } else {
        os_error(op, path, source)
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The checks on the open file (fstat on the descriptor, so they are about the file that will be mapped). The
/// size is left out while a file is being looked at without its lock: a server still creating it has it empty.
fn verify(
    file: &File,
    path: &Path,
    options: &SharedOptions,
    check_size: bool,
) -> Result<std::fs::Metadata, ArbiterError> {
    let meta = file.metadata().map_err(|e| os_error("fstat", path, e))?;
    if !meta.file_type().is_file() {
        return Err(untrusted(path, "it is not a regular file".into()));
    }
    let me = euid();
    let group_ok = options.group == Some(meta.gid());
    if meta.uid() != me && options.owner != Some(meta.uid()) && !group_ok {
        return Err(untrusted(
            path,
            format!(
                "it is owned by uid {}, not by this user (uid {me}), and that owner is not trusted",
                meta.uid()
            ),
        ));
    }
    // Group bits are allowed only for a trusted group; other users never get any access.
    let forbidden = if group_ok { 0o007 } else { 0o077 };
    let mode = meta.mode() & 0o7777;
    if mode & forbidden != 0 {
        return Err(untrusted(
            path,
            format!(
                "its mode {mode:04o} lets {} read or write it",
                if group_ok {
                    "other users"
                } else {
                    "other users or its group"
                }
            ),
        ));
    }
    if check_size && meta.len() != LAYOUT_BYTES as u64 {
        return Err(untrusted(
            path,
            format!(
                "its size is {} bytes, not the layout's {LAYOUT_BYTES} (mapping it could fault)",
                meta.len()
            ),
        ));
    }
    Ok(meta)
}

/// The header's fields, checked after mapping. `allow_blank`: an all-zero header (a creator that died before
/// publishing it) is accepted, for a take-over.
fn check_header(region: &Region, path: &Path, allow_blank: bool) -> Result<(), ArbiterError> {
    let h = &region.layout().header;
    let magic = h.magic.load(Ordering::Acquire);
    if allow_blank && magic == 0 {
        return Ok(());
    }
    let version = h.version.load(Ordering::Acquire);
    let slots = h.slot_count.load(Ordering::Acquire);
    let bytes = h.layout_bytes.load(Ordering::Acquire);
    let reason = if magic != MAGIC {
        "bad magic (not an arbiter, or not initialised yet)".to_string()
    } else if version != LAYOUT_VERSION {
        format!("layout version {version}")
    } else if slots as usize != MAX_TASKS {
        format!("{slots} task slots, expected {MAX_TASKS}")
    } else if bytes != LAYOUT_BYTES as u64 {
        format!("its header records {bytes} bytes, expected {LAYOUT_BYTES}")
    } else {
        return Ok(());
    };
    Err(ArbiterError::Incompatible {
        path: path.display().to_string(),
        expected: LAYOUT_VERSION,
        reason,
    })
}

/// Takes the server lock without waiting; `false` when another open file holds it.
fn try_lock(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor that `file` owns and keeps open; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Whether `path` still names the file `dev`/`ino` (not following a link).
fn same_file(path: &Path, dev: u64, ino: u64) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The pid recorded in a file's header, read with pread (the file may be shorter than the layout, so it is not
/// mapped for this); 0 when there is no valid header.
fn recorded_pid(file: &File) -> u32 {
    let mut head = [0u8; std::mem::offset_of!(Header, stale_after_ns)];
    if file.read_exact_at(&mut head, 0).is_err() {
        return 0;
    }
    let at = |offset: usize| head.get(offset..).unwrap_or_default();
    let magic = at(std::mem::offset_of!(Header, magic)).first_chunk::<8>();
    let pid = at(std::mem::offset_of!(Header, server_pid)).first_chunk::<4>();
    match (magic, pid) {
        (Some(m), Some(p)) if u64::from_ne_bytes(*m) == MAGIC => u32::from_ne_bytes(*p),
        _ => 0,
    }
}

/// A file we just created exclusively: lock, mode, size, the same checks an opener makes, and the mapping. On
/// failure the file is removed again.
fn create_new(file: File, path: &Path, options: &SharedOptions) -> Result<Region, ArbiterError> {
    let meta = file.metadata().map_err(|e| os_error("fstat", path, e))?;
    let (dev, ino) = (meta.dev(), meta.ino());
    let result = (|| {
        // Taken before the file gets its size: until then, nobody else can pass the checks and lock it.
        if !try_lock(&file).map_err(|e| os_error("flock", path, e))? {
            return Err(ArbiterError::InUse {
                path: path.display().to_string(),
                pid: 0,
            });
        }
        let mode = match options.group {
            Some(gid) => {
                std::os::unix::fs::fchown(&file, None, Some(gid))
                    .map_err(|e| os_error("fchown", path, e))?;
                0o660
            }
            None => 0o600,
        };
        // The umask may only have removed bits; set exactly the ones we mean.
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(|e| os_error("fchmod", path, e))?;
        file.set_len(LAYOUT_BYTES as u64)
            .map_err(|e| os_error("ftruncate", path, e))?;
        // What we made is what every opener will check: a directory whose rules changed the owner or mode shows
        // here, in the server, rather than in each client.
        verify(&file, path, options, true)?;
        map(&file, path)
    })();
    match result {
        Ok(ptr) => Ok(Region::Shared {
            ptr,
            path: path.to_path_buf(),
            server: Some(Server {
                _lock: file,
                dev,
                ino,
                taken_over_from: None,
                creator: Creator::current(),
            }),
        }),
        Err(e) => {
            if same_file(path, dev, ino) {
                let _ = std::fs::remove_file(path);
            }
            Err(e)
        }
    }
}

/// An existing file at the name, when taking over is allowed. `Ok(None)`: it vanished or was replaced meanwhile.
fn take_over(path: &Path, options: &SharedOptions) -> Result<Option<Region>, ArbiterError> {
    let file = match open_file(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(open_error("open", path, e)),
    };
    let meta = verify(&file, path, options, false)?;
    if !try_lock(&file).map_err(|e| os_error("flock", path, e))? {
        return Err(ArbiterError::InUse {
            path: path.display().to_string(),
            pid: recorded_pid(&file),
        });
    }
    // A server removes its file before it lets go of the lock; a lock we got on a file no longer at the name is
    // one that server just left.
    if !same_file(path, meta.dev(), meta.ino()) {
        return Ok(None);
    }
    // Now the size: with the lock ours, nobody is still creating the file.
    verify(&file, path, options, true)?;
    let previous = recorded_pid(&file);
    let region = Region::Shared {
        ptr: map(&file, path)?,
        path: path.to_path_buf(),
        server: None,
    };
    // A file of another layout is refused (and left alone) rather than overwritten.
    check_header(&region, path, true)?;
    tracing::warn!(path = %path.display(), previous_pid = previous, "took over the arbiter file of a server that is gone");
    Ok(Some(region.serve(Server {
        _lock: file,
        dev: meta.dev(),
        ino: meta.ino(),
        taken_over_from: Some(previous),
        creator: Creator::current(),
    })))
}

fn map(file: &File, path: &Path) -> Result<NonNull<Layout>, ArbiterError> {
    // SAFETY: a new shared mapping of LAYOUT_BYTES of an open file checked to be that long; no existing memory is
    // affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LAYOUT_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(os_error("mmap", path, std::io::Error::last_os_error()));
    }
    NonNull::new(ptr.cast::<Layout>())
        .ok_or_else(|| os_error("mmap", path, ErrorKind::InvalidData.into()))
}
