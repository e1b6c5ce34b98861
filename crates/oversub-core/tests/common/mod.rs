//! Shared set-up for the pager tests: a pool over the host backend and a real swap file, on each I/O engine.
#![allow(dead_code)]

use std::sync::Arc;

use oversub_accel::{AccelError, DeviceMemory, DevicePtr, HostMemory, Reservation};
use oversub_core::{Pool, PoolConfig};
use oversub_io::{IoEngine, PsyncEngine, SwapStore, UringEngine};

pub const MIB: u64 = 1 << 20;

/// Every I/O engine this machine has: psync always, io_uring where the kernel lets us.
pub fn engines() -> Vec<(&'static str, Arc<dyn IoEngine>)> {
    let mut v: Vec<(&'static str, Arc<dyn IoEngine>)> =
        vec![("psync", Arc::new(PsyncEngine::new(8).unwrap()))];
    match UringEngine::new(32) {
        Ok(e) => v.push(("io_uring", Arc::new(e))),
        Err(e) => eprintln!("io_uring unavailable here, testing psync only: {e}"),
    }
    v
}

pub fn store_with(engine: Arc<dyn IoEngine>, capacity: u64, max_io: usize) -> Arc<SwapStore> {
    Arc::new(
        SwapStore::builder()
            .capacity_bytes(capacity)
            .max_io_bytes(max_io)
            .engine(engine)
            .create_temp(&std::env::temp_dir())
            .unwrap(),
    )
}

pub fn pool_with(engine: Arc<dyn IoEngine>, capacity: u64, store_capacity: u64) -> Pool {
    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
    Pool::new(
        PoolConfig::new(capacity).verify_checksums(true),
        device,
        store_with(engine, store_capacity, 1 << 20),
    )
    .unwrap()
}

/// Deterministic bytes that differ per buffer and per position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
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

/// The backend's own commit or decommit, as a hook receives it.
pub type Call<'a> = &'a dyn Fn() -> Result<(), AccelError>;
/// A hook around a memory-map call: it may run the call (or not), and act before and after it.
pub type Around = Box<dyn Fn(&Reservation, Call<'_>) -> Result<(), AccelError> + Send + Sync>;

/// The host backend with hooks around `commit` and `decommit` (to inject failures or panics, or to record which
/// thread ran them); every other call is forwarded as it is.
pub struct Hooked {
    pub inner: HostMemory,
    commit: Around,
    decommit: Around,
}

impl Default for Hooked {
    fn default() -> Self {
        Hooked {
            inner: HostMemory::default(),
            commit: Box::new(|_, call| call()),
            decommit: Box::new(|_, call| call()),
        }
    }
}

impl Hooked {
    pub fn on_commit(
        mut self,
        hook: impl Fn(&Reservation, Call<'_>) -> Result<(), AccelError> + Send + Sync + 'static,
    ) -> Self {
        self.commit = Box::new(hook);
        self
    }

    pub fn on_decommit(
        mut self,
        hook: impl Fn(&Reservation, Call<'_>) -> Result<(), AccelError> + Send + Sync + 'static,
    ) -> Self {
        self.decommit = Box::new(hook);
        self
    }
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooked")
            .field("inner", &self.inner)
            .finish()
    }
}

// SAFETY: forwards every call to the host backend; the hooks run around commit and decommit, and a hook that skips
// the call returns an error (or panics), which callers treat as the call not having happened.
unsafe impl DeviceMemory for Hooked {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn granularity(&self) -> usize {
        self.inner.granularity()
    }
    fn host_accessible(&self) -> bool {
        self.inner.host_accessible()
    }
    fn reserve(&self, len: usize) -> Result<Reservation, AccelError> {
        self.inner.reserve(len)
    }
    fn commit(&self, range: &Reservation) -> Result<(), AccelError> {
        (self.commit)(range, &|| self.inner.commit(range))
    }
    unsafe fn decommit(&self, range: &Reservation) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller (the hook runs the call at most once, as the caller asked).
        (self.decommit)(range, &|| unsafe { self.inner.decommit(range) })
    }
    unsafe fn unreserve(&self, range: Reservation) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.unreserve(range) }
    }
    fn synchronize(&self) -> Result<(), AccelError> {
        self.inner.synchronize()
    }
    fn host_ptr(&self, range: &Reservation) -> Option<*mut u8> {
        self.inner.host_ptr(range)
    }
    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.copy_to_host(src, dst) }
    }
    unsafe fn copy_from_host(&self, dst: DevicePtr, src: &[u8]) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.copy_from_host(dst, src) }
    }
    fn resident_bytes(&self, range: &Reservation) -> Result<Option<u64>, AccelError> {
        self.inner.resident_bytes(range)
    }
}
