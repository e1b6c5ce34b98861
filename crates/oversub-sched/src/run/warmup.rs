//! A warm-up that lasts until the table is on time ([`super::RunOptions::max_extra_warmup`]).
//!
//! The plan covers the longest run (the asked warm-up, every extra repetition allowed, and the counted ones). As the
//! lanes finish the slots of a repetition, [`Warmup::record`] decides whether the warm-up ends after it: when it ran
//! on time, or when its lateness stopped falling (a backlog that does not drain will not drain with more warm-up).
//! The run then ends `counted` repetitions later: lanes stop at the first slot past the end, except that the paging
//! of plan entries before the last one the counted repetitions need still runs (ghost slots, no work), so the
//! memory the plan accounts for is what the pool holds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use oversub_base::sync::lock;

use super::misses::ON_TIME_S;
use crate::plan::Plan;

/// The warm-up's state, shared by the lanes.
pub(super) struct Warmup {
    /// Repetitions of warm-up asked for (the least).
    min: usize,
    /// Repetitions counted after the warm-up.
    counted: usize,
    /// Repetitions in the plan.
    planned: usize,
    /// Slot instances of each repetition in the plan.
    slots_per_rep: Vec<usize>,
    /// Each plan entry's repetition.
    entry_rep: Vec<usize>,
    state: Mutex<State>,
    /// Repetitions that run (the planned number until the warm-up's end is decided).
    end: AtomicUsize,
    /// The last plan entry (by index) whose paging must run: the largest index of an entry of a repetition before
    /// `end`. Written before `end`.
    last_entry: AtomicUsize,
}

struct State {
    done: Vec<usize>,
    worst_lateness_s: Vec<f64>,
    misses: Vec<usize>,
    decided: bool,
}

impl Warmup {
    /// `min` repetitions of warm-up at least, `max_extra` more at most, for a plan of `plan.hyperperiods`.
    pub(super) fn new(plan: &Plan, min: usize, max_extra: usize) -> Warmup {
        let planned = plan.hyperperiods;
        let min = min.min(planned.saturating_sub(1));
        let max_extra = max_extra.min(planned.saturating_sub(1 + min));
        let counted = planned - min - max_extra;
        let mut slots_per_rep = vec![0; planned];
        for s in &plan.slots {
            if let Some(n) = slots_per_rep.get_mut(s.instance.hyperperiod) {
                *n += 1;
            }
        }
        Warmup {
            min,
            counted,
            planned,
            slots_per_rep,
            entry_rep: plan.slots.iter().map(|s| s.instance.hyperperiod).collect(),
            state: Mutex::new(State {
                done: vec![0; planned],
                worst_lateness_s: vec![0.0; planned],
                misses: vec![0; planned],
                // Nothing to decide without extra repetitions.
                decided: max_extra == 0,
            }),
            end: AtomicUsize::new(planned),
            last_entry: AtomicUsize::new(plan.slots.len().saturating_sub(1)),
        }
    }

    /// Repetitions that run.
    pub(super) fn end(&self) -> usize {
        self.end.load(Ordering::Acquire)
    }

    /// The last plan entry whose paging runs.
    pub(super) fn last_entry(&self) -> usize {
        self.last_entry.load(Ordering::Acquire)
    }

    /// Whether the instance of plan entry `idx` lies past the run's end.
    pub(super) fn past_end(&self, idx: usize) -> bool {
        self.entry_rep.get(idx).is_some_and(|&r| r >= self.end())
    }

    /// Warm-up repetitions, as decided (the asked number until decided).
    pub(super) fn warmup(&self) -> usize {
        self.end().saturating_sub(self.counted).max(self.min)
    }

    /// Records a finished slot of repetition `rep`; returns true when this decided the end of the warm-up.
    pub(super) fn record(&self, rep: usize, met: bool, lateness_s: f64) -> bool {
        let mut st = lock(&self.state);
        let Some(done) = st.done.get_mut(rep) else {
            return false;
        };
        *done += 1;
        let complete = *done == self.slots_per_rep[rep];
        st.misses[rep] += usize::from(!met);
        st.worst_lateness_s[rep] = st.worst_lateness_s[rep].max(lateness_s);
        if st.decided || !complete || rep + 1 < self.min {
            return false;
        }
        let on_time = st.misses[rep] == 0 && st.worst_lateness_s[rep] <= ON_TIME_S;
        // The lateness fell by less than two on-time margins since the repetition before: the backlog is not
        // draining (or drains so slowly that the allowed extra repetitions would not clear it).
        let stuck = rep >= 1
            && st.done[rep - 1] == self.slots_per_rep[rep - 1]
            && st.worst_lateness_s[rep] > st.worst_lateness_s[rep - 1] - 2.0 * ON_TIME_S;
        if !(on_time || stuck) {
            return false;
        }
        st.decided = true;
        let end = (rep + 1 + self.counted).min(self.planned);
        let last = self.entry_rep.iter().rposition(|&r| r < end).unwrap_or(0);
        self.last_entry.store(last, Ordering::Release);
        self.end.store(end, Ordering::Release);
        tracing::debug!(rep, on_time, stuck, end, "warm-up decided");
        true
    }
}
