use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use oversub_tenants::swap::AlphaRule;

use oversub_accel::DeviceMemory;
use oversub_arbiter::{Gate, WorkKind};
use oversub_base::process::Creator;
use oversub_io::{Slot, SwapStore};

use crate::space::AddressSpace;
use crate::tenant::{TenantConfig, TenantQuota, Tenants};
use crate::tier::{AnyTier, Hashed, Host, Store, Tiers};
use crate::transfer::direct::{Direct, PiecePath};
use crate::transfer::gated::{GateCosts, Gated, GatedIo, MmCost, MmLane};
use crate::transfer::host_tier::{HostTier, HostTierConfig};
use crate::transfer::staged::{Staging, StagingConfig};
use crate::transfer::TransferPath;
use crate::workers::Workers;
use crate::PagerError;

/// Options of a [`Pool`].
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Device memory the pool may hand out, in bytes (accounted in whole reservations).
    pub capacity_bytes: u64,
    /// Take a checksum (xxh3 per 8 MiB piece) of each buffer at page-out and verify it at page-in, so a store that
    /// flips bits or acknowledges a write it did not finish gives `ChecksumMismatch` instead of wrong bytes. On by
    /// default: each piece is hashed on the I/O thread as its I/O completes, overlapping the rest of the transfer
    /// (cost measured by `oversub bench paging`, docs/benchmarks.md). Covers buffers the host can address that go
    /// to the store; the staging path (CUDA) is not checksummed, and the host tier only with
    /// [`checksum_host_tier`](Self::checksum_host_tier).
    pub verify_checksums: bool,
    /// Checksum the host tier's copies too, as the store's (off by default: the tier moves a buffer whole, so a
    /// page-in's hashes run after its copy instead of overlapping it). Needs host-addressable device memory, as the
    /// store's checksums do.
    pub checksum_host_tier: bool,
    /// Obey a memory arbiter: storage I/O and copies run in chunks of the gate's size, one at a time, and none
    /// starts unless the arbiter's current grant covers it to its end; the commit before a page-in and the
    /// decommit after a page-out are admitted the same way, each for its measured worst-case time.
    pub gate: Option<Arc<Gate>>,
    /// With a gate: measure its chunk time T(Q) on this pool's store and device at start-up, as the slowest of
    /// this many one-chunk writes and reads, and the worst-case costs of commit and decommit, as the slowest of
    /// this many of each (see [`GateCosts`]). 0 keeps the gate's own chunk time, and costs commit and decommit
    /// one chunk time each unless [`gate_mm_costs`](Self::gate_mm_costs) gives them.
    pub gate_calibration_samples: usize,
    /// With a gate: the worst-case costs of (commit, decommit) to admit them with, instead of measuring them.
    pub gate_mm_costs: Option<(MmCost, MmCost)>,
    /// How the tenant planner sizes the last victim's share on the store (see [`crate::Pool::tenant_space`]).
    pub swap_rule: AlphaRule,
    /// The staging ring, for devices whose memory the host cannot address (ignored otherwise).
    pub staging: StagingConfig,
    /// A host-memory tier that holds paged-out buffers before the store (none by default).
    pub host_tier: Option<HostTierConfig>,
}

impl PoolConfig {
    /// A pool of `capacity_bytes` with checksums and no arbiter.
    pub fn new(capacity_bytes: u64) -> Self {
        PoolConfig {
            capacity_bytes,
            verify_checksums: true,
            checksum_host_tier: false,
            gate: None,
            gate_calibration_samples: 16,
            gate_mm_costs: None,
            swap_rule: AlphaRule::Fraction,
            staging: StagingConfig::default(),
            host_tier: None,
        }
    }

    /// The same options with a host-memory tier: paged-out buffers go to host RAM while it has room, then to the
    /// store.
    pub fn host_tier(mut self, tier: HostTierConfig) -> Self {
        self.host_tier = Some(tier);
        self
    }

    /// The same options with `staging` for the staging ring.
    pub fn staging(mut self, staging: StagingConfig) -> Self {
        self.staging = staging;
        self
    }

