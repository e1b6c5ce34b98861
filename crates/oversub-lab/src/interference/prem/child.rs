//! The PREM task in a process of its own, as on the paper's platform, where the CPU task and the GPU driver do not
//! share an address space: the benchmark starts a command given by its front end ([`PremTaskCommand`]; the
//! `oversub` binary re-runs itself as `oversub bench prem-task`, hidden), which calls [`serve`]: it registers with
//! the shared arbiter in /dev/shm and runs iterations on request. Requests and replies are JSON lines on the
//! child's stdin and stdout; its stderr is the benchmark's.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use oversub_arbiter::Arbiter;
use serde::{Deserialize, Serialize};

use super::task::{Announce, IterationRecord, PremTask};
use super::{enter_task_cpu, rt_throttle_share};
use crate::LabError;

/// Replies carry a progress line this often during a run.
const PROGRESS_EVERY: usize = 25;

/// The PREM side of the interference benchmark's PREM part, spoken to through stdin/stdout; the benchmark passes
/// these as the flags `--cpu`, `--llc`, `--data` and `--arbiter` after the [`PremTaskCommand`]'s own arguments.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct PremTaskOptions {
    /// The CPU to run on.
    #[cfg_attr(feature = "clap", arg(long))]
    pub cpu: usize,
    /// Last-level cache size, bytes.
    #[cfg_attr(feature = "clap", arg(long))]
    pub llc: u64,
    /// Pixel data walked per pass, bytes.
    #[cfg_attr(feature = "clap", arg(long))]
    pub data: u64,
    /// The shared arbiter's file (`/dev/shm/oversub-arbiter-NAME`).
    #[cfg_attr(feature = "clap", arg(long))]
    pub arbiter: PathBuf,
}

/// The command that runs the PREM task in a process of its own: a program and its first arguments, which end in
/// a call of [`serve`] with the [`PremTaskOptions`] parsed from the flags appended to them.
#[derive(Debug, Clone, PartialEq)]
pub struct PremTaskCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
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

/// The child's main: requests are read from `input` and replies written to `output` (the process's stdin and
/// stdout), until `input` ends.
pub fn serve(
    args: &PremTaskOptions,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<(), LabError> {
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
    send(
        &mut output,
        &Reply::Ready(ChildInfo {
            pid: std::process::id(),
            realtime,
            rest_fraction: prem.rest_fraction,
            working_set_bytes: prem.working_set(),
            data_bytes: prem.data_bytes(),
            iterations_per_pass: prem.iterations_per_pass(),
        }),
    )?;
    let task = arbiter.register_task()?;
    for line in input.lines() {
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
                            failed = send(&mut output, &Reply::Progress { done }).err();
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
        send(&mut output, &reply)?;
    }
    drop(task);
    Ok(())
}

fn send(out: &mut impl Write, reply: &Reply) -> Result<(), LabError> {
    let mut line = serde_json::to_vec(reply)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()?;
    Ok(())
}

/// The parent's handle on a PREM child. Dropping it ends the child.
#[derive(Debug)]
pub struct PremProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub info: ChildInfo,
}

impl PremProcess {
    /// Starts `command` on `cpu`, against the arbiter in `arbiter_path`.
    pub fn spawn(
        command: &PremTaskCommand,
        cpu: usize,
        llc: u64,
        data: u64,
        arbiter_path: &std::path::Path,
    ) -> Result<PremProcess, LabError> {
        let mut child = Command::new(&command.program)
            .args(&command.args)
            .args(["--cpu", &cpu.to_string(), "--llc", &llc.to_string()])
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

    fn receive(&mut self) -> Result<Reply, LabError> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            let status = self.child.wait()?;
            return Err(format!("the PREM child exited ({status}); see its messages above").into());
        }
        Ok(serde_json::from_str(&line)?)
    }

    fn request(&mut self, r: &Request) -> Result<Reply, LabError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or("the PREM child's stdin is closed")?;
        serde_json::to_writer(&mut *stdin, r)?;
        stdin.write_all(b"\n")?;
        stdin.flush()?;
        self.receive()
    }

    pub fn set_compute_reps(&mut self, reps: usize) -> Result<(), LabError> {
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
    ) -> Result<Vec<IterationRecord>, LabError> {
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
