//! Files oversub reads but does not own: a model checkpoint whose bytes back read-only buffers, so that nothing is
//! copied into the swap store at start-up ([`SwapStore::external_slot`](crate::SwapStore::external_slot)).
//!
//! An [`ExternalFile`] is opened read-only (with `O_DIRECT` where the file system takes it) and none of the store's
//! ownership steps apply: no lock, header, preallocation, mode change or scrub. It remembers the open file's
//! size, modification and change times and checks them before every read, so a checkpoint rewritten in place
//! under a running model is an error ([`IoError::ExternalChanged`]), not silently different weights.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::IoError;

/// What tells one version of an open file from the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    size: u64,
    mtime_s: i64,
    mtime_ns: i64,
    /// The inode's change time: moved by any write, including one whose modification time was put back
    /// (`touch -d`, `os.utime`), which a user cannot set back.
    ctime_s: i64,
    ctime_ns: i64,
    /// What also moves the change time without changing the bytes: a link removed (the file deleted or renamed
    /// over), a chmod or chown.
    nlink: u64,
    mode: u32,
    uid: u32,
    gid: u32,
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Self {
        Identity {
            size: meta.size(),
            mtime_s: meta.mtime(),
            mtime_ns: meta.mtime_nsec(),
            ctime_s: meta.ctime(),
            ctime_ns: meta.ctime_nsec(),
            nlink: meta.nlink(),
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
        }
    }

    /// Whether the change time moved with nothing but the contents to explain it.
    fn changed_in_place(&self, now: &Identity) -> bool {
        (now.ctime_s, now.ctime_ns) != (self.ctime_s, self.ctime_ns)
            && (now.nlink, now.mode, now.uid, now.gid)
                == (self.nlink, self.mode, self.uid, self.gid)
    }
}

/// A regular file opened read-only for reads into oversub buffers. Shared (`Arc`) by every slot that reads from it;
/// the file stays open while any of them lives.
#[derive(Debug)]
pub struct ExternalFile {
    file: File,
    path: PathBuf,
    direct: bool,
    identity: Identity,
}

impl ExternalFile {
    /// Opens `path` read-only, with `O_DIRECT` where the file system allows it (buffered otherwise, with a warning).
    /// Only regular files are taken.
    pub fn open(path: &Path) -> Result<ExternalFile, IoError> {
        let open = |flags: i32| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags | libc::O_CLOEXEC)
                .open(path)
        };
        let failed = |op: &'static str, what: &'static str| {
            move |source: std::io::Error| IoError::StoreIo {
                op,
                what: what.to_string(),
                path: path.to_path_buf(),
                source,
                hint: None,
            }
        };
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "O_DIRECT was refused (EINVAL); reads of this file will be buffered");
                (
                    open(0).map_err(failed("open", "cannot open the file"))?,
                    false,
                )
            }
            Err(source) => return Err(failed("open", "cannot open the file")(source)),
        };
        let meta = file
            .metadata()
            .map_err(failed("fstat", "cannot read the status of the file"))?;
        if !meta.file_type().is_file() {
            return Err(IoError::InvalidArgument(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        Ok(ExternalFile {
            file,
            path: path.to_path_buf(),
            direct,
            identity: Identity::of(&meta),
        })
    }

    /// The path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size when it was opened.
    pub fn len(&self) -> u64 {
        self.identity.size
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.identity.size == 0
    }

    /// Whether reads bypass the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Errors with [`IoError::ExternalChanged`] when the open file was modified since it was opened: its size or
    /// modification time changed, or its change time moved with nothing else to explain it (a rewrite whose
    /// modification time was put back; renaming the file itself also moves it, and reads as a change). A file
    /// renamed over, deleted or chmodded is not an error: reads go to the open file, whose bytes are still the
    /// ones the buffers were made from. The pager also keeps a checksum of each range from its first read (with
    /// checksums on), so a rewrite after that is a mismatch whatever the file's times say.
    pub fn check_unchanged(&self) -> Result<(), IoError> {
        let now = self.file.metadata().map_err(|source| IoError::Io {
            op: "fstat",
            source,
        })?;
        let now = Identity::of(&now);
        let what = if now.size != self.identity.size {
            format!(
                "its size changed from {} to {} bytes",
                self.identity.size, now.size
            )
        } else if (now.mtime_s, now.mtime_ns) != (self.identity.mtime_s, self.identity.mtime_ns) {
            "it was modified".to_string()
        } else if self.identity.changed_in_place(&now) {
            "its change time moved while its size, modification time, links and mode stayed (a rewrite with the \
             modification time put back, or the file renamed)"
                .to_string()
        } else {
            return Ok(());
        };
        Err(IoError::ExternalChanged {
            path: self.path.clone(),
            what,
        })
    }
}
