//! A PREM task in another process against a gate in this one, through the arbiter in /dev/shm: the child runs
//! load / compute / unload iterations, announcing each phase and recording when it announced it; the parent admits
//! chunks meanwhile. Every admitted chunk (from its admission to its promised end, start + T(Q)) must lie inside an
//! announced compute phase and touch no memory phase. The check is on the protocol's own clock readings, so it
//! holds however busy the machine is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use oversub_arbiter::{Arbiter, ArbiterConfig, Gate, MonotonicClock};

const CHILD_ENV: &str = "OVERSUB_ARBITER_TEST_PREM_CHILD";
const OUT_ENV: &str = "OVERSUB_ARBITER_TEST_PREM_OUT";
const ITERATIONS: usize = 40;
const MEM: Duration = Duration::from_micros(700);
const COM: Duration = Duration::from_millis(3);

/// Busy-waits (a PREM phase keeps its CPU) until `d` has passed since `from_ns`.
fn spin_until(from_ns: u64, d: Duration) {
    let until = from_ns + d.as_nanos() as u64;
    while MonotonicClock::now() < until {
        std::hint::spin_loop();
    }
}

/// Runs only as the child of `a_prem_task_in_another_process_never_shares_its_memory_phases`.
#[test]
fn prem_child() {
    let (Ok(path), Ok(out)) = (std::env::var(CHILD_ENV), std::env::var(OUT_ENV)) else {
        return;
    };
    let arbiter = Arbiter::open_at(&PathBuf::from(path)).unwrap();
    let task = arbiter.register_task().unwrap();
    let mut lines = String::new();
    // Lead-in: memory was unrestricted while the task was idle; a compute phase first lets admitted chunks end.
    let before = MonotonicClock::now();
    task.com(COM).unwrap();
    let after = MonotonicClock::now();
    spin_until(after, COM);
    lines.push_str(&format!("com {before} {after} {}\n", COM.as_nanos()));
    for _ in 0..ITERATIONS {
        for (kind, d) in [("mem", MEM), ("com", COM), ("mem", MEM)] {
            let before = MonotonicClock::now();
            if kind == "mem" {
                task.mem(d).unwrap();
            } else {
                task.com(d).unwrap();
            }
            let after = MonotonicClock::now();
            // The phase lasts at least what was announced for a compute phase (the server trusts that), and at most
            // that for a memory phase (here exactly as long).
            spin_until(after, d);
            lines.push_str(&format!("{kind} {before} {after} {}\n", d.as_nanos()));
        }
    }
    task.no_oper().unwrap();
    std::fs::File::create(out)
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
}

#[test]
fn a_prem_task_in_another_process_never_shares_its_memory_phases() {
    let name = format!("test-xprem-{}", std::process::id());
    let arbiter = Arbiter::create_shared(
        &name,
        ArbiterConfig {
            chunk_time: Some(Duration::from_micros(200)),
            ..ArbiterConfig::default()
        },
    )
    .unwrap();
    let path = arbiter.path().unwrap().to_path_buf();
    let out = std::env::temp_dir().join(format!("{name}.phases"));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "prem_child", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .env(OUT_ENV, &out)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let gate = Gate::new(arbiter.clone());
    let t_q = gate.chunk_time().as_nanos() as u64;
    let mut admitted = Vec::new();
    // Admit chunks until the child is done; each "chunk" is shorter than T(Q), as calibration promises.
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let a = gate.admit();
        admitted.push((a.start_ns, a.start_ns + a.chunks * t_q, a.grant_until_ns));
        spin_until(MonotonicClock::now(), Duration::from_micros(50));
    }
    assert!(child.wait().unwrap().success());
    let phases: Vec<(String, u64, u64, u64)> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            )
        })
        .collect();
    let _ = std::fs::remove_file(&out);
    assert_eq!(phases.len(), 1 + 3 * ITERATIONS);
    let first = phases[0].1;
    let last_end = phases.last().map(|p| p.2 + p.3).unwrap();
    let mut inside = 0;
    for &(start, end, until) in &admitted {
        for (kind, before, after, d) in &phases {
            if kind == "mem" {
                // A memory phase spans at most [announced, announced + d]; no admitted chunk may touch it.
                assert!(
                    end <= *before || start >= after + d,
                    "a chunk [{start}, {end}] overlaps a memory phase [{before}, {}]",
                    after + d
                );
            }
        }
        if let Some(until) = until {
            // Restricted: the chunk lies in one announced compute phase.
            assert!(end <= until);
            assert!(
                phases.iter().any(|(k, before, after, d)| k == "com"
                    && start >= *before
                    && end <= after + d),
                "a chunk [{start}, {end}] admitted under a grant lies in no compute phase"
            );
            inside += 1;
        } else {
            assert!(
                start < first || start >= last_end - 1 || end <= first,
                "unrestricted chunk during the task's phases"
            );
        }
    }
    assert!(inside > 0, "no chunk was admitted inside a compute phase");
}
