//! A schedule's `store` means what it means everywhere else: a folder (a temporary file in it), a file (that file)
//! or a block device (that device), never the folder holding a file or device.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use oversub_sched::{setup, Bandwidths, Mode, Runtime, System};
use oversub_testkit::{require, LoopDevice};

const MIB: u64 = 1 << 20;

/// The paper's example at 1/20 of its time scale, 1 MiB units, capacity for 4, its store at `store`.
fn tiny(store: &Path) -> System {
    let mut sys = paper(MIB, 4);
    scale_time(&mut sys, 0.05);
    sys.platform.stores = vec![store.to_path_buf()];
    sys
}

/// Runs two hyperperiods of async paging; the run pages (capacity for 4 of 5 units).
fn run(sys: System) {
    let r = Runtime::new(sys)
        .mode(Mode::Async)
        .bandwidths(Bandwidths::direct(500e6, 500e6))
        .hyperperiods(2)
        .warmup(1)
        .pin_threads(false)
        .settle_s(0.0)
        .run()
        .unwrap();
    assert!(r.bytes_paged > 0, "{r:?}");
    assert!(!r.slots.is_empty());
}

fn names(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn a_schedules_store_file_is_the_store_not_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("swap.bin");
    std::fs::write(&file, b"").unwrap();
    let sys = tiny(&file);
    {
        let pool = setup::pool_for(&sys).unwrap();
        assert_eq!(pool.store().member_paths(), [file.as_path()]);
        assert!(!pool.store().is_block_device());
        // The one default rule: the demand, 2 MiB per buffer and 64 MiB of room.
        assert!(pool.stats().store_capacity_bytes >= 5 * MIB + 5 * 2 * MIB + 64 * MIB);
        // Nothing was created beside the file.
        assert_eq!(names(dir.path()), std::slice::from_ref(&file));
    }
    run(sys);
    assert_eq!(names(dir.path()), [file]);
}

#[test]
fn a_schedules_store_folder_gets_a_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let pool = setup::pool_for(&tiny(dir.path())).unwrap();
    assert_eq!(pool.store().member_paths()[0].parent(), Some(dir.path()));
    // Unlinked at once.
    assert!(names(dir.path()).is_empty());
}

/// A loop device over a sparse image in /var/tmp (a real disk file system, unlike a tmpfs /tmp).
fn loop_device(len: u64) -> Option<(tempfile::TempDir, LoopDevice)> {
    oversub_testkit::loop_devices_usable().ok()?;
    let dir = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .ok()?;
    let image = dir.path().join("disk.img");
    std::fs::File::create(&image).ok()?.set_len(len).ok()?;
    let dev = LoopDevice::attach(&image)?;
    Some((dir, dev))
}

#[test]
fn a_schedule_runs_with_a_loop_device_as_its_store() {
    let (_dir, dev) = require!(
        loop_device(128 * MIB),
        "no loop device can be attached here (needs root and losetup)"
    );
    let sys = tiny(dev.path());
    {
        let pool = setup::pool_for(&sys).unwrap();
        assert!(pool.store().is_block_device());
        assert_eq!(pool.store().member_paths(), [dev.path()]);
        // A device is used whole.
        assert_eq!(
            pool.stats().store_capacity_bytes,
            128 * MIB - pool.store().data_offset()
        );
    }
    // The bandwidths measured on the device, as `oversub run` does without a profile (256 MiB, more than this
    // device holds: measured over what it holds).
    let bw = setup::measure_bandwidths(&sys.platform.stores, setup::MEASURE_BYTES).unwrap();
    assert!(bw.read_bytes_per_s > 0.0 && bw.write_bytes_per_s > 0.0);
    run(sys);
}

#[test]
fn demand_mode_refuses_a_block_device_store() {
    let (_dir, dev) = require!(
        loop_device(64 * MIB),
        "no loop device can be attached here (needs root and losetup)"
    );
    match setup::store_dir(Some(dev.path())) {
        Err(e @ setup::SetupError::DemandOnDevice { .. }) => {
            assert!(e.to_string().contains("block device"), "{e}")
        }
        other => panic!("unexpected {other:?}"),
    }
}
