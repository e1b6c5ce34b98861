//! The paper's workloads (Figs. 4-6) and user scenarios read from TOML files.
//!
//! Synthetic tasks (Figs. 4 and 5) have 6 GB working sets and subtask compute times drawn "from 1 tick to 6 times
//! the thrashing time", θ_i = MEM(i) / SSD read bandwidth: uniform in [1 tick, θ_i] for low compute demand and in
//! [θ_i, 6 θ_i] for high. The Polybench tasks (Fig. 6) are emulated by their arrays and kernels at the standard
//! dataset size, N = 4096 floats.

use std::path::Path;

use serde::Deserialize;

use super::model::{seconds_to_ns, PaperFigure, Scenario, System, Task, GB, MB, MIB};
use super::SwapSimError;
use crate::rng::Rng;

/// The built-in scenarios, in the paper's order.
pub const BUILTIN: [&str; 5] = ["fig4a", "fig4b", "fig5a", "fig5b", "fig6"];

/// How heavy the synthetic tasks' compute is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    /// Uniform in [1 tick, θ_i].
    Low,
    /// Uniform in [θ_i, 6 θ_i].
    High,
}

/// The built-in scenarios to run from the names given (lower-cased here): all of [`BUILTIN`] for the suite, when
/// nothing is named (no names and no scenario files) or when a name is `all`; then the others named, each once.
pub fn builtin_names(named: &[String], suite: bool, have_files: bool) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let all = suite
        || (named.is_empty() && !have_files)
        || named.iter().any(|s| s.trim().eq_ignore_ascii_case("all"));
    if all {
        names.extend(BUILTIN.iter().map(|s| s.to_string()));
    }
    for s in named {
        let s = s.trim().to_ascii_lowercase();
        if s != "all" && !names.contains(&s) {
            names.push(s);
        }
    }
    names
}

/// A built-in scenario by name (`fig4a`, `fig4b`, `fig5a`, `fig5b`, `fig6`), its random compute times drawn from
/// `seed`.
pub fn builtin(name: &str, seed: u64) -> Result<Scenario, SwapSimError> {
    let paper = |figure, vs_baseline_pct, vs_mat_pct| {
        Some(PaperFigure {
            figure,
            vs_baseline_pct,
            vs_mat_pct,
        })
    };
    let name_lc = name.trim().to_ascii_lowercase();
    let mut s = match name_lc.as_str() {
        "fig4a" => synthetic(&name_lc, &[5; 4], Compute::Low, seed),
        "fig4b" => synthetic(&name_lc, &[5; 4], Compute::High, seed),
        "fig5a" => synthetic(&name_lc, &[5, 7, 9, 11], Compute::Low, seed),
        "fig5b" => synthetic(&name_lc, &[5, 7, 9, 11], Compute::High, seed),
        "fig6" => polybench(),
        _ => {
            return Err(SwapSimError::UnknownScenario {
                name: name.to_string(),
                known: format!("{}, all", BUILTIN.join(", ")),
            })
        }
    };
    s.paper = match name_lc.as_str() {
        "fig4a" => paper("Fig. 4(a)", 81.0, 76.0),
        "fig4b" => paper("Fig. 4(b)", 79.0, 73.0),
        "fig5a" => paper("Fig. 5(a)", 80.0, 73.0),
        "fig5b" => paper("Fig. 5(b)", 84.0, 78.0),
        _ => paper("Fig. 6", 70.0, 60.0),
    };
    Ok(s)
}

/// A stable 64-bit hash of a name (FNV-1a), so that each scenario draws its own compute times from one seed.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Uniform in `[lo, hi]` nanoseconds.
fn uniform(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        return lo;
    }
    lo + rng.below(hi - lo + 1)
}

/// Compute times for `subtasks` subtasks of a task of `bytes` on `system`, by the paper's rule.
pub fn paper_compute(
    system: &System,
    bytes: u64,
    subtasks: usize,
    compute: Compute,
    rng: &mut Rng,
) -> Vec<u64> {
    let theta = system.thrashing_ns(bytes);
    let (lo, hi) = match compute {
        Compute::Low => (system.tick_ns, theta.max(system.tick_ns)),
        Compute::High => (theta, theta.saturating_mul(6)),
    };
    (0..subtasks).map(|_| uniform(rng, lo, hi)).collect()
}

