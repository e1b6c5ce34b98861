//! Worst-case completion of transfer-side work under the arbiter (SiΓ Sec. 6.3, Eqs. 2-4).
//!
//! A PREM task repeats load (ML), compute (C) and unload (MU). Transfer work may run only in compute windows, so a
//! transfer of T(MG) seconds of copying is spread over ⌈T(MG)/T(C)⌉ windows, and every window boundary costs an
//! unload and a load plus three server round trips (ε each).

use crate::ArbiterError;

/// A PREM task's phase lengths in seconds: measured (or WCET) and worst observed memory phases.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PremPhases {
    /// T(ML): the memory-loading phase.
    pub load_s: f64,
    /// T(C): the compute phase as announced, which is the usable window (its shortest length, so that no grant
    /// outlives the real phase).
    pub compute_s: f64,
    /// The compute phase's longest length: between the announced end and the real end the server sees an
    /// overdue phase and grants nothing. Equal to `compute_s` in the paper's model.
    pub compute_worst_s: f64,
    /// T(MU): the memory-unloading phase.
    pub unload_s: f64,
    /// T(ML^worst), for the spin-kernel case (Eq. 4); equal to `load_s` when phases are WCETs.
    pub load_worst_s: f64,
    /// T(MU^worst).
    pub unload_worst_s: f64,
}

impl PremPhases {
    /// Phases given as WCETs (the worst cases equal the lengths).
    pub fn wcet(load_s: f64, compute_s: f64, unload_s: f64) -> PremPhases {
        PremPhases {
            load_s,
            compute_s,
            compute_worst_s: compute_s,
            unload_s,
            load_worst_s: load_s,
            unload_worst_s: unload_s,
        }
    }

    fn validate(&self) -> Result<(), ArbiterError> {
        check("T(ML)", self.load_s)?;
        check("T(MU)", self.unload_s)?;
        check("T(ML worst)", self.load_worst_s)?;
        check("T(MU worst)", self.unload_worst_s)?;
        check("T(C)", self.compute_s)?;
        check("T(C worst)", self.compute_worst_s)?;
        if self.compute_s == 0.0 {
            return Err(ArbiterError::InvalidDuration {
                value: "0".into(),
                reason: "T(C) must be longer than zero",
            });
        }
        Ok(())
    }
}

fn check(what: &'static str, v: f64) -> Result<(), ArbiterError> {
    if !v.is_finite() {
        return Err(ArbiterError::InvalidDuration {
            value: format!("{what} = {v}"),
            reason: "not a finite number",
        });
    }
    if v < 0.0 {
        return Err(ArbiterError::InvalidDuration {
            value: format!("{what} = {v}"),
            reason: "durations cannot be negative",
        });
    }
    Ok(())
}

/// Completion bounds of a transfer phase.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TransferBound {
    /// Eq. 2 as printed, with ε_M at its upper bound ε + T(Q_CE).
    pub paper_s: f64,
    /// Eq. 2 with whole chunks: a window of T(C) holds only ⌊(T(C) − ε)/T(Q)⌋ chunks, since none may run past it.
    /// `None` when not one chunk fits a window (the transfer starves until `NO_OPER`).
    pub chunked_s: Option<f64>,
    /// Compute windows the transfer spans (chunked form).
    pub windows: Option<u64>,
}

