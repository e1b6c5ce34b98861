#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Tests of the TOML configuration parser.

use oversub_sched::config::{load_system, parse_system, ConfigError};
use oversub_sched::model::{DeviceKind, System, Work};
use proptest::prelude::*;

const PAPER: &str = include_str!("../../../examples/paper.toml");
const EXPLICIT: &str = include_str!("../../../examples/explicit.toml");

const GIB: u64 = 1 << 30;

fn ok(text: &str) -> System {
    match parse_system(text, "t.toml") {
        Ok(s) => s,
        Err(e) => panic!("unexpected error: {e}\n--- text ---\n{text}"),
    }
}

fn err(text: &str) -> ConfigError {
    match parse_system(text, "t.toml") {
        Ok(s) => panic!("expected an error, got {s:#?}\n--- text ---\n{text}"),
        Err(e) => e,
    }
}

/// 1-based number of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in text"))
        + 1
}

/// Asserts that `text` fails with a message containing `msg` at the line containing `marker`.
#[track_caller]
fn check(text: &str, msg: &str, marker: &str) {
    let e = err(text);
    assert!(
        e.message().contains(msg),
        "message {:?} does not contain {msg:?}",
        e.message()
    );
    assert_eq!(
        e.line(),
        Some(line_of(text, marker)),
        "wrong line for {e} (marker {marker:?})"
    );
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("t.toml:{}:", line_of(text, marker))),
        "{shown}"
    );
}

const PLATFORM: &str = "[platform]\ncapacity = \"4GiB\"\ncpus = 2\ngpus = 1\n";

/// A platform and two simple components on CPU 0 (A: 500/1500, B: 500/1500).
fn base() -> String {
    format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 500
period_ms = 1500

[[component]]
name = \"B\"
budget_ms = 500
period_ms = 1500
"
    )
}

fn find<'a>(s: &'a System, name: &str) -> (usize, &'a oversub_sched::model::Component) {
    s.components
        .iter()
        .enumerate()
        .find(|(_, c)| c.name == name)
        .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn paper_example_derives_the_papers_table() {
    let s = ok(PAPER);
    assert_eq!(s.platform.capacity_bytes, 4 * GIB);
    assert_eq!(s.platform.cpus, 2);
    assert_eq!(s.platform.gpus, 1);
    assert_eq!(s.platform.device, DeviceKind::Host);
    assert!(s.platform.stores.is_empty());
    assert_eq!(s.components.len(), 5);
    assert_eq!(s.demand_bytes(), 5 * GIB);
    for c in &s.components {
        assert_eq!(c.buffers.len(), 1);
        assert_eq!(c.buffers[0].name, "state");
        assert_eq!(c.buffers[0].size_bytes, GIB);
        assert!(!c.buffers[0].read_only);
        assert!(close(c.period_s, 1.5));
    }
    assert!(close(s.table.hyperperiod_s, 1.5));
    assert_eq!(s.table.slots.len(), 5);
    let expect = [
        ("A", 0.0, 0.5, 0, Some(0)),
        ("B", 0.5, 0.5, 0, Some(0)),
        ("C", 1.0, 0.5, 0, Some(0)),
        ("D", 0.0, 0.75, 1, None),
        ("E", 0.75, 0.75, 1, None),
    ];
    for (name, start, len, cpu, gpu) in expect {
        let (id, c) = find(&s, name);
        assert!(close(c.budget_s, len));
        let spin = if cpu == 0 { 0.3 } else { 0.45 };
        assert_eq!(c.work, Work::Spin { compute_s: spin });
        let slots: Vec<_> = s.table.slots.iter().filter(|x| x.component == id).collect();
        assert_eq!(slots.len(), 1, "{name}");
        assert!(close(slots[0].start_s, start), "{name}: {:?}", slots[0]);
        assert!(close(slots[0].length_s, len), "{name}");
        assert_eq!(slots[0].cpu, cpu, "{name}");
        assert_eq!(slots[0].gpu, gpu, "{name}");
    }
    // Sorted by start.
    assert!(s
        .table
        .slots
        .windows(2)
        .all(|w| w[0].start_s <= w[1].start_s));
}

#[test]
fn explicit_example_parses() {
    let s = ok(EXPLICIT);
    assert_eq!(s.platform.capacity_bytes, GIB);
    assert_eq!(s.platform.stores, [std::path::PathBuf::from("/tmp")]);
    assert_eq!(s.components.len(), 3);
    assert!(close(s.table.hyperperiod_s, 1.0));
    assert_eq!(s.table.slots.len(), 4);
    let (sensor, sc) = find(&s, "sensor");
    let (fusion, fc) = find(&s, "fusion");
    let (logger, lc) = find(&s, "logger");
    assert_eq!(sc.work, Work::Sleep { compute_s: 0.04 });
    assert_eq!(fc.cpus, vec![0, 1]);
    assert_eq!(fc.gpus, vec![0]);
    assert_eq!(fc.buffers.len(), 2);
    assert!(fc.buffers[0].read_only);
    assert_eq!(fc.buffers[1].size_bytes, 256 << 20);
    assert!(lc.buffers.is_empty());
    assert_eq!(lc.work, Work::Spin { compute_s: 0.1 });
    let t: Vec<_> = s
        .table
        .slots
        .iter()
        .map(|x| (x.component, x.start_s, x.length_s, x.cpu, x.gpu))
        .collect();
    let want = vec![
        (sensor, 0.0, 0.1, 0, None),
        (fusion, 0.1, 0.3, 1, Some(0)),
        (logger, 0.2, 0.15, 0, None),
        (sensor, 0.5, 0.1, 0, None),
    ];
    assert_eq!(t.len(), want.len());
    for (got, want) in t.iter().zip(&want) {
        assert_eq!(got.0, want.0);
        assert!(
            close(got.1, want.1) && close(got.2, want.2),
            "{got:?} {want:?}"
        );
        assert_eq!((got.3, got.4), (want.3, want.4));
    }
}

#[test]
fn load_system_reads_files_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("demo.toml");
    std::fs::write(&p, PAPER).unwrap();
    assert_eq!(load_system(&p).unwrap(), ok(PAPER));

    std::fs::write(&p, format!("{}\nbogus = 1\n", base())).unwrap();
    let e = load_system(&p).unwrap_err();
    let shown = e.to_string();
    assert!(shown.starts_with(&format!("{}:", p.display())), "{shown}");
    assert!(shown.contains("unknown field `bogus`"), "{shown}");

    let missing = dir.path().join("missing.toml");
    let e = load_system(&missing).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }), "{e:?}");
    assert!(e.to_string().starts_with("reading "), "{e}");
    assert_eq!(e.line(), None);
}

