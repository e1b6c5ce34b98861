//! The space's lock is never held across I/O or an arbiter wait: while one thread's direct read of a buffer waits
//! for the arbiter (a CPU task is in a long memory phase, so no transfer may run), other threads still use the
//! space — they look buffers up, allocate, and start page-outs (which queue behind the grant) — and the read
//! completes once the task computes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::{engines, pattern, store_with, MIB};
use oversub_accel::HostMemory;
use oversub_arbiter::{Arbiter, ArbiterConfig, Gate};
use oversub_core::{BufferFlags, BufferState, Pool, PoolConfig};

/// The CPU task's memory phase: the direct read cannot start before it ends. The other thread's few calls must
/// all return inside it, which they do in milliseconds unless the read holds the space's lock.
const MEMORY_PHASE: Duration = Duration::from_secs(8);

#[test]
fn a_direct_read_waiting_for_the_arbiter_does_not_block_the_space() {
    // The lock does not depend on the engine: one is enough.
    if let Some((name, engine)) = engines().pop() {
        eprintln!("{name}");
        let arbiter = Arbiter::in_process(ArbiterConfig {
            chunk_bytes: 256 << 10,
            chunk_time: Some(Duration::from_micros(500)),
            ..ArbiterConfig::default()
        })
        .unwrap();
        let task = arbiter.register_task().unwrap();
        let pool = Pool::new(
            PoolConfig::new(32 * MIB)
                .gate(Arc::new(Gate::new(arbiter)))
                .gate_calibration_samples(0),
            Arc::new(HostMemory::default()),
            store_with(engine, 64 * MIB, 1 << 20),
        )
        .unwrap();
        let space = pool.address_space();
        let a = space.alloc(2 * MIB, BufferFlags::DEFAULT).unwrap();
        let b = space.alloc(2 * MIB, BufferFlags::DEFAULT).unwrap();
        let bytes = pattern(9, (2 * MIB) as usize);
        space.write(a, 0, &bytes).unwrap();
        space.page_out(a).unwrap();
        // From now on no transfer is admitted until the task computes.
        task.mem(MEMORY_PHASE).unwrap();
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut back = vec![0u8; bytes.len()];
                space.read_direct(a, 0, &mut back).unwrap();
                back
            });
            let (tx, rx) = mpsc::channel();
            let other = space.clone();
            scope.spawn(move || {
                // Give the reader time to be inside its wait (no assertion depends on it).
                std::thread::sleep(Duration::from_millis(200));
                assert_eq!(other.info(a).unwrap().state, BufferState::PagedOut);
                let c = other.alloc(MIB, BufferFlags::DEFAULT).unwrap();
                let ticket = other.page_out_async(b).unwrap();
                tx.send(()).unwrap();
                (c, ticket)
            });
            rx.recv().unwrap();
            assert!(
                !reader.is_finished(),
                "the other thread's calls returned only after the read: the space was locked across its wait \
                 (or the machine took longer than the whole memory phase for them)"
            );
            task.com(Duration::from_secs(3600)).unwrap();
            let back = reader.join().unwrap();
            assert!(back == bytes);
        });
        task.no_oper().unwrap();
        assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
    }
}