/// Eq. 2: the worst-case end of a transfer of `transfer_s` seconds (T(MG), measured alone) issued at an arbitrary
/// moment, with server overhead `epsilon_s` and chunk time `chunk_s` (T(Q_CE)).
pub fn transfer_bound(
    transfer_s: f64,
    phases: &PremPhases,
    epsilon_s: f64,
    chunk_s: f64,
) -> Result<TransferBound, ArbiterError> {
    phases.validate()?;
    check("T(MG)", transfer_s)?;
    check("epsilon", epsilon_s)?;
    check("T(Q)", chunk_s)?;
    let (ml, c, mu) = (phases.load_s, phases.compute_s, phases.unload_s);
    // Time lost to an overdue compute phase (announced shorter than it may run); zero in the paper's model.
    let overdue = (phases.compute_worst_s - c).max(0.0);
    let eps_m = epsilon_s + chunk_s;
    let cycle = 3.0 * epsilon_s + mu + ml + c + overdue;
    let paper =
        eps_m + overdue + mu + ml + (transfer_s / c).floor() * cycle + epsilon_s + transfer_s % c;
    let (chunked, windows) = if chunk_s > 0.0 {
        let per_window = ((c - epsilon_s).max(0.0) / chunk_s).floor() * chunk_s;
        if per_window <= 0.0 {
            (None, None)
        } else {
            let chunks = (transfer_s / chunk_s).ceil();
            let work = chunks * chunk_s;
            let full = (work / per_window).floor();
            let rest = work - full * per_window;
            let cycle_w = cycle;
            // A transfer that fills whole windows exactly ends inside the last one, not after another cycle.
            let (full, rest) = if rest <= 0.0 && full >= 1.0 {
                (full - 1.0, per_window)
            } else {
                (full, rest)
            };
            let end = eps_m + overdue + mu + ml + full * cycle_w + epsilon_s + rest;
            (Some(end), Some(full as u64 + 1))
        }
    } else {
        (Some(paper), None)
    };
    Ok(TransferBound {
        paper_s: paper,
        chunked_s: chunked,
        windows,
    })
}

/// The three kernel cases of Sec. 6.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum KernelCase {
    /// (A) T(K) < T(C): fits in one compute window (Eq. 3).
    Short,
    /// (B) T(K) ≥ T(C), preemptible by the spin kernel (Eq. 4).
    Preemptible,
    /// (C) T(K) ≥ T(C), not preemptible: it waits for `NO_OPER`.
    NonPreemptible,
}

/// The bound of a kernel phase.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct KernelBound {
    /// Which case applies.
    pub case: KernelCase,
    /// Worst-case end in seconds; `None` when the kernel starves until the CPU side sends `NO_OPER` (case C, or
    /// case B with T(C_P) ≤ 0).
    pub end_s: Option<f64>,
}

/// Eqs. 3 and 4: the worst-case end of a kernel of `kernel_s` seconds.
pub fn kernel_bound(
    kernel_s: f64,
    preemptible: bool,
    preempt_s: f64,
    phases: &PremPhases,
    epsilon_s: f64,
) -> Result<KernelBound, ArbiterError> {
    phases.validate()?;
    check("T(K)", kernel_s)?;
    check("preemption time", preempt_s)?;
    check("epsilon", epsilon_s)?;
    let (ml, c, mu) = (phases.load_s, phases.compute_s, phases.unload_s);
    if kernel_s < c {
        // ε_K < ε + T(K): the request may come up to a kernel length before the window closes.
        let eps_k = epsilon_s + kernel_s;
        return Ok(KernelBound {
            case: KernelCase::Short,
            end_s: Some(eps_k + mu + ml + kernel_s),
        });
    }
    if !preemptible {
        return Ok(KernelBound {
            case: KernelCase::NonPreemptible,
            end_s: None,
        });
    }
    let cp = (ml + c + mu) - (phases.unload_worst_s + phases.load_worst_s);
    if cp <= 0.0 {
        return Ok(KernelBound {
            case: KernelCase::Preemptible,
            end_s: None,
        });
    }
    let eps_p = epsilon_s + preempt_s;
    let end = eps_p
        + mu
        + ml
        + (kernel_s / cp).floor()
            * (3.0 * epsilon_s + phases.unload_worst_s + phases.load_worst_s + cp)
        + epsilon_s
        + kernel_s % cp;
    Ok(KernelBound {
        case: KernelCase::Preemptible,
        end_s: Some(end),
    })
}

/// A kernel phase to bound: its length alone, and whether (and how fast) the spin kernel preempts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelQuery {
    /// T(K), seconds.
    pub kernel_s: f64,
    /// Whether the spin kernel can preempt it (case B rather than C).
    pub preemptible: bool,
    /// Time to preempt it, seconds.
    pub preempt_s: f64,
}

