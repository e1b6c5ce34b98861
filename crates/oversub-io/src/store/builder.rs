//! [`StoreBuilder`]: the options of a store and the creating, opening, locking, recognising and sizing of its
//! members before a [`SwapStore`] is made of them.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::inspect::Verdict;
use super::scrub::Backing;
use super::sys::{
    block_size64, c_path, dio_alignment, direct_refused_for_test, euid, fresh_header, fstat,
    logical_block_size, narrow_mode, now_unix, on_store, preallocate, probe_direct_read,
    set_direct, store_io, warn_buffered, write_header, Doing,
};
use super::{
    exclusive, inspect, prioritized, stripe, Scrub, SwapStore, DEFAULT_ALIGNMENT, NEXT_TEMP_ID,
};
use crate::engine::{select_engine, EngineChoice, IoEngine};
use crate::error::IoError;

/// Configures and creates/opens a [`SwapStore`].
#[derive(Debug, Clone)]
pub struct StoreBuilder {
    capacity: Option<u64>,
    max_io_bytes: usize,
    /// Largest write request, when it differs from reads (from a tuned I/O point).
    max_write_io_bytes: Option<usize>,
    queue_depth: usize,
    engine_choice: EngineChoice,
    engine: Option<Arc<dyn IoEngine>>,
    /// Set by [`engine`](Self::engine): the store does not own its engine, so it cannot calibrate.
    engine_given: bool,
    keep: bool,
    direct: bool,
    force: bool,
    scrub: Scrub,
    /// Stripe unit of a store over several locations; `None`: the (read) `max_io_bytes`.
    stripe_bytes: Option<u64>,
    priority_io: bool,
    /// Requests the priority queue lets into the engine at once; `None`: the engine's queue depth.
    priority_window: Option<usize>,
}

impl Default for StoreBuilder {
    fn default() -> Self {
        StoreBuilder {
            capacity: None,
            max_io_bytes: 4 << 20,
            max_write_io_bytes: None,
            queue_depth: 32,
            engine_choice: EngineChoice::Auto,
            engine: None,
            engine_given: false,
            keep: false,
            direct: true,
            force: false,
            scrub: Scrub::OnClose,
            stripe_bytes: None,
            priority_io: false,
            priority_window: None,
        }
    }
}

impl StoreBuilder {
    /// Serves the store's transfers by priority ([`PriorityEngine`] in front of the engine): a transfer of a slot
    /// with a higher [`Slot::set_priority`] overtakes the requests of lower ones not yet started, so a
    /// high-priority tenant's page-in does not wait behind a victim's bulk I/O. Off by default (FIFO).
    pub fn priority_io(mut self, on: bool) -> Self {
        self.priority_io = on;
        self
    }

    /// With [`priority_io`](Self::priority_io): how many requests the queue lets into the engine at once (default
    /// the engine's queue depth). A high-priority request waits for at most this many started ones; fewer bound
    /// that wait more tightly, at the cost of the depth a single stream gets.
    pub fn priority_window(mut self, requests: usize) -> Self {
        self.priority_window = Some(requests.max(1));
        self
    }

    /// Size of the data area (the header comes on top). Required for created files; for `open` it defaults to
    /// the file/device size less the header (a smaller file is extended).
    pub fn capacity_bytes(mut self, bytes: u64) -> Self {
        self.capacity = Some(bytes);
        self
    }

    /// Largest single request (default 4 MiB, rounded down to the alignment);
    /// transfers are split only at this size and at extent boundaries.
    pub fn max_io_bytes(mut self, bytes: usize) -> Self {
        self.max_io_bytes = bytes;
        self
    }

    /// Queue depth of the engine built by the store (default 32).
    pub fn io_points(
        mut self,
        read: crate::tuning::IoPoint,
        write: crate::tuning::IoPoint,
    ) -> Self {
        self.max_io_bytes = read.block_bytes;
        self.max_write_io_bytes = Some(write.block_bytes);
        self.queue_depth = read.queue_depth.max(write.queue_depth);
        self
    }

