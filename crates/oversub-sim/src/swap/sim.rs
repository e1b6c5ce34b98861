//! The discrete-event engine: tasks issue their subtasks one after another (allocate, read, execute, write back),
//! all tasks at once, through one memory controller, one SSD and the GPU's SMs, while a swap manager keeps the
//! working sets of running tasks in memory. Everything happens at integer nanoseconds and ties are broken by task
//! index, so a run is exactly reproducible ([`super::orders`] runs every order of the tasks, so that the index is not
//! what decides). The [`Outcome`] carries what its conservation checks need.

use std::collections::VecDeque;

use serde::Serialize;

use super::model::{ns_to_seconds, transfer_ns, DirectAccess, Evictable, System, Task, NS_PER_S};
use super::SwapSimError;

/// How memory is managed in one run: the engine's side of a [`super::Policy`].
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Swap out the least recently used evictable task on a shortage; FIFO servers and SM dispatch.
    Baseline,
    /// Baseline plus Memory-aware Throttling: a swap-out suspends one SM and, until the tasks waiting for memory
    /// are all served, no further swap-out starts.
    Mat,
    /// Resident quotas from Alg. 2, held from the start and never evicted; the swapped part of each task is read
    /// and written on the SSD directly; servers and SMs by priority.
    Proposed {
        /// Priority rank of each task, 0 the highest.
        ranks: Vec<usize>,
        /// Bytes of each task kept on the SSD (α_i · MEM(i)).
        direct_bytes: Vec<u64>,
    },
    /// Ablation, Alg. 1 alone: Baseline's swapping (LRU swap-outs of whole working sets), with the memory
    /// controller, the SSD and the SMs served by priority as under Proposed.
    PriorityOnly {
        /// Priority rank of each task, 0 the highest.
        ranks: Vec<usize>,
    },
    /// Ablation, Alg. 2 alone: Proposed's quotas and direct SSD access, with FIFO servers and SM dispatch.
    DirectOnly {
        /// Priority rank of each task (which decided the victims), 0 the highest.
        ranks: Vec<usize>,
        /// Bytes of each task kept on the SSD.
        direct_bytes: Vec<u64>,
    },
}

impl Mode {
    fn name(&self) -> &'static str {
        match self {
            Mode::Baseline => "Baseline",
            Mode::Mat => "MaT",
            Mode::Proposed { .. } => "Proposed",
            Mode::PriorityOnly { .. } => "Alg.1 priority only",
            Mode::DirectOnly { .. } => "Alg.2 direct only",
        }
    }

    /// Quotas held from the start, the swapped share accessed on the SSD directly, nothing swapped (Alg. 2).
    fn planned(&self) -> bool {
        matches!(self, Mode::Proposed { .. } | Mode::DirectOnly { .. })
    }

    /// Servers and SM dispatch by priority (Alg. 1 line 4).
    fn by_priority(&self) -> bool {
        matches!(self, Mode::Proposed { .. } | Mode::PriorityOnly { .. })
    }
}

/// What a server moved for whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transfer {
    /// A subtask's read through the memory controller.
    Read,
    /// A subtask's write-back through the memory controller.
    Write,
    /// The swapped share of a read, served by the SSD directly (proposed policy).
    DirectRead,
    /// The swapped share of a write-back, served by the SSD directly (proposed policy).
    DirectWrite,
    /// A whole working set read back from the SSD.
    SwapIn,
    /// A whole working set written out to the SSD.
    SwapOut,
}

impl Transfer {
    /// Whether the SSD serves it at its read bandwidth (otherwise at its write bandwidth, if on the SSD).
    fn ssd_reads(self) -> bool {
        matches!(self, Transfer::DirectRead | Transfer::SwapIn)
    }
}

/// One stretch of a server's service to one request (a whole request, or the piece before a preemption).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Busy {
    /// Start of service.
    pub start_ns: u64,
    /// End of service (completion or preemption).
    pub end_ns: u64,
    /// Bytes moved in it.
    pub bytes: u64,
    /// The bandwidth it was served at.
    pub bytes_per_s: u64,
    /// The task served.
    pub task: usize,
    /// What was moved.
    pub kind: Transfer,
}

/// Everything one server did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerLog {
    /// `memory controller` or `SSD`.
    pub name: &'static str,
    /// Its busy intervals in time order.
    pub busy: Vec<Busy>,
    /// How many times a request was interrupted by a higher-priority one.
    pub preemptions: u64,
}

/// One subtask put on an SM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SmDispatch {
    /// When.
    pub time_ns: u64,
    /// Whose subtask.
    pub task: usize,
    /// SMs busy once it started.
    pub in_use: u32,
    /// SMs usable at that moment (all of them less any suspended by MaT).
    pub usable: u32,
}

/// The result of one run, with the records its conservation checks ([`Outcome::check`]) read.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Each task's response time (completion time; all start at 0).
    pub response_ns: Vec<u64>,
    /// Completions of each subtask of each task (each must be exactly 1).
    pub completions: Vec<Vec<u32>>,
    /// The memory controller's and the SSD's logs, in that order.
    pub servers: Vec<ServerLog>,
    /// Memory in use after every change, as (time, bytes).
    pub memory_log: Vec<(u64, u64)>,
    /// The most memory ever in use.
    pub memory_peak_bytes: u64,
    /// Every SM dispatch.
    pub sm_dispatches: Vec<SmDispatch>,
    /// Swap-outs of each task's working set.
    pub swap_outs: Vec<u32>,
    /// Swap-ins of each task's working set.
    pub swap_ins: Vec<u32>,
    /// Times MaT suspended an SM.
    pub sm_suspensions: u32,
    /// Total time an SM was suspended.
    pub sm_suspended_ns: u64,
    /// When the last task completed.
    pub makespan_ns: u64,
    /// Memory capacity of the run, for the checks.
    pub capacity_bytes: u64,
    /// SMs of the run, for the checks.
    pub sms: u32,
    /// Working set of each task, for the checks.
    pub memory_bytes: Vec<u64>,
}

