//! Alg. 2: victims and swap ratios.
//!
//! With demands MEM(i) and a memory of MEM_sys, SWAP_req = Σ MEM(i) − MEM_sys bytes must live on storage. Walking
//! the applications from the lowest priority up, each takes as much of what is left as it can: all of its memory
//! (α_i = 1) or, for the last victim, the fraction α_i = SWAP_req / MEM(i). A victim keeps at most (1 − α_i) of
//! its memory resident and reads and writes the rest on the store directly, so it never evicts the others.
//!
//! The paper prints α_i = ⌈SWAP_req / MEM(i)⌉ for the last victim, which can only be 0 or 1: the last victim would
//! go to storage whole even when a sliver would do. [`AlphaRule::Fraction`] (the default) implements the evident
//! intent, the fraction rounded up to whole pages (so the resident parts never exceed the memory);
//! [`AlphaRule::PrintedCeil`] keeps the printed form for comparison. The printed loop also stops only when
//! SWAP_req reaches exactly 0, which a ceiling overshoots; both rules stop as soon as nothing is left to swap.

use serde::{Deserialize, Serialize};

use crate::TenantError;

/// How the last victim's swap ratio is computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AlphaRule {
    /// α = min(1, SWAP_req / MEM(i)), rounded up to whole pages.
    #[default]
    Fraction,
    /// α = ⌈SWAP_req / MEM(i)⌉ as printed in the paper: 0 or 1.
    PrintedCeil,
}

impl std::str::FromStr for AlphaRule {
    type Err = TenantError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fraction" => Ok(AlphaRule::Fraction),
            "printed-ceil" | "ceil" => Ok(AlphaRule::PrintedCeil),
            other => Err(TenantError::InvalidInput(format!(
                "unknown swap-ratio rule {other:?}: expected fraction or printed-ceil"
            ))),
        }
    }
}

/// Options of [`plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    /// How the last victim's ratio is computed.
    pub rule: AlphaRule,
    /// The unit of residency: resident limits are whole multiples of it (4 KiB pages, or the pager's granule).
    pub page_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rule: AlphaRule::Fraction,
            page_bytes: 4096,
        }
    }
}

/// One tenant's share of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quota {
    /// Its demand, MEM(i).
    pub demand_bytes: u64,
    /// Its swap ratio α_i: the fraction of its memory kept on the store (0 for tenants that are not victims).
    pub alpha: f64,
    /// Bytes of it kept on the store and accessed there directly.
    pub swapped_bytes: u64,
    /// Bytes of it that may be resident: demand − swapped.
    pub resident_limit_bytes: u64,
    /// Whether it was chosen as a victim.
    pub victim: bool,
}

/// The outcome of Alg. 2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Σ MEM(i).
    pub total_demand_bytes: u64,
    /// MEM_sys.
    pub capacity_bytes: u64,
    /// SWAP_req = max(0, Σ MEM(i) − MEM_sys).
    pub swap_required_bytes: u64,
    /// One quota per tenant, in the order given (highest priority first).
    pub tenants: Vec<Quota>,
}

impl Plan {
    /// Σ of the resident limits; never more than the capacity.
    pub fn resident_total_bytes(&self) -> u64 {
        self.tenants.iter().map(|q| q.resident_limit_bytes).sum()
    }
}