    /// The same options with `rule` for the tenant planner's swap ratios.
    pub fn swap_rule(mut self, rule: AlphaRule) -> Self {
        self.swap_rule = rule;
        self
    }

    /// The same options with the host tier's copies checksummed or not.
    pub fn checksum_host_tier(mut self, on: bool) -> Self {
        self.checksum_host_tier = on;
        self
    }

    /// The same options with checksums switched on or off.
    pub fn verify_checksums(mut self, on: bool) -> Self {
        self.verify_checksums = on;
        self
    }

    /// The same options, obeying the arbiter behind `gate`.
    pub fn gate(mut self, gate: Arc<Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The same options with `samples` calibration runs of the gate's chunk time and of the costs of commit and
    /// decommit (0: keep the gate's chunk time).
    pub fn gate_calibration_samples(mut self, samples: usize) -> Self {
        self.gate_calibration_samples = samples;
        self
    }

    /// The same options with given worst-case costs of commit and decommit under the gate (not measured).
    pub fn gate_mm_costs(mut self, commit: MmCost, decommit: MmCost) -> Self {
        self.gate_mm_costs = Some((commit, decommit));
        self
    }
}

/// A snapshot of a pool's occupancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// The pool's capacity.
    pub capacity_bytes: u64,
    /// Device memory held by resident buffers and operations in flight.
    pub used_bytes: u64,
    /// The swap store's size.
    pub store_capacity_bytes: u64,
    /// Unallocated bytes of the swap store.
    pub store_free_bytes: u64,
}

/// Device memory of fixed capacity, shared by address spaces, with a swap store behind it.
#[derive(Debug, Clone)]
pub struct Pool {
    shared: Arc<PoolShared>,
}

#[derive(Debug)]
pub(crate) struct PoolShared {
    pub(crate) device: Arc<dyn DeviceMemory>,
    pub(crate) store: Arc<SwapStore>,
    /// The gated worker, when the pool obeys an arbiter: it runs the memory-map operations of paging and paces
    /// the transfer paths (which it wraps).
    pub(crate) gated: Option<GatedIo>,
    /// How buffers move to and from the store: direct or staged, gated or not (chosen once, here).
    store_path: Arc<dyn TransferPath<Copy = Slot>>,
    /// Where paged-out copies live, in the order a page-out tries them (composed once, here).
    pub(crate) tiers: Tiers,
    /// The host-memory tier's memory, when configured (for its occupancy).
    host_tier: Option<Arc<HostTier>>,
    /// The thread that starts large page-ins (commit, then queue the read) off the caller's thread; made at the
    /// first such page-in.
    starter: OnceLock<Workers>,
    capacity_bytes: u64,
    used_bytes: AtomicU64,
    /// The process that made the pool: a forked child has its memory but not its I/O threads, and shares its
    /// store's open file.
    creator: Creator,
    /// Address spaces registered as tenants, and the plan over them.
    pub(crate) tenants: Mutex<Tenants>,
}

impl Drop for PoolShared {
    fn drop(&mut self) {
        if !self.forked() {
            return;
        }
        // A forked child: the store's file, the engine's threads, the checksum and gated workers, the host tier
        // and the device are the parent's (or copies of them whose threads did not survive the fork). Whatever
        // their own drops would do (scrub the shared file, join threads that do not exist here, call a device
        // driver in a child) must not happen, so their last references here are leaked; the child's memory goes
        // when it exits. Each of them also checks for itself, for owners other than a pool.
        std::mem::forget(Arc::clone(&self.store));
        std::mem::forget(Arc::clone(&self.device));
        std::mem::forget(self.gated.take());
        std::mem::forget(std::mem::replace(&mut self.tiers, Tiers::new(Vec::new())));
        std::mem::forget(self.host_tier.take());
        std::mem::forget(self.starter.take());
    }
}

/// Space ids are unique in the process, so a handle from another pool's space is never mistaken for one of ours.
static NEXT_SPACE_ID: AtomicU32 = AtomicU32::new(0);

