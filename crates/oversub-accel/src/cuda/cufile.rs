//! GPUDirect Storage (cuFile), loaded at run time when present: reads and writes between a file and device memory
//! by DMA, without a staging buffer in host memory.
//!
//! `libcufile.so.0` is opened with `dlopen` and its functions found with `dlsym`, so nothing here needs CUDA to
//! build; where the library is missing, [`CuFile::load`] says so ([`AccelError::Unsupported`]) and the caller uses
//! the staging path (storage → pinned host buffer → `cuMemcpyHtoDAsync`). A file system without GDS support fails
//! at [`CuFile::register`], again as `Unsupported`, for the same fall-back.
//!
//! The types and signatures are written from NVIDIA's `cufile.h` (CUDA 12): `CUfileError_t` is two enums
//! (`CUfileOpError`, `CUresult`), `CUfileDescr_t` a handle type, a union of fd and pointer, and a file-system
//! operations pointer. This path has not run on a GPU in this project yet: treat it as untested until a test on a
//! GDS-capable machine has passed.

use std::ffi::{c_char, c_int, c_void, CString};
use std::os::fd::RawFd;
use std::sync::Arc;

use super::DeviceAddr;
use crate::AccelError;

/// The library's soname, then the development name.
const LIBRARY_NAMES: [&str; 2] = ["libcufile.so.0", "libcufile.so"];

