#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The priority queue in front of an engine: a high-priority batch overtakes the queued requests of a low one, a
//! batch passed over `bound` times is served next (no starvation), a failed request fails only its own batch
//! (the rest of it is not started), every batch completes exactly once (a proptest over random schedules), and a
//! store built with `priority_io` serves a tenant's slot before a victim's queued transfer on a real file.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oversub_io::testing::{AlignedBuf, RecordedRequest, RecordingEngine};
use oversub_io::{
    Direction, IoCallback, IoCountersSnapshot, IoDone, IoEngine, IoError, IoRequest, IoVec,
    PriorityEngine, PsyncEngine, SwapStore,
};
use proptest::prelude::*;

/// An engine that holds every request until the test completes it: the order in which requests reach it is the
/// order the priority queue chose.
#[derive(Default)]
struct HeldEngine {
    held: Mutex<VecDeque<(u64, IoCallback)>>,
    seen: Mutex<Vec<u64>>,
    fail_offsets: Mutex<Vec<u64>>,
}

impl HeldEngine {
    /// Completes the oldest request held; false when none is.
    fn complete_one(&self) -> bool {
        let next = self.held.lock().unwrap().pop_front();
        match next {
            Some((offset, cb)) => {
                let fail = self.fail_offsets.lock().unwrap().contains(&offset);
                cb(if fail {
                    Err(IoError::InvalidArgument(format!("injected at {offset}")))
                } else {
                    Ok(IoDone { bytes: 1 })
                });
                true
            }
            None => false,
        }
    }

    fn seen(&self) -> Vec<u64> {
        self.seen.lock().unwrap().clone()
    }
}

impl std::fmt::Debug for HeldEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldEngine")
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

// SAFETY: it never touches the requests' memory; each callback runs exactly once, when the test completes it.
unsafe impl IoEngine for HeldEngine {
    fn name(&self) -> &'static str {
        "held"
    }

    fn queue_depth(&self) -> usize {
        1
    }

    unsafe fn submit(&self, requests: Vec<IoRequest>, on_done: IoCallback) -> Result<(), IoError> {
        assert_eq!(
            requests.len(),
            1,
            "the priority engine feeds one request at a time"
        );
        self.seen.lock().unwrap().push(requests[0].offset);
        self.held
            .lock()
            .unwrap()
            .push_back((requests[0].offset, on_done));
        Ok(())
    }

    fn counters(&self) -> IoCountersSnapshot {
        IoCountersSnapshot::default()
    }
}

/// A batch of `n` one-byte reads at offsets `base`, `base + 1`, … (the memory is never touched).
fn batch(base: u64, n: u64) -> Vec<IoRequest> {
    (0..n)
        .map(|i| IoRequest {
            fd: 0,
            direction: Direction::Read,
            offset: base + i,
            iovecs: vec![IoVec {
                ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 1,
            }],
        })
        .collect()
}

type Results = Arc<Mutex<Vec<(u64, Result<u64, String>)>>>;

fn submit(engine: &PriorityEngine, base: u64, n: u64, priority: i64, results: &Results) {
    let results = Arc::clone(results);
    let cb: IoCallback = Box::new(move |r| {
        results
            .lock()
            .unwrap()
            .push((base, r.map(|d| d.bytes).map_err(|e| e.to_string())));
    });
    // SAFETY: the held engine never touches the memory.
    unsafe { engine.submit_with_priority(batch(base, n), priority, false, cb) }.unwrap();
}

#[test]
fn a_high_priority_batch_overtakes_queued_low_priority_requests() {
    let held = Arc::new(HeldEngine::default());
    let engine = PriorityEngine::with_window(held.clone(), 1, 64);
    let results: Results = Arc::default();
    submit(&engine, 100, 8, -2, &results); // the victim's bulk transfer
    submit(&engine, 200, 3, 0, &results); // the top tenant's page-in, behind it
    while held.complete_one() {}
    assert_eq!(
        held.seen(),
        vec![100, 200, 201, 202, 101, 102, 103, 104, 105, 106, 107],
        "only the request already started goes before the high-priority batch"
    );
    let r = results.lock().unwrap().clone();
    assert_eq!(r, vec![(200, Ok(3)), (100, Ok(8))]);
}

#[test]
fn equal_priorities_keep_their_order_and_plain_submit_is_priority_zero() {
    let held = Arc::new(HeldEngine::default());
    let engine = PriorityEngine::with_window(held.clone(), 2, 64);
    let results: Results = Arc::default();
    submit(&engine, 100, 3, 0, &results);
    submit(&engine, 200, 2, 0, &results);
    // SAFETY: the held engine never touches the memory.
    unsafe { engine.submit(batch(300, 1), Box::new(|r| assert!(r.is_ok()))) }.unwrap();
    while held.complete_one() {}
    assert_eq!(held.seen(), vec![100, 101, 102, 200, 201, 300]);
}

#[test]
fn a_batch_passed_over_bound_times_is_served_next() {
    let held = Arc::new(HeldEngine::default());
    let bound = 4;
    let engine = PriorityEngine::with_window(held.clone(), 1, bound);
    let results: Results = Arc::default();
    submit(&engine, 0, 3, -5, &results); // low priority, three requests
                                         // A steady stream of high-priority work: one new single-request batch after every completion.
    for i in 0..40u64 {
        submit(&engine, 1000 + i, 1, 10, &results);
        assert!(held.complete_one());
    }
    while held.complete_one() {}
    let seen = held.seen();
    let lows: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, &o)| o < 1000)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(lows.len(), 3);
    // Between consecutive low requests (and before the second), at most `bound` high ones ran.
    for w in lows.windows(2) {
        assert!(
            w[1] - w[0] - 1 <= bound as usize,
            "low request waited past the bound: {seen:?}"
        );
    }
    assert!(lows[2] < 3 * (bound as usize + 1), "{seen:?}");
}

