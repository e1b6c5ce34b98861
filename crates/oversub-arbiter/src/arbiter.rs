//! The memory server: CPU tasks announce phases into slots, the transfer side asks before each operation.

use oversub_base::process::Creator;
use oversub_base::sync::lock;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::{Clock, MonotonicClock};
use crate::phase::{Phase, PhaseKind, SlotWord, DEADLINE_MASK};
use crate::region::{
    Layout, Region, SharedOptions, LAYOUT_BYTES, LAYOUT_VERSION, MAGIC, MAX_TASKS,
};
use crate::ArbiterError;

/// The copy granularity of the SiΓ paper: 1 MiB saturates a copy engine and bounds the overrun into a memory phase.
pub const DEFAULT_CHUNK_BYTES: u64 = 1 << 20;

/// Options of an arbiter, fixed by whoever creates it.
#[derive(Debug, Clone, Copy)]
pub struct ArbiterConfig {
    /// How long past its deadline a phase still counts. A task that overruns its announced phase (or crashed in
    /// it) keeps transfers waiting this much longer; after that its slot is ignored and may be reused. Default
    /// 1 s: a live task can be late by tens of milliseconds (real-time throttling, a vCPU the hypervisor
    /// descheduled), and a phase that went stale while its task is merely late leaves memory unrestricted just
    /// before that task's next memory phase. (It was 50 ms; the SiΓ benchmark then saw 60 ms batches admitted
    /// unrestricted overlap PREM loads.)
    pub stale_after: Duration,
    /// Size of one transfer chunk (Q's unit in Eq. 1).
    pub chunk_bytes: u64,
    /// T(Q_CE), the time one chunk takes. `None`: measured at creation as the slowest of 16 copies of one chunk
    /// between two host buffers (a transfer side with another engine, such as storage, measures its own).
    pub chunk_time: Option<Duration>,
    /// How soon a transfer side asks again while a task is overdue (past its deadline, not yet stale).
    pub poll: Duration,
}

impl Default for ArbiterConfig {
    fn default() -> Self {
        ArbiterConfig {
            stale_after: Duration::from_secs(1),
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            chunk_time: None,
            poll: Duration::from_micros(50),
        }
    }
}

/// Why a transfer must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum WaitReason {
    /// A task is in a memory phase (`CPU_MEM`).
    MemoryPhase,
    /// A task's phase passed its deadline without a new announcement; it is presumed about to need memory.
    Overdue,
    /// The compute window left is shorter than one chunk.
    WindowTooShort,
}

/// The server's answer to a transfer side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Do nothing before `until_ns`, then ask again.
    Wait {
        /// When to ask again (clock nanoseconds).
        until_ns: u64,
        /// Why.
        reason: WaitReason,
    },
    /// Transfers may run until `until_ns` (the end of the compute window); `chunks` of them fit (Eq. 1).
    Grant {
        /// End of the window.
        until_ns: u64,
        /// Whole chunks that fit: ⌊(t(C) − t(req)) / T(Q)⌋, at least 1.
        chunks: u64,
    },
    /// No task restricts memory: transfer freely (until an announcement changes the generation).
    Unrestricted,
}

/// Something that can stop transfer-side work when a memory phase starts (the CUDA backend's spin kernel).
/// Hooks run synchronously in the announcing thread, so they must be quick; they only see announcements made
/// through this process's handles (other processes' phases are seen at the next chunk boundary).
pub trait PreemptionHook: Send + Sync + std::fmt::Debug {
    /// A task announced a memory phase that ends at `end_ns`.
    fn preempt(&self, end_ns: u64);
}

/// One task slot, as seen now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TaskStatus {
    /// Slot index.
    pub slot: usize,
    /// Process that registered it.
    pub pid: u32,
    /// Its announced phase.
    pub phase: PhaseKind,
    /// Nanoseconds until the phase's deadline (negative: overdue); `None` for `NO_OPER`.
    pub remaining_ns: Option<i64>,
    /// Past deadline + stale time: ignored by the arbiter.
    pub stale: bool,
    /// Phases announced through this slot.
    pub announcements: u64,
}

/// Counters of the server, shared by all processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArbiterStats {
    /// Requests answered.
    pub requests: u64,
    /// Grants (including unrestricted answers).
    pub grants: u64,
    /// Wait answers.
    pub waits: u64,
    /// Stale phases ignored while answering.
    pub expired: u64,
    /// Announcements so far.
    pub generation: u64,
}