/// Four 6 GB tasks in 18 GB with the given subtask counts.
fn synthetic(name: &str, subtasks: &[usize], compute: Compute, seed: u64) -> Scenario {
    let system = System::paper(18 * GB, subtasks.len() as u32);
    let mut rng = Rng::new(seed ^ name_hash(name));
    let tasks = subtasks
        .iter()
        .enumerate()
        .map(|(i, &n)| Task {
            name: format!("T{}", i + 1),
            memory_bytes: 6 * GB,
            compute_ns: paper_compute(&system, 6 * GB, n, compute, &mut rng),
            weight: None,
        })
        .collect();
    let counts: Vec<String> = subtasks.iter().map(ToString::to_string).collect();
    Scenario {
        name: name.to_string(),
        description: format!(
            "4 synthetic tasks of 6 GB ({} subtasks), 18 GB of memory, {} compute demand",
            counts.join("/"),
            match compute {
                Compute::Low => "low",
                Compute::High => "high",
            }
        ),
        system,
        tasks,
        paper: None,
    }
}

/// One Polybench/GPU kernel's DRAM traffic: whole matrices and vectors it reads, and vectors it writes.
#[derive(Debug, Clone, Copy)]
struct Kernel {
    matrices_read: u64,
    vectors_read: u64,
    vectors_written: u64,
}

/// Polybench/GPU ATAX, BICG, GESUMMV and MVT (the paper's ref. [29], named in its Sec. V) at the suite's standard
/// size, N = 4096 single-precision floats. The paper gives only the total, "320 MB" of demand in "240 MB" of memory
/// (Sec. V-A), and says the tasks are emulated "by only considering the memory request size and computation
/// demand" (Sec. V-B); it has no per-task table, so each task's arrays and each kernel's accesses are taken from the
/// Polybench/GPU 1.0 sources: a working set of its N×N matrices and its N-vectors, and per kernel the bytes it
/// streams (every matrix it reads once, each vector it reads, each vector it writes; a read-modify-write vector
/// counts twice). Kernels are memory-bound matrix-vector products, so a kernel's compute time is its traffic at
/// memory bandwidth. ATAX, BICG and MVT share one matrix and two kernels but differ in their vectors, so they are
/// no longer identical and Alg. 1's ranking does not rest on a tie.
fn polybench() -> Scenario {
    const N: u64 = 4096;
    const FLOAT_BYTES: u64 = 4;
    const MATRIX_BYTES: u64 = N * N * FLOAT_BYTES; // 64 MiB
    const VECTOR_BYTES: u64 = N * FLOAT_BYTES; // 16 KiB
    let system = System::paper(240 * MIB, 4);
    let stream = |bytes: u64| super::model::transfer_ns(bytes, system.memory_bytes_per_s);
    let k = |matrices_read, vectors_read, vectors_written| Kernel {
        matrices_read,
        vectors_read,
        vectors_written,
    };
    let app = |name: &str, matrices: u64, vectors: u64, kernels: &[Kernel]| Task {
        name: name.to_string(),
        memory_bytes: matrices * MATRIX_BYTES + vectors * VECTOR_BYTES,
        compute_ns: kernels
            .iter()
            .map(|k| {
                stream(
                    k.matrices_read * MATRIX_BYTES
                        + (k.vectors_read + k.vectors_written) * VECTOR_BYTES,
                )
            })
            .collect(),
        weight: None,
    };
    let tasks = vec![
        // A; x, y, tmp. tmp = A x (reads A, x; writes tmp); y = Aᵀ tmp (reads A, tmp; writes y).
        app("ATAX", 1, 3, &[k(1, 1, 1), k(1, 1, 1)]),
        // A; r, s, p, q. q = A p (reads A, p; writes q); s = Aᵀ r (reads A, r; writes s).
        app("BICG", 1, 4, &[k(1, 1, 1), k(1, 1, 1)]),
        // A, B; x, y, tmp. One kernel: tmp = A x, y = α tmp + β B x (reads A, B, x; writes tmp, y).
        app("GESUMMV", 2, 3, &[k(2, 1, 2)]),
        // a; x1, x2, y1, y2. x1 += a y1 (reads a, y1, x1; writes x1); x2 += aᵀ y2 (likewise).
        app("MVT", 1, 4, &[k(1, 2, 1), k(1, 2, 1)]),
    ];
    Scenario {
        name: "fig6".into(),
        description:
            "Polybench/GPU ATAX, BICG, GESUMMV, MVT at N = 4096 (320 MiB + vectors), 240 MiB of memory".into(),
        system,
        tasks,
        paper: None,
    }
}

