//! The phases a CPU task announces (`CPU_MEM`, `CPU_COM`, `NO_OPER`) and their encoding in one atomic word.

use std::time::Duration;

use crate::ArbiterError;

/// Longest phase accepted: deadlines are stored in 62 bits of nanoseconds, and no real phase lasts an hour.
pub const MAX_PHASE: Duration = Duration::from_secs(3600);

/// What a CPU task is about to do, and for how long at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `CPU_MEM`: a memory phase (loading or unloading); the task needs DRAM to itself for up to this long.
    Mem(Duration),
    /// `CPU_COM`: a compute phase on cached data; transfers may run for up to this long.
    Com(Duration),
    /// `NO_OPER`: the task's PREM iterations are over; it no longer restricts transfers.
    NoOper,
}

impl Phase {
    /// Builds a phase from its protocol name (`CPU_MEM`, `CPU_COM`, `NO_OPER`; case and a `CPU_` prefix are
    /// optional) and a duration in seconds, checking both.
    pub fn from_parts(name: &str, duration_s: Option<f64>) -> Result<Phase, ArbiterError> {
        let kind = PhaseKind::parse(name)?;
        match kind {
            PhaseKind::NoOper => Ok(Phase::NoOper),
            PhaseKind::Mem | PhaseKind::Com => {
                let s = duration_s.ok_or_else(|| ArbiterError::InvalidDuration {
                    value: String::new(),
                    reason: "CPU_MEM and CPU_COM need a duration",
                })?;
                let d = duration_from_secs(s)?;
                Ok(if kind == PhaseKind::Mem {
                    Phase::Mem(d)
                } else {
                    Phase::Com(d)
                })
            }
        }
    }

    /// The phase's kind.
    pub fn kind(&self) -> PhaseKind {
        match self {
            Phase::Mem(_) => PhaseKind::Mem,
            Phase::Com(_) => PhaseKind::Com,
            Phase::NoOper => PhaseKind::NoOper,
        }
    }

    /// Checks the duration (non-zero, at most [`MAX_PHASE`]).
    pub fn validate(&self) -> Result<(), ArbiterError> {
        match self {
            Phase::Mem(d) | Phase::Com(d) => check_duration(*d),
            Phase::NoOper => Ok(()),
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Mem(d) => write!(f, "CPU_MEM({d:?})"),
            Phase::Com(d) => write!(f, "CPU_COM({d:?})"),
            Phase::NoOper => f.write_str("NO_OPER"),
        }
    }
}

/// A phase's kind without its duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PhaseKind {
    /// `CPU_MEM`.
    Mem,
    /// `CPU_COM`.
    Com,
    /// `NO_OPER`.
    NoOper,
}

impl PhaseKind {
    /// Parses `CPU_MEM`, `CPU_COM`, `NO_OPER` (or `mem`, `com`, `none`), ignoring case.
    pub fn parse(name: &str) -> Result<PhaseKind, ArbiterError> {
        let upper = name.trim().to_ascii_uppercase().replace('-', "_");
        match upper.trim_start_matches("CPU_") {
            "MEM" => Ok(PhaseKind::Mem),
            "COM" => Ok(PhaseKind::Com),
            "NO_OPER" | "NOOPER" | "NONE" => Ok(PhaseKind::NoOper),
            _ => Err(ArbiterError::UnknownPhase(name.to_string())),
        }
    }

    /// The protocol name.
    pub fn name(self) -> &'static str {
        match self {
            PhaseKind::Mem => "CPU_MEM",
            PhaseKind::Com => "CPU_COM",
            PhaseKind::NoOper => "NO_OPER",
        }
    }
}

impl std::str::FromStr for PhaseKind {
    type Err = ArbiterError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PhaseKind::parse(s)
    }
}

fn check_duration(d: Duration) -> Result<(), ArbiterError> {
    if d.is_zero() {
        return Err(ArbiterError::InvalidDuration {
            value: format!("{d:?}"),
            reason: "a phase must last longer than zero",
        });
    }
    if d > MAX_PHASE {
        return Err(ArbiterError::InvalidDuration {
            value: format!("{d:?}"),
            reason: "a phase may last at most an hour",
        });
    }
    Ok(())
}

/// A phase length from seconds, refusing negative, zero, non-finite and over-long values.
pub fn duration_from_secs(s: f64) -> Result<Duration, ArbiterError> {
    let bad = |reason| ArbiterError::InvalidDuration {
        value: s.to_string(),
        reason,
    };
    if !s.is_finite() {
        return Err(bad("not a finite number"));
    }
    if s < 0.0 {
        return Err(bad("durations cannot be negative"));
    }
    if s > MAX_PHASE.as_secs_f64() {
        return Err(bad("a phase may last at most an hour"));
    }
    let d = Duration::from_secs_f64(s);
    check_duration(d)?;
    Ok(d)
}