/// Alg. 2 over demands listed from the highest priority to the lowest (as [`crate::priority::Ranking::order`]
/// gives them).
pub fn plan(
    demands_by_priority: &[u64],
    capacity_bytes: u64,
    options: &Options,
) -> Result<Plan, TenantError> {
    if options.page_bytes == 0 {
        return Err(TenantError::InvalidInput(
            "the page size must be at least one byte".into(),
        ));
    }
    let total = demands_by_priority
        .iter()
        .try_fold(0u64, |acc, &d| acc.checked_add(d))
        .ok_or_else(|| {
            TenantError::InvalidInput("the demands add up to more than 2^64 bytes".into())
        })?;
    let required = total.saturating_sub(capacity_bytes);
    let mut tenants: Vec<Quota> = demands_by_priority
        .iter()
        .map(|&d| Quota {
            demand_bytes: d,
            alpha: 0.0,
            swapped_bytes: 0,
            resident_limit_bytes: d,
            victim: false,
        })
        .collect();
    let mut remaining = required;
    for q in tenants.iter_mut().rev() {
        if remaining == 0 {
            break;
        }
        let demand = q.demand_bytes;
        if demand == 0 {
            continue;
        }
        let swapped = if remaining >= demand || options.rule == AlphaRule::PrintedCeil {
            demand
        } else {
            // Keep whole pages resident, so the victim gives up at least what is asked.
            let resident = (demand - remaining) / options.page_bytes * options.page_bytes;
            demand - resident
        };
        q.victim = true;
        q.swapped_bytes = swapped;
        q.resident_limit_bytes = demand - swapped;
        q.alpha = swapped as f64 / demand as f64;
        remaining = remaining.saturating_sub(swapped);
    }
    Ok(Plan {
        total_demand_bytes: total,
        capacity_bytes,
        swap_required_bytes: required,
        tenants,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const GB: u64 = 1_000_000_000;

    #[test]
    fn nothing_to_swap_when_it_fits() {
        let p = plan(&[GB, 2 * GB], 3 * GB, &Options::default()).unwrap();
        assert_eq!(p.swap_required_bytes, 0);
        assert!(p.tenants.iter().all(|q| !q.victim && q.alpha == 0.0));
        assert_eq!(p.resident_total_bytes(), 3 * GB);
    }

    #[test]
    fn paper_synthetic_workload() {
        // Four tasks of 6 GB, 18 GB of memory: SWAP_req = 6 GB, the lowest-priority task goes to storage whole.
        let p = plan(&[6 * GB; 4], 18 * GB, &Options::default()).unwrap();
        assert_eq!(p.swap_required_bytes, 6 * GB);
        assert_eq!(p.tenants[3].alpha, 1.0);
        assert_eq!(p.tenants[3].resident_limit_bytes, 0);
        assert!(p.tenants[..3].iter().all(|q| !q.victim));
    }

    #[test]
    fn fraction_against_printed_ceil() {
        // 64, 64, 64 and 128 MB for 240 MB (the Polybench case, GESUMMV lowest): SWAP_req = 80 MB.
        let mb = 1_000_000u64;
        let demands = [64 * mb, 64 * mb, 64 * mb, 128 * mb];
        let page = Options {
            page_bytes: 1,
            ..Options::default()
        };
        let p = plan(&demands, 240 * mb, &page).unwrap();
        assert_eq!(p.tenants[3].swapped_bytes, 80 * mb);
        assert!((p.tenants[3].alpha - 0.625).abs() < 1e-12);
        assert_eq!(p.tenants[3].resident_limit_bytes, 48 * mb);
        assert!(!p.tenants[2].victim);
        let ceil = Options {
            rule: AlphaRule::PrintedCeil,
            ..page
        };
        let p = plan(&demands, 240 * mb, &ceil).unwrap();
        assert_eq!(p.tenants[3].alpha, 1.0);
        assert_eq!(p.tenants[3].resident_limit_bytes, 0);
        assert!(
            !p.tenants[2].victim,
            "the ceiling overshoots, and the walk stops there"
        );
    }

    #[test]
    fn spills_over_several_victims_and_rounds_to_pages() {
        // 10 000 + 6 000 + 5 000 bytes into 9 000: SWAP_req = 12 000. The last tenant goes whole (5 000), the middle
        // one whole (6 000), and the first gives 1 000 bytes, rounded up to a 4096-byte page: it keeps 8192.
        let p = plan(&[10_000, 6_000, 5_000], 9_000, &Options::default()).unwrap();
        assert_eq!(p.swap_required_bytes, 12_000);
        assert_eq!(p.tenants[2].swapped_bytes, 5_000);
        assert_eq!(p.tenants[1].swapped_bytes, 6_000);
        assert_eq!(p.tenants[0].resident_limit_bytes, 8_192);
        assert_eq!(p.tenants[0].swapped_bytes, 1_808);
        assert!(p.resident_total_bytes() <= 9_000);
    }

    #[test]
    fn bad_inputs() {
        let zero_page = Options {
            page_bytes: 0,
            ..Options::default()
        };
        assert!(plan(&[1], 1, &zero_page).is_err());
        assert!(plan(&[u64::MAX, 1], 1, &Options::default()).is_err());
        assert!("whatever".parse::<AlphaRule>().is_err());
        assert_eq!(
            "printed-ceil".parse::<AlphaRule>().unwrap(),
            AlphaRule::PrintedCeil
        );
    }

    proptest! {
        #[test]
        fn quotas_never_exceed_capacity(
            demands in proptest::collection::vec(0u64..1 << 40, 0..8),
            capacity in 0u64..1 << 42,
            page_shift in 0u32..22,
            ceil in any::<bool>(),
        ) {
            let options = Options {
                rule: if ceil { AlphaRule::PrintedCeil } else { AlphaRule::Fraction },
                page_bytes: 1 << page_shift,
            };
            let p = plan(&demands, capacity, &options).unwrap();
            let total: u64 = demands.iter().sum();
            prop_assert!(p.resident_total_bytes() <= capacity.min(total));
            let mut seen_victim = false;
            for q in &p.tenants {
                prop_assert_eq!(q.swapped_bytes + q.resident_limit_bytes, q.demand_bytes);
                prop_assert!((0.0..=1.0).contains(&q.alpha));
                // Victims are a suffix (walking from the top, once one is found every lower tenant with memory is
                // one), and only the highest victim may keep part of its memory.
                if q.victim {
                    prop_assert!(!seen_victim || q.alpha == 1.0);
                    seen_victim = true;
                } else {
                    prop_assert!(!seen_victim || q.demand_bytes == 0);
                }
            }
        }
    }
}