#[derive(Debug)]
struct Inner {
    region: Region,
    clock: Arc<dyn Clock>,
    hooks: Mutex<Vec<Arc<dyn PreemptionHook>>>,
}

/// A handle to an arbiter (in this process, or in shared memory). Clones share it.
#[derive(Debug, Clone)]
pub struct Arbiter {
    inner: Arc<Inner>,
}

impl Arbiter {
    /// An arbiter private to this process, on the monotonic clock.
    pub fn in_process(config: ArbiterConfig) -> Result<Arbiter, ArbiterError> {
        Self::in_process_with_clock(config, Arc::new(MonotonicClock))
    }

    /// An in-process arbiter on the given clock (a [`FakeClock`](crate::FakeClock) in tests).
    pub fn in_process_with_clock(
        config: ArbiterConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arbiter, ArbiterError> {
        let chunk_time = resolve(&config)?;
        let arbiter = Arbiter {
            inner: Arc::new(Inner {
                region: Region::Heap(Box::default()),
                clock,
                hooks: Mutex::new(Vec::new()),
            }),
        };
        arbiter.init(&config, chunk_time);
        Ok(arbiter)
    }

    /// The file under /dev/shm that holds the arbiter called `name`.
    pub fn shared_path(name: &str) -> Result<PathBuf, ArbiterError> {
        if !oversub_base::name::is_safe_component(name, 64) {
            return Err(ArbiterError::InvalidName(name.to_string()));
        }
        Ok(PathBuf::from(format!("/dev/shm/oversub-arbiter-{name}")))
    }

    /// Creates the shared arbiter `name` (file mode 0600; an existing one is an error). The file is removed when
    /// the last handle of this process goes.
    pub fn create_shared(name: &str, config: ArbiterConfig) -> Result<Arbiter, ArbiterError> {
        Self::create_shared_with(name, config, SharedOptions::default())
    }

    /// Creates the shared arbiter `name` with explicit options: a group to share it with, taking over the file of
    /// a server that is gone.
    pub fn create_shared_with(
        name: &str,
        config: ArbiterConfig,
        options: SharedOptions,
    ) -> Result<Arbiter, ArbiterError> {
        Self::create_at_with(&Self::shared_path(name)?, config, options)
    }

    /// Creates a shared arbiter at an explicit path (for tests and unusual mounts).
    pub fn create_at(path: &Path, config: ArbiterConfig) -> Result<Arbiter, ArbiterError> {
        Self::create_at_with(path, config, SharedOptions::default())
    }

    /// Creates a shared arbiter at an explicit path with explicit options.
    pub fn create_at_with(
        path: &Path,
        config: ArbiterConfig,
        options: SharedOptions,
    ) -> Result<Arbiter, ArbiterError> {
        // Checked and measured before the file exists, so that openers find it initialised as soon as possible
        // (until its magic is published they are refused).
        let chunk_time = resolve(&config)?;
        let arbiter = Arbiter {
            inner: Arc::new(Inner {
                region: Region::create(path, &options)?,
                clock: Arc::new(MonotonicClock),
                hooks: Mutex::new(Vec::new()),
            }),
        };
        arbiter.init(&config, chunk_time);
        tracing::info!(path = %path.display(), "shared arbiter created");
        Ok(arbiter)
    }

    /// Opens the shared arbiter `name` created by another process (or this one), if its file is this user's and
    /// private to it (see [`SharedOptions`]).
    pub fn open_shared(name: &str) -> Result<Arbiter, ArbiterError> {
        Self::open_shared_with(name, SharedOptions::default())
    }

    /// Opens the shared arbiter `name`, also trusting the group or owner that `options` name.
    pub fn open_shared_with(name: &str, options: SharedOptions) -> Result<Arbiter, ArbiterError> {
        Self::open_at_with(&Self::shared_path(name)?, options)
    }

    /// Opens a shared arbiter at an explicit path.
    pub fn open_at(path: &Path) -> Result<Arbiter, ArbiterError> {
        Self::open_at_with(path, SharedOptions::default())
    }

    /// Opens a shared arbiter at an explicit path with explicit options.
    pub fn open_at_with(path: &Path, options: SharedOptions) -> Result<Arbiter, ArbiterError> {
        Ok(Arbiter {
            inner: Arc::new(Inner {
                region: Region::open(path, &options)?,
                clock: Arc::new(MonotonicClock),
                hooks: Mutex::new(Vec::new()),
            }),
        })
    }

    fn init(&self, config: &ArbiterConfig, chunk_time: Duration) {
        let h = &self.layout().header;
        h.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        h.slot_count.store(MAX_TASKS as u32, Ordering::Relaxed);
        h.layout_bytes.store(LAYOUT_BYTES as u64, Ordering::Relaxed);
        h.server_pid.store(std::process::id(), Ordering::Relaxed);
        h.stale_after_ns
            .store(duration_ns(config.stale_after), Ordering::Relaxed);
        h.chunk_time_ns
            .store(duration_ns(chunk_time).max(1), Ordering::Relaxed);
        h.chunk_bytes.store(config.chunk_bytes, Ordering::Relaxed);
        h.poll_ns
            .store(duration_ns(config.poll).max(1), Ordering::Relaxed);
        // Published last: an opener that sees the magic sees a complete header.
        h.magic.store(MAGIC, Ordering::Release);
    }

    fn layout(&self) -> &Layout {
        self.inner.region.layout()
    }

    /// The clock deadlines are measured on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The shared file, for a shared arbiter.
    pub fn path(&self) -> Option<&Path> {
        self.inner.region.path()
    }

    /// The process that created (or last took over) the arbiter, as its header records it.
    pub fn server_pid(&self) -> u32 {
        self.layout().header.server_pid.load(Ordering::Relaxed)
    }

    /// For a server that took over the file of one that was gone ([`SharedOptions::take_over_stale`]): the pid
    /// that file recorded (0 when its creator died before recording one). `None` otherwise.
    pub fn taken_over_from(&self) -> Option<u32> {
        self.inner.region.taken_over_from()
    }

    /// Chunk size in bytes.
    pub fn chunk_bytes(&self) -> u64 {
        self.layout().header.chunk_bytes.load(Ordering::Relaxed)
    }

    /// T(Q_CE) as measured (or set) at creation.
    pub fn chunk_time(&self) -> Duration {
        Duration::from_nanos(self.layout().header.chunk_time_ns.load(Ordering::Relaxed))
    }

    /// How long past its deadline a phase still counts.
    pub fn stale_after(&self) -> Duration {
        Duration::from_nanos(self.layout().header.stale_after_ns.load(Ordering::Relaxed))
    }

    /// Announcements so far; a change means earlier answers may no longer hold.
    pub fn generation(&self) -> u64 {
        self.layout().header.generation.load(Ordering::Acquire)
    }

    /// Registers a CPU task and returns its handle (slot). Slots of tasks that went stale or whose process died
    /// are reused.
    pub fn register_task(&self) -> Result<Task, ArbiterError> {
        let now = self.inner.clock.now_ns();
        let stale = self.layout().header.stale_after_ns.load(Ordering::Relaxed);
        let pid = std::process::id();
        for (index, slot) in self.layout().slots.iter().enumerate() {
            let word = slot.word.load(Ordering::Acquire);
            let reusable = match SlotWord::decode(word) {
                SlotWord::Free => true,
                SlotWord::Mem { end_ns } | SlotWord::Com { end_ns } => {
                    end_ns.saturating_add(stale) <= now
                }
                SlotWord::NoOper => !process_alive(slot.pid.load(Ordering::Relaxed)),
            };
            if reusable
                && slot
                    .word
                    .compare_exchange(
                        word,
                        SlotWord::NoOper.encode(),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                slot.pid.store(pid, Ordering::Relaxed);
                slot.announcements.store(0, Ordering::Relaxed);
                self.bump();
                return Ok(Task {
                    arbiter: self.clone(),
                    index,
                    detached: false,
                    creator: Creator::current(),
                });
            }
        }
        Err(ArbiterError::NoFreeSlot(MAX_TASKS))
    }

    fn bump(&self) {
        self.layout()
            .header
            .generation
            .fetch_add(1, Ordering::AcqRel);
    }

    /// Adds a hook called (in the announcing thread) whenever a task of this process announces `CPU_MEM`.
    pub fn add_preemption_hook(&self, hook: Arc<dyn PreemptionHook>) {
        lock(&self.inner.hooks).push(hook);
    }

    fn announce(&self, index: usize, phase: Phase) -> Result<(), ArbiterError> {
        phase.validate()?;
        let now = self.inner.clock.now_ns();
        let end = |d: Duration| now.saturating_add(duration_ns(d)).min(DEADLINE_MASK);
        let word = match phase {
            Phase::Mem(d) => SlotWord::Mem { end_ns: end(d) },
            Phase::Com(d) => SlotWord::Com { end_ns: end(d) },
            Phase::NoOper => SlotWord::NoOper,
        };
        let slot = &self.layout().slots[index];
        slot.word.store(word.encode(), Ordering::Release);
        slot.announcements.fetch_add(1, Ordering::Relaxed);
        self.bump();
        if let SlotWord::Mem { end_ns } = word {
            let hooks = lock(&self.inner.hooks);
            for h in hooks.iter() {
                h.preempt(end_ns);
            }
        }
        Ok(())
    }

    fn release(&self, index: usize) {
        self.layout().slots[index]
            .word
            .store(SlotWord::Free.encode(), Ordering::Release);
        self.bump();
    }

    /// Asks the server, now, whether a transfer whose chunks take `chunk_time` may run (Sec. 4.1 and Eq. 1).
    pub fn request(&self, chunk_time: Duration) -> Decision {
        let now = self.inner.clock.now_ns();
        let decision = self.decide_at(now, chunk_time);
        let h = &self.layout().header;
        h.requests.fetch_add(1, Ordering::Relaxed);
        match decision {
            Decision::Wait { .. } => h.waits.fetch_add(1, Ordering::Relaxed),
            _ => h.grants.fetch_add(1, Ordering::Relaxed),
        };
        decision
    }

    /// The answer the server would give at `now_ns`. With several tasks (Sec. 6.1) a transfer may run only when no
    /// task is in a memory phase, and only until the first compute phase ends: the window spans from the end of the
    /// last loading phase to the start of the first unloading phase.
    pub fn decide_at(&self, now_ns: u64, chunk_time: Duration) -> Decision {
        let h = &self.layout().header;
        let stale = h.stale_after_ns.load(Ordering::Relaxed);
        let poll = h.poll_ns.load(Ordering::Relaxed);
        let mut mem_until: Option<u64> = None;
        let mut window_end: Option<u64> = None;
        for slot in &self.layout().slots {
            match SlotWord::decode(slot.word.load(Ordering::Acquire)) {
                SlotWord::Free | SlotWord::NoOper => {}
                SlotWord::Mem { end_ns } | SlotWord::Com { end_ns }
                    if end_ns.saturating_add(stale) <= now_ns =>
                {
                    h.expired.fetch_add(1, Ordering::Relaxed);
                }
                SlotWord::Mem { end_ns } => {
                    // Overdue memory phases are waited on in short steps: the task may announce at any moment.
                    let until = if end_ns > now_ns {
                        end_ns
                    } else {
                        now_ns + poll
                    };
                    mem_until = Some(mem_until.map_or(until, |m| m.max(until)));
                }
                SlotWord::Com { end_ns } => {
                    window_end = Some(window_end.map_or(end_ns, |w| w.min(end_ns)));
                }
            }
        }
        if let Some(until_ns) = mem_until {
            return Decision::Wait {
                until_ns,
                reason: WaitReason::MemoryPhase,
            };
        }
        let Some(end) = window_end else {
            return Decision::Unrestricted;
        };
        if end <= now_ns {
            return Decision::Wait {
                until_ns: now_ns + poll,
                reason: WaitReason::Overdue,
            };
        }
        let chunk_ns = duration_ns(chunk_time).max(1);
        let chunks = (end - now_ns) / chunk_ns;
        if chunks == 0 {
            return Decision::Wait {
                until_ns: end,
                reason: WaitReason::WindowTooShort,
            };
        }
        Decision::Grant {
            until_ns: end,
            chunks,
        }
    }

    /// Every registered slot, as seen now.
    pub fn tasks(&self) -> Vec<TaskStatus> {
        let now = self.inner.clock.now_ns();
        let stale = self.stale_after().as_nanos() as u64;
        self.layout()
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let word = SlotWord::decode(s.word.load(Ordering::Acquire));
                let (phase, end) = match word {
                    SlotWord::Free => return None,
                    SlotWord::NoOper => (PhaseKind::NoOper, None),
                    SlotWord::Mem { end_ns } => (PhaseKind::Mem, Some(end_ns)),
                    SlotWord::Com { end_ns } => (PhaseKind::Com, Some(end_ns)),
                };
                Some(TaskStatus {
                    slot: i,
                    pid: s.pid.load(Ordering::Relaxed),
                    phase,
                    remaining_ns: end.map(|e| e as i64 - now as i64),
                    stale: end.is_some_and(|e| e.saturating_add(stale) <= now),
                    announcements: s.announcements.load(Ordering::Relaxed),
                })
            })
            .collect()
    }

    /// The server's counters.
    pub fn stats(&self) -> ArbiterStats {
        let h = &self.layout().header;
        ArbiterStats {
            requests: h.requests.load(Ordering::Relaxed),
            grants: h.grants.load(Ordering::Relaxed),
            waits: h.waits.load(Ordering::Relaxed),
            expired: h.expired.load(Ordering::Relaxed),
            generation: h.generation.load(Ordering::Relaxed),
        }
    }
}

