//! The pager from Python: `Pool`, `AddressSpace` and `Buffer` (the `Handle` of an asynchronous operation is in
//! `handle.rs`). Typed results (`PoolStats`, `BufferInfo`, `BufferState`) are the Python classes of
//! `oversub.records`, built here from Rust values.
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

use oversub_core::{
    BufferFlags, BufferInfo, BufferState, HostTierConfig, IoPointChoice, PagerError, PoolSpec,
    Ticket,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::errors::{OrRaise, Raised, ToRaised};
use crate::util::size_arg;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pool>()?;
    m.add_class::<AddressSpace>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<crate::handle::Handle>()?;
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

/// A pointer that may cross into a closure run without the GIL (see `Buffer.read` and `Buffer.readinto`).
struct SendPtr(*mut u8);
// SAFETY: only used to fill memory that stays alive and exported for the closure's whole run: a new bytes object no
// other thread can reach (`Buffer.read`) or the held buffer export of `Buffer.readinto`.
unsafe impl Send for SendPtr {}

/// Which memory a pool's buffers live in (the core's, which `PoolSpec` opens).
pub(crate) use oversub_core::Device;

/// `device=` as PyTorch and CuPy users write it: "host"/"cpu", "cuda"/"gpu", "cuda:N", or any object with `.type`
/// and `.index` (a `torch.device`, duck-typed so that torch is never imported). `device_index`, when given, must
/// agree with an index in `device`.
fn parse_device(device: &Bound<'_, PyAny>, device_index: Option<i32>) -> PyResult<Device> {
    let (kind, index): (String, Option<i64>) = if let Ok(s) = device.cast::<PyString>() {
        let text = s.to_str()?.trim().to_ascii_lowercase();
        match text.split_once(':') {
            Some((kind, index)) => {
                let index = index.trim().parse::<i64>().map_err(|_| {
                    PyValueError::new_err(format!(
                        "device {text:?}: the index after ':' must be an int, as in \"cuda:1\""
                    ))
                })?;
                (kind.to_string(), Some(index))
            }
            None => (text, None),
        }
    } else if device.hasattr("type")? && device.hasattr("index")? {
        let kind: String = device.getattr("type")?.extract().map_err(|_| {
            PyTypeError::new_err("device.type must be a string (as torch.device's is)")
        })?;
        let index: Option<i64> = device.getattr("index")?.extract().map_err(|_| {
            PyTypeError::new_err("device.index must be an int or None (as torch.device's is)")
        })?;
        (kind.to_ascii_lowercase(), index)
    } else {
        return Err(PyTypeError::new_err(format!(
            "device must be a string (\"host\", \"cuda\", \"cuda:1\") or a torch.device, not {}",
            device.get_type().name()?
        )));
    };
    match kind.as_str() {
        "host" | "cpu" => Ok(Device::Host),
        "cuda" | "gpu" => {
            let ordinal = match (index, device_index) {
                (Some(i), Some(d)) if i != i64::from(d) => {
                    return Err(PyValueError::new_err(format!(
                        "device says CUDA device {i} but device_index says {d}; give one of them"
                    )))
                }
                (Some(i), _) => i32::try_from(i).ok().filter(|&i| i >= 0).ok_or_else(|| {
                    PyValueError::new_err(format!("CUDA device index must be >= 0, got {i}"))
                })?,
                (None, Some(d)) if d < 0 => {
                    return Err(PyValueError::new_err(format!(
                        "device_index must be >= 0, got {d}"
                    )))
                }
                (None, Some(d)) => d,
                (None, None) => 0,
            };
            Ok(Device::Cuda { ordinal })
        }
        other => Err(PyValueError::new_err(format!(
            "device must be \"host\" or \"cuda\" (or \"cuda:N\", a torch.device), not {other:?}"
        ))),
    }
}

/// A class of `oversub.records` (typed results built from Rust).
fn record_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("oversub.records").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// A buffer state as an `oversub.records.BufferState` (a str enum equal to its old string).
fn state_value(py: Python<'_>, state: BufferState) -> PyResult<Bound<'_, PyAny>> {
    record_class(py, "BufferState")?.call1((state_name(state),))
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
///     device: "host" (the default, also "cpu" or None: buffers in host memory, the integrated-GPU model; NumPy
///         views) or "cuda" (also "gpu"; CUDA device memory through the driver's virtual memory API;
///         `__cuda_array_interface__` and DLPack). "cuda:N" names the device, as does a ``torch.device`` (any
///         object with ``.type`` and ``.index``; torch is never imported).
///     store_capacity: size of the swap store (default 4 x capacity, at least 64 MiB; a block device whole:
///         the one rule of oversub_core::PoolSpec); a store file is preallocated to it. Striped over several locations, the total, split evenly among them.
///     host_tier: host memory that holds paged-out buffers before the store (default none).
///     pinned_host_tier: page-lock the host tier (faster device copies; default False).
///     verify_checksums: checksum each buffer at page-out and verify it at page-in, so a store that corrupts
///         bytes raises ChecksumMismatchError instead of returning them (default True; the hashing overlaps the
///         transfer on a thread of its own, cost in docs/benchmarks.md).
///     force_store: use an existing store file or block device whatever it holds (a file system, another user's
///         store, data oversub did not write) and wherever it is (a file of another user, a symbolic link at the
///         store's name); without it such a store raises StoreRefusedError. A mounted or
///         busy device is refused regardless (StoreBusyError).
///     scrub_store: discard the store's data when the pool closes, so swapped bytes do not stay on disk
///         (default True; False keeps them).
///     device_index: CUDA device ordinal (default 0, or the N of "cuda:N", which it must then agree with).
///     io: how the store's I/O is shaped: "default" (4 MiB requests, 32 in flight) or "auto" (a calibration of
///         about a second at creation measures 1, 4 and 16 MiB requests at 8 and 32 in flight on the store itself
///         and keeps the fastest point for reads and for writes; see ``io_point``).
///
/// Raises:
///     oversub.errors.IoError: the store cannot be created or opened.
///     oversub.errors.StoreBusyError: another pool or process holds the store, or the device is mounted.
///     oversub.errors.StoreRefusedError: the store holds data oversub will not overwrite without force_store.
///     oversub.errors.NoDriverError: device="cuda" (or "cuda:N") without a CUDA driver.
///     ValueError: an unknown device, a negative index, or device_index disagreeing with "cuda:N".
#[pyclass(frozen, module = "oversub")]
#[derive(Debug)]
pub struct Pool {
    inner: oversub_core::Pool,
    device: Device,
    store_paths: Vec<PathBuf>,
    io_point: IoPointInfo,
    /// Set by `close()`; shared with the pool's address spaces, whose calls then raise PoolClosedError.
    closed: Arc<AtomicBool>,
    /// The address spaces made so far, for `close()` to free their buffers.
    spaces: Mutex<Vec<Weak<SpaceCore>>>,
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
    #[pyo3(signature = (capacity, store=None, device=None, *, store_capacity=None, host_tier=None,
        pinned_host_tier=false, verify_checksums=true, device_index=None, force_store=false, scrub_store=true,
        io="default"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        capacity: &Bound<'_, PyAny>,
        store: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
        store_capacity: Option<&Bound<'_, PyAny>>,
        host_tier: Option<&Bound<'_, PyAny>>,
        pinned_host_tier: bool,
        verify_checksums: bool,
        device_index: Option<i32>,
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
        let store_bytes = store_capacity
            .map(|s| size_arg(s, "store_capacity"))
            .transpose()?;
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
            Some(d) if !d.is_none() => parse_device(d, device_index)?,
            // None (the default) is "host"; device_index alone never selected CUDA.
            _ => Device::Host,
        };
        // The one entrance: the store is what `store` names (a folder, a file or a device), of the default size
        // unless store_capacity says (PoolSpec::default_store_bytes).
        let mut spec = PoolSpec::new(capacity_bytes)
            .stores(locations)
            .device(device)
            .checksums(verify_checksums)
            .force(force_store)
            .scrub(scrub_store)
            .io_point(if calibrate {
                IoPointChoice::Calibrate
            } else {
                IoPointChoice::Default
            });
        if let Some(bytes) = store_bytes {
            spec = spec.store_capacity(bytes);
        }
        if let Some(bytes) = tier_bytes.filter(|&b| b > 0) {
            spec = spec.host_tier(HostTierConfig {
                capacity_bytes: bytes,
                pinned: pinned_host_tier,
            });
        }
        py.detach(move || {
            let (inner, io) = spec.open_reporting().py()?;
            let io_point = IoPointInfo {
                source: io.source,
                read: (io.read.block_bytes, io.read.queue_depth),
                write: (io.write.block_bytes, io.write.queue_depth),
                seconds: io.calibration_s,
            };
            let store_paths: Vec<PathBuf> = inner
                .store()
                .member_paths()
                .into_iter()
                .map(std::path::Path::to_path_buf)
                .collect();
            Ok(Pool {
                inner,
                device,
                store_paths,
                io_point,
                closed: Arc::new(AtomicBool::new(false)),
                spaces: Mutex::new(Vec::new()),
            })
        })
    }

    /// A new address space: a set of buffers paged together (one per model, tenant or CUDA context).
    ///
    /// Raises:
    ///     oversub.errors.PoolClosedError: the pool was closed.
    fn address_space(&self) -> PyResult<AddressSpace> {
        check_open(&self.closed)?;
        let core = Arc::new(SpaceCore {
            space: self.inner.address_space(),
            device: self.device,
            live: Mutex::new(HashMap::new()),
            closed: Arc::clone(&self.closed),
        });
        let mut spaces = lock(&self.spaces);
        spaces.retain(|s| s.strong_count() > 0);
        spaces.push(Arc::downgrade(&core));
        Ok(AddressSpace { core })
    }

    /// Frees every buffer of the pool's address spaces and closes the pool: later allocations, paging and copies
    /// through it raise PoolClosedError (``stats()`` and the properties still answer). Operations in flight end
    /// in the background and give their memory back. Closing again does nothing. ``with Pool(...) as pool:``
    /// closes at the end of the block. The store is closed too (scrubbed, and its lock given up, so another pool
    /// can open it at once) when nothing is left on it; otherwise (operations still in flight) once the pool's
    /// Python objects are gone. In a forked child of the process that made the pool, closing (like dropping the pool) only marks
    /// it closed: the store, its lock and the buffers' stored copies are the parent's, and stay as they are.
    ///
    /// Raises:
    ///     oversub.errors.ViewError: a buffer has live views (NumPy arrays, DLPack tensors); nothing is freed and
    ///         the pool stays open.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let spaces: Vec<Arc<SpaceCore>> = lock(&self.spaces)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let buffers: Vec<Arc<BufCore>> = spaces.iter().flat_map(|s| s.live_buffers()).collect();
        for b in &buffers {
            b.check_no_views(&lock(&b.views), "closing the pool")?;
        }
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut first: Option<PyErr> = None;
        for b in &buffers {
            if let Err(e) = b.free() {
                first.get_or_insert(e);
            }
        }
        lock(&self.spaces).clear();
        if first.is_none() {
            // Gives the store up now if every buffer's slot went back (a scrub may take a while: no GIL).
            let store = Arc::clone(self.inner.store());
            py.detach(move || store.close_if_idle());
        }
        first.map_or(Ok(()), Err)
    }

    /// Whether ``close()`` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
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

    /// The CUDA device ordinal, or None for a host pool.
    #[getter]
    fn device_index(&self) -> Option<i32> {
        match self.device {
            Device::Host => None,
            Device::Cuda { ordinal } => Some(ordinal),
        }
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

    /// Occupancy as an ``oversub.records.PoolStats``: capacity_bytes, used_bytes, store_capacity_bytes,
    /// store_free_bytes and, with a host tier, host_tier_used_bytes and host_tier_capacity_bytes (None without
    /// one). It reads as attributes and, like the dict it replaces, as a mapping (``stats()["used_bytes"]``).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("capacity_bytes", s.capacity_bytes)?;
        d.set_item("used_bytes", s.used_bytes)?;
        d.set_item("store_capacity_bytes", s.store_capacity_bytes)?;
        d.set_item("store_free_bytes", s.store_free_bytes)?;
        // The core reports the tier's (free, total) bytes.
        if let Some((free, cap)) = self.inner.host_tier_bytes() {
            d.set_item("host_tier_used_bytes", cap - free)?;
            d.set_item("host_tier_capacity_bytes", cap)?;
        }
        record_class(py, "PoolStats")?.call((), Some(&d))
    }

    fn __repr__(&self) -> String {
        let s = self.inner.stats();
        format!(
            "oversub.Pool(capacity={}, used={}, device={:?}, store={:?}{})",
            oversub_report::format_bytes(s.capacity_bytes),
            oversub_report::format_bytes(s.used_bytes),
            self.device.to_string(),
            self.store_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(","),
            if self.closed.load(Ordering::Acquire) {
                ", closed"
            } else {
                ""
            }
        )
    }
}

