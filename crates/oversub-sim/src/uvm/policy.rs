//! The migration policies compared by the paper (Sec. 6.1) and the oracle bound oversub adds.
//!
//! A policy answers two questions for the simulator in [`super::sim`]: where a page lives before anyone asked
//! (unmapped on the host, so the first touch faults; or mapped for remote access), and, on a fault or on a host
//! access that missed the L2, whether to migrate. Eviction order is not a policy choice here: every policy but the
//! oracle evicts in the driver's order ([`super::sim::EvictionOrder`]).

use std::fmt;

use serde::Serialize;

use super::SimError;

/// Thresholds the paper tries for LazyPgStatSW, keeping the best per workload.
pub const LAZY_PG_STAT_THRESHOLDS: [u32; 5] = [2, 8, 32, 64, 256];
/// Spatial-utilisation thresholds the paper tries for StaticMap (Fig. 11).
pub const STATIC_MAP_THRESHOLDS: [f64; 3] = [0.2, 0.5, 0.9];
/// Access count at which NVIDIA's hardware counters migrate a 64 KiB group.
pub const LAZY_GRP_HW_THRESHOLD: u32 = 256;
/// LazyPgDynSW's base threshold t_s (see [`Policy::LazyPgDynSw`]): `-migrate_threshold 8` in the reference
/// simulator's configuration (Ganguly et al.'s gpgpu-sim_UVMSmart, `configs/GeForceGTX1080Ti/gpgpusim.config`).
pub const LAZY_PG_DYN_BASE_THRESHOLD: u32 = 8;
/// LazyPgDynSW's penalty p once memory is oversubscribed: `-multiply_dma_penalty 2` in the same configuration.
pub const LAZY_PG_DYN_PENALTY: u32 = 2;

/// One way of deciding, on a fault under oversubscription, whether to migrate a page or serve it from the host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub enum Policy {
    /// The driver's default: demand migration with the prefetcher on. A fault first grows to its whole 64 KiB big
    /// page, then the bitmap tree over the (scaled) 2 MiB block, with pages as leaves, fills the largest node
    /// more than 51% resident; thrashing detection throttles, then pins to the host, pages that bounce (see
    /// [`super::sim::Thrashing`]).
    Eager,
    /// Demand migration of the faulting page only (prefetcher off), with the same thrashing detection.
    EagerNoPrefetch,
    /// Pages stay mapped on the host; a per-64 KiB counter of accesses that reach memory migrates the whole group
    /// when it reaches `threshold` (256 in NVIDIA's driver).
    LazyGrpHw {
        /// Accesses before the group migrates.
        threshold: u32,
    },
    /// Everything stays in host memory, mapped for remote access (`cudaMemAdvise` preferred location CPU).
    PinHost,
    /// As LazyGrpHW with per-4 KiB-page counters and a static threshold.
    LazyPgStatSw {
        /// Accesses before the page migrates.
        threshold: u32,
    },
    /// Per-page counters with a threshold that adapts to memory pressure, as Ganguly et al.'s reference
    /// simulator computes it (gpgpu-sim_UVMSmart, `gmmu_t::should_cause_page_migration`, adaptive mode): a store
    /// always migrates; a load migrates once the page's count reaches t = 1 + t_s · occupancy while GPU memory has
    /// room, and t = t_s · p · (r + 1) once it is oversubscribed, r being the page's round trips.
    LazyPgDynSw {
        /// t_s.
        base_threshold: u32,
    },
    /// The earlier reading of LazyPgDynSW, kept for comparison: no penalty, stores count like loads, and
    /// t = t_s · (r + 1) + 1 once oversubscribed.
    LazyPgDynSwNoPenalty {
        /// t_s.
        base_threshold: u32,
    },
    /// Spatial utilisation tracked per cache line; a page evicted before migrates again only if the share of its
    /// lines used is at least `threshold`, otherwise its lines are served from the host.
    StaticMap {
        /// Share of the page's lines, 0..=1.
        threshold: f64,
    },
    /// The paper's policy: spatial utilisation from the page statistics table, f_over from the measured fault
    /// rate (Eq. 2), migrate when C_GPU < C_CPU (Eqs. 1 and 3). Charged for its instrumentation.
    DynaMap,
    /// DynaMap with an offline profile (Sec. 6.2's last experiment): every page starts with the utilisation a
    /// first, profiling run of DynaMap recorded, and no instrumentation runs.
    DynaMapOffline,
    /// Demand migration with perfect foreknowledge of the trace: Belady's MIN evicts the resident page used
    /// furthest in the future. No demand-migrating policy migrates fewer pages.
    Oracle,
}

