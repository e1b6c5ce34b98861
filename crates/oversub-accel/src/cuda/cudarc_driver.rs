//! The real driver: `libcuda` through cudarc's dynamically loaded bindings.
//!
//! Nothing here needs CUDA to build or to run: [`CudarcDriver::new`] and [`CudarcDriver::available`] first look for
//! the driver library with `dlopen`, under the soname and every name cudarc's loader tries, and say "no CUDA driver
//! found" when there is none, before any binding is touched (cudarc's loader panics when a library or symbol is
//! missing). Every call into the bindings also runs under `catch_unwind`, so that a symbol an old driver lacks
//! becomes an error instead of a panic.
//!
//! The trait's calls go straight to the raw `cu*` functions (`cudarc::driver::sys`): handles are plain integers
//! on the trait, and the raw calls keep cudarc's bookkeeping (its recorded error state, its stream tracking) out of
//! the pager's way. Each call first makes the driver's primary context current on the calling thread, since the
//! pager calls from worker threads.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::result::DriverError as CuError;
use cudarc::driver::{result, sys, CudaContext};

use super::driver::{
    CudaDriver, DeviceAddr, DeviceInfo, DriverError, EventHandle, PhysHandle, StreamHandle,
};
#[cfg(test)]
use super::loading::can_dlopen;
use super::loading::{catch_bindings_panic, driver_library_found, DRIVER_SONAME};
use crate::AccelError;

/// The oldest driver (`cuDriverGetVersion`) the backend runs on: the bindings are CUDA 12's.
const MIN_DRIVER_VERSION: i32 = 12_000;

/// The CUDA driver of one device, loaded at run time: the device's primary context, retained for as long as this
/// object lives, and what [`DeviceInfo`] says about the device.
#[derive(Debug)]
pub struct CudarcDriver {
    ctx: Arc<CudaContext>,
    device: sys::CUdevice,
    info: DeviceInfo,
}

impl CudarcDriver {
    /// Loads the driver and binds device `ordinal`: `cuInit`, a driver of CUDA 12.0 or newer, the device's primary
    /// context (retained until drop) and what the backend needs to know about the device.
    ///
    /// Errors: [`AccelError::NoDriver`] ("no CUDA driver found ...") when `libcuda.so.1` cannot be loaded or the
    /// driver finds no device; [`AccelError::Unsupported`] for a driver older than 12.0;
    /// [`AccelError::InvalidArgument`] for an ordinal the driver does not have; [`AccelError::Driver`] when a query
    /// fails.
    pub fn new(ordinal: i32) -> Result<CudarcDriver, AccelError> {
        driver_library()?;
        guarded(|| Self::open(ordinal))
    }

    /// Whether the cuda backend can work here: the driver library loads, `cuInit` succeeds, the driver is CUDA 12.0
    /// or newer and sees at least one device. Creates no context, so it is cheap enough for a command line to ask
    /// early.
    pub fn available() -> Result<(), AccelError> {
        driver_library()?;
        guarded(|| init_driver().map(|_| ()))
    }

    /// The device's primary context (for kernels launched through cudarc, like the spin kernel).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The driver's handle of the device.
    pub fn device(&self) -> sys::CUdevice {
        self.device
    }

