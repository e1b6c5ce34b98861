//! The executor: replays a plan with real timers, one thread per CPU lane, and real paging through the pager.
//!
//! Every component's buffers hold bytes whose checksum the component keeps; each slot verifies them before its work
//! and changes them after it (read-write buffers), so paging that loses or mixes data fails the run.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use oversub_core::{AddressSpace, Buffer, BufferFlags, PagerError, Ticket};

use crate::model::{BufferId, System, Work};
use crate::plan::{Mode, PageKind, Plan};

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The pager refused or failed an operation.
    #[error("paging {what}: {source}")]
    Pager {
        /// What was being done.
        what: String,
        /// The pager's error.
        #[source]
        source: PagerError,
    },
    /// A buffer's bytes changed behind its component's back.
    #[error("data corrupted: {0}")]
    Corrupted(String),
    /// The plan cannot be executed (capacity problems).
    #[error("the plan cannot run: {0}")]
    Infeasible(String),
    /// A worker thread died.
    #[error("a worker thread failed: {0}")]
    Thread(String),
}

fn pager(what: impl Into<String>) -> impl FnOnce(PagerError) -> RunError {
    let what = what.into();
    move |source| RunError::Pager { what, source }
}

/// What happened to one slot instance.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SlotRecord {
    /// Component name.
    pub component: String,
    /// CPU lane.
    pub cpu: usize,
    /// GPU used.
    pub gpu: Option<usize>,
    /// Repetition of the table.
    pub hyperperiod: usize,
    /// Planned start of the work, seconds from the run's start.
    pub planned_start_s: f64,
    /// Actual start of the work.
    pub actual_start_s: f64,
    /// actual − planned start (0 when on time).
    pub lateness_s: f64,
    /// When the work completed, or was cut off at the end of its window.
    pub completion_s: f64,
    /// The deadline (the next slot's start on the CPU).
    pub deadline_s: f64,
    /// Whether it completed by its deadline.
    pub met: bool,
    /// Time the slot spent paging or waiting for paging before its work.
    pub paging_wait_s: f64,
}

/// One paging operation as it ran.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpRecord {
    /// "in" or "out".
    pub kind: &'static str,
    /// "component.buffer".
    pub buffer: String,
    /// Bytes moved to or from the store.
    pub io_bytes: u64,
    /// When the operation was started.
    pub start_s: f64,
    /// When it was finished.
    pub end_s: f64,
    /// Component whose slot it served.
    pub for_component: String,
}

/// The outcome of a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunResult {
    /// The mode.
    pub mode: String,
    /// The table's hyperperiod (the period the run targets).
    pub hyperperiod_s: f64,
    /// Repetitions run.
    pub hyperperiods: usize,
    /// Every slot instance, in start order.
    pub slots: Vec<SlotRecord>,
    /// Every paging operation, in start order.
    pub ops: Vec<OpRecord>,
    /// Buffers resident when the table started (paged in during set-up).
    pub resident_at_start: Vec<String>,
    /// Repetitions at the start that are not counted (see [`RunOptions::warmup_hyperperiods`]).
    pub warmup_hyperperiods: usize,
    /// Counted slots that completed after their deadline (or were cut off).
    pub deadline_misses: usize,
    /// Misses during the warm-up repetitions.
    pub warmup_misses: usize,
    /// Worst lateness of a work start, seconds.
    pub max_lateness_s: f64,
    /// Bytes moved to or from the store during the counted repetitions.
    pub bytes_paged: u64,
    /// Seconds the store was busy with those operations (sum of operation times).
    pub store_busy_s: f64,
}

impl RunResult {
    /// Whether every counted slot met its deadline.
    pub fn met_target(&self) -> bool {
        self.deadline_misses == 0
    }

    /// Slots counted (after the warm-up).
    pub fn counted_slots(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.hyperperiod >= self.warmup_hyperperiods)
            .count()
    }
}

/// Options of a run.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Pin each lane's thread to its CPU where the machine has it.
    pub pin_threads: bool,
    /// Leading repetitions that warm the system up (the first fills memory and meets the store still busy with the
    /// set-up); their slots are recorded but not counted in misses, lateness or bytes paged.
    pub warmup_hyperperiods: usize,
    /// Pause between set-up and the table's start, seconds, so the store finishes absorbing the set-up's burst of
    /// writes (an initialisation phase before the real-time part starts).
    pub settle_s: f64,
    /// Called after each slot instance completes with (done, total).
    pub progress: Option<Arc<dyn Fn(usize, usize) + Send + Sync>>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("pin_threads", &self.pin_threads)
            .finish()
    }
}

