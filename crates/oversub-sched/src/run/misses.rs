//! Where a run's deadline misses come from: the start (the table began late and is catching up) or the steady
//! state (the paging does not fit the slots), read off the slot records repetition by repetition.

use serde::Serialize;

use super::{RunResult, SlotRecord};

/// A work start later than this counts as late when judging whether a repetition ran on time (timer and
/// scheduling jitter of a few milliseconds is not a backlog).
pub const ON_TIME_S: f64 = 0.010;

/// One repetition of the table as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repetition {
    /// Index of the repetition (0 is the first, warm-up included).
    pub hyperperiod: usize,
    /// Whether it is counted (after the warm-up).
    pub counted: bool,
    /// Slot instances in it.
    pub slots: usize,
    /// Of those, the ones that missed their deadline.
    pub misses: usize,
    /// Worst lateness of a work start in it, seconds.
    pub worst_lateness_s: f64,
}

/// Where the misses of a run come from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MissOrigin {
    /// No slot missed, counted or not.
    None,
    /// Only the start missed: the table began late (a store still slow after the set-up, say) and the lateness
    /// fell repetition by repetition until it was on time from `on_time_from` on.
    StartCaughtUp {
        /// Worst lateness in the first repetition, seconds.
        initial_lateness_s: f64,
        /// First repetition that ran on time, after which none missed.
        on_time_from: usize,
    },
    /// The table began late and was still catching up when the run ended: the lateness fell by
    /// `drain_s_per_hyperperiod` a repetition on average, so about `hyperperiods_to_catch_up` more would have
    /// brought it on time.
    StartStillDraining {
        /// Worst lateness in the first repetition, seconds.
        initial_lateness_s: f64,
        /// Worst lateness in the last one, seconds.
        final_lateness_s: f64,
        /// Mean fall of the worst lateness per repetition, seconds.
        drain_s_per_hyperperiod: f64,
        /// Repetitions more at that rate until on time.
        hyperperiods_to_catch_up: usize,
    },
    /// Every slot that missed started on time (within [`ON_TIME_S`]): the work ran past its window, not the paging
    /// (a CPU busy with other work, or a work longer than its budget).
    WorkOverran {
        /// Repetitions with a miss, of all repetitions.
        repetitions_with_misses: usize,
    },
    /// Misses in one repetition only, after the first: a hiccup of the machine or the store, not a trend.
    Isolated {
        /// The repetition.
        hyperperiod: usize,
        /// Whether it was counted (after the warm-up).
        counted: bool,
        /// Its worst lateness, seconds.
        worst_lateness_s: f64,
    },
    /// Misses all through the run without a falling backlog: the paging does not fit the slots at this period and
    /// these speeds (the steady state is infeasible in practice).
    SteadyState {
        /// Repetitions with a miss, of all repetitions.
        repetitions_with_misses: usize,
    },
}

/// The run repetition by repetition, and where its misses come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MissProfile {
    /// Every repetition, warm-up included.
    pub repetitions: Vec<Repetition>,
    /// The verdict.
    pub origin: MissOrigin,
}

