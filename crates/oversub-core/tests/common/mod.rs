//! Shared set-up for the pager tests: a pool over the host backend and a real swap file, on each I/O engine.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use oversub_accel::{
    AccelError, DeviceMemory, DevicePtr, DirectStorage, Fence, HostBuffer, HostMemory, Reservation,
};
use oversub_arbiter::{Arbiter, ArbiterConfig, FakeClock};
use oversub_core::{AddressSpace, Buffer, BufferFlags, Pool, PoolConfig};
use oversub_io::{IoEngine, SwapStore};

pub const MIB: u64 = 1 << 20;

/// Every I/O engine this machine has: psync always, io_uring where the kernel lets us.
pub fn engines() -> Vec<(&'static str, Arc<dyn IoEngine>)> {
    oversub_testkit::engines(8, 32)
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

/// A pool over `device` with `sizes` (capacity, store capacity), its store a temporary file on `engine` (1 MiB
/// requests).
pub fn pool_over(
    engine: Arc<dyn IoEngine>,
    device: Arc<dyn DeviceMemory>,
    sizes: (u64, u64),
    checksums: bool,
) -> Pool {
    Pool::new(
        PoolConfig::new(sizes.0).verify_checksums(checksums),
        device,
        store_with(engine, sizes.1, 1 << 20),
    )
    .unwrap()
}

/// A checksummed pool of 32 MiB on the host backend over `store`.
pub fn checked_host_pool(store: SwapStore) -> Pool {
    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
    Pool::new(
        PoolConfig::new(32 * MIB).verify_checksums(true),
        device,
        Arc::new(store),
    )
    .unwrap()
}

/// A buffer of each of `sizes` on `space`, the `i`th holding `pattern(seed + i, size)`.
pub fn filled_buffers(space: &AddressSpace, sizes: &[u64], seed: u64) -> Vec<Buffer> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
            space
                .write(b, 0, &pattern(seed + i as u64, size as usize))
                .unwrap();
            b
        })
        .collect()
}

/// Each of `bufs` (of `sizes`, from [`filled_buffers`] with `seed`) still holds its pattern.
pub fn check_filled(space: &AddressSpace, bufs: &[Buffer], sizes: &[u64], seed: u64, what: &str) {
    for (i, (&b, &size)) in bufs.iter().zip(sizes).enumerate() {
        let mut back = vec![0u8; size as usize];
        space.read(b, 0, &mut back).unwrap();
        assert!(
            back == pattern(seed + i as u64, size as usize),
            "{what}: buffer {i}"
        );
    }
}

/// Runs `body` on every engine, checksums off then on (saying which on stderr).
pub fn each_engine_and_checksums(mut body: impl FnMut(Arc<dyn IoEngine>, bool)) {
    for (name, engine) in engines() {
        for checksums in [false, true] {
            eprintln!("{name}, checksums {checksums}");
            body(engine.clone(), checksums);
        }
    }
}

/// The buffer `b` holds `bytes`.
pub fn assert_holds(space: &AddressSpace, b: Buffer, bytes: &[u8]) {
    let mut back = vec![0u8; bytes.len()];
    space.read(b, 0, &mut back).unwrap();
    assert!(back == bytes);
}

/// The pool charges no memory and its store holds nothing.
pub fn assert_nothing_held(pool: &Pool) {
    let stats = pool.stats();
    assert_eq!(stats.used_bytes, 0);
    assert_eq!(stats.store_free_bytes, stats.store_capacity_bytes);
}

/// Deterministic bytes that differ per buffer and per position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    oversub_testkit::random_bytes(len, seed)
}

