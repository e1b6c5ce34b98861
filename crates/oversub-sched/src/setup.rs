//! What running a schedule needs around the planner and the executor: the store's bandwidths (given, from a
//! platform profile, or measured through the pager) and a pool and store sized for a configuration.
//!
//! `oversub plan`, `oversub run` and the Python bindings share these, so the plans they make assume the same speeds
//! and the runs page through the same kind of pool.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use oversub_core::{BufferFlags, PagerError, Pool, PoolSpec};
use oversub_io::IoError;
use oversub_profile::{Profile, ProfileError};
use serde::Serialize;

use crate::model::System;
use crate::plan::Bandwidths;

/// Bytes of one round trip when the store's bandwidths are measured ([`measure_bandwidths`]): 256 MiB.
pub const MEASURE_BYTES: u64 = 256 << 20;

/// Why the store's bandwidths could not be found, or a pool could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The platform profile could not be read or is not valid.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The platform profile has no `[storage]` table to take the bandwidths from.
    #[error(
        "{} has no [storage] table: run `oversub probe` to measure the store, or add one",
        path.display()
    )]
    NoStorage {
        /// The profile.
        path: PathBuf,
    },
    /// A store location (`--store`, the platform's `store`) does not exist. Nothing is created in its place: a
    /// store goes in an existing folder, or is an existing file or block device.
    #[error(
        "store location {} does not exist: give an existing folder, file or device",
        path.display()
    )]
    StoreMissing {
        /// The location as given.
        path: PathBuf,
    },
    /// A store location could not be looked at (a folder on its path may not be searched, ...).
    #[error("cannot look at the store location {}: {source}", path.display())]
    StoreLocation {
        /// The location as given.
        path: PathBuf,
        /// The OS error of `stat`.
        #[source]
        source: std::io::Error,
    },
    /// Demand paging maps a store file of its own beside the store, and the store is a block device, which has
    /// no folder to put it in (its parent would be `/dev`).
    #[error(
        "demand paging maps a file of its own, and the store {} is a block device: give a folder or file on a file system for demand mode",
        path.display()
    )]
    DemandOnDevice {
        /// The device.
        path: PathBuf,
    },
    /// The swap store could not be created.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The pool could not be created, or paging failed while measuring.
    #[error(transparent)]
    Pager(#[from] PagerError),
    /// Demand paging could not be measured on the store.
    #[error("measuring demand paging: {0}")]
    Demand(#[from] oversub_core::DemandError),
}

/// Where the store's bandwidths came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BandwidthSource {
    /// Given by the caller.
    Given,
    /// A platform profile's `[storage]` table.
    Profile,
    /// Measured through the pager on the configuration's store ([`measure_bandwidths`]).
    Measured,
}

impl BandwidthSource {
    /// `"given"`, `"profile"` or `"measured"`, as the JSON documents write it.
    pub fn name(self) -> &'static str {
        match self {
            BandwidthSource::Given => "given",
            BandwidthSource::Profile => "profile",
            BandwidthSource::Measured => "measured",
        }
    }
}

/// The store's bandwidths and where they came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreSpeed {
    /// Page-in and page-out speeds.
    pub bw: Bandwidths,
    /// Where they came from.
    pub source: BandwidthSource,
}

/// The store's bandwidths from a platform profile's `[storage]` table (docs/profile.md).
pub fn bandwidths_from_profile(path: &Path) -> Result<Bandwidths, SetupError> {
    let profile = Profile::load(path)?;
    let storage = profile.storage.ok_or_else(|| SetupError::NoStorage {
        path: path.to_path_buf(),
    })?;
    // Positive and finite: `Profile::load` checked.
    // Profiles hold no demand-paging speeds: demand is priced at these.
    Ok(Bandwidths::direct(
        storage.read_bytes_per_s,
        storage.write_bytes_per_s,
    ))
}