impl MissProfile {
    /// One line for people: where the misses came from and what to do about them.
    pub fn describe(&self, hyperperiod_s: f64) -> String {
        let lateness: Vec<String> = self
            .repetitions
            .iter()
            .map(|r| format!("{:.2}", r.worst_lateness_s))
            .collect();
        let by_rep = format!("worst lateness by repetition: {} s", lateness.join(", "));
        match self.origin {
            MissOrigin::None => "no slot missed".into(),
            MissOrigin::StartCaughtUp {
                initial_lateness_s,
                on_time_from,
            } => format!(
                "misses only at the start: the worst start in the first repetition was {initial_lateness_s:.2} s \
                 late, and the table ran on time from repetition {on_time_from} (after {:.1} s); {by_rep}",
                on_time_from as f64 * hyperperiod_s
            ),
            MissOrigin::StartStillDraining {
                initial_lateness_s,
                final_lateness_s,
                drain_s_per_hyperperiod,
                hyperperiods_to_catch_up,
            } => format!(
                "misses from the start: the table began {initial_lateness_s:.2} s late and was still \
                 {final_lateness_s:.2} s late at the end, catching up {:.0} ms per repetition (about \
                 {hyperperiods_to_catch_up} more repetitions to be on time; a longer warm-up would hide it, a \
                 store that is fast from the start avoids it); {by_rep}",
                drain_s_per_hyperperiod * 1e3
            ),
            MissOrigin::WorkOverran {
                repetitions_with_misses,
            } => format!(
                "misses with every slot started on time ({repetitions_with_misses} of {} repetitions): the works \
                 ran past their windows, not the paging's timing (their CPU was shared: with the pager's checksums \
                 and copies on a small machine, or with other programs; `--inflate` budgets for that); {by_rep}",
                self.repetitions.len()
            ),
            MissOrigin::Isolated {
                hyperperiod,
                counted,
                worst_lateness_s,
            } => format!(
                "misses in one repetition only ({hyperperiod}, {}; worst start {:.0} ms late): a hiccup of the \
                 machine or the store, not a trend; {by_rep}",
                if counted { "counted" } else { "warm-up" },
                worst_lateness_s * 1e3
            ),
            MissOrigin::SteadyState {
                repetitions_with_misses,
            } => format!(
                "misses in the steady state ({repetitions_with_misses} of {} repetitions): the paging does not \
                 fit the slots at this period at the speeds the store runs at (a longer period or a smaller swap \
                 share does); {by_rep}",
                self.repetitions.len()
            ),
        }
    }
}

/// Reads where the misses of `r` come from. A repetition is on time when none of its slots missed and no work
/// started more than [`ON_TIME_S`] late.
pub fn miss_profile(r: &RunResult) -> MissProfile {
    let repetitions = repetitions(&r.slots, r.hyperperiods, r.warmup_hyperperiods);
    let origin = origin(&repetitions);
    MissProfile {
        repetitions,
        origin,
    }
}

fn repetitions(slots: &[SlotRecord], hyperperiods: usize, warmup: usize) -> Vec<Repetition> {
    let n = hyperperiods.max(slots.iter().map(|s| s.hyperperiod + 1).max().unwrap_or(0));
    (0..n)
        .map(|h| {
            let mine = slots.iter().filter(|s| s.hyperperiod == h);
            let (mut count, mut misses, mut worst) = (0, 0, 0.0f64);
            for s in mine {
                count += 1;
                misses += usize::from(!s.met);
                worst = worst.max(s.lateness_s);
            }
            Repetition {
                hyperperiod: h,
                counted: h >= warmup,
                slots: count,
                misses,
                worst_lateness_s: worst,
            }
        })
        .collect()
}

fn on_time(r: &Repetition) -> bool {
    r.misses == 0 && r.worst_lateness_s <= ON_TIME_S
}