impl Policy {
    /// The policies of one suite row: the paper's eight (LazyPgStatSW at each tried threshold, StaticMap at each
    /// threshold) and the oracle.
    pub fn suite() -> Vec<Policy> {
        let mut all = vec![
            Policy::Eager,
            Policy::EagerNoPrefetch,
            Policy::LazyGrpHw {
                threshold: LAZY_GRP_HW_THRESHOLD,
            },
            Policy::PinHost,
        ];
        all.extend(
            LAZY_PG_STAT_THRESHOLDS
                .iter()
                .map(|&threshold| Policy::LazyPgStatSw { threshold }),
        );
        all.push(Policy::LazyPgDynSw {
            base_threshold: LAZY_PG_DYN_BASE_THRESHOLD,
        });
        all.extend(
            STATIC_MAP_THRESHOLDS
                .iter()
                .map(|&threshold| Policy::StaticMap { threshold }),
        );
        all.push(Policy::DynaMap);
        all.push(Policy::DynaMapOffline);
        all.push(Policy::Oracle);
        all
    }

    /// The paper's name for the family, without parameters (`LazyPgStatSW`).
    pub fn family(&self) -> &'static str {
        match self {
            Policy::Eager => "Eager",
            Policy::EagerNoPrefetch => "Eager-woPref",
            Policy::LazyGrpHw { .. } => "LazyGrpHW",
            Policy::PinHost => "PinHost",
            Policy::LazyPgStatSw { .. } => "LazyPgStatSW",
            Policy::LazyPgDynSw { .. } => "LazyPgDynSW",
            Policy::LazyPgDynSwNoPenalty { .. } => "LazyPgDynSW-noPenalty",
            Policy::StaticMap { .. } => "StaticMap",
            Policy::DynaMap => "DynaMap",
            Policy::DynaMapOffline => "DynaMap-offline",
            Policy::Oracle => "Oracle",
        }
    }

    /// Parses a policy name: the paper's spelling or any case with `-`/`_` ignored (`dynamap`, `eager-wopref`,
    /// `lazy-grp-hw`), with an optional parameter after `:` or in parentheses (`lazypgstatsw:32`,
    /// `StaticMap(0.5)`, `lazygrphw:128`).
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let unknown = || SimError::UnknownPolicy {
            name: text.to_string(),
            known: KNOWN.to_string(),
        };
        let trimmed = text.trim();
        let (head, param) = match trimmed.find([':', '(', '=']) {
            Some(i) => {
                let (h, p) = trimmed.split_at(i);
                let p = p[1..].trim_end_matches(')').trim();
                (h, Some(p))
            }
            None => (trimmed, None),
        };
        let key: String = head
            .chars()
            .filter(|c| *c != '-' && *c != '_' && !c.is_whitespace())
            .flat_map(char::to_lowercase)
            .collect();
        let count = |default: u32| -> Result<u32, SimError> {
            match param {
                None => Ok(default),
                Some(p) => p.parse::<u32>().ok().filter(|&t| t > 0).ok_or_else(|| {
                    SimError::InvalidParameter(format!(
                        "`{text}`: the threshold must be a positive whole number of accesses"
                    ))
                }),
            }
        };
        let no_param = |p: Policy| match param {
            None => Ok(p),
            Some(_) => Err(SimError::InvalidParameter(format!(
                "`{text}`: {} takes no parameter",
                p.family()
            ))),
        };
        match key.as_str() {
            "eager" => no_param(Policy::Eager),
            "eagerwopref" | "eagernoprefetch" | "eagerwoprefetch" => {
                no_param(Policy::EagerNoPrefetch)
            }
            "lazygrphw" => Ok(Policy::LazyGrpHw {
                threshold: count(LAZY_GRP_HW_THRESHOLD)?,
            }),
            "pinhost" => no_param(Policy::PinHost),
            "lazypgstatsw" => Ok(Policy::LazyPgStatSw {
                threshold: count(32)?,
            }),
            "lazypgdynsw" => Ok(Policy::LazyPgDynSw {
                base_threshold: count(LAZY_PG_DYN_BASE_THRESHOLD)?,
            }),
            "lazypgdynswnopenalty" => Ok(Policy::LazyPgDynSwNoPenalty {
                base_threshold: count(LAZY_PG_DYN_BASE_THRESHOLD)?,
            }),
            "staticmap" => {
                let threshold = match param {
                    None => 0.5,
                    Some(p) => p
                        .trim_end_matches('%')
                        .parse::<f64>()
                        .ok()
                        .map(|v| if p.ends_with('%') { v / 100.0 } else { v })
                        .filter(|v| (0.0..=1.0).contains(v))
                        .ok_or_else(|| {
                            SimError::InvalidParameter(format!(
                                "`{text}`: the StaticMap threshold is a share of the page's lines, 0 to 1 \
                                 (or 0% to 100%)"
                            ))
                        })?,
                };
                Ok(Policy::StaticMap { threshold })
            }
            "dynamap" => no_param(Policy::DynaMap),
            "dynamapoffline" => no_param(Policy::DynaMapOffline),
            "oracle" | "belady" | "min" => no_param(Policy::Oracle),
            _ => Err(unknown()),
        }
    }

    /// Whether pages this policy has not migrated stay mapped for remote access (lazy and pinned policies) rather
    /// than unmapped, faulting on their next touch.
    pub(crate) fn host_pages_mapped(&self) -> bool {
        matches!(
            self,
            Policy::PinHost
                | Policy::LazyGrpHw { .. }
                | Policy::LazyPgStatSw { .. }
                | Policy::LazyPgDynSw { .. }
                | Policy::LazyPgDynSwNoPenalty { .. }
        )
    }
}

