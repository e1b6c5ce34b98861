//! `oversub arbiter`: the SiΓ memory server from the shell. Analyse phase lengths (Eqs. 2-4), serve a shared
//! arbiter, announce phases from scripts, and look at a running one.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use oversub_arbiter::analysis::{bound_report, KernelCase, KernelQuery, PremPhases};
use oversub_arbiter::{
    parse_duration, Arbiter, ArbiterConfig, ArbiterError, Phase, PhaseKind, SharedOptions,
};
use oversub_report::{format_seconds, text_table};
use serde::Serialize;

use crate::error::BoxError;

fn dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// A duration that may be zero (ε, preemption time).
fn dur0(s: &str) -> Result<Duration, String> {
    match parse_duration(s) {
        Ok(d) => Ok(d),
        Err(ArbiterError::InvalidDuration {
            reason: "a phase must last longer than zero",
            ..
        }) => Ok(Duration::ZERO),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Debug, Subcommand)]
pub enum ArbiterCommand {
    /// Worst-case completion of a transfer (Eq. 2) and of a kernel (Eqs. 3-4) under arbitration, from a PREM
    /// task's phase lengths.
    Bound(BoundArgs),
    /// Create a shared arbiter under /dev/shm and keep it for a while (CPU tasks and pools in other processes
    /// open it by name). SIGTERM or Ctrl-C stops it cleanly (exit status 0) and removes the file; the file of a
    /// server that was killed outright is taken over.
    Serve(ServeArgs),
    /// Announce one phase to a shared arbiter from a script (the slot expires with the phase's deadline).
    Phase(PhaseArgs),
    /// Show the tasks, phases and counters of a shared arbiter.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct BoundArgs {
    /// T(ML): memory-loading phase (e.g. 444us).
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    load: Duration,
    /// T(C): compute phase as announced (the usable window).
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    compute: Duration,
    /// T(MU): memory-unloading phase.
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    unload: Duration,
    /// Longest compute phase, when it can run past the announced one (default: as --compute).
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    compute_worst: Option<Duration>,
    /// Worst memory-loading phase, for the spin-kernel case (default: as --load).
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    load_worst: Option<Duration>,
    /// Worst memory-unloading phase (default: as --unload).
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    unload_worst: Option<Duration>,
    /// ε: one server round trip.
    #[arg(long, default_value = "1us", value_parser = dur0, allow_hyphen_values = true)]
    epsilon: Duration,
    /// T(Q): one chunk's transfer time (the paper's TX1: 122us).
    #[arg(long, default_value = "122us", value_parser = dur, allow_hyphen_values = true)]
    chunk_time: Duration,
    /// T(MG): length of the transfer alone.
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    transfer: Option<Duration>,
    /// T(K): length of a kernel.
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    kernel: Option<Duration>,
    /// The kernel can be preempted by a spin kernel.
    #[arg(long)]
    preemptible: bool,
    /// Preemption latency of the spin kernel (the paper measured 120-170us).
    #[arg(long, default_value = "170us", value_parser = dur0, allow_hyphen_values = true)]
    preempt_time: Duration,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Name of the arbiter (the file is /dev/shm/oversub-arbiter-NAME).
    #[arg(long)]
    name: String,
    /// Keep it this long, then remove it.
    #[arg(long = "for", value_parser = dur, default_value = "3600s", allow_hyphen_values = true)]
    duration: Duration,
    /// How long past its deadline a phase still blocks transfers (a crashed task's worst cost).
    #[arg(long, value_parser = dur, default_value = "1s", allow_hyphen_values = true)]
    stale_after: Duration,
    /// T(Q) for a memcpy copy engine (default: measured now).
    #[arg(long, value_parser = dur, allow_hyphen_values = true)]
    chunk_time: Option<Duration>,
    /// Remove any file of that name first, even one that is refused (another layout version, a wrong mode) or
    /// that a running server holds. A file left by a server that is gone is taken over without this.
    #[arg(long)]
    replace: bool,
    /// Share the arbiter with the members of this group (numeric gid): the file gets that group and mode 0660,
    /// and clients pass --group too. Every member of the group can then steer the transfers.
    #[arg(long)]
    group: Option<u32>,
}

/// Whom a client trusts besides itself. By default an arbiter file must belong to this user and be private to it.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// Also trust a file of this group (numeric gid) with mode up to 0660: for a server started with --group.
    #[arg(long)]
    group: Option<u32>,
    /// Also trust a file owned by this user (numeric uid), mode 0600: e.g. root looking at a user's arbiter.
    #[arg(long)]
    owner: Option<u32>,
}

impl TrustArgs {
    fn options(&self) -> SharedOptions {
        let mut options = SharedOptions::new();
        if let Some(gid) = self.group {
            options = options.allow_group(gid);
        }
        if let Some(uid) = self.owner {
            options = options.allow_owner(uid);
        }
        options
    }
}