    /// Requests kept in flight: the queue depth of the engine the store creates.
    pub fn queue_depth(mut self, depth: usize) -> Self {
        self.queue_depth = depth;
        self
    }

    /// Which engine to select (default Auto). Ignored when `engine` is given.
    pub fn engine_choice(mut self, choice: EngineChoice) -> Self {
        self.engine_choice = choice;
        self
    }

    /// Uses this engine (e.g. a shared one or a test double) instead of selecting one.
    pub fn engine(mut self, engine: Arc<dyn IoEngine>) -> Self {
        self.engine_given = true;
        self.engine = Some(engine);
        self
    }

    /// Keeps a created file on disk instead of unlinking it at once (default false).
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// Uses O_DIRECT (default true); falls back to buffered I/O with a warning where
    /// the file system refuses it.
    pub fn direct(mut self, direct: bool) -> Self {
        self.direct = direct;
        self
    }

    /// Lets [`open`](Self::open) use what it would refuse with [`IoError::StoreRefused`] (default false): a file
    /// or device holding a file system, partition table or other data not written by oversub, another user's
    /// store (it becomes this user's), a file whose mode cannot be narrowed to 0600. Its contents are destroyed.
    /// It cannot override [`IoError::StoreBusy`]: the kernel's refusal of a mounted or exclusively opened device,
    /// or another store's lock. Front ends spell it `--force-store` (CLI) and `force_store=True` (Python).
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// What happens to swapped-out data once the store no longer needs it (default [`Scrub::OnClose`]).
    pub fn scrub(mut self, scrub: Scrub) -> Self {
        self.scrub = scrub;
        self
    }

    /// Stripe unit of a store over several locations ([`build`](Self::build)): logical bytes `[k * S, (k + 1) *
    /// S)` go to member `k % N` (see [`stripe`]). A multiple of the alignment; default the (read)
    /// [`max_io_bytes`](Self::max_io_bytes), 4 MiB, so each request lands on one member. Ignored with one
    /// location.
    pub fn stripe_bytes(mut self, bytes: u64) -> Self {
        self.stripe_bytes = Some(bytes);
        self
    }

    /// Makes a store at each of `locations`, the rule front ends apply to a `--store` argument: a directory gets
    /// a new file ([`create_temp`](Self::create_temp)), an existing file or block device is
    /// [`open`](Self::open)ed, any other path is [`create`](Self::create)d. One location gives exactly the store
    /// those calls give.
    ///
    /// Several locations give one store striped over them (its *members*; see [`stripe`]): one logical data
    /// space whose stripe units ([`stripe_bytes`](Self::stripe_bytes)) go to the members in turn, so a large
    /// transfer runs on all of them at once, in one batch on one engine. Each member is a store file or device of
    /// its own (header, lock, scrub); `capacity_bytes`, if set, is the total data capacity, split evenly over the
    /// members (each rounded up to whole stripe units). Two locations naming the same file, device or directory
    /// are refused. If member `k` cannot be made, members `0..k` are closed again (files this call created are
    /// removed) and the error is [`IoError::Member`] naming the location (or [`IoError::StoreBusy`] /
    /// [`IoError::StoreRefused`], which name it already).
    pub fn build(self, locations: &[PathBuf]) -> Result<SwapStore, IoError> {
        match locations {
            [] => Err(IoError::InvalidArgument(
                "no swap store location given".into(),
            )),
            [one] => {
                // `symlink_metadata`: a link at the name (even a dangling one) is opened, and refused there,
                // rather than created over ("File exists").
                if one.is_dir() {
                    self.create_temp(one)
                } else if std::fs::symlink_metadata(one).is_ok() {
                    self.open(one)
                } else {
                    self.create(one)
                }
            }
            several => self.build_striped(several),
        }
    }

