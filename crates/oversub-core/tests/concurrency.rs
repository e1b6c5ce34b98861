//! Many threads paging many buffers at random end with every buffer's bytes intact; a property test checks the
//! state machine against a model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::*;
use oversub_core::{AddressSpace, Buffer, BufferFlags, BufferState, PagerError};
use proptest::prelude::*;

use oversub_base::rng::Rng;

fn expected_ok_or_refused(r: Result<(), PagerError>) {
    match r {
        Ok(())
        | Err(PagerError::AlreadyResident(_))
        | Err(PagerError::AlreadyPagedOut(_))
        | Err(PagerError::OperationInFlight { .. })
        | Err(PagerError::NotResident { .. })
        | Err(PagerError::OutOfMemory { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn random_threads(engine: Arc<dyn oversub_io::IoEngine>) {
    const THREADS: usize = 6;
    const BUFFERS: usize = 24;
    // Capacity below the total so page-ins sometimes find no room.
    let pool = pool_with(engine, 20 * MIB, 64 * MIB);
    let spaces = [pool.address_space(), pool.address_space()];
    let bufs: Vec<(AddressSpace, Buffer, usize)> = (0..BUFFERS)
        .map(|i| {
            let space = spaces[i % 2].clone();
            let size = 4096 * (1 + i * 37 % 300) + i * 11;
            let flags = if i % 5 == 0 {
                BufferFlags::READ_ONLY
            } else {
                BufferFlags::DEFAULT
            };
            let b = match space.alloc(size as u64, flags) {
                Ok(b) => b,
                Err(PagerError::OutOfMemory { .. }) => {
                    space.page_out_all().unwrap();
                    space.alloc(size as u64, flags).unwrap()
                }
                Err(e) => panic!("{e}"),
            };
            space.write(b, 0, &pattern(i as u64 * 1000, size)).unwrap();
            (space, b, size)
        })
        .collect();
    let bufs = Arc::new(bufs);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let bufs = Arc::clone(&bufs);
            std::thread::spawn(move || {
                let mut rng = Rng::new(0x1234_5678 + t as u64 * 7919);
                // version[i] for the buffers this thread owns (i % THREADS == t): only owners write.
                let mut version = vec![0u64; BUFFERS];
                for _ in 0..300 {
                    let i = rng.below(BUFFERS as u64) as usize;
                    let (space, b, size) = &bufs[i];
                    match rng.below(6) {
                        0 => expected_ok_or_refused(space.page_out(*b)),
                        1 => expected_ok_or_refused(space.page_in(*b)),
                        2 => match space.page_out_async(*b) {
                            Ok(ticket) => expected_ok_or_refused(ticket.finish()),
                            Err(e) => expected_ok_or_refused(Err(e)),
                        },
                        3 => match space.page_in_async(*b) {
                            Ok(ticket) => {
                                std::thread::yield_now();
                                expected_ok_or_refused(space.finish(ticket))
                            }
                            Err(e) => expected_ok_or_refused(Err(e)),
                        },
                        4 if i % THREADS == t && i % 5 != 0 => {
                            let v = version[i] + 1;
                            if space
                                .write(*b, 0, &pattern(i as u64 * 1000 + v, *size))
                                .is_ok()
                            {
                                version[i] = v;
                            }
                        }
                        _ if i % THREADS == t => {
                            let mut back = vec![0u8; *size];
                            if space.read(*b, 0, &mut back).is_ok() {
                                assert!(
                                    back == pattern(i as u64 * 1000 + version[i], *size),
                                    "buffer {i} corrupted"
                                );
                            }
                        }
                        _ => {}
                    }
                }
                version
            })
        })
        .collect();
    let mut version = [0u64; BUFFERS];
    for (t, h) in handles.into_iter().enumerate() {
        let v = h.join().unwrap();
        for i in (t..BUFFERS).step_by(THREADS) {
            version[i] = v[i];
        }
    }
    for (i, (space, b, size)) in bufs.iter().enumerate() {
        if space.info(*b).unwrap().state == BufferState::PagedOut {
            // Make room by paging out the other space's buffers if needed.
            if space.page_in(*b).is_err() {
                for s in &spaces {
                    s.page_out_all().unwrap();
                }
                space.page_in(*b).unwrap();
            }
        }
        let mut back = vec![0u8; *size];
        space.read(*b, 0, &mut back).unwrap();
        assert!(
            back == pattern(i as u64 * 1000 + version[i], *size),
            "buffer {i} corrupted at the end"
        );
    }
}

#[test]
fn many_threads_random_operations_keep_every_byte() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        random_threads(engine);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(u32, bool),
    Free(usize),
    Out(usize),
    In(usize),
    OutAsync(usize),
    InAsync(usize),
    Write(usize, u8),
    OutAll,
    InAll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u32..300_000, any::<bool>()).prop_map(|(s, ro)| Op::Alloc(s, ro)),
        (0usize..8).prop_map(Op::Free),
        (0usize..8).prop_map(Op::Out),
        (0usize..8).prop_map(Op::In),
        (0usize..8).prop_map(Op::OutAsync),
        (0usize..8).prop_map(Op::InAsync),
        (0usize..8, any::<u8>()).prop_map(|(i, v)| Op::Write(i, v)),
        Just(Op::OutAll),
        Just(Op::InAll),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn state_machine_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let (_, engine) = engines().remove(0);
        let pool = pool_with(engine, 2 * MIB, 4 * MIB);
        let space = pool.address_space();
        // Model: (handle, size, fill byte, resident, read_only, stored once).
        let mut model: Vec<(Buffer, usize, u8, bool, bool, bool)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(size, ro) => {
                    let flags = if ro { BufferFlags::READ_ONLY } else { BufferFlags::DEFAULT };
                    match space.alloc(size as u64, flags) {
                        Ok(b) => model.push((b, size as usize, 0, true, ro, false)),
                        Err(PagerError::OutOfMemory { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Free(i) if i < model.len() => {
                    let (b, ..) = model.remove(i);
                    space.free(b).unwrap();
                }
                Op::Out(i) | Op::OutAsync(i) if i < model.len() => {
                    let res = if matches!(op, Op::Out(_)) { space.page_out(model[i].0) } else { space.page_out_async(model[i].0).and_then(|t| t.finish()) };
                    match res {
                        Ok(()) => { prop_assert!(model[i].3); model[i].3 = false; model[i].5 = true; }
                        Err(PagerError::AlreadyPagedOut(_)) => prop_assert!(!model[i].3),
                        Err(PagerError::Store(oversub_io::IoError::StoreFull { .. })) => prop_assert!(model[i].3),
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::In(i) | Op::InAsync(i) if i < model.len() => {
                    let res = if matches!(op, Op::In(_)) { space.page_in(model[i].0) } else { space.page_in_async(model[i].0).and_then(|t| t.finish()) };
                    match res {
                        Ok(()) => { prop_assert!(!model[i].3); model[i].3 = true; }
                        Err(PagerError::AlreadyResident(_)) => prop_assert!(model[i].3),
                        Err(PagerError::OutOfMemory { .. }) => prop_assert!(!model[i].3),
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Write(i, v) if i < model.len() => {
                    let (b, size, _, resident, ro, stored) = model[i];
                    let r = space.write(b, 0, &vec![v; size]);
                    let allowed = resident && !(ro && stored);
                    prop_assert_eq!(r.is_ok(), allowed);
                    if allowed { model[i].2 = v; }
                }
                Op::OutAll => {
                    // May stop early on a full store; resync the model from the pager.
                    let _ = space.page_out_all();
                    for m in model.iter_mut() { let info = space.info(m.0).unwrap(); m.3 = info.state == BufferState::Resident; m.5 |= info.stored; }
                }
                Op::InAll => {
                    let _ = space.page_in_all();
                    for m in model.iter_mut() { m.3 = space.info(m.0).unwrap().state == BufferState::Resident; }
                }
                _ => {}
            }
            let used: u64 = model.iter().filter(|m| m.3).map(|m| space.info(m.0).unwrap().reserved_bytes).sum();
            prop_assert_eq!(pool.stats().used_bytes, used);
        }
        for (b, size, v, resident, _, _) in &model {
            prop_assert_eq!(space.info(*b).unwrap().state == BufferState::Resident, *resident);
            if *resident {
                let mut back = vec![0u8; *size];
                space.read(*b, 0, &mut back).unwrap();
                prop_assert!(back.iter().all(|x| x == v));
            }
        }
    }
}

/// Alloc and free racing in several spaces: the kernel hands freed addresses straight out again, which must never
/// confuse one buffer's reservation with another's.
#[test]
fn concurrent_alloc_and_free_across_spaces() {
    let (_, engine) = engines().remove(0);
    let pool = pool_with(engine, 64 * MIB, 64 * MIB);
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let space = pool.address_space();
            std::thread::spawn(move || {
                for round in 0..150u64 {
                    let size = 4096 * (1 + (round * 7 + t) % 16) as usize;
                    let b = space.alloc(size as u64, BufferFlags::DEFAULT).unwrap();
                    let data = pattern(t * 1000 + round, size);
                    space.write(b, 0, &data).unwrap();
                    if round % 3 == 0 {
                        space.page_out(b).unwrap();
                        space.page_in(b).unwrap();
                    }
                    let mut back = vec![0u8; size];
                    space.read(b, 0, &mut back).unwrap();
                    assert!(back == data, "thread {t} round {round}");
                    space.free(b).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(pool.stats().used_bytes, 0);
    assert_eq!(
        pool.stats().store_free_bytes,
        pool.stats().store_capacity_bytes
    );
}
