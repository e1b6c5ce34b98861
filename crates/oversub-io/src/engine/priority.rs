//! Priority in front of an engine: batches wait in a queue ordered by priority and are fed to the inner engine a
//! request at a time, at most `window` requests in flight, so a high-priority batch submitted behind a large
//! low-priority one overtakes the part of it not yet started (Alg. 1 line 4 of Yang & Chen, the memory command
//! queue served by priority). A batch passed over `starvation_bound` times is served next, whatever its priority.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{
    forward_to, validate_requests, IoCallback, IoCountersSnapshot, IoDone, IoEngine, IoRequest,
};
use crate::error::IoError;

/// Requests a waiting batch may see dispatched from others before it is served next.
pub const DEFAULT_STARVATION_BOUND: u32 = 64;

/// An [`IoEngine`] that orders the batches given to [`IoEngine::submit_with_priority`] by priority (larger first,
/// equal ones in arrival order) before they reach `inner`.
#[derive(Debug)]
pub struct PriorityEngine {
    inner: Arc<dyn IoEngine>,
    window: usize,
    starvation_bound: u32,
    state: Arc<Mutex<Sched>>,
}

#[derive(Debug, Default)]
struct Sched {
    in_flight: usize,
    next_seq: u64,
    waiting: Vec<Batch>,
}

struct Batch {
    priority: i64,
    seq: u64,
    tagged: bool,
    queued: VecDeque<IoRequest>,
    /// Requests handed to the inner engine and not yet completed.
    running: usize,
    bytes: u64,
    error: Option<IoError>,
    /// Requests dispatched from other batches while this one had requests waiting.
    passed_over: u32,
    on_done: Option<IoCallback>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("priority", &self.priority)
            .field("seq", &self.seq)
            .field("queued", &self.queued.len())
            .field("running", &self.running)
            .finish_non_exhaustive()
    }
}

impl PriorityEngine {
    /// Puts a priority queue in front of `inner`, keeping at most `inner.queue_depth()` requests in flight.
    pub fn new(inner: Arc<dyn IoEngine>) -> Self {
        let window = inner.queue_depth().max(1);
        Self::with_window(inner, window, DEFAULT_STARVATION_BOUND)
    }

    /// As [`new`](Self::new) with an explicit window (requests in flight in the inner engine) and starvation bound.
    pub fn with_window(inner: Arc<dyn IoEngine>, window: usize, starvation_bound: u32) -> Self {
        PriorityEngine {
            inner,
            window: window.max(1),
            starvation_bound: starvation_bound.max(1),
            state: Arc::new(Mutex::new(Sched::default())),
        }
    }

    fn enqueue(
        &self,
        requests: Vec<IoRequest>,
        priority: i64,
        tagged: bool,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        validate_requests(&requests)?;
        if requests.is_empty() {
            on_done(Ok(IoDone::default()));
            return Ok(());
        }
        {
            let mut st = lock(&self.state);
            let seq = st.next_seq;
            st.next_seq += 1;
            st.waiting.push(Batch {
                priority,
                seq,
                tagged,
                queued: requests.into(),
                running: 0,
                bytes: 0,
                error: None,
                passed_over: 0,
                on_done: Some(on_done),
            });
        }
        dispatch(&self.inner, &self.state, self.window, self.starvation_bound);
        Ok(())
    }
}

use oversub_base::sync::lock;

/// Index of the batch to serve next: one passed over `bound` times or more (the oldest such), else the highest
/// priority, oldest first.
fn pick(waiting: &[Batch], bound: u32) -> Option<usize> {
    let ready = || {
        waiting
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.queued.is_empty() && b.error.is_none())
    };
    if let Some((i, _)) = ready()
        .filter(|(_, b)| b.passed_over >= bound)
        .min_by_key(|(_, b)| b.seq)
    {
        return Some(i);
    }
    ready()
        .max_by(|(_, a), (_, b)| a.priority.cmp(&b.priority).then(b.seq.cmp(&a.seq)))
        .map(|(i, _)| i)
}

/// Hands requests to the inner engine while the window has room. Submission happens outside the lock: an inner
/// engine may complete a request (and so re-enter here) before its submit returns.
fn dispatch(inner: &Arc<dyn IoEngine>, state: &Arc<Mutex<Sched>>, window: usize, bound: u32) {
    loop {
        let (request, seq, tagged) = {
            let mut st = lock(state);
            if st.in_flight >= window {
                return;
            }
            let Some(i) = pick(&st.waiting, bound) else {
                return;
            };
            let seq = st.waiting[i].seq;
            for (j, b) in st.waiting.iter_mut().enumerate() {
                if j == i {
                    b.passed_over = 0;
                } else if !b.queued.is_empty() {
                    b.passed_over = b.passed_over.saturating_add(1);
                }
            }
            let b = &mut st.waiting[i];
            let Some(request) = b.queued.pop_front() else {
                return;
            };
            b.running += 1;
            let tagged = b.tagged;
            st.in_flight += 1;
            (request, seq, tagged)
        };
        let cb: IoCallback = {
            let (inner, state) = (Arc::clone(inner), Arc::clone(state));
            Box::new(move |res| {
                finished(&state, seq, res);
                dispatch(&inner, &state, window, bound);
            })
        };
        // SAFETY: forwarded from the batch's submitter, whose memory stays valid until the batch's own callback,
        // which runs only after this request's callback (`finished`).
        let submitted = unsafe { forward_to(inner.as_ref(), vec![request], cb, tagged) };
        if let Err(e) = submitted {
            // The inner engine never started it and will not call back: account for it here.
            finished(state, seq, Err(e));
        }
    }
}

/// One request of batch `seq` ended: on the batch's first error the requests not yet started are dropped, and the
/// batch's callback runs once nothing of it is in flight or queued.
fn finished(state: &Arc<Mutex<Sched>>, seq: u64, res: Result<IoDone, IoError>) {
    let done = {
        let mut st = lock(state);
        st.in_flight = st.in_flight.saturating_sub(1);
        let Some(i) = st.waiting.iter().position(|b| b.seq == seq) else {
            return;
        };
        let b = &mut st.waiting[i];
        b.running -= 1;
        match res {
            Ok(d) => b.bytes += d.bytes,
            Err(e) => {
                if b.error.is_none() {
                    b.error = Some(e);
                }
                b.queued.clear();
            }
        }
        if b.running == 0 && b.queued.is_empty() {
            let mut b = st.waiting.swap_remove(i);
            let result = match b.error.take() {
                Some(e) => Err(e),
                None => Ok(IoDone { bytes: b.bytes }),
            };
            b.on_done.take().map(|cb| (cb, result))
        } else {
            None
        }
    };
    if let Some((cb, result)) = done {
        cb(result);
    }
}

// SAFETY: every accepted batch's callback runs exactly once (`finished` removes the batch when its last request
// ends), only after each of its requests' callbacks from the inner engine, which uphold the same contract; a
// rejected submit (validation) runs nothing; requests are passed on unchanged.
unsafe impl IoEngine for PriorityEngine {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }

    unsafe fn submit(&self, requests: Vec<IoRequest>, on_done: IoCallback) -> Result<(), IoError> {
        self.enqueue(requests, 0, false, on_done)
    }

    unsafe fn submit_tagged(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        self.enqueue(requests, 0, true, on_done)
    }

    unsafe fn submit_with_priority(
        &self,
        requests: Vec<IoRequest>,
        priority: i64,
        tagged: bool,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        self.enqueue(requests, priority, tagged, on_done)
    }

    fn counters(&self) -> IoCountersSnapshot {
        self.inner.counters()
    }
}
