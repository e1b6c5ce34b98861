//! [`PoolSpec`]: what a pool is made of, said once, and the one place a [`Pool`] and its store are assembled.
//!
//! Every front (the Python `Pool(...)`, schedules, the lab's experiments) fills a `PoolSpec` and calls
//! [`PoolSpec::open`], so `store` means the same thing everywhere (a folder, a file or a block device; see
//! [`StoreBuilder::build`]) and the store's default size is one rule ([`PoolSpec::default_store_bytes`]).
//!
//! The store's default size, the one rule:
//! - every location a block device: the whole devices (a device cannot grow, and what was never written is never
//!   read or scrubbed);
//! - else, when the front knows what its buffers will hold ([`PoolSpec::demand`]): that demand, plus 2 MiB per
//!   buffer (a slot may round up to the device's 2 MiB chunks), plus 64 MiB of room;
//! - else four times the pool's capacity (oversubscription up to 4x), at least 64 MiB.
//!
//! [`PoolSpec::store_capacity`] overrides it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use oversub_accel::cuda::{CudaMemory, CudaMemoryConfig};
use oversub_accel::{DeviceMemory, HostMemory};
use oversub_arbiter::Gate;
use oversub_io::tuning::{Calibration, IoPoint};
use oversub_io::{EngineChoice, Scrub, StoreBuilder, SwapStore};
use oversub_tenants::swap::AlphaRule;

use crate::transfer::gated::MmCost;
use crate::transfer::host_tier::HostTierConfig;
use crate::transfer::staged::StagingConfig;
use crate::{PagerError, Pool, PoolConfig};

/// Which memory a pool's buffers live in. Parses from `"host"` (or `"cpu"`), `"cuda"` (or `"gpu"`, device 0) and
/// `"cuda:N"`, in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// Host memory standing in for device memory ([`HostMemory`]).
    #[default]
    Host,
    /// A CUDA device through its virtual-memory API ([`CudaMemory`]).
    Cuda {
        /// The device ordinal.
        ordinal: i32,
    },
}

impl Device {
    /// `"host"` or `"cuda"` (without the ordinal).
    pub fn name(self) -> &'static str {
        match self {
            Device::Host => "host",
            Device::Cuda { .. } => "cuda",
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Host => f.write_str("host"),
            Device::Cuda { ordinal } => write!(f, "cuda:{ordinal}"),
        }
    }
}

/// A device name that is not `host`, `cuda` or `cuda:N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("unknown device {given:?}: give \"host\", \"cuda\" or \"cuda:N\" (N >= 0)")]
pub struct DeviceParseError {
    /// The text as given.
    pub given: String,
}

impl FromStr for Device {
    type Err = DeviceParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim().to_ascii_lowercase();
        let err = || DeviceParseError {
            given: s.to_string(),
        };
        let (kind, index) = match text.split_once(':') {
            Some((kind, index)) => (
                kind,
                Some(
                    index
                        .trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|&i| i >= 0)
                        .ok_or_else(err)?,
                ),
            ),
            None => (text.as_str(), None),
        };
        match (kind, index) {
            ("host" | "cpu", None) => Ok(Device::Host),
            ("cuda" | "gpu", i) => Ok(Device::Cuda {
                ordinal: i.unwrap_or(0),
            }),
            _ => Err(err()),
        }
    }
}

/// The request size and queue depth the store runs at.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum IoPointChoice {
    /// The store's defaults (4 MiB requests, 32 in flight).
    #[default]
    Default,
    /// Measured on the store when it opens ([`SwapStore::calibrate`]).
    Calibrate,
    /// Read from a platform profile by the front (the points themselves; core does not read profiles).
    Profile {
        /// The point reads use.
        read: IoPoint,
        /// The point writes use.
        write: IoPoint,
    },
    /// Given by the caller.
    Given {
        /// The point reads use.
        read: IoPoint,
        /// The point writes use.
        write: IoPoint,
    },
}

