//! Zero-copy views of resident buffers: the buffer protocol (NumPy, memoryview), DLPack and
//! `__cuda_array_interface__`.
//!
//! A view points at the buffer's memory, which a page-out gives back. So every view the buffer can count (a
//! buffer-protocol export, a DLPack capsule or the tensor that consumed it) holds a count on the buffer, and a
//! page-out or free is refused while the count is above zero. `__cuda_array_interface__` has no release hook, so
//! it cannot be counted; the docs say so.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use oversub_core::{BufferState, PagerError};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyImportError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::dlpack::{byte_capsule, DL_CPU, DL_CUDA};
use crate::errors::{OrRaise, Raised, ToRaised};
use crate::pager::{lock, BufCore, Buffer, Device};

/// Fills `view` for a buffer-protocol consumer and counts the export.
///
/// # Safety
/// `view` must be null or point to a `Py_buffer` the interpreter passed to `bf_getbuffer`.
pub(crate) unsafe fn get_buffer(
    slf: Bound<'_, Buffer>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("null Py_buffer"));
    }
    let core = Arc::clone(&slf.get().core);
    if core.space.device != Device::Host {
        return Err(Raised::new(
            "ViewError",
            format!(
                "buffer {} is in CUDA device memory, which the host cannot address: use \
                 torch.as_tensor(buf, device=\"cuda\") (__cuda_array_interface__) or DLPack instead",
                core.handle
            ),
        )
        .into());
    }
    let mut views = lock(&core.views);
    let info = core.info().py()?;
    // Refused unless resident, with the pager's own NotResident message.
    let ptr = core.space.space.host_ptr(core.handle).py()?;
    // A stored read-only buffer's bytes must not change: later page-outs do not write them again.
    let readonly = core.read_only && info.stored;
    if readonly && (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
        return Err(PagerError::ReadOnly(core.handle).to_raised().into());
    }
    // SAFETY: `view` is non-null and the interpreter's to fill (caller's contract); `ptr` is valid for `nbytes`
    // bytes while the buffer is resident, and the export counted below keeps it resident until `release_buffer`.
    unsafe {
        fill_byte_view(
            view,
            slf.into_any(),
            ptr,
            core.nbytes,
            readonly,
            flags,
            std::ptr::null_mut(),
        )?
    };
    *views += 1;
    Ok(())
}