/// The bounds of a transfer phase and of a kernel phase (either may be absent) under one PREM task, as
/// `oversub arbiter bound --json` writes them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BoundReport {
    pub phases: PremPhases,
    pub epsilon_s: f64,
    pub chunk_time_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<TransferReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelReport>,
}

/// A transfer's length alone and its bounds (Eq. 2).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TransferReport {
    pub transfer_s: f64,
    pub bound_paper_s: f64,
    pub bound_chunked_s: Option<f64>,
    pub windows: Option<u64>,
}

/// A kernel's length alone, its case and its bound (Eqs. 3-4; `None`: it starves until `NO_OPER`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct KernelReport {
    pub kernel_s: f64,
    pub case: KernelCase,
    pub preemptible: bool,
    pub bound_s: Option<f64>,
}

/// [`transfer_bound`] of `transfer_s` and [`kernel_bound`] of `kernel`, whichever are given, in one report.
pub fn bound_report(
    phases: PremPhases,
    epsilon_s: f64,
    chunk_time_s: f64,
    transfer_s: Option<f64>,
    kernel: Option<KernelQuery>,
) -> Result<BoundReport, ArbiterError> {
    let transfer = match transfer_s {
        Some(t) => {
            let b = transfer_bound(t, &phases, epsilon_s, chunk_time_s)?;
            Some(TransferReport {
                transfer_s: t,
                bound_paper_s: b.paper_s,
                bound_chunked_s: b.chunked_s,
                windows: b.windows,
            })
        }
        None => None,
    };
    let kernel = match kernel {
        Some(k) => {
            let b = kernel_bound(k.kernel_s, k.preemptible, k.preempt_s, &phases, epsilon_s)?;
            Some(KernelReport {
                kernel_s: k.kernel_s,
                case: b.case,
                preemptible: k.preemptible,
                bound_s: b.end_s,
            })
        }
        None => None,
    };
    Ok(BoundReport {
        phases,
        epsilon_s,
        chunk_time_s,
        transfer,
        kernel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    // TX1 averages of Table 2 (µs) in seconds.
    fn tx1() -> PremPhases {
        PremPhases::wcet(444e-6, 8784e-6, 716e-6)
    }

    #[test]
    fn bound_report_holds_what_was_asked() {
        let p = tx1();
        let only_transfer = bound_report(p, 10e-6, 100e-6, Some(0.02), None).unwrap();
        let b = transfer_bound(0.02, &p, 10e-6, 100e-6).unwrap();
        let t = only_transfer.transfer.unwrap();
        assert_eq!(
            (t.bound_paper_s, t.bound_chunked_s, t.windows),
            (b.paper_s, b.chunked_s, b.windows)
        );
        assert!(only_transfer.kernel.is_none());
        let k = KernelQuery {
            kernel_s: 0.001,
            preemptible: false,
            preempt_s: 0.0,
        };
        let only_kernel = bound_report(p, 10e-6, 100e-6, None, Some(k)).unwrap();
        assert!(only_kernel.transfer.is_none());
        let kr = only_kernel.kernel.unwrap();
        assert_eq!(kr.case, KernelCase::Short);
        assert_eq!(
            kr.bound_s,
            kernel_bound(0.001, false, 0.0, &p, 10e-6).unwrap().end_s
        );
        assert!(bound_report(p, 10e-6, 100e-6, Some(-1.0), None).is_err());
    }

    #[test]
    fn eq2_by_hand() {
        // T(MG) = 20 ms over T(C) = 8.784 ms: 2 full windows and 2.432 ms left.
        let b = transfer_bound(20e-3, &tx1(), 1e-6, 122e-6).unwrap_or_else(|e| panic!("{e}"));
        let eps_m = 1e-6 + 122e-6;
        let expected = eps_m
            + 716e-6
            + 444e-6
            + 2.0 * (3e-6 + 716e-6 + 444e-6 + 8784e-6)
            + 1e-6
            + (20e-3 - 2.0 * 8784e-6);
        assert!(close(b.paper_s, expected), "{} vs {expected}", b.paper_s);
        // Chunked: 71 chunks of 122 µs fit a window (8.662 ms); 164 chunks = 20.008 ms -> 2 full windows + 2.684 ms.
        let per = 71.0 * 122e-6;
        let work = 164.0 * 122e-6;
        let expected_c = eps_m
            + 716e-6
            + 444e-6
            + 2.0 * (3e-6 + 716e-6 + 444e-6 + 8784e-6)
            + 1e-6
            + (work - 2.0 * per);
        let got = b.chunked_s.unwrap_or(f64::NAN);
        assert!(close(got, expected_c), "{got} vs {expected_c}");
        assert_eq!(b.windows, Some(3));
        assert!(got >= b.paper_s);
    }

    #[test]
    fn a_transfer_that_fills_windows_exactly_ends_in_the_last_one() {
        let p = PremPhases::wcet(1.0, 10.0, 1.0);
        let b = transfer_bound(20.0, &p, 0.0, 1.0).unwrap_or_else(|e| panic!("{e}"));
        // Two windows of 10: ends 10 s into the second window, after one ML+MU gap.
        assert!(close(
            b.chunked_s.unwrap_or(f64::NAN),
            1.0 + 2.0 + 12.0 + 10.0
        ));
        assert_eq!(b.windows, Some(2));
    }

    #[test]
    fn an_overdue_compute_phase_adds_its_slack_to_every_gap() {
        let exact = PremPhases::wcet(1.0, 10.0, 1.0);
        let slack = PremPhases {
            compute_worst_s: 12.0,
            ..exact
        };
        let a = transfer_bound(25.0, &exact, 0.0, 1.0).unwrap_or_else(|e| panic!("{e}"));
        let b = transfer_bound(25.0, &slack, 0.0, 1.0).unwrap_or_else(|e| panic!("{e}"));
        // One initial wait and two window crossings, each 2 s longer.
        assert!(
            close(b.paper_s - a.paper_s, 6.0),
            "{} {}",
            a.paper_s,
            b.paper_s
        );
        assert!(close(
            b.chunked_s.unwrap_or(0.0) - a.chunked_s.unwrap_or(0.0),
            6.0
        ));
    }

    #[test]
    fn a_window_shorter_than_a_chunk_starves() {
        let p = PremPhases::wcet(1e-3, 100e-6, 1e-3);
        let b = transfer_bound(1e-3, &p, 1e-6, 122e-6).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.chunked_s, None);
    }

    #[test]
    fn kernel_cases() {
        let p = tx1();
        let a =
            kernel_bound(0.34 * 8784e-6, false, 150e-6, &p, 1e-6).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.case, KernelCase::Short);
        let k = 0.34 * 8784e-6;
        assert!(close(
            a.end_s.unwrap_or(f64::NAN),
            1e-6 + k + 716e-6 + 444e-6 + k
        ));
        let c =
            kernel_bound(1.4 * 8784e-6, false, 150e-6, &p, 1e-6).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((c.case, c.end_s), (KernelCase::NonPreemptible, None));
        let worst = PremPhases {
            load_worst_s: 642e-6,
            unload_worst_s: 914e-6,
            ..p
        };
        let b = kernel_bound(1.4 * 8784e-6, true, 150e-6, &worst, 1e-6)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.case, KernelCase::Preemptible);
        let cp: f64 = (444e-6 + 8784e-6 + 716e-6) - (914e-6 + 642e-6);
        let k: f64 = 1.4 * 8784e-6;
        let expected = 151e-6
            + 716e-6
            + 444e-6
            + (k / cp).floor() * (3e-6 + 914e-6 + 642e-6 + cp)
            + 1e-6
            + k % cp;
        assert!(close(b.end_s.unwrap_or(f64::NAN), expected));
    }

    #[test]
    fn bad_inputs_are_refused() {
        let p = tx1();
        assert!(transfer_bound(-1.0, &p, 0.0, 1e-4).is_err());
        assert!(transfer_bound(1.0, &p, f64::NAN, 1e-4).is_err());
        assert!(transfer_bound(1.0, &PremPhases::wcet(1.0, 0.0, 1.0), 0.0, 1e-4).is_err());
        assert!(kernel_bound(1.0, true, -1.0, &p, 0.0).is_err());
    }
}