const POOL_CLOSED: &str =
    "the pool is closed (Pool.close() or the end of its with block); make a new Pool";

/// PoolClosedError once the pool was closed.
fn check_open(closed: &AtomicBool) -> PyResult<()> {
    if closed.load(Ordering::Acquire) {
        return Err(Raised::new("PoolClosedError", POOL_CLOSED).into());
    }
    Ok(())
}

/// The Rust side of an address space, shared by its buffers.
#[derive(Debug)]
pub(crate) struct SpaceCore {
    pub(crate) space: oversub_core::AddressSpace,
    pub(crate) device: Device,
    /// Buffers alive on the Python side, for `page_out_all` (which must respect their views) and `Pool.close`.
    live: Mutex<HashMap<oversub_core::Buffer, Weak<BufCore>>>,
    /// The pool's `closed` flag.
    closed: Arc<AtomicBool>,
}

impl SpaceCore {
    pub(crate) fn check_open(&self) -> PyResult<()> {
        check_open(&self.closed)
    }

    fn live_buffers(&self) -> Vec<Arc<BufCore>> {
        let mut v: Vec<Arc<BufCore>> = lock(&self.live)
            .values()
            .filter_map(Weak::upgrade)
            .filter(|b| !b.freed.load(Ordering::Acquire))
            .collect();
        v.sort_by_key(|b| b.handle);
        v
    }
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
        self.core.check_open()?;
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
        self.core.check_open()?;
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
        self.core.check_open()?;
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
        self.core.check_open()?;
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
        self.core.live_buffers()
    }
}

