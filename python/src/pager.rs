//! The pager from Python: `Pool`, `AddressSpace`, `Buffer` and the `Handle` of an asynchronous operation.
//!
//! Ownership follows Python's: a `Buffer` object owns its Rust buffer and frees it when it is collected (or at
//! `free()`); views and DLPack capsules hold the buffer alive. A buffer with live views cannot be paged out or
//! freed, which is what keeps a NumPy array from pointing at memory that was given back. Every blocking wait
//! releases the GIL.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use oversub_accel::cuda::{CudaMemory, CudaMemoryConfig};
use oversub_accel::{DeviceMemory, HostMemory};
use oversub_core::{
    BufferFlags, BufferInfo, BufferState, HostTierConfig, OpKind, PagerError, PoolConfig, Ticket,
};
use oversub_io::{Scrub, SwapStore};
use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{OrRaise, Raised, ToRaised};
use crate::util::size_arg;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pool>()?;
    m.add_class::<AddressSpace>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<Handle>()?;
    m.add_class::<ExternalFile>()?;
    m.add_function(wrap_pyfunction!(rust_paging_loop, m)?)?;
    Ok(())
}

/// The baseline of `python -m oversub.bench overhead`: the same page-out/page-in loop over `buffers` as Python
/// code would run, made by Rust calling the pager directly (GIL released). Returns (seconds, operations).
#[pyfunction]
#[pyo3(name = "_rust_paging_loop")]
fn rust_paging_loop(
    py: Python<'_>,
    buffers: Vec<Bound<'_, Buffer>>,
    rounds: usize,
) -> PyResult<(f64, u64)> {
    let cores: Vec<Arc<BufCore>> = buffers.iter().map(|b| Arc::clone(&b.get().core)).collect();
    let elapsed = py
        .detach(|| -> Result<Duration, Raised> {
            let start = Instant::now();
            for _ in 0..rounds {
                for c in &cores {
                    // The same view check as Buffer.page_out: no page-out under a live NumPy array.
                    c.start_out_raw()?.finish().map_err(|e| e.to_raised())?;
                }
                for c in &cores {
                    c.space.space.page_in(c.handle).map_err(|e| e.to_raised())?;
                }
            }
            Ok(start.elapsed())
        })
        .map_err(|r| r.to_pyerr(py))?;
    Ok((elapsed.as_secs_f64(), (2 * rounds * cores.len()) as u64))
}

pub(crate) use oversub_base::sync::lock;

/// A pointer that may cross into a closure run without the GIL (see `Buffer.read`).
struct SendPtr(*mut u8);
// SAFETY: only used to fill a new bytes object that no other thread can reach (see `Buffer.read`).
unsafe impl Send for SendPtr {}

/// Which memory a pool's buffers live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Device {
    Host,
    Cuda { ordinal: i32 },
}

impl Device {
    fn name(self) -> &'static str {
        match self {
            Device::Host => "host",
            Device::Cuda { .. } => "cuda",
        }
    }
}

fn state_name(state: BufferState) -> &'static str {
    match state {
        BufferState::Resident => "resident",
        BufferState::PagingOut => "paging_out",
        BufferState::PagedOut => "paged_out",
        BufferState::PagingIn => "paging_in",
    }
}

/// A fixed amount of device memory shared by address spaces, with a swap store behind it.
///
/// Args:
///     capacity: device memory the pool may hand out, as bytes or a size string ("4GiB").
///     store: where paged-out buffers go: None (a temporary file in $TMPDIR), a directory (a temporary file
///         there, deleted at exit), or a file or block device path. Put it on an NVMe drive for speed. A list of
///         such locations (``store=["/mnt/a", "/mnt/b"]``) stripes the store over them, one per drive: 4 MiB
///         stripe units dealt to the members in turn, so a buffer's transfer runs on all of them at once.
///     device: "host" (buffers in host memory, the integrated-GPU model; NumPy views) or "cuda" (CUDA device
///         memory through the driver's virtual memory API; `__cuda_array_interface__` and DLPack).
///     store_capacity: size of the swap store (default 4 x capacity, at least 64 MiB); a store file is
///         preallocated to it. Striped over several locations, the total, split evenly among them.
///     host_tier: host memory that holds paged-out buffers before the store (default none).
///     pinned_host_tier: page-lock the host tier (faster device copies; default False).
///     verify_checksums: checksum each buffer at page-out and verify it at page-in, so a store that corrupts
///         bytes raises ChecksumMismatchError instead of returning them (default True; the hashing overlaps the
///         transfer on a thread of its own, cost in docs/benchmarks.md).
///     force_store: use an existing store file or block device whatever it holds (a file system, another user's
///         store, data oversub did not write); without it such a store raises StoreRefusedError. A mounted or
///         busy device is refused regardless (StoreBusyError).
///     scrub_store: discard the store's data when the pool closes, so swapped bytes do not stay on disk
///         (default True; False keeps them).
///     device_index: CUDA device ordinal (default 0).
///     io: how the store's I/O is shaped: "default" (4 MiB requests, 32 in flight) or "auto" (a calibration of
///         about a second at creation measures 1, 4 and 16 MiB requests at 8 and 32 in flight on the store itself
///         and keeps the fastest point for reads and for writes; see ``io_point``).
///
/// Raises:
///     oversub.errors.IoError: the store cannot be created or opened.
///     oversub.errors.StoreBusyError: another pool or process holds the store, or the device is mounted.
///     oversub.errors.StoreRefusedError: the store holds data oversub will not overwrite without force_store.
///     oversub.errors.NoDriverError: device="cuda" without a CUDA driver.
#[pyclass(frozen, module = "oversub")]
#[derive(Debug)]
pub struct Pool {
    inner: oversub_core::Pool,
    device: Device,
    store_paths: Vec<PathBuf>,
    io_point: IoPointInfo,
}

