//! Which tasks the case study runs: `--task NAME:DEMAND:COMMAND` arguments, a configuration file, or the built-in
//! file I/O case studies.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::WorkerCommand;
use crate::LabError;

/// How a task is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// `sh -c COMMAND`.
    Shell(String),
    /// A program and its arguments, without a shell (the built-in workers).
    Exec {
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<OsString>,
    },
}

impl Program {
    /// The command line, for reports.
    pub fn display(&self) -> String {
        match self {
            Program::Shell(c) => c.clone(),
            Program::Exec { program, args } => std::iter::once(program.as_os_str())
                .chain(args.iter().map(OsString::as_os_str))
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// One task to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSpec {
    /// Its name: letters, digits, `-`, `_`, `.` (it names the task's cgroup).
    pub name: String,
    /// MEM(i): the memory it needs to run without reclaim, in bytes.
    pub demand_bytes: u64,
    /// n_i, for the contention degree.
    pub subtasks: u32,
    /// How it is started.
    pub program: Program,
    /// A file the task creates and that is removed after each run (the built-in workers' data file).
    pub data_file: Option<PathBuf>,
}

/// A `--task` argument, before subtask counts are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskArg {
    pub name: String,
    pub demand_bytes: u64,
    pub command: String,
}

/// Checks a task name (it becomes part of a cgroup's and a file's name).
pub fn check_name(name: &str) -> Result<(), String> {
    if oversub_base::name::is_safe_component(name, 64) {
        Ok(())
    } else {
        Err(format!(
            "task name {name:?}: use 1 to 64 letters, digits, '-', '_' or '.'"
        ))
    }
}

/// Parses a demand: a size with a unit, more than zero bytes.
pub fn parse_demand(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "demand {text:?} is negative: a demand is the memory a task needs, e.g. 1GiB"
        ));
    }
    let bytes = oversub_base::parse_size(text).map_err(|e| format!("demand {text:?}: {e}"))?;
    if bytes == 0 {
        return Err(format!(
            "demand {text:?} is zero: a task needs some memory, e.g. 1GiB"
        ));
    }
    Ok(bytes)
}

/// Parses `--task NAME:DEMAND:COMMAND` (clap value parser). The command is everything after the second colon.
pub fn parse_task_arg(s: &str) -> Result<TaskArg, String> {
    let usage = "expected NAME:DEMAND:COMMAND, e.g. --task 'sort:1GiB:sort -S 1G big.txt'";
    let mut parts = s.splitn(3, ':');
    let name = parts.next().unwrap_or_default().trim();
    let (Some(demand), Some(command)) = (parts.next(), parts.next()) else {
        return Err(if s.contains(':') {
            format!("{s:?} has no command: {usage}")
        } else {
            format!("{s:?} has no demand and no command: {usage}")
        });
    };
    check_name(name)?;
    if demand.trim().is_empty() {
        return Err(format!("{s:?} has no demand: {usage}"));
    }
    let demand_bytes = parse_demand(demand)?;
    if command.trim().is_empty() {
        return Err(format!("{s:?} has an empty command: {usage}"));
    }
    Ok(TaskArg {
        name: name.to_owned(),
        demand_bytes,
        command: command.to_owned(),
    })
}

/// Parses `--subtasks NAME=N`.
pub fn parse_subtasks_arg(s: &str) -> Result<(String, u32), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=N, e.g. --subtasks T1=4"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: the subtask count must be a whole number"))?;
    if n == 0 {
        return Err(format!("{s:?}: a task has at least one subtask"));
    }
    Ok((name.trim().to_owned(), n))
}

/// A size in a configuration file: `"1GiB"` or a number of bytes.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    fn bytes(&self) -> Result<u64, String> {
        match self {
            SizeValue::Bytes(0) => Err("a demand of 0 bytes: a task needs some memory".into()),
            SizeValue::Bytes(b) => Ok(*b),
            SizeValue::Text(t) => parse_demand(t),
        }
    }
}

/// The `--config` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    /// The emulated memory, as `--capacity` (which overrides it).
    capacity: Option<SizeValue>,
    /// The tasks, highest priority first for `--priorities given`.
    #[serde(default)]
    task: Vec<ConfigTask>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigTask {
    name: String,
    demand: SizeValue,
    command: String,
    subtasks: Option<u32>,
}