/// A buffer with the checksum its component expects.
#[derive(Debug)]
struct Held {
    buffer: Buffer,
    name: String,
    size: usize,
    read_only: bool,
    checksum: u64,
    version: u64,
}

/// Shared state of a run.
struct Shared {
    space: AddressSpace,
    held: Vec<Mutex<Held>>,
    t0: Instant,
    /// Plan indices of instances whose work has completed.
    completed: Mutex<Vec<bool>>,
    completed_cv: Condvar,
    /// Page-in tickets the controller started, by plan index of the instance they serve.
    tickets: Mutex<HashMap<usize, Vec<(Ticket, f64)>>>,
    tickets_cv: Condvar,
    ops: Mutex<Vec<OpRecord>>,
    names: Vec<String>,
    component_names: Vec<String>,
    /// Plan entries whose paging is done; entries without operations count as done from the start. Paging runs in
    /// plan order, as the planner's single store queue assumes: a page-in may rely on memory an earlier entry's
    /// page-out frees, and two entries may move the same buffer in opposite directions.
    paged: Mutex<Vec<bool>>,
    paged_cv: Condvar,
    /// Set when a thread fails, so the others stop waiting for it.
    aborted: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn now_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn sleep_until(&self, t_s: f64) {
        let target = self.t0 + Duration::from_secs_f64(t_s.max(0.0));
        // Absolute-time sleep: compute the remaining time from the fixed origin, so errors do not accumulate.
        loop {
            let now = Instant::now();
            if now >= target {
                return;
            }
            std::thread::sleep(target - now);
        }
    }

