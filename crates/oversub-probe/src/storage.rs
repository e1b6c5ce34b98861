//! Direct read and write bandwidth of the store by block size and queue depth, measured like fio's sequential
//! `read`/`write` jobs with `direct=1`: a file in the store's directory, opened with `O_DIRECT`, `queue_depth`
//! requests of `block_bytes` kept in flight through oversub's own I/O engine (io_uring, or the psync pool), for a
//! fixed time per point. The pager moves buffers in requests of its maximum I/O size at its queue depth; that
//! point's figures are what the planner needs.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oversub_io::{
    select_engine, AlignedBuf, Direction, EngineChoice, IoCallback, IoEngine, IoError, IoRequest,
    IoVec, Scrub, SwapStore,
};
use serde::Serialize;

use crate::derive::rate_per_s;
use crate::{ProbeError, Tick};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct StorageOptions {
    /// Directory of the test file (the store's directory).
    pub dir: PathBuf,
    /// Size of the test file; sequential runs wrap around it.
    pub file_bytes: u64,
    /// Request sizes.
    pub block_bytes: Vec<usize>,
    /// Requests in flight.
    pub queue_depths: Vec<usize>,
    /// Time per point and direction.
    pub seconds_per_point: f64,
    /// Which engine.
    #[serde(skip)]
    pub engine: EngineChoice,
    /// Keep the test file afterwards (for comparing with fio on the same file).
    pub keep_file: bool,
}

/// The pager's request size (oversub-io's default maximum I/O).
pub const PAGER_BLOCK_BYTES: usize = 4 << 20;
/// The pager's queue depth (oversub-io's default).
pub const PAGER_QUEUE_DEPTH: usize = 32;

impl StorageOptions {
    /// The full grid: 4 KiB to 4 MiB, queue depth 1 to 64, 1 s per point.
    pub fn full(dir: PathBuf) -> Self {
        StorageOptions {
            dir,
            file_bytes: 1 << 30,
            block_bytes: vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20],
            queue_depths: vec![1, 2, 4, 8, 16, 32, 64],
            seconds_per_point: 1.0,
            engine: EngineChoice::Auto,
            keep_file: false,
        }
    }

    /// `--quick`: four block sizes at queue depths 1 and 32, 0.4 s per point.
    pub fn quick(dir: PathBuf) -> Self {
        StorageOptions {
            dir,
            file_bytes: 256 << 20,
            block_bytes: vec![4 << 10, 64 << 10, 1 << 20, 4 << 20],
            queue_depths: vec![1, PAGER_QUEUE_DEPTH],
            seconds_per_point: 0.4,
            engine: EngineChoice::Auto,
            keep_file: false,
        }
    }
}

/// One point.
#[derive(Debug, Clone, Serialize)]
pub struct StoragePointResult {
    /// Request size.
    pub block_bytes: usize,
    /// Requests in flight.
    pub queue_depth: usize,
    /// Sequential direct-read bandwidth.
    pub read_bytes_per_s: f64,
    /// Sequential direct-write bandwidth.
    pub write_bytes_per_s: f64,
    /// Reads per second.
    pub read_iops: f64,
    /// Writes per second.
    pub write_iops: f64,
}

/// The grid.
#[derive(Debug, Clone, Serialize)]
pub struct StorageResults {
    /// The test file.
    pub file: PathBuf,
    /// Whether the file was kept.
    pub kept: bool,
    /// Whether `O_DIRECT` was used (it is unless the file system refuses it, e.g. tmpfs).
    pub direct: bool,
    /// The engine that ran.
    pub engine: String,
    /// Every point, block size major.
    pub points: Vec<StoragePointResult>,
}

impl StorageResults {
    /// The grid's block sizes and queue depths, each ascending and without repeats.
    pub fn axes(&self) -> (Vec<usize>, Vec<usize>) {
        let mut blocks: Vec<usize> = self.points.iter().map(|p| p.block_bytes).collect();
        let mut depths: Vec<usize> = self.points.iter().map(|p| p.queue_depth).collect();
        for v in [&mut blocks, &mut depths] {
            v.sort_unstable();
            v.dedup();
        }
        (blocks, depths)
    }

    /// The point of a block size and queue depth, when it was measured.
    pub fn point(&self, block_bytes: usize, queue_depth: usize) -> Option<&StoragePointResult> {
        self.points
            .iter()
            .find(|p| p.block_bytes == block_bytes && p.queue_depth == queue_depth)
    }

    /// The point nearest the pager's request size and queue depth.
    pub fn operating_point(&self) -> Option<&StoragePointResult> {
        self.points.iter().min_by_key(|p| {
            (
                p.block_bytes.abs_diff(PAGER_BLOCK_BYTES),
                p.queue_depth.abs_diff(PAGER_QUEUE_DEPTH),
            )
        })
    }
}