/// The request size and queue depth the pool's store uses, and where they came from.
#[derive(Debug, Clone, Copy)]
struct IoPointInfo {
    source: &'static str,
    read: (usize, usize),
    write: (usize, usize),
    seconds: f64,
}

#[pymethods]
impl Pool {
    #[new]
    #[pyo3(signature = (capacity, store=None, device="host", *, store_capacity=None, host_tier=None,
        pinned_host_tier=false, verify_checksums=true, device_index=0, force_store=false, scrub_store=true,
        io="default"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        capacity: &Bound<'_, PyAny>,
        store: Option<&Bound<'_, PyAny>>,
        device: &str,
        store_capacity: Option<&Bound<'_, PyAny>>,
        host_tier: Option<&Bound<'_, PyAny>>,
        pinned_host_tier: bool,
        verify_checksums: bool,
        device_index: i32,
        force_store: bool,
        scrub_store: bool,
        io: &str,
    ) -> PyResult<Pool> {
        let calibrate = match io {
            "default" => false,
            "auto" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "io must be \"default\" or \"auto\", not {other:?}"
                )))
            }
        };
        let capacity_bytes = size_arg(capacity, "capacity")?;
        if capacity_bytes == 0 {
            return Err(PyValueError::new_err("capacity must be more than 0 bytes"));
        }
        let store_bytes = match store_capacity {
            Some(s) => size_arg(s, "store_capacity")?,
            None => capacity_bytes.saturating_mul(4).max(64 << 20),
        };
        let tier_bytes = host_tier.map(|t| size_arg(t, "host_tier")).transpose()?;
        let locations: Vec<PathBuf> = match store {
            None => vec![std::env::temp_dir()],
            Some(s) if s.is_none() => vec![std::env::temp_dir()],
            Some(s) => match s.extract::<PathBuf>() {
                Ok(p) => vec![p],
                Err(_) => s.extract::<Vec<PathBuf>>().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(
                        "store must be None, a path (str or os.PathLike) or a list of paths",
                    )
                })?,
            },
        };
        if locations.is_empty() {
            return Err(PyValueError::new_err(
                "store is an empty list: give at least one location (or None)",
            ));
        }
        let device = match device {
            "host" | "cpu" => Device::Host,
            "cuda" | "gpu" => Device::Cuda {
                ordinal: device_index,
            },
            other => {
                return Err(PyValueError::new_err(format!(
                    "device must be \"host\" or \"cuda\", not {other:?}"
                )))
            }
        };
        py.detach(move || {
            let memory: Arc<dyn DeviceMemory> = match device {
                Device::Host => Arc::new(HostMemory::default()),
                Device::Cuda { ordinal } => Arc::new(
                    CudaMemory::new(CudaMemoryConfig {
                        ordinal,
                        ..CudaMemoryConfig::default()
                    })
                    .py()?,
                ),
            };
            let builder = SwapStore::builder()
                .capacity_bytes(store_bytes)
                .force(force_store)
                .scrub(if scrub_store {
                    Scrub::OnClose
                } else {
                    Scrub::Keep
                });
            // A directory gets a temporary file, an existing file or device is opened, anything else created;
            // several locations make one store striped over them.
            let mut store = builder.build(&locations).py()?;
            let io_point = if calibrate {
                let done = store
                    .calibrate(&oversub_io::tuning::Calibration::default())
                    .py()?;
                IoPointInfo {
                    source: "auto",
                    read: (done.read.block_bytes, done.read.queue_depth),
                    write: (done.write.block_bytes, done.write.queue_depth),
                    seconds: done.seconds,
                }
            } else {
                IoPointInfo {
                    source: "default",
                    read: (store.max_io_bytes(), store.engine().queue_depth()),
                    write: (store.max_write_io_bytes(), store.engine().queue_depth()),
                    seconds: 0.0,
                }
            };
            let store_paths: Vec<PathBuf> = store
                .member_paths()
                .into_iter()
                .map(std::path::Path::to_path_buf)
                .collect();
            let mut config = PoolConfig::new(capacity_bytes).verify_checksums(verify_checksums);
            if let Some(bytes) = tier_bytes.filter(|&b| b > 0) {
                config = config.host_tier(HostTierConfig {
                    capacity_bytes: bytes,
                    pinned: pinned_host_tier,
                });
            }
            let inner = oversub_core::Pool::new(config, memory, Arc::new(store)).py()?;
            Ok(Pool {
                inner,
                device,
                store_paths,
                io_point,
            })
        })
    }

    /// A new address space: a set of buffers paged together (one per model, tenant or CUDA context).
    fn address_space(&self) -> AddressSpace {
        AddressSpace {
            core: Arc::new(SpaceCore {
                space: self.inner.address_space(),
                device: self.device,
                live: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The store's direct-I/O alignment in bytes: offsets and lengths given to
    /// ``AddressSpace.alloc_external`` are multiples of it.
    #[getter]
    fn store_alignment(&self) -> usize {
        self.inner.store().alignment()
    }

    /// Device memory the pool may hand out, in bytes.
    #[getter]
    fn capacity_bytes(&self) -> u64 {
        self.inner.stats().capacity_bytes
    }

    /// Device memory held now by resident buffers and operations in flight, in bytes.
    #[getter]
    fn used_bytes(&self) -> u64 {
        self.inner.stats().used_bytes
    }

    /// "host" or "cuda".
    #[getter]
    fn device(&self) -> &'static str {
        self.device.name()
    }

    /// The store's I/O shape: ``{"source": "default"|"auto", "read_block_bytes", "read_queue_depth",
    /// "write_block_bytes", "write_queue_depth", "calibration_s"}``.
    #[getter]
    fn io_point<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        let p = self.io_point;
        d.set_item("source", p.source)?;
        d.set_item("read_block_bytes", p.read.0)?;
        d.set_item("read_queue_depth", p.read.1)?;
        d.set_item("write_block_bytes", p.write.0)?;
        d.set_item("write_queue_depth", p.write.1)?;
        d.set_item("calibration_s", p.seconds)?;
        Ok(d)
    }

    /// The swap store's path (a temporary file is already unlinked); the first member's when the store is striped
    /// over several locations.
    #[getter]
    fn store_path(&self) -> PathBuf {
        self.store_paths[0].clone()
    }

    /// The paths of every file or device the store is striped over, in stripe order (one for a store that is not
    /// striped).
    #[getter]
    fn store_paths(&self) -> Vec<PathBuf> {
        self.store_paths.clone()
    }

    /// How buffers travel between device memory and the store (e.g. "direct", "staged", "gpudirect").
    #[getter]
    fn transfer_path(&self) -> &'static str {
        self.inner.transfer_path()
    }

    /// Occupancy as a dict: capacity_bytes, used_bytes, store_capacity_bytes, store_free_bytes and, with a host
    /// tier, host_tier_used_bytes and host_tier_capacity_bytes.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("capacity_bytes", s.capacity_bytes)?;
        d.set_item("used_bytes", s.used_bytes)?;
        d.set_item("store_capacity_bytes", s.store_capacity_bytes)?;
        d.set_item("store_free_bytes", s.store_free_bytes)?;
        if let Some((used, cap)) = self.inner.host_tier_bytes() {
            d.set_item("host_tier_used_bytes", used)?;
            d.set_item("host_tier_capacity_bytes", cap)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let s = self.inner.stats();
        format!(
            "oversub.Pool(capacity={}, used={}, device={:?}, store={:?})",
            oversub_report::format_bytes(s.capacity_bytes),
            oversub_report::format_bytes(s.used_bytes),
            self.device.name(),
            self.store_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

/// The Rust side of an address space, shared by its buffers.
#[derive(Debug)]
pub(crate) struct SpaceCore {
    pub(crate) space: oversub_core::AddressSpace,
    pub(crate) device: Device,
    /// Buffers alive on the Python side, for `page_out_all` (which must respect their views).
    live: Mutex<HashMap<oversub_core::Buffer, Weak<BufCore>>>,
}

/// A file oversub reads but never writes (a model checkpoint), opened read-only with O_DIRECT where the file system
/// takes it, for ``AddressSpace.alloc_external``. It stays open while any buffer made from it lives; a change to
/// the file after it was opened makes the next page-in raise ``ExternalChangedError``.
#[pyclass(frozen, module = "oversub")]
#[derive(Debug)]
pub struct ExternalFile {
    inner: Arc<oversub_io::ExternalFile>,
}

#[pymethods]
impl ExternalFile {
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        Ok(ExternalFile {
            inner: Arc::new(oversub_io::ExternalFile::open(&path).py()?),
        })
    }

    /// The path it was opened at.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// Its size in bytes when it was opened.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.inner.len()
    }

    /// Whether reads bypass the page cache (O_DIRECT).
    #[getter]
    fn direct(&self) -> bool {
        self.inner.is_direct()
    }

    fn __repr__(&self) -> String {
        format!(
            "ExternalFile({:?}, nbytes={}, direct={})",
            self.inner.path(),
            self.inner.len(),
            self.inner.is_direct()
        )
    }
}

/// A set of buffers paged together. Create one with `Pool.address_space()`.
#[pyclass(frozen, module = "oversub")]
#[derive(Debug)]
pub struct AddressSpace {
    core: Arc<SpaceCore>,
}

#[pymethods]
impl AddressSpace {
    /// Allocates a buffer of `nbytes` (int or size string), resident and zero-filled.
    ///
    /// Args:
    ///     read_only: its bytes never change after the first page-out, so it is written to the store once and
    ///         later page-outs only give the memory back (model weights).
    ///     unpageable: never paged (pinned zero-copy memory); paging calls raise UnpageableError.
    ///
    /// Raises:
    ///     oversub.errors.OutOfMemoryError: the pool has no room; page something out first.
    #[pyo3(signature = (nbytes, read_only=false, *, unpageable=false))]
    fn alloc(
        &self,
        nbytes: &Bound<'_, PyAny>,
        read_only: bool,
        unpageable: bool,
    ) -> PyResult<Buffer> {
        let size = size_arg(nbytes, "nbytes")?;
        let flags = BufferFlags {
            read_only,
            unpageable,
        };
        let handle = self.core.space.alloc(size, flags).py()?;
        let core = Arc::new(BufCore {
            space: Arc::clone(&self.core),
            handle,
            nbytes: size,
            read_only,
            views: Mutex::new(0),
            freed: AtomicBool::new(false),
        });
        lock(&self.core.live).insert(handle, Arc::downgrade(&core));
        Ok(Buffer { core })
    }

    /// Allocates a read-only buffer of `nbytes` whose stored copy is `file`'s bytes from `offset` (a model
    /// checkpoint used as the store, so nothing is copied): it starts paged out, each page-in reads that range of
    /// the file, each page-out only gives the memory back, and oversub never writes the file.
    ///
    /// Args:
    ///     file: an ``oversub.ExternalFile`` (share one per file) or a path.
    ///     offset, nbytes: multiples of ``Pool.store_alignment`` lying inside the file (round a range out and
    ///         view the bytes you want at their offset inside the buffer).
    ///
    /// Raises:
    ///     oversub.errors.IoError: misaligned or outside the file; at page-in, ``ExternalChangedError`` when the
    ///         file was modified after it was opened.
    #[pyo3(signature = (file, offset, nbytes))]
    fn alloc_external(
        &self,
        file: &Bound<'_, PyAny>,
        offset: u64,
        nbytes: &Bound<'_, PyAny>,
    ) -> PyResult<Buffer> {
        let size = size_arg(nbytes, "nbytes")?;
        let file = match file.cast::<ExternalFile>() {
            Ok(f) => Arc::clone(&f.get().inner),
            Err(_) => {
                let path: PathBuf = file.extract()?;
                Arc::new(oversub_io::ExternalFile::open(&path).py()?)
            }
        };
        let handle = self
            .core
            .space
            .alloc_external(&file, offset, size, BufferFlags::READ_ONLY)
            .py()?;
        let core = Arc::new(BufCore {
            space: Arc::clone(&self.core),
            handle,
            nbytes: size,
            read_only: true,
            views: Mutex::new(0),
            freed: AtomicBool::new(false),
        });
        lock(&self.core.live).insert(handle, Arc::downgrade(&core));
        Ok(Buffer { core })
    }

    /// Pages out every resident pageable buffer of the space and waits.
    ///
    /// Raises:
    ///     oversub.errors.ViewError: a resident buffer has live views (nothing is paged out then).
    fn page_out_all(&self, py: Python<'_>) -> PyResult<()> {
        let bufs = self.live_buffers();
        let mut targets = Vec::new();
        for b in &bufs {
            let info = b.info().py()?;
            if info.state == BufferState::Resident && !info.flags.unpageable {
                b.check_no_views(&lock(&b.views), "paging it out")?;
                targets.push(b);
            }
        }
        // Each ticket travels with its buffer, so a buffer whose last Python reference goes meanwhile is freed
        // when its page-out ends, not leaked.
        let mut tickets = Vec::new();
        for b in targets {
            match b.start_out() {
                Ok(t) => tickets.push((t, Arc::clone(b))),
                Err(e) => {
                    // The start's error is the one to report; the started ones still complete.
                    let _ = finish_all(py, tickets);
                    return Err(e);
                }
            }
        }
        finish_all(py, tickets)
    }

    /// Pages in every paged-out buffer of the space and waits.
    fn page_in_all(&self, py: Python<'_>) -> PyResult<()> {
        let mut tickets = Vec::new();
        for b in self.live_buffers() {
            if b.info().py()?.state != BufferState::PagedOut {
                continue;
            }
            match b.start_in() {
                Ok(t) => tickets.push((t, b)),
                Err(e) => {
                    let _ = finish_all(py, tickets);
                    return Err(e);
                }
            }
        }
        finish_all(py, tickets)
    }

    /// Device memory this space's buffers hold now, in bytes.
    #[getter]
    fn resident_bytes(&self) -> u64 {
        self.core.space.charged_bytes()
    }

    /// Number of live buffers.
    fn __len__(&self) -> usize {
        self.live_buffers().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "oversub.AddressSpace(id={}, buffers={}, resident={})",
            self.core.space.id(),
            self.live_buffers().len(),
            oversub_report::format_bytes(self.core.space.charged_bytes())
        )
    }
}