/// Tasks and capacity from a configuration file.
pub fn load_config(path: &Path) -> Result<(Vec<TaskSpec>, Option<u64>), LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the task file {}: {e}", path.display()))?;
    let bad = |what: String| -> LabError { format!("{}: {what}", path.display()).into() };
    let file: ConfigFile = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if file.task.is_empty() {
        return Err(bad(
            "no tasks: add [[task]] tables with name, demand and command".into(),
        ));
    }
    let capacity = file
        .capacity
        .as_ref()
        .map(|c| c.bytes().map_err(|e| bad(format!("capacity: {e}"))))
        .transpose()?;
    let mut tasks = Vec::with_capacity(file.task.len());
    for (i, t) in file.task.into_iter().enumerate() {
        let at = |e: String| bad(format!("task {} ({:?}): {e}", i + 1, t.name));
        check_name(&t.name).map_err(at)?;
        let demand_bytes = t.demand.bytes().map_err(at)?;
        if t.command.trim().is_empty() {
            return Err(at("the command is empty".into()));
        }
        let subtasks = t.subtasks.unwrap_or(1);
        if subtasks == 0 {
            return Err(at("a task has at least one subtask".into()));
        }
        tasks.push(TaskSpec {
            name: t.name.clone(),
            demand_bytes,
            subtasks,
            program: Program::Shell(t.command.clone()),
            data_file: None,
        });
    }
    Ok((tasks, capacity))
}

/// Tasks from `--task` arguments.
pub fn from_args(args: &[TaskArg]) -> Vec<TaskSpec> {
    args.iter()
        .map(|a| TaskSpec {
            name: a.name.clone(),
            demand_bytes: a.demand_bytes,
            subtasks: 1,
            program: Program::Shell(a.command.clone()),
            data_file: None,
        })
        .collect()
}

/// The paper's real-platform case (Sec. V-C): three tasks that each write a file of `size` bytes and read it back
/// `passes` times through the page cache, each with a demand of `size`.
pub fn builtin_file_io(
    worker: &WorkerCommand,
    dir: &Path,
    size: u64,
    passes: u32,
    count: usize,
) -> Vec<TaskSpec> {
    (1..=count)
        .map(|i| file_io_task(worker, dir, &format!("T{i}"), size, passes, None))
        .collect()
}

/// Three tasks that differ in size and in compute per byte, so that Alg. 1 can tell them apart: `stream` (a file of
/// `size`, read 4 times, no compute: pure I/O through the page cache), `compute` (`size`/2, read 3 times, 3 hash
/// rounds per byte) and `bulk` (1.5 × `size`, read twice, one hash round).
pub fn builtin_mixed(worker: &WorkerCommand, dir: &Path, size: u64) -> Vec<TaskSpec> {
    let half = (size / 2).max(1);
    [
        ("stream", size, 4u32, 0u32),
        ("compute", half, 3, 3),
        ("bulk", size + half, 2, 1),
    ]
    .into_iter()
    .map(|(name, bytes, passes, rounds)| {
        file_io_task(worker, dir, name, bytes, passes, Some(rounds))
    })
    .collect()
}

/// The built-in `file-io` worker as task `name`: a file of `size` in `dir`, read back `passes` times, with
/// `hash_rounds` of compute per byte when given.
fn file_io_task(
    worker: &WorkerCommand,
    dir: &Path,
    name: &str,
    size: u64,
    passes: u32,
    hash_rounds: Option<u32>,
) -> TaskSpec {
    let file = dir.join(format!("{name}.dat"));
    let mut args: Vec<OsString> = worker.args.clone();
    args.extend([
        "file-io".into(),
        "--file".into(),
        file.clone().into_os_string(),
        "--size".into(),
        size.to_string().into(),
        "--passes".into(),
        passes.to_string().into(),
    ]);
    if let Some(rounds) = hash_rounds {
        args.extend(["--hash-rounds".into(), rounds.to_string().into()]);
    }
    TaskSpec {
        name: name.to_string(),
        demand_bytes: size,
        subtasks: 1,
        program: Program::Exec {
            program: worker.program.clone(),
            args,
        },
        data_file: Some(file),
    }
}