fn origin(reps: &[Repetition]) -> MissOrigin {
    let with_misses = reps.iter().filter(|r| r.misses > 0).count();
    if with_misses == 0 {
        return MissOrigin::None;
    }
    let Some(first) = reps.first() else {
        return MissOrigin::None;
    };
    if reps
        .iter()
        .filter(|r| r.misses > 0)
        .all(|r| r.worst_lateness_s <= ON_TIME_S)
    {
        return MissOrigin::WorkOverran {
            repetitions_with_misses: with_misses,
        };
    }
    // Misses only in a leading run of repetitions, everything on time after it.
    if let Some(from) = reps.iter().position(on_time) {
        if reps[from..].iter().all(on_time) && reps[..from].iter().any(|r| r.misses > 0) {
            return MissOrigin::StartCaughtUp {
                initial_lateness_s: first.worst_lateness_s,
                on_time_from: from,
            };
        }
    }
    if let [only] = reps.iter().filter(|r| r.misses > 0).collect::<Vec<_>>()[..] {
        if only.hyperperiod > 0 {
            return MissOrigin::Isolated {
                hyperperiod: only.hyperperiod,
                counted: only.counted,
                worst_lateness_s: only.worst_lateness_s,
            };
        }
    }
    // Lateness that stopped falling while slots still miss: whatever the start was, the end is the steady state.
    if let [.., a, b, c] = reps {
        let flat = [a, b, c].iter().all(|r| r.misses > 0)
            && [a, b, c]
                .iter()
                .map(|r| r.worst_lateness_s)
                .fold(f64::NEG_INFINITY, f64::max)
                - [a, b, c]
                    .iter()
                    .map(|r| r.worst_lateness_s)
                    .fold(f64::INFINITY, f64::min)
                <= ON_TIME_S;
        if flat {
            return MissOrigin::SteadyState {
                repetitions_with_misses: with_misses,
            };
        }
    }
    // A backlog from the start that is still draining: the worst lateness falls (never rises by more than the
    // on-time margin) from the first repetition to the last, and the start was the latest.
    let last = reps.last().unwrap_or(first);
    let falling = reps
        .windows(2)
        .all(|w| w[1].worst_lateness_s <= w[0].worst_lateness_s + ON_TIME_S);
    if reps.len() >= 2 && falling && first.worst_lateness_s > last.worst_lateness_s + ON_TIME_S {
        let drain = (first.worst_lateness_s - last.worst_lateness_s) / (reps.len() - 1) as f64;
        let more = ((last.worst_lateness_s - ON_TIME_S).max(0.0) / drain).ceil();
        return MissOrigin::StartStillDraining {
            initial_lateness_s: first.worst_lateness_s,
            final_lateness_s: last.worst_lateness_s,
            drain_s_per_hyperperiod: drain,
            hyperperiods_to_catch_up: more.min(1e6) as usize,
        };
    }
    MissOrigin::SteadyState {
        repetitions_with_misses: with_misses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(h: usize, misses: usize, late: f64) -> Repetition {
        Repetition {
            hyperperiod: h,
            counted: true,
            slots: 5,
            misses,
            worst_lateness_s: late,
        }
    }

    #[test]
    fn a_clean_run_has_no_origin() {
        assert_eq!(
            origin(&[rep(0, 0, 0.001), rep(1, 0, 0.0)]),
            MissOrigin::None
        );
    }

    #[test]
    fn misses_of_slots_that_started_on_time_are_the_works_own() {
        let o = origin(&[
            rep(0, 0, 0.0),
            rep(1, 2, 0.004),
            rep(2, 0, 0.0),
            rep(3, 1, 0.0),
        ]);
        assert_eq!(
            o,
            MissOrigin::WorkOverran {
                repetitions_with_misses: 2
            }
        );
    }

    #[test]
    fn one_late_repetition_after_the_first_is_a_hiccup() {
        let o = origin(&[
            rep(0, 0, 0.0),
            rep(1, 0, 0.0),
            rep(2, 1, 0.04),
            rep(3, 0, 0.0),
        ]);
        assert!(
            matches!(o, MissOrigin::Isolated { hyperperiod: 2, .. }),
            "{o:?}"
        );
    }

    #[test]
    fn a_late_start_that_catches_up() {
        let o = origin(&[
            rep(0, 3, 3.0),
            rep(1, 2, 1.5),
            rep(2, 0, 0.002),
            rep(3, 0, 0.0),
        ]);
        assert_eq!(
            o,
            MissOrigin::StartCaughtUp {
                initial_lateness_s: 3.0,
                on_time_from: 2
            }
        );
    }

    #[test]
    fn a_backlog_still_draining_at_the_end() {
        let o = origin(&[
            rep(0, 5, 3.0),
            rep(1, 5, 2.6),
            rep(2, 5, 2.2),
            rep(3, 5, 1.8),
        ]);
        let MissOrigin::StartStillDraining {
            drain_s_per_hyperperiod,
            hyperperiods_to_catch_up,
            ..
        } = o
        else {
            panic!("{o:?}")
        };
        assert!((drain_s_per_hyperperiod - 0.4).abs() < 1e-9);
        assert_eq!(hyperperiods_to_catch_up, 5);
    }

    #[test]
    fn a_late_start_that_settles_on_a_lateness_of_its_own_is_the_steady_state() {
        let reps = [
            rep(0, 5, 2.9),
            rep(1, 5, 1.5),
            rep(2, 3, 0.38),
            rep(3, 3, 0.38),
            rep(4, 3, 0.385),
        ];
        assert!(matches!(origin(&reps), MissOrigin::SteadyState { .. }));
    }

    #[test]
    fn misses_that_do_not_fall_are_the_steady_state() {
        let o = origin(&[
            rep(0, 1, 0.2),
            rep(1, 1, 0.3),
            rep(2, 0, 0.0),
            rep(3, 1, 0.25),
        ]);
        assert_eq!(
            o,
            MissOrigin::SteadyState {
                repetitions_with_misses: 3
            }
        );
    }
}