/// Fills `view` as a 1-D unsigned-byte export of `len` bytes at `ptr`, owned by `obj`, with `internal` for the
/// exporter's release hook.
///
/// # Safety
/// `view` must be non-null and point to the `Py_buffer` the interpreter passed to `bf_getbuffer`, and `ptr` must
/// stay valid for `len` bytes until the interpreter releases the export.
pub(crate) unsafe fn fill_byte_view(
    view: *mut ffi::Py_buffer,
    obj: Bound<'_, PyAny>,
    ptr: *mut u8,
    len: u64,
    readonly: bool,
    flags: c_int,
    internal: *mut c_void,
) -> PyResult<()> {
    let len =
        isize::try_from(len).map_err(|_| PyBufferError::new_err("buffer too large for a view"))?;
    // SAFETY: `view` is the interpreter's to fill (caller's contract). `shape` and `strides` point into the view
    // itself, as CPython's own bytes objects do; the format string is static.
    unsafe {
        (*view).buf = ptr.cast::<c_void>();
        (*view).len = len;
        (*view).readonly = c_int::from(readonly);
        (*view).itemsize = 1;
        (*view).format = if (flags & ffi::PyBUF_FORMAT) == ffi::PyBUF_FORMAT {
            c"B".as_ptr().cast_mut()
        } else {
            std::ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if (flags & ffi::PyBUF_ND) == ffi::PyBUF_ND {
            &mut (*view).len
        } else {
            std::ptr::null_mut()
        };
        (*view).strides = if (flags & ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES {
            &mut (*view).itemsize
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = internal;
        (*view).obj = obj.into_ptr();
    }
    Ok(())
}

/// The end of a buffer-protocol export.
pub(crate) fn release_buffer(core: &BufCore) {
    let mut views = lock(&core.views);
    *views = views.saturating_sub(1);
}

/// Refuses a shape NumPy would read loosely: a dimension below -1 (which some NumPy versions take as -1, so that
/// `shape=(-2,)` viewed the whole buffer), or more than one -1.
pub(crate) fn check_shape(dims: &[i64]) -> Result<(), String> {
    if let Some(d) = dims.iter().find(|&&d| d < -1) {
        return Err(format!(
            "shape {dims:?}: dimension {d} is negative; give sizes >= 0, and at most one -1 for the rest"
        ));
    }
    if dims.iter().filter(|&&d| d == -1).count() > 1 {
        return Err(format!(
            "shape {dims:?}: more than one -1; at most one dimension can be left for NumPy to fill in"
        ));
    }
    Ok(())
}

/// `Buffer.numpy(dtype, shape)`: a NumPy array over the buffer's memory (no copy).
pub(crate) fn numpy<'py>(
    slf: &Bound<'py, Buffer>,
    dtype: Option<&Bound<'py, PyAny>>,
    shape: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let np = py
        .import("numpy")
        .map_err(|_| PyImportError::new_err("Buffer.numpy() needs NumPy: pip install numpy"))?;
    let dtype = match dtype {
        Some(d) => np.getattr("dtype")?.call1((d,))?,
        None => np.getattr("dtype")?.call1(("uint8",))?,
    };
    let itemsize: u64 = dtype.getattr("itemsize")?.extract()?;
    let core = &slf.get().core;
    let whole = core.nbytes / itemsize.max(1);
    let shape: Option<Vec<i64>> = match shape {
        None => None,
        Some(s) if s.is_instance_of::<pyo3::types::PyInt>() => Some(vec![s.extract()?]),
        Some(s) => Some(s.extract()?),
    };
    if let Some(dims) = &shape {
        check_shape(dims).map_err(|why| Raised::new("ViewError", why))?;
    }
    // With a shape of known size, view just that many elements (buffers are often larger than one tensor).
    let count: Option<u64> = shape.as_ref().and_then(|dims| {
        dims.iter().try_fold(1u64, |acc, &d| {
            u64::try_from(d).ok().map(|d| acc.saturating_mul(d))
        })
    });
    let count = match count {
        Some(c) if c > whole => {
            return Err(Raised::new(
                "ViewError",
                format!(
                    "shape {:?} of {dtype} needs {} bytes; buffer {} has {}",
                    shape.unwrap_or_default(),
                    c.saturating_mul(itemsize),
                    core.handle,
                    core.nbytes
                ),
            )
            .into())
        }
        Some(c) => c,
        None => {
            if core.nbytes % itemsize.max(1) != 0 {
                return Err(Raised::new(
                    "ViewError",
                    format!(
                        "buffer {} of {} bytes is not a whole number of {dtype} ({itemsize} bytes); give a shape",
                        core.handle, core.nbytes
                    ),
                )
                .into());
            }
            whole
        }
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", &dtype)?;
    kwargs.set_item("count", count)?;
    let arr = np.call_method("frombuffer", (slf,), Some(&kwargs))?;
    match shape {
        Some(dims) => arr.call_method1("reshape", (PyTuple::new(py, dims)?,)),
        None => Ok(arr),
    }
}

/// `__cuda_array_interface__` (version 3) of a resident CUDA buffer, as bytes (`|u1`).
pub(crate) fn cuda_array_interface<'py>(slf: &Bound<'py, Buffer>) -> PyResult<Bound<'py, PyDict>> {
    let py = slf.py();
    let core = &slf.get().core;
    if core.space.device == Device::Host {
        return Err(PyAttributeError::new_err(
            "host buffers have no __cuda_array_interface__; use buf.numpy() or the buffer protocol",
        ));
    }
    let info = core.info().py()?;
    if info.state != BufferState::Resident {
        return Err(PagerError::NotResident {
            buffer: core.handle,
            state: info.state,
        }
        .to_raised()
        .into());
    }
    let d = PyDict::new(py);
    d.set_item("shape", (core.nbytes,))?;
    d.set_item("typestr", "|u1")?;
    d.set_item("data", (info.addr.0, core.read_only && info.stored))?;
    d.set_item("version", 3)?;
    d.set_item("strides", py.None())?;
    // The page-in's copies were waited for when it finished: no stream needs to synchronise.
    d.set_item("stream", py.None())?;
    Ok(d)
}

/// A DLPack export's hold on its buffer: counted as a view until the consumer's tensor is deleted.
struct ViewHold(Arc<BufCore>);

impl Drop for ViewHold {
    fn drop(&mut self) {
        release_buffer(&self.0);
    }
}

/// `__dlpack_device__`: (kDLCPU, 0) or (kDLCUDA, ordinal).
pub(crate) fn dlpack_device(buf: &Buffer) -> (i32, i32) {
    match buf.core.space.device {
        Device::Host => (DL_CPU, 0),
        Device::Cuda { ordinal } => (DL_CUDA, ordinal),
    }
}

/// `__dlpack__`: a capsule holding a 1-D uint8 tensor over the resident buffer, counted as a view until the
/// consumer's tensor is deleted. `versioned` when the consumer accepts DLPack 1.0 (it can then carry the
/// read-only flag; a read-only export to a legacy consumer is refused).
pub(crate) fn dlpack<'py>(
    slf: &Bound<'py, Buffer>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
    versioned: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let buf = slf.get();
    let core = Arc::clone(&buf.core);
    let device = dlpack_device(buf);
    if copy == Some(true) {
        return Err(PyBufferError::new_err(
            "oversub buffers export views only (copy=True is not supported); copy the consumer's tensor",
        ));
    }
    if let Some(d) = dl_device {
        if d != device {
            return Err(PyBufferError::new_err(format!(
                "buffer {} is on DLPack device {device:?}, not {d:?}",
                core.handle
            )));
        }
    }
    let mut views = lock(&core.views);
    let info = core.info().py()?;
    if info.state != BufferState::Resident {
        return Err(PagerError::NotResident {
            buffer: core.handle,
            state: info.state,
        }
        .to_raised()
        .into());
    }
    let data = match core.space.device {
        Device::Host => core
            .space
            .space
            .host_ptr(core.handle)
            .py()?
            .cast::<c_void>(),
        Device::Cuda { .. } => info.addr.0 as usize as *mut c_void,
    };
    let len = i64::try_from(core.nbytes)
        .map_err(|_| PyBufferError::new_err("buffer too large for DLPack"))?;
    // A stored read-only buffer's bytes must not change (later page-outs do not write them again).
    let read_only = core.read_only && info.stored;
    crate::dlpack::refuse_legacy_read_only(read_only, versioned)?;
    let capsule = byte_capsule(
        py,
        data,
        device,
        len,
        read_only,
        versioned,
        ViewHold(Arc::clone(&core)),
    )?;
    *views += 1;
    Ok(capsule)
}