    fn open(ordinal: i32) -> Result<CudarcDriver, AccelError> {
        let (driver_version, count) = init_driver()?;
        if ordinal < 0 || ordinal >= count {
            return Err(AccelError::InvalidArgument(format!(
                "CUDA device {ordinal} does not exist: the driver sees {count} device(s)"
            )));
        }
        let index = usize::try_from(ordinal)
            .map_err(|_| AccelError::InvalidArgument(format!("CUDA device {ordinal}")))?;
        // Binds the context to this thread, which the queries below rely on.
        let ctx = CudaContext::new(index).map_err(|e| accel_err("cuDevicePrimaryCtxRetain", e))?;
        let device = ctx.cu_device();
        let name = ctx
            .name()
            .map_err(|e| accel_err("cuDeviceGetName", e))?
            .trim()
            .to_owned();
        let mut total: usize = 0;
        // SAFETY: valid out-pointer for the call's duration; `device` came from the driver.
        cu("cuDeviceTotalMem", unsafe {
            sys::cuDeviceTotalMem_v2(&mut total, device)
        })?;
        let vmm_supported = ctx
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
            )
            .map_err(|e| accel_err("cuDeviceGetAttribute", e))?
            != 0;
        // Without VMM the granularity query fails; 0 tells the backend there is none.
        let granularity_bytes = if vmm_supported {
            let mut g: usize = 0;
            let prop = allocation_prop(ordinal);
            // SAFETY: valid out-pointer and property struct for the call's duration.
            cu("cuMemGetAllocationGranularity", unsafe {
                sys::cuMemGetAllocationGranularity(
                    &mut g,
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            })?;
            g
        } else {
            0
        };
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: valid out-pointers; the context is current on this thread (CudaContext::new bound it).
        cu("cuCtxGetStreamPriorityRange", unsafe {
            sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
        })?;
        let info = DeviceInfo {
            name,
            ordinal,
            driver_version,
            total_bytes: total as u64,
            vmm_supported,
            granularity_bytes,
            greatest_stream_priority: greatest,
        };
        tracing::debug!(?info, least_stream_priority = least, "CUDA device bound");
        Ok(CudarcDriver { ctx, device, info })
    }

    /// Makes the context current on the calling thread, unless it already is. The raw calls, not cudarc's
    /// `bind_to_thread`: that one fails once cudarc has recorded an error of its own, which is not ours to see.
    fn bind(&self) -> Result<(), DriverError> {
        bind_context(&self.ctx)
    }

    /// A `CUmemLocation` for this device.
    fn location(&self) -> sys::CUmemLocation {
        device_location(self.info.ordinal)
    }
}

/// Makes `ctx` current on the calling thread unless it already is (`cuCtxGetCurrent`, `cuCtxSetCurrent`).
pub(super) fn bind_context(ctx: &CudaContext) -> Result<(), DriverError> {
    let mut current: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-pointer for the call's duration.
    cu("cuCtxGetCurrent", unsafe {
        sys::cuCtxGetCurrent(&mut current)
    })?;
    if current != ctx.cu_ctx() {
        // SAFETY: the context is the primary context `ctx` retains, alive as long as `ctx` is.
        cu("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(ctx.cu_ctx())
        })?;
    }
    Ok(())
}

fn device_location(ordinal: i32) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    }
}

/// Pinned device memory of device `ordinal`, not exportable: what `cuMemCreate` allocates.
fn allocation_prop(ordinal: i32) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: device_location(ordinal),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

fn stream_ptr(s: StreamHandle) -> sys::CUstream {
    s.0 as usize as sys::CUstream
}

fn event_ptr(e: EventHandle) -> sys::CUevent {
    e.0 as usize as sys::CUevent
}

/// A cudarc error as the trait's error: the call, the `CUresult` code and its enum name (not `cuGetErrorString`,
/// which would need the library once more).
pub(super) fn driver_error(call: &'static str, e: CuError) -> DriverError {
    DriverError {
        call,
        code: e.0 as i32,
        name: format!("{:?}", e.0),
    }
}

/// A `CUresult` as a `Result`.
pub(super) fn cu(call: &'static str, r: sys::CUresult) -> Result<(), DriverError> {
    r.result().map_err(|e| driver_error(call, e))
}

/// A cudarc error during start-up as an [`AccelError`]: a missing or unusable device is `NoDriver`.
fn accel_err(call: &'static str, e: CuError) -> AccelError {
    use sys::CUresult as R;
    match e.0 {
        R::CUDA_ERROR_NO_DEVICE
        | R::CUDA_ERROR_STUB_LIBRARY
        | R::CUDA_ERROR_DEVICE_UNAVAILABLE
        | R::CUDA_ERROR_SYSTEM_NOT_READY
        | R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => AccelError::NoDriver(format!(
            "the CUDA driver is loaded but has no usable device ({call}: {:?}): the cuda backend needs an NVIDIA GPU",
            e.0
        )),
        _ => AccelError::Driver(driver_error(call, e)),
    }
}