#[test]
fn defaults() {
    let s = ok(
        "[platform]\ncapacity = 1048576\n\n[[component]]\nname = \"A\"\nbudget_ms = 10\nperiod_ms = 20\n",
    );
    assert_eq!(s.platform.capacity_bytes, 1 << 20);
    assert_eq!(s.platform.gpus, 1);
    assert_eq!(
        s.platform.cpus,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let c = &s.components[0];
    assert_eq!(c.cpus, vec![0]);
    assert!(c.gpus.is_empty());
    assert!(c.buffers.is_empty());
    // No work table: the caller's own code, planned at the whole budget.
    assert_eq!(c.work, Work::User { wcet_s: 0.01 });
    assert!(close(s.table.hyperperiod_s, 0.02));
    assert_eq!(s.table.slots.len(), 1);
}

#[test]
fn derived_table_with_harmonic_periods() {
    // A: 100/500 and B: 200/1000 on CPU 0 -> hyperperiod 1000: A at 0 and 500, B at 100.
    let s = ok(&format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 100
period_ms = 500
[[component]]
name = \"B\"
budget_ms = 200
period_ms = 1000
"
    ));
    assert!(close(s.table.hyperperiod_s, 1.0));
    let t: Vec<_> = s
        .table
        .slots
        .iter()
        .map(|x| (x.component, (x.start_s * 1000.0).round() as u64))
        .collect();
    assert_eq!(t, vec![(0, 0), (1, 100), (0, 500)]);
}

#[test]
fn derived_table_with_fractional_times_and_given_hyperperiod() {
    let s = ok(&format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 0.25
period_ms = 1.5
[schedule]
hyperperiod_ms = 3
"
    ));
    assert!(close(s.table.hyperperiod_s, 0.003));
    assert_eq!(s.table.slots.len(), 2);
    assert!(close(s.table.slots[1].start_s, 0.0015));
}