    fn build_striped(mut self, locations: &[PathBuf]) -> Result<SwapStore, IoError> {
        self.check_max_io()?;
        stripe::check_distinct(locations)?;
        let unit = self.stripe_bytes.unwrap_or(self.max_io_bytes as u64);
        if unit == 0 {
            return Err(IoError::InvalidArgument(
                "stripe_bytes must be non-zero".into(),
            ));
        }
        if let Some(total) = self.capacity {
            let per = total
                .div_ceil(locations.len() as u64)
                .checked_next_multiple_of(unit)
                .ok_or_else(|| IoError::InvalidArgument(format!("capacity {total} too large")))?;
            self.capacity = Some(per);
        }
        // One engine for all members: their requests go into the same batches.
        self.engine = Some(self.take_engine()?);
        let mut members = Vec::with_capacity(locations.len());
        for loc in locations {
            let made = if loc.is_dir() {
                self.create_temp_member(loc)
            } else if std::fs::symlink_metadata(loc).is_ok() {
                self.open_member(loc)
            } else {
                self.create_member(loc)
            };
            match made {
                Ok(m) => members.push(m),
                Err(e) => {
                    close_and_remove(members);
                    return Err(stripe::name_location(loc, e));
                }
            }
        }
        let created: Vec<PathBuf> = members
            .iter()
            .filter(|m| m.created && m.kept)
            .map(|m| m.path.clone())
            .collect();
        self.assemble(members).inspect_err(|_| {
            // The members were closed when `assemble` dropped them.
            for p in created {
                let _ = std::fs::remove_file(p);
            }
        })
    }

    /// Creates a new, uniquely named file in `dir`.
    pub fn create_temp(mut self, dir: &Path) -> Result<SwapStore, IoError> {
        // Select the engine once, not per name attempt.
        self.engine = Some(self.take_engine()?);
        let member = self.create_temp_member(dir)?;
        self.assemble(vec![member])
    }

    /// A new, uniquely named file in `dir` (the engine is already chosen).
    fn create_temp_member(&self, dir: &Path) -> Result<Backing, IoError> {
        let pid = std::process::id();
        let mut last_err = None;
        for _ in 0..16 {
            let n = NEXT_TEMP_ID.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = dir.join(format!("oversub-swap-{pid}-{n}-{nanos:08x}.swap"));
            match self.create_member(&path) {
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => last_err = Some(e),
                other => return other,
            }
        }
        Err(last_err.unwrap_or_else(|| {
            IoError::InvalidArgument(format!("no unique file name in {}", dir.display()))
        }))
    }

    /// Creates a new file at `path` (fails if it exists), mode 0600, locked, with a header and the data area
    /// preallocated to the capacity, and unlinked at once unless `keep(true)`.
    pub fn create(mut self, path: &Path) -> Result<SwapStore, IoError> {
        self.check_create()?;
        self.engine = Some(self.take_engine()?);
        let member = self.create_member(path)?;
        self.assemble(vec![member])
    }

    fn check_create(&self) -> Result<u64, IoError> {
        let capacity = match self.capacity {
            Some(c) if c > 0 => c,
            _ => {
                return Err(IoError::InvalidArgument(
                    "capacity_bytes must be set (and non-zero) to create a swap file".into(),
                ))
            }
        };
        self.check_max_io()?;
        Ok(capacity)
    }

    /// The file of [`create`](Self::create); a failed system call on it is [`IoError::StoreIo`] naming it.
    fn create_member(&self, path: &Path) -> Result<Backing, IoError> {
        self.create_file(path).map_err(on_store(path))
    }

