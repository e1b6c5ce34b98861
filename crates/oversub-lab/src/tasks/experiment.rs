//! One run of a set of tasks at once, each in its own child group of the run's group.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};

use super::cgroup::{CgroupError, Exit, Group};

use super::spec::{Program, TaskSpec};
use crate::LabError;

/// What one task did in one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskRun {
    /// Response time, spawn to exit, in seconds.
    pub elapsed_s: f64,
    /// The most memory its group held (`None` where the kernel does not say).
    pub peak_bytes: Option<u64>,
    /// Pages of files its group evicted and then read back (`workingset_refault_file`): page-cache thrashing.
    pub refaults: Option<u64>,
}

/// Runs the tasks `which` at once, each in a child group `PHASE<REP>-NAME` of `parent` limited to `limits[i]`
/// (`None`: only the parent's limit), and returns what each did, in the order of `which`. Any task that fails is
/// an error that quotes the end of its standard error.
pub fn run_together(
    parent: &Group,
    tasks: &[TaskSpec],
    which: &[usize],
    limits: &[Option<u64>],
    phase: &str,
    rep: usize,
    work_dir: &Path,
) -> Result<Vec<TaskRun>, LabError> {
    let mut started = Vec::with_capacity(which.len());
    for &i in which {
        let task = &tasks[i];
        if let Some(f) = &task.data_file {
            let _ = std::fs::remove_file(f);
        }
        let group = parent.child(&format!("{phase}{rep}-{}", task.name))?;
        if let Some(limit) = limits[i] {
            group.set_limit(Some(limit))?;
        }
        let log_path = work_dir.join(format!("{phase}{rep}-{}.stderr", task.name));
        let log = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let mut cmd = match &task.program {
            Program::Shell(c) => {
                let mut cmd = Command::new("sh");
                cmd.arg("-c").arg(c);
                cmd
            }
            Program::Exec { program, args } => {
                let mut cmd = Command::new(program);
                cmd.args(args);
                cmd
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.try_clone()?)
            .env("OVERSUB_TASK", &task.name)
            .env("OVERSUB_TASKS_DIR", work_dir)
            .env("OVERSUB_NO_PROGRESS", "1");
        let spawned = group.spawn(cmd)?;
        started.push((i, group, spawned, log));
    }

    // Each task's exit is seen by a thread of its own, so that no task's response time waits for another's.
    let mut waiting = Vec::with_capacity(started.len());
    let mut rest = Vec::with_capacity(started.len());
    for (i, group, spawned, log) in started {
        waiting.push(spawned);
        rest.push((i, group, log));
    }
    let exits: Vec<Result<Exit, CgroupError>> = std::thread::scope(|s| {
        let handles: Vec<_> = waiting
            .into_iter()
            .map(|spawned| s.spawn(move || spawned.wait()))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(CgroupError::InvalidInput(
                        "a waiting thread panicked".into(),
                    ))
                })
            })
            .collect()
    });

    let mut runs = Vec::with_capacity(rest.len());
    let mut failure: Option<LabError> = None;
    for ((i, group, mut log), exit) in rest.into_iter().zip(exits) {
        let task = &tasks[i];
        let exit = exit?;
        if !exit.status.success() && failure.is_none() {
            let oom = group.oom_kills().ok().flatten().unwrap_or(0);
            let limit_note = match limits[i] {
                Some(l) => format!(" under a limit of {}", oversub_base::format_bytes(l)),
                None => String::new(),
            };
            let oom_note = match (oom > 0, limits[i]) {
                (false, _) => String::new(),
                (true, Some(_)) => format!(
                    "; the out-of-memory killer struck {oom} time(s) in its group: its limit is too small for it \
                     (raise --min-limit or its demand)"
                ),
                // No limit of its own: the shared emulated memory was what ran out.
                (true, None) => format!(
                    "; the out-of-memory killer struck {oom} time(s) in its group: the tasks together do not \
                     fit the emulated memory (raise --capacity)"
                ),
            };
            failure = Some(
                format!(
                    "task {} failed in the {phase} run (repetition {}){limit_note}: {}{oom_note}{}",
                    task.name,
                    rep + 1,
                    exit.status,
                    tail(&mut log)
                )
                .into(),
            );
        }
        runs.push(TaskRun {
            elapsed_s: exit.elapsed.as_secs_f64(),
            peak_bytes: group.peak().ok().flatten(),
            refaults: group.stat("workingset_refault_file").ok().flatten(),
        });
        if let Some(f) = &task.data_file {
            let _ = std::fs::remove_file(f);
        }
        // Nothing the task brought into memory stays charged to the run's group for the next run.
        if let Err(e) = group.reclaim() {
            tracing::debug!("reclaim {}: {e}", group.path().display());
        }
        group.remove()?;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(runs),
    }
}

/// The last lines of a task's standard error, for an error message.
fn tail(log: &mut File) -> String {
    let mut text = String::new();
    let len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = log.seek(SeekFrom::Start(len.saturating_sub(2000)));
    let _ = log.read_to_string(&mut text);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(5);
        format!(
            "; its stderr ends with:\n    {}",
            lines[start..].join("\n    ")
        )
    }
}