// --------------------------------------------------------------------------------------------------------------
// Errors, each with its line.

#[test]
fn budget_above_period() {
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 600 # here
period_ms = 500
"
    );
    check(
        &t,
        "budget 600 ms of A is above its period 500 ms",
        "# here",
    );
}

#[test]
fn overlapping_slots_on_a_cpu() {
    let t = format!(
        "{}
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]]
component = \"B\"
start_ms = 1000
[[schedule.slot]] # slot 2
component = \"A\"
start_ms = 0
[[schedule.slot]] # slot 3
component = \"B\"
start_ms = 400
",
        base()
    );
    check(
        &t,
        "slot 3 (B, 400-900 ms) overlaps slot 2 (A, 0-500 ms) on CPU 0",
        "# slot 3",
    );
    let e = err(&t);
    assert_eq!(e.column(), Some(1));
}

#[test]
fn overlap_reported_against_the_later_declared_slot() {
    // Slot 2 is earlier in time but declared later: it is the offender.
    let t = format!(
        "{}
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]]
component = \"A\"
start_ms = 400
[[schedule.slot]] # slot 2
component = \"B\"
start_ms = 0
",
        base()
    );
    check(
        &t,
        "slot 2 (B, 0-500 ms) overlaps slot 1 (A, 400-900 ms) on CPU 0",
        "# slot 2",
    );
}

#[test]
fn overlapping_slots_on_a_gpu() {
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 500
period_ms = 1000
gpus = [0]
[[component]]
name = \"B\"
budget_ms = 500
period_ms = 1000
cpus = [1]
gpus = [0]
[schedule]
hyperperiod_ms = 1000
[[schedule.slot]]
component = \"A\"
start_ms = 0
[[schedule.slot]] # B
component = \"B\"
start_ms = 250
"
    );
    check(
        &t,
        "slot 2 (B, 250-750 ms) overlaps slot 1 (A, 0-500 ms) on GPU 0",
        "# B",
    );
    // Different CPUs, one GPU: fine when they do not overlap in time.
    ok(&t.replace("start_ms = 250", "start_ms = 500"));
}

#[test]
fn buffers_above_capacity() {
    let t = format!(
        "{PLATFORM}
[[component]] # A
name = \"A\"
budget_ms = 500
period_ms = 1500
[[component.buffer]]
name = \"x\"
size = \"3GiB\"
[[component.buffer]]
name = \"y\"
size = \"2GiB\"
"
    );
    check(
        &t,
        "buffers of A need 5.00 GiB, more than the pool's 4.00 GiB capacity",
        "# A",
    );
}

#[test]
fn slot_on_missing_cpu_or_gpu() {
    let slot = |extra: &str| {
        format!(
            "{}
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]]
component = \"A\"
start_ms = 0
{extra} # bad
[[schedule.slot]]
component = \"B\"
start_ms = 500
",
            base()
        )
    };
    check(
        &slot("cpu = 2"),
        "slot 1 is on CPU 2, which does not exist: the platform has 2 CPUs (0-1)",
        "# bad",
    );
    check(
        &slot("cpu = 1"),
        "slot 1 is on CPU 1, which is not among the CPUs of A",
        "# bad",
    );
    check(
        &slot("gpu = 1"),
        "slot 1 uses GPU 1, which does not exist: the platform has 1 GPU (0)",
        "# bad",
    );
    check(
        &slot("gpu = 0"),
        "slot 1 uses GPU 0, which is not among the GPUs of A",
        "# bad",
    );
}

#[test]
fn component_on_missing_cpu_or_gpu() {
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 500
period_ms = 1500
cpus = [0,
  3] # bad
"
    );
    check(
        &t,
        "CPU 3 of A does not exist: the platform has 2 CPUs (0-1)",
        "# bad",
    );
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 500
period_ms = 1500
gpus = [1] # bad
"
    );
    check(
        &t,
        "GPU 1 of A does not exist: the platform has 1 GPU (0)",
        "# bad",
    );
    let t = t.replace("gpus = 1\n", "gpus = 0\n");
    check(&t, "the platform has no GPUs", "# bad");
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 500
period_ms = 1500
cpus = [] # bad
"
    );
    check(&t, "cpus of A must list at least one CPU", "# bad");
    let t = t.replace("cpus = []", "cpus = [1, 1]");
    check(&t, "CPU 1 is listed twice", "# bad");
}