    fn create_file(&self, path: &Path) -> Result<Backing, IoError> {
        let capacity = self.check_create()?;
        let cpath = c_path(path)?;
        // O_DIRECT is added with fcntl below: opening with it on a file system that
        // refuses it fails with EINVAL after the file was already created.
        // SAFETY: cpath is a valid NUL-terminated string.
        let raw = unsafe {
            libc::open(
                cpath.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if raw < 0 {
            let err = std::io::Error::last_os_error();
            return Err(store_io("open", path, err, Doing::Create));
        }
        // SAFETY: open just returned this descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Removes the file again if setup fails (or right away when not kept).
        let mut guard = UnlinkGuard {
            path: &cpath,
            armed: true,
        };
        // Locked before anything else: the name was visible from the moment it was created.
        let held = exclusive::lock(fd.as_raw_fd(), path, &fstat(fd.as_raw_fd())?)?;
        if !self.keep {
            guard.unlink()?;
        }
        // SAFETY: fd is open; umask may have narrowed but never widens past this.
        if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } < 0 {
            return Err(IoError::last_os("fchmod"));
        }
        let dio = dio_alignment(fd.as_raw_fd());
        let mut direct = self.direct;
        if direct && dio == Some(0) {
            warn_buffered(path, "the file system does not support direct I/O");
            direct = false;
        }
        if direct {
            if let Err(e) = set_direct(fd.as_raw_fd(), true) {
                if e.raw_os_error() != Some(libc::EINVAL) {
                    return Err(e);
                }
                warn_buffered(path, "O_DIRECT was refused (EINVAL)");
                direct = false;
            }
        }
        let dio_align = dio.filter(|&a| a > 0).unwrap_or(DEFAULT_ALIGNMENT);
        // Round to a size valid for both direct and buffered alignment, so a later
        // fallback does not change the capacity; the header takes one such unit.
        let unit = dio_align.max(DEFAULT_ALIGNMENT) as u64;
        let capacity = capacity
            .checked_next_multiple_of(unit)
            .ok_or_else(|| IoError::InvalidArgument(format!("capacity {capacity} too large")))?;
        let header_bytes = unit;
        let total = header_bytes
            .checked_add(capacity)
            .ok_or_else(|| IoError::InvalidArgument(format!("capacity {capacity} too large")))?;
        preallocate(fd.as_raw_fd(), path, total)?;
        if direct && !probe_direct_read(fd.as_raw_fd(), dio_align)? {
            warn_buffered(path, "a direct read failed with EINVAL");
            set_direct(fd.as_raw_fd(), false)?;
            direct = false;
        }
        let alignment = if direct { dio_align } else { DEFAULT_ALIGNMENT };
        let header = fresh_header(header_bytes, capacity, now_unix(), header_bytes)?;
        write_header(fd.as_raw_fd(), alignment, &header)?;
        guard.armed = false;
        Ok(Backing {
            fd,
            held,
            path: path.to_path_buf(),
            block_device: false,
            alignment,
            data_offset: header_bytes,
            capacity,
            high_water: AtomicU64::new(header_bytes),
            previous_end: header_bytes,
            header: Mutex::new(header),
            // An unlinked file cannot be reached by name, and its blocks are freed when it closes.
            scrub_at_close: self.keep && self.scrub != Scrub::Keep,
            kept: self.keep,
            created: true,
            direct,
            closed_early: AtomicBool::new(false),
        })
    }

    /// Opens an existing regular file or block device (never unlinked: `is_kept`), locked, after checking what
    /// it holds (see the module docs): blank, or this user's store, else [`IoError::StoreRefused`] unless
    /// [`force`](Self::force). A busy file or device is [`IoError::StoreBusy`]. Writes a fresh header (keeping
    /// the creation time of an oversub store), narrows a regular file's mode to 0600 and preallocates it.
    pub fn open(mut self, path: &Path) -> Result<SwapStore, IoError> {
        self.check_max_io()?;
        self.engine = Some(self.take_engine()?);
        let member = self.open_member(path)?;
        self.assemble(vec![member])
    }

    /// The file or device of [`open`](Self::open); a failed system call on it is [`IoError::StoreIo`] naming it.
    fn open_member(&self, path: &Path) -> Result<Backing, IoError> {
        self.open_existing(path).map_err(on_store(path))
    }

    fn open_existing(&self, path: &Path) -> Result<Backing, IoError> {
        let cpath = c_path(path)?;
        // O_EXCL without O_CREAT is defined for block devices only, so it is asked for them alone; fstat below
        // checks that the path did not change kind in between.
        let want_device = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
        // O_NOFOLLOW for files: a link at the name may have been planted by another user and point at one of the
        // caller's files (or root's). Devices are often named through udev's links (/dev/disk/by-id), and their
        // O_EXCL open and content check guard them.
        let no_follow = !want_device && !self.force;
        let base = libc::O_RDWR
            | libc::O_CLOEXEC
            | if want_device { libc::O_EXCL } else { 0 }
            | if no_follow { libc::O_NOFOLLOW } else { 0 };
        let open = |flags: libc::c_int| -> std::io::Result<OwnedFd> {
            // SAFETY: cpath is a valid NUL-terminated string.
            let raw = unsafe { libc::open(cpath.as_ptr(), flags) };
            if raw < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: open just returned this descriptor.
            Ok(unsafe { OwnedFd::from_raw_fd(raw) })
        };
        let mut direct = self.direct;
        let mut retries = 0;
        let opened = loop {
            let first = if !direct {
                open(base)
            } else if direct_refused_for_test() {
                Err(std::io::Error::from_raw_os_error(libc::EINVAL))
            } else {
                open(base | libc::O_DIRECT)
            };
            let opened = match first {
                Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    warn_buffered(path, "O_DIRECT was refused (EINVAL)");
                    direct = false;
                    open(base)
                }
                other => other,
            };
            // A device closed here a moment ago can still be open in a child being spawned (see `exclusive`).
            let child_copy = want_device
                && opened
                    .as_ref()
                    .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
                && exclusive::busy_with_a_child_copy(path);
            if child_copy && retries < exclusive::SHARED_LOCK_RETRIES {
                retries += 1;
                std::thread::sleep(exclusive::SHARED_LOCK_PAUSE);
                continue;
            }
            break opened;
        };
        let fd = opened.map_err(|e| {
            if want_device && e.raw_os_error() == Some(libc::EBUSY) {
                exclusive::device_busy(path)
            } else if no_follow && e.raw_os_error() == Some(libc::ELOOP) {
                let target = std::fs::read_link(path)
                    .map(|t| format!(" (to {})", t.display()))
                    .unwrap_or_default();
                IoError::StoreRefused {
                    path: path.to_path_buf(),
                    reason: format!(
                        "it is a symbolic link{target}: one another user planted could point at a file of yours; give the file's own path"
                    ),
                }
            } else {
                store_io("open", path, e, Doing::Open)
            }
        })?;
        let st = fstat(fd.as_raw_fd())?;
        let kind = st.st_mode & libc::S_IFMT;
        if (kind == libc::S_IFBLK) != want_device {
            return Err(IoError::InvalidArgument(format!(
                "{} changed while it was being opened",
                path.display()
            )));
        }
        if kind != libc::S_IFBLK && kind != libc::S_IFREG {
            return Err(IoError::InvalidArgument(format!(
                "{} is neither a regular file nor a block device",
                path.display()
            )));
        }
        // Before reading anything: another holder's store may be in the middle of writing it.
        let mut held = exclusive::lock(fd.as_raw_fd(), path, &st)?;
        if kind == libc::S_IFBLK {
            held.lock_loop_backing(fd.as_raw_fd(), path, st.st_rdev)?;
            self.open_device(fd, held, path, direct)
        } else {
            // Size and mode as they are now that nobody else may change them.
            let st = fstat(fd.as_raw_fd())?;
            self.open_file(fd, held, path, &st, direct)
        }
    }