#[derive(Debug, Args)]
pub struct PhaseArgs {
    /// Name of the arbiter.
    #[arg(long)]
    name: String,
    /// CPU_MEM, CPU_COM or NO_OPER.
    phase: String,
    /// Its length (e.g. 850us); not for NO_OPER.
    duration: Option<String>,
    #[command(flatten)]
    trust: TrustArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Name of the arbiter.
    #[arg(long)]
    name: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    trust: TrustArgs,
}

pub fn run(cmd: ArbiterCommand) -> Result<(), BoxError> {
    match cmd {
        ArbiterCommand::Bound(a) => bound(a),
        ArbiterCommand::Serve(a) => serve(a),
        ArbiterCommand::Phase(a) => phase(a),
        ArbiterCommand::Status(a) => status(a),
    }
}

fn bound(a: BoundArgs) -> Result<(), BoxError> {
    if a.transfer.is_none() && a.kernel.is_none() {
        return Err("give --transfer and/or --kernel".into());
    }
    let s = |d: Duration| d.as_secs_f64();
    let phases = PremPhases {
        load_s: s(a.load),
        compute_s: s(a.compute),
        compute_worst_s: s(a.compute_worst.unwrap_or(a.compute)),
        unload_s: s(a.unload),
        load_worst_s: s(a.load_worst.unwrap_or(a.load)),
        unload_worst_s: s(a.unload_worst.unwrap_or(a.unload)),
    };
    let kernel = a.kernel.map(|k| KernelQuery {
        kernel_s: s(k),
        preemptible: a.preemptible,
        preempt_s: s(a.preempt_time),
    });
    let report = bound_report(
        phases,
        s(a.epsilon),
        s(a.chunk_time),
        a.transfer.map(s),
        kernel,
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let f = |x: f64| format_seconds(x);
    let mut rows = Vec::new();
    if let Some(t) = &report.transfer {
        rows.push(vec![
            "transfer (Eq. 2, as printed)".to_string(),
            f(t.transfer_s),
            f(t.bound_paper_s),
            format!("{:.2}x", t.bound_paper_s / t.transfer_s.max(1e-12)),
        ]);
        rows.push(vec![
            "transfer (Eq. 2, whole chunks)".to_string(),
            f(t.transfer_s),
            t.bound_chunked_s
                .map_or("starves (no chunk fits a window)".into(), f),
            t.bound_chunked_s.map_or("-".into(), |b| {
                format!(
                    "{:.2}x, {} window(s)",
                    b / t.transfer_s.max(1e-12),
                    t.windows.unwrap_or(0)
                )
            }),
        ]);
    }
    if let Some(k) = &report.kernel {
        let case = match k.case {
            KernelCase::Short => "kernel, case A: shorter than T(C) (Eq. 3)",
            KernelCase::Preemptible => "kernel, case B: preemptible (Eq. 4)",
            KernelCase::NonPreemptible => "kernel, case C: not preemptible",
        };
        rows.push(vec![
            case.to_string(),
            f(k.kernel_s),
            k.bound_s.map_or("waits for NO_OPER (starves)".into(), f),
            k.bound_s
                .map_or("-".into(), |b| format!("{:.2}x", b / k.kernel_s.max(1e-12))),
        ]);
    }
    println!(
        "PREM phases: load {}, compute {} (worst {}), unload {}; epsilon {}, T(Q) {}",
        f(phases.load_s),
        f(phases.compute_s),
        f(phases.compute_worst_s),
        f(phases.unload_s),
        f(report.epsilon_s),
        f(report.chunk_time_s)
    );
    print!(
        "{}",
        text_table(&["work", "alone", "worst-case end", "inflation"], &rows)
    );
    Ok(())
}

fn serve(a: ServeArgs) -> Result<(), BoxError> {
    let path = Arbiter::shared_path(&a.name)?;
    // Before the file exists: from its creation on, SIGTERM and SIGINT wait for `StopSignals::wait` instead of
    // killing the process with the file still in place.
    let stop = StopSignals::block()?;
    if a.replace {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    let mut options = SharedOptions::new().take_over_stale(true);
    if let Some(gid) = a.group {
        options = options.allow_group(gid);
    }
    let config = ArbiterConfig {
        stale_after: a.stale_after,
        chunk_time: a.chunk_time,
        ..ArbiterConfig::default()
    };
    let arbiter = match Arbiter::create_shared_with(&a.name, config, options) {
        Ok(arbiter) => arbiter,
        Err(e @ (ArbiterError::Untrusted { .. } | ArbiterError::Incompatible { .. })) => {
            return Err(format!(
                "{e}\n  if it is a left-over, remove it (rm {}) or run again with --replace",
                path.display()
            )
            .into())
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(pid) = arbiter.taken_over_from() {
        let who = if pid == 0 {
            String::new()
        } else {
            format!(" (pid {pid})")
        };
        println!(
            "took over {}, left by a server that is gone{who}",
            path.display()
        );
    }
    println!(
        "arbiter {:?} at {} (T(Q) {}, stale after {}); serving for {}",
        a.name,
        path.display(),
        format_seconds(arbiter.chunk_time().as_secs_f64()),
        format_seconds(a.stale_after.as_secs_f64()),
        format_seconds(a.duration.as_secs_f64())
    );
    if let Some(signal) = stop.wait(a.duration)? {
        println!("stopped by {signal}");
    }
    let st = arbiter.stats();
    println!(
        "done: {} requests, {} grants, {} waits, {} announcements",
        st.requests, st.grants, st.waits, st.generation
    );
    // Dropping the arbiter removes the file.
    Ok(())
}

/// SIGTERM and SIGINT, blocked in this thread and in every thread it starts later, so that they stay pending
/// until `wait` takes them: the server then returns normally and its file is removed. Taking them synchronously
/// needs no handler, so nothing has to be async-signal-safe. The mask is left in place until the process ends: a
/// second signal during the clean-up waits too.
struct StopSignals {
    set: libc::sigset_t,
}

impl StopSignals {
    fn block() -> std::io::Result<StopSignals> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it before it is used.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both write only into `set`, which we own; the signal numbers are valid.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
        }
        // SAFETY: reads `set` and changes only this thread's signal mask; the old mask is not asked for.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(StopSignals { set })
    }

    /// Waits up to `limit` for one of the signals: its name, or `None` when the time is up.
    fn wait(&self, limit: Duration) -> std::io::Result<Option<&'static str>> {
        let deadline = std::time::Instant::now().checked_add(limit);
        loop {
            // A limit past what Instant can represent is waited out a day at a time.
            let left = deadline.map_or(Duration::from_secs(86_400), |d| {
                d.saturating_duration_since(std::time::Instant::now())
            });
            if left.is_zero() {
                return Ok(None);
            }
            let timeout = libc::timespec {
                tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
                // Below 10^9, so it fits a c_long of any width.
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: `set` and `timeout` are valid for the call; no siginfo is asked for (null).
            let signal = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &timeout) };
            match signal {
                libc::SIGTERM => return Ok(Some("SIGTERM")),
                libc::SIGINT => return Ok(Some("SIGINT")),
                _ => {
                    let e = std::io::Error::last_os_error();
                    // EAGAIN: the timeout passed (the loop checks the deadline); EINTR: another signal's handler ran.
                    if !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) {
                        return Err(e);
                    }
                }
            }
        }
    }
}