/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`: the descriptor holds a POSIX file descriptor.
const CU_FILE_HANDLE_TYPE_OPAQUE_FD: c_int = 1;

/// `CUfileError_t`: the cuFile error (`CUfileOpError`, 0 for success) and the CUDA driver's (`CUresult`) when the
/// cuFile error is `CU_FILE_CUDA_DRIVER_ERROR`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CUfileError {
    err: c_int,
    cu_err: c_int,
}

/// The union in `CUfileDescr_t`.
#[repr(C)]
#[derive(Clone, Copy)]
union CUfileDescrHandle {
    fd: c_int,
    /// Never set here; it gives the union its C size and alignment.
    #[allow(dead_code)]
    handle: *mut c_void,
}

/// `CUfileDescr_t`.
#[repr(C)]
struct CUfileDescr {
    type_: c_int,
    handle: CUfileDescrHandle,
    /// `const CUfileFSOps_t*`: null for an ordinary file descriptor.
    fs_ops: *const c_void,
}

/// `CUfileHandle_t`.
type CUfileHandle = *mut c_void;

type DriverOpenFn = unsafe extern "C" fn() -> CUfileError;
type DriverCloseFn = unsafe extern "C" fn() -> CUfileError;
type HandleRegisterFn = unsafe extern "C" fn(*mut CUfileHandle, *mut CUfileDescr) -> CUfileError;
type HandleDeregisterFn = unsafe extern "C" fn(CUfileHandle);
type ReadFn =
    unsafe extern "C" fn(CUfileHandle, *mut c_void, usize, libc::off_t, libc::off_t) -> isize;
type WriteFn =
    unsafe extern "C" fn(CUfileHandle, *const c_void, usize, libc::off_t, libc::off_t) -> isize;
type BufRegisterFn = unsafe extern "C" fn(*const c_void, usize, c_int) -> CUfileError;
type BufDeregisterFn = unsafe extern "C" fn(*const c_void) -> CUfileError;

/// The functions used, found with `dlsym`.
#[derive(Clone, Copy)]
struct Fns {
    driver_close: DriverCloseFn,
    handle_register: HandleRegisterFn,
    handle_deregister: HandleDeregisterFn,
    read: ReadFn,
    write: WriteFn,
    buf_register: BufRegisterFn,
    buf_deregister: BufDeregisterFn,
}

/// The loaded library with its driver open; closed and unloaded when the last user drops it.
struct Inner {
    lib: *mut c_void,
    name: &'static str,
    fns: Fns,
}

// SAFETY: `lib` is a dlopen handle, valid process-wide from any thread until `drop`; the cuFile API is documented
// as thread-safe (any thread may call it once the driver is open).
unsafe impl Send for Inner {}
// SAFETY: as above; `Inner` is never mutated after `load`.
unsafe impl Sync for Inner {}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("library", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: the driver was opened in `load`; every handle holds an Arc to this, so none is left.
        let e = unsafe { (self.fns.driver_close)() };
        if e.err != 0 {
            tracing::debug!("cuFileDriverClose: {}", describe(e));
        }
        // SAFETY: `lib` came from dlopen in `load` and is closed once; no function of it is called after this.
        unsafe { libc::dlclose(self.lib) };
    }
}

/// GPUDirect Storage: `libcufile` with its driver open. Cheap to clone (the library is shared); the driver is
/// closed and the library unloaded when the last clone and the last [`CuFileHandle`] are gone.
#[derive(Debug, Clone)]
pub struct CuFile {
    inner: Arc<Inner>,
}

/// A file registered with cuFile (`cuFileHandleRegister`); deregistered on drop. Keeps the library loaded.
#[derive(Debug)]
pub struct CuFileHandle {
    handle: CuFileRawHandle,
    fd: RawFd,
    lib: Arc<Inner>,
}

/// The raw handle, apart so that the Send/Sync promise covers only it.
#[derive(Debug)]
struct CuFileRawHandle(CUfileHandle);

// SAFETY: a cuFile handle is an opaque token of the library, usable from any thread; cuFileRead and cuFileWrite
// may run concurrently on one handle (the cuFile API reference says its calls are thread-safe).
unsafe impl Send for CuFileRawHandle {}
// SAFETY: as above; the handle is never mutated, only passed to the library.
unsafe impl Sync for CuFileRawHandle {}

impl CuFileHandle {
    /// The registered file descriptor (still owned by the caller, who must keep it open while this lives).
    pub fn fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for CuFileHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuFileHandleRegister of this library (alive through `lib`) and is
        // deregistered once.
        unsafe { (self.lib.fns.handle_deregister)(self.handle.0) };
    }
}

impl CuFile {
    /// Loads `libcufile.so.0` (or `libcufile.so`) and opens the cuFile driver (`cuFileDriverOpen`).
    ///
    /// Errors: [`AccelError::Unsupported`] when the library is missing, lacks a function, or its driver does not
    /// open (no `nvidia-fs` module and no compatibility mode, no GPU): the caller uses the staging path.
    pub fn load() -> Result<CuFile, AccelError> {
        let Some((lib, name)) = LIBRARY_NAMES
            .iter()
            .find_map(|&n| open_library(n).map(|l| (l, n)))
        else {
            return Err(AccelError::Unsupported(
                "cuFile (GPUDirect Storage) not found: libcufile.so.0 could not be loaded; using the staging path"
                    .into(),
            ));
        };
        match Self::bind(lib, name) {
            Ok(inner) => Ok(CuFile {
                inner: Arc::new(inner),
            }),
            Err(e) => {
                // SAFETY: `lib` came from dlopen above, nothing of it is used any more, and it is closed once.
                unsafe { libc::dlclose(lib) };
                Err(e)
            }
        }
    }

    /// Finds the functions and opens the driver.
    fn bind(lib: *mut c_void, name: &'static str) -> Result<Inner, AccelError> {
        let open = symbol(lib, name, "cuFileDriverOpen")?;
        // The `_v2` close (CUDA 11.8 on) when exported, else the original.
        let close = symbol(lib, name, "cuFileDriverClose_v2")
            .or_else(|_| symbol(lib, name, "cuFileDriverClose"))?;
        let handle_register = symbol(lib, name, "cuFileHandleRegister")?;
        let handle_deregister = symbol(lib, name, "cuFileHandleDeregister")?;
        let read = symbol(lib, name, "cuFileRead")?;
        let write = symbol(lib, name, "cuFileWrite")?;
        let buf_register = symbol(lib, name, "cuFileBufRegister")?;
        let buf_deregister = symbol(lib, name, "cuFileBufDeregister")?;
        use std::mem::transmute;
        // SAFETY: each symbol is the function `cufile.h` declares under that name, whose C signature is the one of
        // the function type it becomes here.
        let (driver_open, fns) = unsafe {
            (
                transmute::<*mut c_void, DriverOpenFn>(open),
                Fns {
                    driver_close: transmute::<*mut c_void, DriverCloseFn>(close),
                    handle_register: transmute::<*mut c_void, HandleRegisterFn>(handle_register),
                    handle_deregister: transmute::<*mut c_void, HandleDeregisterFn>(
                        handle_deregister,
                    ),
                    read: transmute::<*mut c_void, ReadFn>(read),
                    write: transmute::<*mut c_void, WriteFn>(write),
                    buf_register: transmute::<*mut c_void, BufRegisterFn>(buf_register),
                    buf_deregister: transmute::<*mut c_void, BufDeregisterFn>(buf_deregister),
                },
            )
        };
        // SAFETY: a function of the loaded library without arguments.
        let e = unsafe { driver_open() };
        if e.err != 0 {
            return Err(AccelError::Unsupported(format!(
                "cuFile (GPUDirect Storage) is installed ({name}) but its driver did not open: cuFileDriverOpen: {}; \
                 using the staging path",
                describe(e)
            )));
        }
        Ok(Inner { lib, name, fns })
    }

    /// Registers an open file (`cuFileHandleRegister`). The file should be opened with `O_DIRECT`, which GDS needs
    /// outside its compatibility mode; the caller keeps `fd` open while the handle lives.
    ///
    /// Errors: [`AccelError::Unsupported`] naming cuFile's reason when the file cannot be used with GDS (its file
    /// system has no GDS support, no `O_DIRECT`, ...): the caller falls back to staging.
    pub fn register(&self, fd: RawFd) -> Result<CuFileHandle, AccelError> {
        let mut descr = CUfileDescr {
            type_: CU_FILE_HANDLE_TYPE_OPAQUE_FD,
            handle: CUfileDescrHandle { fd },
            fs_ops: std::ptr::null(),
        };
        let mut handle: CUfileHandle = std::ptr::null_mut();
        // SAFETY: valid out-pointer and descriptor for the call's duration; the library is loaded and its driver
        // open (`self.inner`).
        let e = unsafe { (self.inner.fns.handle_register)(&mut handle, &mut descr) };
        if e.err != 0 {
            return Err(AccelError::Unsupported(format!(
                "cuFileHandleRegister of fd {fd}: {}: the file cannot be read with GPUDirect Storage; using the \
                 staging path",
                describe(e)
            )));
        }
        Ok(CuFileHandle {
            handle: CuFileRawHandle(handle),
            fd,
            lib: Arc::clone(&self.inner),
        })
    }

    /// Reads `len` bytes at `file_offset` of the file into device memory at `dev` (`cuFileRead`, repeated on short
    /// transfers). Returns the bytes read: fewer than `len` only at the end of the file.
    ///
    /// # Safety
    /// `[dev, dev + len)` is mapped device memory with access set, and nothing else reads or writes it until this
    /// returns; the caller made the CUDA context of that memory current on this thread.
    pub unsafe fn read(
        &self,
        handle: &CuFileHandle,
        dev: DeviceAddr,
        len: usize,
        file_offset: u64,
    ) -> Result<usize, AccelError> {
        self.check(handle)?;
        let read = self.inner.fns.read;
        transfer("cuFileRead", len, file_offset, |n, off, done| {
            // SAFETY: the caller promises the device range is mapped and ours; `done + n <= len`, so the call stays
            // inside it; the handle is registered with this library.
            unsafe { read(handle.handle.0, dev as usize as *mut c_void, n, off, done) }
        })
    }

    /// Writes `len` bytes of device memory at `dev` to the file at `file_offset` (`cuFileWrite`, repeated on short
    /// transfers). Returns the bytes written (`len` unless the file system stops accepting them).
    ///
    /// # Safety
    /// `[dev, dev + len)` is mapped device memory with access set, and nothing writes it until this returns; the
    /// caller made the CUDA context of that memory current on this thread.
    pub unsafe fn write(
        &self,
        handle: &CuFileHandle,
        dev: DeviceAddr,
        len: usize,
        file_offset: u64,
    ) -> Result<usize, AccelError> {
        self.check(handle)?;
        let write = self.inner.fns.write;
        transfer("cuFileWrite", len, file_offset, |n, off, done| {
            // SAFETY: as in `read`; the device range is only read.
            unsafe { write(handle.handle.0, dev as usize as *const c_void, n, off, done) }
        })
    }

    /// Registers a device buffer with cuFile (`cuFileBufRegister`, flags 0), which lets transfers into it skip
    /// cuFile's internal bounce buffers. Optional: unregistered buffers work too.
    ///
    /// # Safety
    /// `[dev, dev + len)` is mapped device memory that stays mapped until [`CuFile::buf_deregister`]; the caller
    /// made its CUDA context current on this thread.
    pub unsafe fn buf_register(&self, dev: DeviceAddr, len: usize) -> Result<(), AccelError> {
        // SAFETY: the caller's promises above.
        let e = unsafe { (self.inner.fns.buf_register)(dev as usize as *const c_void, len, 0) };
        if e.err != 0 {
            return Err(AccelError::Unsupported(format!(
                "cuFileBufRegister of {len} bytes at {dev:#x}: {}",
                describe(e)
            )));
        }
        Ok(())
    }

    /// Deregisters a buffer of [`CuFile::buf_register`] (`cuFileBufDeregister`).
    ///
    /// # Safety
    /// `dev` was registered with `buf_register` and no transfer into it is running; the caller made its CUDA
    /// context current on this thread.
    pub unsafe fn buf_deregister(&self, dev: DeviceAddr) -> Result<(), AccelError> {
        // SAFETY: the caller's promises above.
        let e = unsafe { (self.inner.fns.buf_deregister)(dev as usize as *const c_void) };
        if e.err != 0 {
            return Err(AccelError::Unsupported(format!(
                "cuFileBufDeregister at {dev:#x}: {}",
                describe(e)
            )));
        }
        Ok(())
    }

    /// The library that was loaded (`libcufile.so.0`).
    pub fn library(&self) -> &'static str {
        self.inner.name
    }

    fn check(&self, handle: &CuFileHandle) -> Result<(), AccelError> {
        if Arc::ptr_eq(&self.inner, &handle.lib) {
            Ok(())
        } else {
            Err(AccelError::InvalidArgument(
                "a cuFile handle registered with another CuFile".into(),
            ))
        }
    }
}

/// Runs `call(bytes, file_offset, buffer_offset)` until `len` bytes are done or it reports the end of the file (0).
/// cuFile returns -1 with `errno` set for a file-system error and minus a `CUfileOpError` for its own.
fn transfer(
    what: &'static str,
    len: usize,
    file_offset: u64,
    mut call: impl FnMut(usize, libc::off_t, libc::off_t) -> isize,
) -> Result<usize, AccelError> {
    let overflow = || {
        AccelError::InvalidArgument(format!(
            "{what}: {len} bytes at file offset {file_offset} overflow off_t"
        ))
    };
    let end = file_offset.checked_add(len as u64).ok_or_else(overflow)?;
    libc::off_t::try_from(end).map_err(|_| overflow())?;
    let mut done = 0_usize;
    while done < len {
        // Both fit in off_t: they are at most `end`, checked above.
        let off = libc::off_t::try_from(file_offset + done as u64).map_err(|_| overflow())?;
        let buf_off = libc::off_t::try_from(done).map_err(|_| overflow())?;
        let r = call(len - done, off, buf_off);
        if r == 0 {
            break;
        }
        if r == -1 {
            return Err(AccelError::Os {
                op: what,
                source: std::io::Error::last_os_error(),
            });
        }
        if r < 0 {
            let code = r.unsigned_abs();
            return Err(AccelError::Os {
                op: what,
                source: std::io::Error::other(format!(
                    "cuFile error {code} ({})",
                    op_error_name(i64::try_from(code).unwrap_or(i64::MAX))
                )),
            });
        }
        // Positive, and never more than asked (a library that says more would be clamped, not trusted).
        done += r.unsigned_abs().min(len - done);
    }
    Ok(done)
}

/// `dlopen(name)`, or `None`.
fn open_library(name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; dlopen returns null or a handle. RTLD_NOW: a missing symbol the library
    // needs shows here, not in a later call.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    (!lib.is_null()).then_some(lib)
}

/// `dlsym(lib, sym)`, or `Unsupported` naming what is missing.
fn symbol(lib: *mut c_void, name: &str, sym: &str) -> Result<*mut c_void, AccelError> {
    let c = CString::new(sym)
        .map_err(|_| AccelError::InvalidArgument(format!("symbol name {sym:?}")))?;
    // SAFETY: `lib` is a live dlopen handle and `c` a NUL-terminated name.
    let p = unsafe { libc::dlsym(lib, c.as_ptr().cast::<c_char>()) };
    if p.is_null() {
        return Err(AccelError::Unsupported(format!(
            "cuFile (GPUDirect Storage): {name} has no {sym}; using the staging path"
        )));
    }
    Ok(p)
}

/// A `CUfileError_t` in words.
fn describe(e: CUfileError) -> String {
    let name = op_error_name(i64::from(e.err));
    if e.cu_err != 0 {
        format!("{name} (cuFile error {}, CUDA error {})", e.err, e.cu_err)
    } else {
        format!("{name} (cuFile error {})", e.err)
    }
}

/// The name of a `CUfileOpError` (`cufile.h`, CUDA 12.2 to 12.9).
fn op_error_name(code: i64) -> &'static str {
    match code {
        0 => "CU_FILE_SUCCESS",
        5001 => "CU_FILE_DRIVER_NOT_INITIALIZED",
        5002 => "CU_FILE_DRIVER_INVALID_PROPS",
        5003 => "CU_FILE_DRIVER_UNSUPPORTED_LIMIT",
        5004 => "CU_FILE_DRIVER_VERSION_MISMATCH",
        5005 => "CU_FILE_DRIVER_VERSION_READ_ERROR",
        5006 => "CU_FILE_DRIVER_CLOSING",
        5007 => "CU_FILE_PLATFORM_NOT_SUPPORTED",
        5008 => "CU_FILE_IO_NOT_SUPPORTED",
        5009 => "CU_FILE_DEVICE_NOT_SUPPORTED",
        5010 => "CU_FILE_NVFS_DRIVER_ERROR",
        5011 => "CU_FILE_CUDA_DRIVER_ERROR",
        5012 => "CU_FILE_CUDA_POINTER_INVALID",
        5013 => "CU_FILE_CUDA_MEMORY_TYPE_INVALID",
        5014 => "CU_FILE_CUDA_POINTER_RANGE_ERROR",
        5015 => "CU_FILE_CUDA_CONTEXT_MISMATCH",
        5016 => "CU_FILE_INVALID_MAPPING_SIZE",
        5017 => "CU_FILE_INVALID_MAPPING_RANGE",
        5018 => "CU_FILE_INVALID_FILE_TYPE",
        5019 => "CU_FILE_INVALID_FILE_OPEN_FLAG",
        5020 => "CU_FILE_DIO_NOT_SET",
        5022 => "CU_FILE_INVALID_VALUE",
        5023 => "CU_FILE_MEMORY_ALREADY_REGISTERED",
        5024 => "CU_FILE_MEMORY_NOT_REGISTERED",
        5025 => "CU_FILE_PERMISSION_DENIED",
        5026 => "CU_FILE_DRIVER_ALREADY_OPEN",
        5027 => "CU_FILE_HANDLE_NOT_REGISTERED",
        5028 => "CU_FILE_HANDLE_ALREADY_REGISTERED",
        5029 => "CU_FILE_DEVICE_NOT_FOUND",
        5030 => "CU_FILE_INTERNAL_ERROR",
        5031 => "CU_FILE_GETNEWFD_FAILED",
        5033 => "CU_FILE_NVFS_SETUP_ERROR",
        5034 => "CU_FILE_IO_DISABLED",
        5035 => "CU_FILE_BATCH_SUBMIT_FAILED",
        5036 => "CU_FILE_GPU_MEMORY_PINNING_FAILED",
        5037 => "CU_FILE_BATCH_FULL",
        5038 => "CU_FILE_ASYNC_NOT_SUPPORTED",
        _ => "an unknown cuFile error",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn library_missing() -> bool {
        LIBRARY_NAMES.iter().all(|n| match open_library(n) {
            Some(lib) => {
                // SAFETY: test: the handle came from dlopen and is closed once.
                unsafe { libc::dlclose(lib) };
                false
            }
            None => true,
        })
    }

    #[test]
    fn load_without_the_library_is_unsupported() {
        match CuFile::load() {
            Ok(f) => assert!(!library_missing(), "loaded {f:?} without a library"),
            Err(AccelError::Unsupported(msg)) => {
                assert!(msg.contains("cuFile"), "{msg}");
                if library_missing() {
                    assert!(msg.contains("libcufile.so.0"), "{msg}");
                    assert!(msg.contains("staging"), "{msg}");
                }
            }
            Err(e) => panic!("neither Ok nor Unsupported: {e:?}"),
        }
    }

    #[test]
    fn the_ffi_types_have_cufile_h_layout() {
        assert_eq!(std::mem::size_of::<CUfileError>(), 8);
        // enum (4) + padding (4) + union of int and pointer (8) + pointer (8).
        assert_eq!(std::mem::size_of::<CUfileDescr>(), 24);
        assert_eq!(std::mem::offset_of!(CUfileDescr, handle), 8);
        assert_eq!(std::mem::offset_of!(CUfileDescr, fs_ops), 16);
    }

    #[test]
    fn transfers_repeat_on_short_counts_and_stop_at_the_end() {
        let mut calls = Vec::new();
        let n = transfer("cuFileRead", 10, 100, |n, off, done| {
            calls.push((n, off, done));
            if done >= 8 {
                0
            } else {
                4
            }
        })
        .unwrap();
        assert_eq!(n, 8);
        assert_eq!(calls, vec![(10, 100, 0), (6, 104, 4), (2, 108, 8)]);
        let n = transfer("cuFileWrite", 4, 0, |n, _, _| n as isize).unwrap();
        assert_eq!(n, 4);
        assert_eq!(transfer("cuFileRead", 0, 0, |_, _, _| -1).unwrap(), 0);
    }

    #[test]
    fn transfer_errors_name_the_cause() {
        let e = transfer("cuFileRead", 4, 0, |_, _, _| -5020).unwrap_err();
        assert!(e.to_string().contains("CU_FILE_DIO_NOT_SET"), "{e}");
        let e = transfer("cuFileWrite", 4, 0, |_, _, _| {
            // SAFETY: test: sets this thread's errno.
            unsafe { *libc::__errno_location() = libc::EIO };
            -1
        })
        .unwrap_err();
        assert!(
            matches!(e, AccelError::Os { op: "cuFileWrite", ref source } if source.raw_os_error() == Some(libc::EIO))
        );
        assert!(matches!(
            transfer("cuFileRead", 8, u64::MAX - 4, |_, _, _| 0),
            Err(AccelError::InvalidArgument(_))
        ));
    }

    #[test]
    fn errors_are_described() {
        let s = describe(CUfileError {
            err: 5011,
            cu_err: 2,
        });
        assert!(
            s.contains("CU_FILE_CUDA_DRIVER_ERROR") && s.contains("CUDA error 2"),
            "{s}"
        );
        assert_eq!(op_error_name(1), "an unknown cuFile error");
    }
}