/// The I/O point a store was opened with, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IoPointReport {
    /// `"default"`, `"auto"` (calibrated), `"profile"` or `"given"`.
    pub source: &'static str,
    /// Reads' request size and queue depth.
    pub read: IoPoint,
    /// Writes' request size and queue depth.
    pub write: IoPoint,
    /// Seconds the calibration took (0 without one).
    pub calibration_s: f64,
    /// Points the calibration measured (0 without one).
    pub calibration_points: usize,
}

/// What a pool's buffers will hold, when the front knows: the store's default size holds all of it
/// ([`PoolSpec::default_store_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Bytes of every buffer together.
    pub bytes: u64,
    /// How many buffers.
    pub buffers: u64,
}

/// Everything a [`Pool`] is made of: its capacity, its store and how the store runs, the device, the host tier
/// and checksums. [`open`](Self::open) assembles it; it is the only assembly of a pool outside core's own tests.
///
/// With the `clap` feature it is also a `clap::Args` (flatten it into a command): each option a flag whose default
/// is [`PoolSpec::new`]'s (`--capacity` is required); with the `serde` feature, a `serde::Deserialize` of a table
/// whose keys are the flags' names in snake case (`capacity = "1GiB"`, `store = "/mnt/a"` or a list,
/// `store_capacity`, `device = "cuda:0"`, `checksums`, `engine`, `priority_io`, `priority_window`, `stripe_bytes`,
/// `force_store`, `scrub`, `keep_store`; sizes as strings or integers; unknown keys refused), the same defaults. The
/// demand, host tier, I/O point, backend and the options of [`PoolConfig`] are set in code.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct PoolSpec {
    /// Device memory the pool may hand out, in bytes.
    #[cfg_attr(feature = "clap", arg(long = "capacity", value_name = "SIZE", value_parser = size_arg,
        help = "Device memory the pool may hand out (e.g. 1GiB)"))]
    #[cfg_attr(
        feature = "serde",
        serde(rename = "capacity", deserialize_with = "de::size")
    )]
    pub capacity_bytes: u64,
    /// Store locations, each a folder (a new temporary file in it), a file (opened, or created when missing) or a
    /// block device; several stripe the store over them. Empty: the system's temporary directory.
    #[cfg_attr(
        feature = "clap",
        arg(long = "store", value_delimiter = ',', value_name = "PATH[,PATH...]")
    )]
    #[cfg_attr(
        feature = "serde",
        serde(rename = "store", default, deserialize_with = "de::paths")
    )]
    pub stores: Vec<PathBuf>,
    /// The store's data capacity in bytes; `None`: the default rule ([`default_store_bytes`](Self::default_store_bytes)).
    #[cfg_attr(feature = "clap", arg(long = "store-capacity", value_name = "SIZE", value_parser = size_arg,
        help = "The store's data capacity (default: 4 x --capacity, at least 64 MiB; block devices whole)"))]
    #[cfg_attr(
        feature = "serde",
        serde(rename = "store_capacity", default, deserialize_with = "de::some_size")
    )]
    pub store_capacity_bytes: Option<u64>,
    /// What the buffers will hold, for the default store size.
    #[cfg_attr(feature = "clap", arg(skip))]
    #[cfg_attr(feature = "serde", serde(skip))]
    pub demand: Option<Demand>,
    /// Which memory the buffers live in (ignored when [`memory`](Self::memory) gives a backend).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            default_value = "host",
            help = "Which memory the buffers live in: host, cuda or cuda:N"
        )
    )]
    #[cfg_attr(feature = "serde", serde(default))]
    pub device: Device,
    /// A host-memory tier before the store.
    #[cfg_attr(feature = "clap", arg(skip))]
    #[cfg_attr(feature = "serde", serde(skip))]
    pub host_tier: Option<HostTierConfig>,
    /// Checksums of paged-out buffers (on by default; see [`PoolConfig::verify_checksums`]).
    #[cfg_attr(feature = "clap", arg(long = "no-checksums", action = clap::ArgAction::SetFalse,
        help = "Do not checksum paged-out buffers"))]
    #[cfg_attr(feature = "serde", serde(default = "de::yes"))]
    pub checksums: bool,
    /// The store's request size and queue depth.
    #[cfg_attr(feature = "clap", arg(skip))]
    #[cfg_attr(feature = "serde", serde(skip))]
    pub io_point: IoPointChoice,
    /// Which I/O engine the store runs on.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = EngineChoice::Auto))]
    #[cfg_attr(feature = "serde", serde(default))]
    pub engine: EngineChoice,
    /// Serve the store's transfers by slot priority ([`StoreBuilder::priority_io`]).
    #[cfg_attr(
        feature = "clap",
        arg(
            long = "priority-io",
            help = "Serve the store's transfers by slot priority"
        )
    )]
    #[cfg_attr(feature = "serde", serde(default))]
    pub priority_io: bool,
    /// With `priority_io`: requests let into the engine at once (`None`: the engine's queue depth).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_name = "REQUESTS",
            help = "With --priority-io: requests let into the engine at once (default: its queue depth)"
        )
    )]
    #[cfg_attr(feature = "serde", serde(default))]
    pub priority_window: Option<usize>,
    /// Stripe unit over several locations (`None`: the read request size).
    #[cfg_attr(feature = "clap", arg(long, value_name = "SIZE", value_parser = size_arg))]
    #[cfg_attr(feature = "serde", serde(default, deserialize_with = "de::some_size"))]
    pub stripe_bytes: Option<u64>,
    /// Use a file or device holding data not written by oversub ([`StoreBuilder::force`]).
    #[cfg_attr(
        feature = "clap",
        arg(
            long = "force-store",
            help = "Use a file or device holding data not written by oversub (its contents are destroyed)"
        )
    )]
    #[cfg_attr(feature = "serde", serde(rename = "force_store", default))]
    pub force: bool,
    /// Discard the store's data when it closes (on by default).
    #[cfg_attr(feature = "clap", arg(long = "no-scrub", action = clap::ArgAction::SetFalse,
        help = "Keep the store's data when it closes"))]
    #[cfg_attr(feature = "serde", serde(default = "de::yes"))]
    pub scrub: bool,
    /// Keep a store file this spec creates on disk instead of unlinking it at once ([`StoreBuilder::keep`]; off
    /// by default), for a front that opens it by name beside the pager.
    #[cfg_attr(
        feature = "clap",
        arg(
            long = "keep-store",
            help = "Keep a store file this run creates on disk instead of unlinking it at once"
        )
    )]
    #[cfg_attr(feature = "serde", serde(rename = "keep_store", default))]
    pub keep: bool,
    /// A device-memory backend the caller made (a configured [`HostMemory`], a CUDA context shared by two pools),
    /// used instead of making one for [`device`](Self::device).
    #[cfg_attr(feature = "clap", arg(skip))]
    #[cfg_attr(feature = "serde", serde(skip))]
    memory: Option<Arc<dyn DeviceMemory>>,
    /// The pool's remaining options (arbiter gate, tenant rule, staging ring); capacity, checksums and host tier
    /// are taken from the fields above.
    #[cfg_attr(feature = "clap", arg(skip = PoolConfig::new(0)))]
    #[cfg_attr(feature = "serde", serde(skip, default = "de::no_config"))]
    config: PoolConfig,
}