#[test]
fn a_failed_request_fails_its_batch_and_drops_the_rest_of_it() {
    let held = Arc::new(HeldEngine::default());
    held.fail_offsets.lock().unwrap().push(101);
    let engine = PriorityEngine::with_window(held.clone(), 1, 64);
    let results: Results = Arc::default();
    submit(&engine, 100, 5, 0, &results);
    submit(&engine, 200, 2, -1, &results);
    while held.complete_one() {}
    // 102.. were never started; the other batch ran whole.
    assert_eq!(held.seen(), vec![100, 101, 200, 201]);
    let r = results.lock().unwrap().clone();
    assert_eq!(r.len(), 2);
    assert!(matches!(&r[0], (100, Err(e)) if e.contains("injected at 101")));
    assert_eq!(r[1], (200, Ok(2)));
}

proptest! {
    /// Random batches (sizes, priorities) submitted between random completions, with random failures: every
    /// batch's callback runs exactly once, with every byte of a batch that had no failure, an error for one that
    /// had one, and the window is never exceeded.
    #[test]
    fn every_batch_completes_once(
        steps in proptest::collection::vec((0u64..6, -3i64..3, 0u8..4, proptest::bool::weighted(0.1)), 1..40),
        window in 1usize..4,
    ) {
        let held = Arc::new(HeldEngine::default());
        let engine = PriorityEngine::with_window(held.clone(), window, 8);
        let results: Results = Arc::default();
        let mut expected = Vec::new();
        for (i, &(n, priority, completions, fail)) in steps.iter().enumerate() {
            let base = (i as u64 + 1) * 100;
            if fail && n > 0 {
                held.fail_offsets.lock().unwrap().push(base);
            }
            submit(&engine, base, n, priority, &results);
            expected.push((base, n, fail && n > 0));
            for _ in 0..completions {
                held.complete_one();
            }
            prop_assert!(held.held.lock().unwrap().len() <= window);
        }
        while held.complete_one() {}
        let r = results.lock().unwrap().clone();
        prop_assert_eq!(r.len(), expected.len());
        for (base, n, failed) in expected {
            let got: Vec<_> = r.iter().filter(|(b, _)| *b == base).collect();
            prop_assert_eq!(got.len(), 1);
            if failed {
                prop_assert!(got[0].1.is_err());
            } else {
                prop_assert_eq!(&got[0].1, &Ok(n));
            }
        }
    }
}

#[test]
fn a_store_with_priority_io_serves_the_higher_slot_first() {
    // A real file and engine behind the queue, one request in flight at a time. The low batch's second request
    // waits (in the recorder's observer, on the engine thread) until the high batch is queued, so the order does
    // not depend on how fast this thread runs.
    let dir = tempfile::tempdir().unwrap();
    let high_queued = Arc::new(AtomicBool::new(false));
    let requests_seen = Arc::new(AtomicUsize::new(0));
    let observer = {
        let (high_queued, requests_seen) = (high_queued.clone(), requests_seen.clone());
        Box::new(move |_: &RecordedRequest| {
            if requests_seen.fetch_add(1, Ordering::SeqCst) == 1 {
                while !high_queued.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        })
    };
    let recording = Arc::new(RecordingEngine::with_observer(
        Arc::new(PsyncEngine::new(1).unwrap()),
        observer,
    ));
    let engine = Arc::new(PriorityEngine::with_window(recording.clone(), 1, 64));
    let store = SwapStore::builder()
        .capacity_bytes(8 << 20)
        .max_io_bytes(64 << 10)
        .engine(engine)
        .create_temp(dir.path())
        .unwrap();
    let mut low = store.allocate(4 << 20).unwrap();
    let mut high = store.allocate(256 << 10).unwrap();
    let low_prio = Arc::new(AtomicI64::new(-2));
    low.set_priority(low_prio.clone());
    high.set_priority(Arc::new(AtomicI64::new(0)));
    assert_eq!((low.priority(), high.priority()), (-2, 0));
    let align = store.alignment();
    let mut a = AlignedBuf::new(4 << 20, align).unwrap();
    let mut b = AlignedBuf::new(256 << 10, align).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx2 = tx.clone();
    // SAFETY: both buffers outlive the batches: we wait for both callbacks below.
    unsafe {
        store
            .submit(
                Direction::Read,
                &low,
                &[a.iovec()],
                Box::new(move |r| tx.send(("low", r.is_ok())).unwrap()),
            )
            .unwrap();
        store
            .submit(
                Direction::Read,
                &high,
                &[b.iovec()],
                Box::new(move |r| tx2.send(("high", r.is_ok())).unwrap()),
            )
            .unwrap();
    }
    high_queued.store(true, Ordering::SeqCst);
    let first = rx.recv().unwrap();
    let second = rx.recv().unwrap();
    assert_eq!((first, second), (("high", true), ("low", true)));
    // Of the low slot's 64 requests, only those started before the high batch was queued (one or two) ran first.
    let order: Vec<u64> = recording.requests().iter().map(|r| r.offset).collect();
    let high_start = high.extents()[0].offset;
    let is_high = |o: u64| o >= high_start && o < high_start + (256 << 10);
    let first_high = order.iter().position(|&o| is_high(o)).unwrap();
    assert!((1..=2).contains(&first_high), "{order:?}");
    assert!(
        order[first_high..first_high + 4]
            .iter()
            .all(|&o| is_high(o)),
        "{order:?}"
    );
    // The priority is read at each submission: lowering a tenant later applies at once.
    low_prio.store(-9, Ordering::Relaxed);
    assert_eq!(low.priority(), -9);
    store.release(low);
    store.release(high);
}