#[test]
fn unknown_keys() {
    check(
        &format!("{}\nbogus = 1 # bad\n", base()).replacen(
            "[platform]",
            "bogus = 1 # bad\n[platform]",
            1,
        ),
        "unknown field `bogus`",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = 2", "cpus = 2\ncolour = \"red\" # bad", 1),
        "unknown field `colour`",
        "# bad",
    );
    check(
        &PAPER.replacen("budget_ms = 500", "budget_ms = 500\nbugdet = 1 # bad", 1),
        "unknown field `bugdet`",
        "# bad",
    );
    check(
        &PAPER.replacen("read_only = false", "readonly = false # bad", 1),
        "unknown field `readonly`",
        "# bad",
    );
    check(
        &PAPER.replacen(
            "work = { spin_ms = 300 }",
            "work = { spin_ms = 300, x = 1 } # bad",
            1,
        ),
        "unknown field `x`",
        "# bad",
    );
    let t = format!(
        "{}
[schedule]
hyperperiod_ms = 1500
period = 3 # bad
",
        base()
    );
    check(&t, "unknown field `period`", "# bad");
    let t = format!(
        "{}
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]]
component = \"A\"
start_ms = 0
core = 0 # bad
",
        base()
    );
    check(&t, "unknown field `core`", "# bad");
}

#[test]
fn unknown_component_in_slot() {
    let t = format!(
        "{}
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]]
component = \"Z\" # bad
start_ms = 0
",
        base()
    );
    check(
        &t,
        "slot 1 names unknown component \"Z\" (components: A, B)",
        "# bad",
    );
}

#[test]
fn duplicate_names() {
    let t = base().replacen("name = \"B\"", "name = \"A\" # dup", 1);
    check(
        &t,
        "duplicate component name \"A\" (first declared on line 7)",
        "# dup",
    );
    let t = PAPER.replacen(
        "size = \"1GiB\"\nread_only = false",
        "size = \"1GiB\"\n[[component.buffer]]\nname = \"state\" # dup\nsize = 1",
        1,
    );
    check(
        &t,
        "duplicate buffer name \"state\" in component A",
        "# dup",
    );
    // The same buffer name in different components is fine (the paper example does it).
    ok(PAPER);
}

#[test]
fn zero_sizes_and_bad_sizes() {
    check(
        &PAPER.replacen("capacity = \"4GiB\"", "capacity = 0 # bad", 1),
        "platform capacity must be > 0",
        "# bad",
    );
    check(
        &PAPER.replacen("size = \"1GiB\"", "size = \"0MiB\" # bad", 1),
        "buffer state of A has size 0",
        "# bad",
    );
    check(
        &PAPER.replacen("size = \"1GiB\"", "size = -5 # bad", 1),
        "size -5 is negative",
        "# bad",
    );
    check(
        &PAPER.replacen("size = \"1GiB\"", "size = \"12 parsecs\" # bad", 1),
        "unknown unit",
        "# bad",
    );
    check(
        &PAPER.replacen("size = \"1GiB\"", "size = 1.5 # bad", 1),
        "size must be a size in quotes or a whole number of bytes, e.g. size = \"256MiB\", not 1.5",
        "# bad",
    );
}

#[test]
fn zero_or_negative_times() {
    for (from, to, msg) in [
        (
            "budget_ms = 500",
            "budget_ms = 0 # bad",
            "budget_ms of A must be",
        ),
        (
            "budget_ms = 500",
            "budget_ms = -1 # bad",
            "budget_ms of A must be",
        ),
        (
            "budget_ms = 500",
            "budget_ms = nan # bad",
            "budget_ms of A must be",
        ),
        (
            "period_ms = 1500",
            "period_ms = 0 # bad",
            "period_ms of A must be",
        ),
        (
            "period_ms = 1500",
            "period_ms = inf # bad",
            "period_ms of A must be",
        ),
        (
            "work = { spin_ms = 300 }",
            "work = { spin_ms = 0 } # bad",
            "spin_ms of A must be",
        ),
    ] {
        check(&PAPER.replacen(from, to, 1), msg, "# bad");
    }
    let table = |slot: &str, hyper: &str| {
        format!(
            "{}
[schedule]
hyperperiod_ms = {hyper}
[[schedule.slot]]
component = \"A\"
{slot}
[[schedule.slot]]
component = \"B\"
start_ms = 500
",
            base()
        )
    };
    check(
        &table("start_ms = -1 # bad", "1500"),
        "start_ms of slot 1 must be a finite number of milliseconds >= 0",
        "# bad",
    );
    check(
        &table("start_ms = 0\nlength_ms = 0 # bad", "1500"),
        "length_ms of slot 1 must be",
        "# bad",
    );
    check(
        &table("start_ms = 0", "0 # bad"),
        "hyperperiod_ms must be",
        "# bad",
    );
}