fn phase(a: PhaseArgs) -> Result<(), BoxError> {
    let kind = PhaseKind::parse(&a.phase)?;
    let phase = match (kind, &a.duration) {
        (PhaseKind::NoOper, _) => Phase::NoOper,
        (_, None) => return Err(format!("{} needs a duration (e.g. 850us)", kind.name()).into()),
        (PhaseKind::Mem, Some(d)) => Phase::Mem(parse_duration(d)?),
        (PhaseKind::Com, Some(d)) => Phase::Com(parse_duration(d)?),
    };
    let arbiter = Arbiter::open_shared_with(&a.name, a.trust.options())?;
    let task = arbiter.register_task()?;
    task.announce(phase)?;
    println!("slot {}: {phase}", task.slot());
    // The phase outlives this process; its deadline (plus the stale time) frees the slot.
    task.detach();
    Ok(())
}

fn status(a: StatusArgs) -> Result<(), BoxError> {
    let arbiter = Arbiter::open_shared_with(&a.name, a.trust.options())?;
    let tasks = arbiter.tasks();
    let stats = arbiter.stats();
    if a.json {
        #[derive(Serialize)]
        struct Status<'a> {
            path: Option<PathBuf>,
            server_pid: u32,
            chunk_time_s: f64,
            stale_after_s: f64,
            tasks: &'a [oversub_arbiter::TaskStatus],
            stats: oversub_arbiter::ArbiterStats,
        }
        let s = Status {
            path: arbiter.path().map(|p| p.to_path_buf()),
            server_pid: arbiter.server_pid(),
            chunk_time_s: arbiter.chunk_time().as_secs_f64(),
            stale_after_s: arbiter.stale_after().as_secs_f64(),
            tasks: &tasks,
            stats,
        };
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    println!(
        "arbiter {:?} (server pid {}): T(Q) {}, stale after {}; {} requests ({} grants, {} waits), {} announcements",
        a.name,
        arbiter.server_pid(),
        format_seconds(arbiter.chunk_time().as_secs_f64()),
        format_seconds(arbiter.stale_after().as_secs_f64()),
        stats.requests,
        stats.grants,
        stats.waits,
        stats.generation
    );
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                t.slot.to_string(),
                t.pid.to_string(),
                t.phase.name().to_string(),
                t.remaining_ns
                    .map_or("-".into(), |r| format!("{:.3} ms", r as f64 / 1e6)),
                if t.stale { "stale" } else { "" }.to_string(),
                t.announcements.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &["slot", "pid", "phase", "remaining", "", "announcements"],
            &rows
        )
    );
    Ok(())
}