    fn open_device(
        &self,
        fd: OwnedFd,
        held: exclusive::Held,
        path: &Path,
        direct: bool,
    ) -> Result<Backing, IoError> {
        let raw = fd.as_raw_fd();
        let size = block_size64(raw)?;
        let alignment = logical_block_size(raw)?;
        let header_bytes = alignment.max(DEFAULT_ALIGNMENT) as u64;
        let room = size.saturating_sub(header_bytes);
        let capacity = match self.capacity {
            Some(c) if c > room => {
                return Err(IoError::InvalidArgument(format!(
                    "capacity {} exceeds the {} of the block device {} after its header: give a smaller capacity",
                    oversub_base::format_bytes(c),
                    oversub_base::format_bytes(room),
                    path.display()
                )))
            }
            Some(c) => c,
            None => room,
        };
        let capacity = capacity - capacity % alignment as u64;
        if capacity == 0 {
            return Err(IoError::InvalidArgument(format!(
                "block device {} is too small for a {header_bytes}-byte header and one block",
                path.display()
            )));
        }
        let (created, previous_end) = self.accept(path, inspect::inspect(raw, size, alignment)?)?;
        let header = fresh_header(header_bytes, capacity, created, previous_end)?;
        write_header(raw, alignment, &header)?;
        Ok(Backing {
            fd,
            held,
            path: path.to_path_buf(),
            block_device: true,
            alignment,
            data_offset: header_bytes,
            capacity,
            high_water: AtomicU64::new(header_bytes),
            previous_end: header.scrub_end,
            header: Mutex::new(header),
            scrub_at_close: self.scrub != Scrub::Keep,
            kept: true,
            created: false,
            direct,
            closed_early: AtomicBool::new(false),
        })
    }

