//! Human-readable formatting of durations, byte counts and rates.

/// Rounds to two decimals, as `{:.2}` would display it.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Formats a duration in seconds with two decimals in the largest unit
/// (s, ms, µs, ns) in which it is at least 1 after rounding:
/// `format_seconds(0.0123) == "12.30 ms"`, `format_seconds(0.0) == "0.00 s"`.
///
/// Non-finite input is shown as `"NaN s"`, `"inf s"` or `"-inf s"`.
pub fn format_seconds(s: f64) -> String {
    if !s.is_finite() {
        return format!("{s} s");
    }
    if s == 0.0 {
        return "0.00 s".to_string();
    }
    const UNITS: [(f64, &str); 4] = [(1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")];
    for (factor, name) in UNITS {
        let v = s / factor;
        if round2(v.abs()) >= 1.0 || name == "ns" {
            return format!("{v:.2} {name}");
        }
    }
    // Unreachable: the loop always returns on its last unit.
    format!("{s:.2} s")
}

/// Formats a byte count with binary units: `format_bytes(1073741824) ==
/// "1.00 GiB"`, `format_bytes(512) == "512 B"`, `format_bytes(1536) ==
/// "1.50 KiB"`. Values below 1 KiB are shown exactly, larger ones with two
/// decimals in the largest unit (KiB .. EiB) in which they are at least 1
/// after rounding.
pub fn format_bytes(b: u64) -> String {
    if b < 1024 {
        return format!("{b} B");
    }
    const UNITS: [&str; 6] = ["EiB", "PiB", "TiB", "GiB", "MiB", "KiB"];
    let x = b as f64;
    for (i, name) in UNITS.iter().enumerate() {
        let factor = (1u64 << (10 * (UNITS.len() - i))) as f64;
        let v = x / factor;
        if round2(v) >= 1.0 || *name == "KiB" {
            return format!("{v:.2} {name}");
        }
    }
    format!("{b} B")
}

/// Formats a transfer rate in decimal megabytes per second (MB = 10^6
/// bytes) with one decimal: `format_rate_mbs(2_048_000_000, 1.0) ==
/// "2048.0 MB/s"`.
///
/// Returns `"n/a"` when `s` is zero, negative or not finite.
pub fn format_rate_mbs(bytes: u64, s: f64) -> String {
    if !s.is_finite() || s <= 0.0 {
        return "n/a".to_string();
    }
    format!("{:.1} MB/s", bytes as f64 / 1e6 / s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds() {
        assert_eq!(format_seconds(0.0123), "12.30 ms");
        assert_eq!(format_seconds(1.5), "1.50 s");
        assert_eq!(format_seconds(3600.0), "3600.00 s");
        assert_eq!(format_seconds(2.5e-6), "2.50 µs");
        assert_eq!(format_seconds(7e-9), "7.00 ns");
        assert_eq!(format_seconds(1e-12), "0.00 ns");
        assert_eq!(format_seconds(0.0), "0.00 s");
        assert_eq!(format_seconds(-0.002), "-2.00 ms");
        // Rounds up into the next unit rather than printing "1000.00 ms".
        assert_eq!(format_seconds(0.999_999), "1.00 s");
        assert_eq!(format_seconds(f64::NAN), "NaN s");
        assert_eq!(format_seconds(f64::INFINITY), "inf s");
    }

    #[test]
    fn bytes() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1.00 KiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(256 << 20), "256.00 MiB");
        assert_eq!(format_bytes(1_073_741_824), "1.00 GiB");
        assert_eq!(format_bytes((1 << 20) - 1), "1.00 MiB");
        assert_eq!(format_bytes(3 << 40), "3.00 TiB");
        assert_eq!(format_bytes(u64::MAX), "16.00 EiB");
    }

    #[test]
    fn rates() {
        assert_eq!(format_rate_mbs(2_048_000_000, 1.0), "2048.0 MB/s");
        assert_eq!(format_rate_mbs(1_000_000, 0.5), "2.0 MB/s");
        assert_eq!(format_rate_mbs(0, 1.0), "0.0 MB/s");
        assert_eq!(format_rate_mbs(1, 0.0), "n/a");
        assert_eq!(format_rate_mbs(1, -1.0), "n/a");
        assert_eq!(format_rate_mbs(1, f64::NAN), "n/a");
    }
}