/// Applies `--subtasks NAME=N` and checks names are unique.
pub fn finish(tasks: &mut [TaskSpec], subtasks: &[(String, u32)]) -> Result<(), LabError> {
    let mut seen = HashMap::new();
    for (i, t) in tasks.iter().enumerate() {
        if let Some(j) = seen.insert(t.name.clone(), i) {
            return Err(format!(
                "tasks {} and {} are both named {:?}: names must be unique",
                j + 1,
                i + 1,
                t.name
            )
            .into());
        }
    }
    for (name, n) in subtasks {
        let Some(&i) = seen.get(name) else {
            return Err(format!("--subtasks {name}={n}: there is no task named {name:?}").into());
        };
        tasks[i].subtasks = *n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn task_args() {
        let t = parse_task_arg("sort:1GiB:sort -S 1G a:b.txt").unwrap();
        assert_eq!(t.name, "sort");
        assert_eq!(t.demand_bytes, 1 << 30);
        assert_eq!(t.command, "sort -S 1G a:b.txt");
        assert!(parse_task_arg("a").unwrap_err().contains("no demand"));
        assert!(parse_task_arg("a:1GiB").unwrap_err().contains("no command"));
        assert!(parse_task_arg("a::true").unwrap_err().contains("no demand"));
        assert!(parse_task_arg("a:-1GiB:true")
            .unwrap_err()
            .contains("negative"));
        assert!(parse_task_arg("a:0:true").unwrap_err().contains("zero"));
        assert!(parse_task_arg("a:lots:true")
            .unwrap_err()
            .contains("demand"));
        assert!(parse_task_arg("a b:1GiB:true")
            .unwrap_err()
            .contains("task name"));
        assert!(parse_task_arg("a:1GiB: ")
            .unwrap_err()
            .contains("empty command"));
        assert_eq!(parse_subtasks_arg("T1=4").unwrap(), ("T1".into(), 4));
        assert!(parse_subtasks_arg("T1=0").is_err());
        assert!(parse_subtasks_arg("T1").is_err());
    }

    #[test]
    fn config_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            "capacity = \"2GiB\"\n[[task]]\nname = \"a\"\ndemand = \"1GiB\"\ncommand = \"true\"\nsubtasks = 3\n\
             [[task]]\nname = \"b\"\ndemand = 1048576\ncommand = \"true\"\n",
        )
        .unwrap();
        let (tasks, capacity) = load_config(&path).unwrap();
        assert_eq!(capacity, Some(2 << 30));
        assert_eq!(tasks.len(), 2);
        assert_eq!(tasks[0].subtasks, 3);
        assert_eq!(tasks[1].demand_bytes, 1 << 20);
        assert_eq!(tasks[1].subtasks, 1);

        for (text, expected) in [
            (
                "[[task]]\nname = \"a\"\ncommand = \"true\"\n",
                "missing field `demand`",
            ),
            (
                "[[task]]\nname = \"a\"\ndemand = \"0\"\ncommand = \"true\"\n",
                "zero",
            ),
            (
                "[[task]]\nname = \"a\"\ndemand = \"1G\"\ncommand = \"true\"\nsize = 1\n",
                "unknown field",
            ),
            ("capacity = \"1G\"\n", "no tasks"),
            ("[[task]\n", "TOML parse error"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = load_config(&path).unwrap_err().to_string();
            assert!(e.contains(expected), "{text}: {e}");
            assert!(e.contains("t.toml"), "{e}");
        }
        let e = load_config(&dir.path().join("missing.toml")).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
    }

    #[test]
    fn names_and_subtasks() {
        let mut t = from_args(&[
            parse_task_arg("a:1MiB:true").unwrap(),
            parse_task_arg("b:1MiB:true").unwrap(),
        ]);
        finish(&mut t, &[("b".into(), 5)]).unwrap();
        assert_eq!(t[1].subtasks, 5);
        assert!(finish(&mut t, &[("c".into(), 5)]).is_err());
        let mut dup = from_args(&[
            parse_task_arg("a:1MiB:true").unwrap(),
            parse_task_arg("a:1MiB:true").unwrap(),
        ]);
        assert!(finish(&mut dup, &[])
            .unwrap_err()
            .to_string()
            .contains("unique"));
    }
}