    fn open_file(
        &self,
        fd: OwnedFd,
        held: exclusive::Held,
        path: &Path,
        st: &libc::stat,
        mut direct: bool,
    ) -> Result<Backing, IoError> {
        let raw = fd.as_raw_fd();
        let dio = dio_alignment(raw);
        if direct && dio == Some(0) {
            warn_buffered(path, "the file system does not support direct I/O");
            set_direct(raw, false)?;
            direct = false;
        }
        let dio_align = dio.filter(|&a| a > 0).unwrap_or(DEFAULT_ALIGNMENT);
        let unit = dio_align.max(DEFAULT_ALIGNMENT) as u64;
        let header_bytes = unit;
        // Settle direct or buffered first: the content check reads with the final alignment.
        if direct && !probe_direct_read(raw, dio_align)? {
            warn_buffered(path, "a direct read failed with EINVAL");
            set_direct(raw, false)?;
            direct = false;
        }
        let alignment = if direct { dio_align } else { DEFAULT_ALIGNMENT };
        let euid = euid();
        if st.st_uid != euid {
            // Its owner could read whatever is swapped to it (narrowing the mode does not change the owner).
            self.refuse_unless_forced(
                path,
                format!(
                    "it belongs to uid {} (you are uid {euid}), who could read what is swapped to it",
                    st.st_uid
                ),
            )?;
        }
        let file_len = u64::try_from(st.st_size).unwrap_or(0);
        let (created, previous_end) =
            self.accept(path, inspect::inspect(raw, file_len, alignment)?)?;
        let capacity = match self.capacity {
            Some(0) => {
                return Err(IoError::InvalidArgument(
                    "capacity_bytes must be non-zero".into(),
                ))
            }
            Some(c) => c
                .checked_next_multiple_of(unit)
                .ok_or_else(|| IoError::InvalidArgument(format!("capacity {c} too large")))?,
            None => {
                let c = file_len.saturating_sub(header_bytes);
                let c = c - c % unit;
                if c == 0 {
                    return Err(IoError::InvalidArgument(format!(
                        "{} is empty (or smaller than {} bytes); set capacity_bytes to size it",
                        path.display(),
                        header_bytes + unit
                    )));
                }
                c
            }
        };
        let total = header_bytes
            .checked_add(capacity)
            .ok_or_else(|| IoError::InvalidArgument(format!("capacity {capacity} too large")))?;
        narrow_mode(raw, path, st, self.force)?;
        // Also for a long enough file: the scrub of an earlier store punched its data area, and a user's file
        // may be sparse; writes into holes could hit ENOSPC mid-page-out.
        preallocate(raw, path, total)?;
        let header = fresh_header(header_bytes, capacity, created, previous_end)?;
        write_header(raw, alignment, &header)?;
        Ok(Backing {
            fd,
            held,
            path: path.to_path_buf(),
            block_device: false,
            alignment,
            data_offset: header_bytes,
            capacity,
            high_water: AtomicU64::new(header_bytes),
            previous_end: header.scrub_end,
            header: Mutex::new(header),
            scrub_at_close: self.scrub != Scrub::Keep,
            kept: true,
            created: false,
            direct,
            closed_early: AtomicBool::new(false),
        })
    }

