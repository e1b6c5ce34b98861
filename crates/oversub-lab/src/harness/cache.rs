//! Emptying the page cache before a timed read or write, so no sample inherits another's cached pages.

use crate::LabError;

/// How to empty the page cache, as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum CacheDropMode {
    /// `drop-caches` when this process may write `/proc/sys/vm/drop_caches`, else `fadvise`.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "drop-caches when allowed, else fadvise")
    )]
    Auto,
    /// `echo 3 > /proc/sys/vm/drop_caches` (page, dentry and inode caches, as in the paper; needs root).
    #[cfg_attr(
        feature = "clap",
        value(
            help = "echo 3 > /proc/sys/vm/drop_caches (page, dentry and inode caches, as in the paper)"
        )
    )]
    DropCaches,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)` on the store only.
    #[cfg_attr(feature = "clap", value(help = "posix_fadvise(DONTNEED) on the store"))]
    Fadvise,
}

/// How the page cache is emptied, as chosen for this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheDrop {
    /// `echo 3 > /proc/sys/vm/drop_caches`: page, dentry and inode caches, as in the paper.
    DropCaches,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)` on the store file only.
    Fadvise,
}

impl CacheDrop {
    /// The drop `mode` asks for, tried once: `DropCaches` fails here when it is not allowed.
    pub fn choose(mode: CacheDropMode) -> Result<CacheDrop, LabError> {
        match mode {
            CacheDropMode::Fadvise => return Ok(CacheDrop::Fadvise),
            CacheDropMode::DropCaches => {
                write_drop_caches()
                    .map_err(|e| LabError::os("cannot write /proc/sys/vm/drop_caches", e))?;
                return Ok(CacheDrop::DropCaches);
            }
            CacheDropMode::Auto => {}
        }
        Ok(if write_drop_caches().is_ok() {
            CacheDrop::DropCaches
        } else {
            tracing::info!("cannot write /proc/sys/vm/drop_caches; dropping the store's pages with posix_fadvise");
            CacheDrop::Fadvise
        })
    }

    /// The name reports use (`drop_caches`, `posix_fadvise`).
    pub fn name(self) -> &'static str {
        match self {
            CacheDrop::DropCaches => "drop_caches",
            CacheDrop::Fadvise => "posix_fadvise",
        }
    }

    /// [`apply`](Self::apply) to every one of `fds` (the system-wide drop only once).
    pub fn apply_all(self, fds: &[libc::c_int]) -> Result<(), LabError> {
        match self {
            CacheDrop::DropCaches => self.apply(fds.first().copied().unwrap_or(-1)),
            CacheDrop::Fadvise => fds.iter().try_for_each(|&fd| self.apply(fd)),
        }
    }

    /// Empties the cache of `fd`'s file (or the whole system's).
    pub fn apply(self, fd: libc::c_int) -> Result<(), LabError> {
        match self {
            CacheDrop::DropCaches => write_drop_caches()
                .map_err(|e| LabError::os("writing /proc/sys/vm/drop_caches", e))?,
            CacheDrop::Fadvise => {
                // DONTNEED skips dirty pages (a buffered store's fresh writes): write them back first.
                // SAFETY: fdatasync and fadvise on an open fd have no memory-safety preconditions.
                let rc = unsafe {
                    libc::fdatasync(fd);
                    libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED)
                };
                if rc != 0 {
                    return Err(LabError::os(
                        "posix_fadvise",
                        std::io::Error::from_raw_os_error(rc),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn write_drop_caches() -> std::io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", b"3")
}
