//! What happened to the PREM task's CPU during a phase, from the kernel's counters: interrupts that landed on the
//! CPU (TLB shootdowns, other function-call IPIs, rescheduling IPIs, device interrupts), involuntary context
//! switches of the task's thread, and the hypervisor's steal time. Read at phase boundaries, outside the timed
//! phases; they are what an outlier is attributed to.

use serde::{Deserialize, Serialize};

/// Interrupts counted on one CPU (from `/proc/interrupts`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrqCounts {
    /// TLB shootdown IPIs (`TLB`): another CPU changed a memory map this CPU may have cached.
    pub tlb_shootdowns: u64,
    /// Other function-call IPIs (`CAL`).
    pub function_calls: u64,
    /// Rescheduling IPIs (`RES`).
    pub reschedules: u64,
    /// Local timer interrupts (`LOC`): the tick, expected in every phase.
    pub timer: u64,
    /// Numbered (device) interrupts.
    pub device: u64,
    /// Every other named interrupt line.
    pub other: u64,
}

impl IrqCounts {
    fn since(&self, earlier: &IrqCounts) -> IrqCounts {
        IrqCounts {
            tlb_shootdowns: self.tlb_shootdowns.saturating_sub(earlier.tlb_shootdowns),
            function_calls: self.function_calls.saturating_sub(earlier.function_calls),
            reschedules: self.reschedules.saturating_sub(earlier.reschedules),
            timer: self.timer.saturating_sub(earlier.timer),
            device: self.device.saturating_sub(earlier.device),
            other: self.other.saturating_sub(earlier.other),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    irqs: IrqCounts,
    involuntary_switches: u64,
    steal_ticks: u64,
}

/// What changed between two samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub irqs: IrqCounts,
    /// The thread was preempted this many times.
    pub involuntary_switches: u64,
    /// Steal time of the CPU (USER_HZ ticks): the hypervisor ran something else on it.
    pub steal_ticks: u64,
}

impl Sample {
    pub fn since(&self, earlier: &Sample) -> Delta {
        Delta {
            irqs: self.irqs.since(&earlier.irqs),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
            steal_ticks: self.steal_ticks.saturating_sub(earlier.steal_ticks),
        }
    }
}

/// Reads the counters of one CPU and the calling thread. Keeps its buffer between reads.
#[derive(Debug)]
pub struct Counters {
    cpu: usize,
    buf: String,
}

impl Counters {
    pub fn new(cpu: usize) -> Counters {
        Counters {
            cpu,
            buf: String::with_capacity(16 << 10),
        }
    }

    /// Now. Missing files (no procfs) read as zeros, so a phase is then attributed to nothing.
    pub fn sample(&mut self) -> Sample {
        let cpu = self.cpu;
        let irqs = self
            .read("/proc/interrupts")
            .map_or_else(IrqCounts::default, |t| parse_interrupts(t, cpu));
        let steal_ticks = self
            .read("/proc/stat")
            .and_then(|t| parse_steal(t, cpu))
            .unwrap_or(0);
        Sample {
            irqs,
            involuntary_switches: thread_involuntary_switches(),
            steal_ticks,
        }
    }

    fn read(&mut self, path: &str) -> Option<&str> {
        use std::io::Read;
        self.buf.clear();
        std::fs::File::open(path)
            .ok()?
            .read_to_string(&mut self.buf)
            .ok()?;
        Some(&self.buf)
    }
}

fn thread_involuntary_switches() -> u64 {
    // SAFETY: rusage is plain data; getrusage fills it and only writes inside it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    u64::try_from(ru.ru_nivcsw).unwrap_or(0)
}

/// The column of `cpu` in `/proc/interrupts` text.
pub fn parse_interrupts(text: &str, cpu: usize) -> IrqCounts {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return IrqCounts::default();
    };
    // The header names the online CPUs ("CPU0 CPU1 ..."); a row has one count per column.
    let Some(col) = header
        .split_whitespace()
        .position(|c| c == format!("CPU{cpu}"))
    else {
        return IrqCounts::default();
    };
    let mut c = IrqCounts::default();
    for line in lines {
        let mut f = line.split_whitespace();
        let Some(label) = f.next() else { continue };
        let label = label.trim_end_matches(':');
        let Some(n) = f.nth(col).and_then(|v| v.parse::<u64>().ok()) else {
            continue;
        };
        match label {
            "TLB" => c.tlb_shootdowns += n,
            "CAL" => c.function_calls += n,
            "RES" => c.reschedules += n,
            "LOC" => c.timer += n,
            l if l.bytes().all(|b| b.is_ascii_digit()) => c.device += n,
            _ => c.other += n,
        }
    }
    c
}

/// Steal ticks of `cpu` from `/proc/stat` ("cpuN user nice system idle iowait irq softirq steal ...").
pub fn parse_steal(text: &str, cpu: usize) -> Option<u64> {
    let name = format!("cpu{cpu}");
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?
        .split_whitespace()
        .nth(8)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 36:          7     675584 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
NMI:          0          0   Non-maskable interrupts
LOC:    1093581    1130816   Local timer interrupts
RES:     290713     204482   Rescheduling interrupts
CAL:     942284     812249   Function call interrupts
TLB:     424056     509550   TLB shootdowns
ERR:          0
";

    #[test]
    fn interrupts_are_read_per_cpu() {
        let c = parse_interrupts(INTERRUPTS, 1);
        assert_eq!(c.tlb_shootdowns, 509550);
        assert_eq!(c.function_calls, 812249);
        assert_eq!(c.reschedules, 204482);
        assert_eq!(c.timer, 1130816);
        assert_eq!(c.device, 675584);
        assert_eq!(c.other, 0);
        assert_eq!(parse_interrupts(INTERRUPTS, 0).device, 8);
        assert_eq!(parse_interrupts(INTERRUPTS, 5), IrqCounts::default());
        assert_eq!(parse_interrupts("", 0), IrqCounts::default());
    }

    #[test]
    fn steal_is_the_eighth_field() {
        let t = "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 10 20 30 40 50 60 70 80 90 100\ncpu1 1 1 1 1 1 1 1 5\n";
        assert_eq!(parse_steal(t, 0), Some(80));
        assert_eq!(parse_steal(t, 1), Some(5));
        assert_eq!(parse_steal(t, 2), None);
    }

    #[test]
    fn this_machine_reads() {
        let mut c = Counters::new(0);
        let a = c.sample();
        let b = c.sample();
        let d = b.since(&a);
        assert!(d.irqs.tlb_shootdowns < 1_000_000);
    }
}
