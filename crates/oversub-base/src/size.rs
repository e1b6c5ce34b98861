//! Parsing of user-typed sizes such as `"256MiB"` or `"1.5GiB"`.

/// Why a size string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeParseError {
    /// The input was empty or only whitespace.
    #[error("empty size: expected a number with an optional unit, e.g. 256MiB, 1GiB, 4k, 100MB")]
    Empty,
    /// The numeric part is missing or malformed (including negative numbers).
    #[error(
        "invalid size {input:?}: expected a non-negative number with an optional unit, \
         e.g. 256MiB, 1.5GiB, 4k, 100MB"
    )]
    InvalidNumber {
        /// The input as given.
        input: String,
    },
    /// The unit suffix is not recognised.
    #[error(
        "unknown unit {unit:?} in size {input:?}: expected B, K/KiB/KB, M/MiB/MB, G/GiB/GB, \
         T/TiB/TB, P/PiB/PB or E/EiB/EB (KiB/MiB/... and bare K/M/... are powers of 1024, \
         KB/MB/... powers of 1000)"
    )]
    UnknownUnit {
        /// The input as given.
        input: String,
        /// The unrecognised suffix.
        unit: String,
    },
    /// A fractional number of bytes was given without a unit, e.g. `"1.5"`.
    #[error("invalid size {input:?}: a size in bytes must be a whole number")]
    FractionalBytes {
        /// The input as given.
        input: String,
    },
    /// The size does not fit in a `u64`.
    #[error("size {input:?} is too large (maximum is {} bytes)", u64::MAX)]
    Overflow {
        /// The input as given.
        input: String,
    },
}

/// Multiplier for a (lower-cased) unit suffix.
fn unit_multiplier(unit: &str) -> Option<u64> {
    const KI: u64 = 1 << 10;
    Some(match unit {
        "" | "b" => 1,
        "k" | "ki" | "kib" => KI,
        "m" | "mi" | "mib" => KI.pow(2),
        "g" | "gi" | "gib" => KI.pow(3),
        "t" | "ti" | "tib" => KI.pow(4),
        "p" | "pi" | "pib" => KI.pow(5),
        "e" | "ei" | "eib" => KI.pow(6),
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        "eb" => 1_000_000_000_000_000_000,
        _ => return None,
    })
}