#[test]
fn work_longer_than_budget_or_ambiguous() {
    check(
        &PAPER.replacen(
            "work = { spin_ms = 300 }",
            "work = { sleep_ms = 501 } # bad",
            1,
        ),
        "work of A (sleep 501 ms) is longer than its budget 500 ms",
        "# bad",
    );
    check(
        &PAPER.replacen(
            "work = { spin_ms = 300 }",
            "work = { spin_ms = 1, sleep_ms = 1 } # bad",
            1,
        ),
        "exactly one of spin_ms, sleep_ms (built-in works) or wcet_ms",
        "# bad",
    );
    check(
        &PAPER.replacen(
            "work = { spin_ms = 300 }",
            "work = { wcet_ms = 600 } # bad",
            1,
        ),
        "work of A (wcet 600 ms) is longer than its budget 500 ms",
        "# bad",
    );
    check(
        &PAPER.replacen("work = { spin_ms = 300 }", "work = {} # bad", 1),
        "exactly one of spin_ms, sleep_ms (built-in works) or wcet_ms",
        "# bad",
    );
}

#[test]
fn slot_after_hyperperiod() {
    let t = format!(
        "{}
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]]
component = \"A\"
start_ms = 0
[[schedule.slot]] # bad
component = \"B\"
start_ms = 1200
",
        base()
    );
    check(
        &t,
        "slot 2 (B, 1200-1700 ms) ends after the hyperperiod 1500 ms",
        "# bad",
    );
}

#[test]
fn missing_required_keys() {
    check(
        &PAPER.replacen("capacity = \"4GiB\"", "# no capacity", 1),
        "missing field `capacity`",
        "[platform]",
    );
    let t = base().replacen("budget_ms = 500\n", "", 1);
    let e = err(&t);
    assert!(e.message().contains("missing field `budget_ms`"), "{e}");
    assert_eq!(e.line(), Some(6), "{e}");
    let t = format!(
        "{}
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]] # bad
component = \"A\"
",
        base()
    );
    check(&t, "missing field `start_ms`", "# bad");
    let t = format!(
        "{}
[schedule] # bad
[[schedule.slot]]
component = \"A\"
start_ms = 0
",
        base()
    );
    check(&t, "needs hyperperiod_ms", "# bad");
    // No [platform] at all: toml reports it at the start.
    let e = err("[[component]]\nname = \"A\"\nbudget_ms = 1\nperiod_ms = 1\n");
    assert!(e.message().contains("missing field `platform`"), "{e}");
    assert_eq!(e.line(), Some(1));
    // No component.
    let e = err(PLATFORM);
    assert!(e.message().contains("declares no component"), "{e}");
    assert_eq!(e.line(), None);
    assert_eq!(e.to_string(), format!("t.toml: {}", e.message()));
}

#[test]
fn wrong_types_and_values() {
    check(
        &PAPER.replacen("cpus = 2", "cpus = \"two\" # bad", 1),
        "cpus must be a whole number, e.g. cpus = 2, not the string \"two\"",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = 2", "cpus = 0 # bad", 1),
        "platform cpus must be > 0",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = 2", "cpus = 2\ndevice = \"cuda\" # bad", 1),
        "unknown variant `cuda`, expected `host`",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = [1]", "cpus = [-1] # bad", 1),
        "the items of cpus must each be a whole number, e.g. cpus = [0], not -1",
        "# bad",
    );
    check(
        &PAPER.replacen("name = \"A\"", "name = \"\" # bad", 1),
        "component name must not be empty",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = 2", "cpus = 2\nstore = \"\" # bad", 1),
        "platform store must not be empty",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = 2", "cpus = 2\nstore = [] # bad", 1),
        "platform store must not be empty",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = 2", "cpus = 2\nstore = 3 # bad", 1),
        "store must be a path or a list of paths, e.g. store = \"/mnt/nvme\"",
        "# bad",
    );
}