/// A fake clock at `t0`, an in-process arbiter on it that admits `chunk_bytes` per `chunk_ns`, and a PREM task
/// (load 300 µs, compute 1 ms, unload 200 µs, `repeats` times) scripted on the clock: the clock, the arbiter and the
/// task's memory phases (start, end) in the clock's nanoseconds.
pub fn prem_on_fake_clock(
    t0: u64,
    chunk_bytes: u64,
    chunk_ns: u64,
    repeats: usize,
) -> (Arc<FakeClock>, Arbiter, Vec<(u64, u64)>) {
    const US: u64 = 1_000;
    let clock = Arc::new(FakeClock::new(t0));
    let arbiter = Arbiter::in_process_with_clock(
        ArbiterConfig {
            chunk_bytes,
            chunk_time: Some(Duration::from_nanos(chunk_ns)),
            ..ArbiterConfig::default()
        },
        clock.clone(),
    )
    .unwrap();
    let task = Arc::new(arbiter.register_task().unwrap());
    let mut mem_phases = Vec::new();
    let mut t = t0;
    for _ in 0..repeats {
        for (is_mem, len) in [(true, 300 * US), (false, 1_000 * US), (true, 200 * US)] {
            let task = Arc::clone(&task);
            clock.at(t, move || {
                let d = Duration::from_nanos(len);
                if is_mem { task.mem(d) } else { task.com(d) }.unwrap();
            });
            if is_mem {
                mem_phases.push((t, t + len));
            }
            t += len;
        }
    }
    clock.advance(0);
    (clock, arbiter, mem_phases)
}

/// The backend's own commit or decommit, as a hook receives it.
pub type Call<'a> = &'a dyn Fn() -> Result<(), AccelError>;
/// A hook around a memory-map call: it may run the call (or not), and act before and after it.
pub type Around = Box<dyn Fn(&Reservation, Call<'_>) -> Result<(), AccelError> + Send + Sync>;

/// A device backend (the host backend by default) with hooks around `commit` and `decommit` (to inject failures or
/// panics, or to record which thread ran them and when) and, optionally, a `DirectStorage` of the test's own; every
/// other call is forwarded as it is.
pub struct Hooked {
    pub inner: Arc<dyn DeviceMemory>,
    commit: Around,
    decommit: Around,
    direct: Option<Box<dyn DirectStorage>>,
}

impl Default for Hooked {
    fn default() -> Self {
        Hooked::over(Arc::new(HostMemory::default()))
    }
}

impl Hooked {
    /// `inner` with no hooks yet.
    pub fn over(inner: Arc<dyn DeviceMemory>) -> Self {
        Hooked {
            inner,
            commit: Box::new(|_, call| call()),
            decommit: Box::new(|_, call| call()),
            direct: None,
        }
    }

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

    /// Offers `direct` as the device's GPUDirect-Storage-like path instead of the backend's own.
    pub fn with_direct_storage(mut self, direct: impl DirectStorage + 'static) -> Self {
        self.direct = Some(Box::new(direct));
        self
    }
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooked")
            .field("inner", &self.inner)
            .field("direct", &self.direct)
            .finish()
    }
}

// SAFETY: forwards every call to the wrapped backend; the hooks run around commit and decommit, and a hook that skips
// the call returns an error (or panics), which callers treat as the call not having happened. A `DirectStorage` of
// the test's moves bytes only as its own contract says.
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
    fn zero_new(&self, range: &Reservation) -> Result<(), AccelError> {
        self.inner.zero_new(range)
    }
    fn alloc_host(&self, len: usize, pinned: bool) -> Result<HostBuffer, AccelError> {
        self.inner.alloc_host(len, pinned)
    }
    unsafe fn copy_to_host_async(
        &self,
        src: DevicePtr,
        dst: *mut u8,
        len: usize,
    ) -> Result<Fence, AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.copy_to_host_async(src, dst, len) }
    }
    unsafe fn copy_from_host_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<Fence, AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.copy_from_host_async(dst, src, len) }
    }
    fn fence_done(&self, fence: &Fence) -> Result<bool, AccelError> {
        self.inner.fence_done(fence)
    }
    fn fence_wait(&self, fence: Fence) -> Result<(), AccelError> {
        self.inner.fence_wait(fence)
    }
    fn record_fence(&self, stream: u64) -> Result<Fence, AccelError> {
        self.inner.record_fence(stream)
    }
    fn fence_forget(&self, fence: Fence) {
        self.inner.fence_forget(fence)
    }
    fn memory_info(&self) -> Result<Option<(u64, u64)>, AccelError> {
        self.inner.memory_info()
    }
    fn direct_storage(&self) -> Option<&dyn DirectStorage> {
        match &self.direct {
            Some(d) => Some(d.as_ref()),
            None => self.inner.direct_storage(),
        }
    }
}
