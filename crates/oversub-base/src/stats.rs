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

/// Median of integer samples (the lower middle one for an even count, so the result is one of the samples);
/// `None` when there are none.
pub fn median_u64(samples: &[u64]) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
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
        assert_eq!(median_u64(&[5, 1, 3, 2]), Some(2));
        assert_eq!(median_u64(&[]), None);
    }
}