impl Outcome {
    /// Response times in seconds.
    pub fn response_s(&self) -> Vec<f64> {
        self.response_ns
            .iter()
            .map(|&ns| ns_to_seconds(ns))
            .collect()
    }

    /// Bytes of one kind moved, summed over tasks and both servers.
    pub fn bytes_moved(&self, kind: Transfer) -> u64 {
        self.servers
            .iter()
            .flat_map(|s| &s.busy)
            .filter(|b| b.kind == kind)
            .map(|b| b.bytes)
            .sum()
    }

    /// The conservation checks: every subtask completed exactly once; each server served one request at a time
    /// and never moved more than bandwidth × time; every task's reads and write-backs add up to its working set
    /// and its swaps to whole working sets; memory in use never exceeded the capacity and ends at zero; no
    /// subtask started on an SM beyond the usable count.
    pub fn check(&self) -> Result<(), SwapSimError> {
        let fail = |m: String| Err(SwapSimError::Conservation(m));
        for (i, c) in self.completions.iter().enumerate() {
            if let Some((j, &k)) = c.iter().enumerate().find(|(_, &k)| k != 1) {
                return fail(format!("task {i}: subtask {j} completed {k} times"));
            }
        }
        let tasks = self.memory_bytes.len();
        let mut by_task = vec![[0u64; 6]; tasks];
        let slot = |k: Transfer| match k {
            Transfer::Read => 0,
            Transfer::Write => 1,
            Transfer::DirectRead => 2,
            Transfer::DirectWrite => 3,
            Transfer::SwapIn => 4,
            Transfer::SwapOut => 5,
        };
        for s in &self.servers {
            let mut prev_end = 0u64;
            for b in &s.busy {
                if b.end_ns < b.start_ns || b.start_ns < prev_end {
                    return fail(format!(
                        "{} serves two requests at once: [{}, {}] ns starts before {} ns",
                        s.name, b.start_ns, b.end_ns, prev_end
                    ));
                }
                let most = u128::from(b.end_ns - b.start_ns) * u128::from(b.bytes_per_s);
                if u128::from(b.bytes) * u128::from(NS_PER_S) > most {
                    return fail(format!(
                        "{} moved {} bytes in {} ns, more than {} B/s allows",
                        s.name,
                        b.bytes,
                        b.end_ns - b.start_ns,
                        b.bytes_per_s
                    ));
                }
                prev_end = b.end_ns;
                match by_task.get_mut(b.task) {
                    Some(t) => t[slot(b.kind)] += b.bytes,
                    None => return fail(format!("{} served an unknown task {}", s.name, b.task)),
                }
            }
        }
        for (i, t) in by_task.iter().enumerate() {
            let mem = self.memory_bytes[i];
            if t[0] + t[2] != mem || t[1] + t[3] != mem {
                return fail(format!(
                    "task {i}: read {} and wrote back {} bytes of a {mem}-byte working set",
                    t[0] + t[2],
                    t[1] + t[3]
                ));
            }
            let (ins, outs) = (u64::from(self.swap_ins[i]), u64::from(self.swap_outs[i]));
            if t[4] != ins * mem || t[5] != outs * mem || ins > outs {
                return fail(format!(
                    "task {i}: {ins} swap-ins of {} bytes and {outs} swap-outs of {} bytes",
                    t[4], t[5]
                ));
            }
        }
        if let Some(&(t, used)) = self
            .memory_log
            .iter()
            .find(|&&(_, used)| used > self.capacity_bytes)
        {
            return fail(format!(
                "{used} bytes in use at {t} ns, more than the {} bytes of memory",
                self.capacity_bytes
            ));
        }
        if let Some(&(_, used)) = self.memory_log.last().filter(|&&(_, u)| u != 0) {
            return fail(format!(
                "{used} bytes still in use after every task completed"
            ));
        }
        if let Some(d) = self
            .sm_dispatches
            .iter()
            .find(|d| d.in_use > d.usable || d.usable > self.sms)
        {
            return fail(format!(
                "{} SMs in use at {} ns with {} usable of {}",
                d.in_use, d.time_ns, d.usable, self.sms
            ));
        }
        Ok(())
    }
}

/// Simulates `tasks` together on `system` under `mode`.
pub fn simulate(system: &System, tasks: &[Task], mode: &Mode) -> Result<Outcome, SwapSimError> {
    Engine::new(system, tasks, mode)?.run()
}

/// A request waiting for or in service at a server.
#[derive(Debug, Clone, Copy)]
struct Req {
    task: usize,
    kind: Transfer,
    left: u64,
    rank: usize,
    seq: u64,
}

#[derive(Debug, Clone, Copy)]
struct Active {
    req: Req,
    start: u64,
    finish: u64,
    bw: u64,
}

/// One server (memory controller or SSD): FIFO and non-preemptive, or by priority, preemptive and resumable.
#[derive(Debug)]
struct Server {
    by_priority: bool,
    queue: Vec<Req>,
    current: Option<Active>,
    log: ServerLog,
}

impl Server {
    fn new(name: &'static str, by_priority: bool) -> Self {
        Server {
            by_priority,
            queue: Vec::new(),
            current: None,
            log: ServerLog {
                name,
                busy: Vec::new(),
                preemptions: 0,
            },
        }
    }

    fn finish(&self) -> Option<u64> {
        self.current.map(|a| a.finish)
    }