/// A value of the wrong type names its key, says what the key takes in words with an example, and keeps the
/// position of the value.
#[test]
fn wrong_types_are_said_in_words() {
    let t = PAPER.replacen("budget_ms = 500", "budget_ms = \"100\" # bad", 1);
    check(
        &t,
        "budget_ms must be a number of milliseconds, e.g. budget_ms = 100, not the string \"100\"",
        "# bad",
    );
    let e = err(&t);
    assert_eq!(e.column(), Some("budget_ms = ".len() + 1), "{e}");
    check(
        &PAPER.replacen("budget_ms = 500", "budget_ms = true # bad", 1),
        "budget_ms must be a number of milliseconds, e.g. budget_ms = 100, not true",
        "# bad",
    );
    check(
        &PAPER.replacen("spin_ms = 300", "spin_ms = \"3x\"", 1),
        "spin_ms must be a number of milliseconds, e.g. spin_ms = 100, not the string \"3x\"",
        "spin_ms = \"3x\"",
    );
    check(
        &PAPER.replacen("read_only = false", "read_only = \"no\" # bad", 1),
        "read_only must be true or false, e.g. read_only = true, not the string \"no\"",
        "# bad",
    );
    check(
        &PAPER.replacen("cpus = [1]", "cpus = 1 # bad", 1),
        "cpus must be a list, e.g. cpus = [0, 1], not 1",
        "# bad",
    );
    check(
        &PAPER.replacen("name = \"A\"", "name = 5 # bad", 1),
        "name must be a string in quotes, e.g. name = \"A\", not 5",
        "# bad",
    );
    check(
        &PAPER.replacen("capacity = \"4GiB\"", "capacity = true # bad", 1),
        "capacity must be a size in quotes or a whole number of bytes, e.g. capacity = \"256MiB\", not true",
        "# bad",
    );
    // Sizes as strings stay sizes.
    let s = ok(&PAPER.replacen("capacity = \"4GiB\"", "capacity = \"4096MiB\"", 1));
    assert_eq!(s.platform.capacity_bytes, 4 * GIB);
}

#[test]
fn a_list_of_stores_stripes_the_store() {
    let s = ok(&PAPER.replacen("cpus = 2", "cpus = 2\nstore = [\"/mnt/a\", \"/mnt/b\"]", 1));
    assert_eq!(
        s.platform.stores,
        [
            std::path::PathBuf::from("/mnt/a"),
            std::path::PathBuf::from("/mnt/b")
        ]
    );
}

#[test]
fn toml_syntax_errors_have_lines() {
    let t = PAPER.replacen("[[component]]", "[[component] # bad", 1);
    let e = err(&t);
    assert_eq!(e.line(), Some(line_of(&t, "# bad")), "{e}");
    assert!(e.message().contains("unclosed array table"), "{e}");
}

#[test]
fn component_without_slot() {
    let t = format!(
        "{}
[[component]] # E
name = \"E\"
budget_ms = 100
period_ms = 1500
[schedule]
hyperperiod_ms = 1500
[[schedule.slot]]
component = \"A\"
start_ms = 0
[[schedule.slot]]
component = \"B\"
start_ms = 500
",
        base()
    );
    check(&t, "component E has no slot in the schedule", "# E");
}

