//! Tickets of asynchronous operations, and the state an operation's I/O side shares with them: its outcome, its
//! completion callbacks and the guard that completes it exactly once.

use super::*;

/// An asynchronous operation in flight: the I/O has been submitted. [`Ticket::finish`] (or
/// [`AddressSpace::finish`]) waits for it if needed and completes the mapping or the release. A ticket dropped
/// unfinished is finished by its drop (which may block), so no buffer is left in an in-flight state. The ticket
/// owns its buffer until then: a buffer freed meanwhile is released when the ticket finishes.
#[derive(Debug)]
#[must_use = "an unfinished ticket blocks in its drop; call finish() to see the result"]
pub struct Ticket {
    pub(super) space: Arc<SpaceShared>,
    pub(super) buffer: Buffer,
    pub(super) kind: OpKind,
    pub(super) op: Arc<OpState>,
    pub(super) finished: bool,
}

impl Ticket {
    /// The buffer being paged.
    pub fn buffer(&self) -> Buffer {
        self.buffer
    }

    /// Page-in or page-out.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// Whether the I/O has completed, so that `finish` will not wait.
    pub fn is_complete(&self) -> bool {
        self.op.is_complete()
    }

    /// When the I/O side completed, if it has.
    pub fn completed_at(&self) -> Option<std::time::Instant> {
        *lock(&self.op.completed_at)
    }

    /// Waits up to `timeout` for the I/O side to complete, without finishing the operation; true when it has
    /// (then [`finish`](Self::finish) does not block). Lets a caller wait in slices, e.g. to answer signals.
    pub fn wait_timeout(&self, timeout: std::time::Duration) -> bool {
        self.op.wait_complete(timeout)
    }

    /// Runs `callback` once when the I/O side completes (so that [`finish`](Self::finish) will not block): at once
    /// on the calling thread if it already has, else on the thread that completes it, typically an I/O engine
    /// thread, so the callback must be short and must not finish this ticket itself. Futures and event loops use
    /// it to be woken by the completion instead of polling.
    pub fn on_complete(&self, callback: impl FnOnce() + Send + 'static) {
        self.op.on_complete(Box::new(callback));
    }

    /// Waits for the I/O if it is still running and completes the operation.
    pub fn finish(mut self) -> Result<(), PagerError> {
        self.finished = true;
        self.space.finish(self.buffer, self.kind, &self.op)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // In a forked child the operation belongs to the parent, which finishes it there.
        if !self.finished && !self.space.pool.forked() {
            if let Err(e) = self.space.finish(self.buffer, self.kind, &self.op) {
                tracing::warn!(buffer = %self.buffer, "dropped unfinished ticket failed: {e}");
            }
        }
    }
}

/// How an operation ended on the I/O side, before `finish` settles the buffer's state.
#[derive(Debug)]
pub(super) enum OpFailure {
    Io(IoError),
    Copy(AccelError),
    Checksum {
        expected: u64,
        actual: u64,
    },
    Release(AccelError),
    /// The commit before a page-in failed (under an arbiter, where it runs on the gated worker).
    Commit(AccelError),
    /// The transfer could not be queued (a page-in started off the caller's thread, which learns it at finish).
    Start(PagerError),
    /// The completion never ran to its end (a backend or engine thread panicked, or a worker dropped it).
    Lost(&'static str),
}

impl From<TransferError> for OpFailure {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Io(e) => OpFailure::Io(e),
            TransferError::Copy(e) => OpFailure::Copy(e),
            TransferError::Checksum { expected, actual } => {
                OpFailure::Checksum { expected, actual }
            }
        }
    }
}

/// Completes its operation exactly once: with the outcome it is given or, when it is dropped unused (the callback
/// that owned it unwound from a panic, or a worker dropped it), with a failure, so that no waiter hangs.
#[derive(Debug)]
pub(super) struct Completion {
    pub(super) op: Arc<OpState>,
    pub(super) done: bool,
}

