//! Shared set-up for the pager tests: a pool over the host backend and a real swap file, on each I/O engine.
#![allow(dead_code)]

use std::sync::Arc;

use oversub_accel::{DeviceMemory, HostMemory};
use oversub_core::{Pool, PoolConfig};
use oversub_io::{IoEngine, PsyncEngine, SwapStore, UringEngine};

pub const MIB: u64 = 1 << 20;

/// Every I/O engine this machine has: psync always, io_uring where the kernel lets us.
pub fn engines() -> Vec<(&'static str, Arc<dyn IoEngine>)> {
    let mut v: Vec<(&'static str, Arc<dyn IoEngine>)> =
        vec![("psync", Arc::new(PsyncEngine::new(8).unwrap()))];
    match UringEngine::new(32) {
        Ok(e) => v.push(("io_uring", Arc::new(e))),
        Err(e) => eprintln!("io_uring unavailable here, testing psync only: {e}"),
    }
    v
}

pub fn store_with(engine: Arc<dyn IoEngine>, capacity: u64, max_io: usize) -> Arc<SwapStore> {
    Arc::new(
        SwapStore::builder()
            .capacity_bytes(capacity)
            .max_io_bytes(max_io)
            .engine(engine)
            .create_temp(&std::env::temp_dir())
            .unwrap(),
    )
}

pub fn pool_with(engine: Arc<dyn IoEngine>, capacity: u64, store_capacity: u64) -> Pool {
    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
    Pool::new(
        PoolConfig::new(capacity).verify_checksums(true),
        device,
        store_with(engine, store_capacity, 1 << 20),
    )
    .unwrap()
}

/// Deterministic bytes that differ per buffer and per position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