    fn is_aborted(&self) -> bool {
        self.aborted.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Stops the run: every waiter wakes up and gives up.
    fn abort(&self) {
        self.aborted
            .store(true, std::sync::atomic::Ordering::Release);
        let _done = self.completed.lock().unwrap_or_else(|p| p.into_inner());
        self.completed_cv.notify_all();
        let _tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        self.tickets_cv.notify_all();
        let _paged = self.paged.lock().unwrap_or_else(|p| p.into_inner());
        self.paged_cv.notify_all();
    }

    /// Waits until every plan entry before `idx` has done its paging.
    fn wait_paging_turn(&self, idx: usize) -> Result<(), RunError> {
        let mut paged = self.paged.lock().unwrap_or_else(|p| p.into_inner());
        while !paged.iter().take(idx).all(|d| *d) {
            if self.is_aborted() {
                return Err(RunError::Thread(
                    "stopped after another thread failed".into(),
                ));
            }
            paged = self.paged_cv.wait(paged).unwrap_or_else(|p| p.into_inner());
        }
        Ok(())
    }

    fn mark_paged(&self, idx: usize) {
        let mut paged = self.paged.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = paged.get_mut(idx) {
            *d = true;
        }
        self.paged_cv.notify_all();
    }

    fn wait_completed(&self, ids: &[usize]) -> Result<(), RunError> {
        let mut done = self.completed.lock().unwrap_or_else(|p| p.into_inner());
        while !ids.iter().all(|&i| done.get(i).copied().unwrap_or(true)) {
            if self.is_aborted() {
                return Err(RunError::Thread(
                    "stopped after another thread failed".into(),
                ));
            }
            done = self
                .completed_cv
                .wait(done)
                .unwrap_or_else(|p| p.into_inner());
        }
        Ok(())
    }

    fn record(
        &self,
        kind: PageKind,
        b: BufferId,
        io_bytes: u64,
        start_s: f64,
        for_component: usize,
    ) {
        self.record_until(None, kind, b, io_bytes, start_s, for_component);
    }

    /// Records an operation that ended at `done_at` (now if unknown).
    fn record_until(
        &self,
        done_at: Option<Instant>,
        kind: PageKind,
        b: BufferId,
        io_bytes: u64,
        start_s: f64,
        for_component: usize,
    ) {
        let end_s = done_at.map_or_else(
            || self.now_s(),
            |at| at.saturating_duration_since(self.t0).as_secs_f64(),
        );
        let rec = OpRecord {
            kind: match kind {
                PageKind::In => "in",
                PageKind::Out => "out",
            },
            buffer: self.names[b.0].clone(),
            io_bytes,
            start_s,
            end_s: end_s.max(start_s),
            for_component: self.component_names[for_component].clone(),
        };
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(rec);
    }

    fn handle(&self, b: BufferId) -> Buffer {
        self.held[b.0]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .buffer
    }
}

fn fill(space: &AddressSpace, held: &mut Held, seed: u64) -> Result<(), RunError> {
    let ptr = space
        .host_ptr(held.buffer)
        .map_err(pager(format!("fill {}", held.name)))?;
    // SAFETY: the buffer is resident and `size` bytes long; this thread is its only user now.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, held.size) };
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in bytes.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = x.to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
    held.checksum = xxhash_rust::xxh3::xxh3_64(bytes);
    Ok(())
}

/// Verifies a buffer's bytes and, for a read-write buffer, changes them (a new version) and keeps the checksum.
fn touch(space: &AddressSpace, held: &mut Held) -> Result<(), RunError> {
    let ptr = space
        .host_ptr(held.buffer)
        .map_err(pager(format!("access {}", held.name)))?;
    // SAFETY: the buffer is resident (the pager said so under its lock) and only this slot uses it now.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, held.size) };
    let actual = xxhash_rust::xxh3::xxh3_64(bytes);
    if actual != held.checksum {
        return Err(RunError::Corrupted(format!(
            "{} (version {}) reads back with checksum {actual:#x}, expected {:#x}",
            held.name, held.version, held.checksum
        )));
    }
    if !held.read_only {
        held.version += 1;
        let v = held.version.to_le_bytes();
        let n = v.len().min(bytes.len());
        bytes[..n].copy_from_slice(&v[..n]);
        held.checksum = xxhash_rust::xxh3::xxh3_64(bytes);
    }
    Ok(())
}

/// Does the slot's work, but never past `cutoff`: the table partitions time, so a slot that started late is cut
/// off at the end of its window instead of pushing every later slot back. Returns whether the work completed.
fn do_work(work: Work, cutoff: Instant) -> bool {
    let wanted = Instant::now() + Duration::from_secs_f64(work.compute_s().max(0.0));
    let end = wanted.min(cutoff);
    match work {
        Work::Spin { .. } => {
            let mut x = 1u64;
            while Instant::now() < end {
                for _ in 0..1000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
        }
        Work::Sleep { .. } => {
            let now = Instant::now();
            if end > now {
                std::thread::sleep(end - now);
            }
        }
    }
    wanted <= cutoff
}

fn pin_to_cpu(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Aborts the run when a thread's body fails or panics, so no other thread waits for it forever.
struct AbortOnError<'a>(&'a Shared);

impl AbortOnError<'_> {
    fn check<T>(&self, r: Result<T, RunError>) -> Result<T, RunError> {
        if r.is_err() {
            self.0.abort();
        }
        r
    }
}

impl Drop for AbortOnError<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

/// Earlier instances (by start) that use `b`: a victim may only go once they are done.
fn earlier_users(plan: &Plan, b: BufferId, before_start_s: f64) -> Vec<usize> {
    plan.slots
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.instance.start_s < before_start_s - 1e-9 && s.instance.buffers.contains(&b)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Runs the paging of plan entry `idx` synchronously (set-up, sync and demand modes), in its turn.
fn page_sync(shared: &Shared, plan: &Plan, idx: usize) -> Result<(), RunError> {
    let Some(sp) = plan.slots.get(idx) else {
        return Ok(());
    };
    shared.wait_paging_turn(idx)?;
    for op in &sp.page_outs {
        shared.wait_completed(&earlier_users(plan, op.buffer, sp.instance.start_s))?;
        let start = shared.now_s();
        shared
            .space
            .page_out(shared.handle(op.buffer))
            .map_err(pager(format!("out {}", shared.names[op.buffer.0])))?;
        shared.record(
            PageKind::Out,
            op.buffer,
            op.io_bytes,
            start,
            sp.instance.component,
        );
    }
    for op in &sp.page_ins {
        let start = shared.now_s();
        shared
            .space
            .page_in(shared.handle(op.buffer))
            .map_err(pager(format!("in {}", shared.names[op.buffer.0])))?;
        shared.record(
            PageKind::In,
            op.buffer,
            op.io_bytes,
            start,
            sp.instance.component,
        );
    }
    shared.mark_paged(idx);
    Ok(())
}

/// Executes `plan` (made for `system`) on `space`, whose pool must have room for the plan's capacity.
pub fn run(
    system: &System,
    space: &AddressSpace,
    plan: &Plan,
    options: &RunOptions,
) -> Result<RunResult, RunError> {
    if let Some(p) = plan
        .problems()
        .find(|s| s.problem.as_deref().is_some_and(|m| m.contains("capacity")))
    {
        return Err(RunError::Infeasible(p.problem.clone().unwrap_or_default()));
    }
    let bufs = system.buffers();
    let names: Vec<String> = bufs
        .iter()
        .map(|(c, b)| format!("{}.{}", system.components[*c].name, b.name))
        .collect();

    // Set-up: every buffer allocated, filled and paged out, so the plan starts from an empty pool.
    let mut held = Vec::with_capacity(bufs.len());
    for (i, (_, spec)) in bufs.iter().enumerate() {
        let flags = if spec.read_only {
            BufferFlags::READ_ONLY
        } else {
            BufferFlags::DEFAULT
        };
        let buffer = space
            .alloc(spec.size_bytes, flags)
            .map_err(pager(format!("alloc {}", names[i])))?;
        let mut h = Held {
            buffer,
            name: names[i].clone(),
            size: spec.size_bytes as usize,
            read_only: spec.read_only,
            checksum: 0,
            version: 0,
        };
        fill(space, &mut h, i as u64 + 1)?;
        space
            .page_out(buffer)
            .map_err(pager(format!("set-up out {}", names[i])))?;
        held.push(Mutex::new(h));
    }
    let shared = Arc::new(Shared {
        space: space.clone(),
        held,
        t0: Instant::now(),
        completed: Mutex::new(vec![false; plan.slots.len()]),
        completed_cv: Condvar::new(),
        tickets: Mutex::new(HashMap::new()),
        tickets_cv: Condvar::new(),
        ops: Mutex::new(Vec::new()),
        names,
        component_names: system.components.iter().map(|c| c.name.clone()).collect(),
        paged: Mutex::new(
            plan.slots
                .iter()
                .map(|s| s.ops().next().is_none())
                .collect(),
        ),
        paged_cv: Condvar::new(),
        aborted: std::sync::atomic::AtomicBool::new(false),
    });
    for idx in (0..plan.slots.len()).filter(|&i| plan.slots[i].issue_s < 0.0) {
        page_sync(&shared, plan, idx)?;
    }
    let setup_ops = shared.ops.lock().unwrap_or_else(|p| p.into_inner()).len();
    let resident_at_start: Vec<String> = shared
        .held
        .iter()
        .filter_map(|h| {
            let h = h.lock().unwrap_or_else(|p| p.into_inner());
            let resident = space
                .info(h.buffer)
                .is_ok_and(|i| i.state == oversub_core::BufferState::Resident);
            resident.then(|| h.name.clone())
        })
        .collect();
    // The table starts after the settle pause (plus a short lead so every thread is waiting when it does).
    let lead_s = 0.05 + options.settle_s.max(0.0);
    let shared = Arc::new(Shared {
        t0: Instant::now() + Duration::from_secs_f64(lead_s),
        ..Arc::try_unwrap(shared)
            .map_err(|_| RunError::Thread("set-up state still shared".into()))?
    });
    {
        let mut ops = shared.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.drain(..setup_ops);
    }

    let plan = Arc::new(plan.clone());
    let system = Arc::new(system.clone());
    let total = plan.slots.len();
    let done_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();

    // The paging controller of async mode: issues each instance's operations at their planned time.
    if plan.mode == Mode::Async {
        let (shared, plan) = (Arc::clone(&shared), Arc::clone(&plan));
        handles.push(
            std::thread::Builder::new()
                .name("oversub-pager".into())
                .spawn(move || -> Result<Vec<SlotRecord>, RunError> {
                    let guard = AbortOnError(&shared);
                    let body = || -> Result<Vec<SlotRecord>, RunError> {
                        for (idx, sp) in plan
                            .slots
                            .iter()
                            .enumerate()
                            .filter(|(_, s)| s.issue_s >= 0.0)
                        {
                            shared.sleep_until(sp.issue_s);
                            let mut outs = Vec::new();
                            for op in &sp.page_outs {
                                shared.wait_completed(&earlier_users(
                                    &plan,
                                    op.buffer,
                                    sp.instance.start_s,
                                ))?;
                                let start = shared.now_s();
                                let t = shared
                                    .space
                                    .page_out_async(shared.handle(op.buffer))
                                    .map_err(pager(format!("out {}", shared.names[op.buffer.0])))?;
                                outs.push((t, op, start));
                            }
                            // A page-in needs the victims' memory: finish their page-outs first.
                            for (t, op, start) in outs {
                                t.finish().map_err(pager(format!(
                                    "finish out {}",
                                    shared.names[op.buffer.0]
                                )))?;
                                shared.record(
                                    PageKind::Out,
                                    op.buffer,
                                    op.io_bytes,
                                    start,
                                    sp.instance.component,
                                );
                            }
                            let mut ins = Vec::new();
                            for op in &sp.page_ins {
                                let issued = shared.now_s();
                                let t = shared
                                    .space
                                    .page_in_async(shared.handle(op.buffer))
                                    .map_err(pager(format!("in {}", shared.names[op.buffer.0])))?;
                                ins.push((t, issued));
                            }
                            shared
                                .tickets
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(idx, ins);
                            shared.tickets_cv.notify_all();
                            shared.mark_paged(idx);
                        }
                        Ok(Vec::new())
                    };
                    guard.check(body())
                })
                .map_err(|e| RunError::Thread(e.to_string()))?,
        );
    }

    let mut cpus: Vec<usize> = plan.slots.iter().map(|s| s.instance.cpu).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    for cpu in cpus {
        let (shared, plan, system, done_count) = (
            Arc::clone(&shared),
            Arc::clone(&plan),
            Arc::clone(&system),
            Arc::clone(&done_count),
        );
        let progress = options.progress.clone();
        let pin = options.pin_threads;
        handles.push(
            std::thread::Builder::new()
                .name(format!("oversub-cpu{cpu}"))
                .spawn(move || -> Result<Vec<SlotRecord>, RunError> {
                    let guard = AbortOnError(&shared);
                    let body = || -> Result<Vec<SlotRecord>, RunError> {
                        if pin && cpu < available && !pin_to_cpu(cpu) {
                            tracing::info!(
                                cpu,
                                "could not pin the lane's thread; it runs unpinned"
                            );
                        }
                        let mut mine: Vec<usize> = (0..plan.slots.len())
                            .filter(|&i| plan.slots[i].instance.cpu == cpu)
                            .collect();
                        mine.sort_by(|&a, &b| {
                            plan.slots[a]
                                .instance
                                .start_s
                                .total_cmp(&plan.slots[b].instance.start_s)
                        });
                        let mut records = Vec::new();
                        for idx in mine {
                            let sp = &plan.slots[idx];
                            let inst = &sp.instance;
                            let comp = &system.components[inst.component];
                            let before_paging = shared.now_s();
                            if sp.issue_s >= 0.0 {
                                match plan.mode {
                                    Mode::Async => {
                                        shared.sleep_until(inst.start_s);
                                        let tickets = {
                                            let mut map = shared
                                                .tickets
                                                .lock()
                                                .unwrap_or_else(|p| p.into_inner());
                                            loop {
                                                if let Some(t) = map.remove(&idx) {
                                                    break t;
                                                }
                                                if shared.is_aborted() {
                                                    return Err(RunError::Thread(
                                                        "stopped after the pager thread failed"
                                                            .into(),
                                                    ));
                                                }
                                                map = shared
                                                    .tickets_cv
                                                    .wait(map)
                                                    .unwrap_or_else(|p| p.into_inner());
                                            }
                                        };
                                        for ((t, issued), op) in
                                            tickets.into_iter().zip(&sp.page_ins)
                                        {
                                            let done_at = t.completed_at();
                                            t.finish().map_err(pager(format!(
                                                "finish in {}",
                                                shared.names[op.buffer.0]
                                            )))?;
                                            // The timeline shows the I/O from its start to its completion, not the wait.
                                            let start = issued;
                                            shared.record_until(
                                                done_at,
                                                PageKind::In,
                                                op.buffer,
                                                op.io_bytes,
                                                start,
                                                inst.component,
                                            );
                                        }
                                    }
                                    Mode::Sync => {
                                        shared.sleep_until(sp.paging_start_s);
                                        page_sync(&shared, &plan, idx)?;
                                        shared.sleep_until(inst.start_s);
                                    }
                                    Mode::Demand => {
                                        shared.sleep_until(inst.start_s);
                                        page_sync(&shared, &plan, idx)?;
                                    }
                                }
                            } else {
                                shared.sleep_until(inst.start_s);
                            }
                            let start = shared.now_s();
                            let paging_wait = (start - before_paging.max(inst.start_s)).max(0.0);
                            for b in &inst.buffers {
                                let mut h =
                                    shared.held[b.0].lock().unwrap_or_else(|p| p.into_inner());
                                touch(&shared.space, &mut h)?;
                            }
                            let cutoff =
                                shared.t0 + Duration::from_secs_f64(inst.deadline_s.max(0.0));
                            let completed = do_work(comp.work, cutoff);
                            let completion = shared.now_s();
                            {
                                let mut done =
                                    shared.completed.lock().unwrap_or_else(|p| p.into_inner());
                                if let Some(d) = done.get_mut(idx) {
                                    *d = true;
                                }
                            }
                            shared.completed_cv.notify_all();
                            let lateness = (start - inst.start_s).max(0.0);
                            records.push(SlotRecord {
                                component: comp.name.clone(),
                                cpu,
                                gpu: inst.gpu,
                                hyperperiod: inst.hyperperiod,
                                planned_start_s: inst.start_s,
                                actual_start_s: start,
                                lateness_s: lateness,
                                completion_s: completion,
                                deadline_s: inst.deadline_s,
                                met: completed && completion <= inst.deadline_s + 1e-3,
                                paging_wait_s: paging_wait,
                            });
                            let n =
                                done_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                            if let Some(p) = &progress {
                                p(n, total);
                            }
                        }
                        Ok(records)
                    };
                    guard.check(body())
                })
                .map_err(|e| RunError::Thread(e.to_string()))?,
        );
    }

    let mut slots = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => slots.extend(r),
            Ok(Err(e)) => {
                // The first failure is the cause; the others only stopped because of it.
                if first_err.is_none() || matches!(first_err, Some(RunError::Thread(_))) {
                    first_err = Some(e);
                }
            }
            Err(_) => {
                first_err.get_or_insert(RunError::Thread("a lane thread panicked".into()));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    slots.sort_by(|a, b| {
        a.planned_start_s
            .total_cmp(&b.planned_start_s)
            .then(a.cpu.cmp(&b.cpu))
    });
    let mut ops = std::mem::take(&mut *shared.ops.lock().unwrap_or_else(|p| p.into_inner()));
    ops.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    // Free the buffers so the pool is empty again for the next run.
    for h in &shared.held {
        let b = h.lock().unwrap_or_else(|p| p.into_inner()).buffer;
        let _ = shared.space.free(b);
    }
    let warmup = options
        .warmup_hyperperiods
        .min(plan.hyperperiods.saturating_sub(1));
    let counted_from_s = warmup as f64 * plan.hyperperiod_s;
    let counted = |s: &&SlotRecord| s.hyperperiod >= warmup;
    let counted_ops = || ops.iter().filter(|o| o.start_s >= counted_from_s);
    Ok(RunResult {
        mode: plan.mode.name().into(),
        hyperperiod_s: plan.hyperperiod_s,
        hyperperiods: plan.hyperperiods,
        warmup_hyperperiods: warmup,
        deadline_misses: slots.iter().filter(counted).filter(|s| !s.met).count(),
        warmup_misses: slots
            .iter()
            .filter(|s| s.hyperperiod < warmup && !s.met)
            .count(),
        max_lateness_s: slots
            .iter()
            .filter(counted)
            .map(|s| s.lateness_s)
            .fold(0.0, f64::max),
        bytes_paged: counted_ops().map(|o| o.io_bytes).sum(),
        store_busy_s: counted_ops().map(|o| o.end_s - o.start_s).sum(),
        slots,
        ops,
        resident_at_start,
    })
}