/// A registered CPU task: announces its phases. Dropping it frees its slot (`NO_OPER` and gone).
#[derive(Debug)]
#[must_use = "a task handle dropped at once frees its slot"]
pub struct Task {
    arbiter: Arbiter,
    index: usize,
    detached: bool,
    /// The process that registered the task: a forked child's copy of the handle must not free the parent's slot.
    creator: Creator,
}

impl Task {
    /// Announces a phase (checked: zero or over-long durations are refused and change nothing).
    pub fn announce(&self, phase: Phase) -> Result<(), ArbiterError> {
        self.arbiter.announce(self.index, phase)
    }

    /// `CPU_MEM(duration)`: the task is about to access DRAM for up to `duration`.
    pub fn mem(&self, duration: Duration) -> Result<(), ArbiterError> {
        self.announce(Phase::Mem(duration))
    }

    /// `CPU_COM(duration)`: the task computes on cached data for up to `duration`.
    pub fn com(&self, duration: Duration) -> Result<(), ArbiterError> {
        self.announce(Phase::Com(duration))
    }

    /// `NO_OPER`: the task's PREM iterations are over.
    pub fn no_oper(&self) -> Result<(), ArbiterError> {
        self.announce(Phase::NoOper)
    }

    /// The slot index.
    pub fn slot(&self) -> usize {
        self.index
    }

