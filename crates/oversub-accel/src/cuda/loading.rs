//! Run-time loading shared by the CUDA code: whether a library `dlopen`s, whether NVRTC is there, and kernels
//! compiled with NVRTC (a cubin for the device first, PTX as the fallback).

use std::ffi::CString;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc;

use crate::AccelError;

/// The CUDA driver library's soname, tried before the other names cudarc's loader knows.
pub const DRIVER_SONAME: &str = "libcuda.so.1";

/// Whether the driver library loads, under its soname or any name cudarc's loader tries (so that when this finds
/// one, the loader finds one too instead of panicking). Loads nothing of the bindings.
pub fn driver_library_found() -> bool {
    can_dlopen(DRIVER_SONAME)
        || cudarc::get_lib_name_candidates("cuda")
            .iter()
            .any(|n| can_dlopen(n))
}

/// Runs code that calls cudarc's bindings directly, turning their panics (a library or symbol that cannot be
/// loaded) into the error `on_panic` makes of the panic's message.
pub fn catch_bindings_panic<T, E>(
    f: impl FnOnce() -> Result<T, E>,
    on_panic: impl FnOnce(String) -> E,
) -> Result<T, E> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(on_panic(super::cudarc_driver::panic_message(
            payload.as_ref(),
        )))
    })
}

/// Whether `dlopen` finds the library `name`.
pub fn can_dlopen(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated name; dlopen returns null or a handle. Loading runs the library's
    // initialisers, as cudarc's loader would when it loads the same library.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` came from the dlopen above and is closed once.
    unsafe { libc::dlclose(handle) };
    true
}

/// Whether NVRTC can be loaded under the names cudarc's loader tries (its loader panics otherwise). The error
/// names the libraries tried and ends with `needed_for` ("the spin kernel needs it").
pub fn detect_nvrtc(needed_for: &str) -> Result<(), AccelError> {
    let names = cudarc::get_lib_name_candidates("nvrtc");
    if names.iter().any(|n| can_dlopen(n)) {
        return Ok(());
    }
    let tried: Vec<&str> = names
        .iter()
        .filter(|n| n.contains(".so"))
        .map(String::as_str)
        .collect();
    Err(AccelError::Unsupported(format!(
        "no NVRTC library found (tried {}): {needed_for}",
        tried.join(", ")
    )))
}

/// The kernel source `src` as a cubin for the device's architecture or, if that cannot be built or loaded, as PTX (which a
/// driver older than the NVRTC may refuse, hence the cubin first). Errors say why, in words.
pub fn load_module(ctx: &Arc<CudaContext>, src: &str) -> Result<Arc<CudaModule>, String> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| format!("querying the compute capability: {:?}", e.0))?;
    let cubin_failed = match compile_cubin(src, major, minor) {
        Ok(image) => match ctx.load_module(nvrtc::Ptx::from_binary(image)) {
            Ok(m) => return Ok(m),
            Err(e) => format!("loading the sm_{major}{minor} cubin: {:?}", e.0),
        },
        Err(why) => why,
    };
    let ptx = nvrtc::compile_ptx(src).map_err(|e| format!("{cubin_failed}; compiling PTX: {e}"))?;
    ctx.load_module(ptx)
        .map_err(|e| format!("{cubin_failed}; loading the PTX: {:?}", e.0))
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program came from nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { nvrtc::result::destroy_program(self.0) };
    }
}

/// Compiles `src` to a cubin for `sm_<major><minor>`.
fn compile_cubin(src: &str, major: i32, minor: i32) -> Result<Vec<u8>, String> {
    let src = CString::new(src).map_err(|e| format!("kernel source: {e}"))?;
    let prog = Program(
        nvrtc::result::create_program(&src, None)
            .map_err(|e| format!("nvrtcCreateProgram: {:?}", e.0))?,
    );
    let arch = format!("--gpu-architecture=sm_{major}{minor}");
    // SAFETY: `prog` is a live program; `src` outlives it (declared before it).
    if let Err(e) = unsafe { nvrtc::result::compile_program(prog.0, std::slice::from_ref(&arch)) } {
        // SAFETY: as above.
        let log = unsafe { nvrtc::result::get_program_log(prog.0) }
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
                String::from_utf8_lossy(&bytes)
                    .trim()
                    .chars()
                    .take(400)
                    .collect::<String>()
            })
            .unwrap_or_default();
        return Err(format!("nvrtcCompileProgram {arch}: {:?}: {log}", e.0));
    }
    let mut size: usize = 0;
    // SAFETY: `prog` is a compiled program; valid out-pointer.
    unsafe { nvrtc::sys::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|e| format!("nvrtcGetCUBINSize: {:?}", e.0))?;
    if size == 0 {
        return Err(format!("NVRTC produced no cubin for {arch}"));
    }
    let mut image = vec![0_u8; size];
    // SAFETY: `image` has the `size` bytes the call writes.
    unsafe { nvrtc::sys::nvrtcGetCUBIN(prog.0, image.as_mut_ptr().cast()) }
        .result()
        .map_err(|e| format!("nvrtcGetCUBIN: {:?}", e.0))?;
    Ok(image)
}
