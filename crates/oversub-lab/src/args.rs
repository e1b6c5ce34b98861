//! Value parsers of the flags every subcommand shares: sizes, counts and factors, each refusing what it cannot
//! mean (a negative or zero size, zero repetitions) with a message that says what to give. clap puts the flag's
//! name and the value in front (`invalid value '0' for '--max-unit <MAX_UNIT>': ...`).
//!
//! A flag that takes one of these must also be declared with `allow_hyphen_values = true`: otherwise clap reads
//! `--max-unit -5MiB` as the flag `-5` and never asks the parser.

/// Whether `s` is a number (or a size) with a minus sign: refused by every parser here with a message of its own.
fn negative(s: &str) -> bool {
    s.trim()
        .strip_prefix('-')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
}

/// A size of at least one byte (`256MiB`, `1GiB`, `100MB`, or plain bytes).
pub fn parse_positive_size_arg(s: &str) -> Result<u64, String> {
    if negative(s) {
        return Err("a size cannot be negative: give one such as 64MiB or 1GiB".into());
    }
    match oversub_report::parse_size(s) {
        Ok(0) => {
            Err("a size of 0 bytes is not allowed: give at least 1 byte, such as 64MiB".into())
        }
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A whole number of at least 1: repetitions, samples, iterations, threads in flight.
pub fn parse_count<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    whole(s, 1)
}

/// A whole number, 0 included: where 0 means none (`--warmup 0`) or the default (`--threads 0`).
pub fn parse_count_or_zero<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    whole(s, 0)
}

fn whole<T: TryFrom<u64>>(s: &str, min: u64) -> Result<T, String> {
    let want = if min == 0 {
        "a whole number, 0 or more".to_string()
    } else {
        format!("a whole number of at least {min}")
    };
    if negative(s) {
        return Err(format!("it cannot be negative: give {want}"));
    }
    let t = s.trim();
    let n = match t.parse::<u64>() {
        Ok(n) => n,
        Err(_) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(format!("{t} is too large: give {want}"))
        }
        Err(_) => return Err(format!("{t:?} is not a whole number: give {want}")),
    };
    if n < min {
        return Err(format!("{n} is too few: give {want}"));
    }
    T::try_from(n).map_err(|_| format!("{n} is too large: give {want}"))
}

/// A duration such as `10ms`, `1.5s` or `2m` (the arbiter's syntax).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    oversub_arbiter::parse_duration(s.trim()).map_err(|e| e.to_string())
}

/// A finite number greater than 0: a scale factor or a duration in seconds.
pub fn parse_positive_number(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        Ok(_) => Err("it must be greater than 0: give a number such as 0.5 or 2".into()),
        Err(_) => Err(format!(
            "{:?} is not a number: give a number greater than 0, such as 0.5 or 2",
            s.trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_must_be_positive() {
        assert_eq!(parse_positive_size_arg("1GiB"), Ok(1 << 30));
        assert_eq!(parse_positive_size_arg(" 4096 "), Ok(4096));
        for bad in ["-5MiB", "-1", "-0.5GiB"] {
            let e = parse_positive_size_arg(bad).unwrap_err();
            assert!(e.contains("cannot be negative"), "{bad}: {e}");
        }
        for zero in ["0", "0MiB", "0.0GiB"] {
            let e = parse_positive_size_arg(zero).unwrap_err();
            assert!(e.contains("0 bytes is not allowed"), "{zero}: {e}");
        }
        assert!(parse_positive_size_arg("12 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
    }

    #[test]
    fn counts_must_be_whole_and_large_enough() {
        assert_eq!(parse_count::<usize>("5"), Ok(5));
        assert_eq!(parse_count_or_zero::<usize>("0"), Ok(0));
        assert_eq!(
            parse_count::<usize>("0"),
            Err("0 is too few: give a whole number of at least 1".into())
        );
        assert_eq!(
            parse_count::<usize>("-1"),
            Err("it cannot be negative: give a whole number of at least 1".into())
        );
        assert_eq!(
            parse_count_or_zero::<u32>("-1"),
            Err("it cannot be negative: give a whole number, 0 or more".into())
        );
        assert!(parse_count::<usize>("1.5")
            .unwrap_err()
            .contains("is not a whole number"));
        assert!(parse_count::<u32>("5000000000")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_count::<u64>("99999999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(parse_count_or_zero::<i32>("3"), Ok(3));
    }

    #[test]
    fn factors_must_be_positive() {
        assert_eq!(parse_positive_number("0.25"), Ok(0.25));
        for bad in ["0", "-1", "inf", "NaN"] {
            assert!(parse_positive_number(bad).is_err(), "{bad}");
        }
        assert!(parse_positive_number("x")
            .unwrap_err()
            .contains("not a number"));
    }
}