impl Pool {
    /// A pool over `device` that pages to `store`.
    pub fn new(
        config: PoolConfig,
        device: Arc<dyn DeviceMemory>,
        store: Arc<SwapStore>,
    ) -> Result<Pool, PagerError> {
        let granularity = device.granularity();
        if granularity == 0 || granularity % store.alignment() != 0 {
            return Err(PagerError::Unsupported(format!(
                "device granularity {granularity} is not a multiple of the store's I/O alignment {}",
                store.alignment()
            )));
        }
        let gated = match config.gate {
            Some(gate) => {
                let gated = GatedIo::start(gate, Arc::clone(&store), Arc::clone(&device))?;
                let samples = config.gate_calibration_samples;
                if samples > 0 {
                    gated.calibrate(device.as_ref(), samples)?;
                }
                match config.gate_mm_costs {
                    Some((commit, decommit)) => gated.set_mm_costs(commit, decommit),
                    None if samples > 0 => {
                        gated.measure_mm_costs(device.as_ref(), samples)?;
                    }
                    None => {
                        let one_chunk = MmCost::new(gated.gate().chunk_time(), Default::default());
                        gated.set_mm_costs(one_chunk, one_chunk);
                    }
                }
                Some(gated)
            }
            None => None,
        };
        // The paths are chosen and composed here, once: direct where the host addresses device memory, else
        // staged; each wrapped in the gate when the pool obeys an arbiter.
        let pacer = gated.as_ref().map(|g| Arc::clone(g.pacer()));
        let direct = device
            .host_accessible()
            .then(|| Direct::new(Arc::clone(&device), Arc::clone(&store)));
        let (store_path, pieces): (
            Arc<dyn TransferPath<Copy = Slot>>,
            Option<Arc<dyn PiecePath>>,
        ) = match (direct, &pacer) {
            (Some(direct), Some(pacer)) => {
                let path = Arc::new(Gated::new(direct, Arc::clone(pacer)));
                (path.clone(), Some(path))
            }
            (Some(direct), None) => {
                let path = Arc::new(direct);
                (path.clone(), Some(path))
            }
            (None, _) => {
                let staging = Staging::start(
                    config.staging,
                    Arc::clone(&device),
                    Arc::clone(&store),
                    pacer.as_ref().map(|p| p.chunk_bytes()),
                )?;
                let path: Arc<dyn TransferPath<Copy = Slot>> = match &pacer {
                    Some(pacer) => Arc::new(Gated::new(staging, Arc::clone(pacer))),
                    None => Arc::new(staging),
                };
                (path, None)
            }
        };
        // Checksums are taken where the host can read the buffer: on the direct path (whose store moves take pieces,
        // so hashes overlap the I/O), and in the host tier when asked for.
        let hash_store = config.verify_checksums && pieces.is_some();
        let hash_host = config.checksum_host_tier && config.host_tier.is_some();
        let hasher = if hash_store || hash_host {
            // One thread: hashing (~13 GB/s) outruns any store, and a second one only competes with the caller and
            // the engine on small machines.
            Some(Arc::new(Workers::start(
                "oversub-hash",
                "spawning a checksum thread",
                1,
                false,
            )?))
        } else {
            None
        };
        let hashed = |hash: bool| {
            hasher
                .as_ref()
                .filter(|_| hash)
                .map(|h| (Arc::clone(&device), Arc::clone(h)))
        };
        // The tiers, composed here once, in the order a page-out tries them: the host tier first when configured,
        // the store last (it takes every copy). A new tier is one more entry here; checksums wrap a tier.
        let mut tiers: Vec<Arc<dyn AnyTier>> = Vec::new();
        let host_tier = match config.host_tier {
            Some(t) => {
                let memory = Arc::new(HostTier::new(t, Arc::clone(&device))?);
                let path: Box<dyn TransferPath<Copy = _>> = match &pacer {
                    Some(pacer) => Box::new(Gated::new(Arc::clone(&memory), Arc::clone(pacer))),
                    None => Box::new(Arc::clone(&memory)),
                };
                let host = Host::new(Arc::clone(&memory), path);
                tiers.push(match hashed(hash_host) {
                    Some((device, hasher)) => Arc::new(Hashed::new(host, device, hasher)),
                    None => Arc::new(host),
                });
                Some(memory)
            }
            None => None,
        };
        let gate = gated.as_ref().map(|g| Arc::clone(g.gate()));
        let store_tier = Store::new(Arc::clone(&store), Arc::clone(&store_path), pieces, gate);
        tiers.push(match hashed(hash_store) {
            Some((device, hasher)) => Arc::new(Hashed::new(store_tier, device, hasher)),
            None => Arc::new(store_tier),
        });
        Ok(Pool {
            shared: Arc::new(PoolShared {
                device,
                store,
                gated,
                store_path,
                tiers: Tiers::new(tiers),
                host_tier,
                starter: OnceLock::new(),
                capacity_bytes: config.capacity_bytes,
                used_bytes: AtomicU64::new(0),
                creator: Creator::current(),
                tenants: Mutex::new(Tenants::new(config.swap_rule)),
            }),
        })
    }