/// The pieces of `PoolSpec`'s `Deserialize`: sizes as strings or integers, one path or a list, the defaults that are
/// not the type's own.
#[cfg(feature = "serde")]
mod de {
    use std::path::PathBuf;

    use serde::{Deserialize, Deserializer};

    use super::Device;
    use crate::PoolConfig;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Paths {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }

    /// A size: an integer number of bytes or a size string (`"256MiB"`).
    pub(super) fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Size::deserialize(d)? {
            Size::Bytes(n) => Ok(n),
            Size::Text(t) => oversub_base::parse_size(&t).map_err(serde::de::Error::custom),
        }
    }

    pub(super) fn some_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        size(d).map(Some)
    }

    /// One path or a list of them.
    pub(super) fn paths<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Ok(match Paths::deserialize(d)? {
            Paths::One(p) => vec![p],
            Paths::Many(v) => v,
        })
    }

    pub(super) fn yes() -> bool {
        true
    }

    /// The config's capacity is replaced by the spec's when the pool opens.
    pub(super) fn no_config() -> PoolConfig {
        PoolConfig::new(0)
    }

    impl<'de> Deserialize<'de> for Device {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            String::deserialize(d)?
                .parse()
                .map_err(serde::de::Error::custom)
        }
    }
}

/// A size flag (`"1GiB"`, `"4096"`).
#[cfg(feature = "clap")]
fn size_arg(s: &str) -> Result<u64, String> {
    oversub_base::parse_size(s).map_err(|e| e.to_string())
}