/// The folder demand paging's store file goes in (a [`DemandSpace`](oversub_core::DemandSpace) maps a file of its
/// own): `store` itself when it is a folder, else the folder holding it (an existing file); none given, the
/// system's temporary directory; a block device is [`SetupError::DemandOnDevice`]. The pager's store does not use this: it is the location itself
/// ([`store_locations`]). A location that does not exist is [`SetupError::StoreMissing`], never its parent: a
/// mistyped `/mnt/nvme/swp` must not put the store on the root file system.
pub fn store_dir(store: Option<&Path>) -> Result<PathBuf, SetupError> {
    let Some(p) = store else {
        return Ok(std::env::temp_dir());
    };
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Ok(p.to_path_buf()),
        Ok(m) if m.file_type().is_block_device() => Err(SetupError::DemandOnDevice {
            path: p.to_path_buf(),
        }),
        Ok(_) => Ok(match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        }),
        Err(e) => Err(missing(p, e)),
    }
}

fn missing(p: &Path, e: std::io::Error) -> SetupError {
    if e.kind() == std::io::ErrorKind::NotFound {
        SetupError::StoreMissing {
            path: p.to_path_buf(),
        }
    } else {
        SetupError::StoreLocation {
            path: p.to_path_buf(),
            source: e,
        }
    }
}

/// The platform's `stores` as the pager's store locations, each what it names: a folder (a new temporary file in
/// it), an existing file or a block device, as everywhere else ([`oversub_io::StoreBuilder::build`]); none given,
/// the system's temporary directory. Several stripe the store over them. A location must exist
/// ([`SetupError::StoreMissing`]; see [`store_dir`]).
pub fn store_locations(stores: &[PathBuf]) -> Result<Vec<PathBuf>, SetupError> {
    if stores.is_empty() {
        return Ok(vec![std::env::temp_dir()]);
    }
    for s in stores {
        std::fs::metadata(s).map_err(|e| missing(s, e))?;
    }
    Ok(stores.to_vec())
}

/// A pager error, with the store's own errors kept as [`SetupError::Io`].
fn pager(e: PagerError) -> SetupError {
    match e {
        PagerError::Store(io) => SetupError::Io(io),
        other => SetupError::Pager(other),
    }
}

/// Measures the pager's page-in and page-out speed on the store ([`store_locations`], striped when there are
/// several): the slowest of three round trips of `size` bytes (less on a block device that holds less), since plans
/// need speeds the store keeps up under sustained load, not its best.
pub fn measure_bandwidths(stores: &[PathBuf], size: u64) -> Result<Bandwidths, SetupError> {
    let mut spec = PoolSpec::new(size).stores(store_locations(stores)?);
    // Files hold exactly what is measured; block devices are used whole (the default rule), as the run will.
    if spec.default_store_bytes().is_some() {
        spec = spec.store_capacity(size);
    }
    let pool = spec.open().map_err(pager)?;
    // A device smaller than `size` is measured over what it holds (whole 2 MiB chunks).
    let size = size.min(pool.stats().store_capacity_bytes / (2 << 20) * (2 << 20));
    let space = pool.address_space();
    let b = space.alloc(size, BufferFlags::DEFAULT)?;
    let chunk = vec![0x5Au8; 4 << 20];
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(chunk.len() as u64);
        let part = chunk.get(..n as usize).unwrap_or(&chunk);
        space.write(b, offset, part)?;
        offset += n;
    }
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        space.page_out(b)?;
        writes.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        space.page_in(b)?;
        reads.push(t.elapsed().as_secs_f64());
    }
    let slowest = |v: &[f64]| v.iter().copied().fold(f64::MIN_POSITIVE, f64::max);
    // The pager moves whole buffers with direct I/O; demand paging is not measured here.
    Ok(Bandwidths::direct(
        size as f64 / slowest(&reads),
        size as f64 / slowest(&writes),
    ))
}