impl AddressSpace {
    fn live_buffers(&self) -> Vec<Arc<BufCore>> {
        let mut v: Vec<Arc<BufCore>> = lock(&self.core.live)
            .values()
            .filter_map(Weak::upgrade)
            .filter(|b| !b.freed.load(Ordering::Acquire))
            .collect();
        v.sort_by_key(|b| b.handle);
        v
    }
}

/// How long a wait runs with the GIL released before it takes the GIL back to look for signals (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Finishes tickets whose waiter went away (a Handle dropped unfinished, a wait interrupted by Ctrl-C) on a thread
/// of its own, so that no drop or interrupt blocks with the GIL held. Each ticket travels with its buffer.
fn reap(ticket: Ticket, buffer: Arc<BufCore>) {
    type Orphan = (Ticket, Arc<BufCore>);
    static REAPER: std::sync::OnceLock<Option<Mutex<std::sync::mpsc::Sender<Orphan>>>> =
        std::sync::OnceLock::new();
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Orphan>();
        std::thread::Builder::new()
            .name("oversub-reaper".into())
            .spawn(move || {
                for (ticket, buffer) in rx {
                    if let Err(e) = ticket.finish() {
                        tracing::warn!(buffer = %buffer.handle, "operation finished after its waiter left: {e}");
                    }
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let orphan = (ticket, buffer);
    let unsent = match reaper {
        Some(tx) => lock(tx).send(orphan).err().map(|e| e.0),
        None => Some(orphan),
    };
    if let Some((ticket, buffer)) = unsent {
        // No reaper thread: finish here (this may block).
        if let Err(e) = ticket.finish() {
            tracing::warn!(buffer = %buffer.handle, "operation finished after its waiter left: {e}");
        }
    }
}

/// Waits for an operation with the GIL released, taking it back every [`SIGNAL_CHECK`] to answer signals. On
/// Ctrl-C the operation goes on in the background (finished by the reaper) and KeyboardInterrupt is raised.
fn finish_interruptibly(py: Python<'_>, ticket: Ticket, buffer: &Arc<BufCore>) -> PyResult<()> {
    loop {
        if py.detach(|| ticket.wait_timeout(SIGNAL_CHECK)) {
            return py.detach(move || ticket.finish()).py();
        }
        if let Err(interrupt) = py.check_signals() {
            reap(ticket, Arc::clone(buffer));
            return Err(interrupt);
        }
    }
}

/// Finishes tickets (interruptibly); returns the first error after finishing all.
fn finish_all(py: Python<'_>, tickets: Vec<(Ticket, Arc<BufCore>)>) -> PyResult<()> {
    let mut first: Option<PyErr> = None;
    let mut rest = tickets.into_iter();
    while let Some((ticket, buffer)) = rest.next() {
        match finish_interruptibly(py, ticket, &buffer) {
            Ok(()) => {}
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) => {
                // The others go on in the background too.
                for (ticket, buffer) in rest {
                    reap(ticket, buffer);
                }
                return Err(e);
            }
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// The Rust side of a buffer: owned by its Python object, its views and its handles; freed with the last.
#[derive(Debug)]
pub(crate) struct BufCore {
    pub(crate) space: Arc<SpaceCore>,
    pub(crate) handle: oversub_core::Buffer,
    pub(crate) nbytes: u64,
    pub(crate) read_only: bool,
    /// Live views (buffer-protocol exports and DLPack tensors). Taken around starting a page-out too, so a view
    /// cannot appear between the check and the start.
    pub(crate) views: Mutex<usize>,
    freed: AtomicBool,
}

impl BufCore {
    pub(crate) fn info(&self) -> Result<BufferInfo, PagerError> {
        self.space.space.info(self.handle)
    }

    pub(crate) fn check_no_views(&self, views: &usize, doing: &str) -> PyResult<()> {
        if *views == 0 {
            return Ok(());
        }
        Err(self.view_error(*views, doing).into())
    }

    /// Starts a page-out unless views are alive.
    fn start_out(&self) -> PyResult<Ticket> {
        self.start_out_raw().map_err(PyErr::from)
    }

    /// [`start_out`](Self::start_out) without the GIL: the error as a [`Raised`].
    fn start_out_raw(&self) -> Result<Ticket, Raised> {
        let views = lock(&self.views);
        if *views > 0 {
            return Err(self.view_error(*views, "paging it out"));
        }
        self.space
            .space
            .page_out_async(self.handle)
            .map_err(|e| e.to_raised())
    }

    fn view_error(&self, views: usize, doing: &str) -> Raised {
        Raised::new(
            "ViewError",
            format!(
                "buffer {} has {} live view{} (NumPy arrays, memoryviews or DLPack tensors); delete them before {doing}",
                self.handle,
                views,
                if views == 1 { "" } else { "s" }
            ),
        )
    }

    fn start_in(&self) -> PyResult<Ticket> {
        self.space.space.page_in_async(self.handle).py()
    }

    fn free(&self) -> PyResult<()> {
        let views = lock(&self.views);
        self.check_no_views(&views, "freeing it")?;
        if self.freed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Err(e) = self.space.space.free(self.handle) {
            self.freed.store(false, Ordering::Release);
            return Err(e.to_raised().into());
        }
        lock(&self.space.live).remove(&self.handle);
        Ok(())
    }
}

impl Drop for BufCore {
    fn drop(&mut self) {
        if !self.freed.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.space.space.free(self.handle) {
                tracing::warn!(buffer = %self.handle, "freeing a collected buffer: {e}");
            }
            lock(&self.space.live).remove(&self.handle);
        }
    }
}

/// A buffer of device memory that can be paged out to the store and back, keeping its address.
///
/// Create one with `AddressSpace.alloc()`. It is freed when the object is collected, at `free()`, or at the end
/// of a `with` block. A resident host buffer is a NumPy array through `numpy()` (or any buffer-protocol consumer:
/// `memoryview(buf)`) and a DLPack producer; a resident CUDA buffer exposes `__cuda_array_interface__` and
/// `__dlpack__`. While views are alive the buffer cannot be paged out or freed (ViewError); a view of a buffer
/// that is not resident raises NotResidentError.
#[pyclass(frozen, module = "oversub")]
#[derive(Debug)]
pub struct Buffer {
    pub(crate) core: Arc<BufCore>,
}

#[pymethods]
impl Buffer {
    /// Pages the buffer out and waits: write to the store (once, for a read-only buffer), then give the memory
    /// back. Ctrl-C interrupts the wait (KeyboardInterrupt); the page-out then completes in the background.
    ///
    /// Raises:
    ///     oversub.errors.ViewError: views of the buffer are alive.
    ///     oversub.errors.AlreadyPagedOutError, OperationInFlightError, UnpageableError, IoError, ...
    fn page_out(&self, py: Python<'_>) -> PyResult<()> {
        let ticket = self.core.start_out()?;
        finish_interruptibly(py, ticket, &self.core)
    }

    /// Pages the buffer in and waits: memory at the same address, then the bytes read back. Ctrl-C interrupts the
    /// wait (KeyboardInterrupt); the page-in then completes in the background.
    ///
    /// Raises:
    ///     oversub.errors.OutOfMemoryError: the pool has no room; page something out first.
    ///     oversub.errors.AlreadyResidentError, OperationInFlightError, IoError, ChecksumMismatchError, ...
    fn page_in(&self, py: Python<'_>) -> PyResult<()> {
        let ticket = self.core.start_in()?;
        finish_interruptibly(py, ticket, &self.core)
    }

    /// Starts a page-out and returns at once with a Handle (`done()`, `wait()`, `await`). The write runs in the
    /// background; the buffer is paged out when the handle is waited for (or found done).
    fn page_out_async(slf: &Bound<'_, Self>) -> PyResult<Handle> {
        let ticket = slf.get().core.start_out()?;
        Ok(Handle::new(slf, ticket))
    }

    /// Starts a page-in and returns at once with a Handle; the read runs while Python goes on.
    fn page_in_async(slf: &Bound<'_, Self>) -> PyResult<Handle> {
        let ticket = slf.get().core.start_in()?;
        Ok(Handle::new(slf, ticket))
    }

    /// Frees the buffer now (otherwise it is freed when collected). With an operation in flight, the buffer is
    /// gone at once and its memory and store space are given back when the operation ends.
    ///
    /// Raises:
    ///     oversub.errors.ViewError: views of the buffer are alive.
    fn free(&self) -> PyResult<()> {
        self.core.free()
    }

    /// Copies `data` (any bytes-like object) into the buffer at `offset`; the buffer must be resident.
    #[pyo3(signature = (data, offset=0))]
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let check = |len: usize| -> PyResult<()> {
            let (len, size) = (len as u64, self.core.nbytes);
            if offset.checked_add(len).is_none_or(|end| end > size) {
                return Err(PagerError::OutOfBounds {
                    buffer: self.core.handle,
                    offset,
                    len,
                    size,
                }
                .to_raised()
                .into());
            }
            Ok(())
        };
        // Bounds first, so a wrong offset costs no copy of the input.
        let bytes: Vec<u8> = if let Ok(b) = data.cast::<PyBytes>() {
            check(b.as_bytes().len())?;
            b.as_bytes().to_vec()
        } else {
            let view = pyo3::buffer::PyBuffer::<u8>::get(data)?;
            check(view.len_bytes())?;
            view.to_vec(py)?
        };
        let core = Arc::clone(&self.core);
        py.detach(move || core.space.space.write(core.handle, offset, &bytes))
            .py()
    }

    /// Copies `nbytes` (default: to the end) from `offset` out of the buffer as bytes; it must be resident.
    ///
    /// Raises:
    ///     oversub.errors.OutOfBoundsError: the range does not lie inside the buffer (checked before anything is
    ///         allocated).
    ///     oversub.errors.NotResidentError: the buffer is paged out.
    #[pyo3(signature = (nbytes=None, offset=0))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        nbytes: Option<u64>,
        offset: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let size = self.core.nbytes;
        let len = nbytes.unwrap_or_else(|| size.saturating_sub(offset));
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(PagerError::OutOfBounds {
                buffer: self.core.handle,
                offset,
                len,
                size,
            }
            .to_raised()
            .into());
        }
        let len = usize::try_from(len)
            .map_err(|_| PyValueError::new_err(format!("nbytes too large: {len}")))?;
        let len_ssize = pyo3::ffi::Py_ssize_t::try_from(len)
            .map_err(|_| PyValueError::new_err(format!("nbytes too large: {len}")))?;
        // SAFETY: a NULL source asks CPython for a new, uninitialised bytes object of `len` bytes; we own the only
        // reference, which `from_owned_ptr_or_err` takes over (or the error it set).
        let out = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), len_ssize),
            )?
        };
        // SAFETY: `out` is a bytes object (just made); its buffer holds `len` bytes.
        let dst = unsafe { pyo3::ffi::PyBytes_AsString(out.as_ptr()) };
        if dst.is_null() {
            return Err(PyErr::fetch(py));
        }
        let dst = SendPtr(dst.cast::<u8>());
        let core = Arc::clone(&self.core);
        // The copy may wait (for an arbiter's grant, or for another thread's page-out of this buffer): without the
        // GIL.
        py.detach(move || {
            let dst = dst;
            // SAFETY: the bytes object is new and referenced only here (no Python code can see it until we return
            // it), so filling its `len` bytes without the GIL races with nothing; it stays alive in `out`.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.0, len) };
            core.space.space.read(core.handle, offset, out)
        })
        .py()?;
        Ok(out.cast_into::<PyBytes>()?)
    }

    /// Size in bytes, as asked for at alloc.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.core.nbytes
    }

    /// "resident", "paging_out", "paged_out" or "paging_in".
    #[getter]
    fn state(&self) -> PyResult<&'static str> {
        Ok(state_name(self.core.info().py()?.state))
    }

    /// Device address (the host address for the host backend); the same for the buffer's whole life.
    #[getter]
    fn address(&self) -> PyResult<u64> {
        Ok(self.core.info().py()?.addr.0)
    }

    /// Whether the buffer was allocated read-only.
    #[getter]
    fn read_only(&self) -> bool {
        self.core.read_only
    }

    /// "host" or "cuda".
    #[getter]
    fn device(&self) -> &'static str {
        self.core.space.device.name()
    }

    /// Live views (buffer-protocol exports and DLPack tensors) of the buffer.
    #[getter]
    fn views(&self) -> usize {
        *lock(&self.core.views)
    }

    /// A snapshot as a dict: nbytes, reserved_bytes, address, state, read_only, unpageable, stored,
    /// in_host_tier, views.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.core.info().py()?;
        let d = PyDict::new(py);
        d.set_item("nbytes", i.size_bytes)?;
        d.set_item("reserved_bytes", i.reserved_bytes)?;
        d.set_item("address", i.addr.0)?;
        d.set_item("state", state_name(i.state))?;
        d.set_item("read_only", i.flags.read_only)?;
        d.set_item("unpageable", i.flags.unpageable)?;
        d.set_item("stored", i.stored)?;
        d.set_item("in_host_tier", i.in_host_tier)?;
        d.set_item("views", *lock(&self.core.views))?;
        Ok(d)
    }

    /// A NumPy array over the buffer's memory, without a copy (host buffers).
    ///
    /// Args:
    ///     dtype: element type (default uint8).
    ///     shape: int or tuple; without it, a 1-D array of the whole buffer. A shape may cover less than the
    ///         buffer (its first bytes).
    ///
    /// The array is read-only for a read-only buffer already on the store. While it (or any array derived from
    /// it) is alive the buffer cannot be paged out or freed.
    ///
    /// Raises:
    ///     oversub.errors.NotResidentError: the buffer is paged out (page it in first).
    ///     oversub.errors.ViewError: a CUDA buffer, or a dtype/shape that does not fit.
    #[pyo3(signature = (dtype=None, shape=None))]
    fn numpy<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::views::numpy(slf, dtype, shape)
    }

    /// DLPack export (1-D uint8) of the resident buffer: `torch.from_dlpack(buf)`, `numpy.from_dlpack(buf)`.
    /// The consumer's tensor counts as a view until it is deleted.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // The page-in waited for its copies, so no consumer stream needs to wait.
        let _ = stream;
        let versioned = crate::dlpack::wants_versioned(max_version)?;
        crate::views::dlpack(slf, dl_device, copy, versioned)
    }

    /// (device type, device id) for DLPack: (1, 0) for host, (2, ordinal) for CUDA.
    fn __dlpack_device__(&self) -> (i32, i32) {
        crate::views::dlpack_device(self)
    }

    /// CUDA Array Interface (v3) of a resident CUDA buffer, as uint8 bytes, for
    /// `torch.as_tensor(buf, device="cuda")` and CuPy. Host buffers have none (AttributeError). Tensors made this
    /// way are not counted as views: do not page the buffer out while they are in use (DLPack is counted).
    #[getter]
    fn __cuda_array_interface__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        crate::views::cuda_array_interface(slf)
    }

    /// Buffer protocol (host buffers): `memoryview(buf)`, `numpy.frombuffer(buf)`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: PyO3 passes the interpreter's Py_buffer from bf_getbuffer.
        unsafe { crate::views::get_buffer(slf, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {
        crate::views::release_buffer(&self.core);
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.core.nbytes).unwrap_or(usize::MAX)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.core.free()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = self
            .core
            .info()
            .map(|i| state_name(i.state))
            .unwrap_or("freed");
        format!(
            "oversub.Buffer({}, nbytes={}, state={state}, device={}{})",
            self.core.handle,
            self.core.nbytes,
            self.core.space.device.name(),
            if self.core.read_only {
                ", read_only"
            } else {
                ""
            }
        )
    }
}

