//! Zero-copy views of resident buffers: the buffer protocol (NumPy, memoryview), DLPack and
//! `__cuda_array_interface__`.
//!
//! A view points at the buffer's memory, which a page-out gives back. So every view the buffer can count (a
//! buffer-protocol export, a DLPack capsule or the tensor that consumed it) holds a count on the buffer, and a
//! page-out or free is refused while the count is above zero. `__cuda_array_interface__` has no release hook, so
//! it cannot be counted; the docs say so.

use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

use oversub_core::{BufferState, PagerError};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyImportError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

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
    let len = isize::try_from(core.nbytes)
        .map_err(|_| PyBufferError::new_err("buffer too large for a view"))?;
    // SAFETY: `view` is non-null and the interpreter's to fill (caller's contract); `ptr` is valid for `len`
    // bytes while the buffer is resident, and the export counted below keeps it resident until
    // `release_buffer`. `shape` and `strides` point into the view itself, as CPython's own bytes objects do;
    // the format string is static.
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
        (*view).internal = std::ptr::null_mut();
        (*view).obj = slf.into_any().into_ptr();
    }
    *views += 1;
    Ok(())
}

/// The end of a buffer-protocol export.
pub(crate) fn release_buffer(core: &BufCore) {
    let mut views = lock(&core.views);
    *views = views.saturating_sub(1);
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

// --- DLPack: the versioned ABI (1.0, with a read-only flag) for consumers that ask for it, else the legacy one --

const DL_CPU: i32 = 1;
const DL_CUDA: i32 = 2;
const DL_UINT: u8 = 1;
const CAPSULE_NAME: &CStr = c"dltensor";
const VERSIONED_CAPSULE_NAME: &CStr = c"dltensor_versioned";
const DL_FLAG_READ_ONLY: u64 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
#[derive(Debug)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
#[derive(Debug)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DlPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
#[derive(Debug)]
struct DlManagedTensorVersioned {
    version: DlPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

/// The two managed-tensor layouts (legacy and versioned), for the code they share.
trait ManagedTensor: Sized {
    /// The capsule's name before a consumer takes it.
    const CAPSULE_NAME: &'static CStr;
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
    fn dl_tensor(&mut self) -> &mut DlTensor;
}

impl ManagedTensor for DlManagedTensor {
    const CAPSULE_NAME: &'static CStr = CAPSULE_NAME;
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
    fn dl_tensor(&mut self) -> &mut DlTensor {
        &mut self.dl_tensor
    }
}

impl ManagedTensor for DlManagedTensorVersioned {
    const CAPSULE_NAME: &'static CStr = VERSIONED_CAPSULE_NAME;
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
    fn dl_tensor(&mut self) -> &mut DlTensor {
        &mut self.dl_tensor
    }
}

/// The managed tensor with what it points to; `tensor` comes first so a pointer to it is a pointer to the whole.
#[repr(C)]
#[derive(Debug)]
struct Exported<T> {
    tensor: T,
    shape: [i64; 1],
    core: Arc<BufCore>,
}

/// DLPack's deleter: ends the view. Called by the consumer, or by the capsule if nobody consumed it.
unsafe extern "C" fn dl_deleter<T>(tensor: *mut T) {
    if tensor.is_null() {
        return;
    }
    // SAFETY: every managed tensor we hand out is the first field of a leaked Box<Exported<T>> (`into_capsule`),
    // and DLPack calls the deleter once.
    let exported = unsafe { Box::from_raw(tensor.cast::<Exported<T>>()) };
    release_buffer(&exported.core);
}

/// The capsule's destructor: frees an unconsumed tensor (a consumer renames the capsule "used_…").
unsafe extern "C" fn capsule_destructor<T: ManagedTensor>(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with the capsule being destroyed; IsValid checks the name without raising.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, T::CAPSULE_NAME.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, T::CAPSULE_NAME.as_ptr()).cast::<T>();
            if !p.is_null() {
                if let Some(d) = (*p).deleter() {
                    d(p);
                }
            }
        }
    }
}

/// Boxes `tensor` with its shape and a hold on the buffer and wraps it in a new capsule; null (with the Python
/// error set) if the capsule could not be made, in which case nothing is leaked.
fn into_capsule<T: ManagedTensor>(tensor: T, len: i64, core: Arc<BufCore>) -> *mut ffi::PyObject {
    let mut exported = Box::new(Exported {
        tensor,
        shape: [len],
        core,
    });
    exported.tensor.dl_tensor().shape = exported.shape.as_mut_ptr();
    let raw = Box::into_raw(exported);
    // SAFETY: `raw` is a valid leaked box whose first field is the managed tensor; the capsule's destructor or
    // the consumer frees it exactly once through `dl_deleter::<T>`.
    let capsule = unsafe {
        ffi::PyCapsule_New(
            raw.cast::<c_void>(),
            T::CAPSULE_NAME.as_ptr(),
            Some(capsule_destructor::<T>),
        )
    };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so nothing else owns `raw`.
        drop(unsafe { Box::from_raw(raw) });
    }
    capsule
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
/// read-only flag; legacy consumers such as NumPy make their arrays read-only).
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
    let tensor = DlTensor {
        data,
        device: DlDevice {
            device_type: device.0,
            device_id: device.1,
        },
        ndim: 1,
        dtype: DlDataType {
            code: DL_UINT,
            bits: 8,
            lanes: 1,
        },
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let capsule = if versioned {
        let tensor = DlManagedTensorVersioned {
            version: DlPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(dl_deleter::<DlManagedTensorVersioned>),
            // A stored read-only buffer's bytes must not change (later page-outs do not write them again).
            flags: if core.read_only && info.stored {
                DL_FLAG_READ_ONLY
            } else {
                0
            },
            dl_tensor: tensor,
        };
        into_capsule(tensor, len, Arc::clone(&core))
    } else {
        let tensor = DlManagedTensor {
            dl_tensor: tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(dl_deleter::<DlManagedTensor>),
        };
        into_capsule(tensor, len, Arc::clone(&core))
    };
    if capsule.is_null() {
        return Err(PyErr::fetch(py));
    }
    *views += 1;
    // SAFETY: `capsule` is a new, non-null reference returned by PyCapsule_New.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}
