//! Descriptive statistics over timing samples.

use serde::{Deserialize, Serialize};

/// Summary statistics of a sample set, in seconds.
///
/// Percentiles (median, p99) use linear interpolation between closest ranks
/// (see [`percentile`]); `std_s` is the sample standard deviation (divisor
/// `n - 1`), `0.0` for a single sample. `count` is the number of finite
/// samples the summary was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Smallest sample.
    pub min_s: f64,
    /// 50th percentile.
    pub median_s: f64,
    /// Arithmetic mean.
    pub mean_s: f64,
    /// 99th percentile.
    pub p99_s: f64,
    /// Largest sample.
    pub max_s: f64,
    /// Sample standard deviation (n - 1 divisor); 0 for one sample.
    pub std_s: f64,
    /// Number of finite samples summarised.
    pub count: usize,
}

impl Summary {
    /// Summarises `samples_s` (in any order).
    ///
    /// Returns `None` for an empty set. NaN and infinite samples are ignored;
    /// if none remain the result is `None` as well.
    pub fn from_samples(samples_s: &[f64]) -> Option<Summary> {
        let sorted = sorted_finite(samples_s);
        let (&min_s, &max_s) = (sorted.first()?, sorted.last()?);
        let count = sorted.len();
        let median_s = percentile(&sorted, 50.0)?;
        let p99_s = percentile(&sorted, 99.0)?;

        // Work on values scaled into [-1, 1] so that neither the sum nor the
        // squared deviations can overflow, whatever the magnitudes.
        let scale = min_s.abs().max(max_s.abs());
        let (mean_s, std_s) = if scale == 0.0 {
            (0.0, 0.0)
        } else {
            let n = count as f64;
            let mean_scaled = sorted.iter().map(|&x| x / scale).sum::<f64>() / n;
            let std_scaled = if count < 2 {
                0.0
            } else {
                let ss: f64 = sorted
                    .iter()
                    .map(|&x| {
                        let d = x / scale - mean_scaled;
                        d * d
                    })
                    .sum();
                (ss / (n - 1.0)).sqrt()
            };
            // Rounding could nudge the mean a hair outside [min, max].
            (
                (mean_scaled * scale).max(min_s).min(max_s),
                std_scaled * scale,
            )
        };

        Some(Summary {
            min_s,
            median_s,
            mean_s,
            p99_s,
            max_s,
            std_s,
            count,
        })
    }
}

/// Returns the finite values of `samples`, sorted ascending.
pub(crate) fn sorted_finite(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// The `p`-th percentile (`p` in `0.0..=100.0`) of an ascending-sorted slice.
///
/// Method: linear interpolation between closest ranks (the default of NumPy,
/// R type 7, Excel `PERCENTILE.INC`). With `n` samples the fractional rank is
/// `r = p / 100 * (n - 1)`; the result is
/// `sorted[floor(r)] + (r - floor(r)) * (sorted[floor(r) + 1] - sorted[floor(r)])`.
/// So `p = 0` is the minimum, `p = 100` the maximum and `p = 50` the usual
/// median (mean of the two middle values for even `n`).
///
/// Returns `None` if the slice is empty, `p` is NaN or outside `0..=100`, or
/// the slice is not sorted ascending or contains non-finite values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    if !sorted.iter().all(|x| x.is_finite()) || sorted.windows(2).any(|w| w[0] > w[1]) {
        return None;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo_idx = rank.floor() as usize;
    let frac = rank - rank.floor();
    let lo = *sorted.get(lo_idx)?;
    match sorted.get(lo_idx + 1) {
        Some(&hi) if frac > 0.0 => {
            let d = hi - lo;
            let v = if d.is_finite() {
                lo + frac * d
            } else {
                // Span overflows f64 (values near ±f64::MAX).
                lo * (1.0 - frac) + hi * frac
            };
            // Guard against rounding past the neighbouring samples.
            Some(v.max(lo).min(hi))
        }
        _ => Some(lo),
    }
}