/// Demand-paging speeds of the store (see [`store_dir`]): a [`MEASURE_BYTES`] mapping of a store file written
/// back and faulted in again, the slowest of three rounds, with the given readahead (what the executor's demand mode
/// does).
pub fn measure_demand(
    store: Option<&Path>,
    readahead: oversub_core::Readahead,
) -> Result<oversub_core::DemandSpeeds, SetupError> {
    Ok(oversub_core::measure_demand_bandwidths_with(
        Some(&store_dir(store)?),
        MEASURE_BYTES,
        3,
        readahead,
    )?)
}

/// The store's bandwidths for `system`: `given`, else the `[storage]` table of `profile`, else measured on the
/// configuration's store ([`measure_bandwidths`] with [`MEASURE_BYTES`]).
pub fn store_speed(
    given: Option<Bandwidths>,
    profile: Option<&Path>,
    system: &System,
) -> Result<StoreSpeed, SetupError> {
    let (bw, source) = match (given, profile) {
        (Some(bw), _) => (bw, BandwidthSource::Given),
        (None, Some(p)) => (bandwidths_from_profile(p)?, BandwidthSource::Profile),
        (None, None) => (
            measure_bandwidths(&system.platform.stores, MEASURE_BYTES)?,
            BandwidthSource::Measured,
        ),
    };
    Ok(StoreSpeed { bw, source })
}

/// A pool (host memory as device memory) and a swap store for `system`: the platform's capacity plus a page of
/// slack per buffer (reservations are whole pages, so the planned capacity stays exact in bytes), and a store at
/// the platform's stores ([`store_locations`]; striped over them when there are several) of the default size
/// for the configuration's demand ([`PoolSpec::default_store_bytes`]: every buffer with room to spare; a block
/// device whole).
pub fn pool_for(system: &System) -> Result<Pool, SetupError> {
    let n = system.buffers().len() as u64;
    let slack = n * 4096;
    PoolSpec::new(system.platform.capacity_bytes + slack)
        .stores(store_locations(&system.platform.stores)?)
        .demand(system.demand_bytes(), n)
        .open()
        .map_err(pager)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_dir_is_the_folder_or_the_files_folder() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(store_dir(Some(dir.path())).unwrap(), dir.path());
        let file = dir.path().join("swap.bin");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(store_dir(Some(&file)).unwrap(), dir.path());
        assert_eq!(store_dir(None).unwrap(), std::env::temp_dir());
    }

    #[test]
    fn a_missing_store_location_is_refused_and_nothing_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nonexistent/dir");
        match store_dir(Some(&missing)) {
            Err(e @ SetupError::StoreMissing { .. }) => assert_eq!(
                e.to_string(),
                format!(
                    "store location {} does not exist: give an existing folder, file or device",
                    missing.display()
                )
            ),
            other => panic!("unexpected {other:?}"),
        }
        let err = measure_bandwidths(std::slice::from_ref(&missing), 8 << 20).unwrap_err();
        assert!(
            matches!(err, SetupError::StoreMissing { ref path } if *path == missing),
            "{err:?}"
        );
        assert!(store_locations(&[dir.path().to_path_buf(), missing]).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_profile_without_storage_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, "[profile]\nversion = 1\n").unwrap();
        match bandwidths_from_profile(&path) {
            Err(SetupError::NoStorage { path: p }) => assert_eq!(p, path),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn measured_bandwidths_are_positive() {
        let dir = tempfile::tempdir().unwrap();
        let bw = measure_bandwidths(&[dir.path().to_path_buf()], 8 << 20).unwrap();
        assert!(bw.read_bytes_per_s > 0.0 && bw.write_bytes_per_s > 0.0);
        let other = tempfile::tempdir().unwrap();
        let striped = measure_bandwidths(
            &[dir.path().to_path_buf(), other.path().to_path_buf()],
            8 << 20,
        )
        .unwrap();
        assert!(striped.read_bytes_per_s > 0.0 && striped.write_bytes_per_s > 0.0);
        assert_eq!(store_locations(&[]).unwrap(), [std::env::temp_dir()]);
    }
}