    /// The arbiter gate the pool obeys, if any.
    pub fn gate(&self) -> Option<&Arc<Gate>> {
        self.shared.gated.as_ref().map(GatedIo::gate)
    }

    /// The costs the pool's gate admits its work with (T(Q) now, and the worst-case times of commit and
    /// decommit), when it has a gate: for printing them and computing bounds.
    pub fn gate_costs(&self) -> Option<GateCosts> {
        self.shared.gated.as_ref().map(GatedIo::costs)
    }

    /// A new, empty address space of this pool.
    pub fn address_space(&self) -> AddressSpace {
        let id = NEXT_SPACE_ID.fetch_add(1, Ordering::Relaxed);
        AddressSpace::new(id, Arc::clone(&self.shared), false)
    }

    /// A new address space for a tenant that declares its demand and priority.
    ///
    /// The pool keeps a plan over its tenants (Yang & Chen's Alg. 2): while their demands add up to more than the
    /// capacity, the lowest-priority tenants become victims and each may keep at most (1 − α_i) of its demand
    /// resident; the rest of its buffers live on the store and are reached with
    /// [`AddressSpace::read_direct`]/[`write_direct`](AddressSpace::write_direct), so it never evicts the others.
    /// Every tenant is held to its resident limit (its demand, for those that are not victims). The plan is
    /// recomputed when a tenant arrives (here; tenants over their new limit have their least recently used
    /// buffers paged out before this returns) and when one leaves (its last handle is dropped).
    pub fn tenant_space(&self, config: TenantConfig) -> Result<AddressSpace, PagerError> {
        let store_bytes = self.shared.store.capacity_bytes();
        config.validate(store_bytes)?;
        let id = NEXT_SPACE_ID.fetch_add(1, Ordering::Relaxed);
        let space = AddressSpace::new(id, Arc::clone(&self.shared), true);
        let granularity = self.shared.device.granularity() as u64;
        let over_quota = {
            let mut tenants = oversub_base::sync::lock(&self.shared.tenants);
            tenants.add(config, space.shared());
            tenants.replan(self.shared.capacity_bytes, granularity)?
        };
        crate::tenant::shrink_to_quota(over_quota)?;
        Ok(space)
    }

    /// The tenant plan now: one entry per tenant, from the highest priority to the lowest.
    pub fn tenant_quotas(&self) -> Vec<TenantQuota> {
        oversub_base::sync::lock(&self.shared.tenants).quotas()
    }