/// First quartile, median and third quartile of `samples` (any order),
/// using the same interpolation as [`percentile`].
///
/// Non-finite samples are ignored; `None` if no finite sample remains.
pub fn quartiles(samples: &[f64]) -> Option<(f64, f64, f64)> {
    let sorted = sorted_finite(samples);
    Some((
        percentile(&sorted, 25.0)?,
        percentile(&sorted, 50.0)?,
        percentile(&sorted, 75.0)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn empty_is_none() {
        assert_eq!(Summary::from_samples(&[]), None);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(quartiles(&[]), None);
    }

    #[test]
    fn only_non_finite_is_none() {
        let s = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        assert_eq!(Summary::from_samples(&s), None);
        assert_eq!(quartiles(&s), None);
    }

    #[test]
    fn one_sample() {
        let s = Summary::from_samples(&[0.25]).unwrap();
        assert_eq!(
            s,
            Summary {
                min_s: 0.25,
                median_s: 0.25,
                mean_s: 0.25,
                p99_s: 0.25,
                max_s: 0.25,
                std_s: 0.0,
                count: 1,
            }
        );
        assert_eq!(quartiles(&[3.0]), Some((3.0, 3.0, 3.0)));
    }

    #[test]
    fn odd_count_known_values() {
        // Unsorted on purpose.
        let s = Summary::from_samples(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.min_s, 1.0);
        assert_eq!(s.max_s, 5.0);
        assert_eq!(s.median_s, 3.0);
        assert!(close(s.mean_s, 3.0));
        // Sample std of 1..=5 is sqrt(2.5).
        assert!(close(s.std_s, 2.5f64.sqrt()));
        // r = 0.99 * 4 = 3.96 -> 4 + 0.96 * (5 - 4)
        assert!(close(s.p99_s, 4.96));
        assert_eq!(s.count, 5);
        assert_eq!(quartiles(&[5.0, 1.0, 4.0, 2.0, 3.0]), Some((2.0, 3.0, 4.0)));
    }

    #[test]
    fn even_count_known_values() {
        let s = Summary::from_samples(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median_s, 2.5);
        assert!(close(s.mean_s, 2.5));
        // Sample variance of 1..=4 is 5/3.
        assert!(close(s.std_s, (5.0f64 / 3.0).sqrt()));
        // r = 0.99 * 3 = 2.97 -> 3 + 0.97
        assert!(close(s.p99_s, 3.97));
        // q1: r = 0.75 -> 1.75; q3: r = 2.25 -> 3.25
        let (q1, m, q3) = quartiles(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert!(close(q1, 1.75) && m == 2.5 && close(q3, 3.25));
    }

    #[test]
    fn nan_and_inf_are_filtered() {
        let s =
            Summary::from_samples(&[f64::NAN, 2.0, f64::INFINITY, 4.0, f64::NEG_INFINITY]).unwrap();
        assert_eq!(s.count, 2);
        assert_eq!(s.min_s, 2.0);
        assert_eq!(s.max_s, 4.0);
        assert_eq!(s.median_s, 3.0);
        assert!(close(s.mean_s, 3.0));
        assert!(close(s.std_s, 2.0f64.sqrt()));
    }

    #[test]
    fn percentile_endpoints_and_bad_input() {
        let v = [1.0, 2.0, 10.0];
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(10.0));
        assert_eq!(percentile(&v, 50.0), Some(2.0));
        assert_eq!(percentile(&v, 75.0), Some(6.0));
        assert_eq!(percentile(&v, -1.0), None);
        assert_eq!(percentile(&v, 100.1), None);
        assert_eq!(percentile(&v, f64::NAN), None);
        assert_eq!(percentile(&[3.0, 1.0], 50.0), None, "unsorted");
        assert_eq!(percentile(&[1.0, f64::NAN], 50.0), None);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let s = Summary::from_samples(&[f64::MAX, -f64::MAX, f64::MAX]).unwrap();
        assert!(s.mean_s.is_finite());
        assert!(s.std_s.is_finite() || s.std_s == f64::INFINITY);
        assert_eq!(s.median_s, f64::MAX);
    }

    #[test]
    fn all_zero() {
        let s = Summary::from_samples(&[0.0, 0.0, 0.0]).unwrap();
        assert_eq!((s.mean_s, s.std_s, s.p99_s), (0.0, 0.0, 0.0));
    }

    #[test]
    fn serde_round_trip() {
        let s = Summary::from_samples(&[0.001, 0.002, 0.004]).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"median_s\""));
        let back: Summary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
}
