//! The pager on a real GPU (the cuda backend over the real driver). Opt-in: `OVERSUB_TEST_CUDA=1`; without it every
//! test says it is skipped and returns at once (CI has no GPU). Checks what only hardware can: round trips keep the
//! device address and every byte at sizes that are and are not multiples of the granularity, a kernel reading the
//! buffer after page-in sees the data, device memory in use (cuMemGetInfo) falls by the buffer's size after page-out,
//! and many buffers past the pool's capacity cycle through without loss.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{pattern, MIB};
use oversub_accel::cuda::{CudaMemory, CudaMemoryConfig};
use oversub_accel::DeviceMemory;
use oversub_core::{BufferFlags, BufferState, HostTierConfig, Pool, PoolConfig, StagingConfig};
use oversub_io::SwapStore;
use oversub_testkit::require;

fn cuda_pool(capacity: u64, store_bytes: u64, tier: Option<u64>) -> (Pool, Arc<CudaMemory>) {
    let cuda = Arc::new(CudaMemory::new(CudaMemoryConfig::default()).unwrap());
    let device: Arc<dyn DeviceMemory> = cuda.clone();
    let store = SwapStore::builder()
        .capacity_bytes(store_bytes)
        .create_temp(&std::env::temp_dir())
        .unwrap();
    let mut config = PoolConfig::new(capacity).staging(StagingConfig {
        chunk_bytes: 8 * MIB,
        chunks: 4,
        ..StagingConfig::default()
    });
    if let Some(bytes) = tier {
        config = config.host_tier(HostTierConfig {
            capacity_bytes: bytes,
            pinned: true,
        });
    }
    (Pool::new(config, device, Arc::new(store)).unwrap(), cuda)
}

#[test]
fn gpu_round_trips_keep_address_and_bytes() {
    require!(oversub_testkit::cuda_opted_in(), "needs a GPU");
    let (pool, cuda) = cuda_pool(4096 * MIB, 4096 * MIB, None);
    let g = cuda.granularity() as u64;
    eprintln!("transfer path: {}, granularity {g}", pool.transfer_path());
    let space = pool.address_space();
    for size in [g, 5 * g + 12345, 300 * MIB + 7] {
        let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
        let data = pattern(size, size as usize);
        space.write(b, 0, &data).unwrap();
        let addr = space.info(b).unwrap().addr;
        let (free_before, _) = cuda.memory_info().unwrap().unwrap();
        space.page_out(b).unwrap();
        let (free_after, _) = cuda.memory_info().unwrap().unwrap();
        let reserved = space.info(b).unwrap().reserved_bytes;
        assert!(
            free_after >= free_before + reserved - 2 * MIB,
            "device memory in use falls by the buffer's size: {free_before} -> {free_after}, buffer {reserved}"
        );
        space.page_in(b).unwrap();
        assert_eq!(space.info(b).unwrap().addr, addr);
        let mut back = vec![0u8; size as usize];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == data, "size {size}");
        space.free(b).unwrap();
    }
}

#[test]
fn gpu_kernel_sees_the_data_after_page_in() {
    use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
    require!(oversub_testkit::cuda_opted_in(), "needs a GPU");
    let (pool, _cuda) = cuda_pool(1024 * MIB, 1024 * MIB, Some(256 * MIB));
    let space = pool.address_space();
    let n: usize = 64 * MIB as usize;
    let b = space.alloc(n as u64, BufferFlags::DEFAULT).unwrap();
    let data = pattern(42, n);
    space.write(b, 0, &data).unwrap();
    let addr = space.info(b).unwrap().addr.0;
    for tier in [true, false] {
        space.page_out(b).unwrap();
        assert_eq!(space.info(b).unwrap().in_host_tier, tier);
        space.page_in(b).unwrap();
        // A kernel on another stream copies the buffer byte by byte into a fresh allocation.
        let ctx = CudaContext::new(0).unwrap();
        let stream = ctx.default_stream();
        let ptx = cudarc::nvrtc::compile_ptx(
            r#"extern "C" __global__ void copy_bytes(const unsigned char* src, unsigned char* dst, unsigned long long n) {
                for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
                     i += (unsigned long long)gridDim.x * blockDim.x) dst[i] = src[i];
            }"#,
        )
        .unwrap();
        let module = ctx.load_module(ptx).unwrap();
        let f = module.load_function("copy_bytes").unwrap();
        let mut out = stream.alloc_zeros::<u8>(n).unwrap();
        let n64 = n as u64;
        let mut launch = stream.launch_builder(&f);
        launch.arg(&addr).arg(&mut out).arg(&n64);
        // SAFETY: the kernel reads n bytes at the paged-in buffer's address and writes n bytes of `out`.
        unsafe { launch.launch(LaunchConfig::for_num_elems(1 << 20)) }.unwrap();
        let host = stream.clone_dtoh(&out).unwrap();
        assert!(
            host == data,
            "the kernel reads the paged-in bytes (host tier used: {tier})"
        );
        // Next round through the store: fill the tier.
        if tier {
            let filler = space.alloc(256 * MIB, BufferFlags::DEFAULT).unwrap();
            space.page_out(filler).unwrap();
        }
    }
}

#[test]
fn gpu_buffers_past_the_pool_cycle_without_loss() {
    require!(oversub_testkit::cuda_opted_in(), "needs a GPU");
    // A 1 GiB pool and sixteen 256 MiB buffers: four fit at once.
    let (pool, _cuda) = cuda_pool(1024 * MIB, 8192 * MIB, Some(1024 * MIB));
    let space = pool.address_space();
    let size = 256 * MIB;
    let mut bufs = Vec::new();
    for i in 0..16u64 {
        if i >= 4 {
            space.page_out(bufs[(i - 4) as usize]).unwrap();
        }
        let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
        space.write(b, 0, &pattern(i, 4096)).unwrap();
        space
            .write(b, size - 4096, &pattern(i + 100, 4096))
            .unwrap();
        bufs.push(b);
    }
    for round in 0..2 {
        for (i, b) in bufs.iter().enumerate() {
            if space.info(*b).unwrap().state == BufferState::PagedOut {
                // The buffer paged in four steps ago (four fit): the one whose next use is furthest away.
                let victim = bufs[(i + 12) % 16];
                if space.info(victim).unwrap().state == BufferState::Resident {
                    space.page_out(victim).unwrap();
                }
                space.page_in(*b).unwrap();
            }
            let mut head = vec![0u8; 4096];
            space.read(*b, 0, &mut head).unwrap();
            assert!(head == pattern(i as u64, 4096), "round {round}, buffer {i}");
            space.read(*b, size - 4096, &mut head).unwrap();
            assert!(
                head == pattern(i as u64 + 100, 4096),
                "round {round}, buffer {i}"
            );
        }
    }
}