impl PoolSpec {
    /// A host pool of `capacity_bytes` with the defaults: a store in the temporary directory of the default size,
    /// checksums on, the store's default I/O point and engine, scrubbed at close.
    pub fn new(capacity_bytes: u64) -> Self {
        PoolSpec {
            capacity_bytes,
            stores: Vec::new(),
            store_capacity_bytes: None,
            demand: None,
            device: Device::Host,
            host_tier: None,
            checksums: true,
            io_point: IoPointChoice::Default,
            engine: EngineChoice::Auto,
            priority_io: false,
            priority_window: None,
            stripe_bytes: None,
            force: false,
            scrub: true,
            keep: false,
            memory: None,
            config: PoolConfig::new(capacity_bytes),
        }
    }

    /// The same spec with these store locations.
    pub fn stores(mut self, locations: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.stores = locations.into_iter().map(Into::into).collect();
        self
    }

    /// The same spec with a store of `bytes` (instead of the default rule).
    pub fn store_capacity(mut self, bytes: u64) -> Self {
        self.store_capacity_bytes = Some(bytes);
        self
    }

    /// The same spec, knowing its buffers will hold `bytes` in `buffers` buffers (the default store holds them).
    pub fn demand(mut self, bytes: u64, buffers: u64) -> Self {
        self.demand = Some(Demand { bytes, buffers });
        self
    }