/// Parses a duration with a unit: `850us`, `8.7ms`, `2s`, `500ns` (`µs` too). Negative values, missing units and
/// zero are refused with a message that says so.
pub fn parse_duration(text: &str) -> Result<Duration, ArbiterError> {
    let t = text.trim();
    let bad = |reason| ArbiterError::InvalidDuration {
        value: text.to_string(),
        reason,
    };
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .ok_or_else(|| bad("give a unit: ns, us, ms or s"))?;
    let (num, unit) = t.split_at(split);
    let value: f64 = num.trim().parse().map_err(|_| bad("not a number"))?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(bad("unknown unit: use ns, us, ms or s")),
    };
    if value < 0.0 {
        return Err(bad("durations cannot be negative"));
    }
    duration_from_secs(value * scale).map_err(|e| match e {
        ArbiterError::InvalidDuration { reason, .. } => bad(reason),
        other => other,
    })
}

// The encoding of a slot's word: two bits of kind above 62 bits of deadline (nanoseconds of the monotonic clock).
const KIND_SHIFT: u32 = 62;
pub(crate) const DEADLINE_MASK: u64 = (1 << KIND_SHIFT) - 1;
const FREE: u64 = 0;
const NO_OPER: u64 = 1;
const MEM: u64 = 2;
const COM: u64 = 3;

/// A slot's state as stored in shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotWord {
    Free,
    NoOper,
    Mem { end_ns: u64 },
    Com { end_ns: u64 },
}

impl SlotWord {
    pub(crate) fn encode(self) -> u64 {
        match self {
            SlotWord::Free => FREE << KIND_SHIFT,
            SlotWord::NoOper => NO_OPER << KIND_SHIFT,
            SlotWord::Mem { end_ns } => (MEM << KIND_SHIFT) | (end_ns & DEADLINE_MASK),
            SlotWord::Com { end_ns } => (COM << KIND_SHIFT) | (end_ns & DEADLINE_MASK),
        }
    }

    pub(crate) fn decode(word: u64) -> SlotWord {
        let end_ns = word & DEADLINE_MASK;
        match word >> KIND_SHIFT {
            FREE => SlotWord::Free,
            NO_OPER => SlotWord::NoOper,
            MEM => SlotWord::Mem { end_ns },
            _ => SlotWord::Com { end_ns },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for w in [
            SlotWord::Free,
            SlotWord::NoOper,
            SlotWord::Mem { end_ns: 0 },
            SlotWord::Mem {
                end_ns: 123_456_789,
            },
            SlotWord::Com {
                end_ns: DEADLINE_MASK,
            },
        ] {
            assert_eq!(SlotWord::decode(w.encode()), w);
        }
        assert_eq!(SlotWord::Free.encode(), 0);
    }

    #[test]
    fn phase_names_parse_and_bad_ones_are_refused() {
        assert_eq!(PhaseKind::parse("CPU_MEM").ok(), Some(PhaseKind::Mem));
        assert_eq!(PhaseKind::parse("cpu_com").ok(), Some(PhaseKind::Com));
        assert_eq!(PhaseKind::parse("no_oper").ok(), Some(PhaseKind::NoOper));
        assert_eq!(PhaseKind::parse("mem").ok(), Some(PhaseKind::Mem));
        let err = PhaseKind::parse("CPU_IO").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unknown phase \"CPU_IO\": expected CPU_MEM, CPU_COM or NO_OPER")
        );
    }

    #[test]
    fn durations_parse_with_units_and_refuse_nonsense() {
        assert_eq!(
            parse_duration("850us").ok(),
            Some(Duration::from_micros(850))
        );
        assert_eq!(
            parse_duration("8.5ms").ok(),
            Some(Duration::from_micros(8500))
        );
        assert_eq!(parse_duration("2 s").ok(), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_duration("500ns").ok(),
            Some(Duration::from_nanos(500))
        );
        for (text, reason) in [
            ("-5us", "durations cannot be negative"),
            ("5", "give a unit: ns, us, ms or s"),
            ("0ms", "a phase must last longer than zero"),
            ("5 parsecs", "unknown unit: use ns, us, ms or s"),
            ("2h", "unknown unit: use ns, us, ms or s"),
            ("abc", "not a number"),
            ("7200s", "a phase may last at most an hour"),
        ] {
            match parse_duration(text) {
                Err(ArbiterError::InvalidDuration { reason: r, .. }) => {
                    assert_eq!(r, reason, "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn phases_from_parts_check_their_duration() {
        assert_eq!(
            Phase::from_parts("CPU_MEM", Some(0.001)).ok(),
            Some(Phase::Mem(Duration::from_millis(1)))
        );
        assert_eq!(Phase::from_parts("NO_OPER", None).ok(), Some(Phase::NoOper));
        assert!(matches!(
            Phase::from_parts("CPU_COM", Some(-1.0)),
            Err(ArbiterError::InvalidDuration {
                reason: "durations cannot be negative",
                ..
            })
        ));
        assert!(matches!(
            Phase::from_parts("CPU_COM", None),
            Err(ArbiterError::InvalidDuration { .. })
        ));
        assert!(matches!(
            Phase::from_parts("CPU_NAP", Some(1.0)),
            Err(ArbiterError::UnknownPhase(_))
        ));
        assert!(Phase::Mem(Duration::ZERO).validate().is_err());
    }
}