const KNOWN: &str =
    "eager, eager-wopref, lazy-grp-hw[:N], pin-host, lazy-pg-stat-sw[:N], lazy-pg-dyn-sw[:N], \
                     lazy-pg-dyn-sw-nopenalty[:N], static-map[:SHARE], dynamap, dynamap-offline, oracle";

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::LazyGrpHw { threshold } if *threshold != LAZY_GRP_HW_THRESHOLD => {
                write!(f, "LazyGrpHW({threshold})")
            }
            Policy::LazyPgStatSw { threshold } => write!(f, "LazyPgStatSW({threshold})"),
            Policy::LazyPgDynSw { base_threshold }
                if *base_threshold != LAZY_PG_DYN_BASE_THRESHOLD =>
            {
                write!(f, "LazyPgDynSW({base_threshold})")
            }
            Policy::LazyPgDynSwNoPenalty { base_threshold }
                if *base_threshold != LAZY_PG_DYN_BASE_THRESHOLD =>
            {
                write!(f, "LazyPgDynSW-noPenalty({base_threshold})")
            }
            Policy::StaticMap { threshold } => write!(f, "StaticMap({threshold})"),
            other => f.write_str(other.family()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Policy::suite() {
            assert_eq!(Policy::parse(&p.to_string()).unwrap(), p, "{p}");
        }
        assert_eq!(
            Policy::parse("eager-wopref").unwrap(),
            Policy::EagerNoPrefetch
        );
        assert_eq!(
            Policy::parse("LAZY_GRP_HW").unwrap(),
            Policy::LazyGrpHw { threshold: 256 }
        );
        assert_eq!(
            Policy::parse("static-map:20%").unwrap(),
            Policy::StaticMap { threshold: 0.2 }
        );
    }

    #[test]
    fn bad_names_are_explained() {
        let e = Policy::parse("dynmap").unwrap_err().to_string();
        assert!(
            e.contains("unknown policy `dynmap`") && e.contains("dynamap"),
            "{e}"
        );
        assert!(Policy::parse("lazypgstatsw:0").is_err());
        assert!(Policy::parse("staticmap:1.5").is_err());
        assert!(Policy::parse("dynamap:3").is_err());
    }
}