/// Runs a trait call, turning a panic of the bindings (their loader panics on a missing symbol) into an error.
fn guard<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(DriverError {
            call,
            code: -1,
            name: format!(
                "panic in the CUDA bindings: {}",
                panic_message(payload.as_ref())
            ),
        })
    })
}

/// Runs start-up code, turning a panic of the bindings into [`AccelError::NoDriver`].
fn guarded<T>(f: impl FnOnce() -> Result<T, AccelError>) -> Result<T, AccelError> {
    catch_bindings_panic(f, |msg| {
        AccelError::NoDriver(format!("the CUDA driver bindings failed: {msg}"))
    })
}

/// A panic payload's message.
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The driver library, under its soname or any name cudarc's loader tries (so that when this finds one, the
/// loader finds one too instead of panicking).
fn driver_library() -> Result<(), AccelError> {
    if driver_library_found() {
        return Ok(());
    }
    Err(AccelError::NoDriver(format!(
        "no CUDA driver found ({DRIVER_SONAME} could not be loaded): the cuda backend needs an NVIDIA GPU and its \
         driver"
    )))
}

/// `cuInit`, the driver's version and the device count; errors when there is no device or the driver is too
/// old. Returns (version, devices).
fn init_driver() -> Result<(i32, i32), AccelError> {
    result::init().map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_NO_DEVICE => AccelError::NoDriver(
            "no CUDA device: the CUDA driver is loaded but finds no device (cuInit: CUDA_ERROR_NO_DEVICE)"
                .into(),
        ),
        _ => accel_err("cuInit", e),
    })?;
    let mut version: c_int = 0;
    // SAFETY: valid out-pointer for the call's duration.
    cu("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut version)
    })?;
    if version < MIN_DRIVER_VERSION {
        return Err(AccelError::Unsupported(format!(
            "the CUDA driver supports CUDA {}.{}; the cuda backend needs 12.0 or newer",
            version / 1000,
            version % 1000 / 10
        )));
    }
    let mut count: c_int = 0;
    // SAFETY: valid out-pointer for the call's duration.
    cu("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&mut count)
    })?;
    if count < 1 {
        return Err(AccelError::NoDriver(
            "no CUDA device: the CUDA driver is loaded but sees no device".into(),
        ));
    }
    Ok((version, count))
}

