//! DLPack export of one-dimensional byte tensors, shared by pager buffers (`views.rs`) and slot views
//! (`slots.rs`): the ABI's structs (the legacy layout, and the versioned 1.0 one with a read-only flag for
//! consumers that ask for it) and the capsule protocol (the consumer renames the capsule "used_…" and calls the
//! deleter once; an unconsumed capsule's destructor calls it instead).

use std::ffi::{c_void, CStr};

use pyo3::ffi;
use pyo3::prelude::*;

/// kDLCPU.
pub(crate) const DL_CPU: i32 = 1;
/// kDLCUDA.
pub(crate) const DL_CUDA: i32 = 2;
const DL_UINT: u8 = 1;
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

/// The two managed-tensor layouts, for the code they share.
trait ManagedTensor: Sized {
    /// The capsule's name before a consumer takes it.
    const CAPSULE_NAME: &'static CStr;
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
    fn dl_tensor(&mut self) -> &mut DlTensor;
}

impl ManagedTensor for DlManagedTensor {
    const CAPSULE_NAME: &'static CStr = c"dltensor";
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
    fn dl_tensor(&mut self) -> &mut DlTensor {
        &mut self.dl_tensor
    }
}

impl ManagedTensor for DlManagedTensorVersioned {
    const CAPSULE_NAME: &'static CStr = c"dltensor_versioned";
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
    fn dl_tensor(&mut self) -> &mut DlTensor {
        &mut self.dl_tensor
    }
}

/// The managed tensor with its shape and what keeps its memory valid; `tensor` first, so a pointer to it points
/// to the whole.
#[repr(C)]
struct Exported<T, H> {
    tensor: T,
    shape: [i64; 1],
    /// Dropped with the tensor: ends the view (a buffer's view count, a slot's lease).
    _hold: H,
}

/// DLPack's deleter: frees the tensor and drops its hold. Called by the consumer, or by the capsule if nobody
/// consumed it; needs no GIL unless `H`'s drop does.
unsafe extern "C" fn dl_deleter<T, H>(tensor: *mut T) {
    if tensor.is_null() {
        return;
    }
    // SAFETY: every managed tensor handed out is the first field of a leaked Box<Exported<T, H>> (`into_capsule`),
    // and DLPack calls the deleter once.
    drop(unsafe { Box::from_raw(tensor.cast::<Exported<T, H>>()) });
}

/// The capsule's destructor: frees a tensor nobody consumed (a consumer renames the capsule "used_…").
unsafe extern "C" fn capsule_destructor<T: ManagedTensor>(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with the capsule being destroyed; IsValid checks the name without raising, and
    // an unconsumed capsule's pointer is our managed tensor.
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

/// Boxes `tensor` with its shape and hold into a new capsule; null (Python error set) if that failed, in which
/// case the box and its hold are dropped.
fn into_capsule<T: ManagedTensor, H>(tensor: T, len: i64, hold: H) -> *mut ffi::PyObject {
    let mut exported = Box::new(Exported {
        tensor,
        shape: [len],
        _hold: hold,
    });
    exported.tensor.dl_tensor().shape = exported.shape.as_mut_ptr();
    let raw = Box::into_raw(exported);
    // SAFETY: `raw` is a valid leaked box whose first field is the managed tensor; the capsule's destructor or the
    // consumer frees it exactly once through `dl_deleter::<T, H>`.
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

/// `BufferError` for a read-only export to a legacy consumer: a legacy tensor is writable to every consumer, and a
/// write to a read-only buffer is lost at its next page-out (its stored copy is what comes back). Called before
/// the export takes its hold on the buffer.
pub(crate) fn refuse_legacy_read_only(read_only: bool, versioned: bool) -> PyResult<()> {
    if read_only && !versioned {
        return Err(pyo3::exceptions::PyBufferError::new_err(
            "this buffer is read-only, and legacy DLPack (a consumer that passes no max_version) cannot mark a \
             tensor read-only: a write through it would be lost at the next page-out. Use a DLPack 1.0 consumer \
             (numpy.from_dlpack in NumPy >= 2.1, torch.from_dlpack), memoryview(buf) or buf.numpy(), which are \
             read-only",
        ));
    }
    Ok(())
}

/// Whether a consumer's `__dlpack__(max_version=...)` accepts the versioned (1.0) layout.
pub(crate) fn wants_versioned(max_version: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    Ok(match max_version {
        Some(v) if !v.is_none() => v.extract::<(u32, u32)>()?.0 >= 1,
        _ => false,
    })
}

/// A capsule holding a 1-D uint8 tensor of `len` bytes at `data` on DLPack `device`; `hold` lives until the
/// consumer deletes the tensor (or the capsule goes unconsumed). `versioned` for consumers that accept DLPack 1.0,
/// which carries `read_only` (a read-only export to a legacy consumer is refused before this, by
/// [`refuse_legacy_read_only`]). PyTorch takes the 1.0 layout but has no read-only tensors: it ignores the flag,
/// so a write through its tensor is the caller's to avoid (docs/safety.md).
#[allow(clippy::too_many_arguments)]
pub(crate) fn byte_capsule<'py, H>(
    py: Python<'py>,
    data: *mut c_void,
    device: (i32, i32),
    len: i64,
    read_only: bool,
    versioned: bool,
    hold: H,
) -> PyResult<Bound<'py, PyAny>> {
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
            deleter: Some(dl_deleter::<DlManagedTensorVersioned, H>),
            flags: if read_only { DL_FLAG_READ_ONLY } else { 0 },
            dl_tensor: tensor,
        };
        into_capsule(tensor, len, hold)
    } else {
        let tensor = DlManagedTensor {
            dl_tensor: tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(dl_deleter::<DlManagedTensor, H>),
        };
        into_capsule(tensor, len, hold)
    };
    if capsule.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `capsule` is a new, non-null reference returned by PyCapsule_New.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}