/// A size in a scenario file: a number of bytes, or text such as `"6GB"`, `"64MiB"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(i64),
    Float(f64),
    Text(String),
}

impl SizeValue {
    fn bytes(&self) -> Result<u64, String> {
        match self {
            SizeValue::Bytes(b) if *b > 0 => Ok(*b as u64),
            SizeValue::Bytes(b) => Err(format!("a size must be positive, not {b}")),
            SizeValue::Float(f) => Err(format!("a size in bytes must be a whole number, not {f}")),
            SizeValue::Text(t) => parse_bytes(t),
        }
    }
}

/// Parses `6GB`, `64 MiB`, `1.5G`, `4096` with oversub's one size syntax ([`oversub_base::parse_size`]: KB, MB,
/// GB, TB are powers of 1000; KiB, MiB, GiB, TiB and bare K, M, G, T powers of 1024); zero is refused.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    match oversub_base::parse_size(text) {
        Ok(0) => Err(format!("a size must be positive, not {text:?}")),
        Ok(bytes) => Ok(bytes),
        Err(e) => Err(format!(
            "{text:?} is not a size (try \"6GB\" or \"64MiB\"): {e}"
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileScenario {
    name: Option<String>,
    description: Option<String>,
    capacity: SizeValue,
    memory_mb_s: Option<f64>,
    ssd_read_mb_s: Option<f64>,
    ssd_write_mb_s: Option<f64>,
    sms: Option<i64>,
    tick_s: Option<f64>,
    #[serde(default, rename = "task")]
    tasks: Vec<FileTask>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTask {
    name: String,
    memory: SizeValue,
    compute_s: Option<Vec<f64>>,
    subtasks: Option<i64>,
    compute_range_s: Option<[f64; 2]>,
    compute: Option<String>,
    priority: Option<f64>,
}

/// Reads a scenario file (TOML). The random compute times of tasks given as a range are drawn from `seed`.
///
/// ```toml
/// name = "mine"
/// capacity = "18GB"          # memory; sizes are bytes or text: "6GB", "64MiB"
/// memory_mb_s = 20000        # optional: bandwidths in MB/s (10^6 bytes), default the paper's
/// ssd_read_mb_s = 492
/// ssd_write_mb_s = 445
/// sms = 4                    # optional: default the number of tasks
/// tick_s = 0.001             # optional
///
/// [[task]]
/// name = "a"
/// memory = "6GB"
/// compute_s = [1.0, 2.5, 0.3]          # one compute time per subtask, or:
///
/// [[task]]
/// name = "b"
/// memory = "6GB"
/// subtasks = 5
/// compute_range_s = [0.001, 12.0]      # uniform, or compute = "low" / "high" (the paper's rule)
/// priority = 2.0                       # optional, for --priorities given (larger is higher)
/// ```
pub fn from_file(path: &Path, seed: u64) -> Result<Scenario, SwapSimError> {
    let text = std::fs::read_to_string(path).map_err(|source| SwapSimError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    from_toml(&text, path, seed)
}

/// As [`from_file`], from the file's text (`path` names it in errors).
pub fn from_toml(text: &str, path: &Path, seed: u64) -> Result<Scenario, SwapSimError> {
    let bad = |location: String, reason: String| SwapSimError::BadFile {
        path: path.to_path_buf(),
        location,
        reason,
    };
    let file: FileScenario = toml::from_str(text).map_err(|e| {
        let location = e
            .span()
            .map(|s| {
                let before = text.get(..s.start).unwrap_or(text);
                format!("line {}", before.matches('\n').count() + 1)
            })
            .unwrap_or_else(|| "scenario".to_string());
        bad(location, e.message().to_string())
    })?;
    let top = || "scenario".to_string();
    let name = file.name.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into())
    });
    if file.tasks.is_empty() {
        return Err(bad(
            top(),
            "no tasks: add at least one [[task]] table".into(),
        ));
    }
    let capacity = file
        .capacity
        .bytes()
        .map_err(|e| bad("capacity".into(), e))?;
    let bandwidth = |field: &str, v: Option<f64>, default: u64| -> Result<u64, SwapSimError> {
        match v {
            None => Ok(default),
            Some(mb) if mb.is_finite() && mb > 0.0 && (mb * MB as f64) >= 1.0 => {
                Ok((mb * MB as f64).round() as u64)
            }
            Some(mb) => Err(bad(
                field.into(),
                format!("a bandwidth must be a positive number of MB/s, not {mb}"),
            )),
        }
    };
    let paper = System::paper(capacity, 1);
    let sms = match file.sms {
        None => file.tasks.len() as u32,
        Some(n) if n >= 1 && n <= i64::from(u32::MAX) => n as u32,
        Some(n) => {
            return Err(bad(
                "sms".into(),
                format!("the GPU needs at least one SM, not {n}"),
            ))
        }
    };
    let tick_ns = match file.tick_s {
        None => paper.tick_ns,
        Some(s) => match seconds_to_ns(s).filter(|&ns| ns > 0) {
            Some(ns) => ns,
            None => {
                return Err(bad(
                    "tick_s".into(),
                    format!("the tick must be a positive time, not {s}"),
                ))
            }
        },
    };
    let system = System {
        capacity_bytes: capacity,
        memory_bytes_per_s: bandwidth("memory_mb_s", file.memory_mb_s, paper.memory_bytes_per_s)?,
        ssd_read_bytes_per_s: bandwidth(
            "ssd_read_mb_s",
            file.ssd_read_mb_s,
            paper.ssd_read_bytes_per_s,
        )?,
        ssd_write_bytes_per_s: bandwidth(
            "ssd_write_mb_s",
            file.ssd_write_mb_s,
            paper.ssd_write_bytes_per_s,
        )?,
        sms,
        tick_ns,
        evictable: Default::default(),
        direct_access: Default::default(),
    };
    let mut rng = Rng::new(seed ^ name_hash(&name));
    let mut tasks = Vec::new();
    for t in &file.tasks {
        let at = || format!("task {:?}", t.name);
        let memory_bytes = t.memory.bytes().map_err(|e| bad(at(), e))?;
        let to_ns = |s: f64| {
            seconds_to_ns(s).ok_or_else(|| {
                bad(
                    at(),
                    format!("a compute time must be a non-negative number of seconds, not {s}"),
                )
            })
        };
        let given = [
            t.compute_s.is_some(),
            t.compute_range_s.is_some(),
            t.compute.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() != 1 {
            return Err(bad(
                at(),
                "give exactly one of compute_s (a list), compute_range_s = [lo, hi] or compute = \"low\"|\"high\"".into(),
            ));
        }
        let subtasks = || -> Result<usize, SwapSimError> {
            match t.subtasks {
                Some(n) if (1..=1_000_000).contains(&n) => Ok(n as usize),
                Some(n) => Err(bad(
                    at(),
                    format!("subtasks must be between 1 and 1000000, not {n}"),
                )),
                None => Err(bad(
                    at(),
                    "a compute range needs the number of subtasks (subtasks = N)".into(),
                )),
            }
        };
        let compute_ns = if let Some(list) = &t.compute_s {
            if list.is_empty() {
                return Err(bad(
                    at(),
                    "compute_s is empty: a task needs at least one subtask".into(),
                ));
            }
            if t.subtasks.is_some_and(|n| n != list.len() as i64) {
                return Err(bad(
                    at(),
                    format!(
                        "subtasks = {:?} but compute_s lists {}",
                        t.subtasks,
                        list.len()
                    ),
                ));
            }
            list.iter()
                .map(|&s| to_ns(s))
                .collect::<Result<Vec<_>, _>>()?
        } else if let Some([lo, hi]) = t.compute_range_s {
            let (lo, hi) = (to_ns(lo)?, to_ns(hi)?);
            if lo > hi {
                return Err(bad(
                    at(),
                    "compute_range_s must be [lo, hi] with lo <= hi".into(),
                ));
            }
            let n = subtasks()?;
            (0..n).map(|_| uniform(&mut rng, lo, hi)).collect()
        } else {
            let compute = match t.compute.as_deref().map(str::to_ascii_lowercase).as_deref() {
                Some("low") => Compute::Low,
                Some("high") => Compute::High,
                other => {
                    return Err(bad(
                        at(),
                        format!("compute must be \"low\" or \"high\", not {other:?}"),
                    ));
                }
            };
            paper_compute(&system, memory_bytes, subtasks()?, compute, &mut rng)
        };
        tasks.push(Task {
            name: t.name.clone(),
            memory_bytes,
            compute_ns,
            weight: t.priority,
        });
    }
    let scenario = Scenario {
        description: file
            .description
            .unwrap_or_else(|| format!("{} tasks from {}", tasks.len(), path.display())),
        name,
        system,
        tasks,
        paper: None,
    };
    scenario.validate()?;
    Ok(scenario)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn builtin_names_select() {
        let all: Vec<String> = BUILTIN.iter().map(|s| s.to_string()).collect();
        assert_eq!(builtin_names(&[], false, false), all);
        assert_eq!(builtin_names(&[], true, true), all);
        assert!(builtin_names(&[], false, true).is_empty());
        let named = vec![" FIG6 ".to_string(), "fig6".to_string(), "mine".to_string()];
        assert_eq!(builtin_names(&named, false, true), vec!["fig6", "mine"]);
        let with_all = vec!["mine".to_string(), "All".to_string()];
        let mut expect = all.clone();
        expect.push("mine".into());
        assert_eq!(builtin_names(&with_all, false, false), expect);
    }

    #[test]
    fn the_polybench_tasks_differ() {
        // Issue 38: ATAX, BICG and MVT were identical, so Alg. 1's ranking among them was a tie broken by queue
        // position. Their arrays and kernels (Polybench/GPU 1.0) now set them apart.
        let s = builtin("fig6", 1).unwrap();
        for (a, ta) in s.tasks.iter().enumerate() {
            for tb in s.tasks.iter().skip(a + 1) {
                assert!(
                    (ta.memory_bytes, &ta.compute_ns) != (tb.memory_bytes, &tb.compute_ns),
                    "{} and {} are the same task",
                    ta.name,
                    tb.name
                );
            }
        }
        let mem = |n: &str| s.tasks.iter().find(|t| t.name == n).unwrap().memory_bytes;
        // Five 64 MiB matrices: the paper's "320 MB", plus 14 vectors of 16 KiB.
        let total: u64 = s.tasks.iter().map(|t| t.memory_bytes).sum();
        assert_eq!(total, 320 * MIB + 14 * 16 * 1024);
        assert_eq!(mem("GESUMMV"), 128 * MIB + 3 * 16 * 1024);
        assert!(mem("BICG") > mem("ATAX"));
        // The synthetic tasks differ by their drawn compute times.
        let f = builtin("fig4a", 1).unwrap();
        assert_ne!(f.tasks[0].compute_ns, f.tasks[1].compute_ns);
    }

    #[test]
    fn compute_scales_and_bad_factors_are_refused() {
        let base = builtin("fig6", 1).unwrap();
        let mut s = base.clone();
        s.scale_compute(100.0).unwrap();
        for (a, b) in base.tasks.iter().zip(&s.tasks) {
            for (x, y) in a.compute_ns.iter().zip(&b.compute_ns) {
                assert_eq!(*y, x * 100);
            }
        }
        assert!(s.description.ends_with("(compute × 100)"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(s.clone().scale_compute(bad).is_err(), "{bad}");
        }
        // At a hundred times the emulated kernels, Baseline thrashes and Proposed cuts the bottom task's latency.
        let study = crate::swap::run_study(&s, &crate::swap::StudyOptions::default()).unwrap();
        let sum = study.summary(None);
        assert_eq!(sum.highest_proposed_s, Some(0.0));
        assert!(sum.vs_baseline_pct.unwrap() > 60.0, "{sum:?}");
        let base_study =
            crate::swap::run_study(&base, &crate::swap::StudyOptions::default()).unwrap();
        assert!(base_study.summary(None).vs_baseline_pct.unwrap() < 0.0);
    }

    #[test]
    fn builtins_match_the_paper() {
        for name in BUILTIN {
            let s = builtin(name, 1).unwrap();
            s.validate().unwrap();
            assert_eq!(s.tasks.len(), 4);
            assert!(s.paper.is_some());
        }
        let s = builtin("fig4a", 1).unwrap();
        assert_eq!(s.total_demand_bytes(), 24 * GB);
        assert_eq!(s.system.capacity_bytes, 18 * GB);
        let theta = s.system.thrashing_ns(6 * GB);
        assert!(s
            .tasks
            .iter()
            .flat_map(|t| &t.compute_ns)
            .all(|&c| (1_000_000..=theta).contains(&c)));
        let s = builtin("fig5b", 1).unwrap();
        assert_eq!(
            s.tasks.iter().map(Task::subtasks).collect::<Vec<_>>(),
            vec![5, 7, 9, 11]
        );
        assert!(s
            .tasks
            .iter()
            .flat_map(|t| &t.compute_ns)
            .all(|&c| (theta..=6 * theta).contains(&c)));
        let s = builtin("fig6", 1).unwrap();
        // The paper's "320 MB" is the five matrices; the 14 vectors add 224 KiB.
        assert_eq!(s.total_demand_bytes(), 320 * MIB + 14 * 16 * 1024);
        assert_eq!(s.system.capacity_bytes, 240 * MIB);
        assert_eq!(s.tasks[2].name, "GESUMMV");
        assert_eq!(s.tasks[2].memory_bytes, 128 * MIB + 3 * 16 * 1024);
    }

    #[test]
    fn seeds_are_deterministic_and_distinct() {
        assert_eq!(builtin("fig4a", 7).unwrap(), builtin("fig4a", 7).unwrap());
        assert_ne!(
            builtin("fig4a", 7).unwrap().tasks,
            builtin("fig4a", 8).unwrap().tasks
        );
        assert!(matches!(
            builtin("fig7", 1),
            Err(SwapSimError::UnknownScenario { .. })
        ));
    }

    #[test]
    fn a_file_scenario() {
        let text = r#"
            name = "mine"
            capacity = "10GB"
            sms = 2
            [[task]]
            name = "a"
            memory = "6GB"
            compute_s = [1.0, 2.0]
            priority = 1.0
            [[task]]
            name = "b"
            memory = 4000000000
            subtasks = 3
            compute_range_s = [0.5, 0.5]
            [[task]]
            name = "c"
            memory = "1GiB"
            subtasks = 2
            compute = "high"
        "#;
        let s = from_toml(text, Path::new("mine.toml"), 1).unwrap();
        assert_eq!(s.name, "mine");
        assert_eq!(s.system.sms, 2);
        assert_eq!(s.tasks[0].compute_ns, vec![1_000_000_000, 2_000_000_000]);
        assert_eq!(s.tasks[1].compute_ns, vec![500_000_000; 3]);
        assert_eq!(s.tasks[2].memory_bytes, 1 << 30);
        assert_eq!(s.tasks[0].weight, Some(1.0));
    }

    #[test]
    fn impossible_files_are_refused_clearly() {
        let err = |text: &str| {
            from_toml(text, Path::new("x.toml"), 1)
                .unwrap_err()
                .to_string()
        };
        let task = "[[task]]\nname = \"a\"\nmemory = \"1GB\"\ncompute_s = [1.0]\n";
        assert!(err("capacity = \"2GB\"\n").contains("no tasks"));
        assert!(err(&format!("capacity = 0\n{task}")).contains("positive"));
        assert!(err(&format!("capacity = -5\n{task}")).contains("positive"));
        assert!(err(&format!("capacity = \"2 parsecs\"\n{task}")).contains("unit"));
        assert!(
            err(&format!("capacity = \"2GB\"\nssd_read_mb_s = 0\n{task}")).contains("bandwidth")
        );
        assert!(err(&format!("capacity = \"2GB\"\nsms = 0\n{task}")).contains("SM"));
        let e = err(&format!("capacity = \"512MB\"\n{task}"));
        assert!(e.contains("more than the 512000000 bytes of memory"), "{e}");
        let e = err(
            "capacity = \"2GB\"\n[[task]]\nname = \"a\"\nmemory = \"1GB\"\ncompute_s = [-1.0]\n",
        );
        assert!(e.contains("non-negative"), "{e}");
        let e = err("capacity = \"2GB\"\n[[task]]\nname = \"a\"\nmemory = \"1GB\"\n");
        assert!(e.contains("exactly one of"), "{e}");
        let e = err("capacity = \"2GB\"\n[[task]]\nname = \"a\"\nmemory = \"1GB\"\ncompute_range_s = [1.0, 2.0]\n");
        assert!(e.contains("number of subtasks"), "{e}");
        let e = err("capacity = \"2GB\"\ncolour = 3\n");
        assert!(e.contains("line 2") && e.contains("colour"), "{e}");
        let e = err(&format!("capacity = \"2GB\"\n{task}{task}"));
        assert!(e.contains("two tasks are named"), "{e}");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("6GB").unwrap(), 6 * GB);
        assert_eq!(parse_bytes("64 MiB").unwrap(), 64 * MIB);
        assert_eq!(parse_bytes("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("-1GB").is_err());
        assert!(parse_bytes("lots").is_err());
    }
}