impl Completion {
    pub(super) fn new(op: &Arc<OpState>) -> Self {
        Completion {
            op: Arc::clone(op),
            done: false,
        }
    }

    pub(super) fn complete(mut self, outcome: Result<(), Failed>) {
        self.done = true;
        self.op.complete(outcome);
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.done {
            self.op.complete(Err(Failed::kept_memory(OpFailure::Lost(
                "its completion was dropped (a panic in a device backend, engine or worker thread)",
            ))));
        }
    }
}

/// A failed operation and whether its memory is already given back.
#[derive(Debug)]
pub(super) struct Failed {
    pub(super) cause: OpFailure,
    pub(super) memory_released: bool,
}

impl Failed {
    pub(super) fn kept_memory(cause: OpFailure) -> Self {
        Failed {
            cause,
            memory_released: false,
        }
    }
}

/// A callback run once when the I/O side of an operation completes.
pub(super) type CompletionCallback = Box<dyn FnOnce() + Send>;

#[derive(Default)]
pub(super) struct OpState {
    pub(super) outcome: Mutex<Option<Result<(), Failed>>>,
    pub(super) done: Condvar,
    /// Run by [`complete`](Self::complete) on the thread that completes the I/O (an engine thread), or at once by
    /// [`on_complete`](Self::on_complete) when it had already completed.
    pub(super) callbacks: Mutex<Vec<CompletionCallback>>,
    /// When the I/O side completed (for timelines: the I/O may end long before `finish` is called).
    pub(super) completed_at: Mutex<Option<std::time::Instant>>,
}

impl std::fmt::Debug for OpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpState")
            .field("complete", &self.is_complete())
            .field("callbacks", &lock(&self.callbacks).len())
            .finish_non_exhaustive()
    }
}

impl OpState {
    pub(super) fn complete(&self, outcome: Result<(), Failed>) {
        *lock(&self.completed_at) = Some(std::time::Instant::now());
        // The callbacks are taken under the outcome's lock, so `on_complete` either queues before this point (and
        // is run below) or sees the outcome (and runs its callback itself): never both, never neither.
        let callbacks = {
            let mut outcome_slot = lock(&self.outcome);
            *outcome_slot = Some(outcome);
            std::mem::take(&mut *lock(&self.callbacks))
        };
        self.done.notify_all();
        for callback in callbacks {
            callback();
        }
    }

    /// Runs `callback` once the I/O side completes: at once on this thread if it has, else on the completing one.
    pub(super) fn on_complete(&self, callback: CompletionCallback) {
        {
            let outcome_slot = lock(&self.outcome);
            if outcome_slot.is_none() {
                lock(&self.callbacks).push(callback);
                return;
            }
        }
        callback();
    }

    pub(super) fn is_complete(&self) -> bool {
        lock(&self.outcome).is_some()
    }

    /// Waits up to `timeout` for the outcome without taking it; true when it is there.
    pub(super) fn wait_complete(&self, timeout: std::time::Duration) -> bool {
        let guard = lock(&self.outcome);
        let (guard, _) = self
            .done
            .wait_timeout_while(guard, timeout, |o| o.is_none())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.is_some()
    }

    pub(super) fn wait(&self) -> Result<(), Failed> {
        let mut guard = lock(&self.outcome);
        loop {
            if let Some(outcome) = guard.take() {
                return outcome;
            }
            guard = self
                .done
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

pub(super) fn failure_to_error(buffer: Buffer, failure: OpFailure) -> PagerError {
    match failure {
        OpFailure::Io(err) => err.into(),
        OpFailure::Checksum { expected, actual } => PagerError::ChecksumMismatch {
            buffer,
            expected,
            actual,
        },
        OpFailure::Release(err) | OpFailure::Commit(err) => err.into(),
        OpFailure::Copy(err) => err.into(),
        OpFailure::Lost(reason) => PagerError::CompletionLost { buffer, reason },
        OpFailure::Start(err) => err,
    }
}
