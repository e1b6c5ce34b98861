//! The pager on a real block device: a loop device over a file, where the machine allows it (root with
//! /dev/loop-control). Elsewhere the test says it was skipped and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use oversub_io::SwapStore;
use oversub_testkit::{require, LoopDevice};

#[test]
fn pager_round_trips_on_a_block_device() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    require!(
        oversub_testkit::loop_devices_usable(),
        "no loop devices here"
    );
    let dev = require!(
        LoopDevice::attach(&image),
        "no loop device can be attached here (needs root and losetup)"
    );
    for (name, engine) in engines() {
        let store = SwapStore::builder()
            .engine(engine)
            .open(dev.path())
            .unwrap();
        assert!(store.is_block_device(), "{name}");
        // The store's header takes the first block(s); the data area is the rest.
        assert_eq!(store.capacity_bytes(), 64 * MIB - store.data_offset());
        assert!(store.alignment() >= 512 && store.alignment().is_power_of_two());
        let pool = checked_host_pool(store);
        let space = pool.address_space();
        let sizes = [1u64, 4097, 5 * MIB + 17, 20 * MIB];
        let bufs = filled_buffers(&space, &sizes, 100);
        space.page_out_all().unwrap();
        space.page_in_all().unwrap();
        check_filled(&space, &bufs, &sizes, 100, name);
    }
}
