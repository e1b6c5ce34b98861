//! Small helpers shared by the SVG renderers (box plots, bar charts, timelines).

/// Shortens a label to at most `max` characters, ending with an ellipsis.
pub(crate) fn truncate_label(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else if max == 0 {
        String::new()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('\u{2026}');
        t
    }
}

/// Compact number for SVG coordinates.
pub(crate) fn n(x: f64) -> String {
    if !x.is_finite() {
        return "0".to_string();
    }
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Axis ticks covering `[lo, hi]`: (first tick, last tick, step).
///
/// The step is the smallest "nice" value (1, 2, 2.5 or 5 times a power of
/// ten) that needs at most 8 ticks, which gives 5 to 8 ticks in practice.
pub(crate) fn nice_ticks(lo: f64, hi: f64) -> (f64, f64, f64) {
    let (mut lo, mut hi) = (lo, hi);
    if !(hi - lo).is_finite() || hi - lo <= 0.0 {
        let pad = if lo.abs() > 0.0 { lo.abs() * 0.1 } else { 1.0 };
        lo -= pad;
        hi += pad;
    }
    let span = hi - lo;
    let exp0 = (span / 10.0).log10().floor() as i32;
    // Bounded: the candidate step grows 10x per exponent.
    for exp in exp0..exp0.saturating_add(8) {
        let base = 10f64.powi(exp);
        for m in [1.0, 2.0, 2.5, 5.0] {
            let step = m * base;
            let first = (lo / step).floor();
            let last = (hi / step).ceil();
            if last - first + 1.0 <= 8.0 {
                return (first * step, last * step, step);
            }
        }
    }
    (lo, hi, span)
}

/// Decimals needed to print multiples of `step` exactly (at most 9).
pub(crate) fn decimals_for(step: f64) -> usize {
    let mut scaled = step;
    for d in 0..9 {
        if (scaled - scaled.round()).abs() <= 1e-6 * scaled.abs().max(1.0) {
            return d;
        }
        scaled *= 10.0;
    }
    9
}