    /// The pool's occupancy now.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            capacity_bytes: self.shared.capacity_bytes,
            used_bytes: self.shared.used_bytes.load(Ordering::Acquire),
            store_capacity_bytes: self.shared.store.capacity_bytes(),
            store_free_bytes: self.shared.store.free_bytes(),
        }
    }

    /// The swap store behind the pool.
    pub fn store(&self) -> &Arc<SwapStore> {
        &self.shared.store
    }

    /// The device-memory backend.
    pub fn device(&self) -> &Arc<dyn DeviceMemory> {
        &self.shared.device
    }

    /// How buffers move between device memory and the store: `"direct"` (the host addresses device memory, as on
    /// an integrated GPU), `"staging"` (through the ring of host staging buffers) or `"cufile"` (GPUDirect
    /// Storage).
    pub fn transfer_path(&self) -> &'static str {
        self.shared.store_path.name()
    }

    /// The host-memory tier's (free, total) bytes, when the pool has one.
    pub fn host_tier_bytes(&self) -> Option<(u64, u64)> {
        self.shared
            .host_tier
            .as_ref()
            .map(|t| (t.free_bytes(), t.capacity_bytes()))
    }

    /// Size of one chunk of a staged transfer (`None` when the pool does not stage).
    pub fn staging_chunk_bytes(&self) -> Option<u64> {
        self.shared.store_path.chunk_bytes()
    }
}

impl PoolShared {
    /// A tenant's space is gone: plan again without it (the others' limits can only grow).
    pub(crate) fn tenant_left(&self, id: u32) {
        let granularity = self.device.granularity() as u64;
        let replanned = {
            let mut tenants = oversub_base::sync::lock(&self.tenants);
            tenants.remove(id);
            tenants.replan(self.capacity_bytes, granularity)
        };
        // Dropped here, outside the lock: a space handle dropped last re-enters this function.
        match replanned {
            Ok(over) => drop(over),
            Err(e) => tracing::warn!("replanning after tenant as{id} left: {e}"),
        }
    }

    /// The starter thread, made now if it is not yet; `None` when it cannot be spawned (the caller then does the
    /// work itself).
    pub(crate) fn starter(&self) -> Option<&Workers> {
        if let Some(starter) = self.starter.get() {
            return Some(starter);
        }
        match Workers::start(
            "oversub-start",
            "spawning the page-in starter thread",
            1,
            true,
        ) {
            // Another thread may have set it meanwhile: then this one is dropped (and its thread stops).
            Ok(made) => Some(self.starter.get_or_init(|| made)),
            Err(e) => {
                tracing::warn!("page-ins commit on the caller's thread: {e}");
                None
            }
        }
    }

    /// Refuses work in a forked child, whose transfers would wait forever for I/O threads that did not survive the
    /// fork.
    pub(crate) fn check_fork(&self) -> Result<(), PagerError> {
        match self.creator.forked() {
            None => Ok(()),
            Some(pid) => Err(PagerError::Forked {
                pool_pid: self.creator.pid(),
                pid,
            }),
        }
    }

    /// Whether the calling process is a forked child of the pool's creator: its drops and frees must leave
    /// everything the parent still uses alone.
    pub(crate) fn forked(&self) -> bool {
        !self.creator.is_current()
    }

    /// The gated worker's lane of memory-map operations, when the pool obeys an arbiter.
    pub(crate) fn mm_lane(&self) -> Option<MmLane> {
        self.gated.as_ref().map(GatedIo::mm_lane)
    }

    /// Runs `copy(offset, len)` over `len` bytes: at once, or in admitted chunks under the arbiter's gate (each
    /// logged on the gate as `what`).
    pub(crate) fn copy_chunked<E>(
        &self,
        len: usize,
        what: WorkKind,
        copy: impl FnMut(usize, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        crate::transfer::gated::copy_chunked(
            self.gated.as_ref().map(|g| &**g.gate()),
            len,
            what,
            copy,
        )
    }

    /// Takes `bytes` of capacity, or says how much is left.
    pub(crate) fn charge(&self, bytes: u64) -> Result<(), PagerError> {
        self.used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes)
                    .filter(|total| *total <= self.capacity_bytes)
            })
            .map(|_| ())
            .map_err(|used| PagerError::OutOfMemory {
                needed_bytes: bytes,
                available_bytes: self.capacity_bytes.saturating_sub(used),
                capacity_bytes: self.capacity_bytes,
            })
    }

    /// Gives `bytes` of capacity back.
    pub(crate) fn refund(&self, bytes: u64) {
        let _ = self
            .used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}