    /// `StoreRefused` for `reason`, or, with [`force`](Self::force), a warning and Ok.
    fn refuse_unless_forced(&self, path: &Path, reason: String) -> Result<(), IoError> {
        if self.force {
            tracing::warn!(
                path = %path.display(),
                "using it as a swap store because force is set: {reason}"
            );
            return Ok(());
        }
        Err(IoError::StoreRefused {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Whether `open` may write over what it found; the creation time for the new header and the scrub end the
    /// old one recorded (0 when there was none: only what this store writes is scrubbed then).
    fn accept(&self, path: &Path, verdict: Verdict) -> Result<(u64, u64), IoError> {
        let euid = euid();
        let refuse = |reason: String| {
            self.refuse_unless_forced(path, reason)
                .map(|()| (now_unix(), 0))
        };
        match verdict {
            Verdict::Blank => Ok((now_unix(), 0)),
            Verdict::Ours(h) if h.owner_uid == euid => Ok((h.created, h.scrub_end)),
            Verdict::Ours(h) => refuse(format!(
                "it is another user's oversub swap store (owner uid {}, you are uid {euid})",
                h.owner_uid
            )),
            Verdict::Foreign(reason) => refuse(reason),
        }
    }

    fn check_max_io(&self) -> Result<(), IoError> {
        if self.max_io_bytes == 0 {
            return Err(IoError::InvalidArgument(
                "max_io_bytes must be non-zero".into(),
            ));
        }
        Ok(())
    }

    fn take_engine(&self) -> Result<Arc<dyn IoEngine>, IoError> {
        let engine = match &self.engine {
            Some(e) => e.clone(),
            None => select_engine(self.engine_choice, self.queue_depth)?,
        };
        Ok(prioritized(engine, self.priority_io, self.priority_window))
    }

    /// The store over `members` (at least one), with this builder's engine and settings.
    fn assemble(&self, members: Vec<Backing>) -> Result<SwapStore, IoError> {
        let engine = self.take_engine()?;
        SwapStore::new(Parts {
            priority_io: self.priority_io,
            priority_window: self.priority_window,
            members,
            max_io_bytes: self.max_io_bytes,
            max_write_io_bytes: self.max_write_io_bytes.unwrap_or(self.max_io_bytes),
            stripe_bytes: self.stripe_bytes,
            engine_kind: if self.engine_given {
                None
            } else {
                match engine.name() {
                    "io_uring" => Some(EngineChoice::Uring),
                    "psync" => Some(EngineChoice::Psync),
                    _ => None,
                }
            },
            engine,
            scrub: self.scrub,
        })
    }
}

/// Closes members made so far (dropping them releases their locks) and removes the files among them that were
/// created and kept (temporary files were unlinked when they were created).
pub(super) fn close_and_remove(members: Vec<Backing>) {
    let created: Vec<PathBuf> = members
        .iter()
        .filter(|m| m.created && m.kept)
        .map(|m| m.path.clone())
        .collect();
    drop(members);
    for p in created {
        let _ = std::fs::remove_file(p);
    }
}

pub(super) struct Parts {
    pub(super) priority_io: bool,
    pub(super) priority_window: Option<usize>,
    pub(super) members: Vec<Backing>,
    pub(super) max_io_bytes: usize,
    pub(super) max_write_io_bytes: usize,
    pub(super) stripe_bytes: Option<u64>,
    pub(super) engine: Arc<dyn IoEngine>,
    /// The kind of engine the store selected itself; None for one it was given.
    pub(super) engine_kind: Option<EngineChoice>,
    pub(super) scrub: Scrub,
}

struct UnlinkGuard<'a> {
    path: &'a CString,
    armed: bool,
}

impl UnlinkGuard<'_> {
    fn unlink(&mut self) -> Result<(), IoError> {
        self.armed = false;
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::unlink(self.path.as_ptr()) } < 0 {
            return Err(IoError::last_os("unlink"));
        }
        Ok(())
    }
}

impl Drop for UnlinkGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Best effort cleanup of a half-created file.
            // SAFETY: valid NUL-terminated path.
            unsafe { libc::unlink(self.path.as_ptr()) };
        }
    }
}
