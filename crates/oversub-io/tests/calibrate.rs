#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `SwapStore::calibrate` (the `auto` I/O point): it measures the grid it is given, adopts the best points, gives
//! its space back, and refuses what it cannot measure. One body, run on both engines.

use std::sync::Arc;

use oversub_io::testing::{AlignedBuf, CountingEngine};
use oversub_io::tuning::Calibration;
use oversub_io::{Direction, EngineChoice, IoError, PsyncEngine, SwapStore};
use oversub_testkit::require;

const MIB: u64 = 1 << 20;

fn small_grid() -> Calibration {
    Calibration {
        bytes: 4 * MIB,
        blocks: vec![(MIB / 2) as usize, 2 * MIB as usize],
        depths: vec![1, 4],
        passes: 1,
    }
}

fn calibrates_and_keeps_working(choice: EngineChoice) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = SwapStore::builder()
        .capacity_bytes(16 * MIB)
        .engine_choice(choice)
        .create_temp(dir.path())
        .unwrap();
    let free = store.free_bytes();
    let done = store.calibrate(&small_grid()).unwrap();
    assert_eq!(done.grid.len(), 4, "every point of the grid is measured");
    assert!(done
        .grid
        .iter()
        .all(|p| p.read_bytes_per_s > 0.0 && p.write_bytes_per_s > 0.0));
    assert!(done
        .grid
        .iter()
        .any(|p| p.block_bytes as usize == done.read.block_bytes
            && p.queue_depth as usize == done.read.queue_depth));
    assert_eq!(store.max_io_bytes(), done.read.block_bytes);
    assert_eq!(store.max_write_io_bytes(), done.write.block_bytes);
    assert_eq!(
        store.engine().queue_depth(),
        done.read.queue_depth.max(done.write.queue_depth)
    );
    assert_eq!(
        store.free_bytes(),
        free,
        "the calibration's space is given back"
    );
    // The store still moves bytes correctly with its new settings.
    let slot = store.allocate(3 * MIB).unwrap();
    let mut out = AlignedBuf::new(3 * MIB as usize, store.alignment()).unwrap();
    for (i, b) in out.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let mut back = AlignedBuf::new(3 * MIB as usize, store.alignment()).unwrap();
    // SAFETY: both buffers outlive the blocking transfers.
    unsafe {
        store
            .transfer(Direction::Write, &slot, &[out.iovec()])
            .unwrap();
        store
            .transfer(Direction::Read, &slot, &[back.iovec()])
            .unwrap();
    }
    assert_eq!(out.as_slice(), back.as_slice());
    store.release(slot);
}

#[test]
fn calibrates_and_keeps_working_psync() {
    calibrates_and_keeps_working(EngineChoice::Psync);
}

#[test]
fn calibrates_and_keeps_working_uring() {
    require!(
        oversub_testkit::io_uring_usable(),
        "io_uring is not usable here"
    );
    calibrates_and_keeps_working(EngineChoice::Uring);
}

#[test]
fn refuses_what_it_cannot_measure() {
    let dir = tempfile::tempdir().unwrap();
    // A test double is not an engine calibration can build more of.
    let double = Arc::new(CountingEngine::new(Arc::new(PsyncEngine::new(4).unwrap())));
    let mut store = SwapStore::builder()
        .capacity_bytes(8 * MIB)
        .engine(double)
        .create_temp(dir.path())
        .unwrap();
    let err = store.calibrate(&small_grid()).unwrap_err();
    assert!(err.to_string().contains("not a built-in engine"), "{err}");

    let mut store = SwapStore::builder()
        .capacity_bytes(8 * MIB)
        .engine_choice(EngineChoice::Psync)
        .create_temp(dir.path())
        .unwrap();
    let empty = Calibration {
        blocks: vec![],
        ..small_grid()
    };
    assert!(matches!(
        store.calibrate(&empty),
        Err(IoError::InvalidArgument(_))
    ));
    // No free space: refused, settings unchanged.
    let before = (store.max_io_bytes(), store.engine().queue_depth());
    let all = store.allocate(store.free_bytes()).unwrap();
    assert!(matches!(
        store.calibrate(&small_grid()),
        Err(IoError::StoreFull { .. })
    ));
    assert_eq!(before, (store.max_io_bytes(), store.engine().queue_depth()));
    store.release(all);
}
