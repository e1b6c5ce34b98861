//! Your own work in the slots: the camera-style pipeline of `examples/pipeline.toml`, run twice — with the pool at
//! 80% of its buffers' total (oversub pages them ahead of need) and with enough memory — and checked bit for bit.
//!
//! ```sh
//! cargo run --release -p oversub-sched --example pipeline -- [--mode async|sync|demand] [--hyperperiods N] [--quick]
//! ```
//! `--quick` shrinks every buffer 16 times and the table 4 times (what the tests run).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use oversub_sched::{load_system, Mode, RunResult, Runtime, SlotContext, System, WorkResult};

type Digests = Mutex<BTreeMap<String, u64>>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut mode = Mode::Async;
    let mut hyperperiods = 6;
    let mut quick = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--mode" => {
                mode = match args.next().as_deref() {
                    Some("async") => Mode::Async,
                    Some("sync") => Mode::Sync,
                    Some("demand") => Mode::Demand,
                    other => return Err(format!("--mode async|sync|demand, not {other:?}").into()),
                }
            }
            "--hyperperiods" => {
                hyperperiods = args.next().ok_or("--hyperperiods N")?.parse()?;
            }
            "--quick" => quick = true,
            "-h" | "--help" => {
                println!("pipeline [--mode async|sync|demand] [--hyperperiods N] [--quick]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/pipeline.toml");
    let mut system = load_system(&path)?;
    if quick {
        system = shrink(&system, 16, 4.0);
    }
    let demand = system.demand_bytes();
    println!(
        "{}: {} components, {:.1} MiB of buffers, pool {:.1} MiB ({:.0}%), {mode} paging, {hyperperiods} hyperperiods",
        path.display(),
        system.components.len(),
        demand as f64 / (1 << 20) as f64,
        system.platform.capacity_bytes as f64 / (1 << 20) as f64,
        100.0 * system.platform.capacity_bytes as f64 / demand as f64,
    );

    let (constrained, digests_c) = run(&system, mode, hyperperiods)?;
    // The reference: the same work with room for every buffer, so nothing is paged during the table.
    let roomy = system.with_capacity(demand + (1 << 20));
    let (reference, digests_r) = run(&roomy, mode, hyperperiods)?;

    println!("\ncomponent   digest (80% pool)   digest (enough memory)  same");
    let mut all_same = true;
    for (name, d) in &digests_c {
        let r = digests_r.get(name).copied().unwrap_or_default();
        all_same &= *d == r;
        println!(
            "{name:<11} {d:#018x}  {r:#018x}      {}",
            if *d == r { "yes" } else { "NO" }
        );
    }
    for (label, r) in [("80% pool", &constrained), ("enough memory", &reference)] {
        println!(
            "{label:<14} deadline misses {} of {}, worst lateness {:.1} ms, {:.1} MiB paged",
            r.deadline_misses,
            r.counted_slots(),
            r.max_lateness_s * 1e3,
            r.bytes_paged as f64 / (1 << 20) as f64
        );
    }
    if !all_same {
        return Err("results differ between the constrained and the unconstrained run".into());
    }
    println!("results bit-identical");
    Ok(())
}

/// Every buffer `by` times smaller (at least a page) and the table `time` times shorter.
fn shrink(system: &System, by: u64, time: f64) -> System {
    let mut s = system.clone();
    for c in &mut s.components {
        for b in &mut c.buffers {
            if b.size_bytes >= 1 << 20 {
                b.size_bytes /= by;
            }
        }
        c.budget_s /= time;
        c.period_s /= time;
        c.work = c.work.inflated(1.0 / time);
    }
    s.table.hyperperiod_s /= time;
    for slot in &mut s.table.slots {
        slot.start_s /= time;
        slot.length_s /= time;
    }
    s.platform.capacity_bytes = (s.demand_bytes() as f64 * 0.8) as u64;
    s
}

