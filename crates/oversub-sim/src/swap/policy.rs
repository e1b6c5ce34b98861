//! The three swap managers compared in the paper's Section V: Baseline (swap out the least recently used task),
//! MaT (Li et al., ASPLOS'19: suspend an SM while swapping and throttle further swaps) and the proposed
//! contention-aware swap space management (Alg. 1 priorities, Alg. 2 direct storage access), and the two halves of
//! the proposed policy alone, for the ablation.

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
    /// Ablation: Alg. 1's priority scheduling alone. Baseline's swapping, with the memory controller, the SSD and
    /// the SMs served by Alg. 1's priorities.
    PriorityOnly,
    /// Ablation: Alg. 2's direct access alone. The victims' quotas and direct SSD access of Proposed (victims chosen
    /// by Alg. 1's ranking), with FIFO servers and SM dispatch.
    DirectOnly(AlphaRule),
    /// Alg. 1 priorities and Alg. 2 swap ratios with the given rule: victims read and write their swapped share on
    /// the SSD directly, nothing is ever swapped; memory controller, SSD and SMs served by priority.
    Proposed(AlphaRule),
}

impl Policy {
    /// Names accepted by [`Policy::parse`].
    pub const NAMES: &'static str =
        "baseline, mat, alg1-priority, alg2-direct, proposed, proposed-printed-ceil, paper, all";

    /// Baseline, MaT and Proposed with `rule`: the paper's comparison.
    pub fn paper(rule: AlphaRule) -> Vec<Policy> {
        vec![Policy::Baseline, Policy::Mat, Policy::Proposed(rule)]
    }

    /// The paper's comparison with the ablation between: Baseline, MaT, Alg. 1's priority scheduling alone, Alg. 2's
    /// direct access alone, and both (Proposed). What `oversub sim swap` runs by default.
    pub fn all(rule: AlphaRule) -> Vec<Policy> {
        vec![
            Policy::Baseline,
            Policy::Mat,
            Policy::PriorityOnly,
            Policy::DirectOnly(rule),
            Policy::Proposed(rule),
        ]
    }

    /// A policy by name: `baseline`, `mat`, `proposed` (with `rule`), `proposed-fraction`, `proposed-printed-ceil`.
    pub fn parse(name: &str, rule: AlphaRule) -> Result<Policy, SwapSimError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "baseline" => Ok(Policy::Baseline),
            "mat" => Ok(Policy::Mat),
            "proposed" => Ok(Policy::Proposed(rule)),
            "alg1-priority" | "priority-only" => Ok(Policy::PriorityOnly),
            "alg2-direct" | "direct-only" => Ok(Policy::DirectOnly(rule)),
            "alg2-direct-printed-ceil" => Ok(Policy::DirectOnly(AlphaRule::PrintedCeil)),
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
            Policy::PriorityOnly => "alg1-priority",
            Policy::DirectOnly(AlphaRule::PrintedCeil) => "alg2-direct-printed-ceil",
            Policy::DirectOnly(_) => "alg2-direct",
        }
    }

    /// Whether requests are served by priority (preemptive on the memory controller and SSD) rather than FIFO.
    pub fn by_priority(&self) -> bool {
        matches!(self, Policy::Proposed(_) | Policy::PriorityOnly)
    }

    /// Whether it runs Alg. 2's plan: quotas, the swapped share on the SSD directly, nothing swapped.
    pub fn planned(&self) -> bool {
        matches!(self, Policy::Proposed(_) | Policy::DirectOnly(_))
    }

    /// The paper's proposed policy (both algorithms).
    pub fn is_proposed(&self) -> bool {
        matches!(self, Policy::Proposed(_))
    }

    /// Alg. 2's swap-ratio rule, for the policies that plan.
    pub fn rule(&self) -> Option<AlphaRule> {
        match self {
            Policy::Proposed(r) | Policy::DirectOnly(r) => Some(*r),
            _ => None,
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Baseline => "Baseline",
            Policy::Mat => "MaT",
            Policy::Proposed(AlphaRule::PrintedCeil) => "Proposed (printed ceil)",
            Policy::Proposed(_) => "Proposed",
            Policy::PriorityOnly => "Alg.1 priority only",
            Policy::DirectOnly(AlphaRule::PrintedCeil) => "Alg.2 direct only (printed ceil)",
            Policy::DirectOnly(_) => "Alg.2 direct only",
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
            Policy::PriorityOnly,
            Policy::DirectOnly(AlphaRule::Fraction),
            Policy::DirectOnly(AlphaRule::PrintedCeil),
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
