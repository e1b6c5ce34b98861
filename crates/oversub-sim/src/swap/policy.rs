//! The three swap managers compared in the paper's Section V: Baseline (swap out the least recently used task),
//! MaT (Li et al., ASPLOS'19: suspend an SM while swapping and throttle further swaps) and the proposed
//! contention-aware swap space management (Alg. 1 priorities, Alg. 2 direct storage access).

use oversub_tenants::swap::AlphaRule;
use serde::Serialize;

use super::SwapSimError;

/// A swap manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Policy {
    /// Evict the least recently used evictable task when memory is short; FIFO everywhere.
    Baseline,
    /// As Baseline, but a shortage that starts a swap-out suspends one SM, and while it is suspended tasks that
    /// would need another swap wait until free memory suffices; FIFO everywhere.
    Mat,
    /// Alg. 1 priorities and Alg. 2 swap ratios with the given rule: victims read and write their swapped share on
    /// the SSD directly, nothing is ever swapped; memory controller, SSD and SMs served by priority.
    Proposed(AlphaRule),
}

impl Policy {
    /// Names accepted by [`Policy::parse`].
    pub const NAMES: &'static str = "baseline, mat, proposed, proposed-printed-ceil, all";

    /// Baseline, MaT and Proposed with `rule`: the paper's comparison.
    pub fn all(rule: AlphaRule) -> Vec<Policy> {
        vec![Policy::Baseline, Policy::Mat, Policy::Proposed(rule)]
    }

    /// A policy by name: `baseline`, `mat`, `proposed` (with `rule`), `proposed-fraction`, `proposed-printed-ceil`.
    pub fn parse(name: &str, rule: AlphaRule) -> Result<Policy, SwapSimError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "baseline" => Ok(Policy::Baseline),
            "mat" => Ok(Policy::Mat),
            "proposed" => Ok(Policy::Proposed(rule)),
            "proposed-fraction" => Ok(Policy::Proposed(AlphaRule::Fraction)),
            "proposed-printed-ceil" | "proposed-ceil" => {
                Ok(Policy::Proposed(AlphaRule::PrintedCeil))
            }
            _ => Err(SwapSimError::UnknownPolicy {
                name: name.to_string(),
                known: Self::NAMES.to_string(),
            }),
        }
    }

    /// Stable machine name for JSON and file names: `baseline`, `mat`, `proposed`, `proposed-printed-ceil`.
    pub fn key(&self) -> &'static str {
        match self {
            Policy::Baseline => "baseline",
            Policy::Mat => "mat",
            Policy::Proposed(AlphaRule::PrintedCeil) => "proposed-printed-ceil",
            Policy::Proposed(_) => "proposed",
        }
    }

    /// Whether requests are served by priority (preemptive on the memory controller and SSD) rather than FIFO.
    pub fn by_priority(&self) -> bool {
        matches!(self, Policy::Proposed(_))
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Baseline => "Baseline",
            Policy::Mat => "MaT",
            Policy::Proposed(AlphaRule::PrintedCeil) => "Proposed (printed ceil)",
            Policy::Proposed(_) => "Proposed",
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in [
            Policy::Baseline,
            Policy::Mat,
            Policy::Proposed(AlphaRule::Fraction),
            Policy::Proposed(AlphaRule::PrintedCeil),
        ] {
            assert_eq!(Policy::parse(p.key(), AlphaRule::Fraction).unwrap(), p);
        }
        assert_eq!(
            Policy::parse("Proposed", AlphaRule::PrintedCeil).unwrap(),
            Policy::Proposed(AlphaRule::PrintedCeil)
        );
        let e = Policy::parse("lru", AlphaRule::Fraction).unwrap_err();
        assert!(e.to_string().contains("unknown policy `lru`"), "{e}");
        assert!(e.to_string().contains("mat"), "{e}");
    }
}