/// Runs the pipeline; returns the run and each component's digest of its buffers after its last slot.
fn run(
    system: &System,
    mode: Mode,
    hyperperiods: usize,
) -> Result<(RunResult, BTreeMap<String, u64>), Box<dyn std::error::Error>> {
    let digests: Digests = Mutex::new(BTreeMap::new());
    let last = hyperperiods; // with one warm-up repetition, instances run 0..=hyperperiods
                             // After its last slot, each component keeps a digest of one of its buffers.
    let record = |slot: &SlotContext<'_>, buffer: &str| -> WorkResult {
        if slot.instance() == last {
            let digest = fnv(slot.bytes(buffer)?);
            if let Ok(mut d) = digests.lock() {
                d.insert(slot.component().to_string(), digest);
            }
        }
        Ok(())
    };
    let mut rt = Runtime::new(system.clone())
        .mode(mode)
        .hyperperiods(hyperperiods)
        .warmup(1)
        .at_min_period(mode != Mode::Async)
        .init("histogram", |slot| {
            // The read-only samples: written once here, before the run pages them out.
            let samples = slot.bytes_mut("samples")?;
            for (i, s) in samples.iter_mut().enumerate() {
                *s = (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8;
            }
            Ok(())
        })
        .init("detector", |slot| {
            let n = (slot.slice::<f32>("state")?.len()) as u64;
            for (i, w) in slot.slice_mut::<f32>("weights")?.iter_mut().enumerate() {
                let (r, c) = (i as u64 / n, i as u64 % n);
                *w = (((r * 31 + c * 17) % 97) as f32 - 48.0) / 97.0;
            }
            slot.slice_mut::<f32>("state")?.fill(1.0);
            Ok(())
        })
        .work("camera", |slot| -> WorkResult {
            let k = slot.instance() as u8;
            let frames = slot.bytes_mut("frames")?;
            for (i, px) in frames.iter_mut().enumerate() {
                *px = (i as u8)
                    .wrapping_mul(3)
                    .wrapping_add(k)
                    .wrapping_add(*px >> 1);
            }
            record(slot, "frames")
        })
        .work("blur", |slot| {
            let k = slot.instance() as f32;
            let img = slot.slice_mut::<f32>("image")?;
            img[0] += k;
            let mut prev = img[0];
            for i in 1..img.len() - 1 {
                let cur = img[i];
                img[i] = (prev + cur + img[i + 1]) / 3.0 + 0.25;
                prev = cur;
            }
            record(slot, "image")
        })
        .work("histogram", |slot| {
            let shift = slot.instance() as u8;
            let ([samples], [counts]) = slot.access(["samples"], ["counts"])?;
            let mut bins = [0u64; 256];
            for &s in samples {
                bins[s.wrapping_add(shift) as usize] += 1;
            }
            for (c, b) in counts.chunks_exact_mut(8).zip(bins) {
                let v = u64::from_le_bytes(c.try_into().unwrap_or_default()) + b;
                c.copy_from_slice(&v.to_le_bytes());
            }
            record(slot, "counts")
        })
        .work("detector", |slot| {
            let ([weights], [state]) = slot.access_slices::<f32, 1, 1>(["weights"], ["state"])?;
            let n = state.len();
            let next: Vec<f32> = weights
                .chunks_exact(n)
                .map(|row| {
                    row.iter()
                        .zip(state.iter())
                        .map(|(w, x)| w * x)
                        .sum::<f32>()
                        .max(0.0)
                })
                .collect();
            let norm = next.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            for (s, x) in state.iter_mut().zip(next) {
                *s = x / norm;
            }
            record(slot, "state")
        })
        .work("tracker", |slot| {
            let k = slot.instance() as f32;
            for (i, v) in slot.slice_mut::<f32>("field")?.iter_mut().enumerate() {
                *v = 0.5 * *v + k + (i % 7) as f32;
            }
            record(slot, "field")
        });
    let result = rt.run()?;
    drop(rt);
    let digests = digests.into_inner().map_err(|_| "a work panicked")?;
    Ok((result, digests))
}

/// A 64-bit FNV-1a digest of a buffer (examples avoid extra dependencies).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
