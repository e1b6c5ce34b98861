//! The store's operating point: the request size and queue depth that a measured grid says are fastest, one for
//! reads and one for writes. The grid comes from `oversub probe` (the `[storage]` points of a platform profile) or
//! from any other measurement; the store applies the choice with [`crate::StoreBuilder::io_points`].

use crate::IoError;

/// One request size and queue depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoPoint {
    /// Largest single request.
    pub block_bytes: usize,
    /// Requests in flight.
    pub queue_depth: usize,
}

/// One measured point of a grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GridPoint {
    /// Request size.
    pub block_bytes: u64,
    /// Requests in flight.
    pub queue_depth: u32,
    /// Sequential direct-read bandwidth there.
    pub read_bytes_per_s: f64,
    /// Sequential direct-write bandwidth there.
    pub write_bytes_per_s: f64,
}

/// The fastest point for reads and the fastest for writes. Ties go to the smaller queue depth, then the smaller
/// request (the same speed for fewer resources). A grid with no points, a point of zero size or depth, or a
/// bandwidth that is not a positive finite number is an error naming the point.
pub fn best_points(grid: &[GridPoint]) -> Result<(IoPoint, IoPoint), IoError> {
    if grid.is_empty() {
        return Err(IoError::InvalidArgument(
            "the I/O grid has no points".into(),
        ));
    }
    for (i, p) in grid.iter().enumerate() {
        let bad = |what: String| {
            Err(IoError::InvalidArgument(format!(
                "I/O grid point {}: {what}",
                i + 1
            )))
        };
        if p.block_bytes == 0 || p.queue_depth == 0 {
            return bad("block_bytes and queue_depth must be at least 1".into());
        }
        if usize::try_from(p.block_bytes).is_err() {
            return bad(format!("block_bytes {} is too large", p.block_bytes));
        }
        for (name, v) in [
            ("read_bytes_per_s", p.read_bytes_per_s),
            ("write_bytes_per_s", p.write_bytes_per_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} must be a positive number, not {v}"));
            }
        }
    }
    let pick = |rate: fn(&GridPoint) -> f64| {
        let (first, rest) = grid
            .split_first()
            .map_or((None, &[][..]), |(f, r)| (Some(*f), r));
        let mut best = first.unwrap_or(GridPoint {
            block_bytes: 4 << 20,
            queue_depth: 32,
            read_bytes_per_s: 0.0,
            write_bytes_per_s: 0.0,
        });
        for p in rest {
            let better = rate(p) > rate(&best)
                || (rate(p) == rate(&best)
                    && (p.queue_depth, p.block_bytes) < (best.queue_depth, best.block_bytes));
            if better {
                best = *p;
            }
        }
        IoPoint {
            block_bytes: best.block_bytes as usize,
            queue_depth: best.queue_depth as usize,
        }
    };
    Ok((pick(|p| p.read_bytes_per_s), pick(|p| p.write_bytes_per_s)))
}

/// A short measurement of the store itself at pool creation ([`crate::SwapStore::calibrate`]): each request size
/// at each queue depth, written and read over one region of the store, best of `passes`. The default grid is the
/// one `oversub bench paging` takes its raw limit from (1, 4 and 16 MiB × 8 and 32 in flight) over 64 MiB: 12
/// transfers of 64 MiB each way, a fraction of a second on an NVMe drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calibration {
    /// Bytes moved per transfer (capped at the store's largest free run).
    pub bytes: u64,
    /// Request sizes tried.
    pub blocks: Vec<usize>,
    /// Queue depths tried.
    pub depths: Vec<usize>,
    /// Transfers per point and direction; the fastest counts.
    pub passes: usize,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            bytes: 64 << 20,
            blocks: vec![1 << 20, 4 << 20, 16 << 20],
            depths: vec![8, 32],
            passes: 2,
        }
    }
}

impl Calibration {
    /// Refuses an empty grid, a zero size, depth or pass count.
    pub fn validate(&self) -> Result<(), IoError> {
        if self.bytes == 0 || self.passes == 0 {
            return Err(IoError::InvalidArgument(
                "calibration needs some bytes and at least one pass".into(),
            ));
        }
        if self.blocks.is_empty() || self.depths.is_empty() {
            return Err(IoError::InvalidArgument(
                "calibration needs at least one request size and one queue depth".into(),
            ));
        }
        if self.blocks.contains(&0) || self.depths.contains(&0) {
            return Err(IoError::InvalidArgument(
                "calibration request sizes and queue depths must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// What [`crate::SwapStore::calibrate`] measured and chose.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibrated {
    /// Every point measured.
    pub grid: Vec<GridPoint>,
    /// The point reads now use.
    pub read: IoPoint,
    /// The point writes now use.
    pub write: IoPoint,
    /// Wall time of the whole calibration.
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(block: u64, depth: u32, read: f64, write: f64) -> GridPoint {
        GridPoint {
            block_bytes: block,
            queue_depth: depth,
            read_bytes_per_s: read,
            write_bytes_per_s: write,
        }
    }

    #[test]
    fn picks_the_fastest_point_each_way() {
        let grid = [
            p(1 << 20, 8, 1.0e9, 3.0e9),
            p(4 << 20, 8, 2.5e9, 2.0e9),
            p(4 << 20, 32, 2.4e9, 2.9e9),
            p(16 << 20, 32, 2.0e9, 3.0e9),
        ];
        let (read, write) = best_points(&grid).unwrap();
        assert_eq!(
            read,
            IoPoint {
                block_bytes: 4 << 20,
                queue_depth: 8
            }
        );
        // A tie on writes goes to the smaller depth.
        assert_eq!(
            write,
            IoPoint {
                block_bytes: 1 << 20,
                queue_depth: 8
            }
        );
    }

    #[test]
    fn a_bad_grid_is_a_clear_error() {
        assert!(best_points(&[])
            .unwrap_err()
            .to_string()
            .contains("no points"));
        let e = best_points(&[p(1 << 20, 8, 1e9, 1e9), p(0, 8, 1e9, 1e9)]).unwrap_err();
        assert!(e.to_string().contains("point 2"), "{e}");
        let e = best_points(&[p(1 << 20, 8, f64::NAN, 1e9)]).unwrap_err();
        assert!(e.to_string().contains("read_bytes_per_s"), "{e}");
    }
}