// SAFETY: every call forwards to the driver function of the same contract (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, cuMemcpy*Async, cuEvent*), with the context made current first, so the promises of the
// trait are the driver's own. The struct is Send + Sync through its fields (cudarc's context is).
unsafe impl CudaDriver for CudarcDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn make_current(&self) -> Result<(), DriverError> {
        guard("cuCtxSetCurrent", || self.bind())
    }

    fn mem_get_info(&self) -> Result<(u64, u64), DriverError> {
        guard("cuMemGetInfo", || {
            self.bind()?;
            let (mut free, mut total): (usize, usize) = (0, 0);
            // SAFETY: valid out-pointers; the context is current.
            cu("cuMemGetInfo", unsafe {
                sys::cuMemGetInfo_v2(&mut free, &mut total)
            })?;
            Ok((free as u64, total as u64))
        })
    }

    fn address_reserve(&self, len: usize, align: usize) -> Result<DeviceAddr, DriverError> {
        guard("cuMemAddressReserve", || {
            self.bind()?;
            let mut ptr: sys::CUdeviceptr = 0;
            // SAFETY: valid out-pointer; no fixed address (0) and no flags; the driver checks size and alignment.
            cu("cuMemAddressReserve", unsafe {
                sys::cuMemAddressReserve(&mut ptr, len, align, 0, 0)
            })?;
            Ok(ptr)
        })
    }

    unsafe fn address_free(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError> {
        guard("cuMemAddressFree", || {
            self.bind()?;
            // SAFETY: the caller promises the range came from address_reserve and is no longer mapped.
            cu("cuMemAddressFree", unsafe {
                sys::cuMemAddressFree(addr, len)
            })
        })
    }

    fn mem_create(&self, len: usize) -> Result<PhysHandle, DriverError> {
        guard("cuMemCreate", || {
            self.bind()?;
            let prop = allocation_prop(self.info.ordinal);
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: valid out-pointer and property struct for the call's duration; no flags.
            cu("cuMemCreate", unsafe {
                sys::cuMemCreate(&mut handle, len, &prop, 0)
            })?;
            Ok(PhysHandle(handle))
        })
    }

    unsafe fn mem_release(&self, handle: PhysHandle) -> Result<(), DriverError> {
        guard("cuMemRelease", || {
            self.bind()?;
            // SAFETY: the caller promises the handle came from mem_create and is released once.
            cu("cuMemRelease", unsafe { sys::cuMemRelease(handle.0) })
        })
    }

    unsafe fn mem_map(
        &self,
        addr: DeviceAddr,
        len: usize,
        handle: PhysHandle,
    ) -> Result<(), DriverError> {
        guard("cuMemMap", || {
            self.bind()?;
            // SAFETY: the caller promises the range is reserved and free and `len` is the allocation's size.
            cu("cuMemMap", unsafe {
                sys::cuMemMap(addr, len, 0, handle.0, 0)
            })
        })
    }

    unsafe fn mem_set_access(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError> {
        guard("cuMemSetAccess", || {
            self.bind()?;
            let access = sys::CUmemAccessDesc {
                location: self.location(),
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: the caller promises the range is mapped; one valid descriptor for the call's duration.
            cu("cuMemSetAccess", unsafe {
                sys::cuMemSetAccess(addr, len, &access, 1)
            })
        })
    }

    unsafe fn mem_unmap(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError> {
        guard("cuMemUnmap", || {
            self.bind()?;
            // SAFETY: the caller promises the range was mapped and nothing touches it any more.
            cu("cuMemUnmap", unsafe { sys::cuMemUnmap(addr, len) })
        })
    }

    fn host_alloc_pinned(&self, len: usize) -> Result<*mut u8, DriverError> {
        guard("cuMemHostAlloc", || {
            self.bind()?;
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out-pointer; flags 0: ordinary pinned memory (not write-combined, which the host reads
            // slowly; not portable, since one context uses it).
            cu("cuMemHostAlloc", unsafe {
                sys::cuMemHostAlloc(&mut p, len, 0)
            })?;
            Ok(p.cast::<u8>())
        })
    }

    unsafe fn host_free_pinned(&self, ptr: *mut u8) -> Result<(), DriverError> {
        guard("cuMemFreeHost", || {
            self.bind()?;
            // SAFETY: the caller promises `ptr` came from host_alloc_pinned and nothing uses it any more.
            cu("cuMemFreeHost", unsafe {
                sys::cuMemFreeHost(ptr.cast::<c_void>())
            })
        })
    }

    fn stream_create(&self, priority: i32) -> Result<StreamHandle, DriverError> {
        guard("cuStreamCreateWithPriority", || {
            self.bind()?;
            let mut s: sys::CUstream = std::ptr::null_mut();
            // SAFETY: valid out-pointer; non-blocking so it does not serialise with the legacy default stream.
            cu("cuStreamCreateWithPriority", unsafe {
                sys::cuStreamCreateWithPriority(
                    &mut s,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                    priority,
                )
            })?;
            Ok(StreamHandle(s as usize as u64))
        })
    }

    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<(), DriverError> {
        guard("cuStreamDestroy", || {
            self.bind()?;
            // SAFETY: the caller promises the stream came from stream_create and is destroyed once.
            cu("cuStreamDestroy", unsafe {
                sys::cuStreamDestroy_v2(stream_ptr(stream))
            })
        })
    }

    fn stream_synchronize(&self, stream: StreamHandle) -> Result<(), DriverError> {
        guard("cuStreamSynchronize", || {
            self.bind()?;
            // SAFETY: a handle of stream_create; the driver reports an invalid handle as an error.
            cu("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(stream_ptr(stream))
            })
        })
    }

    fn ctx_synchronize(&self) -> Result<(), DriverError> {
        guard("cuCtxSynchronize", || {
            self.bind()?;
            // SAFETY: no arguments; the context is current.
            cu("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
        })
    }

    unsafe fn memset_d8_async(
        &self,
        dst: DeviceAddr,
        value: u8,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError> {
        guard("cuMemsetD8Async", || {
            self.bind()?;
            // SAFETY: the caller promises the range is mapped device memory with access set until the fill ends.
            cu("cuMemsetD8Async", unsafe {
                sys::cuMemsetD8Async(dst, value, len, stream_ptr(stream))
            })
        })
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DeviceAddr,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError> {
        guard("cuMemcpyDtoHAsync", || {
            self.bind()?;
            // SAFETY: the caller promises `dst` is valid for `len` bytes and the source is mapped until the copy
            // completes.
            cu("cuMemcpyDtoHAsync", unsafe {
                sys::cuMemcpyDtoHAsync_v2(dst.cast::<c_void>(), src, len, stream_ptr(stream))
            })
        })
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError> {
        guard("cuMemcpyHtoDAsync", || {
            self.bind()?;
            // SAFETY: the caller promises `src` is valid for `len` bytes and the destination mapped with access
            // until the copy completes.
            cu("cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(dst, src.cast::<c_void>(), len, stream_ptr(stream))
            })
        })
    }

    fn event_create(&self) -> Result<EventHandle, DriverError> {
        guard("cuEventCreate", || {
            self.bind()?;
            let mut e: sys::CUevent = std::ptr::null_mut();
            // SAFETY: valid out-pointer; timing disabled, which makes record and query cheaper.
            cu("cuEventCreate", unsafe {
                sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
            })?;
            Ok(EventHandle(e as usize as u64))
        })
    }

    unsafe fn event_destroy(&self, event: EventHandle) -> Result<(), DriverError> {
        guard("cuEventDestroy", || {
            self.bind()?;
            // SAFETY: the caller promises the event came from event_create and is destroyed once.
            cu("cuEventDestroy", unsafe {
                sys::cuEventDestroy_v2(event_ptr(event))
            })
        })
    }

    fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<(), DriverError> {
        guard("cuEventRecord", || {
            self.bind()?;
            // SAFETY: handles of event_create and stream_create of this context; invalid ones are errors.
            cu("cuEventRecord", unsafe {
                sys::cuEventRecord(event_ptr(event), stream_ptr(stream))
            })
        })
    }

    fn event_query(&self, event: EventHandle) -> Result<bool, DriverError> {
        guard("cuEventQuery", || {
            self.bind()?;
            // SAFETY: a handle of event_create; an invalid one is an error.
            match unsafe { sys::cuEventQuery(event_ptr(event)) } {
                sys::CUresult::CUDA_SUCCESS => Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                r => cu("cuEventQuery", r).map(|()| false),
            }
        })
    }

    fn event_synchronize(&self, event: EventHandle) -> Result<(), DriverError> {
        guard("cuEventSynchronize", || {
            self.bind()?;
            // SAFETY: a handle of event_create; an invalid one is an error.
            cu("cuEventSynchronize", unsafe {
                sys::cuEventSynchronize(event_ptr(event))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn no_driver_library() -> bool {
        !can_dlopen(DRIVER_SONAME)
            && !cudarc::get_lib_name_candidates("cuda")
                .iter()
                .any(|n| can_dlopen(n))
    }

    #[test]
    fn without_a_driver_new_says_no_cuda_driver_found() {
        match CudarcDriver::new(0) {
            Ok(d) => assert!(!no_driver_library(), "a driver without a library: {d:?}"),
            Err(AccelError::NoDriver(msg)) if no_driver_library() => {
                assert!(msg.starts_with("no CUDA driver found"), "{msg}");
                assert!(msg.contains("libcuda.so.1"), "{msg}");
            }
            Err(e) => assert!(!no_driver_library(), "unexpected error: {e:?}"),
        }
    }

    #[test]
    fn without_a_driver_available_says_no_cuda_driver_found() {
        match CudarcDriver::available() {
            Ok(()) => assert!(!no_driver_library()),
            Err(AccelError::NoDriver(msg)) if no_driver_library() => {
                assert!(msg.starts_with("no CUDA driver found"), "{msg}");
            }
            Err(e) => assert!(!no_driver_library(), "unexpected error: {e:?}"),
        }
    }

    #[test]
    fn a_panic_in_the_bindings_becomes_an_error() {
        let r: Result<(), DriverError> = guard("cuMemCreate", || {
            std::panic::panic_any(String::from(
                "Unable to dynamically load the \"cuda\" shared library",
            ))
        });
        let e = r.unwrap_err();
        assert_eq!(e.call, "cuMemCreate");
        assert_eq!(e.code, -1);
        assert!(
            e.name.starts_with("panic in the CUDA bindings: Unable"),
            "{}",
            e.name
        );
        let r: Result<(), AccelError> = guarded(|| std::panic::panic_any("missing symbol"));
        assert!(matches!(r, Err(AccelError::NoDriver(ref m)) if m.contains("missing symbol")));
    }

    #[test]
    fn driver_errors_carry_the_code_and_name() {
        let e = driver_error(
            "cuMemCreate",
            CuError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        );
        assert!(e.is_out_of_memory());
        assert_eq!(e.name, "CUDA_ERROR_OUT_OF_MEMORY");
        assert!(matches!(
            accel_err("cuInit", CuError(sys::CUresult::CUDA_ERROR_STUB_LIBRARY)),
            AccelError::NoDriver(_)
        ));
        assert!(matches!(
            accel_err("cuMemMap", CuError(sys::CUresult::CUDA_ERROR_INVALID_VALUE)),
            AccelError::Driver(DriverError {
                call: "cuMemMap",
                code: 1,
                ..
            })
        ));
    }

    /// Exercises the calls on a real GPU; only with `OVERSUB_TEST_CUDA=1`.
    #[test]
    fn drives_a_real_gpu() {
        if std::env::var("OVERSUB_TEST_CUDA").as_deref() != Ok("1") {
            return;
        }
        let d = CudarcDriver::new(0).unwrap();
        let info = d.info().clone();
        eprintln!("{info:?}");
        assert!(info.total_bytes > 0 && info.driver_version >= MIN_DRIVER_VERSION);
        let (free, total) = d.mem_get_info().unwrap();
        assert!(free <= total && total > 0);
        if !info.vmm_supported {
            return;
        }
        let g = info.granularity_bytes;
        assert!(g.is_power_of_two());
        let len = 2 * g;
        let addr = d.address_reserve(len, g).unwrap();
        let h = d.mem_create(len).unwrap();
        let stream = d.stream_create(info.greatest_stream_priority).unwrap();
        let event = d.event_create().unwrap();
        let host = d.host_alloc_pinned(len).unwrap();
        // SAFETY: test: the range is reserved and free, the allocation `len` bytes; the pinned buffer has `len`
        // bytes; everything is synchronised before it is freed.
        unsafe {
            d.mem_map(addr, len, h).unwrap();
            d.mem_set_access(addr, len).unwrap();
            std::ptr::write_bytes(host, 0xa5, len);
            d.memcpy_htod_async(addr, host, len, stream).unwrap();
            // A copy from pinned memory is still reading it until the stream is synchronised.
            d.stream_synchronize(stream).unwrap();
            std::ptr::write_bytes(host, 0, len);
            d.memcpy_dtoh_async(host, addr, len, stream).unwrap();
            d.event_record(event, stream).unwrap();
            d.event_synchronize(event).unwrap();
            assert!(d.event_query(event).unwrap());
            assert!(std::slice::from_raw_parts(host, len)
                .iter()
                .all(|&b| b == 0xa5));
            d.ctx_synchronize().unwrap();
            d.mem_unmap(addr, len).unwrap();
            d.mem_release(h).unwrap();
            d.address_free(addr, len).unwrap();
            d.host_free_pinned(host).unwrap();
            d.event_destroy(event).unwrap();
            d.stream_destroy(stream).unwrap();
        }
        // From another thread: the calls bind the context themselves.
        std::thread::scope(|s| {
            s.spawn(|| d.mem_get_info().unwrap());
        });
    }
}