/// Removes the test file on drop unless it is to be kept.
struct TestFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for TestFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Keeps `queue_depth` requests of `block` bytes in flight for `seconds`, sequentially through the file from
/// offset 0 and wrapping at its end; with `seconds` `None`, covers the file exactly once. Returns (bytes,
/// requests, seconds).
fn run_point(
    engine: &Arc<dyn IoEngine>,
    store: &SwapStore,
    direction: Direction,
    block: usize,
    queue_depth: usize,
    seconds: Option<f64>,
) -> Result<(u64, u64, f64), ProbeError> {
    let file_bytes = store.capacity_bytes() / block as u64 * block as u64;
    if file_bytes == 0 {
        return Err(ProbeError::InvalidInput(format!(
            "the test file is smaller than one {block}-byte block"
        )));
    }
    let mut bufs = (0..queue_depth)
        .map(|i| {
            let mut b = AlignedBuf::new(block, store.alignment()).map_err(IoError::from)?;
            // Distinct non-zero contents, so no layer can shortcut zero pages.
            b.as_mut_slice().fill(0xA5 ^ i as u8);
            Ok(b)
        })
        .collect::<Result<Vec<_>, IoError>>()?;
    let iovecs: Vec<IoVec> = bufs.iter_mut().map(AlignedBuf::iovec).collect();
    let (tx, rx) = mpsc::channel::<(usize, Result<u64, IoError>)>();
    let fd = store.fd();
    let mut next_offset = 0u64;
    let submit = |slot: usize, offset: u64| -> Result<(), IoError> {
        let tx = tx.clone();
        let cb: IoCallback = Box::new(move |r| {
            // The receiver outlives every accepted batch: the loop below drains them all.
            let _ = tx.send((slot, r.map(|d| d.bytes)));
        });
        let req = IoRequest {
            fd,
            direction,
            offset,
            iovecs: vec![iovecs[slot]],
        };
        // SAFETY: buffer `slot` is not in flight (it is submitted only at the start or after its completion
        // arrived), stays alive until every completion has been received (the drain below runs before `bufs` is
        // dropped), and nothing else touches it meanwhile; the store keeps `fd` open.
        unsafe { engine.submit(vec![req], cb) }
    };
    let budget = seconds.map(Duration::from_secs_f64);
    let requests_once = file_bytes / block as u64;
    let mut submitted = 0u64;
    // Time-based points wrap around the file; a fill covers it once.
    let more = |submitted: u64, start: Instant| match budget {
        Some(b) => start.elapsed() < b,
        None => submitted < requests_once,
    };
    let start = Instant::now();
    let mut in_flight = 0usize;
    let mut failure: Option<ProbeError> = None;
    for slot in 0..queue_depth {
        if !more(submitted, start) {
            break;
        }
        submitted += 1;
        match submit(slot, next_offset) {
            Ok(()) => {
                in_flight += 1;
                next_offset = (next_offset + block as u64) % file_bytes;
            }
            Err(e) => {
                failure = Some(e.into());
                break;
            }
        }
    }
    let (mut bytes, mut requests) = (0u64, 0u64);
    while in_flight > 0 {
        let Ok((slot, result)) = rx.recv() else {
            // Unreachable while we hold `tx`; kept as an error, not a panic.
            return Err(ProbeError::InvalidInput(
                "the I/O engine lost completions".into(),
            ));
        };
        in_flight -= 1;
        match result {
            Ok(n) => {
                bytes += n;
                requests += 1;
            }
            Err(e) => {
                failure.get_or_insert(e.into());
            }
        }
        if failure.is_none() && more(submitted, start) {
            submitted += 1;
            match submit(slot, next_offset) {
                Ok(()) => {
                    in_flight += 1;
                    next_offset = (next_offset + block as u64) % file_bytes;
                }
                Err(e) => failure = Some(e.into()),
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(bufs);
    match failure {
        Some(e) => Err(e),
        None => Ok((bytes, requests, elapsed)),
    }
}

/// The whole grid: for each block size and queue depth, writes then reads.
pub fn measure(opts: &StorageOptions, tick: Tick<'_>) -> Result<StorageResults, ProbeError> {
    if opts.block_bytes.is_empty() || opts.queue_depths.is_empty() {
        return Err(ProbeError::InvalidInput(
            "the storage probe needs at least one block size and one queue depth".into(),
        ));
    }
    if !(opts.seconds_per_point.is_finite() && opts.seconds_per_point > 0.0) {
        return Err(ProbeError::InvalidInput(format!(
            "seconds per point must be positive, not {}",
            opts.seconds_per_point
        )));
    }
    if let Some(&q) = opts.queue_depths.iter().find(|&&q| q == 0 || q > 4096) {
        return Err(ProbeError::InvalidInput(format!(
            "queue depth {q}: must be 1 to 4096"
        )));
    }
    let largest = opts.block_bytes.iter().copied().max().unwrap_or(0) as u64;
    if opts.file_bytes < largest {
        return Err(ProbeError::InvalidInput(format!(
            "the test file ({} bytes) is smaller than the largest block ({largest} bytes)",
            opts.file_bytes
        )));
    }
    let path = opts
        .dir
        .join(format!("oversub-probe-{}.dat", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // Scrub::Keep: the file holds only the probe's fill pattern, and a kept file is for fio to reuse as written.
    let store = SwapStore::builder()
        .capacity_bytes(opts.file_bytes)
        .keep(true)
        .scrub(Scrub::Keep)
        .engine_choice(opts.engine)
        .create(&path)?;
    let file = TestFile {
        path: path.clone(),
        keep: opts.keep_file,
    };
    if let Some(&b) = opts
        .block_bytes
        .iter()
        .find(|&&b| b == 0 || b % store.alignment() != 0)
    {
        return Err(ProbeError::InvalidInput(format!(
            "block size {b} is not a multiple of the store's alignment ({} bytes)",
            store.alignment()
        )));
    }
    // Write the whole file once, untimed, as fio lays out a new file: the store's file is preallocated, and
    // ext4 and XFS read never-written extents as zeros without touching the device and convert them on the first
    // write; measured before the fill, reads look far too fast and small writes far too slow.
    tick("storage: writing the test file once");
    let fill_block = (PAGER_BLOCK_BYTES as u64)
        .min(opts.file_bytes)
        .next_multiple_of(store.alignment() as u64) as usize;
    let fill_engine = select_engine(opts.engine, PAGER_QUEUE_DEPTH)?;
    run_point(
        &fill_engine,
        &store,
        Direction::Write,
        fill_block.min(store.capacity_bytes() as usize),
        PAGER_QUEUE_DEPTH,
        None,
    )?;
    drop(fill_engine);
    let mut points = Vec::new();
    let mut engine_name = String::new();
    for &qd in &opts.queue_depths {
        let engine = select_engine(opts.engine, qd)?;
        engine_name = engine.name().to_string();
        for &block in &opts.block_bytes {
            tick(&format!(
                "storage: {} KiB blocks, queue depth {qd}",
                block >> 10
            ));
            let (wb, wn, ws) = run_point(
                &engine,
                &store,
                Direction::Write,
                block,
                qd,
                Some(opts.seconds_per_point),
            )?;
            let (rb, rn, rs) = run_point(
                &engine,
                &store,
                Direction::Read,
                block,
                qd,
                Some(opts.seconds_per_point),
            )?;
            points.push(StoragePointResult {
                block_bytes: block,
                queue_depth: qd,
                read_bytes_per_s: rate_per_s(rb as f64, rs)?,
                write_bytes_per_s: rate_per_s(wb as f64, ws)?,
                read_iops: rate_per_s(rn as f64, rs)?,
                write_iops: rate_per_s(wn as f64, ws)?,
            });
        }
    }
    points.sort_by_key(|p| (p.block_bytes, p.queue_depth));
    let direct = store.is_direct();
    drop(store);
    Ok(StorageResults {
        file: file.path.clone(),
        kept: file.keep,
        direct,
        engine: engine_name,
        points,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tiny_grid_on_both_engines() {
        for engine in [EngineChoice::Auto, EngineChoice::Psync] {
            let dir = tempfile::tempdir().unwrap();
            let opts = StorageOptions {
                dir: dir.path().to_path_buf(),
                file_bytes: 1 << 20,
                block_bytes: vec![4096, 65536],
                queue_depths: vec![1, 4],
                seconds_per_point: 0.02,
                engine,
                keep_file: false,
            };
            let r = measure(&opts, &crate::no_tick).unwrap();
            assert_eq!(r.points.len(), 4);
            for p in &r.points {
                for v in [
                    p.read_bytes_per_s,
                    p.write_bytes_per_s,
                    p.read_iops,
                    p.write_iops,
                ] {
                    assert!(v > 0.0 && v.is_finite(), "{p:?}");
                }
            }
            assert_eq!(r.operating_point().unwrap().block_bytes, 65536);
            assert_eq!(r.axes(), (vec![4096, 65536], vec![1, 4]));
            assert!(r.point(4096, 4).is_some() && r.point(4096, 2).is_none());
            assert!(!r.file.exists(), "the test file is removed");
        }
    }

    #[test]
    fn bad_options_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = StorageOptions::quick(dir.path().to_path_buf());
        o.queue_depths = vec![0];
        assert!(matches!(
            measure(&o, &crate::no_tick),
            Err(ProbeError::InvalidInput(_))
        ));
        let mut o = StorageOptions::quick(dir.path().to_path_buf());
        o.block_bytes = vec![1000];
        o.file_bytes = 1 << 20;
        assert!(measure(&o, &crate::no_tick).is_err());
        let mut o = StorageOptions::quick(dir.path().to_path_buf());
        o.file_bytes = 1024;
        assert!(measure(&o, &crate::no_tick).is_err());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing left behind"
        );
    }
}
