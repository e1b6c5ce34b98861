//! Which io_uring features pay on this store? One O_DIRECT file read and written whole, in requests of one size at
//! one queue depth, by variants of the submission the anchors use (fio `fixedbufs`/`registerfiles`, SPDK-style
//! rings per thread, huge-page destinations); medians of interleaved samples and each variant's rate as a ratio to
//! the engine's own form (vectored `readv`/`writev` SQEs from one ring, 4 KiB-page memory).
//!
//! ```text
//! cargo run --release -p oversub-io --example uring_variants -- [DIR] [SIZE_MIB] [BLOCK_KIB] [DEPTH] [SAMPLES]
//! ```
//! Defaults: $TMPDIR, 1024 MiB, 4096 KiB, 32, 5. Run as root so the page cache can be dropped before each pass
//! (it is bypassed by O_DIRECT anyway; the drop keeps every variant's conditions alike).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use io_uring::{opcode, types, IoUring};

#[derive(Clone, Copy, Debug)]
enum Variant {
    /// Vectored SQEs, one ring: what `UringEngine` submits.
    Readv,
    /// Plain (non-vectored) read/write SQEs.
    Plain,
    /// `READ_FIXED`/`WRITE_FIXED` into buffers registered once (no per-I/O page pinning).
    FixedBuffers,
    /// The file registered with the ring (no per-I/O fd lookup).
    FixedFile,
    /// Both of the above.
    FixedBoth,
    /// Two threads, each with its own ring, each doing half of the file.
    TwoRings,
    /// Vectored SQEs into memory backed by transparent huge pages.
    HugePages,
}

const VARIANTS: [Variant; 7] = [
    Variant::Readv,
    Variant::Plain,
    Variant::FixedBuffers,
    Variant::FixedFile,
    Variant::FixedBoth,
    Variant::TwoRings,
    Variant::HugePages,
];

struct Memory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this struct; threads use disjoint halves of it.
unsafe impl Send for Memory {}
// SAFETY: as above; shared references only hand out the pointer.
unsafe impl Sync for Memory {}

impl Memory {
    fn new(len: usize, huge: bool) -> std::io::Result<Memory> {
        let align = 2 << 20;
        // SAFETY: anonymous private mapping of len + align bytes; the result is checked.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + align,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // 2 MiB-aligned start so huge pages can back the whole range; the slack stays mapped (an example leaks it).
        let ptr = (raw as usize).next_multiple_of(align) as *mut u8;
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: ptr..ptr+len lies inside the mapping made above.
        unsafe { libc::madvise(ptr.cast(), len, advice) };
        // Prefault: the timing is of I/O, not of first-touch faults.
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(ptr, 0x5a, len) };
        Ok(Memory { ptr, len })
    }
}

fn drop_caches() {
    // SAFETY: plain syscall.
    unsafe { libc::sync() };
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "1\n");
}

/// One pass over `len` bytes from `offset` of the file in `block`-sized requests on its own ring.
#[allow(clippy::too_many_arguments)] // an experiment's knobs, spelled out at each call
fn pass(
    fd: RawFd,
    mem: *mut u8,
    offset: u64,
    len: usize,
    block: usize,
    depth: usize,
    write: bool,
    variant: Variant,
) -> std::io::Result<()> {
    let mut ring = IoUring::new(depth as u32 * 2)?;
    let fixed_buf = matches!(variant, Variant::FixedBuffers | Variant::FixedBoth);
    let fixed_file = matches!(variant, Variant::FixedFile | Variant::FixedBoth);
    if fixed_buf {
        // One registered buffer per GiB (the kernel's limit for one).
        let iovecs: Vec<libc::iovec> = (0..len)
            .step_by(1 << 30)
            .map(|o| libc::iovec {
                iov_base: mem.wrapping_add(o).cast(),
                iov_len: (len - o).min(1 << 30),
            })
            .collect();
        // SAFETY: the buffers stay mapped until the ring is dropped at the end of this function.
        unsafe { ring.submitter().register_buffers(&iovecs)? };
    }
    if fixed_file {
        ring.submitter().register_files(&[fd])?;
    }
    let iovs: Vec<libc::iovec> = (0..len)
        .step_by(block)
        .map(|o| libc::iovec {
            iov_base: mem.wrapping_add(o).cast(),
            iov_len: block.min(len - o),
        })
        .collect();
    let (mut next, mut done, mut in_flight) = (0usize, 0usize, 0usize);
    while done < iovs.len() {
        while in_flight < depth && next < iovs.len() {
            let i = next;
            let v = &iovs[i];
            let off = offset + (i * block) as u64;
            let entry = match (variant, write, fixed_file) {
                (_, _, true) if !fixed_buf => {
                    let f = types::Fixed(0);
                    if write {
                        opcode::Writev::new(f, v, 1).offset(off).build()
                    } else {
                        opcode::Readv::new(f, v, 1).offset(off).build()
                    }
                }
                _ if fixed_buf => {
                    let buf_index = ((i * block) >> 30) as u16;
                    if fixed_file {
                        let f = types::Fixed(0);
                        if write {
                            opcode::WriteFixed::new(
                                f,
                                v.iov_base.cast(),
                                v.iov_len as u32,
                                buf_index,
                            )
                            .offset(off)
                            .build()
                        } else {
                            opcode::ReadFixed::new(
                                f,
                                v.iov_base.cast(),
                                v.iov_len as u32,
                                buf_index,
                            )
                            .offset(off)
                            .build()
                        }
                    } else {
                        let f = types::Fd(fd);
                        if write {
                            opcode::WriteFixed::new(
                                f,
                                v.iov_base.cast(),
                                v.iov_len as u32,
                                buf_index,
                            )
                            .offset(off)
                            .build()
                        } else {
                            opcode::ReadFixed::new(
                                f,
                                v.iov_base.cast(),
                                v.iov_len as u32,
                                buf_index,
                            )
                            .offset(off)
                            .build()
                        }
                    }
                }
                (Variant::Plain, true, _) => {
                    opcode::Write::new(types::Fd(fd), v.iov_base.cast(), v.iov_len as u32)
                        .offset(off)
                        .build()
                }
                (Variant::Plain, false, _) => {
                    opcode::Read::new(types::Fd(fd), v.iov_base.cast(), v.iov_len as u32)
                        .offset(off)
                        .build()
                }
                (_, true, _) => opcode::Writev::new(types::Fd(fd), v, 1).offset(off).build(),
                (_, false, _) => opcode::Readv::new(types::Fd(fd), v, 1).offset(off).build(),
            };
            // SAFETY: the iovec and the memory it names outlive the ring (both live until this function returns,
            // and every request is reaped before it does).
            unsafe { ring.submission().push(&entry.user_data(i as u64)) }
                .map_err(|_| std::io::Error::other("submission queue full"))?;
            next += 1;
            in_flight += 1;
        }
        ring.submit_and_wait(1)?;
        for cqe in ring.completion() {
            if cqe.result() < 0 {
                return Err(std::io::Error::from_raw_os_error(-cqe.result()));
            }
            let i = cqe.user_data() as usize;
            if cqe.result() as usize != iovs[i].iov_len {
                return Err(std::io::Error::other("short transfer"));
            }
            done += 1;
            in_flight -= 1;
        }
    }
    Ok(())
}