    /// The same spec on `device`.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// The same spec over a backend the caller made.
    pub fn memory(mut self, memory: Arc<dyn DeviceMemory>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The same spec with a host-memory tier.
    pub fn host_tier(mut self, tier: HostTierConfig) -> Self {
        self.host_tier = Some(tier);
        self
    }

    /// The same spec with checksums on or off.
    pub fn checksums(mut self, on: bool) -> Self {
        self.checksums = on;
        self
    }

    /// The same spec with this I/O point.
    pub fn io_point(mut self, point: IoPointChoice) -> Self {
        self.io_point = point;
        self
    }

    /// The same spec on this engine.
    pub fn engine(mut self, engine: EngineChoice) -> Self {
        self.engine = engine;
        self
    }

    /// The same spec serving transfers by priority, `window` requests at once (`None`: the engine's depth).
    pub fn priority(mut self, window: Option<usize>) -> Self {
        self.priority_io = true;
        self.priority_window = window;
        self
    }

    /// The same spec with this stripe unit.
    pub fn stripe_bytes(mut self, bytes: u64) -> Self {
        self.stripe_bytes = Some(bytes);
        self
    }

    /// The same spec, forcing the store's use of a file or device holding other data.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// The same spec, scrubbing the store at close or not.
    pub fn scrub(mut self, scrub: bool) -> Self {
        self.scrub = scrub;
        self
    }

    /// The same spec, keeping a store file it creates or not.
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// The same spec obeying the arbiter behind `gate` ([`PoolConfig::gate`]).
    pub fn gate(mut self, gate: Arc<Gate>) -> Self {
        self.config = self.config.gate(gate);
        self
    }

    /// The same spec with `samples` calibration runs under the gate ([`PoolConfig::gate_calibration_samples`]).
    pub fn gate_calibration_samples(mut self, samples: usize) -> Self {
        self.config = self.config.gate_calibration_samples(samples);
        self
    }

    /// The same spec with given costs of commit and decommit under the gate ([`PoolConfig::gate_mm_costs`]).
    pub fn gate_mm_costs(mut self, commit: MmCost, decommit: MmCost) -> Self {
        self.config = self.config.gate_mm_costs(commit, decommit);
        self
    }

    /// The same spec with `rule` for the tenant planner ([`PoolConfig::swap_rule`]).
    pub fn swap_rule(mut self, rule: AlphaRule) -> Self {
        self.config = self.config.swap_rule(rule);
        self
    }

    /// The same spec with this staging ring ([`PoolConfig::staging`]).
    pub fn staging(mut self, staging: StagingConfig) -> Self {
        self.config = self.config.staging(staging);
        self
    }

    /// The store locations, the system's temporary directory when none are given.
    pub fn store_locations(&self) -> Vec<PathBuf> {
        if self.stores.is_empty() {
            vec![std::env::temp_dir()]
        } else {
            self.stores.clone()
        }
    }

    /// The store's data capacity by the one default rule (see the module docs): `None` for block devices (the
    /// whole devices), else the demand plus 2 MiB per buffer plus 64 MiB when known, else four times the
    /// capacity, at least 64 MiB. [`store_capacity`](Self::store_capacity) overrides it.
    pub fn default_store_bytes(&self) -> Option<u64> {
        const ROOM: u64 = 64 << 20;
        let locations = self.store_locations();
        if locations.iter().all(|p| is_block_device(p)) {
            return None;
        }
        Some(match self.demand {
            Some(d) => d
                .bytes
                .saturating_add(d.buffers.saturating_mul(2 << 20))
                .saturating_add(ROOM),
            None => self.capacity_bytes.saturating_mul(4).max(ROOM),
        })
    }

    /// The store's data capacity to ask for: the given one, else [`default_store_bytes`](Self::default_store_bytes).
    pub fn store_bytes(&self) -> Option<u64> {
        self.store_capacity_bytes
            .or_else(|| self.default_store_bytes())
    }

    /// The store builder for this spec (size, I/O point, engine, priority, stripe unit, force, scrub), before its
    /// I/O point is calibrated.
    fn builder(&self) -> StoreBuilder {
        let mut b = SwapStore::builder()
            .engine_choice(self.engine)
            .force(self.force)
            .scrub(if self.scrub {
                Scrub::OnClose
            } else {
                Scrub::Keep
            })
            .priority_io(self.priority_io)
            .keep(self.keep);
        if let Some(bytes) = self.store_bytes() {
            b = b.capacity_bytes(bytes);
        }
        if let Some(w) = self.priority_window.filter(|&w| w > 0) {
            b = b.priority_window(w);
        }
        if let Some(s) = self.stripe_bytes {
            b = b.stripe_bytes(s);
        }
        match &self.io_point {
            IoPointChoice::Profile { read, write } | IoPointChoice::Given { read, write } => {
                b = b.io_points(*read, *write)
            }
            IoPointChoice::Default | IoPointChoice::Calibrate => {}
        }
        b
    }

    /// The store alone, as [`open`](Self::open) makes it (for fronts that measure or share the store before a
    /// pool is put over it with [`open_on`](Self::open_on)), and its I/O point.
    pub fn build_store(&self) -> Result<(SwapStore, IoPointReport), PagerError> {
        let mut store = self.builder().build(&self.store_locations())?;
        let report = match &self.io_point {
            IoPointChoice::Calibrate => {
                let done = store.calibrate(&Calibration::default())?;
                IoPointReport {
                    source: "auto",
                    read: done.read,
                    write: done.write,
                    calibration_s: done.seconds,
                    calibration_points: done.grid.len(),
                }
            }
            other => IoPointReport {
                source: match other {
                    IoPointChoice::Profile { .. } => "profile",
                    IoPointChoice::Given { .. } => "given",
                    _ => "default",
                },
                read: IoPoint {
                    block_bytes: store.max_io_bytes(),
                    queue_depth: store.engine().queue_depth(),
                },
                write: IoPoint {
                    block_bytes: store.max_write_io_bytes(),
                    queue_depth: store.engine().queue_depth(),
                },
                calibration_s: 0.0,
                calibration_points: 0,
            },
        };
        Ok((store, report))
    }

    /// The device-memory backend: the one given, else a new one for [`device`](Self::device).
    pub fn device_memory(&self) -> Result<Arc<dyn DeviceMemory>, PagerError> {
        if let Some(m) = &self.memory {
            return Ok(Arc::clone(m));
        }
        Ok(match self.device {
            Device::Host => Arc::new(HostMemory::default()),
            Device::Cuda { ordinal } => Arc::new(CudaMemory::new(CudaMemoryConfig {
                ordinal,
                ..CudaMemoryConfig::default()
            })?),
        })
    }

    /// The pool: its device memory, its store (see [`build_store`](Self::build_store)) and the pager over them.
    pub fn open(&self) -> Result<Pool, PagerError> {
        Ok(self.open_reporting()?.0)
    }

    /// [`open`](Self::open), with the I/O point the store runs at.
    pub fn open_reporting(&self) -> Result<(Pool, IoPointReport), PagerError> {
        let memory = self.device_memory()?;
        let (store, report) = self.build_store()?;
        Ok((self.open_on(memory, Arc::new(store))?, report))
    }

    /// The pager of this spec over a backend and a store already made (by [`device_memory`](Self::device_memory)
    /// and [`build_store`](Self::build_store), possibly shared with another pool): the store options of the spec
    /// are not applied again.
    pub fn open_on(
        &self,
        memory: Arc<dyn DeviceMemory>,
        store: Arc<SwapStore>,
    ) -> Result<Pool, PagerError> {
        if self.capacity_bytes == 0 {
            return Err(PagerError::InvalidSize(
                "a pool's capacity must be more than 0 bytes".into(),
            ));
        }
        let mut config = self.config.clone();
        config.capacity_bytes = self.capacity_bytes;
        config.verify_checksums = self.checksums;
        config.host_tier = self.host_tier;
        Pool::new(config, memory, store)
    }
}

fn is_block_device(p: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `got` and `want` ask for the same pool.
    #[cfg(any(feature = "clap", feature = "serde"))]
    fn assert_same_options(got: &PoolSpec, want: &PoolSpec) {
        assert_eq!(got.capacity_bytes, want.capacity_bytes);
        assert_eq!(got.stores, want.stores);
        assert_eq!(got.store_capacity_bytes, want.store_capacity_bytes);
        assert_eq!(got.demand, want.demand);
        assert_eq!(got.device, want.device);
        assert_eq!(got.host_tier, want.host_tier);
        assert_eq!(got.checksums, want.checksums);
        assert_eq!(got.io_point, want.io_point);
        assert_eq!(got.engine, want.engine);
        assert_eq!(got.priority_io, want.priority_io);
        assert_eq!(got.priority_window, want.priority_window);
        assert_eq!(got.stripe_bytes, want.stripe_bytes);
        assert_eq!(got.force, want.force);
        assert_eq!(got.scrub, want.scrub);
        assert_eq!(got.keep, want.keep);
        assert!(got.memory.is_none() && want.memory.is_none());
        // The config's own capacity is replaced by `capacity_bytes` when the pool opens.
        let mut config = got.config.clone();
        config.capacity_bytes = want.capacity_bytes;
        assert_eq!(format!("{config:?}"), format!("{:?}", want.config));
    }

    /// A table's defaults are [`PoolSpec::new`]'s; every key reaches its field.
    #[cfg(feature = "serde")]
    #[test]
    fn a_pool_table_defaults_to_new() {
        let got: PoolSpec = toml::from_str("capacity = \"64MiB\"").unwrap();
        assert_same_options(&got, &PoolSpec::new(64 << 20));
        let table = r#"
            capacity = 1048576
            store = ["/a", "/b"]
            store_capacity = "1GiB"
            device = "cuda:1"
            checksums = false
            engine = "psync"
            priority_io = true
            priority_window = 4
            stripe_bytes = "64KiB"
            force_store = true
            scrub = false
            keep_store = true
        "#;
        let got: PoolSpec = toml::from_str(table).unwrap();
        let want = PoolSpec::new(1 << 20)
            .stores(["/a", "/b"])
            .store_capacity(1 << 30)
            .device(Device::Cuda { ordinal: 1 })
            .checksums(false)
            .engine(EngineChoice::Psync)
            .priority(Some(4))
            .stripe_bytes(64 << 10)
            .force(true)
            .scrub(false)
            .keep(true);
        assert_same_options(&got, &want);
        let one: PoolSpec = toml::from_str("capacity = 1\nstore = \"/dev/nvme1n1\"").unwrap();
        assert_eq!(one.stores, [PathBuf::from("/dev/nvme1n1")]);
        for bad in [
            "store = \"/a\"",
            "capacity = \"lots\"",
            "capacity = 1\ndevice = \"tpu\"",
            "capacity = 1\nengine = \"aio\"",
            "capacity = 1\ncapacty = 2",
        ] {
            assert!(toml::from_str::<PoolSpec>(bad).is_err(), "{bad}");
        }
    }

    /// The flags' defaults are [`PoolSpec::new`]'s.
    #[cfg(feature = "clap")]
    #[test]
    fn the_flags_default_to_new() {
        use clap::Parser;
        #[derive(Parser)]
        struct Front {
            #[command(flatten)]
            pool: PoolSpec,
        }
        let got = Front::try_parse_from(["front", "--capacity", "64MiB"])
            .unwrap()
            .pool;
        assert_same_options(&got, &PoolSpec::new(64 << 20));
        let flags = Front::try_parse_from([
            "front",
            "--capacity",
            "1MiB",
            "--store",
            "/a,/b",
            "--device",
            "cuda:1",
            "--no-checksums",
            "--engine",
            "psync",
            "--no-scrub",
            "--stripe-bytes",
            "64KiB",
        ])
        .unwrap()
        .pool;
        assert_eq!(flags.stores, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(flags.device, Device::Cuda { ordinal: 1 });
        assert!(!flags.checksums && !flags.scrub);
        assert_eq!(flags.engine, EngineChoice::Psync);
        assert_eq!(flags.stripe_bytes, Some(64 << 10));
        assert!(
            Front::try_parse_from(["front"]).is_err(),
            "--capacity is required"
        );
    }

    #[test]
    fn devices_parse_as_fronts_write_them() {
        assert_eq!("host".parse(), Ok(Device::Host));
        assert_eq!(" CPU ".parse(), Ok(Device::Host));
        assert_eq!("cuda".parse(), Ok(Device::Cuda { ordinal: 0 }));
        assert_eq!("cuda:3".parse(), Ok(Device::Cuda { ordinal: 3 }));
        assert_eq!("gpu:1".parse(), Ok(Device::Cuda { ordinal: 1 }));
        for bad in ["cuda:-1", "cuda:x", "host:0", "tpu", ""] {
            let err = bad.parse::<Device>().unwrap_err();
            assert_eq!(err.given, bad);
            assert!(err.to_string().contains("\"cuda:N\""), "{err}");
        }
        assert_eq!(Device::Cuda { ordinal: 2 }.to_string(), "cuda:2");
        assert_eq!(
            Device::Cuda { ordinal: 2 }.to_string().parse(),
            Ok(Device::Cuda { ordinal: 2 })
        );
    }

    #[test]
    fn the_default_store_size_is_one_rule() {
        let dir = tempfile::tempdir().unwrap();
        let spec = PoolSpec::new(100 << 20).stores([dir.path()]);
        assert_eq!(spec.default_store_bytes(), Some(400 << 20));
        assert_eq!(PoolSpec::new(1 << 20).default_store_bytes(), Some(64 << 20));
        let with_demand = spec.clone().demand(300 << 20, 5);
        assert_eq!(
            with_demand.default_store_bytes(),
            Some((300 << 20) + 5 * (2 << 20) + (64 << 20))
        );
        assert_eq!(
            with_demand.clone().store_capacity(7 << 20).store_bytes(),
            Some(7 << 20)
        );
    }

    #[test]
    fn a_file_a_folder_and_a_missing_file_are_stores() {
        let dir = tempfile::tempdir().unwrap();
        // A folder: a temporary file in it, unlinked at once.
        let pool = PoolSpec::new(4 << 20).stores([dir.path()]).open().unwrap();
        assert_eq!(pool.store().member_paths()[0].parent(), Some(dir.path()));
        assert_eq!(pool.stats().store_capacity_bytes, 64 << 20);
        drop(pool);
        // A file that does not exist yet: created there (never its folder).
        let file = dir.path().join("swap.bin");
        let pool = PoolSpec::new(4 << 20).stores([&file]).open().unwrap();
        assert_eq!(pool.store().member_paths(), [file.as_path()]);
        drop(pool);
        // An existing (empty) file: opened as the store itself.
        std::fs::write(&file, b"").unwrap();
        let (pool, io) = PoolSpec::new(4 << 20)
            .stores([&file])
            .checksums(false)
            .open_reporting()
            .unwrap();
        assert_eq!(pool.store().member_paths(), [file.as_path()]);
        assert_eq!(io.source, "default");
        let space = pool.address_space();
        let b = space.alloc(2 << 20, crate::BufferFlags::DEFAULT).unwrap();
        space.write(b, 0, b"spec").unwrap();
        space.page_out(b).unwrap();
        space.page_in(b).unwrap();
        let mut back = [0u8; 4];
        space.read(b, 0, &mut back).unwrap();
        assert_eq!(&back, b"spec");
    }

    #[test]
    fn a_block_device_is_the_store_and_is_used_whole() {
        use oversub_testkit::{require, LoopDevice};
        let attached = || -> Option<(tempfile::TempDir, LoopDevice)> {
            oversub_testkit::loop_devices_usable().ok()?;
            let dir = tempfile::tempdir_in("/var/tmp")
                .or_else(|_| tempfile::tempdir())
                .ok()?;
            let image = dir.path().join("disk.img");
            std::fs::File::create(&image).ok()?.set_len(32 << 20).ok()?;
            let dev = LoopDevice::attach(&image)?;
            Some((dir, dev))
        };
        let (_dir, dev) = require!(
            attached(),
            "no loop device can be attached here (needs root and losetup)"
        );
        let spec = PoolSpec::new(4 << 20).stores([dev.path()]);
        assert_eq!(spec.default_store_bytes(), None);
        let pool = spec.open().unwrap();
        assert!(pool.store().is_block_device());
        assert_eq!(pool.store().member_paths(), [dev.path()]);
        assert_eq!(
            pool.stats().store_capacity_bytes,
            (32 << 20) - pool.store().data_offset()
        );
        // A size given is a size: part of the device.
        drop(pool);
        let pool = spec.store_capacity(8 << 20).open().unwrap();
        assert_eq!(pool.stats().store_capacity_bytes, 8 << 20);
    }

    #[test]
    fn a_zero_capacity_is_refused() {
        assert!(matches!(
            PoolSpec::new(0).open(),
            Err(PagerError::InvalidSize(_))
        ));
    }
}