#[test]
fn derived_budgets_that_do_not_fit() {
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 500
period_ms = 1000
[[component]]
name = \"B\"
budget_ms = 400
period_ms = 1000
[[component]] # C
name = \"C\"
budget_ms = 200
period_ms = 1000
cpus = [0, 1]
"
    );
    let e = err(&t);
    assert_eq!(e.line(), Some(line_of(&t, "# C")), "{e}");
    assert!(
        e.message()
            .contains("the budgets on CPU 0 do not fit in the derived table"),
        "{e}"
    );
    assert!(
        e.message().contains("explicit [[schedule.slot]] table"),
        "{e}"
    );
    // C first on CPU 1 fits.
    ok(&t.replace("cpus = [0, 1]", "cpus = [1, 0]"));

    // Different periods overlap: A 300/500 at 0, 500; B 300/1000 at 300-600 overlaps A's second job.
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 300
period_ms = 500
[[component]] # B
name = \"B\"
budget_ms = 300
period_ms = 1000
"
    );
    check(
        &t,
        "the budgets on CPU 0 do not fit in the derived table: job 1 of B (300-600 ms) overlaps job 2 of A (500-800 ms)",
        "# B",
    );

    // Same GPU on two CPUs.
    let t = format!(
        "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 300
period_ms = 1000
gpus = [0]
[[component]] # B
name = \"B\"
budget_ms = 300
period_ms = 1000
cpus = [1]
gpus = [0]
"
    );
    check(&t, "the budgets on GPU 0 do not fit", "# B");
}

#[test]
fn derived_periods_must_be_whole_microseconds_and_hyperperiod_bounded() {
    check(
        &format!(
            "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 0.1
period_ms = 1.0005 # bad
"
        ),
        "not a whole number of microseconds",
        "# bad",
    );
    check(
        &format!(
            "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 0.001
period_ms = 0.001
[[component]]
name = \"B\"
budget_ms = 0.001
period_ms = 1000.003 # bad
cpus = [1]
"
        ),
        "the derived table would have 1000004 slots (more than 100000)",
        "# bad",
    );
    check(
        &format!(
            "{PLATFORM}
[[component]]
name = \"A\"
budget_ms = 1
period_ms = 10
[schedule]
hyperperiod_ms = 15 # bad
"
        ),
        "hyperperiod 15 ms is not a multiple of every period",
        "# bad",
    );
}

#[test]
fn error_display_has_origin_line_and_column() {
    let t = PAPER.replacen("budget_ms = 500", "budget_ms = 2000", 1);
    let e = parse_system(&t, "demo.toml").unwrap_err();
    let line = line_of(&t, "budget_ms = 2000");
    assert_eq!(
        e.to_string(),
        format!("demo.toml:{line}:13: budget 2000 ms of A is above its period 1500 ms")
    );
}

// --------------------------------------------------------------------------------------------------------------
// Robustness.

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize),
    Insert(usize, char),
    Replace(usize, char),
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        match *e {
            Edit::Delete(i) if !chars.is_empty() => {
                chars.remove(i % chars.len());
            }
            Edit::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
            Edit::Replace(i, c) if !chars.is_empty() => {
                let n = chars.len();
                chars[i % n] = c;
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

fn edit() -> impl Strategy<Value = Edit> {
    let ch = prop_oneof![
        prop::sample::select(vec![
            '0', '1', '9', '-', '.', '=', '"', '[', ']', '{', '}', ',', '\n', ' ', '#', 'e', 'n',
            'i', 'A', '_', '\'', 'é'
        ]),
        any::<char>(),
    ];
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), ch.clone()).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<usize>(), ch).prop_map(|(i, c)| Edit::Replace(i, c)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_text(s in any::<String>()) {
        let _ = parse_system(&s, "x.toml");
    }

    #[test]
    fn never_panics_on_tomlish_text(s in "[\\[\\]a-z_=\"0-9 .\n{},#-]{0,200}") {
        let _ = parse_system(&s, "x.toml");
    }

    #[test]
    fn never_panics_on_mutated_paper_example(edits in prop::collection::vec(edit(), 1..6)) {
        let t = apply(PAPER, &edits);
        match parse_system(&t, "x.toml") {
            Ok(s) => {
                // Whatever parses is consistent.
                prop_assert!(!s.components.is_empty());
                for slot in &s.table.slots {
                    prop_assert!(slot.component < s.components.len());
                    prop_assert!(slot.cpu < s.platform.cpus);
                    prop_assert!(slot.end_s() <= s.table.hyperperiod_s + 1e-9);
                }
            }
            Err(e) => {
                if let Some(l) = e.line() {
                    prop_assert!(l >= 1 && l <= t.lines().count() + 1, "{}", e);
                }
            }
        }
    }

    #[test]
    fn never_panics_on_mutated_explicit_example(edits in prop::collection::vec(edit(), 1..6)) {
        let _ = parse_system(&apply(EXPLICIT, &edits), "x.toml");
    }
}
