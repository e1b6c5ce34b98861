//! The PREM task in a process of its own, as on the paper's platform, where the CPU task and the GPU driver do not
//! share an address space: the benchmark re-runs its own binary as `oversub bench prem-task` (hidden), which
//! registers with the shared arbiter in /dev/shm and runs iterations on request. Requests and replies are JSON
//! lines on the child's stdin and stdout; its stderr is the benchmark's.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use clap::Args;
use oversub_arbiter::Arbiter;
use serde::{Deserialize, Serialize};

use super::task::{Announce, IterationRecord, PremTask};
use super::{enter_task_cpu, rt_throttle_share};
use crate::bench::BoxError;

/// Replies carry a progress line this often during a run.
const PROGRESS_EVERY: usize = 25;

/// `oversub bench prem-task`: the PREM side of `bench interference --part prem`, spoken to through stdin/stdout.
#[derive(Debug, Args)]
pub struct PremTaskArgs {
    /// The CPU to run on.
    #[arg(long)]
    cpu: usize,
    /// Last-level cache size, bytes.
    #[arg(long)]
    llc: u64,
    /// Pixel data walked per pass, bytes.
    #[arg(long)]
    data: u64,
    /// The shared arbiter's file (`/dev/shm/oversub-arbiter-NAME`).
    #[arg(long)]
    arbiter: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    SetComputeReps {
        reps: usize,
    },
    Run {
        iterations: usize,
        announce: Option<Announce>,
        lead_ns: u64,
    },
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Ready(ChildInfo),
    Progress { done: usize },
    Records(Vec<IterationRecord>),
    Done,
    Error(String),
}

/// What the child reports when it is ready.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildInfo {
    pub pid: u32,
    pub realtime: bool,
    pub rest_fraction: f64,
    pub working_set_bytes: u64,
    pub data_bytes: u64,
    pub iterations_per_pass: usize,
}

/// The child's main.
pub fn serve(args: PremTaskArgs) -> Result<(), BoxError> {
    // Everything of this process (there is one thread) runs on the task CPU.
    let realtime = enter_task_cpu(args.cpu, true);
    let arbiter = Arbiter::open_at(&args.arbiter)?;
    let mut prem = PremTask::new(args.llc, args.data, args.cpu);
    if realtime {
        if let Some(share) = rt_throttle_share() {
            // Twice the throttled share: the budget is counted per period, and iterations do not align with it.
            prem.rest_fraction = 2.0 * share;
        }
    }
    send(&Reply::Ready(ChildInfo {
        pid: std::process::id(),
        realtime,
        rest_fraction: prem.rest_fraction,
        working_set_bytes: prem.working_set(),
        data_bytes: prem.data_bytes(),
        iterations_per_pass: prem.iterations_per_pass(),
    }))?;
    let task = arbiter.register_task()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let reply = match serde_json::from_str::<Request>(&line)? {
            Request::SetComputeReps { reps } => {
                prem.compute_reps = reps.max(1);
                Reply::Done
            }
            Request::Run {
                iterations,
                announce,
                lead_ns,
            } => {
                let mut done = 0;
                let mut failed = None;
                let r = prem.run(
                    iterations,
                    announce.map(|a| (&task, a)),
                    Duration::from_nanos(lead_ns),
                    || {
                        done += 1;
                        // Between iterations, in the rest that follows the unload: the parent's reader wakes on
                        // its own CPU.
                        if done % PROGRESS_EVERY == 0 && failed.is_none() {
                            failed = send(&Reply::Progress { done }).err();
                        }
                    },
                );
                if let Some(e) = failed {
                    return Err(e);
                }
                match r {
                    Ok(records) => Reply::Records(records),
                    Err(e) => Reply::Error(e.to_string()),
                }
            }
        };
        send(&reply)?;
    }
    drop(task);
    Ok(())
}

fn send(reply: &Reply) -> Result<(), BoxError> {
    let mut line = serde_json::to_vec(reply)?;
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line)?;
    out.flush()?;
    Ok(())
}

/// The parent's handle on a PREM child. Dropping it ends the child.
pub struct PremProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub info: ChildInfo,
}

impl PremProcess {
    /// Starts this binary as `bench prem-task` on `cpu`, against the arbiter in `arbiter_path`.
    pub fn spawn(
        cpu: usize,
        llc: u64,
        data: u64,
        arbiter_path: &std::path::Path,
    ) -> Result<PremProcess, BoxError> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args([
                "bench",
                "prem-task",
                "--cpu",
                &cpu.to_string(),
                "--llc",
                &llc.to_string(),
            ])
            .args(["--data", &data.to_string(), "--arbiter"])
            .arg(arbiter_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("the PREM child has no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("the PREM child has no stdout")?);
        let mut p = PremProcess {
            child,
            stdin: Some(stdin),
            stdout,
            info: ChildInfo {
                pid: 0,
                realtime: false,
                rest_fraction: 0.0,
                working_set_bytes: 0,
                data_bytes: 0,
                iterations_per_pass: 1,
            },
        };
        match p.receive()? {
            Reply::Ready(info) => p.info = info,
            other => {
                return Err(format!("the PREM child answered {other:?} instead of Ready").into())
            }
        }
        Ok(p)
    }

    fn receive(&mut self) -> Result<Reply, BoxError> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            let status = self.child.wait()?;
            return Err(format!("the PREM child exited ({status}); see its messages above").into());
        }
        Ok(serde_json::from_str(&line)?)
    }

    fn request(&mut self, r: &Request) -> Result<Reply, BoxError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or("the PREM child's stdin is closed")?;
        serde_json::to_writer(&mut *stdin, r)?;
        stdin.write_all(b"\n")?;
        stdin.flush()?;
        self.receive()
    }

    pub fn set_compute_reps(&mut self, reps: usize) -> Result<(), BoxError> {
        match self.request(&Request::SetComputeReps { reps })? {
            Reply::Error(e) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Runs `iterations` iterations in the child (announced when `announce` is given, after a lead-in of
    /// `lead`), calling `progress` with the number done as the child reports it.
    pub fn run(
        &mut self,
        iterations: usize,
        announce: Option<Announce>,
        lead: Duration,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<IterationRecord>, BoxError> {
        let mut reply = self.request(&Request::Run {
            iterations,
            announce,
            lead_ns: u64::try_from(lead.as_nanos()).unwrap_or(u64::MAX),
        })?;
        loop {
            match reply {
                Reply::Progress { done } => progress(done),
                Reply::Records(r) => return Ok(r),
                Reply::Error(e) => return Err(format!("the PREM child failed: {e}").into()),
                other => {
                    return Err(
                        format!("the PREM child answered {other:?} instead of its records").into(),
                    )
                }
            }
            reply = self.receive()?;
        }
    }
}

impl Drop for PremProcess {
    fn drop(&mut self) {
        // Closing stdin ends the child's loop.
        drop(self.stdin.take());
        if self.child.wait().is_err() {
            let _ = self.child.kill();
        }
    }
}
