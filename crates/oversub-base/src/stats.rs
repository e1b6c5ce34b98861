//! The one median of oversub's benchmarks and studies.

/// Median of the samples (mean of the middle two for an even count); `None` when there are none or one is NaN.
pub fn median(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() || samples.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// [`median`] for tables and reports: NaN when there is no median (no samples, or a NaN among them), so a
/// missing figure shows as NaN rather than being dropped.
pub fn median_or_nan(samples: &[f64]) -> f64 {
    median(samples).unwrap_or(f64::NAN)
}

/// Median of integer samples, defined as [`median`] is: the middle one, or for an even count the mean of the middle
/// two, rounded down. One definition for every type, so that a report's byte counts and times beside them are the
/// same statistic (the lower middle sample is not: of 0 and 64 MiB it says 0). Exact integer arithmetic: going
/// through `f64` would lose bytes above 2^53. `None` when there are none.
pub fn median_u64(samples: &[u64]) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_unstable();
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        let (lo, hi) = (v[n / 2 - 1], v[n / 2]);
        // Sorted, so `hi - lo` cannot underflow, and the sum never overflows.
        lo + (hi - lo) / 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_even_empty_and_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
        assert_eq!(median_u64(&[5, 1, 3]), Some(3));
        assert_eq!(median_u64(&[]), None);
    }

    #[test]
    fn an_even_count_gives_the_mean_of_the_middle_two_as_for_floats() {
        assert_eq!(median_u64(&[40, 10, 20, 30]), Some(25));
        assert_eq!(median(&[40.0, 10.0, 20.0, 30.0]), Some(25.0));
        // Rounded down, and exact where an f64 would not be.
        assert_eq!(median_u64(&[5, 1, 3, 2]), Some(2));
        assert_eq!(median_u64(&[10, 21]), Some(15));
        assert_eq!(median_u64(&[u64::MAX, u64::MAX - 2]), Some(u64::MAX - 1));
        assert_eq!(
            median_u64(&[(1 << 53) + 1, (1 << 53) + 3]),
            Some((1 << 53) + 2)
        );
    }
}