/// Parses a size as users type it, returning bytes.
///
/// Accepted: a non-negative number (integer or decimal, e.g. `"1.5"`),
/// optionally followed (with or without spaces) by a unit, all
/// case-insensitive:
///
/// * none or `B`: bytes (a unit-less value must be a whole number);
/// * binary `KiB`, `MiB`, `GiB`, `TiB`, `PiB`, `EiB`, also written `Ki`,
///   `Mi`, ... and bare `K`, `M`, `G`, `T`, `P`, `E` (powers of 1024);
/// * decimal `KB`, `MB`, `GB`, `TB`, `PB`, `EB` (powers of 1000).
///
/// Fractional values with a unit are rounded to the nearest byte
/// (`"1.5GiB"` is exactly 1610612736, `"0.1KiB"` is 102). The arithmetic is
/// exact integer arithmetic; results above `u64::MAX` are an error.
///
/// ```
/// use oversub_base::size::parse_size;
/// assert_eq!(parse_size("256MiB"), Ok(256 << 20));
/// assert_eq!(parse_size("4k"), Ok(4096));
/// assert_eq!(parse_size("100MB"), Ok(100_000_000));
/// assert!(parse_size("12 parsecs").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, SizeParseError> {
    let trimmed = s.trim();
    if trimmed.is_empty() {
        return Err(SizeParseError::Empty);
    }
    let invalid = || SizeParseError::InvalidNumber {
        input: s.to_string(),
    };
    let overflow = || SizeParseError::Overflow {
        input: s.to_string(),
    };

    let num_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (num, unit) = trimmed.split_at(num_end);
    let unit = unit.trim_start().to_ascii_lowercase();

    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(invalid());
    }
    let mult = unit_multiplier(&unit).ok_or_else(|| SizeParseError::UnknownUnit {
        input: s.to_string(),
        unit: unit.clone(),
    })?;

    // Integer part, exactly (leading zeros allowed, arbitrary length).
    let mut int_val: u64 = 0;
    for d in int_part.bytes() {
        int_val = int_val
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or_else(overflow)?;
    }
    let whole = int_val.checked_mul(mult).ok_or_else(overflow)?;

    // Fractional part: round(frac * mult) with u128 arithmetic. 19 digits
    // are plenty: 10^19 * 2^60 < 2^128, and further digits change the
    // result by less than 0.12 byte.
    let frac_digits = frac_part.trim_end_matches('0');
    if frac_digits.is_empty() {
        return Ok(whole);
    }
    if mult == 1 {
        return Err(SizeParseError::FractionalBytes {
            input: s.to_string(),
        });
    }
    let digits = &frac_digits[..frac_digits.len().min(19)];
    let mut numer: u128 = 0;
    for d in digits.bytes() {
        numer = numer * 10 + u128::from(d - b'0');
    }
    let denom = 10u128.pow(digits.len() as u32);
    let frac_bytes = (numer * u128::from(mult) + denom / 2) / denom;
    let frac_bytes = u64::try_from(frac_bytes).map_err(|_| overflow())?;
    whole.checked_add(frac_bytes).ok_or_else(overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("4096", 4096),
            ("  4096  ", 4096),
            ("17b", 17),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4kib", 4096),
            ("4KB", 4000),
            ("256MiB", 256 << 20),
            ("256 MiB", 256 << 20),
            ("256M", 256 << 20),
            ("100MB", 100_000_000),
            ("1GiB", 1 << 30),
            ("1G", 1 << 30),
            ("1gb", 1_000_000_000),
            ("1.5GiB", 1_610_612_736),
            ("1.50GiB", 1_610_612_736),
            (".5k", 512),
            ("2.", 2),
            ("2.0", 2),
            ("0.1KiB", 102),
            ("1.25MB", 1_250_000),
            ("2Ti", 2 << 40),
            // issue 36's table, which every Python front reads through this function too (python/tests/test_sizes.py)
            ("2Gi", 2 << 30),
            ("4GiB", 4 << 30),
            ("512M", 512 << 20),
            ("15EiB", 15 << 60),
            ("18446744073709551615", u64::MAX),
            ("0000000000000000000000001k", 1024),
        ];
        for &(input, want) in cases {
            assert_eq!(parse_size(input), Ok(want), "input {input:?}");
        }
    }

    #[test]
    fn invalid() {
        assert_eq!(parse_size(""), Err(SizeParseError::Empty));
        assert_eq!(parse_size("   "), Err(SizeParseError::Empty));
        for bad in ["MiB", "-1", "-1GiB", ".", "1.2.3", "1..5k", "+5", "k5"] {
            assert!(
                matches!(parse_size(bad), Err(SizeParseError::InvalidNumber { .. })),
                "{bad:?} -> {:?}",
                parse_size(bad)
            );
        }
        for bad in ["5 parsecs", "1e3", "4kk", "10 MiB extra", "1GiBs", "5µ"] {
            assert!(
                matches!(parse_size(bad), Err(SizeParseError::UnknownUnit { .. })),
                "{bad:?} -> {:?}",
                parse_size(bad)
            );
        }
        assert!(matches!(
            parse_size("1.5"),
            Err(SizeParseError::FractionalBytes { .. })
        ));
        assert!(matches!(
            parse_size("1.5B"),
            Err(SizeParseError::FractionalBytes { .. })
        ));
    }

    #[test]
    fn overflow() {
        for big in [
            "18446744073709551616",
            "99999999999999999999999",
            "16EiB",
            "17179869184GiB",
            "15.99999999999999999999EiB",
            "18446744073709551615.9k",
        ] {
            assert!(
                matches!(parse_size(big), Err(SizeParseError::Overflow { .. })),
                "{big:?} -> {:?}",
                parse_size(big)
            );
        }
    }

    #[test]
    fn error_messages_are_helpful() {
        let msg = parse_size("5 parsecs").unwrap_err().to_string();
        assert!(msg.contains("parsecs") && msg.contains("MiB"), "{msg}");
        let msg = parse_size("abc").unwrap_err().to_string();
        assert!(msg.contains("\"abc\""), "{msg}");
    }
}