/// How long a wait runs with the GIL released before it takes the GIL back to look for signals (Ctrl-C).
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Finishes tickets whose waiter went away (a Handle dropped unfinished, a wait interrupted by Ctrl-C) on a thread
/// of its own, so that no drop or interrupt blocks with the GIL held. Each ticket travels with its buffer.
pub(crate) fn reap(ticket: Ticket, buffer: Arc<BufCore>) {
    type Orphan = (Ticket, Arc<BufCore>);
    static REAPER: std::sync::OnceLock<Option<Mutex<std::sync::mpsc::Sender<Orphan>>>> =
        std::sync::OnceLock::new();
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Orphan>();
        std::thread::Builder::new()
            .name("oversub-reaper".into())
            .spawn(move || {
                for (ticket, buffer) in rx {
                    report_reaped(ticket.finish(), &buffer);
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
        report_reaped(ticket.finish(), &buffer);
    }
}

/// Logs how an operation whose waiter left ended, unless it is a forked child's copy (which the parent finishes).
fn report_reaped(finished: Result<(), PagerError>, buffer: &BufCore) {
    match finished {
        Ok(()) | Err(PagerError::Forked { .. }) => {}
        Err(e) => {
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
        if self.space.closed.load(Ordering::Acquire) {
            return Err(Raised::new("PoolClosedError", POOL_CLOSED));
        }
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
        self.space.check_open()?;
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

    /// Records that the work queued on `stream` so far uses the buffer: a CUDA stream (`torch.cuda.Stream`, or
    /// its handle as an int, as `torch.cuda.current_stream().cuda_stream` gives it; 0 is the default stream).
    /// From then on a page-out or free of the buffer waits only for the last use recorded on each stream, not for
    /// the whole device, so kernels queued later keep running: record every stream that uses the buffer, after its
    /// last use. A page-out consumes the records. On a host pool it only checks the buffer.
    ///
    /// Raises:
    ///     oversub.errors.NotResidentError: the buffer is not resident.
    ///     oversub.errors.AccelError: the driver refused the stream.
    fn record_use(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let handle = match stream.getattr("cuda_stream") {
            Ok(h) => h.extract::<u64>()?,
            Err(_) => stream.extract::<u64>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "stream must be a CUDA stream (torch.cuda.Stream) or its handle as an int, not {}",
                    stream.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ))
            })?,
        };
        if self.core.space.closed.load(Ordering::Acquire) {
            return Err(Raised::new("PoolClosedError", POOL_CLOSED).into());
        }
        let core = &self.core;
        py.detach(|| core.space.space.record_use(core.handle, handle))
            .map_err(|e| PyErr::from(e.to_raised()))
    }

    /// Starts a page-out and returns at once with a Handle (`done()`, `wait()`, `await`). The write runs in the
    /// background; the buffer is paged out when the handle is waited for (or found done).
    fn page_out_async(slf: &Bound<'_, Self>) -> PyResult<crate::handle::Handle> {
        let ticket = slf.get().core.start_out()?;
        Ok(crate::handle::Handle::new(slf, ticket))
    }

    /// Starts a page-in and returns at once with a Handle; the read runs while Python goes on.
    fn page_in_async(slf: &Bound<'_, Self>) -> PyResult<crate::handle::Handle> {
        let ticket = slf.get().core.start_in()?;
        Ok(crate::handle::Handle::new(slf, ticket))
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
        self.core.space.check_open()?;
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
        self.core.space.check_open()?;
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

    /// Fills ``b`` (any writable, C-contiguous buffer-protocol object: bytearray, memoryview, NumPy array,
    /// mmap) with the buffer's bytes from ``offset``, as ``io.RawIOBase.readinto`` does, without an intermediate
    /// copy; returns the number of bytes copied: ``min(len(b) in bytes, nbytes - offset)``, 0 at the end. The
    /// buffer must be resident. The copy runs without the GIL.
    ///
    /// Raises:
    ///     TypeError: ``b`` is not writable or not C-contiguous.
    ///     oversub.errors.OutOfBoundsError: ``offset`` lies past the end of the buffer.
    ///     oversub.errors.NotResidentError: the buffer is paged out.
    #[pyo3(signature = (b, offset=0))]
    fn readinto(&self, py: Python<'_>, b: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        self.core.space.check_open()?;
        let size = self.core.nbytes;
        if offset > size {
            return Err(PagerError::OutOfBounds {
                buffer: self.core.handle,
                offset,
                len: 0,
                size,
            }
            .to_raised()
            .into());
        }
        // As bytes whatever the element type (what io's readinto does); cast() also refuses non-contiguous memory.
        let bytes_view = pyo3::types::PyMemoryView::from(b)
            .and_then(|m| m.call_method1("cast", ("B",)))
            .map_err(|e| {
                PyTypeError::new_err(format!(
                    "readinto needs a writable C-contiguous buffer (bytearray, memoryview, NumPy array): {e}"
                ))
            })?;
        let view = pyo3::buffer::PyBuffer::<u8>::get(&bytes_view)?;
        if view.readonly() {
            return Err(PyTypeError::new_err(
                "readinto needs a writable buffer, not a read-only one",
            ));
        }
        let available = usize::try_from(size - offset).unwrap_or(usize::MAX);
        let len = view.len_bytes().min(available);
        if len == 0 {
            return Ok(0);
        }
        let dst = SendPtr(view.buf_ptr().cast::<u8>());
        let core = Arc::clone(&self.core);
        py.detach(move || {
            let dst = dst;
            // SAFETY: `view` holds the export of `len_bytes() >= len` writable, contiguous bytes, and keeps them
            // alive and unmoved (a bytearray cannot resize while exported) until it is released after this
            // closure. Python code on other threads may touch the same memory meanwhile, as with any readinto
            // that releases the GIL; that is the caller's race, not undefined behaviour of ours on Rust data.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.0, len) };
            core.space.space.read(core.handle, offset, out)
        })
        .py()?;
        drop(view);
        Ok(len)
    }

    /// Size in bytes, as asked for at alloc.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.core.nbytes
    }

    /// An ``oversub.records.BufferState``: RESIDENT, PAGING_OUT, PAGED_OUT or PAGING_IN, a str enum equal to
    /// "resident", "paging_out", "paged_out" or "paging_in".
    #[getter]
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        state_value(py, self.core.info().py()?.state)
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

    /// A snapshot as an ``oversub.records.BufferInfo``: nbytes, reserved_bytes, address, state, read_only,
    /// unpageable, stored, in_host_tier, views; attributes, and a mapping like the dict it replaces
    /// (``info()["reserved_bytes"]``).
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let i = self.core.info().py()?;
        let d = PyDict::new(py);
        d.set_item("nbytes", i.size_bytes)?;
        d.set_item("reserved_bytes", i.reserved_bytes)?;
        d.set_item("address", i.addr.0)?;
        d.set_item("state", state_value(py, i.state)?)?;
        d.set_item("read_only", i.flags.read_only)?;
        d.set_item("unpageable", i.flags.unpageable)?;
        d.set_item("stored", i.stored)?;
        d.set_item("in_host_tier", i.in_host_tier)?;
        d.set_item("views", *lock(&self.core.views))?;
        record_class(py, "BufferInfo")?.call((), Some(&d))
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