/// How an asynchronous operation stands.
#[derive(Debug)]
struct HandleState {
    ticket: Option<Ticket>,
    outcome: Option<Result<(), Raised>>,
}

/// An asynchronous page-in or page-out in flight.
///
/// `done()` tells without blocking, `wait()` blocks (with the GIL released, answering Ctrl-C) and raises the
/// operation's error, and `await handle` waits in an executor thread so the event loop runs on. Waiting again
/// returns (or raises) the same outcome. A handle dropped unfinished leaves its operation to finish in the
/// background (nothing blocks, nothing leaks).
#[pyclass(frozen, module = "oversub")]
#[derive(Debug)]
pub struct Handle {
    state: Mutex<HandleState>,
    kind: OpKind,
    buffer: Py<Buffer>,
    /// The buffer's Rust side, to hand over with an unfinished ticket when the handle is dropped.
    core: Arc<BufCore>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(ticket) = st.ticket.take() {
            // Dropped with the GIL held, maybe by the garbage collector: never wait here.
            reap(ticket, Arc::clone(&self.core));
        }
    }
}

impl Handle {
    fn new(buffer: &Bound<'_, Buffer>, ticket: Ticket) -> Handle {
        Handle {
            kind: ticket.kind(),
            state: Mutex::new(HandleState {
                ticket: Some(ticket),
                outcome: None,
            }),
            buffer: buffer.clone().unbind(),
            core: Arc::clone(&buffer.get().core),
        }
    }