fn run(
    fd: RawFd,
    mem: &Memory,
    block: usize,
    depth: usize,
    write: bool,
    v: Variant,
) -> std::io::Result<f64> {
    drop_caches();
    let start = Instant::now();
    if let Variant::TwoRings = v {
        let half = (mem.len / 2).next_multiple_of(block);
        std::thread::scope(|s| {
            let a = s.spawn(|| {
                pass(
                    fd,
                    mem.ptr,
                    0,
                    half,
                    block,
                    depth / 2,
                    write,
                    Variant::Readv,
                )
            });
            let b = pass(
                fd,
                mem.ptr.wrapping_add(half),
                half as u64,
                mem.len - half,
                block,
                depth - depth / 2,
                write,
                Variant::Readv,
            );
            a.join()
                .map_err(|_| std::io::Error::other("ring thread panicked"))??;
            b
        })?;
    } else {
        pass(fd, mem.ptr, 0, mem.len, block, depth, write, v)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// oversub's one median; NaN when there are no samples (the table then shows it).
fn median(v: Vec<f64>) -> f64 {
    oversub_base::stats::median(&v).unwrap_or(f64::NAN)
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .cloned()
        .unwrap_or_else(|| std::env::temp_dir().display().to_string());
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (size, block, depth, samples) = (
        num(1, 1024) << 20,
        num(2, 4096) << 10,
        num(3, 32).max(2),
        num(4, 5).max(1),
    );
    let path =
        std::path::Path::new(&dir).join(format!("uring-variants-{}.dat", std::process::id()));
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(std::io::Error::other)?;
    // SAFETY: plain open(2) of a NUL-terminated path; the descriptor is owned below.
    let raw = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_DIRECT | libc::O_CLOEXEC,
            0o600,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: open just returned this descriptor.
    let file = unsafe { OwnedFd::from_raw_fd(raw) };
    let _ = std::fs::remove_file(&path);
    let fd = file.as_raw_fd();
    let small = Memory::new(size, false)?;
    let huge = Memory::new(size, true)?;
    run(fd, &small, block, depth, true, Variant::Readv)?; // the file's blocks exist before any timing
    println!(
        "{} MiB O_DIRECT in {dir}, {} KiB requests, queue depth {depth}, medians of {samples}",
        size >> 20,
        block >> 10
    );
    let mut times = vec![(Vec::new(), Vec::new()); VARIANTS.len()];
    // Round 0 is untimed: on a VM the host's cache of the disk image settles over the first passes.
    for s in 0..=samples {
        eprintln!("sample {s}/{samples}");
        for (i, v) in VARIANTS.iter().enumerate() {
            let mem = if matches!(v, Variant::HugePages) {
                &huge
            } else {
                &small
            };
            let (w, r) = (
                run(fd, mem, block, depth, true, *v)?,
                run(fd, mem, block, depth, false, *v)?,
            );
            if s > 0 {
                times[i].0.push(w);
                times[i].1.push(r);
            }
        }
    }
    let gib = size as f64 / (1u64 << 30) as f64;
    let (base_w, base_r) = (median(times[0].0.clone()), median(times[0].1.clone()));
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10}",
        "variant", "write GiB/s", "x readv", "read GiB/s", "x readv"
    );
    for (v, (w, r)) in VARIANTS.iter().zip(times) {
        let (w, r) = (median(w), median(r));
        println!(
            "{:<14} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            format!("{v:?}"),
            gib / w,
            base_w / w,
            gib / r,
            base_r / r
        );
    }
    Ok(())
}