    fn record(&mut self, a: &Active, end: u64, bytes: u64) {
        if end > a.start || bytes > 0 {
            self.log.busy.push(Busy {
                start_ns: a.start,
                end_ns: end,
                bytes,
                bytes_per_s: a.bw,
                task: a.req.task,
                kind: a.req.kind,
            });
        }
    }

    /// The request finishing at `now`, if any.
    fn complete(&mut self, now: u64) -> Option<Req> {
        let a = self.current.filter(|a| a.finish <= now)?;
        self.current = None;
        self.record(&a, a.finish, a.req.left);
        Some(a.req)
    }

    /// Index of the request to serve next: lowest rank then earliest arrival by priority, earliest arrival FIFO.
    fn best(&self) -> Option<usize> {
        let key = |r: &Req| {
            if self.by_priority {
                (r.rank, r.seq)
            } else {
                (0, r.seq)
            }
        };
        (0..self.queue.len()).min_by_key(|&i| key(&self.queue[i]))
    }

    fn dispatch(&mut self, now: u64, bandwidth: impl Fn(Transfer) -> u64) {
        if let (Some(a), Some(b)) = (self.current, self.best()) {
            if self.by_priority && self.queue[b].rank < a.req.rank {
                // Preempted: what it moved so far is logged, the rest waits in the queue with its arrival order.
                let moved = u128::from(now - a.start) * u128::from(a.bw) / u128::from(NS_PER_S);
                let moved = u64::try_from(moved).unwrap_or(u64::MAX).min(a.req.left);
                self.record(&a, now, moved);
                let mut req = a.req;
                req.left -= moved;
                self.queue.push(req);
                self.current = None;
                self.log.preemptions += 1;
            }
        }
        if self.current.is_none() {
            if let Some(b) = self.best() {
                let req = self.queue.remove(b);
                let bw = bandwidth(req.kind);
                self.current = Some(Active {
                    req,
                    start: now,
                    finish: now.saturating_add(transfer_ns(req.left, bw)),
                    bw,
                });
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The allocate step, on the CPU, until the given time.
    Tick(u64),
    /// Waiting for memory for the whole working set.
    WaitMem,
    /// Being swapped in.
    SwapIn,
    /// Reading its slice.
    Read,
    /// Waiting for an SM.
    WaitSm,
    /// Executing on an SM until the given time.
    Exec(u64),
    /// Done computing, still on its SM, waiting for its overlapped direct SSD accesses.
    ExecDirect,
    /// Writing its slice back.
    Write,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Residency {
    /// Not in memory and never swapped out: its first allocation costs nothing.
    Absent,
    Resident,
    SwappingOut,
    SwappedOut,
    SwappingIn,
    /// Holds its resident quota from the start (proposed policy).
    Pinned,
}

#[derive(Debug, Clone, Copy)]
struct TaskRun {
    sub: usize,
    phase: Phase,
    res: Residency,
    pending: u8,
    last_use: u64,
    done_at: Option<u64>,
    /// Once its working set is back, continue with the write-back (it was swapped out while executing) rather
    /// than the read.
    resume_write: bool,
}

#[derive(Debug)]
struct Engine<'a> {
    sys: &'a System,
    tasks: &'a [Task],
    mode: &'a Mode,
    now: u64,
    seq: u64,
    runs: Vec<TaskRun>,
    ranks: Vec<usize>,
    direct: Vec<u64>,
    mc: Server,
    ssd: Server,
    sm_queue: Vec<(usize, u64)>,
    sm_in_use: u32,
    sm_suspended: bool,
    sm_log: Vec<SmDispatch>,
    /// The task whose shortage made MaT suspend an SM; the throttle does not apply to it.
    mat_trigger: Option<usize>,
    suspended_since: u64,
    suspended_ns: u64,
    suspensions: u32,
    used: u64,
    peak: u64,
    mem_log: Vec<(u64, u64)>,
    mem_queue: VecDeque<usize>,
    completions: Vec<Vec<u32>>,
    swap_outs: Vec<u32>,
    swap_ins: Vec<u32>,
}

impl<'a> Engine<'a> {
    fn new(sys: &'a System, tasks: &'a [Task], mode: &'a Mode) -> Result<Self, SwapSimError> {
        let n = tasks.len();
        let by_priority = mode.by_priority();
        let (ranks, direct) = match mode {
            Mode::PriorityOnly { ranks } => {
                if ranks.len() != n {
                    return Err(SwapSimError::invalid(
                        "priority-only run",
                        format!("{n} tasks but {} ranks", ranks.len()),
                    ));
                }
                (ranks.clone(), vec![0; n])
            }
            Mode::Proposed {
                ranks,
                direct_bytes,
            }
            | Mode::DirectOnly {
                ranks,
                direct_bytes,
            } => {
                if ranks.len() != n || direct_bytes.len() != n {
                    return Err(SwapSimError::invalid(
                        "proposed run",
                        format!(
                            "{n} tasks but {} ranks and {} direct shares",
                            ranks.len(),
                            direct_bytes.len()
                        ),
                    ));
                }
                if let Some(i) = (0..n).find(|&i| direct_bytes[i] > tasks[i].memory_bytes) {
                    return Err(SwapSimError::invalid(
                        "proposed run",
                        format!(
                            "task {:?} keeps more on the SSD than its working set",
                            tasks[i].name
                        ),
                    ));
                }
                (ranks.clone(), direct_bytes.clone())
            }
            Mode::Baseline | Mode::Mat => (vec![0; n], vec![0; n]),
        };
        if sys.sms == 0 {
            return Err(SwapSimError::invalid(
                "run",
                "the GPU needs at least one SM",
            ));
        }
        Ok(Engine {
            sys,
            tasks,
            mode,
            now: 0,
            seq: 0,
            runs: vec![
                TaskRun {
                    sub: 0,
                    phase: Phase::Tick(sys.tick_ns),
                    res: Residency::Absent,
                    pending: 0,
                    last_use: 0,
                    done_at: None,
                    resume_write: false,
                };
                n
            ],
            ranks,
            direct,
            mc: Server::new("memory controller", by_priority),
            ssd: Server::new("SSD", by_priority),
            sm_queue: Vec::new(),
            sm_in_use: 0,
            sm_suspended: false,
            sm_log: Vec::new(),
            mat_trigger: None,
            suspended_since: 0,
            suspended_ns: 0,
            suspensions: 0,
            used: 0,
            peak: 0,
            mem_log: Vec::new(),
            mem_queue: VecDeque::new(),
            completions: tasks.iter().map(|t| vec![0; t.subtasks()]).collect(),
            swap_outs: vec![0; n],
            swap_ins: vec![0; n],
        })
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn stuck(&self, detail: impl Into<String>) -> SwapSimError {
        SwapSimError::Stuck {
            policy: self.mode.name().to_string(),
            time_s: ns_to_seconds(self.now),
            detail: detail.into(),
        }
    }

    fn set_used(&mut self, used: u64) {
        self.used = used;
        self.peak = self.peak.max(used);
        self.mem_log.push((self.now, used));
    }

    fn run(mut self) -> Result<Outcome, SwapSimError> {
        if self.mode.planned() {
            let resident: u64 = (0..self.tasks.len())
                .map(|i| self.tasks[i].memory_bytes - self.direct[i])
                .sum();
            if resident > self.sys.capacity_bytes {
                return Err(SwapSimError::QuotaExceedsCapacity {
                    resident,
                    capacity: self.sys.capacity_bytes,
                });
            }
            for r in &mut self.runs {
                r.res = Residency::Pinned;
            }
            self.set_used(resident);
        } else {
            self.set_used(0);
        }
        let subtasks: usize = self.tasks.iter().map(Task::subtasks).sum();
        // Every loop handles at least one event and a run has a bounded number of them (a handful per subtask, two
        // per swap, one per preemption); the limit only turns a bug into an error instead of a hang.
        let limit = 1_000_000 + 64 * subtasks * (self.tasks.len() + 1);
        let mut events = 0usize;
        self.dispatch()?;
        while self.runs.iter().any(|r| r.phase != Phase::Done) {
            let next = self
                .runs
                .iter()
                .filter_map(|r| match r.phase {
                    Phase::Tick(t) | Phase::Exec(t) => Some(t),
                    _ => None,
                })
                .chain(self.mc.finish())
                .chain(self.ssd.finish())
                .min();
            let Some(next) = next else {
                let waiting: Vec<String> = self
                    .runs
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.phase != Phase::Done)
                    .map(|(i, r)| format!("{} in {:?} ({:?})", self.tasks[i].name, r.phase, r.res))
                    .collect();
                return Err(self.stuck(format!(
                    "nothing left to happen; waiting: {}",
                    waiting.join(", ")
                )));
            };
            self.now = next;
            if let Some(r) = self.mc.complete(next) {
                self.transfer_done(r)?;
            }
            if let Some(r) = self.ssd.complete(next) {
                self.transfer_done(r)?;
            }
            for i in 0..self.runs.len() {
                match self.runs[i].phase {
                    Phase::Tick(t) if t == next => self.tick_done(i)?,
                    Phase::Exec(t) if t == next && self.runs[i].pending > 0 => {
                        self.runs[i].phase = Phase::ExecDirect;
                    }
                    Phase::Exec(t) if t == next => {
                        self.sm_in_use -= 1;
                        if matches!(self.runs[i].res, Residency::Resident | Residency::Pinned) {
                            self.start_step(i, true)?;
                        } else {
                            // Swapped out while it executed: its write-back needs the working set back.
                            self.runs[i].phase = Phase::WaitMem;
                            self.runs[i].resume_write = true;
                            self.mem_queue.push_back(i);
                        }
                    }
                    _ => {}
                }
            }
            self.dispatch()?;
            events += 1;
            if events > limit {
                return Err(self.stuck(format!("more than {limit} events")));
            }
        }
        if self.sm_suspended {
            self.suspended_ns += self.now - self.suspended_since;
        }
        let response_ns: Vec<u64> = self
            .runs
            .iter()
            .map(|r| r.done_at.unwrap_or(self.now))
            .collect();
        Ok(Outcome {
            makespan_ns: response_ns.iter().copied().max().unwrap_or(0),
            response_ns,
            completions: self.completions,
            servers: vec![self.mc.log, self.ssd.log],
            memory_log: self.mem_log,
            memory_peak_bytes: self.peak,
            sm_dispatches: self.sm_log,
            swap_outs: self.swap_outs,
            swap_ins: self.swap_ins,
            sm_suspensions: self.suspensions,
            sm_suspended_ns: self.suspended_ns,
            capacity_bytes: self.sys.capacity_bytes,
            sms: self.sys.sms,
            memory_bytes: self.tasks.iter().map(|t| t.memory_bytes).collect(),
        })
    }

    /// Task `i`'s current slice and the part of it on the SSD (its share α_i, for the proposed policy).
    fn slice_and_direct(&self, i: usize) -> (u64, u64) {
        let task = &self.tasks[i];
        let slice = task.slice_bytes(self.runs[i].sub);
        let direct =
            u128::from(slice) * u128::from(self.direct[i]) / u128::from(task.memory_bytes.max(1));
        (slice, u64::try_from(direct).unwrap_or(slice).min(slice))
    }

    /// Starts the read (`write == false`) or write-back of task `i`'s current subtask: the swapped share on the SSD
    /// directly, the rest through the memory controller, both at once.
    fn start_step(&mut self, i: usize, write: bool) -> Result<(), SwapSimError> {
        let (slice, direct) = self.slice_and_direct(i);
        // Overlapped direct accesses happen during the execution (see `dispatch_sms`), not in this step.
        let (slice, direct) = if self.sys.direct_access == DirectAccess::Overlapped {
            (slice - direct, 0)
        } else {
            (slice, direct)
        };
        let (via_mc, via_ssd) = if write {
            (Transfer::Write, Transfer::DirectWrite)
        } else {
            (Transfer::Read, Transfer::DirectRead)
        };
        let mut pending = 0u8;
        for (server_is_mc, kind, bytes) in
            [(true, via_mc, slice - direct), (false, via_ssd, direct)]
        {
            if bytes == 0 {
                continue;
            }
            let req = Req {
                task: i,
                kind,
                left: bytes,
                rank: self.ranks[i],
                seq: self.next_seq(),
            };
            if server_is_mc {
                self.mc.queue.push(req);
            } else {
                self.ssd.queue.push(req);
            }
            pending += 1;
        }
        let run = &mut self.runs[i];
        run.phase = if write { Phase::Write } else { Phase::Read };
        run.pending = pending;
        if !write {
            run.last_use = self.now;
        }
        if pending == 0 {
            self.step_done(i, write)?;
        }
        Ok(())
    }

    /// The read or write-back of task `i`'s current subtask is complete.
    fn step_done(&mut self, i: usize, write: bool) -> Result<(), SwapSimError> {
        if !write {
            self.runs[i].phase = Phase::WaitSm;
            let seq = self.next_seq();
            self.sm_queue.push((i, seq));
            return Ok(());
        }
        let sub = self.runs[i].sub;
        if let Some(c) = self.completions[i].get_mut(sub) {
            *c += 1;
        }
        let run = &mut self.runs[i];
        run.sub += 1;
        run.last_use = self.now;
        if run.sub < self.tasks[i].subtasks() {
            run.phase = Phase::Tick(self.now + self.sys.tick_ns);
            return Ok(());
        }
        run.phase = Phase::Done;
        run.done_at = Some(self.now);
        let held = match run.res {
            Residency::Resident => self.tasks[i].memory_bytes,
            Residency::Pinned => self.tasks[i].memory_bytes - self.direct[i],
            other => {
                return Err(self.stuck(format!("{} completed while {other:?}", self.tasks[i].name)))
            }
        };
        self.runs[i].res = Residency::Absent;
        self.set_used(self.used - held);
        Ok(())
    }

    fn transfer_done(&mut self, req: Req) -> Result<(), SwapSimError> {
        let i = req.task;
        match req.kind {
            Transfer::DirectRead | Transfer::DirectWrite
                if matches!(self.runs[i].phase, Phase::Exec(_) | Phase::ExecDirect) =>
            {
                // An overlapped access of an executing subtask.
                self.runs[i].pending = self.runs[i].pending.saturating_sub(1);
                if self.runs[i].pending == 0 && self.runs[i].phase == Phase::ExecDirect {
                    self.sm_in_use -= 1;
                    self.start_step(i, true)?;
                }
            }
            Transfer::Read | Transfer::DirectRead | Transfer::Write | Transfer::DirectWrite => {
                let write = matches!(req.kind, Transfer::Write | Transfer::DirectWrite);
                self.runs[i].pending = self.runs[i].pending.saturating_sub(1);
                if self.runs[i].pending == 0 {
                    self.step_done(i, write)?;
                }
            }
            Transfer::SwapOut => {
                // The memory is free only once the write to the SSD is complete.
                self.runs[i].res = Residency::SwappedOut;
                self.swap_outs[i] += 1;
                self.set_used(self.used - self.tasks[i].memory_bytes);
            }
            Transfer::SwapIn => {
                self.runs[i].res = Residency::Resident;
                self.swap_ins[i] += 1;
                let write = std::mem::take(&mut self.runs[i].resume_write);
                self.start_step(i, write)?;
            }
        }
        Ok(())
    }

    fn tick_done(&mut self, i: usize) -> Result<(), SwapSimError> {
        match self.runs[i].res {
            Residency::Resident | Residency::Pinned => self.start_step(i, false),
            _ => {
                self.runs[i].phase = Phase::WaitMem;
                self.runs[i].resume_write = false;
                self.mem_queue.push_back(i);
                Ok(())
            }
        }
    }

    fn dispatch(&mut self) -> Result<(), SwapSimError> {
        self.admit()?;
        // SMs first: a subtask put on one may queue overlapped direct accesses for the SSD below.
        self.dispatch_sms();
        let now = self.now;
        let mem_bw = self.sys.memory_bytes_per_s;
        self.mc.dispatch(now, |_| mem_bw);
        let (r, w) = (
            self.sys.ssd_read_bytes_per_s,
            self.sys.ssd_write_bytes_per_s,
        );
        self.ssd
            .dispatch(now, |k| if k.ssd_reads() { r } else { w });
        Ok(())
    }

    fn usable_sms(&self) -> u32 {
        self.sys.sms - u32::from(self.sm_suspended)
    }

    fn dispatch_sms(&mut self) {
        let by_priority = self.mode.by_priority();
        while self.sm_in_use < self.usable_sms() && !self.sm_queue.is_empty() {
            let key = |&(task, seq): &(usize, u64)| {
                if by_priority {
                    (self.ranks[task], seq)
                } else {
                    (0, seq)
                }
            };
            let Some(k) = (0..self.sm_queue.len()).min_by_key(|&k| key(&self.sm_queue[k])) else {
                break;
            };
            let (i, _) = self.sm_queue.remove(k);
            self.sm_in_use += 1;
            self.sm_log.push(SmDispatch {
                time_ns: self.now,
                task: i,
                in_use: self.sm_in_use,
                usable: self.usable_sms(),
            });
            let c = self.tasks[i]
                .compute_ns
                .get(self.runs[i].sub)
                .copied()
                .unwrap_or(0);
            self.runs[i].phase = Phase::Exec(self.now.saturating_add(c));
            self.runs[i].pending = 0;
            if self.sys.direct_access == DirectAccess::Overlapped && self.direct[i] > 0 {
                // The kernel reads and writes the subtask's share on the SSD while it computes.
                let (_, direct) = self.slice_and_direct(i);
                if direct > 0 {
                    for kind in [Transfer::DirectRead, Transfer::DirectWrite] {
                        let seq = self.next_seq();
                        self.ssd.queue.push(Req {
                            task: i,
                            kind,
                            left: direct,
                            rank: self.ranks[i],
                            seq,
                        });
                    }
                    self.runs[i].pending = 2;
                }
            }
        }
    }

    /// Baseline and MaT: serves the tasks waiting for memory in arrival order, swapping out least recently used
    /// evictable tasks (resident, in their allocate step) when free memory is short.
    fn admit(&mut self) -> Result<(), SwapSimError> {
        if self.mode.planned() {
            return Ok(());
        }
        let mat = matches!(self.mode, Mode::Mat);
        while let Some(&head) = self.mem_queue.front() {
            let need = self.tasks[head].memory_bytes;
            if self.runs[head].res == Residency::SwappingOut {
                // Its own swap-out must finish before it can come back.
                break;
            }
            let free = self.sys.capacity_bytes - self.used;
            if free >= need {
                self.mem_queue.pop_front();
                self.set_used(self.used + need);
                match self.runs[head].res {
                    Residency::Absent => {
                        self.runs[head].res = Residency::Resident;
                        self.start_step(head, false)?;
                    }
                    Residency::SwappedOut => {
                        self.runs[head].res = Residency::SwappingIn;
                        self.runs[head].phase = Phase::SwapIn;
                        let seq = self.next_seq();
                        self.ssd.queue.push(Req {
                            task: head,
                            kind: Transfer::SwapIn,
                            left: need,
                            rank: 0,
                            seq,
                        });
                    }
                    other => {
                        return Err(self.stuck(format!(
                            "{} waited for memory while {other:?}",
                            self.tasks[head].name
                        )))
                    }
                }
                if self.mat_trigger == Some(head) {
                    self.mat_trigger = None;
                }
                if mat && self.sm_suspended && self.mem_queue.is_empty() {
                    // Memory suffices for every task that wanted it: MaT resumes the SM.
                    self.sm_suspended = false;
                    self.suspended_ns += self.now - self.suspended_since;
                }
                continue;
            }
            let mut coming: u64 = (0..self.runs.len())
                .filter(|&i| self.runs[i].res == Residency::SwappingOut)
                .map(|i| self.tasks[i].memory_bytes)
                .sum();
            if free + coming >= need {
                break;
            }
            if mat && self.sm_suspended && self.mat_trigger != Some(head) {
                // Throttled: no new swap while the SM is suspended; wait until memory frees up on its own.
                break;
            }
            let mut started = false;
            while free + coming < need {
                let executing_too = self.sys.evictable == Evictable::NotTransferring;
                let victim = (0..self.runs.len())
                    .filter(|&i| {
                        self.runs[i].res == Residency::Resident
                            && match self.runs[i].phase {
                                Phase::Tick(_) => true,
                                Phase::WaitSm | Phase::Exec(_) => executing_too,
                                _ => false,
                            }
                    })
                    .min_by_key(|&i| (self.runs[i].last_use, i));
                let Some(v) = victim else { break };
                self.runs[v].res = Residency::SwappingOut;
                let bytes = self.tasks[v].memory_bytes;
                let seq = self.next_seq();
                self.ssd.queue.push(Req {
                    task: v,
                    kind: Transfer::SwapOut,
                    left: bytes,
                    rank: 0,
                    seq,
                });
                coming += bytes;
                started = true;
            }
            if started && mat && !self.sm_suspended && self.sys.sms > 1 {
                self.sm_suspended = true;
                self.suspended_since = self.now;
                self.suspensions += 1;
                self.mat_trigger = Some(head);
            }
            break;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::swap::model::{MB, NS_PER_S};

    /// 1 GB/s memory, 100 MB/s SSD both ways, a 1 ms tick: round numbers to compute by hand.
    fn system(capacity: u64, sms: u32) -> System {
        System {
            capacity_bytes: capacity,
            memory_bytes_per_s: 1000 * MB,
            ssd_read_bytes_per_s: 100 * MB,
            ssd_write_bytes_per_s: 100 * MB,
            sms,
            tick_ns: 1_000_000,
            evictable: crate::swap::model::Evictable::BetweenSubtasks,
            direct_access: crate::swap::model::DirectAccess::Serial,
        }
    }

    fn task(name: &str, mb: u64, compute_ms: &[u64]) -> Task {
        Task {
            name: name.into(),
            memory_bytes: mb * MB,
            compute_ns: compute_ms.iter().map(|ms| ms * 1_000_000).collect(),
            weight: None,
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn one_task_alone() {
        // Two subtasks of 50 MB: each 1 ms tick + 50 ms read + compute + 50 ms write.
        let t = [task("a", 100, &[10, 20])];
        let o = simulate(&system(1000 * MB, 1), &t, &Mode::Baseline).unwrap();
        o.check().unwrap();
        assert_eq!(
            o.response_ns,
            vec![(1 + 50 + 10 + 50) * MS + (1 + 50 + 20 + 50) * MS]
        );
        assert_eq!(o.swap_outs, vec![0]);
        assert_eq!(o.memory_peak_bytes, 100 * MB);
    }

    #[test]
    fn two_tasks_contend_on_the_fifo_memory_controller() {
        // Both read 100 MB at t = 1 ms; a arrives first (lower index), b waits 100 ms for it. Writes: a's at 201 ms
        // (after 100 ms compute) then b's, which arrives at 301 ms: no wait.
        let t = [task("a", 100, &[100]), task("b", 100, &[100])];
        let o = simulate(&system(1000 * MB, 2), &t, &Mode::Baseline).unwrap();
        o.check().unwrap();
        assert_eq!(o.response_ns, vec![301 * MS, 401 * MS]);
        // With a long compute for a, b's read and write never meet a's... except the read.
        let t = [task("a", 100, &[1000]), task("b", 100, &[10])];
        let o = simulate(&system(1000 * MB, 2), &t, &Mode::Baseline).unwrap();
        assert_eq!(
            o.response_ns,
            vec![(1 + 100 + 1000 + 100) * MS, (1 + 200 + 10 + 100) * MS]
        );
    }

    #[test]
    fn forced_swap_under_baseline() {
        // 150 MB of memory, two 100 MB tasks. a (two subtasks, 50 MB slices) allocates at 1 ms and runs its first
        // subtask: read 50 ms, compute 10, write 50: done at 111 ms, then its second allocate tick [111, 112). b has
        // waited since 1 ms; at 111 a is evictable: swap-out of 100 MB at 100 MB/s = 1 s, memory free at 1111 ms. b
        // allocates (a first allocation costs nothing) and runs its one 100 MB subtask: 100 + 10 + 100 ms, done at
        // 1321 ms. a waited behind b: b frees its memory at 1321, a swaps in (1 s) to 2321, then 50 + 10 + 50 ms:
        // 2431 ms.
        let t = [task("a", 100, &[10, 10]), task("b", 100, &[10])];
        let o = simulate(&system(150 * MB, 2), &t, &Mode::Baseline).unwrap();
        o.check().unwrap();
        assert_eq!(o.swap_outs, vec![1, 0]);
        assert_eq!(o.swap_ins, vec![1, 0]);
        assert_eq!(o.response_ns, vec![2431 * MS, 1321 * MS]);
        assert_eq!(o.bytes_moved(Transfer::SwapOut), 100 * MB);
    }

    #[test]
    fn mat_throttles_the_second_swap() {
        // Three 100 MB tasks of three 1 s subtasks in 200 MB, two SMs. Baseline evicts a for c, then a evicts the
        // next task to reach a boundary, and so on: four swap-outs. MaT suspends one SM at the first swap-out and
        // lets a back in only when a task completes and frees memory, without a second swap.
        let t: Vec<Task> = ["a", "b", "c"]
            .iter()
            .map(|n| task(n, 100, &[1000, 1000, 1000]))
            .collect();
        let sys = system(200 * MB, 2);
        let base = simulate(&sys, &t, &Mode::Baseline).unwrap();
        let mat = simulate(&sys, &t, &Mode::Mat).unwrap();
        base.check().unwrap();
        mat.check().unwrap();
        assert_eq!(base.swap_outs, vec![2, 1, 1]);
        assert_eq!(mat.swap_outs, vec![1, 0, 0]);
        assert_eq!(mat.sm_suspensions, 1);
        assert!(mat.sm_suspended_ns > 0);
        assert!(mat.makespan_ns < base.makespan_ns);
        assert!(mat.sm_dispatches.iter().all(|d| d.in_use <= d.usable));
        assert!(mat.sm_dispatches.iter().any(|d| d.usable == 1));
    }

    #[test]
    fn preemptive_priority_gives_the_top_task_no_delay() {
        // a (rank 1) and b (rank 0) both want the memory controller at 1 ms: b's read goes first by priority, and
        // its write-back at 111 ms preempts a's 500 MB read, so b finishes as if alone. Under FIFO a (the lower
        // index) would be served first and delay b by 500 ms.
        let t = [task("a", 500, &[10]), task("b", 100, &[10])];
        let sys = system(1000 * MB, 2);
        let alone = simulate(&sys, &t[1..], &Mode::Baseline).unwrap();
        let mode = Mode::Proposed {
            ranks: vec![1, 0],
            direct_bytes: vec![0, 0],
        };
        let o = simulate(&sys, &t, &mode).unwrap();
        o.check().unwrap();
        assert_eq!(o.response_ns[1], alone.response_ns[0]);
        assert_eq!(o.response_ns[1], (1 + 100 + 10 + 100) * MS);
        // a lost the memory controller for b's read (100 ms) and b's write (100 ms, 111..211 ms, while a was still
        // reading): 1 + 500 + 200 + 10 + 500 ms.
        assert_eq!(o.response_ns[0], (1 + 500 + 200 + 10 + 500) * MS);
        assert!(o.servers[0].preemptions >= 1);
        let fifo = simulate(&sys, &t, &Mode::Baseline).unwrap();
        assert!(fifo.response_ns[1] > alone.response_ns[0]);
    }

    #[test]
    fn the_ablation_separates_the_two_algorithms() {
        // a (rank 1, 500 MB) and b (rank 0, 100 MB) in 500 MB: they do not fit together.
        // - Alg. 1 alone: Baseline's memory manager (a, first in line, takes the memory; b waits for it), servers
        //   by priority: the top task is delayed anyway.
        // - Alg. 2 alone: a keeps 100 MB on the SSD (its quota is 400 MB), nothing is swapped, FIFO servers: a's
        //   400 MB read (the lower index, first in FIFO) delays b's read.
        // - Both: no swapping and b as if alone.
        let t = [task("a", 500, &[10]), task("b", 100, &[10])];
        let sys = system(500 * MB, 2);
        let alone_b = simulate(&sys, &t[1..], &Mode::Baseline)
            .unwrap()
            .response_ns[0];
        let prio = simulate(&sys, &t, &Mode::PriorityOnly { ranks: vec![1, 0] }).unwrap();
        prio.check().unwrap();
        assert!(
            prio.response_ns[1] > alone_b,
            "Baseline's memory manager still makes the top task wait for memory"
        );
        let direct = Mode::DirectOnly {
            ranks: vec![1, 0],
            direct_bytes: vec![100 * MB, 0],
        };
        let d = simulate(&sys, &t, &direct).unwrap();
        d.check().unwrap();
        assert_eq!(d.swap_outs, vec![0, 0]);
        assert!(
            d.response_ns[1] > alone_b,
            "FIFO servers delay the top task"
        );
        assert!(d.servers.iter().all(|s| s.preemptions == 0));
        let both = Mode::Proposed {
            ranks: vec![1, 0],
            direct_bytes: vec![100 * MB, 0],
        };
        let p = simulate(&sys, &t, &both).unwrap();
        p.check().unwrap();
        assert_eq!(p.swap_outs, vec![0, 0]);
        assert_eq!(p.response_ns[1], alone_b);
    }

    #[test]
    fn overlapped_direct_access_runs_during_the_execution() {
        // 100 MB task wholly on the SSD, two subtasks of 50 MB: each subtask's 500 ms read and 500 ms write on the
        // SSD run while it executes, so a subtask takes max(compute, 1000 ms): 1 + 1000 + 1 + 2000 ms.
        let t = [task("a", 100, &[10, 2000])];
        let mode = Mode::Proposed {
            ranks: vec![0],
            direct_bytes: vec![100 * MB],
        };
        let mut sys = system(0, 1);
        sys.direct_access = DirectAccess::Overlapped;
        let o = simulate(&sys, &t, &mode).unwrap();
        o.check().unwrap();
        assert_eq!(o.response_ns, vec![3002 * MS]);
        assert_eq!(o.bytes_moved(Transfer::DirectWrite), 100 * MB);
        assert_eq!(o.bytes_moved(Transfer::Read), 0);
    }

    #[test]
    fn a_task_swapped_out_while_executing_swaps_back_in_for_its_write_back() {
        // a (100 MB, 1000 ms compute) and b (100 MB, 10 ms) in 100 MB, evictable while executing: Fig. 3's
        // ping-pong. a allocates and reads (1 + 100 ms) and executes; b waits and, at 101 ms, evicts a (1000 ms at
        // 100 MB/s), allocates at 1101 ms and reads until 1201 ms. a's execution ended at 1101 ms; it waits for
        // memory and, once b executes (1201 ms), evicts b (until 2201 ms). Then a swaps in (until 3201 ms) and
        // writes back (3301 ms); b, done executing at 1211 ms, swaps in after a frees the memory (4301 ms) and
        // writes back (4401 ms).
        let t = [task("a", 100, &[1000]), task("b", 100, &[10])];
        let mut sys = system(100 * MB, 2);
        sys.evictable = Evictable::NotTransferring;
        let o = simulate(&sys, &t, &Mode::Baseline).unwrap();
        o.check().unwrap();
        assert_eq!(o.swap_outs, vec![1, 1]);
        assert_eq!(o.swap_ins, vec![1, 1]);
        assert_eq!(o.response_ns, vec![3301 * MS, 4401 * MS]);
    }

    #[test]
    fn direct_access_splits_reads_between_memory_and_ssd() {
        // 100 MB task, 60 MB on the SSD: the read is 40 MB via memory (40 ms) and 60 MB from the SSD (600 ms) at
        // once, so 600 ms; the write-back the same. 1 + 600 + 10 + 600 ms.
        let t = [task("a", 100, &[10])];
        let mode = Mode::Proposed {
            ranks: vec![0],
            direct_bytes: vec![60 * MB],
        };
        let o = simulate(&system(40 * MB, 1), &t, &mode).unwrap();
        o.check().unwrap();
        assert_eq!(o.response_ns, vec![1211 * MS]);
        assert_eq!(o.bytes_moved(Transfer::DirectRead), 60 * MB);
        assert_eq!(o.memory_peak_bytes, 40 * MB);
    }

    #[test]
    fn quotas_over_capacity_are_an_error_not_a_panic() {
        let t = [task("a", 100, &[10]), task("b", 100, &[10])];
        let mode = Mode::Proposed {
            ranks: vec![0, 1],
            direct_bytes: vec![0, 0],
        };
        let e = simulate(&system(150 * MB, 1), &t, &mode).unwrap_err();
        assert!(
            matches!(e, SwapSimError::QuotaExceedsCapacity { .. }),
            "{e}"
        );
        let bad = Mode::Proposed {
            ranks: vec![0],
            direct_bytes: vec![0],
        };
        assert!(simulate(&system(150 * MB, 1), &t, &bad).is_err());
    }

    #[test]
    fn a_broken_record_fails_the_checks() {
        let t = [task("a", 100, &[10])];
        let mut o = simulate(&system(1000 * MB, 1), &t, &Mode::Baseline).unwrap();
        o.check().unwrap();
        let mut twice = o.clone();
        twice.completions[0][0] = 2;
        assert!(twice.check().is_err());
        let mut fast = o.clone();
        fast.servers[0].busy[0].bytes_per_s /= 2;
        assert!(fast.check().unwrap_err().to_string().contains("more than"));
        let mut overlap = o.clone();
        let b = overlap.servers[0].busy[0];
        overlap.servers[0].busy.insert(1, b);
        assert!(overlap.check().is_err());
        o.memory_log.push((NS_PER_S, 2000 * MB));
        assert!(o.check().is_err());
    }
}