    /// Finishes the operation if it is complete, waiting up to `wait` for it; returns the outcome once known.
    fn settle_within(&self, wait: Duration) -> Option<Result<(), Raised>> {
        let mut st = lock(&self.state);
        if st.outcome.is_none() {
            if let Some(ticket) = &st.ticket {
                if !ticket.wait_timeout(wait) {
                    return None;
                }
            }
        }
        Self::settle_locked(&mut st, true)
    }

    fn settle_locked(st: &mut HandleState, block: bool) -> Option<Result<(), Raised>> {
        if st.outcome.is_none() {
            let complete = st.ticket.as_ref().is_none_or(Ticket::is_complete);
            if complete || block {
                let outcome = match st.ticket.take() {
                    Some(t) => t.finish().map_err(|e| e.to_raised()),
                    None => Err(Raised::new("InternalError", "handle lost its operation")),
                };
                st.outcome = Some(outcome);
            }
        }
        st.outcome.clone()
    }
}

#[pymethods]
impl Handle {
    /// Whether the operation has completed (then `wait()` returns at once). Never blocks: while another thread
    /// is inside `wait()`, the answer is False until that wait has finished the operation.
    fn done(&self) -> bool {
        match self.state.try_lock() {
            Ok(mut st) => Self::settle_locked(&mut st, false).is_some(),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                Self::settle_locked(&mut p.into_inner(), false).is_some()
            }
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// Waits for the operation (GIL released) and raises its error, if any.
    ///
    /// Args:
    ///     timeout: seconds to wait at most; None waits as long as it takes.
    ///
    /// Raises:
    ///     TimeoutError: the operation had not completed within `timeout` (it goes on; wait again).
    ///     KeyboardInterrupt: Ctrl-C during the wait (the operation goes on; wait again).
    ///     oversub.errors.Error: the operation failed (e.g. IoError); the buffer keeps its earlier state.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let deadline = match timeout {
            None => None,
            Some(t) if t >= 0.0 && t.is_finite() => {
                Some(Instant::now() + Duration::from_secs_f64(t))
            }
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "timeout must be a finite number of seconds >= 0, got {t}"
                )))
            }
        };
        let outcome = loop {
            let slice = deadline.map_or(SIGNAL_CHECK, |d| {
                d.saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK)
            });
            if let Some(o) = py.detach(|| self.settle_within(slice)) {
                break Some(o);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break None;
            }
            py.check_signals()?;
        };
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(r)) => Err(r.to_pyerr(py)),
            None => Err(PyTimeoutError::new_err(format!(
                "{} of {} not complete after {} s",
                self.kind_name(),
                self.core.handle,
                timeout.unwrap_or(0.0)
            ))),
        }
    }

    /// `await handle`: waits in the event loop's default executor.
    fn __await__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let lp = py.import("asyncio")?.call_method0("get_running_loop")?;
        let fut = lp.call_method1("run_in_executor", (py.None(), slf.getattr("wait")?))?;
        fut.call_method0("__await__")
    }

    /// "page_in" or "page_out".
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind_name()
    }

    /// The buffer being paged.
    #[getter]
    fn buffer(&self, py: Python<'_>) -> Py<Buffer> {
        self.buffer.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        let state = match &lock(&self.state).outcome {
            None => "in flight",
            Some(Ok(())) => "done",
            Some(Err(_)) => "failed",
        };
        format!(
            "oversub.Handle({} of {}, {state})",
            self.kind_name(),
            self.buffer.get().core.handle
        )
    }
}

impl Handle {
    fn kind_name(&self) -> &'static str {
        match self.kind {
            OpKind::PageIn => "page_in",
            OpKind::PageOut => "page_out",
        }
    }
}