    /// Leaves the slot and its last phase in place when the handle goes (a one-shot announcer such as
    /// `oversub arbiter phase`); the phase expires by its deadline like a crashed task's.
    pub fn detach(mut self) {
        self.detached = true;
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if !self.detached && self.creator.is_current() {
            self.arbiter.release(self.index);
        }
    }
}

/// Checks a configuration; returns its chunk time, measured if it gives none.
fn resolve(config: &ArbiterConfig) -> Result<Duration, ArbiterError> {
    if config.chunk_bytes == 0 {
        return Err(ArbiterError::InvalidConfig(
            "the chunk size must be at least one byte".into(),
        ));
    }
    if config.chunk_time.is_some_and(|d| d.is_zero()) {
        return Err(ArbiterError::InvalidConfig(
            "the chunk time must be longer than zero".into(),
        ));
    }
    Ok(match config.chunk_time {
        Some(d) => d,
        None => measure_copy_time(config.chunk_bytes),
    })
}

pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks whether the process exists.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The slowest of 16 host copies of `bytes` between distinct parts of two 64 MiB buffers (after one warm-up), so
/// that each copy goes to DRAM as a copy engine's would: T(Q_CE) for a memcpy copy engine.
pub fn measure_copy_time(bytes: u64) -> Duration {
    let n = usize::try_from(bytes)
        .unwrap_or(usize::MAX)
        .clamp(1, 256 << 20);
    let span = n.max(64 << 20);
    let src = vec![0x5au8; span];
    // Written once first, so the timed copies do not include first-touch page faults.
    let mut dst = vec![1u8; span];
    let mut worst = Duration::ZERO;
    let mut off = 0;
    for i in 0..17 {
        if off + n > span {
            off = 0;
        }
        let t = std::time::Instant::now();
        dst[off..off + n].copy_from_slice(std::hint::black_box(&src[off..off + n]));
        std::hint::black_box(&mut dst);
        if i > 0 {
            worst = worst.max(t.elapsed());
        }
        off += n;
    }
    worst.max(Duration::from_nanos(1))
}
